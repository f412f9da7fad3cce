//! The `report` fuzz target's corpus as an ordinary test: every file under
//! `fuzz/corpus/report/` and `fuzz/regressions/report/` passes the check the libFuzzer
//! target runs (`fuzz/src/report_check.rs`, included here by path), so a crash the fuzzer
//! once found stays fixed where cargo-fuzz is not installed; and every seed is a report the
//! reader accepts, so that fuzzing starts from inputs that reach the drawing.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/report_check.rs"]
#[allow(dead_code, missing_docs)]
mod report_check;

fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(kind)
        .join("report")
}

fn files(kind: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir(kind)) else {
        return Vec::new();
    };
    rd.map(|e| e.expect("dir entry").path()).collect()
}

#[test]
fn every_report_corpus_and_regression_input_passes_the_fuzz_check() {
    let inputs: Vec<PathBuf> = files("corpus")
        .into_iter()
        .chain(files("regressions"))
        .collect();
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read input");
        let result = std::panic::catch_unwind(|| report_check::report(&bytes));
        assert!(
            result.is_ok(),
            "report check panicked on {}",
            path.display()
        );
    }
    assert!(
        inputs.len() >= 4,
        "only {} report inputs under fuzz/",
        inputs.len()
    );
}

#[test]
fn every_report_seed_is_a_report_the_reader_accepts() {
    let seeds: Vec<PathBuf> = files("corpus")
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
        })
        .collect();
    assert!(seeds.len() >= 4, "only {} seeds", seeds.len());
    for path in seeds {
        let bytes = std::fs::read(&path).expect("read seed");
        if let Err(e) = pushreport::from_json(&bytes, &report_check::limits()) {
            panic!("{} is refused: {e}", path.display());
        }
    }
}

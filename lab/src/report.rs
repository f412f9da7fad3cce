//! The push report as `teesfs push --report` writes it: the node library's
//! [`PushReport`], read from the file the lab's push wrote. Its picture is the node
//! report crate's ([`pushreport`], what `teesfs report` draws), so the lab's launch
//! reports and a real push's look the same; nothing is drawn here.

use std::path::Path;

pub use teesfs_node::report::PushReport;

use crate::error::{LabError, Result};

/// Reads a report file: at most the report's size bound ([`teesfs_node::report::Limits`]),
/// then every field checked as `teesfs report` checks it, so a runaway or damaged report
/// is named instead of filling memory or the drawing.
pub fn load(path: &Path) -> Result<PushReport> {
    use std::io::Read;
    let limits = teesfs_node::report::Limits::default();
    let file = std::fs::File::open(path).map_err(LabError::io(path))?;
    let mut bytes = Vec::new();
    file.take(limits.max_input + 1)
        .read_to_end(&mut bytes)
        .map_err(LabError::io(path))?;
    teesfs_node::report::from_json(&bytes, &limits).map_err(|e| LabError::Parse {
        what: path.display().to_string(),
        detail: e.to_string(),
    })
}

/// The report's picture with the application's start on each node (`(host, seconds)`)
/// marked: [`pushreport::svg`] of the report with `app_start_s` filled in.
///
/// The drawing only writes into a string, so it does not fail in practice; should plotters
/// refuse anyway, the picture says why instead of leaving the report without one.
pub fn svg(rep: &PushReport, app_started: &[(String, f64)], title: &str) -> String {
    let mut rep = rep.clone();
    for n in &mut rep.per_node {
        if let Some((_, t)) = app_started.iter().find(|(h, _)| *h == n.host) {
            n.app_start_s = Some(*t);
        }
    }
    pushreport::svg(&rep, title).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot draw the push report");
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"40\"><text x=\"10\" \
             y=\"20\">{}</text></svg>",
            crate::demo::esc(&format!("{title}: {e}"))
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_from_push_loads_and_draws_with_the_application_starts() {
        let json = r#"{"version":1,"job":"00000000000004d2","index":"ab","strategy":"topo",
            "root":"login","nodes":2,"urgent_chunks":1,"chunks":2,"urgent_bytes":1,
            "total_bytes":2,"urgent_complete_s":0.5,"all_complete_s":0.9,
            "per_node":[{"host":"n01","parent":"login","urgent_s":0.4,"all_s":0.8,"group":0},
                        {"host":"n02","parent":"n01","urgent_s":0.5,"all_s":0.9,"group":0}],
            "edges":[],"uplinks":[{"group":0,"proxy":"n01","in_bytes":2,"out_bytes":0}],
            "failures":[]}"#;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("r.json");
        std::fs::write(&p, json).expect("write");
        let rep = load(&p).expect("a push report");
        assert_eq!(rep.predicted_uplink_in(), 2);
        let s = svg(&rep, &[("n02".into(), 1.2)], "demo");
        assert!(s.contains("application started"), "the start is not marked");
        assert!(s.contains("n01") && s.contains("n02"));
        let e = load(&dir.path().join("missing.json")).expect_err("no file");
        assert!(e.to_string().contains("missing.json"), "{e}");
    }

    /// `load` read a whole file of any size before parsing it.
    #[test]
    fn a_report_over_the_size_bound_is_refused_without_reading_it_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.json");
        let max = teesfs_node::report::Limits::default().max_input;
        let f = std::fs::File::create(&path).expect("create");
        f.set_len(max + 4096).expect("sparse file");
        let err = load(&path).expect_err("too large").to_string();
        assert!(err.contains("big.json"), "{err}");
        assert!(
            err.to_lowercase().contains("large") || err.contains("bytes"),
            "{err}"
        );
    }
}

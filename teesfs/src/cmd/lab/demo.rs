//! `teesfs lab demo`: the README's main job. Builds the reference lab, publishes a Python
//! application with real PyPI dependencies (built by `lab/scripts/demo-layer.sh`), pushes
//! it urgent-first, starts the application on every node as soon as its mount appears,
//! and reports when the urgent set, the application and the whole layer reached every node.

use std::path::{Path, PathBuf};

use anyhow::Context;

use lab::launch::{Launch, Method};

use super::ShapeArgs;

/// Arguments of `teesfs lab demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Where the application layer is built (pip install --target) and cached.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/teesfs-lab-demo")]
    layer_dir: PathBuf,
    /// The directory the demo's outputs go to (report.html, report.svg, report.json);
    /// created if missing, its absolute path printed. Never the repository's root: a run
    /// from a checkout leaves nothing in it.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/tmp/teesfs-lab-demo-report"
    )]
    out_dir: PathBuf,
    #[command(flatten)]
    rounds: super::launch::RoundsArg,
    /// Python interpreter (must match the one the layer was built with).
    #[arg(long, default_value = "python3")]
    python: String,
}

/// Runs the demo: [`super::launch::launch`] on the Python layer it builds, with the
/// teesfs methods (no Slurm needed).
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let out = out_dir(&a.out_dir, &cwd)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    outln!("the demo's outputs go to {}", out.display());
    let report = out.join("report.html");
    let built = lab::demo::build_python_layer(&a.layer_dir, &a.python)?;
    let lab = a.shape.up_for_apps()?;
    let result = (|| {
        let index = super::launch::publish(&lab, &built.layer)?;
        let app = lab::demo::python_app(&built.python);
        // The urgent set as users get it: `teesfs record` of the application, once.
        let mut what = vec!["--index".to_string(), index.clone(), "--".into()];
        what.extend(app.command_over_root("login"));
        let list = super::launch::record(&lab, &what)?;
        let l = Launch {
            layer: built.layer.clone(),
            index,
            urgent: lab::demo::urgent_globs(&list),
            app,
            probe: "app/main.py".into(),
            // What users get: the push's own defaults.
            bulk_after: crate::cmd::push::DEFAULT_BULK_AFTER,
            bulk_quiet: crate::cmd::push::DEFAULT_BULK_QUIET,
            image: None,
        };
        let methods = [
            Method::UrgentFirst,
            Method::Eager,
            Method::CopyFirst,
            Method::DemandOnly,
            Method::SharedStorage,
            Method::Learned,
        ];
        super::launch::launch(
            &lab,
            &l,
            &methods,
            a.rounds.get(),
            &report,
            "teesfs lab demo",
        )
    })();
    lab.down()?;
    result?;
    outln!("the demo's outputs are in {}", out.display());
    Ok(())
}

/// The absolute output directory for `given` (relative to `cwd`). Refused when it is a
/// source checkout's root (a directory holding `.git` or a workspace `Cargo.toml`), where
/// outputs would land among the sources.
fn out_dir(given: &Path, cwd: &Path) -> anyhow::Result<PathBuf> {
    let dir = cwd.join(given);
    let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    if dir.join(".git").exists() || cargo.contains("[workspace]") {
        anyhow::bail!(
            "--out-dir {} is a source checkout's root: give a directory of its own (default \
             /var/tmp/teesfs-lab-demo-report)",
            dir.display()
        );
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_outputs_go_to_an_absolute_directory_never_a_checkout_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cwd = tmp.path();
        assert_eq!(
            out_dir(Path::new("/var/tmp/x"), cwd).expect("absolute"),
            PathBuf::from("/var/tmp/x")
        );
        let rel = out_dir(Path::new("out"), cwd).expect("relative");
        assert!(
            rel.is_absolute() && rel == cwd.join("out"),
            "{}",
            rel.display()
        );
        std::fs::create_dir(cwd.join(".git")).expect("a checkout");
        let e = out_dir(Path::new("."), cwd)
            .expect_err("checkout root")
            .to_string();
        assert!(e.contains("source checkout's root"), "{e}");
        let ws = cwd.join("ws");
        std::fs::create_dir(&ws).expect("ws");
        std::fs::write(ws.join("Cargo.toml"), "[workspace]\nmembers = []\n").expect("toml");
        assert!(out_dir(&ws, cwd).is_err(), "a workspace root");
    }
}

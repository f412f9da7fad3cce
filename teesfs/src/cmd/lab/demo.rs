//! `teesfs lab demo`: the README's main job. Builds the reference lab, publishes a Python
//! application with real PyPI dependencies (built by `lab/scripts/demo-layer.sh`), pushes
//! it urgent-first, starts the application on every node as soon as its mount appears,
//! and reports when the urgent set, the application and the whole layer reached every node.

use std::path::PathBuf;

use anyhow::{Context, bail};
use lab::PushOptions;
use lab::report::{Marks, svg};

use super::ShapeArgs;

/// Arguments of `teesfs lab demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Where the application layer is built (pip install --target) and cached.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/teesfs-lab-demo")]
    layer_dir: PathBuf,
    /// The HTML report to write (an .svg is written beside it); outside the working tree,
    /// so a run from a checkout leaves nothing in it.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/tmp/teesfs-lab-demo.html"
    )]
    report: PathBuf,
    /// Python interpreter (must match the one the layer was built with).
    #[arg(long, default_value = "python3")]
    python: String,
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let built = lab::demo::build_python_layer(&a.layer_dir, &a.python)?;
    let lab = a.shape.up()?;
    let t = std::time::Instant::now();
    let index = lab.publish(&built.layer)?;
    eprintln!(
        "published {} in {:.1} s (index {})",
        built.layer.display(),
        t.elapsed().as_secs_f64(),
        &index[..12.min(index.len())]
    );
    let mut o = PushOptions::new(&index);
    o.urgent = built.urgent.clone();
    // 32 interpreters starting at once on a small machine can starve a daemon's heartbeat
    // for seconds; that is CPU contention of the emulation, not a failed node.
    o.extra = vec!["--deadline".into(), "30s".into()];
    let app = lab::demo::python_app(&built.python);
    let run = lab::demo::run(&lab, &o, &app, "app/main.py")?;
    // What launching costs once everything is local: the copy-everything-first baseline.
    let warm = lab::demo::run_warm(&lab, &run.push.report.job, &app)?;
    let text = lab::demo::summary(&lab, &built.layer, &run, &warm);
    print!("{text}");
    for x in run.apps.iter().filter(|x| !x.ok) {
        println!("  FAILED on {}: {}", x.host, x.output);
    }
    let marks = Marks {
        label: "application finished starting".into(),
        at: run
            .apps
            .iter()
            .map(|x| (x.host.clone(), x.done_s))
            .collect(),
    };
    let picture = svg(
        lab.layout(),
        &run.push.report,
        &marks,
        "teesfs lab demo: tree and per-node timeline",
    );
    let svg_path = a.report.with_extension("svg");
    std::fs::write(&svg_path, &picture)
        .with_context(|| format!("writing {}", svg_path.display()))?;
    std::fs::write(&a.report, lab::demo::html(&text, &picture, &run.apps))
        .with_context(|| format!("writing {}", a.report.display()))?;
    println!("report: {} and {}", a.report.display(), svg_path.display());
    lab.down()?;
    let failed = run.apps.iter().filter(|x| !x.ok).count();
    if failed > 0 {
        bail!("the application failed on {failed} node(s)");
    }
    Ok(())
}

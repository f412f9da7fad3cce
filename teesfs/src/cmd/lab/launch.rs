//! `teesfs lab launch`: a launch benchmark on any layer. Builds the lab, publishes the layer,
//! pushes it with its urgent set first, starts the application on every node as soon as its
//! mount appears, and reports when the urgent set, the application and the whole layer
//! reached every node, against copying the whole layer first and then starting (measured in
//! the same run). Writes the HTML/SVG report: the tree, the per-node timeline and the
//! application's start. `teesfs lab demo` is this on its own Python layer.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use lab::demo::App;
use lab::report::{Marks, svg};
use lab::{Lab, PushOptions};

use super::ShapeArgs;

/// Arguments of `teesfs lab launch`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:
  teesfs record --store STORE --index ID -o urgent.list -- python3 -c 'import numpy'
  sudo teesfs lab launch --layer ./layer --urgent-list urgent.list \\
      --app 'PYTHONPATH=$TEESFS_MOUNT python3 -c \"import numpy\"'")]
pub struct LaunchArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// The layer directory to publish and push.
    #[arg(long, value_name = "DIR")]
    layer: PathBuf,
    /// The application: a shell command run on every node, with `TEESFS_MOUNT` set to the
    /// node's mount of the layer; it has started when it exits 0.
    #[arg(long, value_name = "CMD")]
    app: String,
    /// The urgent set: layer paths in the order of first use, one per line (what `teesfs
    /// record` writes). Without it nothing is urgent.
    #[arg(long, value_name = "FILE")]
    urgent_list: Option<PathBuf>,
    /// A layer path (relative) whose appearance in a node's mount starts the application;
    /// default: the first path of the urgent list, else the layer's root.
    #[arg(long, value_name = "PATH")]
    probe: Option<String>,
    /// The HTML report to write (an .svg is written beside it).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/tmp/teesfs-lab-launch.html"
    )]
    report: PathBuf,
}

/// Runs `teesfs lab launch`.
pub fn run(a: LaunchArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let list = match &a.urgent_list {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => String::new(),
    };
    let urgent = lab::demo::urgent_globs(&list);
    let probe = a.probe.clone().unwrap_or_else(|| {
        lab::demo::urgent_paths(&list)
            .next()
            .unwrap_or_default()
            .to_string()
    });
    let lab = a.shape.up()?;
    let app = lab::demo::shell_app(&a.app);
    let result = launch(
        &lab,
        &a.layer,
        urgent,
        &app,
        &probe,
        &a.report,
        "teesfs lab launch",
    );
    lab.down()?;
    result
}

/// Publishes `layer`, pushes it urgent-first, starts `app` everywhere as soon as `probe`
/// shows in a node's mount, then starts it again from local data (the copy-first baseline),
/// prints the summary and writes the report.
pub fn launch(
    lab: &Lab,
    layer: &Path,
    urgent: Vec<String>,
    app: &App,
    probe: &str,
    report: &Path,
    title: &str,
) -> anyhow::Result<()> {
    let t = std::time::Instant::now();
    let index = lab.publish(layer)?;
    eprintln!(
        "published {} in {:.1} s (index {})",
        layer.display(),
        t.elapsed().as_secs_f64(),
        &index[..12.min(index.len())]
    );
    let mut o = PushOptions::new(&index);
    o.urgent = urgent;
    // 32 applications starting at once on a small machine can starve a daemon's heartbeat
    // for seconds; that is CPU contention of the emulation, not a failed node.
    o.extra = vec!["--deadline".into(), "30s".into()];
    let run = lab::demo::run(lab, &o, app, probe)?;
    // What launching costs once everything is local: the copy-everything-first baseline.
    let warm = lab::demo::run_warm(lab, &run.push.report.job, app)?;
    let text = lab::demo::summary(title, lab, layer, &run, &warm);
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
        &format!("{title}: tree and per-node timeline"),
    );
    let svg_path = report.with_extension("svg");
    std::fs::write(&svg_path, &picture)
        .with_context(|| format!("writing {}", svg_path.display()))?;
    std::fs::write(report, lab::demo::html(title, &text, &picture, &run.apps))
        .with_context(|| format!("writing {}", report.display()))?;
    println!("report: {} and {}", report.display(), svg_path.display());
    let failed = run.apps.iter().filter(|x| !x.ok).count();
    if failed > 0 {
        bail!("the application failed on {failed} node(s)");
    }
    Ok(())
}

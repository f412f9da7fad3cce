//! `teesfs lab launch`: a launch benchmark on any layer. Builds the lab, publishes the layer,
//! records its urgent set (or takes the list), and starts the application on every node by
//! each launch method in turn, each on nodes that hold nothing yet ([`lab::launch`]):
//! urgent-first, copy-first, demand-only, shared storage and sbcast+untar. Prints when the
//! application had started everywhere by each, with ratios, and writes the HTML/SVG report:
//! the urgent-first tree, its per-node timeline and the application's start, and the table.
//! `teesfs lab demo` is this on its own Python layer.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use lab::Lab;
use lab::launch::{Launch, Method};

use super::ShapeArgs;

/// Arguments of `teesfs lab launch`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  # a layer of scipy, pandas and matplotlib from PyPI (about 400 MB), on 16 nodes:
  lab/scripts/pypi-layer.sh /var/tmp/pypi
  sudo TMPDIR=/dev/shm teesfs lab launch --groups 4 --group-size 4 --layer /var/tmp/pypi/layer \\
      --app 'PYTHONPATH=$TEESFS_MOUNT/opt/sciapp python3 -m sciapp'
  # only two methods, with a recorded urgent list:
  sudo teesfs lab launch --layer ./layer --urgent-list urgent.list \\
      --methods urgent-first,copy-first --app 'PYTHONPATH=$TEESFS_MOUNT python3 -c \"import numpy\"'")]
pub struct LaunchArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// The layer directory to publish and push.
    #[arg(long, value_name = "DIR")]
    layer: PathBuf,
    /// The application: a shell command run on every node, with `TEESFS_MOUNT` set to the
    /// node's copy of the layer (its mount, or its unpacked tarball); it has started when
    /// it exits 0.
    #[arg(long, value_name = "CMD")]
    app: String,
    /// The urgent set: layer paths in the order of first use, one per line (what `teesfs
    /// record` writes). Without it, the application is recorded once on the login node
    /// with `teesfs record` (TEESFS_MOUNT=/, the layer over "/").
    #[arg(long, value_name = "FILE")]
    urgent_list: Option<PathBuf>,
    /// A layer path (relative) whose appearance in a node's mount starts the application;
    /// default: the first path of the urgent list, else the layer's root.
    #[arg(long, value_name = "PATH")]
    probe: Option<String>,
    /// The launch methods to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "urgent-first,urgent-eager,urgent-only,copy-first,demand-only,shared-storage,sbcast+untar,urgent-learned",
        value_parser = parse_method
    )]
    methods: Vec<Method>,
    /// urgent-first (the default push): hold the rest of the layer back at most this long after the urgent
    /// set is on every node (`teesfs push --bulk-after`).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration)]
    bulk_after: std::time::Duration,
    /// urgent-first: let it flow while no sign of applications starting (files opened,
    /// reads fetched on demand) reached the root for this long (`teesfs push --bulk-quiet`).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    bulk_quiet: std::time::Duration,
    /// The HTML report to write (an .svg is written beside it, and the figures as .json).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/tmp/teesfs-lab-launch.html"
    )]
    report: PathBuf,
}

fn parse_method(s: &str) -> Result<Method, String> {
    Method::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
        format!(
            "unknown launch method {s:?}; the methods are {}",
            names.join(", ")
        )
    })
}

/// Runs `teesfs lab launch`.
pub fn run(a: LaunchArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    if !a.layer.is_dir() {
        bail!("--layer {}: not a directory", a.layer.display());
    }
    let lab = a.shape.up()?;
    let app = lab::demo::shell_app(&a.app);
    let result = (|| {
        let index = publish(&lab, &a.layer)?;
        let list = match &a.urgent_list {
            Some(p) => {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
            }
            None => record(&lab, &index, &a.app)?,
        };
        let probe = a.probe.clone().unwrap_or_else(|| {
            lab::demo::urgent_paths(&list)
                .next()
                .unwrap_or_default()
                .to_string()
        });
        let l = Launch {
            layer: a.layer.clone(),
            index,
            urgent: lab::demo::urgent_globs(&list),
            app,
            probe,
            bulk_after: a.bulk_after,
            bulk_quiet: a.bulk_quiet,
        };
        launch(&lab, &l, &a.methods, &a.report, "teesfs lab launch")
    })();
    lab.down()?;
    result
}

/// Publishes `layer` into the lab's store; returns the index id.
pub fn publish(lab: &Lab, layer: &Path) -> anyhow::Result<String> {
    let t = std::time::Instant::now();
    let index = lab.publish(layer)?;
    errln!(
        "published {} in {:.1} s (index {})",
        layer.display(),
        t.elapsed().as_secs_f64(),
        &index[..12.min(index.len())]
    );
    Ok(index)
}

/// Records the urgent set of `app` once on the login node with `teesfs record`: the layer
/// over "/" and `TEESFS_MOUNT=/`.
fn record(lab: &Lab, index: &str, app: &str) -> anyhow::Result<String> {
    let out = lab.work().join("recorded-urgent.list");
    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    let status = std::process::Command::new(exe)
        .args(["record", "--store"])
        .arg(lab.work().join("store"))
        .args(["--index", index, "--trust"])
        .arg(lab.work().join("publisher.pub"))
        .arg("-o")
        .arg(&out)
        .args(["--", "/bin/sh", "-c", app])
        .env("TEESFS_MOUNT", "/")
        .stdout(std::process::Stdio::null())
        .status()
        .context("running teesfs record")?;
    if !status.success() {
        bail!(
            "recording the application's urgent set failed ({status}); check that --app runs with \
             the layer at $TEESFS_MOUNT, or give the list with --urgent-list"
        );
    }
    let list =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    errln!(
        "recorded the urgent set: {} files",
        lab::demo::urgent_paths(&list).count()
    );
    Ok(list)
}

/// Runs `methods` for `l`, prints the table and writes the report.
pub fn launch(
    lab: &Lab,
    l: &Launch,
    methods: &[Method],
    report: &Path,
    title: &str,
) -> anyhow::Result<()> {
    let rep = lab::launch::run(lab, l, methods, |o| {
        errln!(
            "{}: application started on every node in {:.2} s ({})",
            o.method.name(),
            o.app_s,
            o.detail
        );
    })?;
    let mut text = format!(
        "{title}: {} nodes in {} groups, layer {}\n  {}\n",
        lab.layout().compute().count(),
        lab.layout().spec.groups,
        l.layer.display(),
        lab.model_text()
    );
    if let Some(run) = &rep.urgent_first {
        text = lab::demo::summary(title, lab, &l.layer, run);
    }
    text.push_str(&lab::launch::table(&rep));
    out!("{text}");
    write_report(lab, &rep, &text, report, title)?;
    let failed: usize = rep.outcomes.iter().map(|o| o.nodes - o.ok).sum();
    if failed > 0 {
        bail!("the application failed {failed} time(s); see the table above");
    }
    Ok(())
}

fn write_report(
    lab: &Lab,
    rep: &lab::launch::Report,
    text: &str,
    report: &Path,
    title: &str,
) -> anyhow::Result<()> {
    if let Some(dir) = report.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json_path = report.with_extension("json");
    // The figures with the model they were measured under (`model` is null when pooled).
    let doc = serde_json::json!({
        "version": 2,
        "model": lab.model(),
        "model_text": lab.model_text(),
        "local_s": rep.local_s,
        "outcomes": rep.outcomes,
    });
    crate::cmd::outfile::write(&json_path, &serde_json::to_vec_pretty(&doc)?)?;
    let Some(run) = &rep.urgent_first else {
        outln!("figures: {}", json_path.display());
        return Ok(());
    };
    for x in run.apps.iter().filter(|x| !x.ok) {
        outln!("  urgent-first FAILED on {}: {}", x.host, x.output);
    }
    // The application has started on a node when its command finished starting.
    let started: Vec<(String, f64)> = run
        .apps
        .iter()
        .map(|x| (x.host.clone(), x.done_s))
        .collect();
    let picture = lab::report::svg(
        &run.push.report,
        &started,
        &format!("{title}: urgent-first tree and per-node timeline"),
    );
    let svg_path = report.with_extension("svg");
    crate::cmd::outfile::write(&svg_path, picture.as_bytes())?;
    crate::cmd::outfile::write(
        report,
        lab::demo::html(title, text, &picture, &run.apps).as_bytes(),
    )?;
    outln!(
        "report: {} ({} and {} beside it)",
        report.display(),
        svg_path.display(),
        json_path.display()
    );
    Ok(())
}

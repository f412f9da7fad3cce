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
use lab::launch::{Launch, Method, Turn};

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
      --methods urgent-first,copy-first --app 'PYTHONPATH=$TEESFS_MOUNT python3 -c \"import numpy\"'
  # the default against demand-only, three rounds in alternating order, judged on medians:
  sudo teesfs lab launch --layer ./layer --urgent-list urgent.list --rounds 3 \\
      --methods urgent-first,demand-only,copy-first --app 'python3 $TEESFS_MOUNT/app/main.py'")]
pub struct LaunchArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// The layer directory to publish and push.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "image",
        conflicts_with = "image"
    )]
    layer: Option<PathBuf>,
    /// A container image instead of a layer: an OCI image layout (`DIR` or `DIR:TAG`, as
    /// `skopeo copy ... oci:DIR:TAG` or scripts/image-build.sh writes it). The image is
    /// published with `publish --image` and recorded with `record --image`; the
    /// application runs as a task of an image job (`teesfs run --image` over the node's
    /// copy, with the image's config); the default methods are how sites start images:
    /// teesfs urgent-first, copy-first and demand-only against registry-pull,
    /// sbcast+unsquash and squashfuse from the storage node.
    #[arg(long, value_name = "OCI_LAYOUT[:TAG]")]
    image: Option<String>,
    /// The application: a shell command run on every node, with `TEESFS_MOUNT` set to the
    /// node's copy of the layer (its mount, or its unpacked tarball); it has started when
    /// it exits 0. With --image it runs inside the image (default: its Entrypoint and Cmd).
    #[arg(long, value_name = "CMD", required_unless_present = "image")]
    app: Option<String>,
    /// The urgent set: layer paths in the order of first use, one per line (what `teesfs
    /// record` writes). Without it, the application is recorded once on the login node
    /// with `teesfs record` (TEESFS_MOUNT=/, the layer over "/").
    #[arg(long, value_name = "FILE")]
    urgent_list: Option<PathBuf>,
    /// A layer path (relative) whose appearance in a node's mount starts the application;
    /// default: the first path of the urgent list, else the layer's root.
    #[arg(long, value_name = "PATH")]
    probe: Option<String>,
    /// The launch methods to run, in order [default: urgent-first, urgent-eager,
    /// urgent-only, copy-first, demand-only, shared-storage, sbcast+untar, urgent-learned;
    /// with --image: urgent-first, copy-first, demand-only, registry-pull,
    /// sbcast+unsquash, squashfuse].
    #[arg(long, value_delimiter = ',', value_parser = parse_method)]
    methods: Vec<Method>,
    /// urgent-first (the default push): hold the rest of the layer back at most this long after the urgent
    /// set is on every node (`teesfs push --bulk-after`).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration)]
    bulk_after: std::time::Duration,
    /// urgent-first: let it flow while no sign of applications starting (files opened,
    /// reads fetched on demand) reached the root for this long (`teesfs push --bulk-quiet`).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    bulk_quiet: std::time::Duration,
    #[command(flatten)]
    rounds: RoundsArg,
    /// The HTML report to write (an .svg is written beside it, and the figures as .json).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/tmp/teesfs-lab-launch.html",
        value_parser = parse_report
    )]
    report: PathBuf,
}

/// `--rounds`, shared by `lab launch` and `lab demo`.
#[derive(Debug, clap::Args)]
pub struct RoundsArg {
    /// Run every method this many times, each round on fresh nodes in an order rotated by
    /// one; the table, the goals and the figures are then medians, with each round's start
    /// beside them. One run's figures move by about 10% on a shared machine: use 3 or more
    /// to judge a goal with a smaller margin.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
}

impl RoundsArg {
    /// How many rounds.
    pub fn get(&self) -> usize {
        self.rounds as usize
    }
}

/// The methods an image's launch runs by default: teesfs against how sites start images.
const IMAGE_METHODS: [Method; 6] = [
    Method::UrgentFirst,
    Method::CopyFirst,
    Method::DemandOnly,
    Method::RegistryPull,
    Method::SbcastUnsquash,
    Method::Squashfuse,
];

fn parse_method(s: &str) -> anyhow::Result<Method> {
    Method::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
        anyhow::anyhow!(
            "unknown launch method {s:?}; the methods are {}",
            names.join(", ")
        )
    })
}

/// The HTML report's path: not one the figures (.json) or the picture (.svg) beside it
/// would overwrite.
fn parse_report(s: &str) -> anyhow::Result<PathBuf> {
    let p = PathBuf::from(s);
    match p.extension().and_then(|e| e.to_str()) {
        Some(e @ ("json" | "svg")) => anyhow::bail!(
            "{s} is where the {} beside the HTML report would go: give the HTML page's \
             name, such as {}",
            if e == "json" { "figures" } else { "picture" },
            p.with_extension("html").display()
        ),
        _ => Ok(p),
    }
}

/// Runs `teesfs lab launch`.
pub fn run(a: LaunchArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let image = a.image.as_deref().map(super::image::prepare).transpose()?;
    let (layer, app) = match (&image, &a.layer, &a.app) {
        (Some(img), _, app) => {
            let exe = std::env::current_exe().context("finding the teesfs binary")?;
            (img.rootfs.clone(), img.app(&exe, app.as_deref())?)
        }
        (None, Some(layer), Some(app)) => (layer.clone(), app.clone()),
        _ => bail!("give --layer and --app, or --image"),
    };
    if !layer.is_dir() {
        bail!("--layer {}: not a directory", layer.display());
    }
    let methods = if !a.methods.is_empty() {
        a.methods.clone()
    } else if image.is_some() {
        IMAGE_METHODS.to_vec()
    } else {
        Method::ALL
            .into_iter()
            .filter(|m| !m.image_only())
            .collect()
    };
    if let Some(m) = methods.iter().find(|m| m.image_only() && image.is_none()) {
        bail!(
            "--methods {}: starts a container image; give --image",
            m.name()
        );
    }
    let lab = a.shape.up_for_apps()?;
    let result = (|| {
        // An image is published as users publish it, from its layout.
        let index = match &image {
            Some(img) => timed(&img.files.source(), || {
                lab.publish_image(&img.files.source())
            })?,
            None => publish(&lab, &layer)?,
        };
        let list = match &a.urgent_list {
            Some(p) => {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
            }
            None => match &image {
                Some(img) => {
                    let mut args = vec!["--image".to_string(), index.clone()];
                    args.extend(img.record_args(a.app.as_deref())?);
                    record(&lab, &args)?
                }
                None => {
                    let args = ["--index", &index, "--", "/bin/sh", "-c", &app];
                    record(&lab, &args.map(str::to_string))?
                }
            },
        };
        let probe = a.probe.clone().unwrap_or_else(|| {
            lab::demo::urgent_paths(&list)
                .next()
                .unwrap_or_default()
                .to_string()
        });
        let l = Launch {
            layer: layer.clone(),
            index,
            urgent: lab::demo::urgent_globs(&list),
            app: lab::demo::shell_app(&app),
            probe,
            bulk_after: a.bulk_after,
            bulk_quiet: a.bulk_quiet,
            image: image.as_ref().map(|i| i.files.clone()),
        };
        launch(
            &lab,
            &l,
            &methods,
            a.rounds.get(),
            &a.report,
            "teesfs lab launch",
        )
    })();
    lab.down()?;
    result
}

/// Publishes `layer` into the lab's store; returns the index id.
pub fn publish(lab: &Lab, layer: &Path) -> anyhow::Result<String> {
    timed(&layer.display().to_string(), || lab.publish(layer))
}

/// Runs `publish` and says how long publishing `what` took.
fn timed(what: &str, publish: impl FnOnce() -> lab::Result<String>) -> anyhow::Result<String> {
    let t = std::time::Instant::now();
    let index = publish()?;
    errln!(
        "published {what} in {:.1} s (index {})",
        t.elapsed().as_secs_f64(),
        &index[..12.min(index.len())]
    );
    Ok(index)
}

/// Records the urgent set once on the login node with `teesfs record` and `what` (the
/// index and the command): a layer over "/" and `TEESFS_MOUNT=/`, or an image as its root.
pub fn record(lab: &Lab, what: &[String]) -> anyhow::Result<String> {
    let out = lab.work().join("recorded-urgent.list");
    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    let run = std::process::Command::new(exe)
        .args(["record", "--store"])
        .arg(lab.work().join("store"))
        .arg("--trust")
        .arg(lab.work().join("publisher.pub"))
        .arg("-o")
        .arg(&out)
        .args(what)
        .env("TEESFS_MOUNT", "/")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .context("running teesfs record")?;
    // What the application and `record` said is shown only when recording failed.
    if !run.status.success() {
        let said = String::from_utf8_lossy(&run.stderr);
        let lines: Vec<&str> = said.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        bail!(
            "recording the application's urgent set failed ({}); check that --app runs with \
             the layer at $TEESFS_MOUNT, or give the list with --urgent-list. It said:\n{}",
            run.status,
            tail
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

/// Runs `methods` for `l` `rounds` times (the figures are then medians), prints the table
/// and writes the report.
pub fn launch(
    lab: &Lab,
    l: &Launch,
    methods: &[Method],
    rounds: usize,
    report: &Path,
    title: &str,
) -> anyhow::Result<()> {
    let round = |r: usize| {
        if rounds > 1 {
            format!("round {r} of {rounds}: ")
        } else {
            String::new()
        }
    };
    let rep = lab::launch::rounds::run_rounds(lab, l, methods, rounds, |r, turn| match turn {
        Turn::Done(o) => errln!(
            "{}{}: application started on every node in {:.2} s ({}{})",
            round(r),
            o.method.name(),
            o.app_s,
            o.detail,
            o.last
                .as_deref()
                .map(|h| format!("; last {h}"))
                .unwrap_or_default()
        ),
        Turn::Failed(f) => errln!("{}{}: FAILED: {}", round(r), f.method.name(), f.reason),
    });
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
    write_report(lab, &rep, &text, report, title, rounds)?;
    if let Some(e) = rep.stopped {
        return Err(e).context("the launch stopped before its last method");
    }
    let failed: usize = rep.outcomes.iter().map(|o| o.nodes - o.ok).sum();
    if failed > 0 {
        bail!("the application failed {failed} time(s); see the table above");
    }
    if !rep.failures.is_empty() {
        let names: Vec<&str> = rep.failures.iter().map(|f| f.method.name()).collect();
        bail!(
            "{} failed ({}); the others' figures are in the report",
            names.join(", "),
            if names.len() == 1 {
                "its reason is above"
            } else {
                "their reasons are above"
            }
        );
    }
    Ok(())
}

fn write_report(
    lab: &Lab,
    rep: &lab::launch::Report,
    text: &str,
    report: &Path,
    title: &str,
    rounds: usize,
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
        "rounds": rounds,
        "local_s": rep.local_s,
        "outcomes": rep.outcomes,
        "failures": rep.failures,
        "each_round": rep.each_round,
        "each_local": rep.each_local,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_named_like_its_figures_or_picture_is_refused_with_the_name_to_use() {
        let e = parse_report("/tmp/r.json").expect_err("json").to_string();
        assert!(e.contains("figures") && e.contains("/tmp/r.html"), "{e}");
        let e = parse_report("r.svg").expect_err("svg").to_string();
        assert!(e.contains("picture") && e.contains("r.html"), "{e}");
        assert_eq!(
            parse_report("out/r.html").expect("html"),
            PathBuf::from("out/r.html")
        );
        assert_eq!(parse_report("r").expect("no extension"), PathBuf::from("r"));
    }
}

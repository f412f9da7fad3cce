//! `teesfs lab demo`: the README's main job. Builds the reference lab, publishes a Python
//! application with real PyPI dependencies (built by `scripts/lab-demo-layer.sh`), pushes
//! it urgent-first, starts the application on every node as soon as its mount appears,
//! and reports when the urgent set, the application and the whole layer reached every node.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use lab::PushOptions;
use lab::demo::{App, AppRun};
use lab::report::{Marks, svg};

use super::super::util;
use super::ShapeArgs;

/// The script that builds the demo layer, compiled in so the binary is self-contained.
const LAYER_SCRIPT: &str = include_str!("../../../../scripts/lab-demo-layer.sh");

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

fn glob_escape(p: &str) -> String {
    p.chars()
        .map(|c| match c {
            '*' | '?' | '[' | ']' | '{' | '}' => format!("[{c}]"),
            c => c.to_string(),
        })
        .collect()
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let dir = &a.layer_dir;
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(LAYER_SCRIPT)
        .arg("lab-demo-layer.sh")
        .arg(dir)
        .env("PYTHON", &a.python)
        .status()
        .context("running bash to build the demo layer")?;
    if !status.success() {
        bail!("building the demo layer failed (needs pip and access to PyPI)");
    }
    let python = std::process::Command::new(&a.python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .context("running python")?;
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    let urgent: Vec<String> = std::fs::read_to_string(dir.join("urgent.txt"))
        .context("reading the urgent list")?
        .lines()
        .filter(|l| !l.is_empty())
        .map(glob_escape)
        .collect();

    let lab = a.shape.up()?;
    let layer = dir.join("layer");
    let t = std::time::Instant::now();
    let index = lab.publish(&layer)?;
    eprintln!(
        "published {} in {:.1} s (index {})",
        layer.display(),
        t.elapsed().as_secs_f64(),
        &index[..12.min(index.len())]
    );
    let mut o = PushOptions::new(&index);
    o.urgent = urgent;
    // 32 interpreters starting at once on a small machine can starve a daemon's heartbeat
    // for seconds; that is CPU contention of the emulation, not a failed node.
    o.extra = vec!["--deadline".into(), "30s".into()];
    let app = App {
        program: python,
        args: vec![
            "-c".into(),
            "import sys, runpy; sys.path.insert(0, '{mount}'); sys.argv = ['app', '{host}']; \
             runpy.run_module('app.main', run_name='__main__')"
                .into(),
        ],
        env: vec![
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("PYTHONNOUSERSITE".into(), "1".into()),
        ],
        expect: "app ok on {host}".into(),
    };
    let run = lab::demo::run(&lab, &o, &app, "app/main.py")?;
    let r = &run.push.report;
    let layout = lab.layout();
    let ok = run.apps.iter().filter(|x| x.ok).count();
    let app_all = run.apps.iter().map(|x| x.done_s).fold(0.0, f64::max);
    let urgent_s = r.urgent_complete_s.unwrap_or(f64::NAN);
    let all_s = r.all_complete_s.unwrap_or(f64::NAN);
    // What launching costs once everything is local: the copy-everything-first baseline.
    let warm = lab::demo::run_warm(&lab, &r.job, &app)?;
    let app_warm = warm.iter().map(|x| x.done_s).fold(0.0, f64::max);
    let min_up = r.total_bytes * layout.spec.groups as u64;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "teesfs lab demo: {} nodes in {} groups, layer {} ({} stored), urgent set {}",
        r.nodes,
        layout.spec.groups,
        layer.display(),
        util::bytes(r.total_bytes),
        util::bytes(r.urgent_bytes)
    );
    let _ = writeln!(text, "  urgent set on every node:       {urgent_s:6.2} s");
    let _ = writeln!(
        text,
        "  application started everywhere: {app_all:6.2} s  ({ok}/{} nodes ran it from their mount)",
        run.apps.len()
    );
    let _ = writeln!(text, "  whole layer on every node:      {all_s:6.2} s");
    let _ = writeln!(
        text,
        "  copy-everything-first launch:   {:6.2} s  (whole layer, then starting everywhere from local data took {app_warm:.2} s): urgent-first is {:.1}x sooner",
        all_s + app_warm,
        (all_s + app_warm) / app_all
    );
    let _ = writeln!(
        text,
        "  group uplinks carried {} in; minimum {} (each group once): {:.2}x",
        util::bytes(run.push.uplink_in()),
        util::bytes(min_up),
        run.push.uplink_in() as f64 / min_up as f64
    );
    let _ = writeln!(
        text,
        "  link lower bound for the whole layer: {:.2} s; cpu {:.1} s",
        layout.lower_bound_s(r.total_bytes),
        run.push.cpu_s
    );
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
        layout,
        r,
        &marks,
        "teesfs lab demo: tree and per-node timeline",
    );
    let svg_path = a.report.with_extension("svg");
    std::fs::write(&svg_path, &picture)
        .with_context(|| format!("writing {}", svg_path.display()))?;
    std::fs::write(&a.report, html(&text, &picture, &run.apps))
        .with_context(|| format!("writing {}", a.report.display()))?;
    println!("report: {} and {}", a.report.display(), svg_path.display());
    lab.down()?;
    if ok != run.apps.len() {
        bail!("the application failed on {} node(s)", run.apps.len() - ok);
    }
    Ok(())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn html(summary: &str, picture: &str, apps: &[AppRun]) -> String {
    let mut rows = String::new();
    for x in apps {
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&x.host),
            x.started_s,
            x.done_s,
            if x.ok { "ok" } else { "FAILED" },
            esc(&x.output)
        );
    }
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>teesfs lab demo</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:left}}</style>\
         </head><body><h1>teesfs lab demo</h1><pre>{}</pre>{picture}<h2>Application on each node</h2>\
         <table><tr><th>host</th><th>mounted, started (s)</th><th>finished (s)</th><th>status</th>\
         <th>output</th></tr>{rows}</table></body></html>\n",
        esc(summary)
    )
}

//! `teesfs lab bench`: the same payload deployed by each method on one lab, several
//! repetitions, with a table of ratios to teesfs-topo and to the link lower bound, the
//! figures as JSON and an SVG plot (time and uplink bytes per method).

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use lab::bench::{BenchReport, Method};
use lab::plot::label;

use super::super::util;
use super::ShapeArgs;

/// Arguments of `teesfs lab bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Payload size per run (fresh incompressible content each run).
    #[arg(long, default_value = "16MiB", value_parser = util::parse_size)]
    payload: u64,
    /// Repetitions of every method.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Methods, comma-separated: topo (told the lab's link rates), topo-unrated (the
    /// same planner without them, nor any it learned), topo-learned (the second push of a
    /// lab told no rates: with the rates its first push learned), topo-wide-login (topo
    /// with the login node feeding what its link carries, --login-copies 64), topo-paper
    /// (the paper's Algorithm 1), random, hostlist, flat, storage (teesfs plans),
    /// bittorrent (aria2c + mktorrent + the lab's tracker), sbcast (real Slurm in the lab).
    /// Default: all; a baseline whose programs are not installed is then skipped with a
    /// warning (named explicitly, it is an error).
    #[arg(long, value_delimiter = ',')]
    methods: Option<Vec<String>>,
    /// Write the figures as JSON (fields in docs/lab.md); the plot goes next to it
    /// (FILE with the extension .svg) unless --plot says otherwise.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the SVG plot (time until every node holds the payload, and uplink bytes,
    /// per method) here.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// Whether the programs of a baseline are installed (teesfs methods always are).
fn installed(m: Method) -> lab::Result<()> {
    match m {
        Method::Torrent => lab::torrent::available(),
        Method::Sbcast => lab::slurm::available(),
        _ => Ok(()),
    }
}

/// Runs the bench.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let mut methods = match &a.methods {
        Some(names) => {
            let ms = names
                .iter()
                .map(|m| {
                    Method::parse(m).ok_or_else(|| {
                        anyhow!(
                            "unknown method {m:?}: use topo, random, hostlist, flat, storage, \
                             bittorrent or sbcast"
                        )
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            for &m in &ms {
                installed(m).with_context(|| format!("method {}", m.name()))?;
            }
            ms
        }
        None => Method::ALL
            .into_iter()
            .filter(|&m| match installed(m) {
                Ok(()) => true,
                Err(e) => {
                    errln!("skipping {}: {e}", m.name());
                    false
                }
            })
            .collect(),
    };
    if !methods.contains(&Method::Topo) {
        methods.insert(0, Method::Topo);
    }
    let lab = a.shape.up()?;
    errln!(
        "bench: {} per run in {} chunks, {} repetitions of {} methods",
        util::bytes(a.payload),
        util::bytes(lab.chunk_size_for(a.payload)),
        a.reps,
        methods.len()
    );
    let rep = lab::bench::run(&lab, &methods, a.reps, a.payload, |r| {
        errln!(
            "  {:<10} rep {}: all nodes {:6.2} s, uplinks {:>10}, cpu {:5.1} s",
            r.method.name(),
            r.rep,
            r.all_s,
            util::bytes(r.uplink_in_bytes),
            r.cpu_s
        );
    })?;
    lab.down()?;
    print_table(&rep);
    if let Some(p) = &a.json {
        crate::cmd::outfile::write(p, &serde_json::to_vec_pretty(&rep)?)?;
        errln!("figures in {}", p.display());
    }
    let plot = a
        .plot
        .clone()
        .or_else(|| a.json.as_ref().map(|j| j.with_extension("svg")));
    if let Some(p) = plot {
        lab::plot::bench(&p, &rep)?;
        errln!("plot in {}", p.display());
    }
    Ok(())
}

fn print_table(r: &BenchReport) {
    outln!(
        "{} groups x {}, payload {} ({} stored), {} reps, medians; lower bound {:.2} s, minimum uplink {}",
        r.groups,
        r.group_size,
        util::bytes(r.payload_bytes),
        util::bytes(r.stored_bytes),
        r.reps,
        r.lower_bound_s,
        util::bytes(r.min_uplink_bytes)
    );
    outln!("{}", r.model_text);
    outln!(
        "{:<16} {:>8} {:>8} {:>9} {:>11} {:>8} {:>9} {:>7} {:>9}",
        "method",
        "all (s)",
        "vs topo",
        "vs bound",
        "uplink in",
        "vs min",
        "vs random",
        "cpu (s)",
        "held/node"
    );
    for s in &r.summary {
        let held = match s.throttled_per_node_s {
            Some(t) if t.is_finite() => format!("{t:.2} s"),
            _ => "-".into(),
        };
        outln!(
            "{:<16} {:>8.2} {:>8.2} {:>9.2} {:>11} {:>8.2} {:>9.2} {:>7.1} {:>9}",
            label(s.method),
            s.all_s,
            s.vs_topo,
            s.vs_lower_bound,
            util::bytes(s.uplink_in_bytes),
            s.uplink_vs_min,
            s.uplink_vs_random,
            s.cpu_s,
            held
        );
    }
    for s in &r.summary {
        if let Some(share) = s.held_share().filter(|&h| h > lab::bench::HELD_BY_CPU) {
            outln!(
                "note: under the scale model a node spent {:.0}% of {}'s time held by its CPU \
                 quota: the run measured the nodes' CPU per byte more than the links \
                 (--node-cpu pooled runs the same tree without quotas; docs/lab.md)",
                share * 100.0,
                s.method.name()
            );
        }
    }
}

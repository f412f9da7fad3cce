//! `teesfs lab bench`: the same payload deployed by each method on one lab, several
//! repetitions, with a table of ratios to teesfs-topo and to the link lower bound.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use lab::bench::{BenchReport, Method};

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
    /// Methods, comma-separated: topo, random, hostlist, flat, storage.
    #[arg(
        long,
        default_value = "topo,random,hostlist,flat,storage",
        value_delimiter = ','
    )]
    methods: Vec<String>,
    /// Write the figures as JSON (format documented in lab/src/bench.rs).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Runs the bench.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let mut methods = a
        .methods
        .iter()
        .map(|m| Method::parse(m).ok_or_else(|| anyhow!("unknown method {m:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !methods.contains(&Method::Topo) {
        methods.insert(0, Method::Topo);
    }
    let lab = a.shape.up()?;
    eprintln!(
        "bench: {} per run, {} repetitions of {} methods",
        util::bytes(a.payload),
        a.reps,
        methods.len()
    );
    let rep = lab::bench::run(&lab, &methods, a.reps, a.payload, |r| {
        eprintln!(
            "  {:<9} rep {}: all nodes {:6.2} s, uplinks {:>10}, cpu {:5.1} s",
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
        std::fs::write(p, serde_json::to_vec_pretty(&rep)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn print_table(r: &BenchReport) {
    println!(
        "{} groups x {}, payload {} ({} stored), {} reps, medians; lower bound {:.2} s, minimum uplink {}",
        r.groups,
        r.group_size,
        util::bytes(r.payload_bytes),
        util::bytes(r.stored_bytes),
        r.reps,
        r.lower_bound_s,
        util::bytes(r.min_uplink_bytes)
    );
    println!(
        "{:<10} {:>8} {:>8} {:>9} {:>11} {:>8} {:>9} {:>7}",
        "method", "all (s)", "vs topo", "vs bound", "uplink in", "vs min", "vs random", "cpu (s)"
    );
    for s in &r.summary {
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>9.2} {:>11} {:>8.2} {:>9.2} {:>7.1}",
            s.method.name(),
            s.all_s,
            s.vs_topo,
            s.vs_lower_bound,
            util::bytes(s.uplink_in_bytes),
            s.uplink_vs_min,
            s.uplink_vs_random,
            s.cpu_s
        );
    }
}

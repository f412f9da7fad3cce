//! `teesfs sim`: run pushes at scale in the simulator (`peertree::sim`), which drives the
//! shipping relay state machine of every node under a modelled network.
//!
//! Sweeps job sizes x strategies x payloads on a Tianhe-like machine (groups of 8, width
//! 15), optionally with a two-level hierarchy (super nodes of 14 groups, cabinets of 168),
//! optionally killing nodes mid-push. Prints a table, writes CSV and SVG plots: deployment
//! time against job size per strategy with the model's lower bound (the paper's Fig. 4)
//! and uplink load normalised to `topo` (Fig. 5). All modelling lives in `peertree`; this
//! module plans, runs, formats and draws.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytesize::ByteSize;
use indicatif::{ProgressBar, ProgressStyle};
use peertree::sim::{Network, Sim, SimConfig, SimReport, pick_victims};
use peertree::topology::Topology;
use peertree::{Plan, PlanOptions, Strategy, measure};
use plotters::prelude::*;

/// The modelled machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// Groups of 8 behind a proxy, 10 Gbit/s nodes, 80 Gbit/s proxy port and uplink.
    Tianhe,
    /// Tianhe plus super nodes of 14 groups and cabinets of 168 groups, 2:1 oversubscribed.
    TwoLevel,
    /// The lab's reference shape: 100 Mbit/s slaves, 400 Mbit/s proxy links.
    Lab,
}

/// Arguments of `teesfs sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Job sizes (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "15,120,1080,8760,17560,68160"
    )]
    nodes: Vec<usize>,
    /// Payloads (comma-separated), e.g. 16MiB,333MiB.
    #[arg(long, value_delimiter = ',', default_value = "16MiB", value_parser = super::util::parse_byte_size)]
    payload: Vec<ByteSize>,
    /// Chunk size.
    #[arg(long, default_value = "1MiB", value_parser = super::util::parse_byte_size)]
    chunk: ByteSize,
    /// Strategies (comma-separated): topo, topo-paper, random, hostlist, flat, storage, auto.
    #[arg(long, value_delimiter = ',', default_value = "topo,topo-paper,random,hostlist",
          value_parser = super::util::parse_strategy)]
    strategy: Vec<Strategy>,
    /// The modelled machine.
    #[arg(long, value_enum, default_value_t = Machine::Tianhe)]
    machine: Machine,
    /// Most children per node.
    #[arg(long, default_value_t = 15)]
    width: usize,
    /// `auto` uses storage at or below this many nodes (0: always the tree).
    #[arg(long, default_value_t = 512)]
    threshold: usize,
    /// Seed of the `random` strategy and of the choice of killed nodes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Kill this many random job nodes during the push.
    #[arg(long, default_value_t = 0)]
    kill: usize,
    /// When to kill them (simulated time), e.g. 10ms.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    at: Duration,
    /// Connection set-up cost (default: the machine's).
    #[arg(long, value_parser = humantime::parse_duration)]
    setup: Option<Duration>,
    /// Cores shared by all nodes for chunk processing (default: the machine's; `lab` has
    /// 2, the others a CPU per node). 0: a CPU per node.
    #[arg(long)]
    cores: Option<u32>,
    /// Per-message latency (default: the machine's).
    #[arg(long, value_parser = humantime::parse_duration)]
    latency: Option<Duration>,
    /// Skip `flat` and `storage` above this many nodes (their simulated pushes take minutes
    /// and millions of events).
    #[arg(long, default_value_t = 17_560)]
    max_one_to_all: usize,
    /// Position in the machine (from 1) of the job's first node. 5 (default) makes the
    /// first and last groups partial, as in the planner benchmarks; 1 gives whole groups.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    first: u64,
    /// Mirror `teesfs lab bench`'s reference lab: the `lab` machine and its link rates,
    /// 32 nodes as 4 whole groups of 8 (overrides --machine, --nodes and --first).
    #[arg(long)]
    lab: bool,
    /// Write one CSV row per simulation here.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

/// One simulation's outcome.
struct Row {
    payload: u64,
    nodes: usize,
    strategy: Strategy,
    depth: u32,
    min_uplink: u64,
    report: SimReport,
    wall: Duration,
}

/// Runs `teesfs sim`.
pub fn run(mut args: SimArgs) -> anyhow::Result<()> {
    if args.lab {
        args.machine = Machine::Lab;
        args.nodes = vec![32];
        args.first = 1;
    }
    if args.nodes.is_empty() || args.strategy.is_empty() || args.payload.is_empty() {
        bail!("give at least one --nodes, --strategy and --payload");
    }
    let largest = args.nodes.iter().copied().max().unwrap_or(0);
    let first = usize::try_from(args.first - 1).context("--first is too large")?;
    let topology = machine_topology(args.machine, largest + first + 4)?;
    let mut network = match args.machine {
        Machine::Tianhe => Network::tianhe(),
        Machine::TwoLevel => Network::two_level(),
        Machine::Lab => Network::lab(),
    };
    network.setup = args.setup.unwrap_or(network.setup);
    network.latency = args.latency.unwrap_or(network.latency);
    network.shared_cores = args.cores.unwrap_or(network.shared_cores);
    let all: Vec<String> = (0..topology.len())
        .map(|i| {
            topology
                .host(peertree::topology::TopoId(i as u32))
                .to_string()
        })
        .collect();
    let opts = PlanOptions {
        width: args.width,
        threshold: args.threshold,
        seed: args.seed,
        // The modelled machines have a shared file system.
        shared_storage: true,
        ..PlanOptions::default()
    };

    let mut jobs = Vec::new();
    for payload in &args.payload {
        for &n in &args.nodes {
            for &s in &args.strategy {
                let one_to_all = matches!(s, Strategy::Flat | Strategy::Storage);
                if !(one_to_all && n > args.max_one_to_all) {
                    jobs.push((payload.as_u64(), n, s));
                }
            }
        }
    }
    let bar = if jobs.len() > 1 {
        ProgressBar::new(jobs.len() as u64).with_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed}]")
                .context("progress bar template")?,
        )
    } else {
        ProgressBar::hidden()
    };
    let mut rows = Vec::new();
    for (payload, n, strategy) in jobs {
        bar.set_message(format!("{n} nodes, {strategy}, {}", ByteSize::b(payload)));
        // Contiguous jobs from --first: by default mid-group (node 5), so the first and
        // last groups are partial.
        let job = &all[first..first + n];
        let plan = peertree::plan(&topology, job, strategy, &opts)
            .with_context(|| format!("planning {n} nodes with {strategy}"))?;
        let mut cfg = SimConfig::new(network.clone(), payload, args.chunk.as_u64());
        cfg.limit = Duration::from_secs(24 * 3600);
        let started = Instant::now();
        let report = simulate(&plan, &topology, cfg, args.kill, args.at, args.seed)
            .with_context(|| format!("simulating {n} nodes with {strategy}"))?;
        let metrics = measure(&plan, &topology, payload);
        rows.push(Row {
            payload,
            nodes: n,
            strategy: plan.strategy,
            depth: plan.depth(),
            min_uplink: metrics.min_uplink_bytes,
            report,
            wall: started.elapsed(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();

    print!("{}", table(&rows, args.kill));
    if let Some(path) = &args.csv {
        std::fs::write(path, csv(&rows, args.machine))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for payload in &args.payload {
            let p = payload.as_u64();
            let these: Vec<&Row> = rows.iter().filter(|r| r.payload == p).collect();
            let tag = if p % (1 << 20) == 0 {
                format!("{}MiB", p >> 20)
            } else {
                format!("{p}B")
            };
            let f4 = dir.join(format!("sim-fig4-{tag}.svg"));
            plot_time(&f4, &these, p)?;
            let f5 = dir.join(format!("sim-fig5-{tag}.svg"));
            plot_uplink(&f5, &these, p)?;
            println!("wrote {} and {}", f4.display(), f5.display());
        }
    }
    Ok(())
}

fn simulate(
    plan: &Plan,
    topology: &Topology,
    cfg: SimConfig,
    kill: usize,
    at: Duration,
    seed: u64,
) -> anyhow::Result<SimReport> {
    let mut sim = Sim::new(plan, Some(topology), cfg, Instant::now())?;
    if kill > 0 {
        sim.kill(at, pick_victims(plan, kill, seed));
    }
    Ok(sim.run()?)
}

/// The machine: `nodes` hosts `cn00001...` in groups of 8, the first the proxy, with the
/// two upper levels for `two-level`.
fn machine_topology(machine: Machine, nodes: usize) -> anyhow::Result<Topology> {
    let nodes = nodes.next_multiple_of(8);
    let mut toml = format!(
        "[[pattern]]\nnodes = \"cn[00001-{nodes:05}]\"\ngroup_size = 8\nproxy = \"first\"\n"
    );
    if machine == Machine::TwoLevel {
        toml.push_str("[[level]]\nname = \"supernode\"\nsize = 112\n");
        toml.push_str("[[level]]\nname = \"cabinet\"\nsize = 1344\n");
    }
    Ok(Topology::from_toml(&toml)?)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The `topo` row of the same payload and size, if it was run.
fn topo_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter()
        .find(|t| t.strategy == Strategy::Topo && t.payload == r.payload && t.nodes == r.nodes)
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

fn table(rows: &[Row], kill: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| payload | nodes | strategy | depth | deploy | ÷ bound | ÷ topo | uplink in | ÷ topo | ÷ min |{} events | wall |",
        if kill > 0 {
            " killed | failed edges | unreachable | incomplete |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|{}---:|---:|",
        if kill > 0 { "---:|---:|---:|---:|" } else { "" }
    );
    for r in rows {
        let t = topo_of(rows, r);
        let rep = &r.report;
        let failures = if kill > 0 {
            format!(
                " {} | {} | {} | {} |",
                rep.killed,
                rep.failed_edges.len(),
                rep.unreachable.len(),
                rep.incomplete.len()
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} ms | {:.2} | {} | {:.2} GiB | {} | {:.2} |{failures} {} | {:.1} s |",
            ByteSize::b(r.payload),
            r.nodes,
            r.strategy,
            r.depth,
            secs(rep.deploy) * 1e3,
            secs(rep.deploy) / secs(rep.lower_bound),
            ratio(secs(rep.deploy), t.map(|t| secs(t.report.deploy))),
            rep.uplink_in as f64 / (1u64 << 30) as f64,
            ratio(rep.uplink_in as f64, t.map(|t| t.report.uplink_in as f64)),
            rep.uplink_in as f64 / r.min_uplink.max(1) as f64,
            rep.events,
            secs(r.wall),
        );
    }
    out
}

fn csv(rows: &[Row], machine: Machine) -> String {
    let mut out = String::from(
        "machine,payload_bytes,nodes,strategy,depth,deploy_s,urgent_s,root_done_s,lower_bound_s,\
         deploy_over_bound,deploy_over_topo,uplink_in_bytes,uplink_out_bytes,uplink_over_topo,\
         min_uplink_bytes,core_bytes,start_bytes,link_bytes,killed,failed_edges,unreachable,incomplete,\
         events,wall_s\n",
    );
    let machine = format!("{machine:?}").to_lowercase();
    for r in rows {
        let t = topo_of(rows, r);
        let rep = &r.report;
        let _ = writeln!(
            out,
            "{machine},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.4},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3}",
            r.payload,
            r.nodes,
            r.strategy,
            r.depth,
            secs(rep.deploy),
            secs(rep.urgent),
            secs(rep.root_done),
            secs(rep.lower_bound),
            secs(rep.deploy) / secs(rep.lower_bound),
            ratio(secs(rep.deploy), t.map(|t| secs(t.report.deploy))),
            rep.uplink_in,
            rep.uplink_out,
            ratio(rep.uplink_in as f64, t.map(|t| t.report.uplink_in as f64)),
            r.min_uplink,
            rep.core_bytes,
            rep.start_bytes,
            rep.link_bytes,
            rep.killed,
            rep.failed_edges.len(),
            rep.unreachable.len(),
            rep.incomplete.len(),
            rep.events,
            secs(r.wall),
        );
    }
    out
}

const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// Strategies present in `rows`, in order of first appearance.
fn strategies(rows: &[&Row]) -> Vec<Strategy> {
    let mut out: Vec<Strategy> = Vec::new();
    for r in rows {
        if !out.contains(&r.strategy) {
            out.push(r.strategy);
        }
    }
    out
}

fn x_range(rows: &[&Row]) -> std::ops::Range<f64> {
    let lo = rows.iter().map(|r| r.nodes).min().unwrap_or(1) as f64;
    let hi = rows.iter().map(|r| r.nodes).max().unwrap_or(10) as f64;
    (lo / 1.5)..(hi * 1.5)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e:?}")
}

/// Deployment time against job size per strategy, with the lower bound (Fig. 4).
fn plot_time(path: &Path, rows: &[&Row], payload: u64) -> anyhow::Result<()> {
    let times: Vec<f64> = rows.iter().map(|r| secs(r.report.deploy)).collect();
    let bound = rows.first().map_or(1e-3, |r| secs(r.report.lower_bound));
    let lo = times.iter().copied().fold(bound, f64::min) / 1.5;
    let hi = times.iter().copied().fold(bound, f64::max) * 1.5;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Simulated deployment time, {} (cf. TEES Fig. 4)",
                ByteSize::b(payload)
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(rows).log_scale(), (lo..hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("job nodes")
        .y_desc("seconds until every node holds the payload")
        .draw()
        .map_err(plot_err)?;
    for (i, s) in strategies(rows).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.strategy == s)
            .map(|r| (r.nodes as f64, secs(r.report.deploy)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    let xr = x_range(rows);
    chart
        .draw_series(LineSeries::new(
            vec![(xr.start, bound), (xr.end, bound)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label("lower bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Bytes entering groups per strategy, as a multiple of `topo`'s (Fig. 5).
fn plot_uplink(path: &Path, rows: &[&Row], payload: u64) -> anyhow::Result<()> {
    let norm = |r: &Row| {
        rows.iter()
            .find(|t| t.strategy == Strategy::Topo && t.nodes == r.nodes)
            .map(|t| r.report.uplink_in as f64 / t.report.uplink_in.max(1) as f64)
    };
    let hi = rows.iter().filter_map(|r| norm(r)).fold(1.0f64, f64::max) * 1.15;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Simulated group-uplink load ÷ topo, {} (cf. TEES Fig. 5)",
                ByteSize::b(payload)
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(rows).log_scale(), 0.0..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("job nodes")
        .y_desc("bytes into groups ÷ topo's")
        .draw()
        .map_err(plot_err)?;
    for (i, s) in strategies(rows).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.strategy == s)
            .filter_map(|r| norm(r).map(|v| (r.nodes as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimArgs,
    }

    /// `--lab` simulates the lab bench's scenario: 32 nodes in 4 whole groups on the lab
    /// machine, so `topo` enters each group once (4 x the payload) at depth 2.
    #[test]
    fn lab_preset_is_four_whole_groups_on_the_lab_machine() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lab.csv");
        let csv_arg = path.to_str().expect("utf-8 path");
        let cli = Cli::parse_from([
            "sim",
            "--lab",
            "--strategy",
            "topo,random",
            "--csv",
            csv_arg,
        ]);
        run(cli.args).expect("simulates");
        let text = std::fs::read_to_string(&path).expect("csv written");
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect())
            .collect();
        assert_eq!(rows.len(), 2);
        let payload = 16u64 << 20;
        for r in &rows {
            assert_eq!((r[0], r[2]), ("lab", "32"), "{r:?}");
            assert_eq!(r[14], (4 * payload).to_string(), "minimum uplink: 4 groups");
        }
        let topo = &rows[0];
        assert_eq!((topo[3], topo[4]), ("topo", "2"));
        assert_eq!(
            topo[11],
            (4 * payload).to_string(),
            "topo enters each group once"
        );
        let random_up: u64 = rows[1][11].parse().expect("bytes");
        assert!(random_up > 4 * payload);
    }
}

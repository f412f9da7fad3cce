//! `teesfs sim`: run pushes at scale in the simulator (`peertree::sim`), which drives the
//! shipping relay state machine of every node under a modelled network.
//!
//! Sweeps job sizes x strategies x payloads on a Tianhe-like machine (groups of 8, width
//! 15), optionally with a two-level hierarchy (super nodes of 14 groups, cabinets of 168),
//! optionally killing nodes mid-push. Prints a table, writes CSV and SVG plots (the paper's
//! Fig. 4 and Fig. 5). The sweep, its table and plots are `lab::sweep` and `lab::plot`;
//! this module parses, shows progress and writes files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use bytesize::ByteSize;
use indicatif::{ProgressBar, ProgressStyle};
use lab::plot;
use lab::sweep::{self, Sweep, SweepSpec};
use peertree::Strategy;

/// The modelled machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// Groups of 8 behind a proxy, 10 Gbit/s nodes, 80 Gbit/s proxy port and uplink.
    Tianhe,
    /// Tianhe plus super nodes of 14 groups and cabinets of 168 groups, 2:1 oversubscribed.
    TwoLevel,
    /// The lab's reference shape: 100 Mbit/s slaves, 400 Mbit/s proxy links.
    Lab,
    /// The lab in its scale model (`teesfs lab up`'s default): each node on 0.0486 cores
    /// and every link rate x0.76; every CPU cost stretched by 1 / 0.0486.
    LabModel,
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
    /// Chunk size (default: per payload, what `teesfs publish --chunk-size auto` chooses:
    /// 1/64 of it between 256KiB and 1MiB).
    #[arg(long, value_parser = super::util::parse_byte_size)]
    chunk: Option<ByteSize>,
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
    /// CPU of each end of a new connection (its handshake), queued on each host's CPU so
    /// a node's handshakes take turns, on top of --setup (default: the machine's: `lab`
    /// and `lab-model` 450us, measured; `tianhe` none, its 2 ms set-up being on cores to
    /// spare).
    #[arg(long, value_parser = humantime::parse_duration)]
    setup_cpu: Option<Duration>,
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
    /// Bytes of each payload in its urgent set, pushed first (default: all of it).
    #[arg(long, value_name = "SIZE", value_parser = super::util::parse_byte_size)]
    urgent: Option<ByteSize>,
    /// The application's own start on one node from local data: the "app started" column
    /// adds it to the later of each node's mount and urgent set.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = humantime::parse_duration)]
    app_start: Duration,
    /// Plan without the machine's link rates, as `teesfs push` does without `--links` or
    /// learned rates: a proxy then feeds 3 of its members and the rest hang below them as
    /// chains (so that the push shows a node's rate), and an uplink is taken to carry a
    /// whole group (Tianhe).
    #[arg(long)]
    unrated: bool,
    /// Mirror `teesfs lab bench`'s reference lab: the `lab` machine (or `lab-model`, if
    /// given) and its link rates, 32 nodes as 4 whole groups of 8 (overrides --nodes and
    /// --first).
    #[arg(long)]
    lab: bool,
    /// Write one CSV row per simulation here.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Write each simulation as a push report into this directory, as `teesfs push
    /// --report` writes one (`sim-<nodes>-<strategy>-<payload>.json`), with the page `teesfs
    /// report` draws from it beside it (`.html`): the tree or group map, every node's
    /// arrivals, failed edges in red.
    #[arg(long, value_name = "DIR")]
    reports: Option<PathBuf>,
}

/// Runs `teesfs sim`.
pub fn run(mut args: SimArgs) -> anyhow::Result<()> {
    if args.lab {
        if args.machine != Machine::LabModel {
            args.machine = Machine::Lab;
        }
        args.nodes = vec![32];
        args.first = 1;
    }
    let machine = match args.machine {
        Machine::Tianhe => sweep::Machine::Tianhe,
        Machine::TwoLevel => sweep::Machine::TwoLevel,
        Machine::Lab => sweep::Machine::Lab,
        Machine::LabModel => sweep::Machine::LabModel,
    };
    let payloads: Vec<u64> = args.payload.iter().map(ByteSize::as_u64).collect();
    let sweep = Sweep::new(SweepSpec {
        machine,
        nodes: args.nodes.clone(),
        payloads: payloads.clone(),
        chunk: args.chunk.as_ref().map(ByteSize::as_u64),
        strategies: args.strategy.clone(),
        width: args.width,
        threshold: args.threshold,
        seed: args.seed,
        kill: args.kill,
        kill_at: args.at,
        setup: args.setup,
        setup_cpu: args.setup_cpu,
        cores: args.cores,
        latency: args.latency,
        max_one_to_all: args.max_one_to_all,
        first: usize::try_from(args.first - 1).context("--first is too large")?,
        urgent: args.urgent.map(|u| u.as_u64()),
        app_start: args.app_start,
        unrated: args.unrated,
        reports: args.reports.is_some(),
    })?;
    let jobs = sweep.jobs();
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
        rows.push(sweep.run(payload, n, strategy)?);
        bar.inc(1);
    }
    bar.finish_and_clear();

    out!("{}", sweep::table(&rows, args.kill));
    if let Some(path) = &args.csv {
        super::outfile::write(path, sweep::csv(&rows, machine).as_bytes())?;
        outln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.reports {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for r in &rows {
            let Some(rep) = &r.push else { continue };
            let base = dir.join(format!(
                "sim-{}-{}-{}",
                r.nodes,
                r.strategy,
                payload_tag(r.payload)
            ));
            let json = base.with_extension("json");
            super::outfile::write(&json, &serde_json::to_vec_pretty(rep)?)?;
            let title = format!(
                "simulated push of {} to {} nodes ({})",
                ByteSize::b(r.payload),
                r.nodes,
                r.strategy
            );
            let html = base.with_extension("html");
            super::outfile::write(&html, pushreport::html(rep, &title)?.as_bytes())?;
            outln!("wrote {} and {}", json.display(), html.display());
        }
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for p in payloads {
            let these: Vec<&sweep::Row> = rows.iter().filter(|r| r.payload == p).collect();
            let tag = payload_tag(p);
            let f4 = dir.join(format!("sim-fig4-{tag}.svg"));
            plot::plot_time(&f4, &these, p)?;
            let f5 = dir.join(format!("sim-fig5-{tag}.svg"));
            plot::plot_uplink(&f5, &these, p)?;
            outln!("wrote {} and {}", f4.display(), f5.display());
        }
    }
    Ok(())
}

/// A payload in file names: `16MiB`, or bytes.
fn payload_tag(p: u64) -> String {
    if p.is_multiple_of(1 << 20) {
        format!("{}MiB", p >> 20)
    } else {
        format!("{p}B")
    }
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
    /// machine, so `topo` enters each group once (4 x the payload), at depth 3: planned
    /// with the machine's rates, a proxy feeds the 4 members its port carries and 3 of
    /// them feed the other 3.
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
        // Depth 5: the login node feeds one proxy, whose members feed the other proxies.
        assert_eq!((topo[3], topo[4]), ("topo", "5"));
        assert_eq!(
            topo[11],
            (4 * payload).to_string(),
            "topo enters each group once"
        );
        let random_up: u64 = rows[1][11].parse().expect("bytes");
        assert!(random_up > 4 * payload);
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use clap::Parser;
    use teesfs_node::report::PushReport;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimArgs,
    }

    /// Issue 19: the simulator's pushes are drawn by the same code as real ones: `--reports`
    /// writes each as a push report and its page.
    #[test]
    fn a_simulated_push_is_written_as_a_push_report_and_drawn() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("reports");
        let cli = Cli::parse_from([
            "sim",
            "--lab",
            "--strategy",
            "topo",
            "--kill",
            "1",
            "--at",
            "300ms",
            "--reports",
            out.to_str().expect("utf-8 path"),
        ]);
        run(cli.args).expect("simulates");
        let json = out.join("sim-32-topo-16MiB.json");
        let rep: PushReport =
            serde_json::from_slice(&std::fs::read(&json).expect("report written"))
                .expect("a push report");
        assert_eq!((rep.nodes, rep.per_node.len()), (32, 32));
        assert_eq!(rep.total_bytes, 16 << 20);
        assert_eq!(rep.uplinks.len(), 4, "{:?}", rep.uplinks);
        assert_eq!(rep.failures.len(), 1, "the killed node: {:?}", rep.failures);
        let dead = &rep.failures[0].child;
        for n in rep.per_node.iter().filter(|n| &n.host != dead) {
            assert!(n.all_s.is_some() && n.group.is_some(), "{n:?}");
        }
        let sent: u64 = rep.edges.iter().map(|e| e.bytes).sum();
        assert!(
            sent >= 31 * (16 << 20),
            "every survivor was sent the layer: {sent}"
        );
        let page = std::fs::read_to_string(out.join("sim-32-topo-16MiB.html")).expect("page");
        assert!(page.contains("<svg") && page.contains("32 nodes"), "drawn");
    }
}

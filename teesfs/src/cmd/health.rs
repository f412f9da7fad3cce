//! `teesfs health`: probe the job's tree with an empty broadcast and report every edge's
//! round trip and every edge where it stalled (with `--rates`, [`super::health_rates`]).

use std::time::Duration;

use anyhow::bail;
use peertree::Strategy;
use peertree::relay::{JobId, Timing};
use teesfs_node::health::{HealthReport, ProbeOutcome, ProbeSpec, probe, report};

use super::jobspec::{JobArgs, RootArgs, RootContact};
use super::util;

/// How to print the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: totals, per-group round trips, failed edges.
    Text,
    /// For monitoring: one JSON document, `{"version": 1, "job", "root", "strategy",
    /// "nodes", "answered", "ok", "deadline_s", "elapsed_s", "timed_out", "rtt_ms",
    /// "groups", "edges", "failures", "unreachable"}` (teesfs_node::health::HealthReport).
    Json,
}

/// Arguments of `teesfs health`.
///
/// Sends an empty broadcast down the tree `teesfs push` would use for these nodes (same
/// planning arguments), measures each edge's round trip, and reports the edges where it
/// stalled with the unreachable nodes as a hostlist. Exits 0 only when every node answered.
/// With --rates it sends filler of a known size instead and measures each edge's rate.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs health --nodes 'cn[0001-0128]' --cluster 'cn[0001-1024]' --group-size 8 --login login1
  teesfs health --nodes \"$SLURM_JOB_NODELIST\" --deadline 10s --all-groups
  teesfs health --nodes 'cn[01-64]' --format json > health.json   # for monitoring
  teesfs health --rates --store /shared/teesfs --nodes \"$SLURM_JOB_NODELIST\"   # learn link rates
  teesfs health --rates 64MiB --store /shared/teesfs --nodes 'cn[01-64]' --format json

With --rates, each edge's rate (as a push measures it) is printed with the slowest edge, and
kept for the next push; configured rates (--links, [topology] links) still override them.

Exit status 0 when every node answered before --deadline (with --rates: took the filler
before --timeout), 1 otherwise (the unreachable nodes are printed as a hostlist).")]
pub struct HealthArgs {
    #[command(flatten)]
    pub job: JobArgs,
    #[command(flatten)]
    pub root: RootArgs,
    /// Wait this long for answers (the report is out as soon as every node answered, else
    /// at this deadline; nodes silent by then are reported). A child silent for a fifth of
    /// it is routed around: its children are asked directly.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub deadline: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Text format: list every group (default: groups with failures and the 10 slowest);
    /// with --rates, every edge (default: the slowest).
    #[arg(long)]
    pub all_groups: bool,
    /// Measure each edge's rate instead: send SIZE of filler to every node down the
    /// planned tree as a push sends a layer (zeros, taken as probe payload: not verified,
    /// stored or mounted), and keep the figures in the store's learned link rates
    /// (STORE/learned/rates.json), which the next plan without configured rates uses.
    /// SIZE per node, at least 4MiB (default 8MiB; a link an edge crosses in less than
    /// 0.2 s is not measured, so give fast networks more, e.g. 4GiB at 100 Gbit/s).
    #[arg(
        long,
        value_name = "SIZE",
        num_args = 0..=1,
        default_missing_value = "8MiB",
        value_parser = util::parse_byte_size
    )]
    pub rates: Option<bytesize::ByteSize>,
    /// With --rates: the store whose learned link rates get the figures (default: the
    /// site's [store] path).
    #[arg(long, value_name = "DIR")]
    pub store: Option<std::path::PathBuf>,
    /// With --rates: how long every node may take to receive the filler (--deadline is
    /// then the time a silent node is given before it is routed around, times five).
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Runs `teesfs health`.
pub fn run(args: HealthArgs) -> anyhow::Result<()> {
    if let Some(size) = args.rates {
        return super::health_rates::run(args, size.as_u64());
    }
    let (plan, topology, job, outcome) = probe_tree(&args, None, args.deadline)?;
    let rep = report(&plan, Some(&topology), job, args.deadline, &outcome);
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&rep)?),
        Format::Text => out!("{}", render_text(&rep, args.all_groups)),
    }
    if !rep.ok {
        bail!(
            "{} of {} node(s) did not answer: {}",
            rep.nodes - rep.answered,
            rep.nodes,
            rep.unreachable
        );
    }
    Ok(())
}

/// Plans the tree of `args`, sends the probe down it (with `filler`, a rates probe) and
/// waits up to `wait` for every node; returns the plan, its topology, the probe's job id
/// and what the root saw.
pub(super) fn probe_tree(
    args: &HealthArgs,
    filler: Option<peertree::relay::Filler>,
    wait: Duration,
) -> anyhow::Result<(peertree::Plan, peertree::Topology, JobId, ProbeOutcome)> {
    if args.deadline < Duration::from_millis(250) {
        bail!(
            "--deadline {} is too short to hear from anyone; give at least 250ms",
            util::duration(args.deadline)
        );
    }
    let (_nodes, topology, mut plan) = args.job.plan()?;
    if plan.strategy == Strategy::Storage {
        // Shared-storage jobs have no tree: the root talks to every node itself.
        plan = plan.flat_without_storage();
    }
    let RootContact {
        nodes,
        identity,
        advertise,
    } = args.root.contact(&plan, &args.job.login)?;
    let job = teesfs_node::fresh_job_id(b"health");
    let silence = (args.deadline / 5).max(Duration::from_millis(50));
    let timing = Timing {
        heartbeat_ms: (silence.as_millis() / 4).clamp(10, u32::MAX as u128) as u32,
        deadline_ms: silence.as_millis().clamp(50, u32::MAX as u128) as u32,
    };
    let spec = ProbeSpec {
        job,
        nodes,
        timing,
        identity,
        listen: args.root.listen,
        advertise,
        filler,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = rt.block_on(probe(spec, wait))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok((plan, topology, job, outcome))
}

fn stats(s: Option<teesfs_node::health::RttStats>) -> String {
    s.map_or("-".into(), |s| {
        format!("{:.2} / {:.2} / {:.2} ms", s.min, s.median, s.max)
    })
}

/// Groups shown by default beside those with failures.
const SLOWEST: usize = 10;

/// The text report: totals, a bounded group table, every failed edge.
fn render_text(r: &HealthReport, all_groups: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "health: {}/{} nodes answered in {:.2} s (deadline {}, {} plan from {})",
        r.answered,
        r.nodes,
        r.elapsed_s,
        util::duration(Duration::from_secs_f64(r.deadline_s)),
        r.strategy,
        r.root
    );
    let _ = writeln!(
        out,
        "  round trip per edge, min / median / max: {} over {} edges",
        stats(r.rtt_ms),
        r.edges.len()
    );
    if !r.groups.is_empty() {
        let mut shown: Vec<&teesfs_node::health::GroupHealth> = r.groups.iter().collect();
        if !all_groups && r.groups.len() > SLOWEST {
            let mut slow: Vec<_> = r.groups.iter().filter(|g| g.answered == g.nodes).collect();
            slow.sort_by(|a, b| {
                let m = |g: &&teesfs_node::health::GroupHealth| g.rtt_ms.map_or(0.0, |s| s.max);
                m(b).total_cmp(&m(a))
            });
            slow.truncate(SLOWEST);
            shown = r
                .groups
                .iter()
                .filter(|g| g.answered < g.nodes || slow.iter().any(|s| s.group == g.group))
                .collect();
        }
        let _ = writeln!(
            out,
            "  {:>6}  {:<16} {:>9}  rtt min / median / max",
            "group", "proxy", "answered"
        );
        for g in &shown {
            let _ = writeln!(
                out,
                "  {:>6}  {:<16} {:>9}  {}",
                g.group,
                g.proxy,
                format!("{}/{}", g.answered, g.nodes),
                stats(g.rtt_ms)
            );
        }
        if shown.len() < r.groups.len() {
            let _ = writeln!(
                out,
                "  ... {} more groups, every node answered (--all-groups lists them, \
                 --format json has every edge)",
                r.groups.len() - shown.len()
            );
        }
    }
    for f in &r.failures {
        let _ = writeln!(
            out,
            "  FAILED edge {} -> {}: {} node(s) unreachable: {}",
            f.parent, f.child, f.count, f.unreachable
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use teesfs_node::health::{EdgeFailure, GroupHealth, RttStats};

    use super::*;

    /// A 10,000-node report: 1,250 groups of 8, one group cut off, one leaf dead.
    fn big() -> HealthReport {
        let groups: Vec<GroupHealth> = (0..1250)
            .map(|g| GroupHealth {
                group: g,
                proxy: format!("cn{:05}", g * 8 + 1),
                nodes: 8,
                answered: match g {
                    17 => 0,
                    400 => 7,
                    _ => 8,
                },
                rtt_ms: Some(RttStats {
                    min: 0.2,
                    median: 0.4,
                    max: 0.5 + g as f64 / 1000.0,
                }),
            })
            .collect();
        HealthReport {
            version: 1,
            job: "0".into(),
            root: "login".into(),
            strategy: "topo".into(),
            nodes: 10_000,
            answered: 9_991,
            ok: false,
            deadline_s: 10.0,
            elapsed_s: 3.0,
            timed_out: false,
            rtt_ms: RttStats::of(&[0.2, 0.4, 1.7]),
            groups,
            edges: Vec::new(),
            failures: vec![
                EdgeFailure {
                    parent: "cn00001".into(),
                    child: "cn00137".into(),
                    unreachable: "cn[00137-00144]".into(),
                    count: 8,
                },
                EdgeFailure {
                    parent: "cn03201".into(),
                    child: "cn03205".into(),
                    unreachable: "cn03205".into(),
                    count: 1,
                },
            ],
            unreachable: "cn[00137-00144,03205]".into(),
        }
    }

    #[test]
    fn a_10000_node_report_fits_on_a_screen_and_lists_every_failure() {
        let text = render_text(&big(), false);
        let lines: Vec<&str> = text.lines().collect();
        // Totals, header, the 2 damaged groups, the 10 slowest, the "more" line, 2 failures.
        assert_eq!(lines.len(), 2 + 1 + 2 + SLOWEST + 1 + 2, "{text}");
        assert!(text.contains("9991/10000 nodes answered"), "{text}");
        assert!(
            text.contains("FAILED edge cn00001 -> cn00137: 8 node(s) unreachable: cn[00137-00144]")
        );
        assert!(text.contains("FAILED edge cn03201 -> cn03205: 1 node(s) unreachable: cn03205"));
        assert!(text.contains("1238 more groups"), "{text}");
        // The slowest healthy group is shown, a fast one is not.
        assert!(text.contains("cn09993"), "{text}");
        assert!(!text.contains("cn00009 "), "{text}");
        // Everything on request.
        assert_eq!(render_text(&big(), true).lines().count(), 2 + 1 + 1250 + 2);
    }
}

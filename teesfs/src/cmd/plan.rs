//! `teesfs plan`: show the distribution tree a job would use, and what it costs.
//!
//! Reads the node list (`--nodes` or `$SLURM_JOB_NODELIST`) and the topology
//! (`--topology FILE` or `--cluster EXPR --group-size N`), asks `peertree` for a plan and
//! prints its metrics as text, JSON (a stable interface, see `docs/planner.md`) or DOT.
//! All planning logic lives in `peertree`; this module only does I/O and formatting.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::bail;
use bytesize::ByteSize;
use peertree::topology::Topology;
use peertree::{Metrics, Plan, PlanOptions, Role, Strategy};
use serde::Serialize;

use super::jobspec::{JobArgs, explain};
use super::util;

/// Jobs larger than this print a summary unless `--tree` asks for the whole tree.
const TREE_LIMIT: usize = 64;

/// Version of the JSON document; bumped only on incompatible changes.
const JSON_VERSION: u32 = 1;

/// Output formats of `teesfs plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable summary (and the tree for small jobs).
    Text,
    /// Machine-readable document, documented in docs/planner.md.
    Json,
    /// Graphviz, groups drawn as clusters.
    Dot,
}

/// Arguments of `teesfs plan`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs plan --nodes 'cn[0001-0128]' --cluster 'cn[0001-1024]' --group-size 8 --login login1
  teesfs plan --nodes 'cn[001-512]' --topology /etc/teesfs/topology.toml --compare
  teesfs plan --nodes 'cn[01-64]' --format dot | dot -Tsvg > tree.svg
  teesfs plan --nodes 'cn[01-64]' --format json | python3 -m json.tool

The JSON document carries \"version\": 1 and is described in docs/planner.md.")]
pub struct PlanArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Size of the data to distribute, e.g. 16MiB, 1GiB, 16MB.
    #[arg(long, default_value = "16MiB", value_parser = super::util::parse_byte_size)]
    payload: ByteSize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Print the whole tree in text format even for jobs over 64 hosts.
    #[arg(long)]
    tree: bool,
    /// The store whose learned link rates the plan uses when none are configured
    /// (STORE/learned/rates.json, what its pushes measured; default: the site's [store]
    /// path).
    #[arg(long, value_name = "DIR")]
    store: Option<std::path::PathBuf>,
    /// Plan every strategy and print them side by side, as ratios to topo and the minimum.
    #[arg(long)]
    compare: bool,
    /// The mean stored chunk of the layer to push (`teesfs inspect` gives its chunks and
    /// stored bytes), as `teesfs push` tells the planner: from 64KiB a group without its
    /// proxy hangs below its deputy as a chain of up to 24 nodes, else of up to 8 and as a
    /// binary tree beyond. Default: unknown, planned as for small chunks.
    #[arg(long, value_name = "SIZE", value_parser = super::util::parse_byte_size)]
    chunk: Option<ByteSize>,
}

/// Runs `teesfs plan`.
pub fn run(mut args: PlanArgs) -> anyhow::Result<()> {
    args.job.rates_store = args.store.clone();
    args.job.mean_chunk = args.chunk.map(|c| c.as_u64());
    let nodes = args.job.job_nodes()?;
    let topology = args.job.topology(&nodes)?;
    let rates = args.job.rates_used(&nodes)?;
    let opts = args.job.options()?;
    let payload = args.payload.as_u64();
    let stdout = std::io::stdout().lock();
    let mut out = BufWriter::new(stdout);

    if args.compare {
        let rows = Strategy::CONCRETE
            .into_iter()
            .map(|s| timed_plan(&topology, &nodes, s, &opts, payload))
            .collect::<anyhow::Result<Vec<_>>>()?;
        match args.format {
            Format::Text => write!(out, "{}", compare_text(&rows, nodes.len(), payload))?,
            Format::Json => {
                let docs: Vec<JsonPlan<'_>> = rows
                    .iter()
                    .map(|r| JsonPlan::new(&r.plan, &topology, &r.metrics, None))
                    .collect();
                serde_json::to_writer_pretty(&mut out, &docs)?;
                writeln!(out)?;
            }
            Format::Dot => {
                bail!("--compare prints text or json; pick one strategy for --format dot")
            }
        }
        return Ok(out.flush()?);
    }

    let row = timed_plan(&topology, &nodes, args.job.strategy, &opts, payload)?;
    let requested = (args.job.strategy != row.plan.strategy).then_some(args.job.strategy);
    match args.format {
        Format::Text => {
            write!(out, "{}", summary(&row, &topology, requested))?;
            writeln!(out, "link rates: {}", rates.describe())?;
            if args.tree || row.plan.len() <= TREE_LIMIT {
                writeln!(out)?;
                write_tree(&mut out, &row.plan, &topology)?;
            } else {
                writeln!(
                    out,
                    "\n(tree of {} hosts not shown: add --tree, or use --format json/dot)",
                    row.plan.len()
                )?;
            }
        }
        Format::Json => {
            let mut doc = JsonPlan::new(&row.plan, &topology, &row.metrics, requested);
            doc.rates = Some(&rates);
            // Pretty for plans a person reads; compact for big ones (same document).
            if row.plan.len() <= TREE_LIMIT {
                serde_json::to_writer_pretty(&mut out, &doc)?;
            } else {
                serde_json::to_writer(&mut out, &doc)?;
            }
            writeln!(out)?;
        }
        Format::Dot => write_dot(&mut out, &row.plan, &topology)?,
    }
    Ok(out.flush()?)
}

/// A plan with its metrics and how long planning took.
struct Row {
    plan: Plan,
    metrics: Metrics,
    took: Duration,
}

fn timed_plan(
    topology: &Topology,
    nodes: &[String],
    strategy: Strategy,
    opts: &PlanOptions,
    payload: u64,
) -> anyhow::Result<Row> {
    let start = Instant::now();
    let plan = peertree::plan(topology, nodes, strategy, opts).map_err(explain)?;
    let took = start.elapsed();
    let metrics = peertree::measure(&plan, topology, payload);
    Ok(Row {
        plan,
        metrics,
        took,
    })
}

fn size(bytes: u64) -> String {
    ByteSize(bytes).to_string()
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.2}x", a as f64 / b as f64)
    }
}

fn summary(row: &Row, topology: &Topology, requested: Option<Strategy>) -> String {
    let (p, m) = (&row.plan, &row.metrics);
    let mut s = String::new();
    let strategy = match requested {
        Some(r) => format!("{} (from {r}, {} nodes)", p.strategy, m.job_nodes),
        None => p.strategy.to_string(),
    };
    let levels = if topology.levels().is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = topology.levels().iter().map(|l| l.name.as_str()).collect();
        format!(", levels {}", names.join(" < "))
    };
    let fanout = m
        .fanout_histogram
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| format!("{c}:{n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let hops = m
        .edges_by_hops
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(h, n)| format!("{h}:{n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let per_level = m
        .nodes_per_level
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" / ");
    let rows: [(&str, String); 11] = [
        (
            "strategy",
            format!("{strategy}, width {}, root {}", p.width, p.host(p.root)),
        ),
        (
            "job",
            format!("{} nodes in {} groups{levels}", m.job_nodes, m.groups),
        ),
        (
            "borrowed",
            format!("{} proxies   orphans {}", p.borrowed.len(), p.orphans.len()),
        ),
        (
            "depth",
            format!("{}   max fan-out {}", m.depth, m.max_fanout),
        ),
        ("per level", per_level),
        ("fan-out", format!("{fanout}   (children:hosts)")),
        ("payload", size(m.payload)),
        (
            "uplink in",
            format!(
                "{}   {} the minimum ({})",
                size(m.uplink_bytes),
                ratio(m.uplink_bytes, m.min_uplink_bytes),
                size(m.min_uplink_bytes)
            ),
        ),
        ("uplink out", size(m.uplink_out_bytes)),
        (
            "hop-bytes",
            format!("{}·hops   edges by hops {hops}", size(m.hop_bytes)),
        ),
        (
            "planned in",
            format!("{:.1} ms", row.took.as_secs_f64() * 1e3),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "{k:<11} {v}");
    }
    s
}

fn compare_text(rows: &[Row], nodes: usize, payload: u64) -> String {
    let topo = &rows[0].metrics;
    let mut s = format!(
        "{nodes} nodes, payload {}; ratios to topo and to the minimum\n\n",
        size(payload)
    );
    let _ = writeln!(
        s,
        "{:<11} {:>5} {:>7} {:>11} {:>8} {:>8} {:>13} {:>8} {:>8} {:>9}",
        "strategy",
        "depth",
        "fan-out",
        "uplink in",
        "/topo",
        "/min",
        "hop-bytes",
        "/topo",
        "/min",
        "plan ms"
    );
    for r in rows {
        let m = &r.metrics;
        let _ = writeln!(
            s,
            "{:<11} {:>5} {:>7} {:>11} {:>8} {:>8} {:>13} {:>8} {:>8} {:>9.2}",
            r.plan.strategy.name(),
            m.depth,
            m.max_fanout,
            size(m.uplink_bytes),
            ratio(m.uplink_bytes, topo.uplink_bytes),
            ratio(m.uplink_bytes, m.min_uplink_bytes),
            size(m.hop_bytes),
            ratio(m.hop_bytes, topo.hop_bytes),
            ratio(m.hop_bytes, m.min_hop_bytes),
            r.took.as_secs_f64() * 1e3,
        );
    }
    let _ = writeln!(
        s,
        "\nminimum uplink: payload once per group ({}); minimum hop-bytes: payload x (nodes + groups) ({})",
        size(topo.min_uplink_bytes),
        size(topo.min_hop_bytes)
    );
    s
}

/// Indented tree: `name [proxy|borrowed|orphan]`.
fn write_tree(out: &mut impl Write, p: &Plan, topology: &Topology) -> std::io::Result<()> {
    let orphans: HashSet<_> = p.orphans.iter().copied().collect();
    let mut stack = vec![(p.root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        let mut tags = Vec::new();
        match p.roles[id.index()] {
            Role::Login => tags.push("login"),
            Role::Storage => tags.push("storage"),
            Role::Borrowed => tags.push("borrowed proxy"),
            Role::Job => {
                if p.topo[id.index()].is_some_and(|t| topology.is_proxy(t)) {
                    tags.push("proxy");
                }
            }
        }
        if orphans.contains(&id) {
            tags.push("orphan");
        }
        let paced = p.rate[id.index()].map(|r| format!("paced {}", util::bit_rate(r)));
        if let Some(paced) = &paced {
            tags.push(paced);
        }
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", tags.join(", "))
        };
        writeln!(
            out,
            "{:indent$}{}{tags}",
            "",
            p.host(id),
            indent = depth * 2
        )?;
        stack.extend(p.children[id.index()].iter().rev().map(|c| (*c, depth + 1)));
    }
    Ok(())
}

/// Graphviz: one cluster per group, borrowed proxies dashed, orphans red.
fn write_dot(out: &mut impl Write, p: &Plan, topology: &Topology) -> std::io::Result<()> {
    let orphans: HashSet<_> = p.orphans.iter().copied().collect();
    writeln!(out, "digraph plan {{")?;
    writeln!(
        out,
        "  label=\"{} width {}\"; node [shape=box, fontsize=10];",
        p.strategy, p.width
    )?;
    let mut by_group: Vec<Vec<peertree::NodeId>> = vec![Vec::new(); topology.groups().len()];
    for id in p.ids() {
        match p.topo[id.index()] {
            Some(t) => by_group[topology.group_of(t).0 as usize].push(id),
            None => writeln!(out, "  \"{}\" [shape=doubleoctagon];", p.host(id))?,
        }
    }
    for (g, members) in by_group.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
        let proxy = topology.host(topology.groups()[g].proxy);
        writeln!(out, "  subgraph cluster_{g} {{ label=\"group {proxy}\";")?;
        for id in members {
            let t = p.topo[id.index()].expect("grouped hosts have a topology id");
            let mut attrs = Vec::new();
            if topology.is_proxy(t) {
                attrs.push("style=bold");
            }
            if p.roles[id.index()] == Role::Borrowed {
                attrs.push("style=dashed");
            }
            if orphans.contains(id) {
                attrs.push("color=red");
            }
            writeln!(out, "    \"{}\" [{}];", p.host(*id), attrs.join(", "))?;
        }
        writeln!(out, "  }}")?;
    }
    for id in p.bfs() {
        for c in &p.children[id.index()] {
            writeln!(out, "  \"{}\" -> \"{}\";", p.host(id), p.host(*c))?;
        }
    }
    writeln!(out, "}}")
}

/// The `--format json` document (docs/planner.md). Fields are only ever added.
#[derive(Serialize)]
struct JsonPlan<'a> {
    version: u32,
    strategy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    requested_strategy: Option<&'static str>,
    width: usize,
    payload: u64,
    root: &'a str,
    nodes: usize,
    /// `[parent, child]`, parents before children (breadth first).
    edges: Vec<[&'a str; 2]>,
    /// The rate each edge of `edges` is paced at, bits per second; `null` without link
    /// rates in the topology.
    edge_rates: Vec<Option<u64>>,
    /// The link rates the plan used and where they came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    rates: Option<&'a pushreport::rates::RatesUsed>,
    borrowed: Vec<&'a str>,
    orphans: Vec<&'a str>,
    metrics: JsonMetrics<'a>,
}

#[derive(Serialize)]
struct JsonMetrics<'a> {
    depth: u32,
    max_fanout: usize,
    nodes_per_level: &'a [usize],
    groups: usize,
    uplink_bytes: u64,
    uplink_out_bytes: u64,
    min_uplink_bytes: u64,
    hop_bytes: u64,
    min_hop_bytes: u64,
    group_uplink: Vec<JsonGroup<'a>>,
}

#[derive(Serialize)]
struct JsonGroup<'a> {
    proxy: &'a str,
    in_bytes: u64,
    out_bytes: u64,
}

impl<'a> JsonPlan<'a> {
    fn new(
        p: &'a Plan,
        topology: &'a Topology,
        m: &'a Metrics,
        requested: Option<Strategy>,
    ) -> Self {
        let names = |ids: &[peertree::NodeId]| ids.iter().map(|id| p.host(*id)).collect();
        let pairs: Vec<(peertree::NodeId, peertree::NodeId)> = p
            .bfs()
            .into_iter()
            .flat_map(|id| p.children[id.index()].iter().map(move |&c| (id, c)))
            .collect();
        let edges = pairs.iter().map(|&(a, b)| [p.host(a), p.host(b)]).collect();
        let edge_rates = pairs.iter().map(|&(_, c)| p.rate[c.index()]).collect();
        JsonPlan {
            version: JSON_VERSION,
            strategy: p.strategy.name(),
            requested_strategy: requested.map(Strategy::name),
            width: p.width,
            payload: m.payload,
            root: p.host(p.root),
            nodes: m.job_nodes,
            edges,
            edge_rates,
            rates: None,
            borrowed: names(&p.borrowed),
            orphans: names(&p.orphans),
            metrics: JsonMetrics {
                depth: m.depth,
                max_fanout: m.max_fanout,
                nodes_per_level: &m.nodes_per_level,
                groups: m.groups,
                uplink_bytes: m.uplink_bytes,
                uplink_out_bytes: m.uplink_out_bytes,
                min_uplink_bytes: m.min_uplink_bytes,
                hop_bytes: m.hop_bytes,
                min_hop_bytes: m.min_hop_bytes,
                group_uplink: m
                    .group_uplink
                    .iter()
                    .map(|g| JsonGroup {
                        proxy: topology.host(topology.group(g.group).proxy),
                        in_bytes: g.in_bytes,
                        out_bytes: g.out_bytes,
                    })
                    .collect(),
            },
        }
    }
}

//! `teesfs health --rates [SIZE]`: an explicit measurement of the tree's link rates. A
//! rates probe carries SIZE of filler to every node down the planned tree
//! (`teesfs_node::rates_probe`); each edge's rate is taken as a push's is
//! (`pushreport::rates::edge_rates`), printed with the slowest edge, and folded into the
//! store's learned link rates, which the next plan without configured rates uses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use peertree::relay::{Filler, MAX_FILLER_CHUNKS};
use pushreport::rates::{EdgeRate, Figures, RatesUsed, bits, edge_rates, observe};
use pushreport::{PushReport, human_bytes};
use serde::Serialize;

use super::health::{Format, HealthArgs, probe_tree};
use super::util;

/// Stored bytes of each filler chunk (the last one may be whole too: the size is rounded
/// up to whole chunks).
const FILLER_CHUNK: u64 = 1 << 20;
/// The smallest size: an edge is measured from the first chunk on, over at least
/// [`pushreport::rates::MIN_BYTES`].
const MIN_SIZE: u64 = 4 << 20;
/// The largest size per node.
const MAX_SIZE: u64 = 16 << 30;
/// Edges listed in the text report by default (the slowest).
const SHOWN: usize = 20;

/// The filler of `size` bytes per node, or why that size measures nothing.
fn filler(size: u64) -> anyhow::Result<Filler> {
    let human = human_bytes(size);
    if size == 0 {
        bail!(
            "--rates 0 sends nothing and measures nothing: give a size per node of at least 4MiB (the default is 8MiB)"
        );
    }
    if size < MIN_SIZE {
        bail!(
            "--rates {human} is too little to measure: an edge's rate counts from its first 1MiB \
             chunk over at least 2MiB more; give at least 4MiB per node (the default is 8MiB)"
        );
    }
    if size > MAX_SIZE {
        bail!(
            "--rates {human} per node is a load test, not a measurement: give at most 16GiB \
             (a link carries enough to be measured in well under a minute)"
        );
    }
    let chunks = size.div_ceil(FILLER_CHUNK);
    debug_assert!(chunks <= u64::from(MAX_FILLER_CHUNKS));
    Ok(Filler::new(FILLER_CHUNK as u32, chunks as u32)?)
}

/// The report of `teesfs health --rates --format json` (version 1; fields are only ever
/// added).
#[derive(Debug, Serialize)]
struct RatesDoc {
    version: u32,
    job: String,
    root: String,
    strategy: String,
    /// Nodes probed (root excluded).
    nodes: usize,
    /// Nodes that received all of the filler.
    answered: usize,
    ok: bool,
    /// Filler bytes every node received.
    bytes_per_node: u64,
    elapsed_s: Option<f64>,
    timed_out: bool,
    /// Every edge into a node that received the filler, in plan order.
    edges: Vec<EdgeRate>,
    /// The measured edge with the lowest rate.
    slowest: Option<EdgeRate>,
    /// Per link class, what this probe measured (bits per second).
    measured: Figures,
    /// Per link class, what it bounded from below only.
    at_least: Figures,
    /// The learned-rates file the figures went into; null when not kept.
    kept: Option<PathBuf>,
    /// The rates the next plan of these nodes uses, and where they come from.
    next_plan: RatesUsed,
    failures: Vec<pushreport::format::Failure>,
    /// Nodes that did not receive all of the filler, as a hostlist.
    unreachable: String,
}

/// Runs `teesfs health --rates SIZE`.
pub fn run(mut args: HealthArgs, size: u64) -> anyhow::Result<()> {
    let filler = filler(size)?;
    let nodes = args.job.job_nodes()?;
    let Some(store) = args.store.clone() else {
        bail!(
            "--rates keeps what it measures in the store's learned link rates: give --store DIR \
             (the store your pushes use), or set [store] path in teesfs.toml"
        );
    };
    seeder::DirStore::open(&store).with_context(|| {
        format!(
            "opening the store {} for its learned rates",
            store.display()
        )
    })?;
    let (plan, topology, job, outcome) = probe_tree(&args, Some(filler), args.timeout)?;
    let rep =
        teesfs_node::rates_probe::rates_report(&plan, Some(&topology), job, &filler, &outcome);
    let kept = super::rates::fold(&store, &rep);
    // The next plan: configured rates, else the learned ones, this probe's among them.
    args.job.rates_store = Some(store.clone());
    let next_plan = args.job.rates_used(&nodes)?;
    let doc = doc(&rep, filler.bytes(), outcome.timed_out, kept, next_plan);
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&doc)?),
        Format::Text => out!("{}", render_text(&doc, &store, args.all_groups)),
    }
    if !doc.ok {
        bail!(
            "{} of {} node(s) did not receive the filler: {}",
            doc.nodes - doc.answered,
            doc.nodes,
            doc.unreachable
        );
    }
    Ok(())
}

/// The report of a rates probe from its push-like report.
fn doc(
    rep: &PushReport,
    bytes_per_node: u64,
    timed_out: bool,
    kept: Option<PathBuf>,
    next_plan: RatesUsed,
) -> RatesDoc {
    let edges = edge_rates(rep);
    let slowest = edges
        .iter()
        .filter(|e| e.bps.is_some())
        .min_by_key(|e| e.bps)
        .cloned();
    let seen = observe(rep);
    let mut silent: Vec<String> = rep
        .per_node
        .iter()
        .filter(|n| n.all_s.is_none())
        .map(|n| n.host.clone())
        .collect();
    silent.sort();
    let answered = rep.nodes - silent.len();
    RatesDoc {
        version: 1,
        job: rep.job.clone(),
        root: rep.root.clone(),
        strategy: rep.strategy.clone(),
        nodes: rep.nodes,
        answered,
        ok: silent.is_empty() && !timed_out,
        bytes_per_node,
        elapsed_s: rep.all_complete_s,
        timed_out,
        edges,
        slowest,
        measured: seen.figures,
        at_least: seen.at_least,
        kept,
        next_plan,
        failures: rep.failures.clone(),
        unreachable: peertree::hostlist::compress(&silent),
    }
}

/// A rate for people, `-` when the edge was too small or too short to measure.
fn rate(bps: Option<u64>) -> String {
    bps.map_or_else(|| "-".to_owned(), bits)
}

/// The link an edge crossed, as in the JSON.
fn link_name(e: &EdgeRate) -> String {
    serde_json::to_value(e.link)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The figures of one probe, e.g. `node=96.1mbit port=380.2mbit`.
fn figures(f: &Figures) -> String {
    use pushreport::rates::LinkClass::{Login, Node, Port, Uplink};
    [
        (Node, "node"),
        (Port, "port"),
        (Uplink, "uplink"),
        (Login, "login"),
    ]
    .iter()
    .filter_map(|&(c, name)| f.get(c).map(|v| format!("{name}={}", bits(v))))
    .collect::<Vec<_>>()
    .join(" ")
}

/// The text report: totals, the edges (the slowest first, bounded unless `all`), the
/// slowest edge, what was learned and what the next plan uses.
fn render_text(d: &RatesDoc, store: &Path, all: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let took = d.elapsed_s.map_or_else(
        || "not all of them".to_owned(),
        |s| format!("in {}", util::duration(Duration::from_secs_f64(s))),
    );
    let _ = writeln!(
        out,
        "rates: {}/{} nodes received {} of filler each, {took} ({} plan from {})",
        d.answered,
        d.nodes,
        human_bytes(d.bytes_per_node),
        d.strategy,
        d.root
    );
    let mut edges: Vec<&EdgeRate> = d.edges.iter().collect();
    edges.sort_by_key(|e| e.bps.unwrap_or(u64::MAX));
    let hidden = if all {
        0
    } else {
        edges.len().saturating_sub(SHOWN)
    };
    edges.truncate(edges.len() - hidden);
    let _ = writeln!(
        out,
        "  {:<32} {:<6} {:>10} {:>9} {:>11}",
        "edge (slowest first)", "link", "bytes", "time", "rate"
    );
    for e in &edges {
        let _ = writeln!(
            out,
            "  {:<32} {:<6} {:>10} {:>9} {:>11}",
            format!("{} -> {}", e.parent, e.child),
            link_name(e),
            human_bytes(e.bytes),
            format!("{:.2} s", e.secs),
            rate(e.bps)
        );
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "  ... {hidden} faster edges (--all-groups lists them, --format json has every edge)"
        );
    }
    match &d.slowest {
        Some(e) => {
            let _ = writeln!(
                out,
                "  slowest edge: {} -> {} ({} link) at {}",
                e.parent,
                e.child,
                link_name(e),
                bits(e.bps.unwrap_or(0))
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  no edge measured: each took less than 0.2 s or carried too little; give a \
                 larger size (--rates 1GiB)"
            );
        }
    }
    let _ = writeln!(out, "  measured: {}", figures(&d.measured));
    if !d.at_least.is_empty() {
        let _ = writeln!(out, "  at least: {}", figures(&d.at_least));
    }
    let where_ = match &d.kept {
        Some(p) => format!("kept in {}", p.display()),
        None => format!("not kept in the store {}", store.display()),
    };
    let _ = writeln!(
        out,
        "  {where_}; the next plan's rates: {}",
        d.next_plan.describe()
    );
    for f in &d.failures {
        let _ = writeln!(out, "  FAILED {}", f.summary());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_whole_filler_chunks_and_nonsense_is_refused_with_the_fix() {
        let f = filler(8 << 20).expect("the default");
        assert_eq!((f.chunk_len, f.chunks), (1 << 20, 8));
        assert_eq!(filler((5 << 20) + 1).expect("rounded up").chunks, 6);
        let e = filler(0).expect_err("zero").to_string();
        assert!(e.contains("measures nothing") && e.contains("4MiB"), "{e}");
        let e = filler(1 << 20).expect_err("too small").to_string();
        assert!(e.contains("too little") && e.contains("4MiB"), "{e}");
        let e = filler(1 << 40).expect_err("absurd").to_string();
        assert!(e.contains("load test") && e.contains("16GiB"), "{e}");
        assert!(filler(MAX_SIZE).is_ok());
    }

    /// A probe of 2 groups of `size`: the login node feeds each proxy at 100 Mbit/s, each
    /// proxy its members at 50 Mbit/s but member `slow` of group 1 at 20; `silent` never
    /// received it all.
    fn probe(size: usize, slow: usize, silent: Option<&str>) -> PushReport {
        use pushreport::{EdgeBytes, NodeTimes};
        let mut rep = PushReport {
            version: 1,
            root: "login".into(),
            strategy: "topo".into(),
            urgent_bytes: 1 << 20,
            ..PushReport::default()
        };
        for g in 0..2 {
            let proxy = format!("g{g}n0");
            rep.uplinks.push(pushreport::Uplink {
                group: g,
                proxy: proxy.clone(),
                in_bytes: 8 << 20,
                out_bytes: 0,
            });
            for m in 0..size {
                let host = format!("g{g}n{m}");
                let (parent, mbit) = match m {
                    0 => ("login".to_owned(), 100.0),
                    m if g == 1 && m == slow => (proxy.clone(), 20.0),
                    _ => (proxy.clone(), 50.0),
                };
                let secs = (7 << 20) as f64 * 8.0 / (mbit * 1e6);
                let done = silent != Some(host.as_str());
                rep.edges.push(EdgeBytes {
                    parent: parent.clone(),
                    child: host.clone(),
                    bytes: 8 << 20,
                });
                rep.per_node.push(NodeTimes {
                    host,
                    parent,
                    urgent_s: Some(0.5),
                    all_s: done.then_some(0.5 + secs),
                    group: Some(g),
                    app_start_s: None,
                });
            }
        }
        rep.nodes = rep.per_node.len();
        rep.all_complete_s = silent.is_none().then_some(3.5);
        rep
    }

    fn next() -> RatesUsed {
        pushreport::rates::choose(None, None)
    }

    #[test]
    fn the_report_names_the_slowest_edge_and_bounds_its_table() {
        let d = doc(&probe(4, 2, None), 8 << 20, false, None, next());
        assert!(d.ok && d.answered == 8 && d.unreachable.is_empty());
        let slow = d.slowest.as_ref().expect("a slowest edge");
        assert_eq!(
            (slow.parent.as_str(), slow.child.as_str()),
            ("g1n0", "g1n2")
        );
        let text = render_text(&d, Path::new("/s"), false);
        assert!(
            text.contains("8/8 nodes received 8.0 MiB of filler each"),
            "{text}"
        );
        assert!(
            text.contains("slowest edge: g1n0 -> g1n2 (port link) at 20mbit"),
            "{text}"
        );
        // Slowest first.
        let first = text.lines().nth(2).expect("a row");
        assert!(
            first.contains("g1n0 -> g1n2") && first.contains("port"),
            "{text}"
        );
        assert!(text.contains("not kept in the store /s"), "{text}");

        // 2 x 15 nodes: the 20 slowest edges and a line for the rest.
        let d = doc(&probe(15, 2, None), 8 << 20, false, None, next());
        let text = render_text(&d, Path::new("/s"), false);
        assert_eq!(
            text.lines().filter(|l| l.contains(" -> ")).count(),
            SHOWN + 1
        );
        assert!(text.contains("... 10 faster edges"), "{text}");
        let all = render_text(&d, Path::new("/s"), true);
        assert_eq!(all.lines().filter(|l| l.contains(" -> ")).count(), 30 + 1);
    }

    #[test]
    fn a_node_without_the_whole_filler_fails_the_probe_and_is_named() {
        let d = doc(&probe(4, 2, Some("g0n3")), 8 << 20, false, None, next());
        assert!(!d.ok);
        assert_eq!((d.answered, d.unreachable.as_str()), (7, "g0n3"));
        assert!(d.edges.iter().all(|e| e.child != "g0n3"), "not measured");
        let json = serde_json::to_value(&d).expect("json");
        assert_eq!(json["slowest"]["child"], "g1n2");
        assert_eq!(json["next_plan"]["source"], "none");
    }
}

//! What the drawing shows, computed from the report alone: the nodes sorted into groups, the
//! rows of the timeline (a node each for small jobs, a group or a run of groups for large
//! ones), arrival spreads, tree depths. Pure; the drawing and the page only lay this out.

use std::collections::{HashMap, HashSet};

use crate::format::{NodeTimes, PushReport, Uplink};

/// Up to this many nodes every node gets its own circle in the tree and its own timeline
/// row; above it both are drawn per group.
pub const DETAIL_MAX_NODES: usize = 128;
/// At most this many timeline rows once aggregated: more groups share a row.
pub const MAX_ROWS: usize = 100;

/// The least, median and greatest of some arrival times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Earliest.
    pub min: f64,
    /// Median (the upper one of an even count).
    pub median: f64,
    /// Latest.
    pub max: f64,
    /// How many times there were.
    pub count: usize,
}

/// The spread of `values`, or `None` when there are none.
pub fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.into_iter().filter(|t| t.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    Some(Spread {
        min: *v.first()?,
        median: v[v.len() / 2],
        max: *v.last()?,
        count: v.len(),
    })
}

/// Arrival spreads of a set of nodes.
#[derive(Debug, Clone, Default)]
pub struct Arrivals {
    /// Urgent set held.
    pub urgent: Option<Spread>,
    /// Whole layer held.
    pub all: Option<Spread>,
    /// Application started.
    pub app: Option<Spread>,
    /// Nodes that never held the whole layer.
    pub never_all: usize,
    /// Nodes at the child end of a failure.
    pub failed: usize,
    /// The earliest failure into one of them.
    pub first_failure_s: Option<f64>,
}

/// One group of the topology, or (for reports without groups) one subtree under the root.
#[derive(Debug, Clone)]
pub struct Group {
    /// "group 3", or "subtree of cn01".
    pub label: String,
    /// The topology's group number, when the report has it.
    pub number: Option<usize>,
    /// The proxy that owns the group's uplink, when the report names it.
    pub proxy: Option<String>,
    /// Its nodes, as indices into `per_node`, in report order.
    pub nodes: Vec<usize>,
    /// Bytes into the group over its uplink, when the report has it.
    pub in_bytes: Option<u64>,
    /// Bytes out of the group over its uplink.
    pub out_bytes: Option<u64>,
    /// Its nodes' arrivals.
    pub arrivals: Arrivals,
}

/// One timeline row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Host, group or run of groups.
    pub label: String,
    /// The nodes it stands for (indices into `per_node`).
    pub nodes: Vec<usize>,
    /// Index of its first group in [`Model::groups`] (for the alternating bands).
    pub group: usize,
    /// Their arrivals.
    pub arrivals: Arrivals,
}

/// The report, arranged for drawing.
#[derive(Debug)]
pub struct Model<'a> {
    /// The report.
    pub rep: &'a PushReport,
    /// Groups: numbered ones in order, then subtrees in report order.
    pub groups: Vec<Group>,
    /// One row per node (small jobs) rather than per group.
    pub detail: bool,
    /// The timeline's rows, top to bottom.
    pub rows: Vec<Row>,
    /// Each node's depth below the root (1: the root's children).
    pub depth: Vec<usize>,
    /// Hosts at the child end of a failure.
    pub failed: HashSet<&'a str>,
    /// The failures by the host at their child end.
    pub fails: Fails<'a>,
    /// Hosts that own a group uplink.
    pub proxies: HashSet<&'a str>,
    /// The latest time anything happens (at least 0.1 s).
    pub tmax: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key<'a> {
    Group(usize),
    Subtree(usize, &'a str),
}

impl<'a> Model<'a> {
    /// Arranges `rep`.
    pub fn new(rep: &'a PushReport) -> Self {
        let nodes = &rep.per_node;
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.host.as_str(), i))
            .collect();
        let walked = walk_parents(nodes, &index);
        let depth = walked.iter().map(|w| w.0).collect();

        let mut by_key: HashMap<Key<'a>, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let key = match n.group {
                Some(g) => Key::Group(g),
                None => {
                    let top = walked[i].1;
                    Key::Subtree(top, nodes[top].host.as_str())
                }
            };
            by_key.entry(key).or_default().push(i);
        }
        let mut keys: Vec<Key<'a>> = by_key.keys().cloned().collect();
        keys.sort();

        let fails = Fails::new(rep);
        let failed: HashSet<&str> = fails.first.keys().copied().collect();
        let proxies: HashSet<&str> = rep.uplinks.iter().map(|u| u.proxy.as_str()).collect();
        // The first uplink of each group, as a search of the list would find it.
        let mut uplink: HashMap<usize, &Uplink> = HashMap::new();
        for u in &rep.uplinks {
            uplink.entry(u.group).or_insert(u);
        }
        let groups: Vec<Group> = keys
            .into_iter()
            .map(|k| {
                let members = by_key.remove(&k).unwrap_or_default();
                let arrivals = arrivals(rep, &fails, &members);
                match k {
                    Key::Group(g) => {
                        let up = uplink.get(&g);
                        Group {
                            label: format!("group {g}"),
                            number: Some(g),
                            proxy: up.map(|u| u.proxy.clone()),
                            nodes: members,
                            in_bytes: up.map(|u| u.in_bytes),
                            out_bytes: up.map(|u| u.out_bytes),
                            arrivals,
                        }
                    }
                    Key::Subtree(_, top) => Group {
                        label: format!("subtree of {top}"),
                        number: None,
                        proxy: None,
                        nodes: members,
                        in_bytes: None,
                        out_bytes: None,
                        arrivals,
                    },
                }
            })
            .collect();

        let detail = nodes.len() <= DETAIL_MAX_NODES;
        let rows = rows(rep, &fails, &groups, detail);
        let tmax = nodes
            .iter()
            .flat_map(|n| [n.urgent_s, n.all_s, n.app_start_s])
            .chain([rep.urgent_complete_s, rep.all_complete_s])
            .flatten()
            .chain(rep.failures.iter().map(|f| f.at_s))
            .filter(|t| t.is_finite())
            .fold(0.1f64, f64::max);
        Model {
            rep,
            groups,
            detail,
            rows,
            depth,
            failed,
            fails,
            proxies,
            tmax,
        }
    }

    /// The deepest node's depth (at least 1).
    pub fn max_depth(&self) -> usize {
        self.depth.iter().copied().max().unwrap_or(1).max(1)
    }

    /// Nodes per depth below the root, with their arrivals, shallowest first.
    pub fn levels(&self) -> Vec<(usize, Arrivals, usize)> {
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); self.max_depth() + 1];
        for (i, &d) in self.depth.iter().enumerate() {
            by[d].push(i);
        }
        by.into_iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .map(|(d, v)| (d, arrivals(self.rep, &self.fails, &v), v.len()))
            .collect()
    }
}

/// The failures of a report by the host at their child end: looked up per node, so that
/// arranging a report is linear in its size however many groups and failures it has.
#[derive(Debug, Default)]
pub struct Fails<'a> {
    /// Each failed host's earliest failure, as an index into `failures`.
    pub first: HashMap<&'a str, usize>,
}

impl<'a> Fails<'a> {
    fn new(rep: &'a PushReport) -> Self {
        let mut first: HashMap<&'a str, usize> = HashMap::new();
        for (i, f) in rep.failures.iter().enumerate() {
            let e = first.entry(f.child.as_str()).or_insert(i);
            if f.at_s < rep.failures[*e].at_s {
                *e = i;
            }
        }
        Fails { first }
    }
}

/// Each node's depth below the root (1: the root's children) and its top ancestor (the
/// node under the root its chain of parents reaches), each node visited once. A chain of
/// parents that comes back on itself (a corrupt report) is cut where it closes: the node
/// whose parent is already on the chain counts as a child of the root.
fn walk_parents(nodes: &[NodeTimes], index: &HashMap<&str, usize>) -> Vec<(usize, usize)> {
    const TODO: usize = usize::MAX;
    let mut walked = vec![(TODO, TODO); nodes.len()];
    let mut on_chain = vec![false; nodes.len()];
    let mut chain = Vec::new();
    for start in 0..nodes.len() {
        let mut i = start;
        // Up to a node already walked, the root (a parent not in the report), or a cycle.
        let mut above = loop {
            if walked[i].0 != TODO {
                break walked[i];
            }
            if on_chain[i] {
                break (0, i);
            }
            on_chain[i] = true;
            chain.push(i);
            match index.get(nodes[i].parent.as_str()) {
                Some(&p) => i = p,
                None => break (0, i),
            }
        };
        while let Some(c) = chain.pop() {
            on_chain[c] = false;
            let top = if above.0 == 0 { c } else { above.1 };
            above = (above.0 + 1, top);
            walked[c] = above;
        }
    }
    walked
}

/// The arrivals of `members` (indices into `per_node`).
fn arrivals(rep: &PushReport, fails: &Fails<'_>, members: &[usize]) -> Arrivals {
    let nodes = || members.iter().map(|&i| &rep.per_node[i]);
    let mut failed: HashSet<&str> = HashSet::new();
    let mut first_failure_s: Option<f64> = None;
    for n in nodes() {
        if let Some(&f) = fails.first.get(n.host.as_str())
            && failed.insert(n.host.as_str())
        {
            let at = rep.failures[f].at_s;
            first_failure_s = Some(first_failure_s.map_or(at, |t| t.min(at)));
        }
    }
    Arrivals {
        urgent: spread(nodes().filter_map(|n| n.urgent_s)),
        all: spread(nodes().filter_map(|n| n.all_s)),
        app: spread(nodes().filter_map(|n| n.app_start_s)),
        never_all: nodes().filter(|n| n.all_s.is_none()).count(),
        failed: failed.len(),
        first_failure_s,
    }
}

fn rows(rep: &PushReport, fails: &Fails<'_>, groups: &[Group], detail: bool) -> Vec<Row> {
    if detail {
        return groups
            .iter()
            .enumerate()
            .flat_map(|(g, grp)| {
                grp.nodes.iter().map(move |&i| {
                    let host = &rep.per_node[i].host;
                    Row {
                        label: if fails.first.contains_key(host.as_str()) {
                            format!("{host} (failed)")
                        } else {
                            host.clone()
                        },
                        nodes: vec![i],
                        group: g,
                        arrivals: arrivals(rep, fails, &[i]),
                    }
                })
            })
            .collect();
    }
    let per_row = groups.len().div_ceil(MAX_ROWS).max(1);
    groups
        .chunks(per_row)
        .enumerate()
        .map(|(k, run)| {
            let nodes: Vec<usize> = run.iter().flat_map(|g| g.nodes.iter().copied()).collect();
            let label = match (run.first(), run.last()) {
                (Some(a), Some(b)) if run.len() > 1 => match (a.number, b.number) {
                    (Some(x), Some(y)) => format!("groups {x}-{y} ({})", nodes.len()),
                    _ => format!("{} .. {} ({})", a.label, b.label, nodes.len()),
                },
                (Some(a), _) => format!("{} ({})", a.label, nodes.len()),
                _ => String::new(),
            };
            Row {
                label,
                arrivals: arrivals(rep, fails, &nodes),
                nodes,
                group: k * per_row,
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::{EdgeBytes, Failure, NodeTimes, Uplink};

    /// `groups` groups of `size`: the root feeds each proxy, the proxy its members; node k
    /// of group g arrives at (g + k) / 10 s (urgent at half that). The first member of
    /// group 1 fails, when there is one.
    pub(crate) fn sample(groups: usize, size: usize) -> PushReport {
        let mut per_node = Vec::new();
        let mut edges = Vec::new();
        let mut uplinks = Vec::new();
        let host = |g: usize, k: usize| format!("cn{:05}", g * size + k + 1);
        for g in 0..groups {
            for k in 0..size {
                let parent = if k == 0 { "login".into() } else { host(g, 0) };
                let t = (g + k) as f64 / 10.0 + 0.2;
                per_node.push(NodeTimes {
                    host: host(g, k),
                    parent: parent.clone(),
                    urgent_s: Some(t / 2.0),
                    all_s: (!(g == 1 && k == 1)).then_some(t),
                    group: Some(g),
                    app_start_s: None,
                });
                edges.push(EdgeBytes {
                    parent,
                    child: host(g, k),
                    bytes: 16 << 20,
                });
            }
            uplinks.push(Uplink {
                group: g,
                proxy: host(g, 0),
                in_bytes: 16 << 20,
                out_bytes: 0,
            });
        }
        let failures = if groups > 1 && size > 1 {
            vec![Failure {
                kind: crate::FailureKind::Failed,
                parent: host(1, 0),
                child: host(1, 1),
                at_s: 0.5,
                reason: None,
                cause: None,
            }]
        } else {
            vec![]
        };
        PushReport {
            version: 1,
            job: "00000000000004d2".into(),
            index: "ab".repeat(32),
            strategy: "topo".into(),
            root: "login".into(),
            nodes: groups * size,
            urgent_chunks: 3,
            chunks: 16,
            urgent_bytes: 3 << 20,
            total_bytes: 16 << 20,
            streamed_bytes: 16 << 20,
            urgent_complete_s: Some(1.0),
            all_complete_s: None,
            per_node,
            edges,
            uplinks,
            failures,
            learned_files: 0,
            rates: None,
        }
    }

    #[test]
    fn spread_is_min_median_max_and_none_when_empty() {
        let s = spread([3.0, 1.0, 2.0, f64::NAN]).expect("values");
        assert_eq!((s.min, s.median, s.max, s.count), (1.0, 2.0, 3.0, 3));
        assert!(spread([]).is_none());
    }

    #[test]
    fn small_jobs_get_a_row_per_node_grouped() {
        let rep = sample(4, 8);
        let m = Model::new(&rep);
        assert!(m.detail);
        assert_eq!(m.groups.len(), 4);
        assert_eq!(m.rows.len(), 32);
        assert_eq!(m.rows[9].label, "cn00010 (failed)");
        assert_eq!(m.groups[1].arrivals.failed, 1);
        assert_eq!(m.groups[1].arrivals.never_all, 1);
        assert_eq!(m.groups[2].proxy.as_deref(), Some("cn00017"));
        assert_eq!(m.max_depth(), 2);
        assert!(m.proxies.contains("cn00001"));
        assert!((m.tmax - 1.2).abs() < 1e-9, "{}", m.tmax);
    }

    #[test]
    fn large_jobs_get_a_row_per_run_of_groups() {
        let rep = sample(2195, 8);
        let m = Model::new(&rep);
        assert!(!m.detail);
        assert_eq!(m.groups.len(), 2195);
        assert!(m.rows.len() <= MAX_ROWS, "{}", m.rows.len());
        assert_eq!(m.rows[0].label, "groups 0-21 (176)");
        let covered: usize = m.rows.iter().map(|r| r.nodes.len()).sum();
        assert_eq!(covered, 2195 * 8, "every node is in a row");
        assert_eq!(m.rows[0].arrivals.failed, 1);
    }

    /// Reports written before nodes carried their group are grouped by subtree.
    #[test]
    fn reports_without_groups_are_grouped_by_subtree() {
        let mut rep = sample(3, 4);
        for n in &mut rep.per_node {
            n.group = None;
        }
        let m = Model::new(&rep);
        let labels: Vec<&str> = m.groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "subtree of cn00001",
                "subtree of cn00005",
                "subtree of cn00009"
            ]
        );
    }

    #[test]
    fn a_parent_cycle_does_not_hang() {
        let mut rep = sample(1, 2);
        rep.per_node[0].parent = "cn00002".into();
        let m = Model::new(&rep);
        assert!(m.max_depth() <= 4);
    }
}

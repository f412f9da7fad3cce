//! `teesfs health`: an empty broadcast (a probe job, no index, no chunks) down the planned
//! tree from the login node, and the report of what answered. With `--rates` the probe
//! carries filler and measures each edge's rate ([`crate::rates_probe`]).
//!
//! Each parent measures its edge's round trip (its child's `Start` handed to the transport,
//! to the child's first message back: connection setup and the child's processing
//! included); the root collects them with every node's answer. A node that did not answer
//! within the deadline is placed under the *failed edge* where the broadcast stalled: the
//! planned edge into the topmost silent node of its branch.
//!
//! JSON format (version 1, stable; fields are only ever added):
//! ```text
//! { "version": 1, "job": "<hex>", "root": "login", "strategy": "topo",
//!   "nodes": 32, "answered": 31, "ok": false,
//!   "deadline_s": 10.0, "elapsed_s": 3.2, "timed_out": false,
//!   "rtt_ms": { "min": 0.3, "median": 0.6, "max": 2.1 } | null,
//!   "groups": [ { "group": 0, "proxy": "cn01", "nodes": 8, "answered": 8,
//!                 "rtt_ms": { "min": 0.3, "median": 0.5, "max": 0.9 } | null } ],
//!   "edges": [ { "parent": "login", "child": "cn01", "rtt_ms": 0.41 } ],
//!   "failures": [ { "parent": "login", "child": "cn09", "unreachable": "cn[09-16]",
//!                   "count": 8 } ],
//!   "unreachable": "cn[09-16]" }
//! ```
//! `nodes` excludes the root. `edges` are the edges the broadcast really took (a node whose
//! parent died is started by an ancestor, and that edge is measured). A group's `rtt_ms`
//! covers the edges into its members. `ok` is true exactly when every node answered.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use manifest::{ChunkId, Index, IndexId};
use peertree::relay::{Event, Filler, JobId, NodeInfo, Phase, Relay, Timing};
use peertree::{NodeId, Plan, Topology, hostlist};
use serde::{Deserialize, Serialize};

use super::job::JobKnobs;
use super::root::{RootEndpoint, RootJob, RootSession};
use crate::Error;
use crate::net::Identity;
use crate::rates_probe::ProbeJob;

/// The chunk store of a probe: holds nothing, takes nothing.
pub(crate) struct NoChunks;

impl seeder::ChunkStore for NoChunks {
    fn get(&self, _id: &ChunkId) -> Option<seeder::StoredChunk> {
        None
    }
    fn contains(&self, _id: &ChunkId) -> bool {
        false
    }
}

impl manifest::ChunkSink for NoChunks {
    fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<manifest::StoredForm> {
        None
    }
    fn put(&self, _id: &ChunkId, _stored: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// The index of a probe job: no entries, no chunks.
pub(crate) fn empty_index() -> (Arc<Index>, IndexId) {
    let index = Index {
        chunk_size: 0,
        chunks: Vec::new(),
        entries: Vec::new(),
        urgent: Vec::new(),
        image: None,
    };
    (Arc::new(index), IndexId([0; 32]))
}

/// Everything a probe needs.
pub struct ProbeSpec {
    /// The job id.
    pub job: JobId,
    /// The plan's nodes with addresses, root first, parents before children.
    pub nodes: Vec<NodeInfo>,
    /// Liveness timing (the relay's deadline decides when a silent child is given up).
    pub timing: Timing,
    /// The login node's credentials.
    pub identity: Identity,
    /// Where to bind (port 0 for any).
    pub listen: SocketAddr,
    /// How nodes reach the root (`host:port`); default: the root's host name and the
    /// bound port.
    pub advertise: Option<String>,
    /// A rates probe: the filler every node receives ([`crate::rates_probe`]); `None` for
    /// an empty broadcast.
    pub filler: Option<Filler>,
}

/// What the root of a probe saw.
#[derive(Debug, Default)]
pub struct ProbeOutcome {
    /// Every root event with its time since the start.
    pub events: Vec<(f64, Event)>,
    /// Seconds from the start to the end of the wait.
    pub elapsed_s: f64,
    /// Whether the wait ended at the deadline (rather than with every node answered).
    pub timed_out: bool,
}

/// Runs the root of a probe until every node answered, or until `deadline`. A node the
/// relay gave up (silent for the relay's deadline: its children were then asked directly)
/// still counts if it answers in time, so a slow node is not reported as a dead one.
pub async fn probe(spec: ProbeSpec, deadline: Duration) -> Result<ProbeOutcome, Error> {
    let endpoint = RootEndpoint {
        identity: spec.identity,
        listen: spec.listen,
        advertise: spec.advertise,
    };
    let filler = spec.filler;
    let probe = match &filler {
        Some(f) => ProbeJob::filler(f, JobKnobs::default()),
        None => ProbeJob::of_start(&[], JobKnobs::default())?,
    };
    let job = RootJob {
        index: probe.index,
        index_id: probe.index_id,
        bytes: probe.bytes,
        knobs: probe.knobs,
    };
    let expected = spec.nodes.len().saturating_sub(1);
    let (id, timing) = (spec.job, spec.timing);
    let mut session = RootSession::open(&endpoint, spec.nodes, job, |nodes, start| match filler {
        Some(f) => Relay::new_rates_probe_root(id, nodes, f, timing, start),
        None => Relay::new_probe_root(id, nodes, timing, start),
    })?;

    let mut out = ProbeOutcome::default();
    let until = tokio::time::Instant::from_std(session.start) + deadline;
    let mut answered = HashSet::new();
    // A rates probe is over once every node's edge said what it carried too (the parent
    // says so right after its child's answer, and the root's job may hand the two events
    // out apart).
    let mut carried = HashSet::new();
    let mut all_done = expected == 0;
    while !all_done {
        let Some((t, ev)) = session.next_event(until).await else {
            out.timed_out = true;
            break;
        };
        match ev {
            Event::NodeDone(n, Phase::All) => {
                answered.insert(n);
            }
            Event::EdgeBytes(_, n, _) => {
                carried.insert(n);
            }
            _ => {}
        }
        all_done = answered.len() == expected
            && (filler.is_none() || answered.iter().all(|n| carried.contains(n)));
        out.events.push((t, ev));
    }
    // The facts that came with the last answer (its edge's round trip among them).
    while let Some(e) = session.queued_event() {
        out.events.push(e);
    }
    out.elapsed_s = session.start.elapsed().as_secs_f64();
    // `Finished` reaches the nodes before the endpoint closes, so they drop the probe.
    session.close(all_done).await;
    Ok(out)
}

/// Minimum, median and maximum of a set of round trips (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    /// Fastest.
    pub min: f64,
    /// Median (the upper one of an even count).
    pub median: f64,
    /// Slowest.
    pub max: f64,
}

impl RttStats {
    /// Stats of `ms`, or `None` when empty.
    pub fn of(ms: &[f64]) -> Option<Self> {
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Self {
            min: *v.first()?,
            median: v[v.len() / 2],
            max: *v.last()?,
        })
    }
}

/// One group of the topology in a [`HealthReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupHealth {
    /// Group number in the topology.
    pub group: usize,
    /// The group's proxy.
    pub proxy: String,
    /// Job nodes in the group.
    pub nodes: usize,
    /// Of those, how many answered.
    pub answered: usize,
    /// Round trips of the edges into the group's members.
    pub rtt_ms: Option<RttStats>,
}

/// One measured edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeRtt {
    /// Sender of the `Start`.
    pub parent: String,
    /// Receiver.
    pub child: String,
    /// Round trip in milliseconds.
    pub rtt_ms: f64,
}

/// A planned edge where the broadcast stalled, and the nodes lost below it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeFailure {
    /// Parent end of the edge (it answered, or is the root).
    pub parent: String,
    /// Child end (it did not answer).
    pub child: String,
    /// Every node that did not answer below this edge, the child included, as a hostlist.
    pub unreachable: String,
    /// How many that is.
    pub count: usize,
}

/// The health report (format in the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HealthReport {
    /// Format version.
    pub version: u32,
    /// Job id of the probe.
    pub job: String,
    /// Root host.
    pub root: String,
    /// Plan strategy.
    pub strategy: String,
    /// Nodes probed (root excluded).
    pub nodes: usize,
    /// Nodes that answered.
    pub answered: usize,
    /// Whether every node answered.
    pub ok: bool,
    /// The deadline of the probe.
    pub deadline_s: f64,
    /// How long the probe took.
    pub elapsed_s: f64,
    /// Whether it ended at the deadline.
    pub timed_out: bool,
    /// Round trips over every measured edge.
    pub rtt_ms: Option<RttStats>,
    /// Per topology group.
    pub groups: Vec<GroupHealth>,
    /// Every measured edge.
    pub edges: Vec<EdgeRtt>,
    /// Failed edges, in plan order.
    pub failures: Vec<EdgeFailure>,
    /// Every node that did not answer, as a hostlist (empty when all answered).
    pub unreachable: String,
}

/// Each silent node hangs below the planned edge into the topmost silent node of its
/// branch: one failure per such edge, in plan order.
fn failed_edges(
    plan: &Plan,
    order: &[NodeId],
    members: &[NodeId],
    answered: &HashSet<NodeId>,
) -> Vec<EdgeFailure> {
    let host = |n: NodeId| plan.host(n).to_string();
    let mut failed: BTreeMap<usize, (NodeId, NodeId, Vec<NodeId>)> = BTreeMap::new();
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    for &n in members {
        if answered.contains(&n) {
            continue;
        }
        let mut top = n;
        while let Some(p) = plan.parent[top.index()] {
            if p == plan.root || answered.contains(&p) {
                break;
            }
            top = p;
        }
        let parent = plan.parent[top.index()].unwrap_or(plan.root);
        failed
            .entry(pos[&top])
            .or_insert_with(|| (parent, top, Vec::new()))
            .2
            .push(n);
    }
    failed
        .into_values()
        .map(|(p, c, lost)| {
            let mut hosts: Vec<String> = lost.iter().map(|&n| host(n)).collect();
            hosts.sort();
            EdgeFailure {
                parent: host(p),
                child: host(c),
                unreachable: hostlist::compress(&hosts),
                count: hosts.len(),
            }
        })
        .collect()
}

/// Per group: its nodes, how many answered, and the round trips of the edges into them.
fn group_health(
    plan: &Plan,
    topo: &Topology,
    members: &[NodeId],
    answered: &HashSet<NodeId>,
    rtt: &BTreeMap<(NodeId, NodeId), Duration>,
) -> Vec<GroupHealth> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let group_of = |n: NodeId| plan.topo[n.index()].map(|t| topo.group_of(t).0 as usize);
    let mut acc: BTreeMap<usize, (usize, usize, Vec<f64>)> = BTreeMap::new();
    for &n in members {
        if let Some(g) = group_of(n) {
            let e = acc.entry(g).or_default();
            e.0 += 1;
            e.1 += usize::from(answered.contains(&n));
        }
    }
    for (&(_, c), &d) in rtt {
        if let Some(g) = group_of(c) {
            acc.entry(g).or_default().2.push(ms(d));
        }
    }
    acc.into_iter()
        .map(|(g, (nodes, ok, rtts))| {
            let grp = topo.group(peertree::GroupId(g as u32));
            GroupHealth {
                group: g,
                proxy: topo.host(grp.proxy).to_string(),
                nodes,
                answered: ok,
                rtt_ms: RttStats::of(&rtts),
            }
        })
        .collect()
}

/// Builds the report from the plan and what the root saw.
pub fn report(
    plan: &Plan,
    topology: Option<&Topology>,
    job: JobId,
    deadline: Duration,
    out: &ProbeOutcome,
) -> HealthReport {
    let host = |n: NodeId| plan.host(n).to_string();
    let mut answered: HashSet<NodeId> = HashSet::new();
    let mut rtt: BTreeMap<(NodeId, NodeId), Duration> = BTreeMap::new();
    for (_, ev) in &out.events {
        match *ev {
            Event::NodeDone(n, Phase::All) => {
                answered.insert(n);
            }
            Event::EdgeRtt(p, c, d) => {
                rtt.insert((p, c), d);
            }
            _ => {}
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let order = plan.bfs();
    let members: Vec<NodeId> = order.iter().copied().skip(1).collect();
    let answered_count = members.iter().filter(|n| answered.contains(n)).count();

    let failures = failed_edges(plan, &order, &members, &answered);
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut silent: Vec<String> = members
        .iter()
        .filter(|n| !answered.contains(n))
        .map(|&n| host(n))
        .collect();
    silent.sort();

    let groups = topology.map_or_else(Vec::new, |topo| {
        group_health(plan, topo, &members, &answered, &rtt)
    });
    // In plan order of the child (a node started by an ancestor after its parent died
    // stays where the plan put it).
    let mut measured: Vec<(&(NodeId, NodeId), &Duration)> = rtt.iter().collect();
    measured.sort_by_key(|&(&(_, c), _)| pos.get(&c).copied().unwrap_or(usize::MAX));
    let edges: Vec<EdgeRtt> = measured
        .into_iter()
        .map(|(&(p, c), &d)| EdgeRtt {
            parent: host(p),
            child: host(c),
            rtt_ms: ms(d),
        })
        .collect();
    let all: Vec<f64> = rtt.values().map(|&d| ms(d)).collect();
    HealthReport {
        version: 1,
        job: job.to_string(),
        root: host(plan.root),
        strategy: plan.strategy.to_string(),
        nodes: members.len(),
        answered: answered_count,
        ok: answered_count == members.len(),
        deadline_s: deadline.as_secs_f64(),
        elapsed_s: out.elapsed_s,
        timed_out: out.timed_out,
        rtt_ms: RttStats::of(&all),
        groups,
        edges,
        failures,
        unreachable: hostlist::compress(&silent),
    }
}

#[cfg(test)]
mod tests {
    use peertree::topology::ProxyPick;
    use peertree::{PlanOptions, Strategy};

    use super::*;

    fn plan(n: usize, group: usize) -> (Plan, Topology) {
        let nodes = hostlist::expand(&format!("cn[01-{n:02}]")).expect("hostlist");
        let topo = Topology::generated(&nodes, group, ProxyPick::First).expect("topology");
        let plan =
            peertree::plan(&topo, &nodes, Strategy::Topo, &PlanOptions::default()).expect("plan");
        (plan, topo)
    }

    fn id(p: &Plan, host: &str) -> NodeId {
        p.ids().find(|&n| p.host(n) == host).expect("in plan")
    }

    /// Every node answers except `silent`; every edge into an answering node is measured
    /// at 1 ms per plan position.
    fn outcome(p: &Plan, silent: &[&str]) -> ProbeOutcome {
        let mut out = ProbeOutcome::default();
        for (i, n) in p.bfs().into_iter().enumerate().skip(1) {
            if silent.contains(&p.host(n)) {
                continue;
            }
            let parent = p.parent[n.index()].expect("parent");
            out.events.push((
                0.1,
                Event::EdgeRtt(parent, n, Duration::from_millis(i as u64)),
            ));
            out.events.push((0.1, Event::NodeDone(n, Phase::All)));
        }
        out.elapsed_s = 0.5;
        out
    }

    #[test]
    fn all_answered_is_ok_with_stats_per_group() {
        let (p, topo) = plan(8, 4);
        let r = report(
            &p,
            Some(&topo),
            JobId(1),
            Duration::from_secs(5),
            &outcome(&p, &[]),
        );
        assert!(r.ok);
        assert_eq!((r.nodes, r.answered), (8, 8));
        assert!(r.failures.is_empty() && r.unreachable.is_empty());
        assert_eq!(r.edges.len(), 8);
        assert_eq!(r.groups.len(), 2);
        for g in &r.groups {
            assert_eq!((g.nodes, g.answered), (4, 4));
            let s = g.rtt_ms.expect("measured");
            assert!(s.min <= s.median && s.median <= s.max);
        }
        let all = r.rtt_ms.expect("measured");
        assert_eq!((all.min, all.max), (1.0, 8.0));
    }

    #[test]
    fn a_silent_proxy_with_silent_members_is_one_failed_edge() {
        let (p, topo) = plan(8, 4);
        // cn05 is the second group's proxy; cn06 below it is silent too, cn07 answered
        // (re-attached above).
        assert_eq!(p.parent[id(&p, "cn06").index()], Some(id(&p, "cn05")));
        let r = report(
            &p,
            Some(&topo),
            JobId(1),
            Duration::from_secs(5),
            &outcome(&p, &["cn05", "cn06", "cn02"]),
        );
        assert!(!r.ok);
        assert_eq!(r.answered, 5);
        assert_eq!(r.unreachable, "cn[02,05-06]");
        let want = vec![
            EdgeFailure {
                parent: "cn01".into(),
                child: "cn02".into(),
                unreachable: "cn02".into(),
                count: 1,
            },
            EdgeFailure {
                parent: "login".into(),
                child: "cn05".into(),
                unreachable: "cn[05-06]".into(),
                count: 2,
            },
        ];
        let mut got = r.failures.clone();
        got.sort_by(|a, b| a.child.cmp(&b.child));
        assert_eq!(got, want);
        let g1 = &r.groups[1];
        assert_eq!((g1.proxy.as_str(), g1.nodes, g1.answered), ("cn05", 4, 2));
    }

    #[test]
    fn stats_of_nothing_is_none() {
        assert_eq!(RttStats::of(&[]), None);
        let s = RttStats::of(&[3.0, 1.0, 2.0]).expect("some");
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
    }
}

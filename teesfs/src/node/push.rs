//! The login node as the root of a job's tree: plan in hand, it binds a QUIC endpoint,
//! runs the root relay over the login node's store and follows the job to completion.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use manifest::{Index, IndexId};
use peertree::relay::{Event, JobId, NodeInfo, Phase, Relay, Schedule, Timing};
use peertree::{NodeId, Plan, Topology};

use super::StoreBytes;

/// How long a root waits, once its job is done, for its nodes to acknowledge its last
/// messages before it closes its endpoint.
pub const DRAIN_BOUND: Duration = Duration::from_secs(2);
use super::job::JobCore;
use super::peers::{Peers, Router};
use super::report::{EdgeBytes, Failure, NodeTimes, PushReport, Uplink};
use crate::net::{Identity, Transport};

/// Everything a push needs.
pub struct PushSpec {
    /// The job id.
    pub job: JobId,
    /// The plan's nodes with addresses, root first, parents before children.
    pub nodes: Vec<NodeInfo>,
    /// The signed index bytes.
    pub signed_index: Vec<u8>,
    /// The decoded index.
    pub index: Arc<Index>,
    /// Its id.
    pub index_id: IndexId,
    /// The store chunks are served from.
    pub store: seeder::DirStore,
    /// Push order and how many are urgent.
    pub order: (Vec<u32>, usize),
    /// Liveness timing.
    pub timing: Timing,
    /// The login node's credentials.
    pub identity: Identity,
    /// Where to bind (port 0 for any).
    pub listen: SocketAddr,
    /// Shared-storage mode: nodes read from this store path instead of the tree.
    pub shared_store: Option<String>,
    /// How nodes reach the root (`host:port`); default: the root's host name and the
    /// bound port.
    pub advertise: Option<String>,
    /// Cap on the root's bulk bytes per second to each child.
    pub rate_limit: Option<u64>,
    /// The job's owner (uid) on the nodes; `None`: root only.
    pub owner: Option<u32>,
}

/// Live progress for a progress bar.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Nodes in the job.
    pub nodes: usize,
    /// Nodes holding the urgent set.
    pub urgent: usize,
    /// Nodes holding everything.
    pub all: usize,
    /// Nodes lost.
    pub failed: usize,
    /// Stored bytes the root has sent.
    pub bytes_out: u64,
}

/// What a push observed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every root event with its time since the start.
    pub events: Vec<(f64, Event)>,
    /// When the urgent phase completed.
    pub urgent_s: Option<f64>,
    /// When everything completed.
    pub all_s: Option<f64>,
    /// Whether the wait ended by timeout.
    pub timed_out: bool,
}

/// Routes the messages of a root's one job to it (push and health probes).
pub(super) struct RootRouter(pub(super) Arc<JobCore>);

impl Router for RootRouter {
    fn deliver(&self, from_host: &str, job: JobId, msg: peertree::relay::Msg) {
        if job == self.0.job {
            self.0.on_message(from_host, msg);
        }
    }
    fn unreachable(&self, host: &str) {
        self.0.on_unreachable(host);
    }
}

/// Runs the root until `wait` completes for every reachable node (or `timeout`).
/// `on_progress` is called after every event with the progress and everything seen so far.
pub async fn push(
    spec: PushSpec,
    wait: Phase,
    timeout: Duration,
    mut on_progress: impl FnMut(&Progress, &Outcome),
) -> Result<Outcome, String> {
    let start = Instant::now();
    let transport = Transport::bind(spec.listen, &spec.identity).map_err(|e| e.to_string())?;
    let bound = transport.local_addr();
    let mut spec = spec;
    if let Some(root) = spec.nodes.first_mut() {
        root.addr = super::advertised(spec.advertise.as_deref(), &root.host, bound);
    }
    let peers = Peers::new(transport);
    let sizes = spec.index.chunks.iter().map(|c| c.stored_len).collect();
    let schedule = Schedule::new(spec.order.0, spec.order.1, sizes).map_err(|e| e.to_string())?;
    let relay = Relay::new_root(
        spec.job,
        spec.nodes.clone(),
        spec.signed_index.into(),
        Arc::new(schedule),
        spec.timing,
        start,
    )
    .map_err(|e| e.to_string())?;
    let mut relay = relay;
    relay.set_shared_store(spec.shared_store.clone());
    relay.set_owner(spec.owner);
    let (core, mut events) = JobCore::new(
        relay,
        spec.index.clone(),
        spec.index_id,
        peers.clone(),
        Arc::new(StoreBytes(spec.store)),
        &spec.nodes,
        super::job::JobKnobs::rate_limited(spec.rate_limit),
    );
    let router: Arc<dyn Router> = Arc::new(RootRouter(core.clone()));
    peers.set_router(Arc::downgrade(&router) as Weak<dyn Router>);
    tokio::spawn(peers.clone().accept_loop());
    core.start();

    let mut out = Outcome::default();
    let mut progress = Progress {
        nodes: spec.nodes.len().saturating_sub(1),
        ..Progress::default()
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ev = tokio::select! {
            e = events.recv() => e,
            _ = tokio::time::sleep_until(deadline) => { out.timed_out = true; None }
        };
        let Some((at, ev)) = ev else { break };
        let t = at.saturating_duration_since(start).as_secs_f64();
        match &ev {
            Event::NodeDone(_, Phase::Urgent) => progress.urgent += 1,
            Event::NodeDone(_, Phase::All) => progress.all += 1,
            Event::EdgeFailed(..) | Event::Unreachable(..) => progress.failed += 1,
            Event::JobPhaseDone(Phase::Urgent) => out.urgent_s = Some(t),
            Event::JobPhaseDone(Phase::All) => out.all_s = Some(t),
            _ => {}
        }
        progress.bytes_out = core.counters().bytes_out;
        out.events.push((t, ev));
        on_progress(&progress, &out);
        let done = match wait {
            Phase::Urgent => out.urgent_s.is_some(),
            Phase::All => out.all_s.is_some(),
        };
        if done {
            break;
        }
    }
    // Edge byte counts of the root's own children, which the relay keeps itself.
    let root_edges: Vec<(NodeId, NodeId, u64)> =
        core.relay(|r| r.child_bytes().map(|(c, b)| (r.me(), c, b)).collect());
    for (p, c, b) in root_edges {
        out.events
            .push((start.elapsed().as_secs_f64(), Event::EdgeBytes(p, c, b)));
    }
    core.close();
    if out.all_s.is_some() {
        // The last control messages (Finished) reach the nodes before the endpoint closes.
        peers.drain(DRAIN_BOUND).await;
    }
    peers.close();
    drop(router);
    Ok(out)
}

/// Builds the report from what the root saw.
pub fn report(
    plan: &Plan,
    topology: Option<&Topology>,
    job: JobId,
    index_id: IndexId,
    index: &Index,
    order: &(Vec<u32>, usize),
    out: &Outcome,
) -> PushReport {
    let host = |n: NodeId| plan.host(n).to_string();
    let mut times: HashMap<NodeId, (Option<f64>, Option<f64>)> = HashMap::new();
    let mut edges: HashMap<(NodeId, NodeId), u64> = HashMap::new();
    let mut failures = Vec::new();
    for (t, ev) in &out.events {
        match *ev {
            Event::NodeDone(n, Phase::Urgent) => times.entry(n).or_default().0 = Some(*t),
            Event::NodeDone(n, Phase::All) => times.entry(n).or_default().1 = Some(*t),
            Event::EdgeBytes(p, c, b) => {
                let e = edges.entry((p, c)).or_default();
                *e = (*e).max(b);
            }
            Event::EdgeFailed(p, c) => failures.push(Failure {
                kind: "failed".into(),
                parent: host(p),
                child: host(c),
                at_s: *t,
            }),
            Event::Unreachable(p, c) => failures.push(Failure {
                kind: "unreachable".into(),
                parent: host(p),
                child: host(c),
                at_s: *t,
            }),
            Event::Liar(p, c) => failures.push(Failure {
                kind: "liar".into(),
                parent: host(p),
                child: host(c),
                at_s: *t,
            }),
            _ => {}
        }
    }
    let per_node = plan
        .bfs()
        .into_iter()
        .skip(1)
        .map(|n| {
            let (u, a) = times.get(&n).copied().unwrap_or_default();
            NodeTimes {
                host: host(n),
                parent: plan.parent[n.index()].map(host).unwrap_or_default(),
                urgent_s: u,
                all_s: a,
            }
        })
        .collect();
    let mut uplinks: Vec<Uplink> = Vec::new();
    if let Some(topo) = topology {
        let group_of = |n: NodeId| plan.topo[n.index()].map(|t| topo.group_of(t));
        let mut acc: HashMap<usize, (u64, u64)> = HashMap::new();
        for (&(p, c), &b) in &edges {
            let (gp, gc) = (group_of(p), group_of(c));
            if gp != gc {
                if let Some(g) = gp {
                    acc.entry(g.0 as usize).or_default().1 += b;
                }
                if let Some(g) = gc {
                    acc.entry(g.0 as usize).or_default().0 += b;
                }
            }
        }
        let mut groups: Vec<_> = acc.into_iter().collect();
        groups.sort_by_key(|(g, _)| *g);
        for (g, (i, o)) in groups {
            let grp = topo.group(peertree::GroupId(g as u32));
            uplinks.push(Uplink {
                group: g,
                proxy: topo.host(grp.proxy).to_string(),
                in_bytes: i,
                out_bytes: o,
            });
        }
    }
    let mut edge_list: Vec<EdgeBytes> = edges
        .into_iter()
        .map(|((p, c), b)| EdgeBytes {
            parent: host(p),
            child: host(c),
            bytes: b,
        })
        .collect();
    edge_list.sort_by(|a, b| (&a.parent, &a.child).cmp(&(&b.parent, &b.child)));
    let stored = |cs: &[u32]| -> u64 {
        cs.iter()
            .map(|&c| u64::from(index.chunks[c as usize].stored_len))
            .sum()
    };
    PushReport {
        version: 1,
        job: job.to_string(),
        index: index_id.to_hex(),
        strategy: plan.strategy.to_string(),
        root: host(plan.root),
        nodes: plan.len() - 1,
        urgent_chunks: order.1,
        chunks: order.0.len(),
        urgent_bytes: stored(&order.0[..order.1]),
        total_bytes: stored(&order.0),
        urgent_complete_s: out.urgent_s,
        all_complete_s: out.all_s,
        per_node,
        edges: edge_list,
        uplinks,
        failures,
    }
}

//! The login node as the root of a job's tree: plan in hand, it binds a QUIC endpoint,
//! runs the root relay over the login node's store and follows the job to completion. A
//! chunk the store cannot deliver ends the push at once, named ([`super::root_store`]);
//! in shared-storage mode, where the nodes read the store themselves, the root checks the
//! store's chunks before it reports a phase complete.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use manifest::{Index, IndexId};
use peertree::relay::{BulkHold, ChunkNo, Event, JobId, NodeInfo, Phase, Relay, Schedule, Timing};
use peertree::{NodeId, Plan, Topology};
use tokio::sync::mpsc;

use super::job::JobKnobs;
use super::report::{Cause, EdgeBytes, Failure, FailureKind, NodeTimes, PushReport, Uplink};
use super::root::{RootEndpoint, RootJob, RootSession};
use super::root_store::{BadChunk, CheckedStore, StoreFault};
use crate::Error;
use crate::net::Identity;

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
    /// When the order leaves chunks out: how long the root keeps serving the nodes'
    /// demand for them after the wait completed (ended early by SIGTERM or SIGINT).
    pub serve: Option<Duration>,
    /// Hold the hysteretic set back after the urgent set is on every node.
    pub bulk_hold: Option<BulkHold>,
    /// The Slurm prolog's push: its job starts once this phase is on every node. A push
    /// that fails before then (a node failed or refused, the store, the timeout), or is
    /// stopped by SIGTERM or SIGINT before then, releases the job on every node the tree
    /// reaches ([`RootSession::release`]), so a start that Slurm gives up leaves no mount
    /// behind. `None`: a failed push leaves the job where it got.
    pub release: Option<Phase>,
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
    /// The root's store could not deliver chunks of the index (and when it was found):
    /// the push ended there.
    pub store_fault: Option<(f64, StoreFault)>,
    /// Why the root could not connect to each of its own peers it failed to reach.
    pub connect_errors: HashMap<String, String>,
    /// SIGTERM or SIGINT stopped the push (only a push with [`PushSpec::release`] listens).
    pub stopped: bool,
    /// The job was released on every node the tree reached ([`PushSpec::release`]).
    pub released: bool,
}

impl Outcome {
    /// Whether `phase` is complete on every node the push reached.
    fn complete(&self, phase: Phase) -> bool {
        match phase {
            Phase::Urgent => self.urgent_s.is_some(),
            Phase::All => self.all_s.is_some(),
        }
    }

    /// Whether the push failed so far: a node failed, refused the job or lied, the store
    /// could not deliver, or the wait timed out (what makes `teesfs push` exit non-zero).
    pub fn failed(&self) -> bool {
        self.timed_out
            || self.store_fault.is_some()
            || self.events.iter().any(|(_, e)| {
                matches!(
                    e,
                    Event::EdgeFailed(..)
                        | Event::Unreachable(..)
                        | Event::Liar(..)
                        | Event::Refused(..)
                )
            })
    }
}

/// What a push with [`PushSpec::release`] watches besides the tree: the signals that stop
/// it, and whether its job may still be released.
struct Armed {
    /// The phase at which the job starts; `None` once it has started (a stop then ends the
    /// push without releasing anything).
    starts: Option<Phase>,
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Armed {
    fn new(starts: Phase) -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let armed = Armed {
            starts: Some(starts),
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        };
        // Listening now: a background copy may be told of its foreground's end.
        crate::handover::tie_to_parent();
        armed
    }

    /// The job has started on every node: from now on nothing is released.
    fn started(&mut self) {
        self.starts = None;
        crate::handover::untie_from_parent();
    }
}

/// SIGTERM or SIGINT, if the push listens; else never.
async fn stop_signal(armed: &mut Option<Armed>) {
    async fn fired(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    match armed {
        Some(a) => tokio::select! {
            () = fired(&mut a.term) => {}
            () = fired(&mut a.int) => {}
        },
        None => std::future::pending().await,
    }
}

/// What ended a wait of the push's loop.
enum Step {
    /// A relay event, or `None` at the timeout.
    Event(Option<(f64, Event)>),
    /// The root's store could not deliver chunks.
    Bad(Vec<BadChunk>),
    /// Shared-storage mode: the store's chunks of a phase were checked; the bad ones.
    Scanned(Phase, Vec<BadChunk>),
    /// SIGTERM or SIGINT (a push with [`PushSpec::release`]).
    Stopped,
}

/// Shared-storage mode: checks, on the blocking pool, the chunks the nodes will read from
/// the store themselves (the root sends none, so nothing else would), the urgent set
/// first; each phase's result is sent when it is known.
fn scan_store(
    store: Arc<CheckedStore>,
    order: &(Vec<u32>, usize),
    chunks: usize,
) -> mpsc::UnboundedReceiver<(Phase, Vec<BadChunk>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let urgent: Vec<ChunkNo> = order.0[..order.1].iter().copied().map(ChunkNo).collect();
    tokio::task::spawn_blocking(move || {
        let first: std::collections::HashSet<ChunkNo> = urgent.iter().copied().collect();
        let _ = tx.send((Phase::Urgent, store.check(urgent)));
        let rest = (0..chunks)
            .filter_map(ChunkNo::at)
            .filter(|p| !first.contains(p));
        let _ = tx.send((Phase::All, store.check(rest)));
    });
    rx
}

/// The next scan result, never if there is no scan.
async fn scanned(
    scan: &mut Option<mpsc::UnboundedReceiver<(Phase, Vec<BadChunk>)>>,
) -> Option<(Phase, Vec<BadChunk>)> {
    match scan {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs the root until `wait` completes for every reachable node (or `timeout`).
/// `on_progress` is called after every event with the progress and everything seen so far.
pub async fn push(
    spec: PushSpec,
    wait: Phase,
    timeout: Duration,
    on_progress: impl FnMut(&Progress, &Outcome),
) -> Result<Outcome, Error> {
    let sizes = spec.index.chunks.iter().map(|c| c.stored_len).collect();
    let schedule_order = spec.order.clone();
    let order = spec.order.0.into_iter().map(ChunkNo).collect();
    let schedule = Arc::new(Schedule::new(order, spec.order.1, sizes)?);
    let endpoint = RootEndpoint {
        identity: spec.identity,
        listen: spec.listen,
        advertise: spec.advertise,
    };
    let (store_dir, index_id) = (spec.store.root().to_path_buf(), spec.index_id);
    let (checked, faults) = CheckedStore::new(spec.store, spec.index.clone());
    let checked = Arc::new(checked);
    let scan = spec
        .shared_store
        .is_some()
        .then(|| scan_store(checked.clone(), &schedule_order, spec.index.chunks.len()));
    let (recheck_store, root) = (Some(checked.clone()), spec.nodes.first().map(|n| n.id));
    let job = RootJob {
        index: spec.index,
        index_id: spec.index_id,
        bytes: checked,
        knobs: JobKnobs::rate_limited(spec.rate_limit),
    };
    let (id, timing, signed) = (spec.job, spec.timing, spec.signed_index);
    let (shared_store, owner, spec_serve) = (spec.shared_store, spec.owner, spec.serve);
    let mut armed = spec.release.map(Armed::new);
    // Without an urgent set nothing starts before the whole layer is there: no hold.
    let bulk_hold = spec.bulk_hold.filter(|_| schedule.urgent > 0);
    let nodes = spec.nodes.len();
    let mut session = RootSession::open(&endpoint, spec.nodes, job, |nodes, start| {
        let mut relay = Relay::new_root(id, nodes, signed.into(), schedule, timing, start)?;
        relay.set_shared_store(shared_store);
        relay.set_owner(owner);
        relay.set_root_clock(unix_ms_now());
        if let Some(hold) = bulk_hold {
            relay.set_bulk_hold(hold);
        }
        Ok(relay)
    })?;

    let mut watch = StoreWatch {
        faults,
        scan,
        store: store_dir,
        index: index_id,
        checked: recheck_store,
        root,
    };
    let progress = Progress {
        nodes: nodes.saturating_sub(1),
        ..Progress::default()
    };
    let mut out = follow(
        (&mut session, &mut watch, &mut armed),
        progress,
        wait,
        timeout,
        on_progress,
    )
    .await;
    let starting = armed.as_ref().is_some_and(|a| a.starts.is_some());
    if starting && (out.stopped || out.failed()) {
        tracing::warn!(
            stopped = out.stopped,
            "the push failed before the job started: releasing the job on every node the tree reaches"
        );
        session.release().await;
        out.released = true;
    }
    let serving = !out.timed_out && out.store_fault.is_none() && !out.stopped && !out.released;
    if let Some(serve) = spec_serve.filter(|_| serving) {
        serve_demand(&mut session, serve, &mut watch, &mut out).await;
    }
    // Edge byte counts of the root's own children, which the relay keeps itself.
    let starved = session.core().counters().starved;
    if starved > 0 {
        // Kept, not failed: the deadline is tight for the nodes' load, and a node slower
        // still (its transport silent too) would have been given up.
        tracing::info!(
            starved,
            "children stayed silent past the deadline while their transport answered"
        );
    }
    out.connect_errors = session.connect_errors();
    let root_edges = session.core().view().child_bytes;
    let now = session.start.elapsed().as_secs_f64();
    for (p, c, b) in root_edges {
        out.events.push((now, Event::EdgeBytes(p, c, b)));
    }
    session.close(out.all_s.is_some() || out.released).await;
    Ok(out)
}

/// What the push watches in the root's store besides the relay's events.
struct StoreWatch {
    /// Chunks the root could not send.
    faults: mpsc::UnboundedReceiver<BadChunk>,
    /// Shared-storage mode: the check of the store's chunks.
    scan: Option<mpsc::UnboundedReceiver<(Phase, Vec<BadChunk>)>>,
    /// The store's directory.
    store: std::path::PathBuf,
    /// The index pushed.
    index: IndexId,
    /// The store, until a node refuses a chunk the root sent: then it is checked again,
    /// marks not trusted, in the background, and its bad chunks come as `faults`.
    checked: Option<Arc<CheckedStore>>,
    /// The root.
    root: Option<NodeId>,
}

impl StoreWatch {
    /// Watches `ev`: a node that calls the root a liar starts a check of the whole store
    /// (once a push), which names the chunks a mark hid ([`CheckedStore::recheck`]).
    fn saw(&mut self, ev: &Event) {
        if let Event::Liar(p, _) = ev
            && Some(*p) == self.root
            && let Some(store) = self.checked.take()
        {
            tracing::warn!("a node refused a chunk the root sent: checking the root's store again");
            tokio::task::spawn_blocking(move || store.recheck());
        }
    }
}

/// Follows the root's events until `wait` completes for every reachable node, the store
/// fails or `timeout` passes. A phase is complete when the nodes hold it and, in
/// shared-storage mode, its chunks in the store were found whole.
async fn follow(
    (session, watch, armed): (&mut RootSession, &mut StoreWatch, &mut Option<Armed>),
    mut progress: Progress,
    wait: Phase,
    timeout: Duration,
    mut on_progress: impl FnMut(&Progress, &Outcome),
) -> Outcome {
    let mut out = Outcome::default();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut nodes_done: [Option<f64>; 2] = [None, None];
    let scanning = watch.scan.is_some();
    let mut checked = [!scanning; 2];
    loop {
        let step = tokio::select! {
            e = session.next_event(deadline) => Step::Event(e),
            Some(bad) = watch.faults.recv() => Step::Bad(vec![bad]),
            Some((phase, bad)) = scanned(&mut watch.scan) => Step::Scanned(phase, bad),
            () = stop_signal(armed) => Step::Stopped,
        };
        let at = session.start.elapsed().as_secs_f64();
        match step {
            Step::Event(None) => {
                out.timed_out = true;
                break;
            }
            Step::Stopped => {
                out.stopped = true;
                break;
            }
            Step::Event(Some((t, ev))) => {
                match &ev {
                    Event::NodeDone(_, Phase::Urgent) => progress.urgent += 1,
                    Event::NodeDone(_, Phase::All) => progress.all += 1,
                    Event::EdgeFailed(..) | Event::Unreachable(..) => progress.failed += 1,
                    Event::JobPhaseDone(p) => nodes_done[p.index()] = Some(t),
                    _ => {}
                }
                watch.saw(&ev);
                out.events.push((t, ev));
            }
            Step::Bad(bad) | Step::Scanned(_, bad) if !bad.is_empty() => {
                let (store, index) = (watch.store.clone(), watch.index);
                out.store_fault = Some((at, StoreFault { store, index, bad }));
                break;
            }
            Step::Bad(_) => {}
            Step::Scanned(phase, _) => checked[phase.index()] = true,
        }
        for phase in Phase::BOTH {
            let slot = match phase {
                Phase::Urgent => &mut out.urgent_s,
                Phase::All => &mut out.all_s,
            };
            if slot.is_none() && checked[phase.index()] {
                // Complete when the later of the two is known.
                *slot = nodes_done[phase.index()].map(|t| if scanning { t.max(at) } else { t });
            }
        }
        progress.bytes_out = session.core().counters().bytes_out;
        on_progress(&progress, &out);
        if let Some(a) = armed.as_mut()
            && let Some(starts) = a.starts
            && out.complete(starts)
        {
            if out.failed() {
                break; // released by the caller
            }
            a.started();
        }
        if out.complete(wait) {
            break;
        }
    }
    out
}

/// Keeps the root serving the nodes' demand for chunks the push did not stream, for `serve`
/// or until SIGTERM or SIGINT, then finishes the job on every node. A demanded chunk the
/// store cannot deliver is kept for the push's outcome (it fails, naming them), while the
/// rest of the layer is still served.
async fn serve_demand(
    session: &mut RootSession,
    serve: Duration,
    watch: &mut StoreWatch,
    out: &mut Outcome,
) {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    async fn fired(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let until = tokio::time::Instant::now() + serve;
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    tracing::info!(
        ?serve,
        "serving the nodes' demand for the chunks not streamed"
    );
    loop {
        tokio::select! {
            e = session.next_event(until) => match e {
                Some(e) => {
                    watch.saw(&e.1);
                    out.events.push(e);
                }
                None => break,
            },
            Some(bad) = watch.faults.recv() => {
                let at = session.start.elapsed().as_secs_f64();
                let (store, index) = (watch.store.clone(), watch.index);
                let (_, fault) = out.store_fault.get_or_insert_with(|| {
                    (at, StoreFault { store, index, bad: Vec::new() })
                });
                if !fault.bad.iter().any(|b| b.position == bad.position) {
                    fault.bad.push(bad);
                }
            }
            () = fired(&mut term) => break,
            () = fired(&mut int) => break,
        }
    }
    session.core().end_serving();
}

/// Bytes in and out of each group over its uplink: the edges whose ends are in different
/// groups (or outside every group, like the root), in group order.
fn uplinks(plan: &Plan, topo: &Topology, edges: &HashMap<(NodeId, NodeId), u64>) -> Vec<Uplink> {
    let group_of = |n: NodeId| plan.topo[n.index()].map(|t| topo.group_of(t));
    let mut acc: HashMap<usize, (u64, u64)> = HashMap::new();
    for (&(p, c), &b) in edges {
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
    groups
        .into_iter()
        .map(|(g, (i, o))| {
            let grp = topo.group(peertree::GroupId(g as u32));
            Uplink {
                group: g,
                proxy: topo.host(grp.proxy).to_string(),
                in_bytes: i,
                out_bytes: o,
            }
        })
        .collect()
}

/// Why an edge of kind `kind` failed, as far as the root can tell: the connection's own error
/// when the root dialled the node itself, else what the kind means and where to look.
fn edge_reason(kind: FailureKind, connect_error: Option<&String>) -> String {
    let seen = connect_error.map(|e| format!("{e}; ")).unwrap_or_default();
    match kind {
        FailureKind::Unreachable => format!(
            "{seen}never answered: no daemon there, or it never got the job (is \
             teesfs-daemon running there, on the port and address [network] names?)"
        ),
        FailureKind::Failed => format!(
            "{seen}stopped answering its parent during the push (its daemon stopped or \
             crashed, the host went down, or the link was lost); its journal says which"
        ),
        _ => "sent a chunk that failed verification; the child fetched it elsewhere (check \
              the parent's memory and store)"
            .to_owned(),
    }
}

/// What the root's events say, per node and edge.
struct Tally {
    /// When each node held the urgent set and the whole layer.
    times: HashMap<NodeId, (Option<f64>, Option<f64>)>,
    /// The most bytes each edge reported.
    edges: HashMap<(NodeId, NodeId), u64>,
    /// The refusals and failed edges, in the order learned.
    failures: Vec<Failure>,
}

/// Tallies the root's events into arrival times, edge bytes and failures.
fn tally(plan: &Plan, out: &Outcome) -> Tally {
    let host = |n: NodeId| plan.host(n).to_string();
    let mut times: HashMap<NodeId, (Option<f64>, Option<f64>)> = HashMap::new();
    let mut edges: HashMap<(NodeId, NodeId), u64> = HashMap::new();
    let mut failures = Vec::new();
    // A node that refused the job is reported with its reason, not again as a failed edge.
    let refused: std::collections::HashSet<NodeId> = out
        .events
        .iter()
        .filter_map(|(_, ev)| match ev {
            Event::Refused(n, _) => Some(*n),
            _ => None,
        })
        .collect();
    for (t, ev) in &out.events {
        match *ev {
            Event::Refused(n, ref reason) => failures.push(Failure {
                kind: FailureKind::Refused,
                parent: plan.parent[n.index()].map(host).unwrap_or_default(),
                child: host(n),
                at_s: *t,
                reason: Some(reason.clone()),
                cause: None,
            }),
            Event::EdgeFailed(_, c) if refused.contains(&c) => {}
            // The root's damaged store, named once as the store's failure below.
            Event::Liar(p, _) if p == plan.root && out.store_fault.is_some() => {}
            Event::NodeDone(n, Phase::Urgent) => times.entry(n).or_default().0 = Some(*t),
            Event::NodeDone(n, Phase::All) => times.entry(n).or_default().1 = Some(*t),
            Event::EdgeBytes(p, c, b) => {
                let e = edges.entry((p, c)).or_default();
                *e = (*e).max(b);
            }
            Event::EdgeFailed(p, c) | Event::Unreachable(p, c) | Event::Liar(p, c) => {
                let kind = match ev {
                    Event::EdgeFailed(..) => FailureKind::Failed,
                    Event::Unreachable(..) => FailureKind::Unreachable,
                    _ => FailureKind::Liar,
                };
                let child = host(c);
                // A node that never reported anything never joined, whatever the kind.
                let heard = times.contains_key(&c) || edges.keys().any(|&(_, to)| to == c);
                let kind_seen = if kind == FailureKind::Failed && !heard {
                    FailureKind::Unreachable
                } else {
                    kind
                };
                let seen = out.connect_errors.get(&child);
                let reason = edge_reason(kind_seen, seen);
                let cause = match kind_seen {
                    FailureKind::Unreachable => Some(
                        seen.and_then(|e| Cause::of_connect_error(e))
                            .unwrap_or(Cause::NoAnswer),
                    ),
                    FailureKind::Failed => Some(Cause::Stopped),
                    _ => None,
                };
                failures.push(Failure {
                    kind,
                    parent: host(p),
                    child,
                    at_s: *t,
                    reason: Some(reason),
                    cause,
                });
            }
            _ => {}
        }
    }
    Tally {
        times,
        edges,
        failures,
    }
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
    let Tally {
        times,
        edges,
        mut failures,
    } = tally(plan, out);
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
                group: topology
                    .zip(plan.topo[n.index()])
                    .map(|(topo, t)| topo.group_of(t).0 as usize),
                app_start_s: None,
            }
        })
        .collect();
    if let Some((at, fault)) = &out.store_fault {
        failures.push(Failure {
            kind: FailureKind::Store,
            parent: host(plan.root),
            child: host(plan.root),
            at_s: *at,
            reason: Some(fault.to_string()),
            cause: None,
        });
    }
    let uplinks = topology.map_or_else(Vec::new, |topo| uplinks(plan, topo, &edges));
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
        chunks: index.chunks.len(),
        urgent_bytes: stored(&order.0[..order.1]),
        total_bytes: index.chunks.iter().map(|c| u64::from(c.stored_len)).sum(),
        streamed_bytes: stored(&order.0),
        urgent_complete_s: out.urgent_s,
        all_complete_s: out.all_s,
        per_node,
        edges: edge_list,
        uplinks,
        failures,
        learned_files: 0,
        rates: None,
    }
}

/// This host's wall clock, in milliseconds since the Unix epoch (0 before 1970).
pub(crate) fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What releases a prolog's job is what makes `teesfs push` exit non-zero: a failed,
    /// unreachable, refusing or lying node, the store, the timeout; progress alone is not.
    #[test]
    fn a_push_fails_on_the_same_facts_as_its_exit_status() {
        let mut out = Outcome::default();
        out.events
            .push((0.1, Event::NodeDone(NodeId(1), Phase::Urgent)));
        out.events.push((0.2, Event::JobPhaseDone(Phase::Urgent)));
        assert!(!out.failed());
        for ev in [
            Event::EdgeFailed(NodeId(0), NodeId(2)),
            Event::Unreachable(NodeId(1), NodeId(3)),
            Event::Liar(NodeId(1), NodeId(2)),
            Event::Refused(NodeId(2), "index revoked".into()),
        ] {
            let mut o = Outcome::default();
            o.events.push((1.0, ev));
            assert!(o.failed());
        }
        let timed_out = Outcome {
            timed_out: true,
            ..Outcome::default()
        };
        assert!(timed_out.failed());
        out.urgent_s = Some(0.2);
        assert!(out.complete(Phase::Urgent) && !out.complete(Phase::All));
    }
}

//! The relay protocol as a sans-IO state machine: one [`Relay`] per node per job.
//!
//! Inputs are `handle_*(now, …)` calls, outputs are `poll_*()` calls; there are no sockets
//! and no clock here. The node daemon drives it under QUIC and the simulator under a
//! modelled network, so both run the same protocol code.
//!
//! What a relay does:
//! - forwards `Start` (its children's part of the plan plus the signed index) to each child;
//!   the root first sends each child, and each grandchild with children, a small
//!   `Prepare` (its part of the plan, no index), which every node passes on the same way
//!   at once ([`forward_prepare`]), so connections are set up two levels ahead of the
//!   `Start`s instead of one after another;
//! - pushes chunks to each child in the root's order (urgent set first) as soon as it holds
//!   them (cut-through); the transport pulls them with [`Relay::poll_bulk`] when a link has
//!   room, so a slow child never makes a node buffer the layer;
//! - answers demand requests (`Want`) at once, or asks its own parent once however many
//!   children want the same chunk;
//! - reports completion facts, failed edges, liars and re-attachments up to the root;
//! - declares a silent child failed after the deadline; a node whose parent is silent or
//!   lied attaches to its nearest live ancestor, telling it what it already holds so
//!   nothing is sent twice;
//! - measures each edge's round trip (its child's `Start` handed to the transport, to the
//!   child's first message back) and reports it up, so a health probe ([`Relay::new_probe_root`],
//!   a job with no chunks) tells the root every edge's latency and every dead edge.
//!
//! Chunk contents never pass through here: the caller verifies and stores chunks, then calls
//! [`Relay::handle_chunk`]; when the relay says "send chunk 12 to node 7" the caller reads the
//! bytes from its store.

mod msg;
mod root;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixedbitset::FixedBitSet;

pub use msg::{
    JobId, MAX_MESSAGE, Msg, NodeInfo, Phase, Prepare, Report, Start, Timing, WireError,
};
use root::RootState;

use crate::plan::NodeId;

/// The push order of a job's chunks, shared by every relay of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Chunk-table positions in push order: the urgent set first.
    pub order: Vec<u32>,
    /// How many of `order` are urgent.
    pub urgent: usize,
    /// Stored size of each chunk, by chunk-table position (for byte accounting).
    pub sizes: Vec<u32>,
    is_urgent: FixedBitSet,
}

/// A schedule that does not describe a permutation of the chunk table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid push order: {0}")]
pub struct ScheduleError(String);

impl Schedule {
    /// Checks that `order` lists every chunk exactly once and `urgent <= order.len()`.
    pub fn new(order: Vec<u32>, urgent: usize, sizes: Vec<u32>) -> Result<Self, ScheduleError> {
        if order.len() != sizes.len() {
            return Err(ScheduleError(format!(
                "{} positions for {} chunks",
                order.len(),
                sizes.len()
            )));
        }
        if urgent > order.len() {
            return Err(ScheduleError(format!(
                "{urgent} urgent chunks out of {}",
                order.len()
            )));
        }
        let mut seen = FixedBitSet::with_capacity(sizes.len());
        let mut is_urgent = FixedBitSet::with_capacity(sizes.len());
        for (i, &c) in order.iter().enumerate() {
            let c = c as usize;
            if c >= sizes.len() || seen.put(c) {
                return Err(ScheduleError(format!("chunk {c} missing or repeated")));
            }
            if i < urgent {
                is_urgent.insert(c);
            }
        }
        Ok(Self {
            order,
            urgent,
            sizes,
            is_urgent,
        })
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the layer has no chunks at all.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether a chunk is in the urgent set.
    pub fn urgent_chunk(&self, chunk: u32) -> bool {
        self.is_urgent.contains(chunk as usize)
    }
}

/// Something the caller must send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A control message (`Want` travels on the priority stream, the rest on control).
    Control {
        /// Destination.
        to: NodeId,
        /// The message.
        msg: Msg,
    },
    /// A chunk answering a demand: read it from the store and send it with priority.
    DemandChunk {
        /// Destination.
        to: NodeId,
        /// Chunk-table position.
        chunk: u32,
    },
}

/// Things that happened, for logs, progress bars and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This node now holds every chunk of a phase.
    LocalPhaseDone(Phase),
    /// A child stopped answering and was dropped.
    ChildFailed(NodeId),
    /// The parent stopped answering or lied; re-attaching upward.
    ParentLost(NodeId),
    /// Adopted by a new parent.
    Reattached(NodeId),
    /// A peer sent a chunk that failed verification.
    BadChunk {
        /// Who sent it.
        from: NodeId,
        /// Which chunk.
        chunk: u32,
    },
    /// Root only: a node completed a phase.
    NodeDone(NodeId, Phase),
    /// Root only: every node that can be reached has completed the phase.
    JobPhaseDone(Phase),
    /// Root only: an edge failed (`parent -> child`).
    EdgeFailed(NodeId, NodeId),
    /// Root only: a node never re-attached after its parent failed; `(planned parent, node)`.
    Unreachable(NodeId, NodeId),
    /// Root only: `(parent, child)` where the child caught the parent lying.
    Liar(NodeId, NodeId),
    /// Root only: a node re-attached under a new parent.
    Attached(NodeId, NodeId),
    /// Root only: bytes pushed over an edge.
    EdgeBytes(NodeId, NodeId, u64),
    /// Root only: the round trip of an edge `(parent, child)` as the parent measured it.
    EdgeRtt(NodeId, NodeId, Duration),
    /// The root declared the job finished (on every node, when it hears so).
    Finished,
}

/// Who waits for a demanded chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Waiter {
    Local,
    Child(NodeId),
}

#[derive(Debug)]
struct Child {
    info: NodeInfo,
    /// Chunks the child holds or has been sent.
    sent: FixedBitSet,
    cursor: usize,
    /// `Start` has been handed to the transport.
    started: bool,
    /// The child has answered since: bulk may flow.
    ready: bool,
    last_heard: Instant,
    last_sent: Instant,
    bytes: u64,
    /// Started from here after its planned parent failed: report the adoption when it
    /// first speaks.
    restarted: bool,
    /// Not planned here: it attached here, or was restarted from here and answered.
    adopted: bool,
    /// When its `Start` was handed to the transport, until its first answer (the edge's
    /// round trip is measured from here).
    start_sent: Option<Instant>,
}

impl Child {
    /// A child that still needs its `Start` (planned, or restarted after its parent failed).
    fn pending(info: NodeInfo, chunks: usize, now: Instant, restarted: bool) -> Self {
        Self {
            info,
            sent: FixedBitSet::with_capacity(chunks),
            cursor: 0,
            started: false,
            ready: false,
            last_heard: now,
            last_sent: now,
            bytes: 0,
            restarted,
            adopted: false,
            start_sent: None,
        }
    }
}

#[derive(Debug)]
struct Attaching {
    /// Index into `ancestors` being asked.
    target: usize,
    deadline: Instant,
}

/// Counters for tests and status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Chunks received that were already held.
    pub duplicates: u64,
    /// Chunks received that failed verification.
    pub bad: u64,
    /// `Want` messages sent to a parent.
    pub wants_sent: u64,
    /// Chunks pushed to children.
    pub pushed: u64,
    /// Chunks sent answering demands.
    pub demand_served: u64,
    /// Chunks this node held and then lost from its store (evicted or unreadable).
    pub lost: u64,
}

/// One node's relay state for one job.
#[derive(Debug)]
pub struct Relay {
    job: JobId,
    me: NodeId,
    timing: Timing,
    schedule: Arc<Schedule>,
    index: Arc<[u8]>,
    have: FixedBitSet,
    have_count: usize,
    urgent_have: usize,
    local_done: [bool; 2],
    /// My planned subtree, me first (for handing children their part).
    subtree: Vec<NodeInfo>,
    /// Ancestors, nearest first; empty at the root.
    ancestors: Vec<NodeInfo>,
    parent: Option<NodeId>,
    parent_heard: Instant,
    last_sent_parent: Instant,
    attaching: Option<Attaching>,
    children: BTreeMap<NodeId, Child>,
    control: VecDeque<Transmit>,
    events: VecDeque<Event>,
    report: Report,
    /// Completion facts of my subtree, re-sent after re-attaching.
    done_log: Vec<(NodeId, Phase)>,
    /// Failed edges in my subtree, re-sent after re-attaching: a report sent to a parent
    /// that died before passing it on is lost, and the root would wait for the node in it
    /// for ever.
    failed_log: Vec<(NodeId, NodeId)>,
    wants: HashMap<u32, Vec<Waiter>>,
    asked: HashSet<u32>,
    /// Chunks held once and lost since: asked for again with [`Msg::Lost`], because the
    /// parent believes they are here.
    lost: HashSet<u32>,
    /// How many of `lost` are urgent. A phase is complete when every chunk of it arrived
    /// once, held now or lost since: a store smaller than the layer still completes.
    lost_urgent: usize,
    finished: bool,
    stats: RelayStats,
    root: Option<RootState>,
    shared_store: Option<String>,
    /// A health probe: no chunks, every node answers at once.
    probe: bool,
    /// The job's owner (uid), passed down in every `Start`.
    owner: Option<u32>,
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

/// A malformed `Start`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid start message: {0}")]
pub struct StartError(pub String);

impl Relay {
    /// Shared-storage mode: nodes read from this store directory instead of the tree.
    pub fn set_shared_store(&mut self, path: Option<String>) {
        self.shared_store = path;
        self.refresh_queued_starts();
    }

    /// Rewrites the `Start`s queued for my children after a job-wide setting changed.
    fn refresh_queued_starts(&mut self) {
        let mut parts = self.child_subtrees();
        let kids: Vec<NodeId> = self.children.keys().copied().collect();
        for k in kids {
            let start = self.start_for(parts.remove(&k).unwrap_or_default());
            for t in self.control.iter_mut() {
                if let Transmit::Control {
                    to,
                    msg: Msg::Start(s),
                } = t
                    && *to == k
                {
                    **s = start.clone();
                }
            }
        }
    }

    /// The shared store of a shared-storage job.
    pub fn shared_store(&self) -> Option<&str> {
        self.shared_store.as_deref()
    }

    /// The root of a job: holds every chunk. `nodes` is the whole plan, root first, parents
    /// before children.
    pub fn new_root(
        job: JobId,
        nodes: Vec<NodeInfo>,
        index: Arc<[u8]>,
        schedule: Arc<Schedule>,
        timing: Timing,
        now: Instant,
    ) -> Result<Self, StartError> {
        Self::root(job, nodes, index, schedule, timing, now, false)
    }

    /// The root of a job: it holds every chunk and adopts its planned children.
    fn root(
        job: JobId,
        nodes: Vec<NodeInfo>,
        index: Arc<[u8]>,
        schedule: Arc<Schedule>,
        timing: Timing,
        now: Instant,
        probe: bool,
    ) -> Result<Self, StartError> {
        let me = nodes
            .first()
            .ok_or_else(|| StartError("empty plan".into()))?
            .id;
        let mut have = FixedBitSet::with_capacity(schedule.len());
        have.insert_range(..);
        let root = RootState::new(&nodes, now);
        let mut r = Self::blank(job, me, timing, schedule, index, nodes, Vec::new(), now);
        r.have = have;
        r.have_count = r.schedule.len();
        r.urgent_have = r.schedule.urgent;
        r.local_done = [true, true];
        r.probe = probe;
        r.root = Some(root);
        r.adopt_planned_children(now);
        r.root_check(now);
        Ok(r)
    }

    /// The root of a health probe: an empty broadcast down the planned tree (`nodes` as
    /// for [`Relay::new_root`]). Every node answers as soon as its `Start` arrives; the
    /// root emits [`Event::EdgeRtt`] per edge, [`Event::NodeDone`] per node that answered,
    /// and failed edges as for a push.
    pub fn new_probe_root(
        job: JobId,
        nodes: Vec<NodeInfo>,
        timing: Timing,
        now: Instant,
    ) -> Result<Self, StartError> {
        let schedule = Arc::new(Schedule::new(Vec::new(), 0, Vec::new()).expect("empty"));
        Self::root(job, nodes, Arc::from(&[][..]), schedule, timing, now, true)
    }

    /// A node joining a job from a verified `Start` (the caller checked the index
    /// signature and built `schedule` from it).
    pub fn new_node(
        start: Start,
        schedule: Arc<Schedule>,
        now: Instant,
    ) -> Result<Self, StartError> {
        let me = start
            .subtree
            .first()
            .ok_or_else(|| StartError("no subtree".into()))?
            .id;
        let parent = start
            .ancestors
            .first()
            .ok_or_else(|| StartError("no ancestors".into()))?
            .id;
        if start.timing.deadline_ms == 0 || start.timing.heartbeat_ms == 0 {
            return Err(StartError("zero heartbeat or deadline".into()));
        }
        if start.probe && (!schedule.is_empty() || !start.index.is_empty()) {
            return Err(StartError("a probe carries no index and no chunks".into()));
        }
        let probe = start.probe;
        let owner = start.owner;
        let shared = start.shared_store.clone();
        let index: Arc<[u8]> = start.index.into();
        let mut r = Self::blank(
            start.job,
            me,
            start.timing,
            schedule,
            index,
            start.subtree,
            start.ancestors,
            now,
        );
        r.parent = Some(parent);
        r.probe = probe;
        r.owner = owner;
        if shared.is_some() {
            // Everything is readable from shared storage already.
            r.have.insert_range(..);
            r.have_count = r.schedule.len();
            r.urgent_have = r.schedule.urgent;
        }
        r.shared_store = shared;
        r.adopt_planned_children(now);
        r.check_local_done();
        // Tell the parent at once that we are in, so it starts pushing.
        r.flush_report(now, true);
        Ok(r)
    }

    #[allow(clippy::too_many_arguments)]
    fn blank(
        job: JobId,
        me: NodeId,
        timing: Timing,
        schedule: Arc<Schedule>,
        index: Arc<[u8]>,
        subtree: Vec<NodeInfo>,
        ancestors: Vec<NodeInfo>,
        now: Instant,
    ) -> Self {
        let n = schedule.len();
        Self {
            job,
            me,
            timing,
            schedule,
            index,
            have: FixedBitSet::with_capacity(n),
            have_count: 0,
            urgent_have: 0,
            local_done: [false, false],
            subtree,
            ancestors,
            parent: None,
            parent_heard: now,
            last_sent_parent: now,
            attaching: None,
            children: BTreeMap::new(),
            control: VecDeque::new(),
            events: VecDeque::new(),
            report: Report::default(),
            done_log: Vec::new(),
            failed_log: Vec::new(),
            wants: HashMap::new(),
            asked: HashSet::new(),
            lost: HashSet::new(),
            lost_urgent: 0,
            finished: false,
            stats: RelayStats::default(),
            root: None,
            shared_store: None,
            probe: false,
            owner: None,
        }
    }

    /// Creates child state for my planned children and queues their `Start`s.
    fn adopt_planned_children(&mut self, now: Instant) {
        let kids: Vec<NodeInfo> = self
            .subtree
            .iter()
            .skip(1)
            .filter(|n| n.parent == self.me)
            .cloned()
            .collect();
        let mut parts = self.child_subtrees();
        // The root starts the wave of `Prepare`s, ahead of every `Start`; below it the
        // caller passes them on ([`forward_prepare`]) as they arrive.
        if self.root.is_some() {
            for (to, p) in prepares_for(self.me, &self.subtree) {
                self.control.push_back(Transmit::Control {
                    to: to.id,
                    msg: Msg::Prepare(p),
                });
            }
        }
        for info in kids {
            let id = info.id;
            self.children
                .insert(id, Child::pending(info, self.schedule.len(), now, false));
            let start = self.start_for(parts.remove(&id).unwrap_or_default());
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Start(Box::new(start)),
            });
        }
    }

    /// The planned subtree of each of my planned children.
    fn child_subtrees(&self) -> HashMap<NodeId, Vec<NodeInfo>> {
        split_subtree(self.me, &self.subtree)
    }

    /// The `Start` for one of my planned children, given its subtree: it and my ancestry.
    fn start_for(&self, subtree: Vec<NodeInfo>) -> Start {
        let mut ancestors = vec![self.subtree[0].clone()];
        ancestors.extend(self.ancestors.iter().cloned());
        Start {
            job: self.job,
            index: self.index.to_vec(),
            order: self.schedule.order.clone(),
            urgent: self.schedule.urgent as u32,
            subtree,
            ancestors,
            timing: self.timing,
            shared_store: self.shared_store.clone(),
            probe: self.probe,
            owner: self.owner,
        }
    }

    /// This node's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The job.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The signed index of the job.
    pub fn index(&self) -> &Arc<[u8]> {
        &self.index
    }

    /// The push order.
    pub fn schedule(&self) -> &Arc<Schedule> {
        &self.schedule
    }

    /// Current parent (`None` at the root or while re-attaching).
    pub fn parent(&self) -> Option<NodeId> {
        if self.attaching.is_some() {
            None
        } else {
            self.parent
        }
    }

    /// Current children.
    pub fn children(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.children.keys().copied()
    }

    /// What is known about a peer (children, ancestors, subtree members).
    pub fn peer(&self, id: NodeId) -> Option<&NodeInfo> {
        self.children
            .get(&id)
            .map(|c| &c.info)
            .or_else(|| self.ancestors.iter().find(|a| a.id == id))
            .or_else(|| self.subtree.iter().find(|n| n.id == id))
    }

    /// Whether this node holds a chunk.
    pub fn has(&self, chunk: u32) -> bool {
        self.have.contains(chunk as usize)
    }

    /// Chunks held.
    pub fn have_count(&self) -> usize {
        self.have_count
    }

    /// Whether this node holds every chunk of `phase`.
    pub fn local_done(&self, phase: Phase) -> bool {
        self.local_done[phase.index()]
    }

    /// Whether the root declared the job finished.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Sets the job's owner (root side; nodes take it from their `Start`).
    pub fn set_owner(&mut self, uid: Option<u32>) {
        self.owner = uid;
        self.refresh_queued_starts();
    }

    /// The job's owner (uid), if the push named one.
    pub fn owner(&self) -> Option<u32> {
        self.owner
    }

    /// Whether this job is a health probe (no chunks; drop it once finished).
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Counters.
    pub fn stats(&self) -> RelayStats {
        self.stats
    }

    /// Bytes pushed to each current child.
    pub fn child_bytes(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.children.iter().map(|(&id, c)| (id, c.bytes))
    }

    /// Root only: the progress of the whole job.
    pub fn job_progress(&self) -> Option<root::JobProgress> {
        self.root.as_ref().map(RootState::progress)
    }

    fn touch(&mut self, from: NodeId, now: Instant) {
        if Some(from) == self.parent {
            self.parent_heard = now;
        }
        if let Some(c) = self.children.get_mut(&from) {
            c.last_heard = now;
            // The child has its Start (it speaks to us), so chunks sent now will not race
            // ahead of it on another stream.
            c.ready = true;
            let mut fact = Report::default();
            if std::mem::take(&mut c.restarted) {
                c.adopted = true;
                fact.attached.push((self.me, from));
            }
            if let Some(sent) = c.start_sent.take() {
                let us = now.saturating_duration_since(sent).as_micros();
                fact.edge_rtt
                    .push((self.me, from, us.min(u128::from(u32::MAX)) as u32));
            }
            if !fact.is_empty() {
                self.absorb(now, fact);
            }
        }
    }

    /// This node's store already holds `positions` when it joins (kept from an earlier job
    /// that used the same chunks): they count as received, are forwarded to the children
    /// like any other, and the parent is told ([`Msg::Held`]) so that it does not send them.
    /// Call it right after [`Relay::new_node`].
    pub fn hold_existing(&mut self, positions: impl IntoIterator<Item = u32>) {
        let n = self.schedule.len();
        let mut held = FixedBitSet::with_capacity(n);
        for p in positions {
            if (p as usize) < n && !self.have.put(p as usize) {
                held.insert(p as usize);
                self.have_count += 1;
                if self.schedule.urgent_chunk(p) {
                    self.urgent_have += 1;
                }
            }
        }
        if held.is_clear() {
            return;
        }
        if let Some(parent) = self.parent {
            self.control.push_back(Transmit::Control {
                to: parent,
                msg: Msg::Held {
                    have: pack_words(
                        &held
                            .as_slice()
                            .iter()
                            .map(|&w| w as u64)
                            .collect::<Vec<_>>(),
                        usize::BITS,
                    ),
                },
            });
        }
        self.check_local_done();
    }

    /// A message arrived from `from` (chunks go through [`Relay::handle_chunk`]).
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Msg) {
        self.touch(from, now);
        match msg {
            Msg::Start(_) | Msg::Chunk { .. } | Msg::Prepare(_) => {}
            Msg::Ping => {}
            Msg::Want { chunk } => self.on_want(now, Waiter::Child(from), chunk),
            Msg::Lost { chunk } => {
                if let Some(c) = self.children.get_mut(&from)
                    && (chunk as usize) < self.schedule.len()
                {
                    c.sent.set(chunk as usize, false);
                }
                self.on_want(now, Waiter::Child(from), chunk);
            }
            Msg::Report(mut r) => {
                if self.children.contains_key(&from) {
                    let mut edge = None;
                    for &(node, phase) in &r.done {
                        self.done_log.push((node, phase));
                        if node == from
                            && phase == Phase::All
                            && let Some(c) = self.children.get(&from)
                        {
                            edge = Some((self.me, from, c.bytes));
                        }
                    }
                    r.edge_bytes.extend(edge);
                    self.failed_log.extend(r.failed.iter().copied());
                    self.absorb(now, r);
                }
            }
            Msg::Attach { have } => self.on_attach(now, from, &have),
            Msg::Held { have } => {
                // The child kept these from an earlier job: never send them to it.
                let n = self.schedule.len();
                if let Some(c) = self.children.get_mut(&from) {
                    c.sent.union_with(&bits_from_words(n, &have));
                }
            }
            Msg::Adopted => {
                if let Some(a) = &self.attaching
                    && self.ancestors.get(a.target).map(|n| n.id) == Some(from)
                {
                    self.attaching = None;
                    self.parent = Some(from);
                    self.parent_heard = now;
                    self.events.push_back(Event::Reattached(from));
                    // The old parent may have died before passing these on. Children
                    // that re-attached here are announced again first, so that the root
                    // takes failures below them from here.
                    self.report.done.extend(self.done_log.iter().copied());
                    self.report.failed.extend(self.failed_log.iter().copied());
                    let me = self.me;
                    self.report.attached.extend(
                        self.children
                            .iter()
                            .filter(|(_, c)| c.adopted)
                            .map(|(&id, _)| (me, id)),
                    );
                    let asked: Vec<u32> = self.asked.iter().copied().collect();
                    for chunk in asked {
                        self.send_want(chunk);
                    }
                }
            }
            Msg::Finished => {
                if Some(from) == self.parent && !self.finished {
                    self.finish();
                }
            }
        }
    }

    fn finish(&mut self) {
        self.finished = true;
        self.events.push_back(Event::Finished);
        let kids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in kids {
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Finished,
            });
        }
    }

    /// Facts from below: forward up, or process at the root.
    fn absorb(&mut self, now: Instant, r: Report) {
        if self.root.is_some() {
            self.root_absorb(now, r);
        } else {
            self.report.merge(r);
        }
    }

    fn on_attach(&mut self, now: Instant, from: NodeId, have: &[u64]) {
        let sent = bits_from_words(self.schedule.len(), have);
        let info = self
            .subtree
            .iter()
            .find(|x| x.id == from)
            .cloned()
            .unwrap_or(NodeInfo {
                id: from,
                host: String::new(),
                addr: String::new(),
                parent: self.me,
            });
        if let Some(c) = self.children.get_mut(&from) {
            // A repeated Attach: chunks already on their way stay counted as sent.
            c.sent.union_with(&sent);
            c.cursor = 0;
        } else {
            self.children.insert(
                from,
                Child {
                    info,
                    sent,
                    cursor: 0,
                    started: true,
                    ready: true,
                    last_heard: now,
                    last_sent: now,
                    bytes: 0,
                    restarted: false,
                    adopted: true,
                    start_sent: None,
                },
            );
        }
        self.control.push_back(Transmit::Control {
            to: from,
            msg: Msg::Adopted,
        });
        if self.finished {
            self.control.push_back(Transmit::Control {
                to: from,
                msg: Msg::Finished,
            });
        }
        let fact = Report {
            attached: vec![(self.me, from)],
            ..Report::default()
        };
        self.absorb(now, fact);
    }

    fn on_want(&mut self, now: Instant, who: Waiter, chunk: u32) {
        if chunk as usize >= self.schedule.len() {
            return;
        }
        if self.has(chunk) {
            if let Waiter::Child(c) = who {
                self.serve_demand(c, chunk, now);
            }
            return;
        }
        let waiters = self.wants.entry(chunk).or_default();
        if !waiters.contains(&who) {
            waiters.push(who);
        }
        if self.asked.insert(chunk) {
            self.send_want(chunk);
        }
    }

    fn send_want(&mut self, chunk: u32) {
        if let Some(p) = self.parent()
            && self.root.is_none()
        {
            self.stats.wants_sent += 1;
            let msg = if self.lost.contains(&chunk) {
                Msg::Lost { chunk }
            } else {
                Msg::Want { chunk }
            };
            self.control.push_back(Transmit::Control { to: p, msg });
        }
    }

    fn serve_demand(&mut self, child: NodeId, chunk: u32, now: Instant) {
        if let Some(c) = self.children.get_mut(&child) {
            if c.sent.put(chunk as usize) {
                // Already on its way by push; the child will have it shortly.
                return;
            }
            c.bytes += u64::from(self.schedule.sizes[chunk as usize]);
            c.last_sent = now;
            self.stats.demand_served += 1;
            self.control
                .push_back(Transmit::DemandChunk { to: child, chunk });
        }
    }

    /// A blocked local read needs `chunk`.
    pub fn handle_local_want(&mut self, now: Instant, chunk: u32) {
        self.on_want(now, Waiter::Local, chunk);
    }

    /// The store no longer holds `chunk` (evicted over its budget, deleted, unreadable):
    /// the relay stops counting it as held, so the store and the relay agree. It is asked
    /// for again at once if a child still needs it (its push would stall behind it) or
    /// somebody waits for it; otherwise when somebody next wants it. The root cannot fetch
    /// anything: a chunk lost there stays lost.
    pub fn handle_lost(&mut self, _now: Instant, chunk: u32) {
        let i = chunk as usize;
        if i >= self.schedule.len() || !self.have.contains(i) {
            return;
        }
        self.have.set(i, false);
        self.have_count -= 1;
        if self.schedule.urgent_chunk(chunk) {
            self.urgent_have -= 1;
        }
        self.stats.lost += 1;
        if self.root.is_some() {
            return;
        }
        if self.lost.insert(chunk) && self.schedule.urgent_chunk(chunk) {
            self.lost_urgent += 1;
        }
        let needed =
            self.wants.contains_key(&chunk) || self.children.values().any(|c| !c.sent.contains(i));
        if needed && self.asked.insert(chunk) {
            self.send_want(chunk);
        }
    }

    /// The transport was told to send `chunk` to `child` (by push or answering a demand)
    /// but the store could not produce it: the chunk counts as lost here and goes to the
    /// child as a demand answer once it is back.
    pub fn handle_unsent(&mut self, now: Instant, child: NodeId, chunk: u32) {
        let i = chunk as usize;
        if i >= self.schedule.len() {
            return;
        }
        if let Some(c) = self.children.get_mut(&child) {
            c.sent.set(i, false);
        }
        self.handle_lost(now, chunk);
        if self.children.contains_key(&child) {
            self.on_want(now, Waiter::Child(child), chunk);
        }
    }

    /// A chunk arrived from `from`; `valid` says whether it matched its id (the caller
    /// verified it and, if valid, stored it).
    pub fn handle_chunk(&mut self, now: Instant, from: NodeId, chunk: u32, valid: bool) {
        self.touch(from, now);
        if chunk as usize >= self.schedule.len() {
            return;
        }
        if !valid {
            self.stats.bad += 1;
            self.events.push_back(Event::BadChunk { from, chunk });
            let fact = Report {
                liars: vec![(from, self.me)],
                ..Report::default()
            };
            if self.attaching.is_some() && Some(from) == self.parent {
                // Already abandoned this parent; its late chunks change nothing.
                return;
            }
            if Some(from) == self.parent && self.root.is_none() {
                // Never again from this parent: go to the next ancestor, and tell the
                // root through it.
                self.report.merge(fact);
                self.lose_parent(now);
            } else {
                self.absorb(now, fact);
            }
            return;
        }
        if self.have.put(chunk as usize) {
            self.stats.duplicates += 1;
            return;
        }
        self.have_count += 1;
        if self.schedule.urgent_chunk(chunk) {
            self.urgent_have += 1;
        }
        if self.lost.remove(&chunk) && self.schedule.urgent_chunk(chunk) {
            self.lost_urgent -= 1;
        }
        self.asked.remove(&chunk);
        if let Some(waiters) = self.wants.remove(&chunk) {
            for w in waiters {
                if let Waiter::Child(c) = w {
                    self.serve_demand(c, chunk, now);
                }
            }
        }
        self.check_local_done();
    }

    fn check_local_done(&mut self) {
        let reached = [
            self.urgent_have + self.lost_urgent == self.schedule.urgent,
            self.have_count + self.lost.len() == self.schedule.len(),
        ];
        for phase in Phase::BOTH {
            let i = phase.index();
            if reached[i] && !self.local_done[i] {
                self.local_done[i] = true;
                self.events.push_back(Event::LocalPhaseDone(phase));
                self.done_log.push((self.me, phase));
                self.report.done.push((self.me, phase));
            }
        }
    }

    /// The transport could not reach `peer` at all (connection refused or reset):
    /// act on it now instead of waiting for the deadline.
    pub fn handle_unreachable(&mut self, now: Instant, peer: NodeId) {
        if self.children.contains_key(&peer) {
            self.fail_child(now, peer);
        } else if self.attaching.is_none() && Some(peer) == self.parent && self.root.is_none() {
            self.lose_parent(now);
        } else if let Some(a) = &self.attaching
            && self.ancestors.get(a.target).map(|n| n.id) == Some(peer)
        {
            self.attach_next(now);
        }
    }

    fn fail_child(&mut self, now: Instant, child: NodeId) {
        if self.children.remove(&child).is_none() {
            return;
        }
        self.events.push_back(Event::ChildFailed(child));
        for waiters in self.wants.values_mut() {
            waiters.retain(|w| *w != Waiter::Child(child));
        }
        self.failed_log.push((self.me, child));
        let fact = Report {
            failed: vec![(self.me, child)],
            ..Report::default()
        };
        self.absorb(now, fact);
        self.restart_orphans(now, child);
    }

    /// The failed child's planned children may never have received their `Start` (it died
    /// before forwarding it), and then nothing would ever reach them: start them from here.
    /// One that is already running ignores the `Start` and re-attaches on its own.
    fn restart_orphans(&mut self, now: Instant, dead: NodeId) {
        let orphans: Vec<NodeInfo> = self
            .subtree
            .iter()
            .filter(|n| n.parent == dead && n.id != dead && !self.children.contains_key(&n.id))
            .cloned()
            .collect();
        for info in orphans {
            let id = info.id;
            let mut inside = HashSet::from([id]);
            let mut subtree = vec![info.clone()];
            for n in &self.subtree {
                if n.id != n.parent && n.id != id && inside.contains(&n.parent) {
                    inside.insert(n.id);
                    subtree.push(n.clone());
                }
            }
            self.children
                .insert(id, Child::pending(info, self.schedule.len(), now, true));
            let start = self.start_for(subtree);
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Start(Box::new(start)),
            });
        }
    }

    fn lose_parent(&mut self, now: Instant) {
        if let Some(p) = self.parent {
            self.events.push_back(Event::ParentLost(p));
        }
        let current = self
            .ancestors
            .iter()
            .position(|a| Some(a.id) == self.parent)
            .unwrap_or(0);
        self.attaching = Some(Attaching {
            target: current,
            deadline: now,
        });
        self.attach_next(now);
    }

    /// Ask the next ancestor up (the root is asked again and again: it never gives up on us).
    fn attach_next(&mut self, now: Instant) {
        let Some(a) = &self.attaching else { return };
        let target = (a.target + 1).min(self.ancestors.len() - 1);
        let to = self.ancestors[target].id;
        let words = self
            .have
            .as_slice()
            .iter()
            .map(|&w| w as u64)
            .collect::<Vec<u64>>();
        let have = pack_words(&words, usize::BITS);
        self.control.push_back(Transmit::Control {
            to,
            msg: Msg::Attach { have },
        });
        self.attaching = Some(Attaching {
            target,
            deadline: now + ms(self.timing.deadline_ms),
        });
    }

    /// Time passed: check deadlines and heartbeats.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(a) = &self.attaching
            && now >= a.deadline
        {
            self.attach_next(now);
        }
        if self.finished {
            return;
        }
        let deadline = ms(self.timing.deadline_ms);
        let heartbeat = ms(self.timing.heartbeat_ms);
        if self.root.is_none()
            && self.attaching.is_none()
            && now.saturating_duration_since(self.parent_heard) > deadline
        {
            self.lose_parent(now);
        }
        let silent: Vec<NodeId> = self
            .children
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.last_heard) > deadline)
            .map(|(&id, _)| id)
            .collect();
        for c in silent {
            self.fail_child(now, c);
        }
        for (&id, c) in self.children.iter_mut() {
            if c.started && now.saturating_duration_since(c.last_sent) >= heartbeat {
                c.last_sent = now;
                self.control.push_back(Transmit::Control {
                    to: id,
                    msg: Msg::Ping,
                });
            }
        }
        if self.root.is_none()
            && self.parent().is_some()
            && now.saturating_duration_since(self.last_sent_parent) >= heartbeat
        {
            // The report (possibly empty) doubles as the heartbeat.
            self.flush_report(now, true);
        }
        if self.root.is_some() {
            self.root_check(now);
        }
    }

    fn flush_report(&mut self, now: Instant, even_empty: bool) {
        let Some(p) = self.parent() else { return };
        if self.report.is_empty() && !even_empty {
            return;
        }
        let r = std::mem::take(&mut self.report);
        self.last_sent_parent = now;
        self.control.push_back(Transmit::Control {
            to: p,
            msg: Msg::Report(r),
        });
    }

    /// The next control or demand message to send.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if self.root.is_none() {
            self.flush_report(now, false);
        }
        let t = self.control.pop_front()?;
        if let Transmit::Control { to, msg } = &t {
            if let Msg::Start(_) = msg
                && let Some(c) = self.children.get_mut(to)
            {
                c.started = true;
                c.last_sent = now;
                c.start_sent = Some(now);
            }
            if Some(*to) == self.parent() {
                self.last_sent_parent = now;
            } else if let Some(c) = self.children.get_mut(to) {
                c.last_sent = now;
            }
        }
        Some(t)
    }

    /// The next chunk to push to `child`, if it is started and the chunk next in order is
    /// held here. Marks it as sent.
    pub fn poll_bulk(&mut self, now: Instant, child: NodeId) -> Option<u32> {
        if self.shared_store.is_some() {
            // Everyone reads from shared storage: nothing travels the tree.
            return None;
        }
        let order = &self.schedule.order;
        let c = self.children.get_mut(&child)?;
        if !c.ready {
            return None;
        }
        while c.cursor < order.len() && c.sent.contains(order[c.cursor] as usize) {
            c.cursor += 1;
        }
        let chunk = *order.get(c.cursor)?;
        if !self.have.contains(chunk as usize) {
            return None;
        }
        c.sent.insert(chunk as usize);
        c.cursor += 1;
        c.bytes += u64::from(self.schedule.sizes[chunk as usize]);
        c.last_sent = now;
        self.stats.pushed += 1;
        Some(chunk)
    }

    /// Children that have a chunk ready to push right now.
    pub fn bulk_ready(&self) -> impl Iterator<Item = NodeId> + '_ {
        let order = &self.schedule.order;
        self.children.iter().filter_map(move |(&id, c)| {
            if !c.ready {
                return None;
            }
            let next = order[c.cursor.min(order.len())..]
                .iter()
                .find(|&&x| !c.sent.contains(x as usize))?;
            self.have.contains(*next as usize).then_some(id)
        })
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Relay::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = ms(self.timing.deadline_ms);
        let heartbeat = ms(self.timing.heartbeat_ms);
        let mut t: Option<Instant> = self.attaching.as_ref().map(|a| a.deadline);
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(x) = self.root.as_ref().and_then(RootState::next_limbo) {
            consider(x);
        }
        if self.finished {
            return t;
        }
        if self.root.is_none() && self.attaching.is_none() {
            consider(self.parent_heard + deadline + Duration::from_millis(1));
            consider(self.last_sent_parent + heartbeat);
        }
        for c in self.children.values() {
            consider(c.last_heard + deadline + Duration::from_millis(1));
            if c.started {
                consider(c.last_sent + heartbeat);
            }
        }
        t
    }
}

/// The planned subtree of each of `me`'s planned children (each child first), in one pass
/// over `subtree` (`me` first, parents before children). A per-child scan made a flat
/// plan's root quadratic in the job size.
fn split_subtree(me: NodeId, subtree: &[NodeInfo]) -> HashMap<NodeId, Vec<NodeInfo>> {
    let mut owner: HashMap<NodeId, NodeId> = HashMap::new();
    let mut parts: HashMap<NodeId, Vec<NodeInfo>> = HashMap::new();
    for n in subtree.iter().skip(1) {
        let under = if n.parent == me {
            Some(n.id)
        } else if n.id != n.parent {
            owner.get(&n.parent).copied()
        } else {
            None
        };
        if let Some(child) = under {
            owner.insert(n.id, child);
            parts.entry(child).or_default().push(n.clone());
        }
    }
    parts
}

/// What a node that received a [`Msg::Prepare`] for a job it has not joined yet sends on
/// ([`prepares_for`] of the subtree it was given). The caller hands each to the transport
/// at once, which is what opens the connections early, and passes on only the first
/// `Prepare` of a job it gets (a node with children hears from its grandparent and then its
/// parent). A node that already runs the job ignores `Prepare`s.
pub fn forward_prepare(prepare: &Prepare) -> Result<Vec<(NodeInfo, Prepare)>, StartError> {
    let me = prepare
        .subtree
        .first()
        .ok_or_else(|| StartError("empty prepare".into()))?
        .id;
    Ok(prepares_for(me, &prepare.subtree))
}

/// The `Prepare`s of a node with planned `subtree` (`me` first): one to each child, then
/// one to each grandchild that has children of its own. The second kind makes the wave go
/// down two levels per connection set-up: a grandchild starts connecting to its children
/// while its parent is still connecting to it. Leaves get theirs from their parent only;
/// they have nobody to connect to.
pub fn prepares_for(me: NodeId, subtree: &[NodeInfo]) -> Vec<(NodeInfo, Prepare)> {
    let mut parts = split_subtree(me, subtree);
    let mut out = Vec::new();
    let mut second = Vec::new();
    for child in subtree
        .iter()
        .skip(1)
        .filter(|n| n.parent == me && n.id != me)
    {
        let part = parts.remove(&child.id).unwrap_or_default();
        let mut below = split_subtree(child.id, &part);
        for g in part
            .iter()
            .skip(1)
            .filter(|n| n.parent == child.id && n.id != child.id)
        {
            let sub = below.remove(&g.id).unwrap_or_default();
            if sub.len() > 1 {
                second.push((g.clone(), Prepare { subtree: sub }));
            }
        }
        out.push((child.clone(), Prepare { subtree: part }));
    }
    out.extend(second);
    out
}

/// The plan as relay node records, root first, parents before children (breadth first).
/// `addr` maps a host name to where its daemon listens.
pub fn plan_nodes(plan: &crate::plan::Plan, addr: impl Fn(&str) -> String) -> Vec<NodeInfo> {
    plan.bfs()
        .into_iter()
        .map(|id| NodeInfo {
            id,
            host: plan.host(id).to_string(),
            addr: addr(plan.host(id)),
            parent: plan.parent[id.index()].unwrap_or(id),
        })
        .collect()
}

/// Re-packs bitset words of `bits` bits each into 64-bit words.
fn pack_words(words: &[u64], bits: u32) -> Vec<u64> {
    if bits == 64 {
        return words.to_vec();
    }
    let mut out = vec![0u64; (words.len() * bits as usize).div_ceil(64)];
    for (i, &w) in words.iter().enumerate() {
        for b in 0..bits as usize {
            if w & (1 << b) != 0 {
                let bit = i * bits as usize + b;
                out[bit / 64] |= 1 << (bit % 64);
            }
        }
    }
    out
}

/// A bitset of `n` chunk positions from wire words (64 positions per word, low bit first).
fn bits_from_words(n: usize, words: &[u64]) -> FixedBitSet {
    let mut bits = FixedBitSet::with_capacity(n);
    for (w, &word) in words.iter().enumerate().take(n.div_ceil(64)) {
        for b in 0..64 {
            let i = w * 64 + b;
            if i < n && word & (1 << b) != 0 {
                bits.insert(i);
            }
        }
    }
    bits
}

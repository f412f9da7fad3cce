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
//!   room, so a slow child never makes a node buffer the layer, paced at the child's planned
//!   share of the link where the plan knows link rates ([`Pacer`]);
//! - answers demand requests (`Want`) at once, or asks its own parent once however many
//!   children want the same chunk;
//! - reports completion facts, failed edges, liars and re-attachments up to the root;
//! - declares a child failed once it is silent past the deadline, in its messages and in
//!   the transport's signs of life (a starved node's QUIC stack still answers); a node
//!   whose parent is silent or lied attaches to its nearest live ancestor, telling it
//!   what it already holds so nothing is sent twice;
//! - measures each edge's round trip (its child's `Start` handed to the transport, to the
//!   child's first message back) and reports it up, so a health probe ([`Relay::new_probe_root`],
//!   a job with no chunks) tells the root every edge's latency and every dead edge; a rates
//!   probe ([`Relay::new_rates_probe_root`], `filler.rs`) carries filler chunks of a known
//!   size, and the root learns each edge's bytes and times as a push's.
//!
//! Chunk contents never pass through here: the caller verifies and stores chunks, then calls
//! [`Relay::handle_chunk`]; when the relay says "send chunk 12 to node 7" the caller reads the
//! bytes from its store.
//!
//! The code is split by concern, each part an `impl Relay` block over the state defined
//! here: `schedule.rs` (the push order), `subtree.rs` (children, their part of the plan,
//! the push down to them), `chunks.rs` (what this node holds), `demand.rs` (`Want`s),
//! `recovery.rs` (failed edges, re-attaching, adoption), `timers.rs` (heartbeats,
//! deadlines, and a starved peer told from a dead one), `pace.rs` (a bulk stream's
//! pacing), `release.rs` (a failed push's job dropped down the tree), `root.rs` (the root's job-wide view) and `msg.rs` (the wire). This file keeps the state, the constructors, the accessors and
//! the dispatch of messages and outputs.

mod chunks;
mod demand;
mod filler;
mod msg;
mod pace;
mod recovery;
mod release;
#[cfg(test)]
mod release_tests;
mod root;
mod schedule;
mod seek;
mod sources;
mod subtree;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixedbitset::FixedBitSet;

use demand::Waiter;
pub use filler::{Filler, MAX_FILLER_CHUNK, MAX_FILLER_CHUNKS};
pub use msg::{
    ChunkNo, ChunkSplit, JobId, MAX_MESSAGE, Msg, NodeInfo, Phase, Prepare, RelayMsg, Report,
    Routed, Start, Timing,
};
pub use pace::Pacer;
use recovery::Attaching;
use root::RootState;
pub use schedule::Schedule;
pub use sources::{Known, MAX_PEER_ASKS, Source, Sources, Step};
use subtree::Child;

/// How long the root holds the hysteretic set back after the urgent set is on every node
/// ([`Relay::set_bulk_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkHold {
    /// At most this long.
    pub max: Duration,
    /// Release sooner once applications that showed themselves after the urgent set
    /// have given no sign for this long.
    pub quiet: Option<Duration>,
}
pub use recovery::ROOT_ASKS;
pub use subtree::{forward_prepare, forward_start, plan_nodes, prepares_for};
pub use timers::STARVED_DEADLINES;

use crate::error::{Error, Result};
use crate::plan::NodeId;

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
        chunk: ChunkNo,
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
        chunk: ChunkNo,
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
    /// Root only: a node refused the job, and why.
    Refused(NodeId, String),
    /// The root declared the job finished (on every node, when it hears so).
    Finished,
    /// The root is gone: asked to adopt this node this many times ([`ROOT_ASKS`]), each
    /// wait twice the last, it never answered. This node stops asking and keeps what it
    /// holds; nothing more comes from the tree.
    RootGone(u32),
    /// No source could give `chunk` (the parent, the other nodes asked, the origin store):
    /// every reader waiting for it here fails now, and the next ones at once until a
    /// source may have come back.
    Unobtainable {
        /// The chunk.
        chunk: ChunkNo,
        /// The sources the search asked, in order.
        tried: Vec<Source>,
        /// The search failed lately already and nothing changed since: said before.
        again: bool,
    },
    /// The parent passed on the root's [`Msg::Release`] (already forwarded to this node's
    /// children): the push failed before the job could start, and the node drops the job.
    Released,
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
    /// Times a peer stayed silent past its deadline while its transport still answered
    /// ([`Relay::handle_transport_alive`]): a starved peer kept instead of declared failed.
    pub starved: u64,
    /// Chunks read from the origin store because no node gave them.
    pub from_origin: u64,
    /// Searches for a chunk that found no source ([`Event::Unobtainable`], repeats not
    /// counted).
    pub unobtainable: u64,
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
    /// Held chunks that the push streams (the "all" phase counts these).
    pushed_have: usize,
    /// Push-order positions before this are all held (see [`Relay::forward_lead`]; a lost
    /// chunk sets it back to 0, to be found again).
    frontier: usize,
    local_done: [bool; 2],
    /// My planned subtree, me first (for handing children their part).
    subtree: Vec<NodeInfo>,
    /// Ancestors, nearest first; empty at the root.
    ancestors: Vec<NodeInfo>,
    parent: Option<NodeId>,
    parent_heard: Instant,
    /// When the transport last heard from the parent ([`Relay::handle_transport_alive`]).
    parent_transport: Instant,
    /// The parent is silent past its deadline and kept only because its transport answers.
    parent_starved: bool,
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
    /// Where each node of my current subtree hangs (node -> parent), from the adoptions
    /// reported through me; re-sent after re-attaching like `failed_log`. A deputy can adopt
    /// its siblings before it notices that their common parent died, and the adoptions it
    /// passes on to that parent would be lost.
    attached_log: BTreeMap<NodeId, NodeId>,
    wants: HashMap<ChunkNo, Vec<Waiter>>,
    /// Where each chunk that is wanted and not held is being looked for.
    sources: Sources,
    /// This node can read an origin store ([`Relay::set_origin`]).
    origin: bool,
    /// Chunks to read from the origin store ([`Relay::poll_origin`]).
    origin_reads: VecDeque<ChunkNo>,
    /// Chunks held once and lost since: asked for again with [`Msg::Lost`], because the
    /// parent believes they are here.
    lost: HashSet<ChunkNo>,
    /// How many of `lost` are urgent. A phase is complete when every chunk of it arrived
    /// once, held now or lost since: a store smaller than the layer still completes.
    lost_urgent: usize,
    lost_pushed: usize,
    finished: bool,
    /// The job was released down the tree ([`Msg::Release`]): sent on, nothing more.
    released: bool,
    stats: RelayStats,
    /// Every ready child has been sent the whole urgent set (a memo of
    /// [`Relay::urgent_gate_open`]; false means "look again").
    urgent_all_sent: bool,
    /// At the root: how long the hysteretic set waits after the urgent set is on every
    /// node, and from when it may flow once that is known.
    bulk_hold: Option<BulkHold>,
    /// When the urgent set was on every node (root).
    urgent_done_at: Option<Instant>,
    /// The release time the timer already woke the relay for.
    bulk_woken: Option<Instant>,
    /// When a demand last reached the root.
    last_demand: Option<Instant>,
    root: Option<RootState>,
    shared_store: Option<String>,
    /// A health probe: no chunks, every node answers at once.
    probe: bool,
    /// The job's owner (uid), passed down in every `Start`.
    owner: Option<u32>,
    /// My planned siblings in my group, me included, their deputy first ([`Start::kin`]).
    kin: Vec<NodeInfo>,
    /// The deputy was asked to adopt me once already (it is asked only once per job).
    deputy_asked: bool,
    /// The root's wall clock at the job's start ([`Start::root_clock_ms`]).
    root_clock_ms: Option<u64>,
    /// How many times the root was asked to adopt this node since it last had a parent.
    root_asks: u32,
}

impl Relay {
    /// Shared-storage mode: nodes read from this store directory instead of the tree.
    pub fn set_shared_store(&mut self, path: Option<String>) {
        self.shared_store = path;
        self.refresh_queued_starts();
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
    ) -> Result<Self> {
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
    ) -> Result<Self> {
        let me = nodes.first().ok_or(Error::InvalidStart("empty plan"))?.id;
        let mut have = FixedBitSet::with_capacity(schedule.len());
        have.insert_range(..);
        let root = RootState::new(&nodes, now);
        let mut r = Self::blank(job, me, timing, schedule, index, nodes, Vec::new(), now);
        r.have = have;
        r.have_count = r.schedule.len();
        r.urgent_have = r.schedule.urgent;
        r.pushed_have = r.schedule.pushed();
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
    ) -> Result<Self> {
        let schedule = Arc::new(Schedule::new(Vec::new(), 0, Vec::new()).expect("empty"));
        Self::root(job, nodes, Arc::from(&[][..]), schedule, timing, now, true)
    }

    /// The root of a rates probe (`teesfs health --rates`): a health probe that carries
    /// `filler` down the planned tree as a push carries a layer, so each edge's bytes and
    /// each node's urgent and complete times come to the root as [`Event::EdgeBytes`] and
    /// [`Event::NodeDone`], as a push's do. The caller sends the filler chunks' bytes.
    pub fn new_rates_probe_root(
        job: JobId,
        nodes: Vec<NodeInfo>,
        filler: Filler,
        timing: Timing,
        now: Instant,
    ) -> Result<Self> {
        let index: Arc<[u8]> = filler.encode().into();
        let schedule = Arc::new(filler.schedule());
        Self::root(job, nodes, index, schedule, timing, now, true)
    }

    /// A node joining a job from a verified `Start` (the caller checked the index
    /// signature and built `schedule` from it).
    pub fn new_node(start: Start, schedule: Arc<Schedule>, now: Instant) -> Result<Self> {
        // The planned parent differs from the sender (the first ancestor) when that parent
        // failed before passing this `Start` on ([`Relay::join_orphaned`]).
        let (me, planned_parent) = start
            .subtree
            .first()
            .map(|n| (n.id, n.parent))
            .ok_or(Error::InvalidStart("no subtree"))?;
        let parent = start
            .ancestors
            .first()
            .ok_or(Error::InvalidStart("no ancestors"))?
            .id;
        if start.timing.deadline_ms == 0 || start.timing.heartbeat_ms == 0 {
            return Err(Error::InvalidStart("zero heartbeat or deadline"));
        }
        if start.probe && *schedule != filler::probe_schedule(&start.index)? {
            return Err(Error::InvalidStart(
                "a probe carries no chunks but its filler's",
            ));
        }
        let probe = start.probe;
        let owner = start.owner;
        let kin = start.kin;
        let root_clock_ms = start.root_clock_ms;
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
        r.kin = kin;
        r.root_clock_ms = root_clock_ms;
        if shared.is_some() {
            // Everything is readable from shared storage already.
            r.have.insert_range(..);
            r.have_count = r.schedule.len();
            r.urgent_have = r.schedule.urgent;
            r.pushed_have = r.schedule.pushed();
        }
        r.shared_store = shared;
        r.adopt_planned_children(now);
        r.check_local_done();
        if !r.join_orphaned(now, planned_parent) {
            // Tell the parent at once that we are in, so it starts pushing.
            r.flush_report(now, true);
        }
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
            frontier: 0,
            have_count: 0,
            urgent_have: 0,
            pushed_have: 0,
            local_done: [false, false],
            subtree,
            ancestors,
            parent: None,
            parent_heard: now,
            parent_transport: now,
            parent_starved: false,
            last_sent_parent: now,
            attaching: None,
            children: BTreeMap::new(),
            control: VecDeque::new(),
            events: VecDeque::new(),
            report: Report::default(),
            done_log: Vec::new(),
            failed_log: Vec::new(),
            attached_log: BTreeMap::new(),
            wants: HashMap::new(),
            sources: Sources::new(timers::ms(timing.deadline_ms)),
            origin: false,
            origin_reads: VecDeque::new(),
            lost: HashSet::new(),
            lost_urgent: 0,
            lost_pushed: 0,
            finished: false,
            released: false,
            stats: RelayStats::default(),
            urgent_all_sent: false,
            bulk_hold: None,
            urgent_done_at: None,
            bulk_woken: None,
            last_demand: None,
            root: None,
            shared_store: None,
            probe: false,
            owner: None,
            kin: Vec::new(),
            deputy_asked: false,
            root_clock_ms: None,
            root_asks: 0,
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
            .or_else(|| self.kin.iter().find(|n| n.id == id))
    }

    /// Whether this node holds a chunk.
    pub fn has(&self, chunk: ChunkNo) -> bool {
        self.have.contains(chunk.index())
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

    /// At the root of a push that leaves chunks to demand: stop serving them and finish
    /// the job (every node is told, and stops its heartbeats). Nothing happens elsewhere
    /// or when already finished.
    pub fn end_serving(&mut self) {
        if self.root.is_some() && !self.finished {
            self.finish();
        }
    }

    /// Sets the job's owner (root side; nodes take it from their `Start`).
    pub fn set_owner(&mut self, uid: Option<u32>) {
        self.owner = uid;
        self.refresh_queued_starts();
    }

    /// At the root: hold the hysteretic set back after the urgent set is on every node,
    /// so that applications starting there fetch what they read on demand without bulk
    /// traffic competing for links and CPUs. Within `hold.max` of the urgent set being
    /// everywhere, the hysteretic set flows only once applications have shown themselves
    /// since then (a demand, a file opened or looked up: [`Relay::note_activity`]) and no
    /// such sign has reached the root for `hold.quiet`; without `quiet`, not at all.
    ///
    /// Signs from before the urgent set was everywhere do not start the quiet clock: a
    /// job's processes start after it (the prolog waits for it), and their own start-up
    /// (an interpreter, MPI, a container runtime from the node's "/") can keep them off
    /// the layer for longer than `quiet`; the rest must not stream into that.
    pub fn set_bulk_hold(&mut self, hold: BulkHold) {
        if self.root.is_some() {
            self.bulk_hold = Some(hold);
        }
    }

    /// When a held hysteretic set may flow (again), as things stand, once the urgent set
    /// is everywhere.
    pub(super) fn bulk_release_at(&self) -> Option<Instant> {
        let (hold, done) = (self.bulk_hold.as_ref()?, self.urgent_done_at?);
        let latest = done + hold.max;
        let quiet = hold
            .quiet
            .and_then(|q| self.last_demand.filter(|&d| d >= done).map(|d| d + q));
        Some(quiet.map_or(latest, |q| q.min(latest)))
    }

    /// Whether the root holds the hysteretic set back now ([`Relay::set_bulk_hold`]).
    pub(super) fn bulk_held(&self, now: Instant) -> bool {
        self.bulk_hold.is_some() && self.bulk_release_at().is_none_or(|t| now < t)
    }

    /// The job's owner (uid), if the push named one.
    pub fn owner(&self) -> Option<u32> {
        self.owner
    }

    /// Sets the root's wall clock at the job's start (root side; nodes take it from their
    /// `Start`). The relay reads no clock itself.
    pub fn set_root_clock(&mut self, unix_ms: u64) {
        self.root_clock_ms = Some(unix_ms);
        self.refresh_queued_starts();
    }

    /// The root's wall clock at the job's start, if the root said.
    pub fn root_clock_ms(&self) -> Option<u64> {
        self.root_clock_ms
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
        self.sources.heard(from);
        if Some(from) == self.parent {
            self.parent_heard = now;
            self.parent_starved = false;
        }
        if let Some(c) = self.children.get_mut(&from) {
            c.last_heard = now;
            c.starved = false;
            // The child has its Start (it speaks to us), so chunks sent now will not race
            // ahead of it on another stream.
            if !c.ready {
                c.ready = true;
                // A new receiver of the urgent set closes the gate for hysteretic chunks.
                self.urgent_all_sent = false;
            }
            let mut fact = Report::default();
            if std::mem::take(&mut c.restarted) {
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

    /// A message arrived from `from` (chunks go through [`Relay::handle_chunk`]; see
    /// [`Msg::route`]).
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: RelayMsg) {
        self.touch(from, now);
        match msg {
            RelayMsg::Ping => {}
            RelayMsg::Want { chunk } => self.on_want(now, Waiter::Child(from), chunk),
            RelayMsg::Lost { chunk } => self.on_lost(now, from, chunk),
            RelayMsg::Report(r) => self.on_report(now, from, r),
            RelayMsg::Attach { have } => self.on_attach(now, from, &have),
            RelayMsg::Held { have } => self.on_held(from, &have),
            RelayMsg::Ask { chunk } => self.on_ask(now, from, chunk),
            RelayMsg::Lacks { chunk } => self.on_lacks(now, from, chunk),
            RelayMsg::Adopted => self.on_adopted(now, from),
            RelayMsg::Release => self.on_release(from),
            RelayMsg::Finished => {
                if Some(from) == self.parent && !self.finished {
                    self.finish();
                }
            }
            RelayMsg::Refused { reason } => {
                if Some(from) == self.parent && self.root.is_none() && self.attaching.is_none() {
                    // The parent left the job (its store failed): re-attach now, not at
                    // its deadline, which its live transport would stretch.
                    self.lose_parent(now);
                } else if self.children.contains_key(&from) {
                    // Said once, before it is dropped as a failed child below.
                    self.absorb(
                        now,
                        Report {
                            refused: vec![(from, reason)],
                            ..Report::default()
                        },
                    );
                    self.fail_child(now, from);
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
    pub(super) fn absorb(&mut self, now: Instant, r: Report) {
        if self.root.is_some() {
            self.root_absorb(now, r);
        } else {
            for &(parent, node) in &r.attached {
                self.attached_log.insert(node, parent);
            }
            self.report.merge(r);
        }
    }

    pub(super) fn flush_report(&mut self, now: Instant, even_empty: bool) {
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

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

//! One job on one process: the [`Relay`] owned by one task, and the glue that turns its
//! outputs into network traffic and its inputs out of network traffic.
//!
//! - the **job's task** owns the relay: it is woken by its inputs (messages, verified
//!   chunks, unreachable peers, local reads, store losses, pumps asking for work) and by the
//!   relay's own timer, applies them, then sends what the relay queued, hands out its
//!   events, starts pumps for new children, wakes the pumps that have work and publishes a
//!   [`JobView`] for status and reports; on the timer it first gathers what tells a
//!   starved peer from a dead one (its own lateness, the transport's signs of life:
//!   `liveness.rs`) before the relay checks its deadlines;
//! - one **pump** task per child (`pump.rs`) asks the job's task for the next chunk and
//!   writes it to the child's bulk stream, so QUIC flow control is the back-pressure;
//! - incoming chunks are verified against the index and stored on the blocking pool, never
//!   on a task that carries messages, before the relay hears of them; what is sent on comes
//!   from the store's memory of recent chunks when it can, else from a read on the blocking
//!   pool;
//! - a chunk the store cannot keep (its directory full, read-only or not writable) makes
//!   the node leave the job's tree, telling its parent why (the push names the node and
//!   the reason) and its children, which re-attach elsewhere at once: kept silent, the
//!   node took chunks it could not hold and its subtree waited for the push's timeout;
//! - a chunk the store drops (evicted, unreadable) is reported to the relay as lost, at
//!   once when the store announces it and whenever a read or a send finds it missing, so a
//!   reader never waits for a chunk the relay believes it holds; a waiting reader gets the
//!   chunk's bytes straight from the message that brought them, even if the store cannot
//!   keep them;
//! - a chunk no node gives (the parent, the others the relay asks) is read from the
//!   origin store when the site names one (`origin.rs`), and when no source is left every
//!   reader waiting for it fails at once, as the relay decides.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use manifest::{ChunkId, Index, IndexId, Verified};
use peertree::NodeId;
use peertree::relay::{ChunkNo, Event, JobId, Msg, Pacer, Phase, Relay, RelayMsg, Transmit};
use seeder::{ChunkStore, StoredChunk};
use tokio::sync::{Notify, mpsc, oneshot, watch};

mod chunks;
mod intake;
mod knobs;
mod liveness;
mod origin;
mod pump;

pub(crate) use chunks::ChunkTaken;

pub use knobs::JobKnobs;
use liveness::TransportSeen;

use super::peers::{Peers, chunk_head, frame};
use crate::Error;
use crate::fs::ahead::Placement;
use crate::net::StreamKind;
use crate::source::Fetched;
use crate::sync::lock;

/// A reader waiting for a chunk: it gets the plain bytes verified on arrival, or the
/// error that no source could give it.
type Waiter = oneshot::Sender<Result<Verified, Error>>;

/// A timestamped relay event.
pub(crate) type TimedEvent = (Instant, Event);

/// Counters of a job on this process.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobCounters {
    /// Chunks received and verified.
    pub chunks_in: u64,
    /// Bytes of those.
    pub bytes_in: u64,
    /// Chunks refused by verification.
    pub bad_chunks: u64,
    /// Chunks sent (push and demand).
    pub chunks_out: u64,
    /// Bytes of those.
    pub bytes_out: u64,
    /// Demand requests this node sent to its parent.
    pub wants_sent: u64,
    /// Chunks this node sent answering demands.
    pub demand_served: u64,
    /// Chunks received twice.
    pub duplicates: u64,
    /// Chunks held once and then dropped by the store (evicted or unreadable).
    pub lost: u64,
    /// Times a parent or child stayed silent past its deadline while its transport still
    /// answered: starved, kept instead of declared failed.
    #[serde(default)]
    pub starved: u64,
    /// Chunks read from the origin store because no node gave them.
    #[serde(default)]
    pub from_origin: u64,
    /// Chunks no source could give (their readers failed with EIO).
    #[serde(default)]
    pub unobtainable: u64,
    /// Compressed chunks decoded as they arrived: for a waiting reader or a copy made
    /// ahead, or to check them (an index without stored hashes, or another index's stored
    /// form of the chunk). The others are decoded only if something reads them.
    #[serde(default)]
    pub decoded: u64,
}

/// What the job's task is told; every change to the relay goes through one of these.
enum Input {
    /// A control or demand message from a peer of the job.
    Message { from: NodeId, msg: RelayMsg },
    /// A chunk arrived from `from` and was verified (`valid`) and stored.
    Chunk {
        from: NodeId,
        chunk: ChunkNo,
        valid: bool,
    },
    /// A peer could not be reached.
    Unreachable(NodeId),
    /// A reader here waits for `chunk`.
    Want(ChunkNo),
    /// The store dropped `chunk`.
    Lost(ChunkNo),
    /// A chunk given to `child`'s pump could not be read back from the store.
    Unsent { child: NodeId, chunk: ChunkNo },
    /// `child`'s pump asks for its next chunk: `None` if `child` is no longer a child,
    /// `Some(None)` if nothing is ready for it yet (it is woken when something is).
    NextBulk {
        child: NodeId,
        reply: oneshot::Sender<Option<Option<ChunkNo>>>,
    },
    /// `child`'s pump has stopped.
    PumpDone(NodeId),
    /// The root stops serving demand and finishes the job.
    EndServing,
    /// The root releases the job down the tree: the push failed before the job started.
    Release,
    /// This node's store cannot keep the job's chunks: it leaves the tree, saying why.
    StoreFailed(String),
    /// `chunk` was read from the origin store (`got`: there, verified and kept) or not.
    Origin { chunk: ChunkNo, got: bool },
}

/// What the job's task last published of its relay, for status and reports.
#[derive(Debug, Clone, Default)]
pub struct JobView {
    /// The parent's host, if attached.
    pub parent: Option<String>,
    /// The children's hosts.
    pub children: Vec<String>,
    /// Chunks held here.
    pub have: usize,
    /// Chunks in the job.
    pub chunks: usize,
    /// Whether this node holds the urgent set and the whole layer.
    pub done: [bool; 2],
    /// Whether the job is finished for this node.
    pub finished: bool,
    /// Whether the job was released down the tree (and the release handed to the links).
    pub released: bool,
    /// The relay's counters.
    pub stats: peertree::relay::RelayStats,
    /// Bytes pushed to each child (`(me, child, bytes)`).
    pub child_bytes: Vec<(NodeId, NodeId, u64)>,
}

impl JobView {
    fn of(r: &Relay) -> Self {
        let host = |id| r.peer(id).map(|n| n.host.clone()).unwrap_or_default();
        Self {
            parent: r.parent().map(host),
            children: r.children().map(host).collect(),
            have: r.have_count(),
            chunks: r.schedule().len(),
            done: [r.local_done(Phase::Urgent), r.local_done(Phase::All)],
            finished: r.finished(),
            released: r.released(),
            stats: r.stats(),
            child_bytes: r.child_bytes().map(|(c, b)| (r.me(), c, b)).collect(),
        }
    }
}

/// One job on this process: the handle every task holds. The relay itself is owned by the
/// job's task ([`JobCore::start`]), which the handle feeds.
pub struct JobCore {
    /// The job.
    pub job: JobId,
    /// This process's node id in the job.
    pub me: NodeId,
    /// The verified index.
    pub index: Arc<Index>,
    /// Its id.
    pub index_id: IndexId,
    inputs: mpsc::UnboundedSender<Input>,
    /// The relay and the inputs' receiving end until [`JobCore::start`] hands them to the
    /// job's task.
    parked: Mutex<Option<(Relay, mpsc::UnboundedReceiver<Input>)>>,
    view: watch::Sender<JobView>,
    hosts: HashMap<String, NodeId>,
    addrs: HashMap<NodeId, (String, String)>,
    peers: Arc<Peers>,
    bytes: Arc<dyn ChunkStore>,
    chunk_of: HashMap<ChunkId, ChunkNo>,
    waiters: Mutex<HashMap<ChunkNo, Vec<Waiter>>>,
    events: mpsc::UnboundedSender<TimedEvent>,
    counters: Mutex<JobCounters>,
    rt: tokio::runtime::Handle,
    closing: watch::Sender<bool>,
    /// The parent's bulk stream is read late (`intake.rs`).
    intake_held: watch::Sender<bool>,
    knobs: JobKnobs,
    /// Files opened and names looked up in this node's mount of the job (its recorder
    /// counts them): told to the relay as signs of applications starting.
    activity: Arc<AtomicU64>,
    /// This node's store failed to keep a chunk of the job, and the job left the tree.
    store_failed: std::sync::atomic::AtomicBool,
    /// Who hears of each chunk that arrives verified (the job's mount, to make its
    /// passthrough copies ahead); until one listens, the chunks that arrived.
    arrivals: Mutex<Arrivals>,
    /// The origin store, where chunks no node gives are read ([`JobCore::use_origin`]).
    origin: std::sync::OnceLock<std::path::PathBuf>,
}

/// Told of each chunk that arrives at a job, verified: its number, and its plain bytes on
/// demand. Answers where it wrote a raw chunk's plain bytes, if it did, for the store to
/// keep the chunk there.
pub(crate) type ArrivalHook =
    Arc<dyn Fn(ChunkNo, &chunks::Arrived<'_>) -> Option<Placement> + Send + Sync>;

/// The listener to a job's arrivals, or the chunks that arrived before one listened.
enum Arrivals {
    Early(Vec<ChunkNo>),
    Hook(ArrivalHook),
}

/// The job's task's own state besides the relay: the pumps it started.
#[derive(Default)]
struct Pumps {
    /// Each child's pump and its wake-up.
    running: HashMap<NodeId, Arc<Notify>>,
    /// Pumps waiting for a chunk to become ready.
    idle: HashSet<NodeId>,
}

impl JobCore {
    /// Wraps a relay; returns the handle and the stream of the job's events. Call
    /// [`JobCore::start`] once it is shared.
    pub fn new(
        relay: Relay,
        index: Arc<Index>,
        index_id: IndexId,
        peers: Arc<Peers>,
        bytes: Arc<dyn ChunkStore>,
        known: &[peertree::relay::NodeInfo],
        knobs: JobKnobs,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<TimedEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (inputs, inputs_rx) = mpsc::unbounded_channel();
        let mut hosts = HashMap::new();
        let mut addrs = HashMap::new();
        for n in known {
            hosts.insert(n.host.clone(), n.id);
            addrs.insert(n.id, (n.host.clone(), n.addr.clone()));
        }
        let chunk_of = index
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| ChunkNo::at(i).map(|n| (c.id, n)))
            .collect();
        let view = watch::Sender::new(JobView::of(&relay));
        let core = Arc::new(Self {
            job: relay.job(),
            me: relay.me(),
            index,
            index_id,
            inputs,
            parked: Mutex::new(Some((relay, inputs_rx))),
            view,
            hosts,
            addrs,
            peers,
            bytes,
            chunk_of,
            waiters: Mutex::new(HashMap::new()),
            events: tx,
            counters: Mutex::new(JobCounters::default()),
            rt: tokio::runtime::Handle::current(),
            closing: watch::Sender::new(false),
            intake_held: watch::Sender::new(false),
            knobs,
            activity: Arc::new(AtomicU64::new(0)),
            store_failed: std::sync::atomic::AtomicBool::new(false),
            arrivals: Mutex::new(Arrivals::Early(Vec::new())),
            origin: std::sync::OnceLock::new(),
        });
        (core, rx)
    }

    /// Starts the job's task, which owns the relay from now on and first sends what the
    /// relay queued at creation. A second call does nothing.
    pub fn start(self: &Arc<Self>) {
        let Some((relay, inputs)) = lock(&self.parked).take() else {
            return;
        };
        let span = tracing::debug_span!("job", job = %self.job);
        let run = self.clone().run(relay, inputs);
        self.rt.spawn(tracing::Instrument::instrument(run, span));
    }

    /// Follows the chunks the store drops (a node's budgeted store announces them) until
    /// the job closes: each is reported to the relay as lost, so it is fetched again.
    pub(crate) fn follow_losses(self: &Arc<Self>, losses: mpsc::UnboundedReceiver<ChunkId>) {
        let this = Arc::downgrade(self);
        let closing = self.closing.subscribe();
        self.rt.spawn(Self::follow(this, losses, closing));
    }

    /// The job's task: applies each input to the relay as it comes (and the relay's timer
    /// when it is due), then carries out what the relay asked for, until the job closes.
    async fn run(self: Arc<Self>, mut relay: Relay, mut inputs: mpsc::UnboundedReceiver<Input>) {
        let mut pumps = Pumps::default();
        let mut transport = TransportSeen::default();
        let mut closing = self.closing.subscribe();
        let mut active = 0;
        // What the transport heard before the job counts as no sign of life in it: a
        // connection made for the job counts from its handshake on.
        self.tell_transport(&mut relay, &mut transport, Instant::now());
        self.carry_out(&mut relay, &mut pumps, &transport, Instant::now());
        loop {
            let due = relay.poll_timeout();
            let timer = async {
                match due {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            let input = tokio::select! {
                biased;
                _ = closing.wait_for(|&c| c) => return,
                i = inputs.recv() => match i {
                    Some(i) => Some(i),
                    None => return,
                },
                () = timer => None,
            };
            let now = Instant::now();
            // Opens since the last pass ride on the next report (at the latest the
            // heartbeat this timer may be).
            let seen = self.activity.load(Ordering::Relaxed);
            if seen > active {
                let n = u32::try_from(seen - active).unwrap_or(u32::MAX);
                relay.note_activity(now, n);
                active = seen;
            }
            if let Some(i) = input {
                self.apply(&mut relay, &mut pumps, now, i);
            }
            // Take in what else has queued up before sending, so a burst costs one pass.
            for _ in 0..64 {
                let Ok(i) = inputs.try_recv() else { break };
                self.apply(&mut relay, &mut pumps, now, i);
            }
            // The timer runs when due even while inputs keep coming: a busy node still
            // sends its heartbeats.
            if let Some(due) = due.filter(|&d| d <= now) {
                self.on_timer(&mut relay, &mut transport, due, now);
            }
            self.carry_out(&mut relay, &mut pumps, &transport, now);
        }
    }

    fn apply(&self, r: &mut Relay, pumps: &mut Pumps, now: Instant, input: Input) {
        match input {
            Input::Message { from, msg } => r.handle_message(now, from, msg),
            Input::Chunk { from, chunk, valid } => r.handle_chunk(now, from, chunk, valid),
            Input::Unreachable(peer) => r.handle_unreachable(now, peer),
            Input::Want(chunk) => {
                let stored = self
                    .index
                    .chunks
                    .get(chunk.index())
                    .is_some_and(|c| self.bytes.contains(&c.id));
                if r.has(chunk) && stored {
                    // It arrived after the reader looked and before this: the arrival woke
                    // the reader (a chunk is stored, then its readers are woken, then the
                    // relay hears of it), so there is nothing to fetch.
                    return;
                }
                if r.has(chunk) {
                    tracing::warn!(
                        chunk = %chunk,
                        "a chunk counted as held is not in the store (evicted or unreadable); fetching it again"
                    );
                    r.handle_lost(now, chunk);
                }
                r.handle_local_want(now, chunk);
            }
            Input::Lost(chunk) => r.handle_lost(now, chunk),
            Input::Unsent { child, chunk } => r.handle_unsent(now, child, chunk),
            Input::NextBulk { child, reply } => {
                let is_child = r.children().any(|c| c == child);
                let next = is_child.then(|| r.poll_bulk(now, child));
                if next == Some(None) {
                    pumps.idle.insert(child);
                }
                let _ = reply.send(next);
            }
            Input::PumpDone(child) => {
                pumps.running.remove(&child);
                pumps.idle.remove(&child);
            }
            Input::EndServing => r.end_serving(),
            Input::Release => r.release(),
            Input::StoreFailed(why) => r.leave(&why),
            Input::Origin { chunk, got } => r.handle_origin(now, chunk, got),
        }
    }

    /// Sends what the relay queued, hands out its events, starts pumps for new children,
    /// wakes the pumps that have a chunk to send (or no child any more) and publishes the
    /// job's view. Messages go to the links before events are handed out.
    fn carry_out(
        self: &Arc<Self>,
        r: &mut Relay,
        pumps: &mut Pumps,
        transport: &TransportSeen,
        now: Instant,
    ) {
        let mut out = Vec::new();
        while let Some(t) = r.poll_transmit(now) {
            out.push(t);
        }
        let prepares = out
            .iter()
            .filter(|t| {
                matches!(
                    t,
                    Transmit::Control {
                        msg: Msg::Prepare(_),
                        ..
                    }
                )
            })
            .count();
        let in_turn = prepares > 0 && Peers::handshakes_take_turns(prepares);
        for t in out {
            match t {
                // The root's `Prepare` to a grandchild waits for the link to its parent.
                Transmit::Control {
                    to,
                    msg: Msg::Prepare(p),
                } if in_turn && !r.children().any(|c| c == to) => self.prepare_later(r, to, &p),
                t => self.transmit(r, t),
            }
        }
        while let Some(chunk) = r.poll_origin() {
            self.read_origin(chunk);
        }
        while let Some(e) = r.poll_event() {
            if let Event::Unobtainable {
                chunk,
                tried,
                again,
            } = &e
            {
                self.unobtainable(*chunk, tried, *again);
            }
            // A peer given up may come back as a new process: talk to it afresh.
            if let Event::ChildFailed(peer) | Event::ParentLost(peer) = e
                && let Some((host, _)) = self.peer_addr(r, peer)
            {
                transport.gave_up(&host, peer, now);
                self.peers.forget(&host);
            }
            let _ = self.events.send((now, e));
        }
        let children: HashSet<NodeId> = r.children().collect();
        for &c in &children {
            if pumps.running.contains_key(&c) {
                continue;
            }
            let Some((host, addr)) = self.peer_addr(r, c) else {
                tracing::warn!(child = ?c, "no address for child");
                continue;
            };
            let wake = Arc::new(Notify::new());
            pumps.running.insert(c, wake.clone());
            // The child's planned share of this node's link, or the operator's cap.
            let rate = Pacer::rate(r.peer(c).and_then(|n| n.rate), self.knobs.rate_limit);
            let span = tracing::debug_span!("pump", job = %self.job, child = %host, rate);
            let pump = self.clone().pump(c, host, addr, rate, wake);
            self.rt.spawn(tracing::Instrument::instrument(pump, span));
        }
        if !pumps.idle.is_empty() {
            let mut wake: Vec<NodeId> = r
                .bulk_ready(now)
                .filter(|c| pumps.idle.contains(c))
                .collect();
            wake.extend(pumps.idle.iter().filter(|c| !children.contains(c)));
            for c in wake {
                pumps.idle.remove(&c);
                if let Some(n) = pumps.running.get(&c) {
                    n.notify_one();
                }
            }
        }
        self.update_intake(r);
        self.view.send_replace(JobView::of(r));
    }

    /// Tells the relay of every chunk of this job the store drops, until the job closes.
    async fn follow(
        this: std::sync::Weak<Self>,
        mut losses: mpsc::UnboundedReceiver<ChunkId>,
        mut closing: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                id = losses.recv() => {
                    let (Some(id), Some(core)) = (id, this.upgrade()) else { return };
                    if let Some(&chunk) = core.chunk_of.get(&id) {
                        core.tell(Input::Lost(chunk));
                    }
                }
                _ = closing.wait_for(|&c| c) => return,
            }
        }
    }

    fn tell(&self, input: Input) {
        // The job's task has ended only when the job closed: nothing left to tell.
        let _ = self.inputs.send(input);
    }

    /// The counter of files opened and names looked up in this job's mount (give it to
    /// the mount's recorder).
    pub(crate) fn activity(&self) -> Arc<AtomicU64> {
        self.activity.clone()
    }

    /// At the root of a push that leaves chunks to demand: stop serving and finish the job.
    pub(crate) fn end_serving(&self) {
        self.tell(Input::EndServing);
    }

    /// At the root of a push that failed before the job started: releases the job on every
    /// node the tree reaches, and returns once the release is handed to the links to the
    /// root's children (or after `bound`, if the job's task is gone).
    pub(crate) async fn release(&self, bound: std::time::Duration) {
        let mut view = self.view.subscribe();
        self.tell(Input::Release);
        let _ = tokio::time::timeout(bound, view.wait_for(|v| v.released)).await;
    }

    /// Stops the job's tasks (connections stay, they are shared).
    pub fn close(&self) {
        self.closing.send_replace(true);
        // Readers waiting for a chunk get an error now instead of waiting for their bound.
        lock(&self.waiters).clear();
    }

    fn is_closed(&self) -> bool {
        *self.closing.borrow()
    }

    /// Whether this node holds `phase` (as the job's task last published).
    pub fn holds(&self, phase: Phase) -> bool {
        self.view.borrow().done[phase.index()]
    }

    /// What the job's task last published of the relay.
    pub fn view(&self) -> JobView {
        self.view.borrow().clone()
    }

    /// Counters so far.
    pub fn counters(&self) -> JobCounters {
        let stats = self.view.borrow().stats;
        let mut c = lock(&self.counters).clone();
        c.wants_sent = stats.wants_sent;
        c.demand_served = stats.demand_served;
        c.duplicates = stats.duplicates;
        c.lost = stats.lost;
        c.starved = stats.starved;
        c.from_origin = stats.from_origin;
        c.unobtainable = stats.unobtainable;
        c
    }

    fn peer_addr(&self, r: &Relay, id: NodeId) -> Option<(String, String)> {
        if let Some(a) = self.addrs.get(&id) {
            return Some(a.clone());
        }
        r.peer(id).map(|n| (n.host.clone(), n.addr.clone()))
    }

    /// Hands one message to the links. A demanded chunk goes at once if the store has it in
    /// memory; else a task reads it on the blocking pool (this task carries heartbeats and
    /// acks) and sends it, or reports it unsent if the store no longer holds it, for the
    /// relay to fetch it again.
    fn transmit(self: &Arc<Self>, r: &Relay, t: Transmit) {
        let (to, kind, frame) = match t {
            Transmit::Control { to, msg } => {
                let kind = match msg {
                    Msg::Want { .. } => StreamKind::Demand,
                    _ => StreamKind::Control,
                };
                (to, kind, frame(self.job, &msg))
            }
            Transmit::DemandChunk { to, chunk } => {
                let Some((host, addr)) = self.peer_addr(r, to) else {
                    tracing::warn!(?to, "no address for peer");
                    return;
                };
                let cached = self.index.chunks.get(chunk.index()).and_then(|info| {
                    self.bytes
                        .get_cached(&info.id)
                        .map(|stored| self.outgoing(stored))
                });
                match cached {
                    Some(data) => self.send_demanded(&host, &addr, chunk, data),
                    None => {
                        let this = self.clone();
                        self.rt.spawn(async move {
                            match this.chunk_bytes(chunk).await {
                                Some(data) => this.send_demanded(&host, &addr, chunk, data),
                                None => {
                                    tracing::warn!(
                                        chunk = %chunk,
                                        "a demanded chunk is no longer in the store; fetching it again for the child"
                                    );
                                    this.tell(Input::Unsent { child: to, chunk });
                                }
                            }
                        });
                    }
                }
                return;
            }
        };
        match self.peer_addr(r, to) {
            Some((host, addr)) => self.peers.send(&host, &addr, kind, frame),
            None => tracing::warn!(?to, "no address for peer"),
        }
    }

    /// Sends `prepare` to `to` once the link to its parent in the plan is settled
    /// ([`Peers::send_after`]).
    fn prepare_later(&self, r: &Relay, to: NodeId, prepare: &peertree::relay::Prepare) {
        let frame = frame(self.job, &Msg::Prepare(prepare.clone()));
        let parent = prepare.subtree.first().map(|n| n.parent);
        match (
            self.peer_addr(r, to),
            parent.and_then(|p| self.peer_addr(r, p)),
        ) {
            (Some((host, addr)), Some((ph, pa))) => {
                self.peers.send_after((&ph, &pa), &host, &addr, frame);
            }
            (Some((host, addr)), None) => self.peers.send(&host, &addr, StreamKind::Control, frame),
            (None, _) => tracing::warn!(?to, "no address for peer"),
        }
    }

    /// Queues a demanded chunk's stored bytes for the child at `host`.
    fn send_demanded(&self, host: &str, addr: &str, chunk: ChunkNo, data: Bytes) {
        let head = chunk_head(self.job, chunk, true, data.len());
        self.peers
            .send_parts(host, addr, StreamKind::Demand, head, data);
    }

    /// A chunk's stored bytes to send, or `None` if the store no longer holds it.
    async fn chunk_bytes(&self, chunk: ChunkNo) -> Option<Bytes> {
        let info = self.index.chunks.get(chunk.index())?;
        let stored = self.stored(&info.id, info.stored_len).await?;
        Some(self.outgoing(stored))
    }

    /// Counts a chunk as sent (and, in the lab's fault injection, corrupts it).
    fn outgoing(&self, stored: StoredChunk) -> Bytes {
        let data = match stored {
            StoredChunk::Checked(c) => c.stored().clone(),
            StoredChunk::Unchecked(b) => b,
        };
        #[cfg(feature = "fault-injection")]
        let data = if self.knobs.corrupt_outgoing {
            let mut v = data.to_vec();
            if let Some(b) = v.last_mut() {
                *b ^= 0x5a;
            }
            Bytes::from(v)
        } else {
            data
        };
        let mut c = lock(&self.counters);
        c.chunks_out += 1;
        c.bytes_out += data.len() as u64;
        data
    }

    /// The host name of the job's node `id`, for logs (`node N` if the tree has none).
    pub(crate) fn host_of(&self, id: NodeId) -> String {
        self.addrs
            .get(&id)
            .map_or_else(|| format!("node {}", id.0), |(host, _)| host.clone())
    }

    /// The job's node id of the peer named `from_host`, if it is in the job's tree.
    fn sender(&self, from_host: &str) -> Option<NodeId> {
        let from = self.hosts.get(from_host).copied();
        if from.is_none() {
            tracing::warn!(peer = %from_host, job = %self.job, "message from a host outside this job's tree; ignored");
        }
        from
    }

    /// A message for the relay from the peer named `from_host`.
    pub(crate) fn on_relay_msg(self: &Arc<Self>, from_host: &str, msg: RelayMsg) {
        if let Some(from) = self.sender(from_host) {
            self.tell(Input::Message { from, msg });
        }
    }

    /// The peer could not be reached.
    pub(crate) fn on_unreachable(self: &Arc<Self>, host: &str) {
        if let Some(&id) = self.hosts.get(host) {
            self.tell(Input::Unreachable(id));
        }
    }

    /// Chunk number `chunk` of the index (whose id the caller gives as `id`): from the
    /// store (the plain bytes if the store still has them in memory as checked on arrival,
    /// else the stored bytes from its file, for the reader to verify), or, asked of the tree
    /// and awaited, the plain bytes verified when they arrived. A chunk the relay counts as
    /// held but the store cannot produce is reported lost first, so it is fetched again
    /// instead of awaited for ever. The caller bounds the wait (dropping the future gives
    /// up).
    pub async fn want(self: &Arc<Self>, chunk: ChunkNo) -> Result<Fetched, Error> {
        let info = crate::source::chunk_info(&self.index.chunks, chunk)?;
        let id = &info.id;
        if let Some(s) = self.stored(id, info.stored_len).await {
            return Ok(fetched(s));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut waiters = lock(&self.waiters);
            let list = waiters.entry(chunk).or_default();
            // Readers that gave up (timed out) leave closed senders behind.
            list.retain(|w| !w.is_closed());
            list.push(tx);
        }
        // It may have arrived between the check and the registration.
        if let Some(s) = self.stored(id, info.stored_len).await {
            return Ok(fetched(s));
        }
        self.tell(Input::Want(chunk));
        // Pushed chunks stop yielding this daemon's CPU while the read waits for one.
        let _waits = self.peers.bulk_gate().map(|g| g.reader_waits());
        match rx.await {
            Ok(got) => got.map(Fetched::Verified),
            Err(_) => Err(Error::JobClosed),
        }
    }

    /// Whether `host` is a peer of this job (in its tree).
    pub(crate) fn has_peer(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// Whether the chunk is held here.
    pub fn has(&self, chunk: ChunkNo) -> bool {
        self.index
            .chunks
            .get(chunk.index())
            .is_some_and(|c| self.bytes.contains(&c.id))
    }
}

/// What a reader gets of a stored chunk: checked bytes from memory are decoded without
/// hashing them again; bytes read from a file go to the reader to be verified.
fn fetched(stored: StoredChunk) -> Fetched {
    match stored {
        StoredChunk::Checked(c) => match c.plain() {
            Ok(plain) => Fetched::Verified(plain),
            // Bytes checked by a stored hash that do not decode to the id: the reader's own
            // check refuses them.
            Err(_) => Fetched::Stored(c.stored().clone()),
        },
        StoredChunk::Unchecked(b) => Fetched::Stored(b),
    }
}

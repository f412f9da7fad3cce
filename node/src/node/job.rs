//! One job on one process: the [`Relay`] behind a mutex, and the glue that turns its outputs
//! into network traffic and its inputs out of network traffic.
//!
//! - every call into the relay goes through [`JobCore::with_relay`], which afterwards sends
//!   what the relay queued, records events, starts pumps for new children and wakes
//!   whoever waits;
//! - one **pump** task per child pulls the next chunk with `poll_bulk` and writes it to the
//!   child's bulk stream, so QUIC flow control is the back-pressure;
//! - one **timer** task calls `handle_timeout` when the relay asks;
//! - incoming chunks are verified against the index before the relay hears of them;
//! - a chunk the store drops (evicted, unreadable) is reported to the relay as lost, at
//!   once when the store announces it and whenever a read or a send finds it missing, so a
//!   reader never waits for a chunk the relay believes it holds; a waiting reader gets the
//!   chunk's bytes straight from the message that brought them, even if the store cannot
//!   keep them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use manifest::{ChunkId, Index, IndexId, decode_chunk};
use peertree::NodeId;
use peertree::relay::{Event, JobId, Msg, Relay, Transmit};
use tokio::sync::{Notify, mpsc, oneshot};

use super::peers::{Peers, frame, frame_parts};
use crate::Error;
use crate::net::StreamKind;

/// Where a job reads chunk bytes to send (the login node's store, or the node's store).
pub trait ChunkBytes: Send + Sync + 'static {
    /// Stored bytes of a chunk, if held.
    fn get(&self, id: &ChunkId) -> Option<Vec<u8>>;
    /// Whether a chunk is held (cheap).
    fn contains(&self, id: &ChunkId) -> bool;
    /// Keeps a verified chunk (nodes only; the root never receives chunks).
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()>;
    /// Chunks the store drops from now on (evicted or lost), if it ever drops any.
    fn watch_losses(&self) -> Option<mpsc::UnboundedReceiver<ChunkId>> {
        None
    }
}

/// A reader waiting for a chunk: it gets the chunk's stored bytes.
type Waiter = oneshot::Sender<Arc<[u8]>>;

/// A timestamped relay event.
pub type TimedEvent = (Instant, Event);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counters of a job on this process.
#[derive(Debug, Clone, Default, serde::Serialize)]
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
}

/// Per-job behaviour knobs.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobKnobs {
    /// Cap on bulk bytes per second to each child (protects a shared uplink); `None` for
    /// no cap. Demand traffic is never capped.
    pub rate_limit: Option<u64>,
    /// Fault injection for the lab's tests: flip a byte in every chunk this node sends,
    /// making it a lying peer. Not built into the shipped binary (feature `fault-injection`, which the binary's `lab` feature turns on).
    #[cfg(feature = "fault-injection")]
    pub corrupt_outgoing: bool,
}

impl JobKnobs {
    /// The production knobs: an optional cap on bulk bytes per second to each child.
    pub fn rate_limited(rate_limit: Option<u64>) -> Self {
        Self {
            rate_limit,
            #[cfg(feature = "fault-injection")]
            corrupt_outgoing: false,
        }
    }
}

/// The shared state of one job.
pub struct JobCore {
    /// The job.
    pub job: JobId,
    /// This process's node id in the job.
    pub me: NodeId,
    /// The verified index.
    pub index: Arc<Index>,
    /// Its id.
    pub index_id: IndexId,
    relay: Mutex<Relay>,
    hosts: HashMap<String, NodeId>,
    addrs: HashMap<NodeId, (String, String)>,
    peers: Arc<Peers>,
    bytes: Arc<dyn ChunkBytes>,
    chunk_of: HashMap<ChunkId, u32>,
    waiters: Mutex<HashMap<u32, Vec<Waiter>>>,
    pump_wake: Notify,
    timer_wake: Notify,
    pumps: Mutex<HashSet<NodeId>>,
    events: mpsc::UnboundedSender<TimedEvent>,
    counters: Mutex<JobCounters>,
    rt: tokio::runtime::Handle,
    closed: std::sync::atomic::AtomicBool,
    closing: tokio::sync::watch::Sender<bool>,
    knobs: JobKnobs,
}

impl JobCore {
    /// Wraps a relay; returns the core and the stream of its events. Call
    /// [`JobCore::start`] once it is shared.
    pub fn new(
        relay: Relay,
        index: Arc<Index>,
        index_id: IndexId,
        peers: Arc<Peers>,
        bytes: Arc<dyn ChunkBytes>,
        known: &[peertree::relay::NodeInfo],
        knobs: JobKnobs,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<TimedEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
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
            .map(|(i, c)| (c.id, i as u32))
            .collect();
        let core = Arc::new(Self {
            job: relay.job(),
            me: relay.me(),
            index,
            index_id,
            relay: Mutex::new(relay),
            hosts,
            addrs,
            peers,
            bytes,
            chunk_of,
            waiters: Mutex::new(HashMap::new()),
            pump_wake: Notify::new(),
            timer_wake: Notify::new(),
            pumps: Mutex::new(HashSet::new()),
            events: tx,
            counters: Mutex::new(JobCounters::default()),
            rt: tokio::runtime::Handle::current(),
            closed: std::sync::atomic::AtomicBool::new(false),
            closing: tokio::sync::watch::Sender::new(false),
            knobs,
        });
        (core, rx)
    }

    /// Starts the timer and sends what the relay queued at creation.
    pub fn start(self: &Arc<Self>) {
        let this = self.clone();
        self.rt.spawn(async move { this.timer().await });
        if let Some(losses) = self.bytes.watch_losses() {
            let this = Arc::downgrade(self);
            let closing = self.closing.subscribe();
            self.rt.spawn(Self::follow_losses(this, losses, closing));
        }
        self.with_relay(|_, _| ());
    }

    /// Tells the relay of every chunk of this job the store drops, until the job closes.
    async fn follow_losses(
        this: std::sync::Weak<Self>,
        mut losses: mpsc::UnboundedReceiver<ChunkId>,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                id = losses.recv() => {
                    let (Some(id), Some(core)) = (id, this.upgrade()) else { return };
                    if let Some(&chunk) = core.chunk_of.get(&id) {
                        core.with_relay(|r, now| r.handle_lost(now, chunk));
                    }
                }
                _ = closing.wait_for(|&c| c) => return,
            }
        }
    }

    /// Stops the job's tasks (connections stay, they are shared).
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.closing.send_replace(true);
        // Readers waiting for a chunk get an error now instead of waiting for their bound.
        lock(&self.waiters).clear();
        self.pump_wake.notify_waiters();
        self.timer_wake.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Counters so far.
    pub fn counters(&self) -> JobCounters {
        let stats = self.relay(|r| r.stats());
        let mut c = lock(&self.counters).clone();
        c.wants_sent = stats.wants_sent;
        c.demand_served = stats.demand_served;
        c.duplicates = stats.duplicates;
        c.lost = stats.lost;
        c
    }

    /// Runs `f` on the relay, then carries out everything it asked for.
    pub fn with_relay<R>(self: &Arc<Self>, f: impl FnOnce(&mut Relay, Instant) -> R) -> R {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut events = Vec::new();
        let (result, children) = {
            let mut r = lock(&self.relay);
            let result = f(&mut r, now);
            while let Some(t) = r.poll_transmit(now) {
                out.push(t);
            }
            while let Some(e) = r.poll_event() {
                events.push(e);
            }
            (result, r.children().collect::<Vec<_>>())
        };
        for t in out {
            self.transmit(t);
        }
        for e in events {
            // A peer given up may come back as a new process: talk to it afresh.
            if let Event::ChildFailed(peer) | Event::ParentLost(peer) = e
                && let Some((host, _)) = self.peer_addr(peer)
            {
                self.peers.forget(&host);
            }
            let _ = self.events.send((now, e));
        }
        for c in children {
            if lock(&self.pumps).insert(c) {
                let this = self.clone();
                self.rt.spawn(async move {
                    this.clone().pump(c).await;
                    lock(&this.pumps).remove(&c);
                });
            }
        }
        self.pump_wake.notify_waiters();
        self.timer_wake.notify_one();
        result
    }

    /// Read-only access to the relay.
    pub fn relay<R>(&self, f: impl FnOnce(&Relay) -> R) -> R {
        f(&lock(&self.relay))
    }

    fn peer_addr(&self, id: NodeId) -> Option<(String, String)> {
        if let Some(a) = self.addrs.get(&id) {
            return Some(a.clone());
        }
        self.relay(|r| r.peer(id).map(|n| (n.host.clone(), n.addr.clone())))
    }

    fn transmit(self: &Arc<Self>, t: Transmit) {
        let (to, kind, bytes) = match t {
            Transmit::Control { to, msg } => {
                let kind = match msg {
                    Msg::Want { .. } => StreamKind::Demand,
                    _ => StreamKind::Control,
                };
                (to, kind, frame(self.job, &msg))
            }
            Transmit::DemandChunk { to, chunk } => {
                let Some(data) = self.chunk_bytes(chunk) else {
                    tracing::warn!(
                        chunk,
                        "a demanded chunk is no longer in the store; fetching it again for the child"
                    );
                    self.with_relay(|r, now| r.handle_unsent(now, to, chunk));
                    return;
                };
                let msg = Msg::Chunk {
                    chunk,
                    demand: true,
                    data,
                };
                (to, StreamKind::Demand, frame(self.job, &msg))
            }
        };
        let Some((host, addr)) = self.peer_addr(to) else {
            tracing::warn!(?to, "no address for peer");
            return;
        };
        self.peers.send(&host, &addr, kind, bytes);
    }

    fn chunk_bytes(&self, chunk: u32) -> Option<Vec<u8>> {
        let info = self.index.chunks.get(chunk as usize)?;
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
        let mut data = self.bytes.get(&info.id)?;
        #[cfg(feature = "fault-injection")]
        if self.knobs.corrupt_outgoing
            && let Some(b) = data.last_mut()
        {
            *b ^= 0x5a;
        }
        let mut c = lock(&self.counters);
        c.chunks_out += 1;
        c.bytes_out += data.len() as u64;
        Some(data)
    }

    async fn pump(self: Arc<Self>, child: NodeId) {
        let Some((host, addr)) = self.peer_addr(child) else {
            return;
        };
        let span = tracing::debug_span!("pump", job = %self.job, child = %host);
        // The span covers every await of the pump (an entered guard must not cross awaits).
        tracing::Instrument::instrument(self.clone().pump_loop(child, host, addr), span).await;
    }

    async fn pump_loop(self: Arc<Self>, child: NodeId, host: String, addr: String) {
        let conn = match self.peers.conn(&host, &addr).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "child unreachable");
                self.with_relay(|r, now| r.handle_unreachable(now, child));
                return;
            }
        };
        let mut tx = match conn.open(StreamKind::Bulk).await {
            Ok(tx) => tx,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open bulk stream");
                self.with_relay(|r, now| r.handle_unreachable(now, child));
                return;
            }
        };
        loop {
            if self.is_closed() {
                return;
            }
            let woken = self.pump_wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let next = self.with_relay_quiet(|r, now| {
                if !r.children().any(|c| c == child) {
                    return Err(());
                }
                Ok(r.poll_bulk(now, child))
            });
            match next {
                Err(()) => return,
                Ok(Some(chunk)) => {
                    let Some(data) = self.chunk_bytes(chunk) else {
                        tracing::warn!(
                            chunk,
                            "a chunk to forward is no longer in the store; fetching it again for the child"
                        );
                        self.with_relay(|r, now| r.handle_unsent(now, child, chunk));
                        continue;
                    };
                    let msg = Msg::Chunk {
                        chunk,
                        demand: false,
                        data,
                    };
                    let (head, body) = frame_parts(self.job, &msg);
                    drop(msg);
                    let len = head.len() + body.len();
                    if let Err(e) = tx.send_parts(&head, body).await {
                        tracing::debug!(error = %e, "bulk send failed");
                        self.with_relay(|r, now| r.handle_unreachable(now, child));
                        return;
                    }
                    if let Some(rate) = self.knobs.rate_limit.filter(|&r| r > 0) {
                        let secs = len as f64 / rate as f64;
                        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                    }
                }
                Ok(None) => {
                    let _ = tokio::time::timeout(Duration::from_millis(500), woken).await;
                }
            }
        }
    }

    /// Like [`JobCore::with_relay`] but without waking the pumps (a pump polling itself).
    fn with_relay_quiet<R>(self: &Arc<Self>, f: impl FnOnce(&mut Relay, Instant) -> R) -> R {
        let now = Instant::now();
        let mut r = lock(&self.relay);
        let result = f(&mut r, now);
        let mut out = Vec::new();
        while let Some(t) = r.poll_transmit(now) {
            out.push(t);
        }
        drop(r);
        for t in out {
            self.transmit(t);
        }
        result
    }

    async fn timer(self: Arc<Self>) {
        while !self.is_closed() {
            let next = self.relay(|r| r.poll_timeout());
            let sleep = next.map_or(Duration::from_secs(1), |t| {
                t.saturating_duration_since(Instant::now())
            });
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.timer_wake.notified() => continue,
            }
            self.with_relay(|r, now| r.handle_timeout(now));
        }
    }

    /// A message from the peer named `from_host`.
    pub fn on_message(self: &Arc<Self>, from_host: &str, msg: Msg) {
        let Some(&from) = self.hosts.get(from_host) else {
            tracing::warn!(peer = %from_host, job = %self.job, "message from a host outside this job's tree; ignored");
            return;
        };
        match msg {
            Msg::Chunk { chunk, data, .. } => self.on_chunk(from, chunk, &data),
            Msg::Start(_) => {}
            other => self.with_relay(|r, now| r.handle_message(now, from, other)),
        }
    }

    fn on_chunk(self: &Arc<Self>, from: NodeId, chunk: u32, data: &[u8]) {
        let Some(info) = self.index.chunks.get(chunk as usize).copied() else {
            return;
        };
        let valid = decode_chunk(data, &info.id, info.plain_len).is_ok();
        if valid {
            if let Err(e) = self.bytes.put(&info.id, data) {
                tracing::error!(error = %e, "cannot store a chunk: is the state directory full?");
                // Readers waiting for it still get it; the relay does not count it as held.
                self.wake(chunk, data);
                return;
            }
            let mut c = lock(&self.counters);
            c.chunks_in += 1;
            c.bytes_in += data.len() as u64;
        } else {
            lock(&self.counters).bad_chunks += 1;
            tracing::error!(chunk = %info.id.short(), peer = ?from, "peer sent a chunk that does not match its id; dropping it and re-attaching");
        }
        self.with_relay(|r, now| r.handle_chunk(now, from, chunk, valid));
        if valid {
            self.wake(chunk, data);
        }
    }

    /// Hands a verified chunk to the readers waiting for it.
    fn wake(&self, chunk: u32, data: &[u8]) {
        if let Some(ws) = lock(&self.waiters).remove(&chunk) {
            let data: Arc<[u8]> = Arc::from(data);
            for w in ws {
                let _ = w.send(data.clone());
            }
        }
    }

    /// The peer could not be reached.
    pub fn on_unreachable(self: &Arc<Self>, host: &str) {
        if let Some(&id) = self.hosts.get(host) {
            self.with_relay(|r, now| r.handle_unreachable(now, id));
        }
    }

    /// The stored bytes of chunk `id`: from the store, or asked of the tree and awaited.
    /// A chunk the relay counts as held but the store cannot produce is reported lost
    /// first, so it is fetched again instead of awaited for ever. The caller bounds the
    /// wait (dropping the future gives up).
    pub async fn want(self: &Arc<Self>, id: &ChunkId) -> Result<Vec<u8>, Error> {
        let Some(&chunk) = self.chunk_of.get(id) else {
            return Err(Error::ChunkNotInJob {
                chunk: *id,
                job: self.job,
            });
        };
        if let Some(b) = self.bytes.get(id) {
            return Ok(b);
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
        if let Some(b) = self.bytes.get(id) {
            return Ok(b);
        }
        self.with_relay(|r, now| {
            if r.has(chunk) {
                tracing::warn!(chunk = %id.short(), job = %self.job, "a chunk counted as held is not in the store (evicted or unreadable); fetching it again");
                r.handle_lost(now, chunk);
            }
            r.handle_local_want(now, chunk);
        });
        match rx.await {
            Ok(data) => Ok(data.to_vec()),
            Err(_) => Err(Error::JobClosed),
        }
    }

    /// Whether the chunk is held here.
    pub fn has(&self, id: &ChunkId) -> bool {
        self.bytes.contains(id)
    }
}

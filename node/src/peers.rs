//! Connections to other nodes, shared by every job of a process: at most one QUIC
//! connection per peer endpoint (reused for the whole job and across jobs), control and demand
//! messages on their own streams so they never wait behind bulk chunks, and reader tasks
//! that hand every incoming frame to the [`Router`].
//!
//! A frame is the job id (8 bytes, big endian) followed by an encoded [`Msg`]. A chunk's
//! stored bytes travel without being copied into a message: sent after a head
//! ([`chunk_head`]), and sliced out of the frame they arrived in ([`unframe`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use peertree::relay::{ChunkNo, JobId, Msg, Routed};
use tokio::sync::{mpsc, watch};

use super::crls::CrlKeeper;
use crate::bulk_gate::BulkGate;
use crate::net::{Conn, NetError, StreamKind, Transport};
pub(crate) use crate::reorder::{StreamOrder, Ticket};
use crate::sync::lock;

/// Where incoming messages go.
pub(crate) trait Router: Send + Sync + 'static {
    /// A message for `job` from the peer whose certificate names `from_host`, at its
    /// place `order` in its stream. Returns the work still running for it (a chunk being
    /// verified and stored), which the stream's reader bounds ([`InOrder`]). What must
    /// happen in the stream's order (telling the relay a chunk is held) is released
    /// through `order`; dropping it leaves the place empty.
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed, order: Ticket) -> Option<Pending>;
    /// `host` could not be reached at all, for the reason `why` (the connection's error).
    fn unreachable(&self, host: &str, why: &str);
}

/// Work a [`Router`] still does for a delivered message.
pub type Pending = tokio::task::JoinHandle<()>;

/// How many of one stream's chunks may be at work at once: one per core this process may
/// run on (its CPU affinity), at least 2, at most 8.
pub(crate) fn chunks_at_work() -> usize {
    std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(2, 8)
}

/// One stream's delivered messages: up to `most` chunks at work at once (verified and
/// stored in parallel on the blocking pool) while the reader reads on, each holding a
/// place in the stream's [`StreamOrder`] so that what must happen in order (the relay
/// hearing of them) still does. Any other message waits until the work of every message
/// before it is done, and the message after it until its own is (a `Start` is routed
/// before its job's chunks come). A sender faster than verification is held back by QUIC
/// flow control once `most` chunks are at work.
struct InOrder {
    working: std::collections::VecDeque<Pending>,
    /// The last message delivered was no chunk: the next waits until its work is done.
    barrier: bool,
    order: StreamOrder,
    most: usize,
}

impl InOrder {
    fn new(most: usize) -> Self {
        Self {
            working: std::collections::VecDeque::new(),
            barrier: false,
            order: StreamOrder::default(),
            most: most.max(1),
        }
    }

    /// Waits until the message may be delivered (see [`InOrder`]; `chunk`: it is one),
    /// then delivers it with `deliver`, given its place.
    async fn deliver(&mut self, chunk: bool, deliver: impl FnOnce(Ticket) -> Option<Pending>) {
        let keep = if chunk && !self.barrier {
            self.most - 1
        } else {
            0
        };
        while self.working.len() > keep {
            if let Some(w) = self.working.pop_front() {
                // A task that panicked has reported it; the stream goes on.
                let _ = w.await;
            }
        }
        self.barrier = !chunk;
        self.working.extend(deliver(self.order.ticket()));
    }
}

/// Encodes a frame.
pub fn frame(job: JobId, msg: &Msg) -> Vec<u8> {
    let body = msg.encode();
    let mut f = Vec::with_capacity(8 + body.len());
    f.extend_from_slice(&job.0.to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// The head of a chunk's frame, to be followed by the chunk's `len` stored bytes (see
/// `FrameSender::send_parts`): the frame is then the same as [`frame`] of the
/// [`Msg::Chunk`], without the stored bytes being copied into it.
pub fn chunk_head(job: JobId, chunk: ChunkNo, demand: bool, len: usize) -> Vec<u8> {
    let mut head = job.0.to_be_bytes().to_vec();
    head.extend_from_slice(&Msg::chunk_head(chunk, demand, len));
    head
}

/// Decodes a frame. A chunk's stored bytes are a slice of `bytes`, not a copy.
pub fn unframe(bytes: Bytes) -> Result<(JobId, Routed), NetError> {
    let Some((head, body)) = bytes.split_first_chunk::<8>() else {
        return Err(NetError::ShortFrame(bytes.len()));
    };
    let job = JobId(u64::from_be_bytes(*head));
    let routed = match Msg::split_chunk(body) {
        Some(split) => {
            let split = split?;
            Routed::Chunk {
                chunk: split.chunk,
                demand: split.demand,
                data: bytes.slice(8 + split.data.start..8 + split.data.end),
            }
        }
        None => Msg::decode(body)?.route(),
    };
    Ok((job, routed))
}

/// A queued control or demand frame: `head` then `body`, sent without joining them.
struct Outgoing {
    head: Vec<u8>,
    body: Bytes,
}

/// The outcome of a connection attempt, once known (shared by every sender waiting on it).
type SharedConn = watch::Receiver<Option<Result<Conn, Arc<NetError>>>>;

async fn wait_conn(mut cell: SharedConn) -> Result<Conn, NetError> {
    match cell.wait_for(Option::is_some).await {
        Ok(v) => v
            .clone()
            .expect("wait_for returned a Some")
            .map_err(NetError::Shared),
        Err(_) => Err(NetError::Abandoned),
    }
}

/// Which peer process a link goes to: its certificate's host name and its UDP port. A host
/// runs one daemon, but a login node may run several pushes at once (two Slurm jobs'
/// prologs), each with its own endpoint; keyed by host alone, the newer push's connection
/// would take the older one's replies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LinkKey {
    host: String,
    /// The peer's port; 0 when its address names none (the link is then the host's only).
    port: u16,
}

impl LinkKey {
    /// The key of `host` listening at `addr` (`name:port`, `ip:port` or `[ip6]:port`).
    fn of(host: &str, addr: &str) -> LinkKey {
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0);
        LinkKey {
            host: host.to_string(),
            port,
        }
    }
}

struct Link {
    conn: SharedConn,
    control: mpsc::UnboundedSender<Outgoing>,
    demand: mpsc::UnboundedSender<Outgoing>,
    /// The control and demand sender tasks: each ends once its channel is closed and the
    /// peer has acknowledged everything it wrote.
    senders: Vec<tokio::task::JoinHandle<()>>,
}

/// What the transport heard from one peer host: its connections with the datagrams seen
/// on each so far, and the sum over every connection it had here, which only grows.
#[derive(Default)]
struct Heard {
    conns: Vec<(Conn, u64)>,
    total: u64,
}

impl Heard {
    /// Adds what each connection received since the last count, forgets the closed ones
    /// and returns the sum.
    fn count(&mut self) -> u64 {
        for (conn, seen) in &mut self.conns {
            let received = conn.path().received;
            self.total += received.saturating_sub(*seen);
            *seen = received;
        }
        self.conns.retain(|(c, _)| !c.is_closed());
        self.total
    }
}

/// The connection manager.
pub struct Peers {
    transport: Transport,
    links: Mutex<HashMap<LinkKey, Link>>,
    /// Every connection whose streams are read, by peer host: the transport's signs of
    /// life ([`Peers::heard_from`]).
    heard: Mutex<HashMap<String, Heard>>,
    router: Mutex<Option<Weak<dyn Router>>>,
    /// Where revocation lists from peers go (`None`: they are dropped), see `crls`.
    crls: Mutex<Option<Arc<CrlKeeper>>>,
    /// What bulk streams wait for before each frame (`None`: nothing), see `bulk_gate`.
    bulk_gate: Mutex<Option<Arc<BulkGate>>>,
    me: Weak<Peers>,
    rt: tokio::runtime::Handle,
}

async fn resolve(addr: &str) -> Result<SocketAddr, NetError> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|source| NetError::Resolve {
            addr: addr.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| NetError::NoAddress(addr.to_string()))
}

impl Peers {
    /// A manager over `transport`; call [`Peers::set_router`] before traffic flows.
    pub fn new(transport: Transport) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            transport,
            links: Mutex::new(HashMap::new()),
            heard: Mutex::new(HashMap::new()),
            router: Mutex::new(None),
            crls: Mutex::new(None),
            bulk_gate: Mutex::new(None),
            me: me.clone(),
            rt: tokio::runtime::Handle::current(),
        })
    }

    /// Sets who receives incoming messages.
    pub(crate) fn set_router(&self, router: Weak<dyn Router>) {
        *lock(&self.router) = Some(router);
    }

    fn router(&self) -> Option<Arc<dyn Router>> {
        lock(&self.router).as_ref().and_then(Weak::upgrade)
    }

    /// Installs newer revocation lists from peers with `keeper` (a daemon does; a push's
    /// root only hands its own on), see [`super::crls`].
    pub(crate) fn keep_crls(&self, keeper: CrlKeeper) {
        *lock(&self.crls) = Some(Arc::new(keeper));
    }

    /// Bulk streams read from now on wait at `gate` before each frame (a daemon's; a
    /// push's root has no applications to yield to), see [`crate::bulk_gate`].
    pub(crate) fn gate_bulk(&self, gate: Arc<BulkGate>) {
        *lock(&self.bulk_gate) = Some(gate);
    }

    /// The gate bulk streams wait at, if any ([`Peers::gate_bulk`]).
    pub(crate) fn bulk_gate(&self) -> Option<Arc<BulkGate>> {
        lock(&self.bulk_gate).clone()
    }

    /// Every connection up now (both ways, whoever opened it).
    fn live_connections(&self) -> Vec<Conn> {
        let mut heard = lock(&self.heard);
        heard
            .values_mut()
            .flat_map(|h| {
                h.conns.retain(|(c, _)| !c.is_closed());
                h.conns.iter().map(|(c, _)| c.clone())
            })
            .collect()
    }

    /// Closes and forgets the connections to peers whose certificate serial is among
    /// `serials` (a revocation list just installed lists them).
    pub(crate) fn close_revoked(&self, serials: &[Vec<u8>]) {
        for conn in self.live_connections() {
            if serials.iter().any(|s| s.as_slice() == conn.peer_serial()) {
                tracing::warn!(peer = %conn.peer_host(), "closing the connection: the peer's certificate is revoked now");
                conn.close();
                self.forget(conn.peer_host());
            }
        }
    }

    /// Sends a revocation list just installed to every peer connected now but `from`,
    /// which sent it.
    pub(crate) fn pass_on_crl(&self, der: &Bytes, from: &str) {
        for conn in self.live_connections() {
            if conn.peer_host() != from {
                super::crls::send(&self.rt, conn, der.clone());
            }
        }
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Accepts incoming connections until the transport closes.
    pub(crate) async fn accept_loop(self: Arc<Self>) {
        while let Some(conn) = self.transport.accept().await {
            let host = conn.peer_host().to_string();
            let key = LinkKey {
                host: host.clone(),
                port: conn.remote_addr().port(),
            };
            tracing::debug!(peer = %host, port = key.port, "accepted connection");
            // Use the peer's newest connection for our own sends; register it before
            // reading, so replies to its first message use it. An older link to the same
            // endpoint may be dead without our knowing yet (a `teesfs push` that exited, a
            // restarted daemon: no close frame, idle timeout not reached), and the peer
            // would never hear our replies on it.
            {
                let (tx, cell) = watch::channel(Some(Ok(conn.clone())));
                drop(tx);
                let link = self.start_link(&host, cell);
                lock(&self.links).insert(key, link);
            }
            self.spawn_readers(conn);
        }
    }

    /// UDP datagrams received from `host` so far, over every connection to it (both ways,
    /// whoever opened it, this job's or another's): a count that grows while the peer's
    /// process answers, whether with data, its own heartbeats or QUIC's acknowledgements
    /// of ours, which its QUIC stack sends however starved its jobs are. It stops when the
    /// peer is dead, stopped or cut off. Compare two counts; the first is no sign by itself.
    pub(crate) fn heard_from(&self, host: &str) -> u64 {
        lock(&self.heard).get_mut(host).map_or(0, Heard::count)
    }

    /// Counts what `conn` receives in [`Peers::heard_from`]; closed connections of every
    /// host are forgotten meanwhile (their datagrams stay counted).
    fn watch(&self, conn: &Conn) {
        let mut heard = lock(&self.heard);
        for h in heard.values_mut() {
            h.count();
        }
        heard
            .entry(conn.peer_host().to_string())
            .or_default()
            .conns
            .push((conn.clone(), 0));
    }

    fn spawn_readers(&self, conn: Conn) {
        self.watch(&conn);
        // Every peer hears the revocation list this process uses as the link comes up.
        if let Some(der) = self.transport.crl() {
            super::crls::send(&self.rt, conn.clone(), der);
        }
        let weak_router = lock(&self.router).clone();
        let (me, keeper) = (self.me.clone(), lock(&self.crls).clone());
        let gate = lock(&self.bulk_gate).clone();
        self.rt.spawn(async move {
            let host = conn.peer_host().to_string();
            loop {
                let (kind, mut rx) = match conn.accept_stream().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(peer = %host, error = %e, "connection ended");
                        return;
                    }
                };
                if kind == StreamKind::Crl {
                    let from = host.clone();
                    tokio::spawn(super::crls::receive(me.clone(), keeper.clone(), from, rx));
                    continue;
                }
                let router = weak_router.clone();
                let host = host.clone();
                let gate = gate.clone().filter(|_| kind == StreamKind::Bulk);
                tokio::spawn(async move {
                    let mut in_order = InOrder::new(chunks_at_work());
                    loop {
                        if let Some(g) = &gate {
                            g.admit().await;
                        }
                        match rx.recv().await {
                            Ok(Some(bytes)) => match unframe(bytes.into()) {
                                Ok((job, msg)) => {
                                    let chunk = matches!(msg, Routed::Chunk { .. });
                                    // The router is upgraded only to deliver: a stream
                                    // waiting for work must not keep the daemon alive.
                                    in_order
                                        .deliver(chunk, |order| {
                                            router
                                                .as_ref()
                                                .and_then(Weak::upgrade)
                                                .and_then(|r| r.deliver(&host, job, msg, order))
                                        })
                                        .await;
                                }
                                Err(e) => {
                                    tracing::warn!(peer = %host, error = %e, "dropping a malformed frame");
                                }
                            },
                            Ok(None) => return,
                            Err(e) => {
                                tracing::debug!(peer = %host, error = %e, "stream ended");
                                return;
                            }
                        }
                    }
                });
            }
        });
    }

    /// Starts the sender tasks of a link whose connection is (or will be) in `cell`.
    fn start_link(&self, host: &str, cell: SharedConn) -> Link {
        let (ctx, crx) = mpsc::unbounded_channel::<Outgoing>();
        let (dtx, drx) = mpsc::unbounded_channel::<Outgoing>();
        let mut senders = Vec::with_capacity(2);
        for (kind, mut rx) in [(StreamKind::Control, crx), (StreamKind::Demand, drx)] {
            let cell = cell.clone();
            let host = host.to_string();
            senders.push(self.rt.spawn(async move {
                // Wait for the connection the link's creator is establishing.
                let Ok(conn) = wait_conn(cell).await else {
                    return;
                };
                let mut tx = match conn.open(kind).await {
                    Ok(tx) => tx,
                    Err(e) => {
                        tracing::warn!(peer = %host, error = %e, "cannot open stream");
                        return;
                    }
                };
                while let Some(f) = rx.recv().await {
                    if let Err(e) = tx.send_parts(&f.head, f.body).await {
                        tracing::debug!(peer = %host, error = %e, "send failed");
                        return;
                    }
                }
                // The link was dropped or drained: end the stream once the peer has it all.
                if let Err(e) = tx.finish().await {
                    tracing::debug!(peer = %host, error = %e, "stream not acknowledged");
                }
            }));
        }
        Link {
            conn: cell,
            control: ctx,
            demand: dtx,
            senders,
        }
    }

    /// The connection to `host` (listening at `addr`), connecting if needed.
    pub async fn conn(self: &Arc<Self>, host: &str, addr: &str) -> Result<Conn, NetError> {
        wait_conn(self.link_cell(host, addr)).await
    }

    fn link_cell(self: &Arc<Self>, host: &str, addr: &str) -> SharedConn {
        let key = LinkKey::of(host, addr);
        let mut links = lock(&self.links);
        if let Some(l) = links.get(&key) {
            // A failed or closed link, or one whose senders gave up, is replaced by a fresh
            // attempt.
            let dead = match l.conn.borrow().as_ref() {
                None => false,
                Some(Err(_)) => true,
                Some(Ok(c)) => c.is_closed(),
            } || l.control.is_closed()
                || l.demand.is_closed();
            if !dead {
                return l.conn.clone();
            }
        }
        let (tx, cell) = watch::channel(None);
        let link = self.start_link(host, cell.clone());
        links.insert(key, link);
        let this = self.clone();
        let (host, addr) = (host.to_string(), addr.to_string());
        self.rt.spawn(async move {
            let result = match resolve(&addr).await {
                Ok(sa) => this.transport.connect(sa, &host).await,
                Err(e) => Err(e),
            }
            .map_err(Arc::new);
            let _ = tx.send(Some(result.clone()));
            match result {
                Ok(conn) => this.spawn_readers(conn),
                Err(e) => {
                    tracing::warn!(peer = %host, %addr, error = %e, "peer unreachable");
                    if let Some(r) = this.router() {
                        r.unreachable(&host, &e.to_string());
                    }
                }
            }
        });
        cell
    }

    /// Queues a control or demand frame for `host`.
    pub fn send(self: &Arc<Self>, host: &str, addr: &str, kind: StreamKind, frame: Vec<u8>) {
        self.send_parts(host, addr, kind, Vec::new(), frame.into());
    }

    /// Whether `handshakes` connections opened at once would take turns on this host's
    /// cores (counted as the kernel lets this process use them: a CPU quota counts).
    /// Then a grandchild's `Prepare` is sent with [`Peers::send_after`]: in the lab's
    /// scale model (0.05 cores a node) a push's root that dialled its 4 children and 12
    /// grandchildren at once had its children connected after 25-37 ms, against 2-8 ms.
    /// With a core per handshake to spare they all go at once, and the connections are
    /// set up two levels ahead of the `Start`s.
    pub(crate) fn handshakes_take_turns(handshakes: usize) -> bool {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        cores < handshakes
    }

    /// Queues a control frame for `host` once the connection to `after` (host, address)
    /// is up or has failed: a grandchild's `Prepare` waits for the link to its parent, so
    /// the handshakes with this node's own children, whose `Start`s wait for them, do not
    /// share its CPU with handshakes nobody waits for yet.
    pub(crate) fn send_after(
        self: &Arc<Self>,
        after: (&str, &str),
        host: &str,
        addr: &str,
        frame: Vec<u8>,
    ) {
        let first = self.link_cell(after.0, after.1);
        let this = self.clone();
        let (host, addr) = (host.to_string(), addr.to_string());
        self.rt.spawn(async move {
            // Failed or not, the link is settled; the frame goes on its own link either way.
            let _ = wait_conn(first).await;
            this.send(&host, &addr, StreamKind::Control, frame);
        });
    }

    /// Returns once the links to `peers` (host, address) are settled, up or failed, or
    /// after `bound`; dials those not dialled yet.
    pub(crate) async fn settled(self: &Arc<Self>, peers: &[(String, String)], bound: Duration) {
        let cells: Vec<SharedConn> = peers.iter().map(|(h, a)| self.link_cell(h, a)).collect();
        let all = async {
            for cell in cells {
                let _ = wait_conn(cell).await;
            }
        };
        let _ = tokio::time::timeout(bound, all).await;
    }

    /// Queues a control or demand frame for `host` made of `head` then `body` (a chunk's
    /// head and its shared stored bytes), without joining them.
    pub(crate) fn send_parts(
        self: &Arc<Self>,
        host: &str,
        addr: &str,
        kind: StreamKind,
        head: Vec<u8>,
        body: Bytes,
    ) {
        self.link_cell(host, addr);
        let links = lock(&self.links);
        let Some(link) = links.get(&LinkKey::of(host, addr)) else {
            return;
        };
        let tx = match kind {
            StreamKind::Demand => &link.demand,
            _ => &link.control,
        };
        let _ = tx.send(Outgoing { head, body });
    }

    /// How many links are open (for the daemon's metrics).
    pub(crate) fn link_count(&self) -> usize {
        lock(&self.links).len()
    }

    /// Forgets the links to `host` (a peer declared dead): the next message to it opens a
    /// fresh connection. A crashed and restarted peer never answers on the old one, and
    /// QUIC would only notice at its idle timeout.
    pub(crate) fn forget(&self, host: &str) {
        let mut links = lock(&self.links);
        let before = links.len();
        links.retain(|k, _| k.host != host);
        if links.len() != before {
            tracing::debug!(peer = %host, "link forgotten");
        }
    }

    /// Closes and forgets the links to `host`: a process done with a peer (`teesfs learn`,
    /// which asks thousands of nodes once each) frees the connection now rather than at the
    /// idle timeout. What is still queued for the peer is dropped.
    pub(crate) fn disconnect(&self, host: &str) {
        let gone: Vec<Link> = {
            let mut links = lock(&self.links);
            let keys: Vec<LinkKey> = links.keys().filter(|k| k.host == host).cloned().collect();
            keys.iter().filter_map(|k| links.remove(k)).collect()
        };
        for l in gone {
            if let Some(Ok(c)) = l.conn.borrow().as_ref() {
                c.close();
            }
        }
    }

    /// Ends every link once the control and demand frames queued on it have been
    /// acknowledged by their peer, or `within` has passed: a root calls it before
    /// [`Peers::close`] so that its last messages (`Finished`) are not abandoned.
    pub async fn drain(&self, within: std::time::Duration) {
        let senders: Vec<_> = lock(&self.links)
            .drain()
            .flat_map(|(_, link)| {
                // Closing the channels ends the sender tasks after what is queued.
                let Link { conn, senders, .. } = link;
                drop(conn);
                senders
            })
            .collect();
        let all = async {
            for s in senders {
                let _ = s.await;
            }
        };
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::debug!("some peers did not acknowledge the last messages in time");
        }
    }

    /// Drops every connection.
    pub fn close(&self) {
        for (_, l) in lock(&self.links).drain() {
            if let Some(Ok(c)) = l.conn.borrow().as_ref() {
                c.close();
            }
        }
        self.transport.close();
    }
}

#[cfg(test)]
#[path = "peers_tests.rs"]
mod tests;

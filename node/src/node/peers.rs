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

use bytes::Bytes;
use peertree::relay::{JobId, Msg, Routed};
use tokio::sync::{mpsc, watch};

use crate::net::{Conn, NetError, StreamKind, Transport};

/// Where incoming messages go.
pub trait Router: Send + Sync + 'static {
    /// A message for `job` from the peer whose certificate names `from_host`. Returns the
    /// work still running for it (a chunk being verified and stored), which the stream's
    /// reader waits for before it delivers the stream's next frame ([`InOrder`]).
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed) -> Option<Pending>;
    /// `host` could not be reached at all.
    fn unreachable(&self, host: &str);
}

/// Work a [`Router`] still does for a delivered message.
pub type Pending = tokio::task::JoinHandle<()>;

/// One stream's delivered messages, taken in the order they came with at most one still
/// at work: a stream's reader reads the next frame while the work the last one started
/// (verifying and storing a chunk) runs, and delivers it only once that work is done. So
/// reading overlaps with verification, a stream's chunks reach the relay in order, and a
/// sender faster than verification is held back by QUIC flow control after one frame.
#[derive(Debug, Default)]
struct InOrder {
    working: Option<Pending>,
}

impl InOrder {
    /// Waits for the work of the message before, then delivers this one with `deliver`.
    async fn deliver(&mut self, deliver: impl FnOnce() -> Option<Pending>) {
        if let Some(w) = self.working.take() {
            // A task that panicked has reported it; the stream goes on.
            let _ = w.await;
        }
        self.working = deliver();
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
pub fn chunk_head(job: JobId, chunk: u32, demand: bool, len: usize) -> Vec<u8> {
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
    rt: tokio::runtime::Handle,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        Arc::new(Self {
            transport,
            links: Mutex::new(HashMap::new()),
            heard: Mutex::new(HashMap::new()),
            router: Mutex::new(None),
            rt: tokio::runtime::Handle::current(),
        })
    }

    /// Sets who receives incoming messages.
    pub fn set_router(&self, router: Weak<dyn Router>) {
        *lock(&self.router) = Some(router);
    }

    fn router(&self) -> Option<Arc<dyn Router>> {
        lock(&self.router).as_ref().and_then(Weak::upgrade)
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Accepts incoming connections until the transport closes.
    pub async fn accept_loop(self: Arc<Self>) {
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
    pub fn heard_from(&self, host: &str) -> u64 {
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
        let weak_router = lock(&self.router).clone();
        self.rt.spawn(async move {
            let host = conn.peer_host().to_string();
            loop {
                let (_kind, mut rx) = match conn.accept_stream().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(peer = %host, error = %e, "connection ended");
                        return;
                    }
                };
                let router = weak_router.clone();
                let host = host.clone();
                tokio::spawn(async move {
                    let mut in_order = InOrder::default();
                    loop {
                        match rx.recv().await {
                            Ok(Some(bytes)) => match unframe(bytes.into()) {
                                Ok((job, msg)) => {
                                    // The router is upgraded only to deliver: a stream
                                    // waiting for work must not keep the daemon alive.
                                    in_order
                                        .deliver(|| {
                                            router
                                                .as_ref()
                                                .and_then(Weak::upgrade)
                                                .and_then(|r| r.deliver(&host, job, msg))
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
                        r.unreachable(&host);
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

    /// Queues a control or demand frame for `host` made of `head` then `body` (a chunk's
    /// head and its shared stored bytes), without joining them.
    pub fn send_parts(
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
    pub fn link_count(&self) -> usize {
        lock(&self.links).len()
    }

    /// Forgets the links to `host` (a peer declared dead): the next message to it opens a
    /// fresh connection. A crashed and restarted peer never answers on the old one, and
    /// QUIC would only notice at its idle timeout.
    pub fn forget(&self, host: &str) {
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
    pub fn disconnect(&self, host: &str) {
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
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use std::time::Duration;

    /// A router whose work for each chunk waits for the test to release it, and which
    /// counts the chunks at work at once.
    struct Gated {
        order: Mutex<Vec<u32>>,
        delivered: watch::Sender<usize>,
        gate: Arc<tokio::sync::Semaphore>,
        at_work: Arc<AtomicUsize>,
        most_at_work: AtomicUsize,
    }

    impl Gated {
        fn new() -> Self {
            Self {
                order: Mutex::new(Vec::new()),
                delivered: watch::channel(0).0,
                gate: Arc::new(tokio::sync::Semaphore::new(0)),
                at_work: Arc::new(AtomicUsize::new(0)),
                most_at_work: AtomicUsize::new(0),
            }
        }

        /// Waits until `n` chunks have been delivered.
        async fn delivered(&self, n: usize) {
            let mut rx = self.delivered.subscribe();
            rx.wait_for(|&d| d >= n).await.expect("router alive");
        }

        /// [`Gated::delivered`], failing after 30 s instead of hanging.
        async fn delivered_soon(&self, n: usize) {
            tokio::time::timeout(Duration::from_secs(30), self.delivered(n))
                .await
                .unwrap_or_else(|_| panic!("chunk {} never delivered", n - 1));
        }
    }

    impl Router for Gated {
        fn deliver(&self, _from_host: &str, _job: JobId, msg: Routed) -> Option<Pending> {
            let Routed::Chunk { chunk, .. } = msg else {
                return None;
            };
            lock(&self.order).push(chunk);
            let now = self.at_work.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_work.fetch_max(now, Ordering::SeqCst);
            self.delivered.send_modify(|d| *d += 1);
            let (gate, at_work) = (self.gate.clone(), self.at_work.clone());
            Some(tokio::spawn(async move {
                gate.acquire().await.expect("gate open").forget();
                at_work.fetch_sub(1, Ordering::SeqCst);
            }))
        }

        fn unreachable(&self, _host: &str) {}
    }

    /// Over real QUIC between two `Peers`: a stream's chunks reach the router in the order
    /// they were sent, and the next one only once the work the last one started is done,
    /// although it has long arrived. (One `InOrder` per frame instead of per stream would
    /// deliver chunk 1 while chunk 0 is at work.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streams_chunks_are_delivered_in_order_one_at_work_over_quic() {
        let dir = tempfile::tempdir().expect("tempdir");
        crate::net::make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()])
            .expect("make_cluster");
        let identity = |h| crate::net::Identity::load(dir.path(), h).expect("identity");
        let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
        let a = Peers::new(Transport::bind(local, &identity("a")).expect("bind a"));
        let b = Peers::new(Transport::bind(local, &identity("b")).expect("bind b"));
        let router = Arc::new(Gated::new());
        let as_router: Arc<dyn Router> = router.clone();
        b.set_router(Arc::downgrade(&as_router));
        tokio::spawn(b.clone().accept_loop());
        let addr = b.transport().local_addr().to_string();
        for chunk in 0..3u32 {
            let data = Bytes::from(vec![chunk as u8; 100_000]);
            let head = chunk_head(JobId(7), chunk, false, data.len());
            a.send_parts("b", &addr, StreamKind::Control, head, data);
        }

        router.delivered_soon(1).await;
        let early = tokio::time::timeout(Duration::from_millis(500), router.delivered(2)).await;
        assert!(
            early.is_err(),
            "chunk 1 was delivered while chunk 0 was at work"
        );
        for n in 2..=3 {
            router.gate.add_permits(1);
            router.delivered_soon(n).await;
        }
        router.gate.add_permits(1);
        assert_eq!(*lock(&router.order), [0, 1, 2]);
        assert_eq!(router.most_at_work.load(Ordering::SeqCst), 1);
    }

    /// A stream hands on its next message without waiting for the work the one before
    /// started (its reader reads on meanwhile), but delivers it only once that work is
    /// done: chunks reach the relay in order, with one at work per stream.
    #[tokio::test]
    async fn a_streams_next_message_waits_for_the_work_of_the_one_before_and_no_longer() {
        let log = Arc::new(Mutex::new(Vec::<&str>::new()));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let mut in_order = InOrder::default();
        /// Polls `f` once.
        async fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
            let mut f = Some(f);
            std::future::poll_fn(|cx| Poll::Ready(f.take().expect("polled once").poll(cx))).await
        }
        {
            let l = log.clone();
            let first = in_order.deliver(|| {
                lock(&l).push("deliver 1");
                Some(tokio::spawn(async move {
                    let _ = released.await;
                    lock(&l).push("work of 1 done");
                }))
            });
            tokio::pin!(first);
            assert!(
                poll_once(first).await.is_ready(),
                "the reader waits for 1's work before reading on"
            );
        }
        assert_eq!(*lock(&log), ["deliver 1"]);

        {
            let l = log.clone();
            let second = in_order.deliver(|| {
                lock(&l).push("deliver 2");
                None
            });
            tokio::pin!(second);
            assert!(
                poll_once(second.as_mut()).await.is_pending(),
                "2 is delivered before 1's work is done"
            );
            assert_eq!(*lock(&log), ["deliver 1"]);

            release.send(()).expect("1's work waits");
            second.await;
        }
        assert_eq!(*lock(&log), ["deliver 1", "work of 1 done", "deliver 2"]);
        assert!(in_order.working.is_none(), "2 started no work");
    }

    /// A chunk sent as a head and shared stored bytes is the frame of its message, and
    /// arrives as a slice of the received frame: its bytes are copied by neither end.
    #[test]
    fn a_chunk_frame_is_sent_in_parts_and_unframed_without_a_copy() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let whole = frame(
            JobId(5),
            &Msg::Chunk {
                chunk: 9,
                demand: true,
                data: data.clone(),
            },
        );
        let mut parts = chunk_head(JobId(5), 9, true, data.len());
        parts.extend_from_slice(&data);
        assert_eq!(parts, whole);
        let received = Bytes::from(whole);
        let (job, routed) = unframe(received.clone()).expect("a valid frame");
        assert_eq!(job, JobId(5));
        let Routed::Chunk {
            chunk,
            demand,
            data: got,
        } = routed
        else {
            panic!("not a chunk: {routed:?}")
        };
        assert_eq!((chunk, demand), (9, true));
        assert_eq!(got[..], data[..]);
        assert_eq!(
            got.as_ptr(),
            received[received.len() - data.len()..].as_ptr()
        );
        // Other messages decode as before; a truncated chunk frame is an error.
        let (_, ping) = unframe(frame(JobId(5), &Msg::Ping).into()).expect("valid");
        assert_eq!(ping, Routed::Relay(peertree::relay::RelayMsg::Ping));
        assert!(unframe(received.slice(..received.len() - 1)).is_err());
    }

    /// A router that takes every message and does nothing.
    struct Sink;

    impl Router for Sink {
        fn deliver(&self, _from_host: &str, _job: JobId, _msg: Routed) -> Option<Pending> {
            None
        }
        fn unreachable(&self, _host: &str) {}
    }

    /// Polls `f` until it holds, for at most 10 s.
    async fn soon(what: &str, f: impl Fn() -> bool) {
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(tokio::time::Instant::now() < until, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Over real QUIC: what a peer's QUIC stack sends back (here only acknowledgements of
    /// our frames: it sends no message) is counted as heard from it, and the count never
    /// goes back, also once the connection is gone; afterwards it stands still.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acknowledgements_count_as_heard_and_the_count_outlives_the_connection() {
        let dir = tempfile::tempdir().expect("tempdir");
        crate::net::make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()])
            .expect("make_cluster");
        let identity = |h| crate::net::Identity::load(dir.path(), h).expect("identity");
        let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
        let a = Peers::new(Transport::bind(local, &identity("a")).expect("bind a"));
        let b = Peers::new(Transport::bind(local, &identity("b")).expect("bind b"));
        let sink: Arc<dyn Router> = Arc::new(Sink);
        b.set_router(Arc::downgrade(&sink));
        tokio::spawn(b.clone().accept_loop());
        let addr = b.transport().local_addr().to_string();
        assert_eq!(a.heard_from("b"), 0, "nothing before a connection");
        a.send("b", &addr, StreamKind::Control, frame(JobId(1), &Msg::Ping));
        soon("b's acknowledgements counted", || a.heard_from("b") > 0).await;
        let before = a.heard_from("b");
        for _ in 0..5 {
            a.send("b", &addr, StreamKind::Control, frame(JobId(1), &Msg::Ping));
        }
        soon("more acknowledgements", || a.heard_from("b") > before).await;
        let conn = a.conn("b", &addr).await.expect("connected");
        b.close();
        soon("the connection closed", || conn.is_closed()).await;
        let last = a.heard_from("b");
        assert!(last > before);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(a.heard_from("b"), last, "nothing from a closed peer");
    }

    #[test]
    fn two_pushes_from_one_login_node_are_two_links() {
        let a = LinkKey::of("login", "10.0.0.1:40001");
        let b = LinkKey::of("login", "login:40002");
        assert_ne!(a, b);
        assert_eq!(a.port, 40001);
        assert_eq!(LinkKey::of("n1", "[fe80::1]:7411").port, 7411);
        assert_eq!(LinkKey::of("n1", "n1").port, 0);
    }
}

//! Tests of the connection manager: delivery order over real QUIC, frames, the signs of
//! life, and frames that wait for another link.

use super::*;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

/// A router whose work for each chunk waits until the test opens that chunk's gate,
/// counts the chunks at work at once, and tells (in the stream's order) which it took.
struct Gated {
    order: Mutex<Vec<u32>>,
    told: Arc<Mutex<Vec<u32>>>,
    delivered: watch::Sender<usize>,
    gates: Vec<Arc<tokio::sync::Semaphore>>,
    at_work: Arc<AtomicUsize>,
    most_at_work: AtomicUsize,
}

impl Gated {
    fn new(chunks: usize) -> Self {
        Self {
            order: Mutex::new(Vec::new()),
            told: Arc::new(Mutex::new(Vec::new())),
            delivered: watch::channel(0).0,
            gates: (0..chunks)
                .map(|_| Arc::new(tokio::sync::Semaphore::new(0)))
                .collect(),
            at_work: Arc::new(AtomicUsize::new(0)),
            most_at_work: AtomicUsize::new(0),
        }
    }

    /// Lets chunk `n`'s work finish.
    fn open(&self, n: usize) {
        self.gates[n].add_permits(1);
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

    /// Waits until the chunks told are `want`, failing after 10 s.
    async fn told_soon(&self, want: &[u32]) {
        soon("the chunks told", || lock(&self.told)[..] == *want).await;
    }
}

impl Router for Gated {
    fn deliver(
        &self,
        _from_host: &str,
        _job: JobId,
        msg: Routed,
        order: Ticket,
    ) -> Option<Pending> {
        let Routed::Chunk { chunk, .. } = msg else {
            return None;
        };
        lock(&self.order).push(chunk.0);
        let now = self.at_work.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_work.fetch_max(now, Ordering::SeqCst);
        self.delivered.send_modify(|d| *d += 1);
        let (gate, at_work) = (self.gates[chunk.0 as usize].clone(), self.at_work.clone());
        let told = self.told.clone();
        Some(tokio::spawn(async move {
            gate.acquire().await.expect("gate open").forget();
            at_work.fetch_sub(1, Ordering::SeqCst);
            order.release(move || lock(&told).push(chunk.0));
        }))
    }

    fn unreachable(&self, _host: &str, _why: &str) {}
}

/// Over real QUIC between two `Peers`: a stream's chunks reach the router in the order
/// they were sent, up to [`chunks_at_work`] of them at work at once and the next one only
/// once the oldest is done, although it has long arrived; and works that finish out of
/// order are told in the stream's order. (One `InOrder` per frame instead of per stream
/// would deliver every chunk at once; a reader without places would tell them as they
/// finish.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_chunks_are_at_work_in_parallel_and_told_in_order_over_quic() {
    let most = chunks_at_work();
    let chunks = most + 1;
    let dir = tempfile::tempdir().expect("tempdir");
    crate::net::make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()]).expect("make_cluster");
    let identity = |h| crate::net::Identity::load(dir.path(), h).expect("identity");
    let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    let a = Peers::new(Transport::bind(local, &identity("a")).expect("bind a"));
    let b = Peers::new(Transport::bind(local, &identity("b")).expect("bind b"));
    let router = Arc::new(Gated::new(chunks));
    let as_router: Arc<dyn Router> = router.clone();
    b.set_router(Arc::downgrade(&as_router));
    tokio::spawn(b.clone().accept_loop());
    let addr = b.transport().local_addr().to_string();
    for chunk in 0..chunks as u32 {
        let data = Bytes::from(vec![chunk as u8; 100_000]);
        let head = chunk_head(JobId(7), ChunkNo(chunk), false, data.len());
        a.send_parts("b", &addr, StreamKind::Control, head, data);
    }

    router.delivered_soon(most).await;
    let early = tokio::time::timeout(Duration::from_millis(500), router.delivered(most + 1)).await;
    assert!(
        early.is_err(),
        "chunk {most} was delivered while {most} chunks were at work"
    );
    // The second chunk's work finishes first: nobody is told before the first's does.
    router.open(1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(lock(&router.told).is_empty(), "chunk 1 told before chunk 0");
    router.open(0);
    router.told_soon(&[0, 1]).await;
    router.delivered_soon(most + 1).await;
    for n in 2..chunks {
        router.open(n);
    }
    router
        .told_soon(&(0..chunks as u32).collect::<Vec<_>>())
        .await;
    assert_eq!(*lock(&router.order), (0..chunks as u32).collect::<Vec<_>>());
    assert_eq!(router.most_at_work.load(Ordering::SeqCst), most);
}

/// Polls `f` once.
async fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut f = Some(f);
    std::future::poll_fn(|cx| Poll::Ready(f.take().expect("polled once").poll(cx))).await
}

/// A stream hands on its next chunk without waiting for the work the one before started
/// while fewer than `most` are at work, and a message that is no chunk (a `Start`) only
/// once every work before it is done; the message after that waits for its work.
#[tokio::test]
async fn a_message_that_is_no_chunk_waits_for_every_work_before_it_and_the_next_for_it() {
    let log = Arc::new(Mutex::new(Vec::<&str>::new()));
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let mut in_order = InOrder::new(2);
    {
        let l = log.clone();
        let first = in_order.deliver(true, |_| {
            lock(&l).push("chunk 1");
            Some(tokio::spawn(async move {
                let _ = released.await;
                lock(&l).push("work of 1 done");
            }))
        });
        tokio::pin!(first);
        assert!(poll_once(first).await.is_ready(), "the reader reads on");
    }
    {
        let l = log.clone();
        let second = in_order.deliver(true, |_| {
            lock(&l).push("chunk 2");
            None
        });
        tokio::pin!(second);
        assert!(
            poll_once(second).await.is_ready(),
            "chunk 2 waits for chunk 1's work"
        );
    }
    {
        let l = log.clone();
        let start = in_order.deliver(false, |_| {
            lock(&l).push("start");
            Some(tokio::spawn(async {}))
        });
        tokio::pin!(start);
        assert!(
            poll_once(start.as_mut()).await.is_pending(),
            "a start is delivered before chunk 1's work is done"
        );
        assert_eq!(*lock(&log), ["chunk 1", "chunk 2"]);
        release.send(()).expect("1's work waits");
        start.await;
    }
    assert_eq!(
        *lock(&log),
        ["chunk 1", "chunk 2", "work of 1 done", "start"]
    );
    assert_eq!(in_order.working.len(), 1, "the start's work");
    in_order.deliver(true, |_| None).await;
    assert!(
        in_order.working.is_empty(),
        "chunk 3 waited for the start's work"
    );
}

/// A chunk sent as a head and shared stored bytes is the frame of its message, and
/// arrives as a slice of the received frame: its bytes are copied by neither end.
#[test]
fn a_chunk_frame_is_sent_in_parts_and_unframed_without_a_copy() {
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let whole = frame(
        JobId(5),
        &Msg::Chunk {
            chunk: ChunkNo(9),
            demand: true,
            data: data.clone(),
        },
    );
    let mut parts = chunk_head(JobId(5), ChunkNo(9), true, data.len());
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
    assert_eq!((chunk, demand), (ChunkNo(9), true));
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
    fn deliver(&self, _from_host: &str, _job: JobId, _msg: Routed, _: Ticket) -> Option<Pending> {
        None
    }
    fn unreachable(&self, _host: &str, _why: &str) {}
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
    crate::net::make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()]).expect("make_cluster");
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

/// A router that counts the messages it is given.
struct Count(watch::Sender<usize>);

impl Router for Count {
    fn deliver(&self, _from_host: &str, _job: JobId, _msg: Routed, _: Ticket) -> Option<Pending> {
        self.0.send_modify(|n| *n += 1);
        None
    }
    fn unreachable(&self, _host: &str, _why: &str) {}
}

/// Over real QUIC: a frame sent after the link to another peer (a grandchild's
/// `Prepare` after its parent's) is not dialled while that peer's handshake is pending,
/// so the handshakes whose `Start`s wait for them have this node's CPU to themselves,
/// and it goes as soon as that link is up. (Sent at once, the grandchild had it while
/// its parent did not answer yet: a push's root shared its CPU over 16 handshakes, its
/// 4 children connected after 25-35 ms in the lab's scale model instead of 2-8 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_sent_after_a_link_waits_until_that_link_is_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts = ["a", "b", "c"].map(String::from);
    crate::net::make_cluster(dir.path(), &hosts).expect("make_cluster");
    let identity = |h| crate::net::Identity::load(dir.path(), h).expect("identity");
    let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    let a = Peers::new(Transport::bind(local, &identity("a")).expect("bind a"));
    let c = Peers::new(Transport::bind(local, &identity("c")).expect("bind c"));
    let got = watch::channel(0usize).0;
    let router: Arc<dyn Router> = Arc::new(Count(got.clone()));
    c.set_router(Arc::downgrade(&router));
    tokio::spawn(c.clone().accept_loop());
    let c_addr = c.transport().local_addr().to_string();
    // b's port answers nothing yet: its handshake stays pending.
    let silent = std::net::UdpSocket::bind(local).expect("bind b's port");
    let b_sock = silent.local_addr().expect("b's address");
    let b_addr = b_sock.to_string();
    let ping = || frame(JobId(3), &Msg::Ping);
    a.send("b", &b_addr, StreamKind::Control, ping());
    a.send_after(("b", &b_addr), "c", &c_addr, ping());

    let mut seen = got.subscribe();
    let early = tokio::time::timeout(Duration::from_millis(500), seen.wait_for(|&n| n > 0));
    assert!(
        early.await.is_err(),
        "c was sent its frame before b answered"
    );
    drop(silent);
    let b = Peers::new(Transport::bind(b_sock, &identity("b")).expect("bind b"));
    let sink: Arc<dyn Router> = Arc::new(Sink);
    b.set_router(Arc::downgrade(&sink));
    tokio::spawn(b.clone().accept_loop());
    a.conn("b", &b_addr).await.expect("b answers now");
    tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|&n| n > 0))
        .await
        .expect("c gets its frame once b's link is up")
        .expect("router alive");
}

/// Over real QUIC: [`Peers::settled`] returns only once every link it names is up, or
/// at its bound. A node's mount waits on it for the links to its children, which it
/// shared its CPU with in the lab's scale model (a proxy's Start to its last child
/// connected: a median 85 ms with the mount made at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_waits_for_every_link_up_to_its_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts = ["a", "b", "c"].map(String::from);
    crate::net::make_cluster(dir.path(), &hosts).expect("make_cluster");
    let identity = |h| crate::net::Identity::load(dir.path(), h).expect("identity");
    let local: SocketAddr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    let a = Peers::new(Transport::bind(local, &identity("a")).expect("bind a"));
    let c = Peers::new(Transport::bind(local, &identity("c")).expect("bind c"));
    let sink: Arc<dyn Router> = Arc::new(Sink);
    c.set_router(Arc::downgrade(&sink));
    tokio::spawn(c.clone().accept_loop());
    let silent = std::net::UdpSocket::bind(local).expect("bind b's port");
    let b_sock = silent.local_addr().expect("b's address");
    let links = [
        ("c".to_string(), c.transport().local_addr().to_string()),
        ("b".to_string(), b_sock.to_string()),
    ];
    // b answers nothing: the bound ends the wait, with c's link up and b's pending.
    a.settled(&links, Duration::from_millis(300)).await;
    assert!(a.conn("c", &links[0].1).await.is_ok());
    let waiting = a.clone();
    let all = links.clone();
    let mut settled = tokio::spawn(async move {
        waiting.settled(&all, Duration::from_secs(30)).await;
    });
    let early = tokio::time::timeout(Duration::from_millis(300), &mut settled).await;
    assert!(early.is_err(), "settled while b's link was pending");
    drop(silent);
    let b = Peers::new(Transport::bind(b_sock, &identity("b")).expect("bind b"));
    b.set_router(Arc::downgrade(&sink));
    tokio::spawn(b.clone().accept_loop());
    tokio::time::timeout(Duration::from_secs(10), settled)
        .await
        .expect("settled once b's link is up")
        .expect("task");
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

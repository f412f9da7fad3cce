//! QUIC transport with mutual TLS: frames arrive intact and in order on every stream kind,
//! certificates from another cluster, expired, revoked or missing ones are refused in both
//! roles, peer names come from certificates, oversized frames are refused, and demand traffic
//! overtakes bulk.
//!
//! Everything runs on 127.0.0.1 with port 0, and nothing waits for time to pass: expiry is
//! reached by moving the clock the nodes' TLS configurations read. Where a test needs a peer
//! that our own API refuses to build (a client presenting a foreign certificate while trusting
//! our CA, or one writing a bogus frame header), it drives quinn and rustls directly.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use peertree::relay::MAX_MESSAGE;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use teesfs_node::net::{Conn, Identity, NetError, StreamKind, Transport, make_cluster};
use tokio::sync::{mpsc, oneshot};

fn localhost() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

/// A cluster directory with credentials for `hosts`.
fn cluster(hosts: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    make_cluster(dir.path(), &hosts).expect("make_cluster");
    dir
}

fn bind(dir: &Path, host: &str) -> Transport {
    let id = Identity::load(dir, host).expect("load identity");
    Transport::bind(localhost(), &id).expect("bind")
}

/// Fails the test instead of hanging it.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// `client` connects to `server`; returns both ends.
async fn link(client: &Transport, server: &Transport, server_host: &str) -> (Conn, Conn) {
    let (out, inc) = within("connect", async {
        tokio::join!(
            client.connect(server.local_addr(), server_host),
            server.accept()
        )
    })
    .await;
    (out.expect("connect"), inc.expect("accept"))
}

/// Recognisable bytes, different per kind and frame, so swaps and shifts are caught.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 16) as u8)
        .collect()
}

fn frames_for(kind: StreamKind) -> Vec<Vec<u8>> {
    let seed = kind as u8 * 50;
    vec![
        Vec::new(),
        pattern(13, seed),
        pattern(4 << 20, seed + 1),
        Vec::new(),
        pattern(1, seed + 2),
    ]
}

/// Sends every kind's frames on `from` at once and checks they arrive at `to` intact, in
/// order, on a stream of the right kind, followed by a clean end.
async fn exchange(from: &Conn, to: &Conn) {
    let senders = StreamKind::ALL.map(|kind| {
        let conn = from.clone();
        tokio::spawn(async move {
            let mut tx = conn.open(kind).await.expect("open");
            assert_eq!(tx.kind(), kind);
            for frame in frames_for(kind) {
                tx.send(&frame).await.expect("send");
            }
            tx.finish().await.expect("finish");
        })
    });
    let mut seen = Vec::new();
    for _ in StreamKind::ALL {
        let (kind, mut rx) = to.accept_stream().await.expect("accept_stream");
        assert_eq!(rx.kind(), kind);
        for (i, want) in frames_for(kind).into_iter().enumerate() {
            let got = rx
                .recv()
                .await
                .expect("recv")
                .expect("a frame, not the end");
            assert!(
                got == want,
                "{kind} frame {i}: {} bytes, want {}",
                got.len(),
                want.len()
            );
        }
        assert!(
            rx.recv().await.expect("recv").is_none(),
            "{kind}: clean end after the frames"
        );
        seen.push(kind);
    }
    for sender in senders {
        sender.await.expect("sender task");
    }
    seen.sort_by_key(|kind| *kind as u8);
    assert_eq!(seen, StreamKind::ALL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_every_size_and_kind_arrive_in_order_both_ways() {
    let dir = cluster(&["a", "b"]);
    let a = bind(dir.path(), "a");
    let b = bind(dir.path(), "b");

    let (a_to_b, b_from_a) = link(&a, &b, "b").await;
    assert_eq!(a_to_b.peer_host(), "b");
    assert_eq!(b_from_a.peer_host(), "a");
    assert_eq!(a_to_b.remote_addr(), b.local_addr());

    let (b_to_a, a_from_b) = link(&b, &a, "a").await;
    assert_eq!(b_to_a.peer_host(), "a");
    assert_eq!(a_from_b.peer_host(), "b");

    within("a -> b over a's connection", exchange(&a_to_b, &b_from_a)).await;
    within("b -> a over a's connection", exchange(&b_from_a, &a_to_b)).await;
    within("b -> a over b's connection", exchange(&b_to_a, &a_from_b)).await;

    // Closing is seen by the other side with a reason.
    a_to_b.close();
    let reason = within("closed", b_from_a.closed()).await;
    assert!(reason.contains("closed"), "{reason}");
    a.close();
    assert!(within("accept after close", a.accept()).await.is_none());
}

/// A bare QUIC client with hand-picked credentials: what an intruder, or a node of another
/// cluster that somehow trusts our CA, would run.
fn raw_client(trusted_ca: &Path, cert: &Path, key: &Path) -> quinn::Endpoint {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(trusted_ca).expect("ca pem"))
        .expect("add ca");
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_file(cert).expect("cert pem")],
            PrivateKeyDer::from_pem_file(key).expect("key pem"),
        )
        .expect("client auth");
    tls.alpn_protocols = vec![teesfs_node::net::tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut endpoint = quinn::Endpoint::client(localhost()).expect("client endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_from_another_cluster_are_refused_as_client_and_as_server() {
    // Same host names in both clusters: only the CA differs.
    let ours = cluster(&["a", "b"]);
    let theirs = cluster(&["a", "b"]);
    let b = bind(ours.path(), "b");
    let foreign_b = bind(theirs.path(), "b");
    let foreign_a = bind(theirs.path(), "a");

    // As client: our b dials their b and refuses its certificate.
    let err = within("connect to foreign", b.connect(foreign_b.local_addr(), "b"))
        .await
        .expect_err("foreign server accepted");
    let msg = err.to_string();
    assert!(matches!(err, NetError::PeerRefused(_)), "{msg}");
    assert!(
        msg.contains("we refused the peer") && msg.contains("UnknownIssuer"),
        "{msg}"
    );

    // Their a dials our b: their a refuses our b's certificate first.
    let err = within("foreign connects", foreign_a.connect(b.local_addr(), "b"))
        .await
        .expect_err("foreign client got in");
    assert!(matches!(err, NetError::PeerRefused(_)), "{err}");

    // As server: a client that trusts our CA but presents their a's certificate completes its
    // half of the handshake, then our b refuses it and it is told why.
    let rogue = raw_client(
        &ours.path().join("ca.crt"),
        &theirs.path().join("a.crt"),
        &theirs.path().join("a.key"),
    );
    let reason = within("rogue refused", async {
        match rogue.connect(b.local_addr(), "b").expect("start").await {
            Ok(conn) => conn.closed().await,
            Err(e) => e,
        }
    })
    .await;
    assert!(
        matches!(&reason, quinn::ConnectionError::ConnectionClosed(close)
            if (0x100..0x200).contains(&u64::from(close.error_code))),
        "rogue client must see a TLS alert, got: {reason}"
    );
    let reason = reason.to_string();
    eprintln!("rogue client told: {reason}");
    assert!(
        reason.contains("UnknownIssuer") || reason.contains("unknown CA"),
        "{reason}"
    );

    // None of that reached b's accept queue, and b still accepts its own cluster's nodes.
    let a = bind(ours.path(), "a");
    let (_, from_a) = link(&a, &b, "b").await;
    assert_eq!(from_a.peer_host(), "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_host_comes_from_the_certificate_not_from_claims() {
    let dir = cluster(&["a", "b", "c"]);
    let b = bind(dir.path(), "b");

    // A node with a's certificate that calls itself b.
    let mut liar = Identity::load(dir.path(), "a").expect("load a");
    liar.host = "b".to_owned();
    let liar = Transport::bind(localhost(), &liar).expect("bind liar");
    let (to_b, at_b) = link(&liar, &b, "b").await;
    assert_eq!(
        at_b.peer_host(),
        "a",
        "server must name the client after its certificate"
    );
    assert_eq!(to_b.peer_host(), "b");

    // The same liar as a server: dialling it as "b" fails, dialling it as "a" names it "a".
    let c = bind(dir.path(), "c");
    let err = within("dial liar as b", c.connect(liar.local_addr(), "b"))
        .await
        .expect_err("liar passed as b");
    assert!(matches!(err, NetError::PeerRefused(_)), "{err}");
    assert!(err.to_string().contains("not valid for name"), "{err}");
    let (to_liar, _) = link(&c, &liar, "a").await;
    assert_eq!(to_liar.peer_host(), "a");

    // A real node dialled under another node's name is refused too.
    let err = within("dial b as c", c.connect(b.local_addr(), "c"))
        .await
        .expect_err("b's certificate accepted as c");
    assert!(matches!(err, NetError::PeerRefused(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_length_is_refused_without_reading_the_body() {
    let dir = cluster(&["a", "b"]);
    let b = bind(dir.path(), "b");
    let raw = raw_client(
        &dir.path().join("ca.crt"),
        &dir.path().join("a.crt"),
        &dir.path().join("a.key"),
    );

    let accepted = tokio::spawn({
        let b = b.clone();
        async move { b.accept().await.expect("accept") }
    });
    let conn = within("raw connect", async {
        let conn = raw
            .connect(b.local_addr(), "b")
            .expect("start")
            .await
            .expect("handshake");
        // The server's first stream is its hello (tag 0): proof that it accepted us.
        let mut hello = conn.accept_uni().await.expect("hello stream");
        let mut tag = [0xffu8; 1];
        hello.read_exact(&mut tag).await.expect("hello tag");
        assert_eq!(tag, [0]);
        conn
    })
    .await;
    let at_b = within("accept", accepted).await.expect("accept task");
    assert_eq!(at_b.peer_host(), "a");

    // A bulk stream (tag 3) announcing MAX_MESSAGE + 1 bytes, whose body never comes: a
    // receiver that tried to allocate or read it would hang rather than fail.
    let mut stream = conn.open_uni().await.expect("open");
    let announced = u32::try_from(MAX_MESSAGE + 1).expect("limit below 4 GiB");
    stream.write_all(&[3]).await.expect("tag");
    stream
        .write_all(&announced.to_be_bytes())
        .await
        .expect("prefix");

    let (kind, mut rx) = within("accept_stream", at_b.accept_stream())
        .await
        .expect("stream");
    assert_eq!(kind, StreamKind::Bulk);
    let err = within("refusal", rx.recv())
        .await
        .expect_err("oversized frame accepted");
    assert!(
        matches!(err, NetError::FrameTooLarge(n) if n == MAX_MESSAGE + 1),
        "{err}"
    );
    assert!(err.to_string().contains("exceeds"), "{err}");

    // The sender is told to stop; the connection itself stays usable.
    let stopped = within("stop", stream.stopped()).await.expect("stopped");
    assert!(stopped.is_some(), "receiver should stop the stream");
    let mut ok = at_b.open(StreamKind::Control).await.expect("open back");
    ok.send(b"still here").await.expect("send");
    let mut back = within("accept back", conn.accept_uni()).await.expect("uni");
    let mut buf = [0u8; 1 + 4 + 10];
    within("read back", back.read_exact(&mut buf))
        .await
        .expect("read");
    assert_eq!(&buf[5..], b"still here");

    // The sending side refuses oversized frames too (checked before anything is written).
    let huge = vec![0u8; MAX_MESSAGE + 1];
    let err = ok.send(&huge).await.expect_err("oversized send");
    assert!(matches!(err, NetError::FrameTooLarge(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_frame_overtakes_queued_bulk() {
    const BULK_FRAMES: usize = 64; // 1 MiB each
    let dir = cluster(&["a", "b"]);
    let a = bind(dir.path(), "a");
    let b = bind(dir.path(), "b");
    let (to_b, at_b) = link(&a, &b, "b").await;

    // Receiver: reads every stream to its end and reports which finished when.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(StreamKind, u64)>();
    let (first_bulk_tx, first_bulk_rx) = oneshot::channel::<()>();
    let bulk_bytes = Arc::new(AtomicU64::new(0));
    let receiver = tokio::spawn({
        let bulk_bytes = bulk_bytes.clone();
        async move {
            let mut first_bulk_tx = Some(first_bulk_tx);
            let mut readers = Vec::new();
            for _ in 0..2 {
                let (kind, mut rx) = at_b.accept_stream().await.expect("accept_stream");
                let done_tx = done_tx.clone();
                let bulk_bytes = bulk_bytes.clone();
                let mut first = if kind == StreamKind::Bulk {
                    first_bulk_tx.take()
                } else {
                    None
                };
                readers.push(tokio::spawn(async move {
                    while let Some(frame) = rx.recv().await.expect("recv") {
                        if kind == StreamKind::Bulk {
                            bulk_bytes.fetch_add(frame.len() as u64, Ordering::SeqCst);
                            if let Some(tx) = first.take() {
                                let _ = tx.send(());
                            }
                        }
                    }
                    let _ = done_tx.send((kind, bulk_bytes.load(Ordering::SeqCst)));
                }));
            }
            for reader in readers {
                reader.await.expect("reader");
            }
        }
    });

    // Sender: 64 MiB of bulk queued as fast as flow control allows ...
    let bulk = tokio::spawn({
        let to_b = to_b.clone();
        async move {
            let mut tx = to_b.open(StreamKind::Bulk).await.expect("open bulk");
            let chunk = pattern(1 << 20, 7);
            for _ in 0..BULK_FRAMES {
                tx.send(&chunk).await.expect("send bulk");
            }
            tx.finish().await.expect("finish bulk");
        }
    });
    // ... and, once bulk is flowing, one demand frame on the same connection.
    within("first bulk frame", first_bulk_rx)
        .await
        .expect("bulk started");
    let mut demand = to_b.open(StreamKind::Demand).await.expect("open demand");
    demand.send(b"want chunk 42").await.expect("send demand");
    demand.finish().await.expect("finish demand");

    let (first, bulk_at_demand) = within("first completion", done_rx.recv())
        .await
        .expect("event");
    let (second, _) = within("second completion", done_rx.recv())
        .await
        .expect("event");
    within("bulk sender", bulk).await.expect("bulk task");
    within("receiver", receiver).await.expect("receiver task");
    assert_eq!(
        (first, second),
        (StreamKind::Demand, StreamKind::Bulk),
        "demand must complete while bulk is still arriving"
    );
    assert!(
        bulk_at_demand < (BULK_FRAMES as u64) << 20,
        "demand arrived only after all {bulk_at_demand} bulk bytes"
    );
    eprintln!(
        "demand arrived after {} of {BULK_FRAMES} MiB of bulk",
        bulk_at_demand >> 20
    );
}

/// Connects `client` to `server` as `server_host` and expects a refusal; returns its text.
async fn refused(client: &Transport, server: &Transport, server_host: &str) -> String {
    let err = within(
        "refused connect",
        client.connect(server.local_addr(), server_host),
    )
    .await
    .expect_err("connection accepted");
    assert!(matches!(err, NetError::PeerRefused(_)), "{err}");
    err.to_string()
}

/// A clock the test sets by hand, given to identities as their TLS configurations' current
/// time so that expiry is reached by moving it, not by waiting.
#[derive(Debug)]
struct HandClock(AtomicU64);

impl HandClock {
    /// Starts at the current time.
    fn at_now() -> Arc<HandClock> {
        Arc::new(HandClock(AtomicU64::new(UnixTime::now().as_secs())))
    }

    /// Moves the clock `by` forward.
    fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_secs(), Ordering::SeqCst);
    }

    fn now(&self) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(self.0.load(Ordering::SeqCst)))
    }
}

impl rustls::time_provider::TimeProvider for HandClock {
    fn current_time(&self) -> Option<UnixTime> {
        Some(self.now())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificates_are_refused_as_client_and_as_server() {
    const VALID_FOR: Duration = Duration::from_secs(3600);
    let dir = cluster(&["a"]);
    // A node certificate valid for an hour (what `keygen --valid-days` issues, shortened).
    teesfs_node::net::make_cluster_valid_for(dir.path(), &["short".to_owned()], Some(VALID_FOR))
        .expect("short-lived certificate");
    // Both nodes read the time from one clock the test moves.
    let clock = HandClock::at_now();
    let with_clock = |host: &str| {
        let id = Identity::load(dir.path(), host).expect("valid now");
        Transport::bind(localhost(), &id.with_clock(clock.clone())).expect("bind")
    };
    let short = with_clock("short");
    let a = with_clock("a");
    let (_, from_short) = link(&short, &a, "a").await;
    assert_eq!(from_short.peer_host(), "short");
    drop(from_short);
    let (to_short, _) = link(&a, &short, "short").await;
    assert_eq!(to_short.peer_host(), "short");
    drop(to_short);

    // Twice its validity later, the certificate has certainly expired (it was issued valid
    // from an hour before now). The links above also mean session tickets would exist if
    // resumption were enabled; it is not, so the expired node cannot skip verification by
    // resuming.
    clock.advance(2 * VALID_FOR);

    // As server: a refuses to talk to the expired server.
    let why = refused(&a, &short, "short").await;
    assert!(
        why.contains("we refused the peer") && why.contains("certificate expired"),
        "{why}"
    );
    // As client: a refuses the expired client's certificate, and the client is told.
    let why = refused(&short, &a, "a").await;
    assert!(why.contains("peer refused us"), "{why}");
    // And a node cannot start with it.
    let err =
        Identity::load_at(dir.path(), "short", clock.now()).expect_err("expired identity loaded");
    assert!(err.to_string().contains("certificate expired"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_certificates_are_refused_as_client_and_as_server_until_reissued() {
    let dir = cluster(&["a", "b", "c"]);
    // b's daemon was started before the revocation and still runs with its certificate.
    let old_b = bind(dir.path(), "b");
    let serials = teesfs_node::net::revoke(dir.path(), &["b".to_owned()]).expect("revoke b");
    assert_eq!(serials.len(), 1);
    // Revoking again keeps one entry and still works.
    assert_eq!(
        teesfs_node::net::revoke(dir.path(), &["b".to_owned()]).expect("again"),
        serials
    );
    let a = bind(dir.path(), "a");

    let why = refused(&a, &old_b, "b").await;
    assert!(
        why.contains("we refused the peer") && why.contains("Revoked"),
        "{why}"
    );
    let why = refused(&old_b, &a, "a").await;
    assert!(why.contains("peer refused us"), "{why}");
    let err = Identity::load(dir.path(), "b").expect_err("revoked identity loaded");
    assert!(err.to_string().contains("Revoked"), "{err}");

    // Other nodes are unaffected.
    let c = bind(dir.path(), "c");
    let (_, from_c) = link(&c, &a, "a").await;
    assert_eq!(from_c.peer_host(), "c");

    // keygen --cluster --nodes b issues a fresh certificate, which is accepted.
    let written = make_cluster(dir.path(), &["b".to_owned()]).expect("reissue b");
    assert_eq!(written.len(), 2, "{written:?}");
    let new_b = bind(dir.path(), "b");
    let (_, from_b) = link(&new_b, &a, "a").await;
    assert_eq!(from_b.peer_host(), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused() {
    let dir = cluster(&["a"]);
    let a = bind(dir.path(), "a");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.path().join("ca.crt")).expect("ca pem"))
        .expect("add ca");
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![teesfs_node::net::tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut anonymous = quinn::Endpoint::client(localhost()).expect("client endpoint");
    anonymous.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    let reason = within("anonymous refused", async {
        match anonymous.connect(a.local_addr(), "a").expect("start").await {
            Ok(conn) => conn.closed().await,
            Err(e) => e,
        }
    })
    .await;
    assert!(
        matches!(&reason, quinn::ConnectionError::ConnectionClosed(close)
            if (0x100..0x200).contains(&u64::from(close.error_code))),
        "anonymous client must see a TLS alert, got: {reason}"
    );
    eprintln!("anonymous client told: {reason}");
    assert!(
        reason.to_string().contains("peer sent no certificates"),
        "{reason}"
    );
}

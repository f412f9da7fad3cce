//! Tests of the transport over loopback: windows, packet sizes, refusals, and what a
//! connection costs.

use super::*;
use crate::net::make_cluster;
use std::net::Ipv4Addr;

fn pair() -> (tempfile::TempDir, Identity, Identity) {
    let dir = tempfile::tempdir().expect("tempdir");
    make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()]).expect("make_cluster");
    let a = Identity::load(dir.path(), "a").expect("load a");
    let b = Identity::load(dir.path(), "b").expect("load b");
    (dir, a, b)
}

fn localhost() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

/// Two transports on loopback (kept alive by the caller) and a connection between them,
/// as the client and the server see it.
async fn connected() -> (tempfile::TempDir, [Transport; 2], Conn, Conn) {
    let (dir, a, b) = pair();
    let ta = Transport::bind(localhost(), &a).expect("bind a");
    let tb = Transport::bind(localhost(), &b).expect("bind b");
    let conn = ta.connect(tb.local_addr(), "b").await.expect("connect");
    let server = tb.accept().await.expect("accept");
    (dir, [ta, tb], conn, server)
}

/// A new connection may send a whole 1 MiB chunk frame before its first acknowledgement
/// (quinn's default window, 14,720 bytes, cost the first cold read 27-33 ms per edge).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connections_window_holds_a_whole_chunk() {
    let (_dir, _ends, conn, server) = connected().await;
    for path in [conn.path(), server.path()] {
        assert!(path.cwnd > (1 << 20) + 64, "{path:?}");
    }
}

/// On every path a stream's window holds fewer packets than quinn's assembler takes
/// before compacting (2 x 1024), and at least two 1 MiB chunk frames.
#[test]
fn a_streams_window_stays_below_quinns_compaction_and_holds_two_chunks() {
    for payload in MIN_UDP_PAYLOAD..=MAX_UDP_PAYLOAD {
        let window = stream_window(payload);
        let packets = window.div_ceil(u32::from(payload) - 64);
        assert!(packets < 2048, "payload {payload}: {packets} packets");
        assert!(
            window > 2 * (1 << 20) + 64,
            "payload {payload}: window {window}"
        );
    }
}

/// Both ends start at the path's MTU (loopback carries 64 KiB, so the cap), and a bulk
/// stream keeps it: the packets fit quinn's GSO batches, so no black hole is declared. Path MTU discovery alone left every packet at 1200 bytes, and
/// 8952-byte packets overflowed the batches (360 lost in 256 MiB, then 1200 bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_stream_runs_at_the_paths_mtu_without_loss() {
    let (_dir, _ends, conn, server) = connected().await;
    // From the start, not after path MTU discovery.
    assert_eq!(conn.path().mtu, MAX_UDP_PAYLOAD, "{:?}", conn.path());
    let frame = vec![7u8; 1 << 20];
    let send = async {
        let mut tx = conn.open(StreamKind::Bulk).await.expect("open");
        for _ in 0..32 {
            tx.send(&frame).await.expect("send");
        }
        tx.finish().await.expect("finish");
    };
    let receive = async {
        let (_, mut rx) = server.accept_stream().await.expect("stream");
        let mut got = 0;
        while let Some(f) = rx.recv().await.expect("frame") {
            got += f.len();
        }
        got
    };
    let ((), got) = tokio::join!(send, receive);
    assert_eq!(got, 32 << 20);
    for (end, path) in [("client", conn.path()), ("server", server.path())] {
        assert_eq!(path.mtu, MAX_UDP_PAYLOAD, "{end}: {path:?}");
        assert_eq!(path.black_holes, 0, "{end}: {path:?}");
    }
    assert!(
        conn.path().sent < (32 << 20) / 6_000 + 1_000,
        "{:?}",
        conn.path()
    );
    // The kernel segments quinn's batches (UDP GSO): a send carries several datagrams.
    let path = conn.path();
    eprintln!("client path: {path:?}");
    assert!(path.sends * GSO_AT_LEAST <= path.sent, "{path:?}");
}

/// A bulk stream's sends carry at least this many datagrams each on average with UDP GSO
/// (9.8 of quinn's batches of at most 10, measured on loopback); 1 without it.
const GSO_AT_LEAST: u64 = 4;

/// The receiver must refuse an announced length above the limit from the prefix alone:
/// the sender never sends the body, so a receiver that tried to read (or allocate) it
/// would hang instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_length_prefix_is_refused_before_reading_the_body() {
    let (_dir, a, b) = pair();
    let ta = Transport::bind(localhost(), &a).expect("bind a");
    let tb = Transport::bind(localhost(), &b).expect("bind b");
    let conn = ta.connect(tb.local_addr(), "b").await.expect("connect");
    let server = tb.accept().await.expect("accept");

    let mut sender = conn.open(StreamKind::Bulk).await.expect("open");
    sender.send(b"fine").await.expect("small frame");
    let huge = u32::try_from(peertree::relay::MAX_MESSAGE + 1).expect("fits u32");
    sender
        .send_unframed(&huge.to_be_bytes())
        .await
        .expect("prefix");

    let (kind, mut receiver) = server.accept_stream().await.expect("stream");
    assert_eq!(kind, StreamKind::Bulk);
    assert_eq!(
        receiver.recv().await.expect("first").as_deref(),
        Some(&b"fine"[..])
    );
    let err = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
        .await
        .expect("refused from the prefix alone, without waiting for a body")
        .expect_err("oversized");
    assert!(
        matches!(err, NetError::FrameTooLarge(n) if n == peertree::relay::MAX_MESSAGE + 1),
        "{err}"
    );

    // The same for u32::MAX, the largest a prefix can announce.
    let mut sender = conn.open(StreamKind::Demand).await.expect("open");
    sender
        .send_unframed(&u32::MAX.to_be_bytes())
        .await
        .expect("prefix");
    let (_, mut receiver) = server.accept_stream().await.expect("stream");
    let err = receiver.recv().await.expect_err("oversized");
    assert!(matches!(err, NetError::FrameTooLarge(_)), "{err}");
}

/// A client that trusts our CA but holds another cluster's certificate finishes its half
/// of the QUIC handshake before the server checks that certificate; `connect` must still
/// fail, with the server's refusal, instead of returning a connection that dies later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reports_a_server_refusing_our_certificate() {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let (ours, _a, b) = pair();
    let theirs = tempfile::tempdir().expect("tempdir");
    make_cluster(theirs.path(), &["a".to_owned()]).expect("make_cluster");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ours.path().join("ca.crt")).expect("ca"))
        .expect("root");
    let mut client = rustls::ClientConfig::builder_with_provider(super::super::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_file(theirs.path().join("a.crt")).expect("crt")],
            PrivateKeyDer::from_pem_file(theirs.path().join("a.key")).expect("key"),
        )
        .expect("client auth");
    client.alpn_protocols = vec![super::super::tls::ALPN.to_vec()];
    let mut rogue = Identity::load(theirs.path(), "a").expect("load theirs");
    rogue.client = Arc::new(client);

    let tb = Transport::bind(localhost(), &b).expect("bind b");
    let tr = Transport::bind(localhost(), &rogue).expect("bind rogue");
    let err = tr
        .connect(tb.local_addr(), "b")
        .await
        .expect_err("rogue got in");
    let msg = err.to_string();
    assert!(matches!(err, NetError::PeerRefused(_)), "{msg}");
    assert!(
        msg.contains("the peer refused us") && msg.contains("UnknownIssuer"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_with_unknown_tags_are_skipped() {
    let (_dir, a, b) = pair();
    let ta = Transport::bind(localhost(), &a).expect("bind a");
    let tb = Transport::bind(localhost(), &b).expect("bind b");
    let conn = ta.connect(tb.local_addr(), "b").await.expect("connect");
    let server = tb.accept().await.expect("accept");

    let mut bogus = conn.inner.open_uni().await.expect("open raw");
    bogus.write_all(&[0xee, 1, 2, 3]).await.expect("write");
    let _ = bogus.finish();
    let empty = conn.inner.open_uni().await.expect("open raw");
    drop(empty);
    let mut good = conn.open(StreamKind::Control).await.expect("open");
    good.send(b"after").await.expect("send");
    good.finish().await.expect("finish");

    let (kind, mut receiver) = server.accept_stream().await.expect("stream");
    assert_eq!(kind, StreamKind::Control);
    assert_eq!(
        receiver.recv().await.expect("frame").as_deref(),
        Some(&b"after"[..])
    );
    assert!(receiver.recv().await.expect("end").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_is_an_error_not_an_end() {
    let (_dir, a, b) = pair();
    let ta = Transport::bind(localhost(), &a).expect("bind a");
    let tb = Transport::bind(localhost(), &b).expect("bind b");
    let conn = ta.connect(tb.local_addr(), "b").await.expect("connect");
    let server = tb.accept().await.expect("accept");

    let mut sender = conn.open(StreamKind::Bulk).await.expect("open");
    sender
        .send_unframed(&10u32.to_be_bytes())
        .await
        .expect("prefix");
    sender.send_unframed(b"short").await.expect("body");
    sender.finish().await.expect("finish");
    let (_, mut receiver) = server.accept_stream().await.expect("stream");
    let err = receiver.recv().await.expect_err("truncated");
    assert!(
        matches!(
            err,
            NetError::Truncated {
                expected: 10,
                got: 5
            }
        ),
        "{err}"
    );
}

/// A transport passes on the CRL its verifiers use: none without `crl.pem`, the file's
/// list once a reload brought one, and each connection names its peer's serial so a list
/// can be matched against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_hands_out_the_crl_it_verifies_with_and_a_reload_replaces_it() {
    let (dir, a, b) = pair();
    let ta = Transport::bind(localhost(), &a).expect("bind a");
    let tb = Transport::bind(localhost(), &b).expect("bind b");
    assert!(ta.crl().is_none());
    let conn = ta.connect(tb.local_addr(), "b").await.expect("connect");
    let b_serial = crate::net::tls::cert_serial(
        &crate::net::pki::read_cert(&dir.path().join("b.crt")).expect("b.crt"),
    );
    assert_eq!(conn.peer_serial(), b_serial.as_slice());

    crate::net::revoke(dir.path(), &["b".to_owned()]).expect("revoke b");
    let a = Identity::load(dir.path(), "a").expect("a again");
    ta.reload(&a);
    let der = crate::net::pki::read_crl(&dir.path().join(crate::net::pki::CRL)).expect("crl");
    assert_eq!(ta.crl().as_deref(), Some(der.as_ref()));
    assert_eq!(a.crl(), Some(der.as_ref()));
    let listed = crate::net::crl::facts(&der).expect("facts").revoked;
    assert_eq!(listed, [b_serial]);
}

//! Issue 30, item 6: the revocation list distributed by the tree. A certificate revoked on
//! the login node only reaches every node with the next push, node to node, and the
//! revoked host is refused by nodes that never had the CRL copied to them (its open
//! connection is closed too); a CRL of another CA, an older one and a corrupt one are
//! never installed. Real daemons (relay-only, no FUSE), each with an identity
//! directory of its own, and real QUIC.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use teesfs_node::net::{Identity, NetError, StreamKind, Transport};

use crate::cluster::Cluster;
use crate::util::make_tree;

fn localhost() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Waits (bounded) until `done` holds; `what` names it in the failure.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn revoke(creds: &Path, host: &str, c: &Cluster) {
    let out = c.ws.teesfs(&[
        "keygen",
        "--cluster",
        creds.to_str().expect("utf8"),
        "--revoke",
        host,
    ]);
    assert!(out.status.success(), "revoke {host}: {out:?}");
}

fn log_of(c: &Cluster, i: usize) -> String {
    std::fs::read_to_string(c.nodes[i].dir.join("daemon.log")).unwrap_or_default()
}

#[test]
fn a_crl_revoked_on_the_login_node_only_reaches_every_node_with_the_next_push() {
    let c =
        Cluster::start_own_identities(3, "n09", "teesfs=info", |_| vec!["--no-mount".to_string()]);
    let rt = runtime();
    let n03: SocketAddr = c.nodes[2].addr.parse().expect("address");
    // n09 (no daemon) talks to the last node of the chain while it still may.
    let n09 = Identity::load(&c.creds, "n09").expect("n09");
    let n09 = rt.block_on(async { Transport::bind(localhost(), &n09).expect("bind n09") });
    let early = rt
        .block_on(n09.connect(n03, "n03"))
        .expect("n09 is welcome before the revocation");

    revoke(&c.creds, "n09", &c);
    let crl = std::fs::read(c.creds.join("crl.pem")).expect("the login node's crl.pem");
    for n in &c.nodes {
        assert!(!n.identity.join("crl.pem").exists(), "copied by hand?");
    }
    let layer = c.ws.path().join("layer");
    make_tree(&layer, 4, 0);
    let index = c.ws.publish(&layer);
    // A chain: login -> n01 -> n02 -> n03.
    let out = c
        .push_cmd(&index, 1, &["--width", "1", "--timeout", "60s"])
        .output()
        .expect("push");
    assert!(out.status.success(), "push: {out:?}");

    // A node writes crl.pem, then reloads its transport with it, then logs the install:
    // the line, not the file, says the node refuses revoked peers now.
    let installed = "installed a newer revocation list from a peer";
    for (i, n) in c.nodes.iter().enumerate() {
        let path = n.identity.join("crl.pem");
        wait_for(&format!("{}'s crl.pem", n.host), || {
            std::fs::read(&path).is_ok_and(|b| b == crl)
        });
        wait_for(&format!("{}'s log of the install", n.host), || {
            log_of(&c, i).contains(installed)
        });
    }
    // The root dials its children and, ahead of their `Start`s, its grandchildren: n03
    // is further down and has the list from a node that passed it on.
    let log = log_of(&c, 2);
    assert!(
        log.lines()
            .any(|l| l.contains(installed) && (l.contains("peer=n01") || l.contains("peer=n02"))),
        "{log}"
    );

    // n03 closed the connection n09 had, and refuses the next one; so does n01.
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), early.closed())
            .await
            .expect("n03 closes the revoked peer's connection");
    });
    for (i, host) in [(2, "n03"), (0, "n01")] {
        let addr: SocketAddr = c.nodes[i].addr.parse().expect("address");
        match rt.block_on(n09.connect(addr, host)) {
            Err(NetError::PeerRefused(why)) => {
                assert!(why.contains("peer refused us"), "{host}: {why}")
            }
            other => panic!("{host} took the revoked n09: {other:?}"),
        }
    }
    assert!(
        log_of(&c, 2).contains("closing the connection: the peer's certificate is revoked now")
    );
}

/// Sends `der` to `addr` (`host`) from `from` on a CRL stream, as a node passing it on.
fn offer(rt: &tokio::runtime::Runtime, from: &Transport, addr: SocketAddr, host: &str, der: &[u8]) {
    rt.block_on(async {
        let conn = from.connect(addr, host).await.expect("connect");
        let mut tx = conn.open(StreamKind::Crl).await.expect("open");
        tx.send(der).await.expect("send");
        tx.finish().await.expect("delivered");
    });
}

fn der_of(pem: &Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject as _;
    rustls_pki_types::CertificateRevocationListDer::from_pem_file(pem)
        .expect("a PEM CRL")
        .to_vec()
}

#[test]
fn a_forged_an_older_or_a_corrupt_crl_is_never_installed() {
    let c = Cluster::start_own_identities(1, "n08,n09", "teesfs=debug", |_| {
        vec!["--no-mount".to_string()]
    });
    let rt = runtime();
    let n01: SocketAddr = c.nodes[0].addr.parse().expect("address");
    let n08 = Identity::load(&c.creds, "n08").expect("n08");
    let n08 = rt.block_on(async { Transport::bind(localhost(), &n08).expect("bind n08") });
    let held = c.nodes[0].identity.join("crl.pem");

    // Number 1 (older), then number 2, which n01 gets first.
    revoke(&c.creds, "n09", &c);
    let older = der_of(&c.creds.join("crl.pem"));
    revoke(&c.creds, "n09", &c);
    let current = der_of(&c.creds.join("crl.pem"));
    offer(&rt, &n08, n01, "n01", &current);
    wait_for("number 2 installed", || held.exists());
    let installed = std::fs::read(&held).expect("crl.pem");

    // Another cluster's CA signs a list with a greater number.
    let other = c.ws.path().join("other-cluster");
    let out = c.ws.teesfs(&[
        "keygen",
        "--cluster",
        other.to_str().expect("utf8"),
        "--nodes",
        "n09",
    ]);
    assert!(out.status.success(), "{out:?}");
    for _ in 0..3 {
        revoke(&other, "n09", &c);
    }
    offer(&rt, &n08, n01, "n01", &der_of(&other.join("crl.pem")));
    wait_for("the forged list refused", || {
        log_of(&c, 0)
            .lines()
            .any(|l| l.contains("refused a revocation list") && l.contains("n08"))
    });
    offer(&rt, &n08, n01, "n01", &older);
    wait_for("the older list ignored", || {
        log_of(&c, 0)
            .lines()
            .any(|l| l.contains("ignored an older revocation list") && l.contains("n08"))
    });
    let mut corrupt = current.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    offer(&rt, &n08, n01, "n01", &corrupt);
    wait_for("the corrupt list refused", || {
        log_of(&c, 0).matches("refused a revocation list").count() >= 2
    });
    assert_eq!(
        std::fs::read(&held).expect("crl.pem"),
        installed,
        "n01 kept the good list"
    );
    let log = log_of(&c, 0);
    assert!(log.contains("not by this cluster's CA"), "{log}");
    assert!(log.contains("signature does not check out"), "{log}");
}

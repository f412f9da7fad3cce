//! The cluster's revocation list passed along the tree: every process sends the CRL its
//! transport uses to each peer it connects to, on a stream of its own
//! ([`StreamKind::Crl`]), so the push's root (the login node, with `crl.pem` beside its
//! certificate) hands its list to its children as each job starts; a daemon that keeps
//! CRLs ([`CrlKeeper`]) installs one that [`crl::judge`] finds newer, makes new handshakes
//! use it, closes its connections to peers it revokes, and passes it on to the peers it is
//! connected to. Links made afterwards carry it from the start.
//!
//! The decision is `net::crl`'s (pure); this module only moves bytes, runs the file work
//! off the reader tasks, and logs what it refused with the peer that sent it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

use super::peers::Peers;
use crate::net::crl::{self, MAX_CRL, Verdict};
use crate::net::{Conn, FrameReceiver, Identity, NetError, StreamKind, Transport};

/// A daemon's own revocation list, in its identity directory: what it installs CRLs from
/// peers into.
#[derive(Debug)]
pub(crate) struct CrlKeeper {
    /// The identity directory (`ca.crt`, `crl.pem`, this host's certificate and key).
    dir: PathBuf,
    /// This host, whose identity is loaded again with a new list.
    host: String,
    /// One list considered at a time, so two peers' lists never interleave their checks
    /// and writes.
    busy: Mutex<()>,
}

/// What became of a received list.
enum Outcome {
    /// Installed: its number and the serials it revokes.
    Installed { number: u64, revoked: Vec<Vec<u8>> },
    /// What [`crl::judge`] said otherwise.
    Kept(Verdict, Option<u64>),
    /// Not even a list of this cluster's CA.
    Refused(NetError),
    /// A newer list that could not be written.
    Unwritable(NetError),
}

impl CrlKeeper {
    /// A keeper of `dir/crl.pem` for `host`.
    pub fn new(dir: PathBuf, host: String) -> CrlKeeper {
        CrlKeeper {
            dir,
            host,
            busy: Mutex::new(()),
        }
    }

    /// Checks `der` and installs it if it is newer, then loads the identity again and
    /// makes `transport` use it. Blocking (file work): runs on the blocking pool.
    fn consider(&self, der: &[u8], transport: &Transport) -> Outcome {
        let _one = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let offered = match crl::verify_in(&self.dir, der) {
            Ok(f) => f,
            Err(e) => return Outcome::Refused(e),
        };
        let held = crl::held(&self.dir).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the revocation list held here is unreadable; a valid newer one replaces it");
            None
        });
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let verdict = crl::judge(held.as_ref(), &offered, now);
        if verdict != Verdict::Install {
            return Outcome::Kept(verdict, offered.number);
        }
        if let Err(e) = crl::install(&self.dir, der) {
            return Outcome::Unwritable(e);
        }
        match Identity::load(&self.dir, &self.host) {
            Ok(id) => transport.reload(&id),
            // Its own certificate is revoked: peers refuse it from now on, and so will its
            // own start; the list is the CA's word, so it stays.
            Err(e) => {
                tracing::error!(error = %e, "a newer revocation list is installed, but this node's credentials no longer load with it; issue it a new certificate (`teesfs keygen --cluster DIR --nodes HOST`)")
            }
        }
        Outcome::Installed {
            number: offered.number.unwrap_or_default(),
            revoked: offered.revoked,
        }
    }
}

/// Sends `der` to the peer of `conn` on a stream of its own. A peer of an earlier release
/// skips the stream.
pub(crate) fn send(rt: &tokio::runtime::Handle, conn: Conn, der: Bytes) {
    rt.spawn(async move {
        let sent = async {
            let mut tx = conn.open(StreamKind::Crl).await?;
            tx.send(&der).await?;
            tx.finish().await
        };
        if let Err(e) = sent.await {
            tracing::debug!(peer = %conn.peer_host(), error = %e, "revocation list not delivered");
        }
    });
}

/// Takes the list a peer sent on `rx` and, with a `keeper`, considers it; without one (a
/// push's root, `teesfs learn`) it is dropped.
pub(crate) async fn receive(
    peers: Weak<Peers>,
    keeper: Option<Arc<CrlKeeper>>,
    from: String,
    mut rx: FrameReceiver,
) {
    let Some(keeper) = keeper else {
        tracing::debug!(peer = %from, "a revocation list from a peer; this process keeps none");
        return;
    };
    let der = match rx.recv_at_most(MAX_CRL).await {
        // One list a stream: its end is read too, so the sender learns it arrived whole
        // (a stream dropped unread tells it we stopped listening).
        Ok(Some(der)) if matches!(rx.recv_at_most(0).await, Ok(None)) => Bytes::from(der),
        Ok(Some(_)) => {
            tracing::warn!(peer = %from, "refused a revocation list stream with more than one list");
            return;
        }
        Ok(None) => return,
        Err(NetError::FrameTooLarge(len)) => {
            tracing::warn!(peer = %from, len, max = MAX_CRL, "refused a revocation list larger than any this cluster makes");
            return;
        }
        Err(e) => {
            tracing::debug!(peer = %from, error = %e, "revocation list not received");
            return;
        }
    };
    let Some(transport) = peers.upgrade().map(|p| p.transport().clone()) else {
        return;
    };
    // The list in use already (what most peers send): nothing to read or check.
    if transport.crl().as_ref() == Some(&der) {
        return;
    }
    let bytes = der.clone();
    let outcome = tokio::task::spawn_blocking(move || keeper.consider(&bytes, &transport)).await;
    match outcome {
        Ok(Outcome::Installed { number, revoked }) => {
            tracing::info!(peer = %from, number, revoked = revoked.len(), "installed a newer revocation list from a peer; new connections are checked against it");
            if let Some(peers) = peers.upgrade() {
                peers.close_revoked(&revoked);
                peers.pass_on_crl(&der, &from);
            }
        }
        Ok(Outcome::Kept(Verdict::Same, _)) => {}
        Ok(Outcome::Kept(Verdict::Older { held }, offered)) => {
            tracing::debug!(peer = %from, held, offered, "ignored an older revocation list");
        }
        Ok(Outcome::Kept(verdict, offered)) => {
            let why = match verdict {
                Verdict::Refused(why) => why,
                other => format!("{other:?}"),
            };
            tracing::warn!(peer = %from, offered, "refused a revocation list: {why}");
        }
        Ok(Outcome::Refused(e)) => {
            tracing::warn!(peer = %from, "refused a revocation list: {e}");
        }
        Ok(Outcome::Unwritable(e)) => {
            tracing::error!(peer = %from, "cannot install a newer revocation list: {e}; make the identity directory writable by the daemon, or copy crl.pem there by hand");
        }
        Err(e) => tracing::error!(peer = %from, error = %e, "checking a revocation list failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{make_cluster, revoke};

    fn hosts(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn der_at(dir: &std::path::Path) -> Vec<u8> {
        use rustls_pki_types::pem::PemObject as _;
        rustls_pki_types::CertificateRevocationListDer::from_pem_file(
            dir.join(crate::net::tls::CRL),
        )
        .expect("crl")
        .to_vec()
    }

    /// The keeper installs a newer list and makes the transport use it; the same, an older
    /// and another CA's list change nothing, and a list it cannot write is said to be so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_keeper_installs_only_a_newer_list_of_its_ca_and_reloads_the_transport() {
        let ca = tempfile::tempdir().expect("tempdir");
        make_cluster(ca.path(), &hosts(&["a", "b"])).expect("cluster");
        let node = tempfile::tempdir().expect("tempdir");
        for f in ["ca.crt", "a.crt", "a.key"] {
            std::fs::copy(ca.path().join(f), node.path().join(f)).expect("copy");
        }
        let id = Identity::load(node.path(), "a").expect("a");
        let transport = Transport::bind("127.0.0.1:0".parse().expect("addr"), &id).expect("bind");
        let keeper = CrlKeeper::new(node.path().to_path_buf(), "a".into());
        revoke(ca.path(), &hosts(&["b"])).expect("revoke");
        let first = der_at(ca.path());
        revoke(ca.path(), &hosts(&["b"])).expect("again");
        let second = der_at(ca.path());

        let consider = |der: &[u8]| keeper.consider(der, &transport);
        assert!(matches!(
            consider(&second),
            Outcome::Installed { number: 2, .. }
        ));
        assert_eq!(transport.crl().as_deref(), Some(second.as_slice()));
        assert!(matches!(consider(&second), Outcome::Kept(Verdict::Same, _)));
        assert!(matches!(
            consider(&first),
            Outcome::Kept(Verdict::Older { held: 2 }, Some(1))
        ));
        let other = tempfile::tempdir().expect("tempdir");
        make_cluster(other.path(), &hosts(&["b"])).expect("other");
        for _ in 0..3 {
            revoke(other.path(), &hosts(&["b"])).expect("revoke there");
        }
        assert!(matches!(
            consider(&der_at(other.path())),
            Outcome::Refused(_)
        ));
        assert_eq!(der_at(node.path()), second, "the list held stays");

        // A newer list that cannot be written (a directory in the way of crl.pem: root
        // ignores file modes) is said to be so, not refused as a bad list.
        revoke(ca.path(), &hosts(&["b"])).expect("third");
        let blocked = tempfile::tempdir().expect("tempdir");
        std::fs::copy(ca.path().join("ca.crt"), blocked.path().join("ca.crt")).expect("copy");
        std::fs::create_dir(blocked.path().join(crate::net::tls::CRL)).expect("mkdir");
        let keeper = CrlKeeper::new(blocked.path().to_path_buf(), "a".into());
        assert!(matches!(
            keeper.consider(&der_at(ca.path()), &transport),
            Outcome::Unwritable(_)
        ));
    }
}

//! Whether a node takes a job a parent offers, decided from the `Start` alone: pure
//! checks, no sockets, no store, no mounts. The daemon acts on the answer
//! ([`super::daemon`]); the tests below drive it without any of those.
//!
//! A `Start` is admitted when it names this node first, comes from the parent it names (the
//! host the TLS handshake proved), and, for a real job, carries an index signed by a
//! trusted publisher, not expired and not revoked on this node, with a push order that is a
//! permutation of its chunk table.

use std::collections::HashSet;
use std::sync::Arc;

use manifest::{Index, IndexId, Limits, PublicKey, SignedIndex};
use peertree::relay::{Schedule, Start};

use crate::Error;

/// What an admitted `Start` is.
pub enum Admitted {
    /// An empty broadcast (`teesfs health`): nothing to verify beyond its origin.
    Probe,
    /// A job with its verified index and schedule.
    Job {
        /// The signed envelope (its id names the index).
        signed: SignedIndex,
        /// The decoded index.
        index: Index,
        /// The push order, checked against the index.
        schedule: Arc<Schedule>,
    },
}

/// What this node accepts: the publisher keys it trusts, the index ids revoked on it, and
/// the time (seconds since the Unix epoch) that expiries are checked against.
pub struct Policy<'a> {
    /// Trusted publisher keys.
    pub trusted: &'a [PublicKey],
    /// Revoked index ids.
    pub revoked: &'a HashSet<IndexId>,
    /// Now.
    pub now: u64,
}

/// Decides on `start`, received from the peer whose certificate names `from_host`, at the
/// node `me`, under `policy`.
pub fn admit(
    start: &Start,
    me: &str,
    from_host: &str,
    policy: &Policy<'_>,
) -> Result<Admitted, Error> {
    let meant = start.subtree.first().map(|n| n.host.as_str());
    if meant != Some(me) {
        return Err(Error::NotForThisNode {
            meant: meant.map(str::to_string),
            me: me.to_string(),
        });
    }
    if start.ancestors.first().map(|n| n.host.as_str()) != Some(from_host) {
        return Err(Error::WrongParent {
            from: from_host.to_string(),
        });
    }
    if start.probe {
        return Ok(Admitted::Probe);
    }
    let (signed, index) = SignedIndex::open(
        start.index.clone(),
        None,
        policy.trusted,
        &Limits::default(),
    )?;
    if policy.revoked.contains(&signed.id()) {
        return Err(Error::Revoked(signed.id()));
    }
    signed.check_expiry(policy.now)?;
    let sizes = index.chunks.iter().map(|c| c.stored_len).collect();
    let schedule = Arc::new(Schedule::new(
        start.order.clone(),
        start.urgent as usize,
        sizes,
    )?);
    Ok(Admitted::Job {
        signed,
        index,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use peertree::relay::{JobId, NodeInfo, Timing};

    fn node(id: u32, host: &str) -> NodeInfo {
        NodeInfo {
            id: peertree::NodeId(id),
            host: host.into(),
            addr: format!("{host}:7411"),
            parent: peertree::NodeId(0),
            group: None,
            rate: None,
        }
    }

    fn start(me: &str, parent: &str, probe: bool, index: Vec<u8>) -> Start {
        Start {
            job: JobId(7),
            index,
            order: Vec::new(),
            urgent: 0,
            subtree: vec![node(1, me)],
            ancestors: vec![node(0, parent)],
            timing: Timing::default(),
            shared_store: None,
            probe,
            owner: None,
            kin: Vec::new(),
            root_clock_ms: None,
        }
    }

    fn nobody() -> HashSet<IndexId> {
        HashSet::new()
    }

    #[test]
    fn a_start_for_another_node_or_from_another_parent_is_refused() {
        let none = nobody();
        let p = Policy {
            trusted: &[],
            revoked: &none,
            now: 0,
        };
        let e = admit(&start("n2", "login", true, Vec::new()), "n1", "login", &p)
            .err()
            .expect("not for me");
        assert!(matches!(e, Error::NotForThisNode { .. }), "{e}");
        let e = admit(&start("n1", "login", true, Vec::new()), "n1", "n9", &p)
            .err()
            .expect("wrong parent");
        assert!(matches!(e, Error::WrongParent { .. }), "{e}");
        assert!(matches!(
            admit(&start("n1", "login", true, Vec::new()), "n1", "login", &p),
            Ok(Admitted::Probe)
        ));
    }

    #[test]
    fn a_job_whose_index_is_not_signed_by_a_trusted_key_is_refused() {
        let none = nobody();
        let p = Policy {
            trusted: &[],
            revoked: &none,
            now: 0,
        };
        let e = admit(
            &start("n1", "login", false, b"not an index".to_vec()),
            "n1",
            "login",
            &p,
        )
        .err()
        .expect("garbage index");
        assert!(matches!(e, Error::Manifest(_)), "{e}");
    }

    /// Issue 17: an index past its expiry, or revoked on this node, is refused; the same
    /// index before its expiry and not revoked is taken.
    #[test]
    fn an_expired_or_revoked_index_is_refused() {
        use manifest::{Entry, EntryFlags, EntryIdx, EntryKind, Meta, SecretKey};
        let key = SecretKey::generate().expect("key");
        let index = Index {
            chunk_size: 1 << 20,
            chunks: Vec::new(),
            entries: vec![Entry {
                parent: EntryIdx(0),
                name: Box::default(),
                meta: Meta {
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                    mtime: 0,
                    mtime_nsec: 0,
                },
                flags: EntryFlags::default(),
                kind: EntryKind::Dir,
            }],
            urgent: Vec::new(),
        };
        let signed = SignedIndex::sign_until(&index, &key, 3, Some(5_000));
        let job = start("n1", "login", false, signed.as_bytes().to_vec());
        let trusted = [key.public()];
        let none = nobody();
        let at = |now, revoked| Policy {
            trusted: &trusted,
            revoked,
            now,
        };
        assert!(matches!(
            admit(&job, "n1", "login", &at(4_999, &none)),
            Ok(Admitted::Job { .. })
        ));
        let e = admit(&job, "n1", "login", &at(5_000, &none))
            .err()
            .expect("expired");
        assert!(e.to_string().contains("expired"), "{e}");
        let revoked = HashSet::from([signed.id()]);
        let e = admit(&job, "n1", "login", &at(0, &revoked))
            .err()
            .expect("revoked");
        assert!(matches!(e, Error::Revoked(id) if id == signed.id()), "{e}");
    }
}

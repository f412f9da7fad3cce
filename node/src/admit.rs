//! Whether a node takes a job a parent offers, decided from the `Start` alone: pure
//! checks, no sockets, no store, no mounts. The daemon acts on the answer
//! ([`super::daemon`]); the tests below drive it without any of those.
//!
//! A `Start` is admitted when it names this node first, comes from the parent it names (the
//! host the TLS handshake proved), and, for a real job, carries an index signed by a
//! trusted publisher, not expired and not revoked on this node, with a push order that is a
//! permutation of its chunk table. A key bound to users (the daemon's `--trusted-users`
//! directory) signs only the jobs those users own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use manifest::{Index, IndexId, Limits, PublicKey, SignedIndex};
use peertree::relay::{Schedule, Start};

use crate::Error;

/// What an admitted `Start` is.
// One per Start, moved once into the job: the Job variant's size (an index, which carries
// an image config since issue 34) costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
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

/// Publisher keys bound to users: a key (hex) signs only jobs whose owner is one of its uids.
pub(crate) type KeyOwners = HashMap<String, HashSet<u32>>;

/// The publisher keys a node trusts, and the users some of them sign for.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// Every trusted key (site keys and user-bound ones).
    pub keys: Vec<PublicKey>,
    /// The user-bound keys' uids.
    pub owners: KeyOwners,
}

/// What this node accepts: the publisher keys it trusts, the index ids revoked on it, and
/// the time (seconds since the Unix epoch) that expiries are checked against.
pub struct Policy<'a> {
    /// Trusted publisher keys.
    pub trusted: &'a [PublicKey],
    /// The keys among them that sign only some users' jobs.
    pub owners: &'a KeyOwners,
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
    check_owner(&signed, start.owner, policy.owners)?;
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

/// Refuses a job whose index is signed by a key bound to other users than the job's owner.
fn check_owner(signed: &SignedIndex, owner: Option<u32>, owners: &KeyOwners) -> Result<(), Error> {
    let key = signed.publisher()?.to_hex();
    let Some(allowed) = owners.get(&key) else {
        return Ok(()); // a site key: any job
    };
    if owner.is_some_and(|uid| allowed.contains(&uid)) {
        return Ok(());
    }
    let mut uids: Vec<u32> = allowed.iter().copied().collect();
    uids.sort_unstable();
    Err(Error::KeyNotForOwner {
        key,
        allowed: uids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        owner: owner.map_or_else(|| "not named".to_owned(), |u| format!("uid {u}")),
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
            owners: &KeyOwners::new(),
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
            owners: &KeyOwners::new(),
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

    /// An index of the root directory alone.
    fn root_only() -> Index {
        use manifest::{Entry, EntryFlags, EntryIdx, EntryKind, Meta};
        Index {
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
            image: None,
        }
    }

    /// Issue 17: an index past its expiry, or revoked on this node, is refused; the same
    /// index before its expiry and not revoked is taken.
    #[test]
    fn an_expired_or_revoked_index_is_refused() {
        let key = manifest::SecretKey::generate().expect("key");
        let index = root_only();
        let signed = SignedIndex::sign_until(&index, &key, 3, Some(5_000));
        let job = start("n1", "login", false, signed.as_bytes().to_vec());
        let trusted = [key.public()];
        let none = nobody();
        let no_owners = KeyOwners::new();
        let at = |now, revoked| Policy {
            trusted: &trusted,
            owners: &no_owners,
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

    /// Issue 30 item 4: a key bound to uid 1001 signs alice's jobs only; a job of another
    /// owner, or of none named, is refused naming the key, its uids and the owner.
    #[test]
    fn a_key_bound_to_a_user_signs_only_that_users_jobs() {
        let key = manifest::SecretKey::generate().expect("key");
        let index = root_only();
        let signed = SignedIndex::sign(&index, &key, 3);
        let trusted = [key.public()];
        let none = nobody();
        let owners = KeyOwners::from([(key.public().to_hex(), HashSet::from([1001]))]);
        let p = Policy {
            trusted: &trusted,
            owners: &owners,
            revoked: &none,
            now: 0,
        };
        let job = |owner| Start {
            owner,
            ..start("n1", "login", false, signed.as_bytes().to_vec())
        };
        assert!(matches!(
            admit(&job(Some(1001)), "n1", "login", &p),
            Ok(Admitted::Job { .. })
        ));
        for (owner, named) in [(Some(1002), "uid 1002"), (None, "not named")] {
            let e = admit(&job(owner), "n1", "login", &p)
                .err()
                .expect("another user's job");
            let text = e.to_string();
            assert!(matches!(e, Error::KeyNotForOwner { .. }), "{text}");
            assert!(text.contains("uid 1001") && text.contains(named), "{text}");
        }
    }
}

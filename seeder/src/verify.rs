//! Checking a store: each index's envelope (readable, signed by a trusted key, the id asked
//! for, a body that decodes) and every chunk it references (present, a regular file,
//! decoding to its id), as a typed [`Report`] for the caller to print (`teesfs verify`).
//!
//! It reads the store and nothing else: it writes nothing and repairs nothing (publishing
//! the layer again replaces bad chunks), and it never prints. One bad index is one entry
//! of the report, not the end of the check.

use std::path::PathBuf;

use manifest::{ChunkId, Index, IndexId, Limits, PublicKey, SignedIndex, decode_chunk};
use rayon::prelude::*;

use crate::{DirStore, Error};

/// Which indexes to check.
#[derive(Debug, Clone, Copy)]
pub enum Which<'a> {
    /// Every index in the store.
    All,
    /// The index a tag or an id prefix names ([`DirStore::resolve_index`]).
    Named(&'a str),
}

/// What [`verify`] found, index by index in the order checked.
#[derive(Debug, Default)]
pub struct Report {
    /// Every index checked.
    pub indexes: Vec<IndexCheck>,
}

impl Report {
    /// How many indexes did not verify (refused, or with a bad chunk).
    pub fn failed(&self) -> usize {
        self.indexes.iter().filter(|c| !c.ok()).count()
    }

    /// Whether every index checked verified.
    pub fn ok(&self) -> bool {
        self.failed() == 0
    }
}

/// One index's check.
#[derive(Debug)]
pub struct IndexCheck {
    /// The index.
    pub id: IndexId,
    /// Its envelope's verdict and, when it opened, its chunks'.
    pub verdict: Verdict,
}

impl IndexCheck {
    /// Whether its signature and every chunk verified.
    pub fn ok(&self) -> bool {
        matches!(&self.verdict, Verdict::Opened(o) if o.bad_chunks.is_empty())
    }
}

/// An index's envelope: refused, or opened and its chunks checked.
#[derive(Debug)]
pub enum Verdict {
    /// The index itself was refused (unreadable, damaged, not signed by a trusted key, not
    /// the id asked for): its chunks were not checked.
    Refused(Error),
    /// Its signature verified; its chunks were checked.
    Opened(Opened),
}

/// An index whose signature verified, and what its chunks' check found.
#[derive(Debug)]
pub struct Opened {
    /// The key that signed it.
    pub publisher: PublicKey,
    /// Entries in the index.
    pub entries: u64,
    /// Chunks it references.
    pub chunks: u64,
    /// Their stored bytes.
    pub stored_bytes: u64,
    /// Every chunk that did not verify, by number.
    pub bad_chunks: Vec<BadChunk>,
}

/// A chunk that did not verify.
#[derive(Debug)]
pub struct BadChunk {
    /// Its position in the index's chunk list.
    pub number: u32,
    /// Its id.
    pub id: ChunkId,
    /// Its file in the store.
    pub path: PathBuf,
    /// What is wrong with it.
    pub fault: ChunkFault,
}

/// What is wrong with a [`BadChunk`].
#[derive(Debug)]
pub enum ChunkFault {
    /// No file at its place.
    Missing,
    /// Its file cannot be read as a chunk (not a regular file, too long, not permitted).
    Unreadable(std::io::Error),
    /// Its bytes do not decode to its id (damaged, truncated or planted).
    Damaged(manifest::Error),
}

impl std::fmt::Display for BadChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fault {
            ChunkFault::Missing => write!(f, "chunk {} is missing from the store", self.id),
            ChunkFault::Unreadable(e) => write!(f, "{}: {e}", self.path.display()),
            ChunkFault::Damaged(e) => write!(f, "{e}"),
        }
    }
}

/// What a check reports as it goes (a progress bar, a line per index). Called from the
/// checking threads; every method does nothing unless overridden.
pub trait VerifyProgress: Sync {
    /// An index opened: `stored_bytes` of chunks are to be checked.
    fn index_opened(&self, id: &IndexId, stored_bytes: u64) {
        let _ = (id, stored_bytes);
    }
    /// A chunk of `stored_len` stored bytes was checked.
    fn chunk_checked(&self, stored_len: u64) {
        let _ = stored_len;
    }
    /// An index's check is complete.
    fn index_checked(&self, check: &IndexCheck) {
        let _ = check;
    }
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl VerifyProgress for NoProgress {}

/// Checks `which` indexes of `store` against the `trusted` keys, and the chunks of each
/// that opens. Fails only when there is nothing to check: `which` names no index, or the
/// store holds none. What does not verify is in the report.
pub fn verify(
    store: &DirStore,
    which: Which<'_>,
    trusted: &[PublicKey],
    progress: &dyn VerifyProgress,
) -> Result<Report, Error> {
    let ids = match which {
        Which::Named(given) => vec![store.resolve_index(given)?],
        Which::All => store.list_indexes()?,
    };
    if ids.is_empty() {
        return Err(Error::NoIndex {
            store: store.root().to_path_buf(),
        });
    }
    let mut report = Report::default();
    for id in ids {
        let check = verify_index(store, id, trusted, progress);
        progress.index_checked(&check);
        report.indexes.push(check);
    }
    Ok(report)
}

/// Checks one index and, if it opens, its chunks.
fn verify_index(
    store: &DirStore,
    id: IndexId,
    trusted: &[PublicKey],
    progress: &dyn VerifyProgress,
) -> IndexCheck {
    let opened = store.get_index(&id).and_then(|bytes| {
        let (signed, index) = SignedIndex::open(bytes, Some(id), trusted, &Limits::default())?;
        Ok((signed.publisher()?, index))
    });
    let verdict = match opened {
        Err(e) => Verdict::Refused(e),
        Ok((publisher, index)) => {
            progress.index_opened(&id, index.total_stored_bytes());
            Verdict::Opened(Opened {
                publisher,
                entries: index.entries.len() as u64,
                chunks: index.chunks.len() as u64,
                stored_bytes: index.total_stored_bytes(),
                bad_chunks: bad_chunks(store, &index, progress),
            })
        }
    };
    IndexCheck { id, verdict }
}

/// The chunks of `index` that do not verify in `store`, by number; checked in parallel.
fn bad_chunks(store: &DirStore, index: &Index, progress: &dyn VerifyProgress) -> Vec<BadChunk> {
    index
        .chunks
        .par_iter()
        .enumerate()
        .filter_map(|(number, c)| {
            progress.chunk_checked(u64::from(c.stored_len));
            let fault = match store.read_chunk(&c.id) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => ChunkFault::Missing,
                Err(e) => ChunkFault::Unreadable(e),
                Ok(stored) => ChunkFault::Damaged(decode_chunk(&stored, &c.id, c.plain_len).err()?),
            };
            Some(BadChunk {
                number: u32::try_from(number).expect("an index's chunks are numbered by u32"),
                id: c.id,
                path: store.chunk_path(&c.id),
                fault,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::build::{BuildOptions, NoProgress as NoBuildProgress};
    use manifest::sign::SecretKey;

    /// A store holding one published layer of several chunks, and its publisher's key.
    fn published(tmp: &std::path::Path) -> (DirStore, SecretKey, crate::Published) {
        let layer = tmp.join("layer");
        std::fs::create_dir_all(&layer).expect("mkdir");
        for (seed, name) in [(1u32, "a.bin"), (2, "b.bin")] {
            let bytes: Vec<u8> = (0..200_000u32)
                .map(|i| ChunkId::of(&(i ^ (seed << 24)).to_le_bytes()).0[0])
                .collect();
            std::fs::write(layer.join(name), bytes).expect("write");
        }
        let store = DirStore::create(&tmp.join("store")).expect("store");
        let key = SecretKey::generate().expect("key");
        let opts = BuildOptions {
            chunk_size: 64 << 10,
            ..BuildOptions::default()
        };
        let p = crate::publish(&layer, &store, &key, &opts, &NoBuildProgress).expect("publish");
        assert!(p.index.chunks.len() >= 3, "enough chunks to damage");
        (store, key, p)
    }

    fn only(report: &Report) -> &IndexCheck {
        assert_eq!(report.indexes.len(), 1);
        &report.indexes[0]
    }

    fn opened(check: &IndexCheck) -> &Opened {
        match &check.verdict {
            Verdict::Opened(o) => o,
            Verdict::Refused(e) => panic!("refused: {e}"),
        }
    }

    #[test]
    fn a_good_store_verifies() {
        let t = tempfile::tempdir().expect("tmp");
        let (store, key, p) = published(t.path());
        let report = verify(&store, Which::All, &[key.public()], &NoProgress).expect("verify");
        assert!(report.ok());
        let check = only(&report);
        assert_eq!(check.id, p.id);
        let o = opened(check);
        assert_eq!(o.publisher, key.public());
        assert_eq!(o.chunks, p.index.chunks.len() as u64);
        assert_eq!(o.entries, p.index.entries.len() as u64);
        assert_eq!(o.stored_bytes, p.index.total_stored_bytes());
        let tag = &p.id.to_hex()[..8];
        assert!(
            verify(&store, Which::Named(tag), &[key.public()], &NoProgress)
                .expect("by prefix")
                .ok()
        );
    }

    #[test]
    fn a_damaged_and_a_missing_chunk_are_reported_by_number_id_and_file() {
        let t = tempfile::tempdir().expect("tmp");
        let (store, key, p) = published(t.path());
        let (damaged, missing) = (&p.index.chunks[1], &p.index.chunks[2]);
        let stored = std::fs::read(store.chunk_path(&damaged.id)).expect("read");
        std::fs::write(store.chunk_path(&damaged.id), &stored[..stored.len() / 2])
            .expect("truncate");
        std::fs::remove_file(store.chunk_path(&missing.id)).expect("rm");
        let report = verify(&store, Which::All, &[key.public()], &NoProgress).expect("verify");
        assert_eq!(report.failed(), 1);
        let bad = &opened(only(&report)).bad_chunks;
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert_eq!((bad[0].number, bad[0].id), (1, damaged.id));
        assert_eq!(bad[0].path, store.chunk_path(&damaged.id));
        assert!(matches!(bad[0].fault, ChunkFault::Damaged(_)), "{bad:?}");
        assert_eq!((bad[1].number, bad[1].id), (2, missing.id));
        assert!(matches!(bad[1].fault, ChunkFault::Missing), "{bad:?}");
        assert_eq!(
            bad[1].to_string(),
            format!("chunk {} is missing from the store", missing.id)
        );
    }

    #[test]
    fn a_chunk_that_is_not_a_regular_file_is_unreadable() {
        let t = tempfile::tempdir().expect("tmp");
        let (store, key, p) = published(t.path());
        let path = store.chunk_path(&p.index.chunks[0].id);
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink("/dev/zero", &path).expect("link");
        let report = verify(&store, Which::All, &[key.public()], &NoProgress).expect("verify");
        let bad = &opened(only(&report)).bad_chunks;
        assert!(
            matches!(
                &bad[..],
                [BadChunk {
                    number: 0,
                    fault: ChunkFault::Unreadable(_),
                    ..
                }]
            ),
            "{bad:?}"
        );
        assert!(bad[0].to_string().starts_with(&path.display().to_string()));
    }

    #[test]
    fn a_bad_signature_or_an_untrusted_key_refuses_the_index() {
        let t = tempfile::tempdir().expect("tmp");
        let (store, key, p) = published(t.path());
        let other = SecretKey::generate().expect("key").public();
        let report = verify(&store, Which::All, &[other], &NoProgress).expect("verify");
        let check = only(&report);
        assert!(!report.ok());
        assert!(
            matches!(&check.verdict, Verdict::Refused(Error::Manifest(_))),
            "untrusted: {check:?}"
        );

        let path = store.index_path(&p.id);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[60] ^= 0x01; // inside the signature
        std::fs::write(&path, &bytes).expect("write");
        let report = verify(&store, Which::All, &[key.public()], &NoProgress).expect("verify");
        let check = only(&report);
        assert!(
            matches!(&check.verdict, Verdict::Refused(Error::Manifest(_))),
            "bad signature: {check:?}"
        );
        assert!(!check.ok());
    }

    #[test]
    fn an_empty_store_or_an_unknown_name_is_an_error() {
        let t = tempfile::tempdir().expect("tmp");
        let store = DirStore::create(&t.path().join("s")).expect("store");
        let e = verify(&store, Which::All, &[], &NoProgress).expect_err("empty");
        assert!(matches!(e, Error::NoIndex { .. }), "{e}");
        let e = verify(&store, Which::Named("abcd"), &[], &NoProgress).expect_err("unknown");
        assert!(matches!(e, Error::IndexNotFound { .. }), "{e}");
    }
}

//! A chunk file's mark that its bytes are its chunk's: an extended attribute
//! (`user.teesfs.checked`) naming the chunk, the blake3 of its stored form where it has
//! one, and the file as it was when marked (inode, length, modification time).
//!
//! The publisher marks each chunk file it writes, and the push root each file it checked,
//! so the root hashes a chunk once and not at every push: hashing was a fifth of the root's
//! CPU (issue 33). A mark is a hint, never a proof:
//! - a file written since it was marked (another inode, length or modification time) is
//!   checked again, as is one whose mark names another chunk or another stored hash;
//! - damage that changes none of these (the disk's, or a write that restored the time)
//!   goes out and every node refuses it, since each node checks every chunk against the
//!   signed index; the root then checks its store again without marks
//!   (`teesfs_node::root_store`) and names the chunk;
//! - `teesfs verify` and the publisher's reuse of a present chunk never read marks.
//!
//! Marks are best effort: on a file system without user extended attributes, or for a file
//! the caller may not write, nothing is marked and the file is hashed when read, as before.

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;

use manifest::{ChunkId, StoredHash};
use xattr::FileExt;

/// The extended attribute that holds a chunk file's mark.
pub const MARK_XATTR: &str = "user.teesfs.checked";

const MAGIC: &[u8; 4] = b"tck1";
const LEN: usize = 4 + 1 + 32 + 32 + 8 + 8 + 8 + 4;

/// What a mark says: this file (inode, length, modification time) held chunk `id`'s stored
/// form, whose blake3 is `hash` for a compressed chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    id: ChunkId,
    hash: Option<StoredHash>,
    ino: u64,
    len: u64,
    mtime: (i64, u32),
}

impl Mark {
    fn new(id: &ChunkId, hash: Option<StoredHash>, md: &Metadata) -> Self {
        Self {
            id: *id,
            hash,
            ino: md.ino(),
            len: md.len(),
            mtime: (md.mtime(), md.mtime_nsec().clamp(0, 999_999_999) as u32),
        }
    }

    fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4] = u8::from(self.hash.is_some());
        out[5..37].copy_from_slice(&self.id.0);
        if let Some(h) = self.hash {
            out[37..69].copy_from_slice(&h.0);
        }
        out[69..77].copy_from_slice(&self.ino.to_le_bytes());
        out[77..85].copy_from_slice(&self.len.to_le_bytes());
        out[85..93].copy_from_slice(&self.mtime.0.to_le_bytes());
        out[93..97].copy_from_slice(&self.mtime.1.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != LEN || &b[..4] != MAGIC || b[4] > 1 {
            return None;
        }
        let digest = |at: usize| -> [u8; 32] { b[at..at + 32].try_into().unwrap_or([0; 32]) };
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        Some(Self {
            id: ChunkId(digest(5)),
            hash: (b[4] == 1).then(|| StoredHash(digest(37))),
            ino: u64_at(69),
            len: u64_at(77),
            mtime: (
                u64_at(85) as i64,
                u32::from_le_bytes(b[93..97].try_into().unwrap_or([0; 4])),
            ),
        })
    }
}

/// Marks `file`, just written or just checked, as holding chunk `id`'s stored form (whose
/// blake3 is `hash` for a compressed chunk). Returns whether the mark was set.
pub fn mark(file: &File, id: &ChunkId, hash: Option<StoredHash>) -> bool {
    let Ok(md) = file.metadata() else {
        return false;
    };
    match file.set_xattr(MARK_XATTR, &Mark::new(id, hash, &md).encode()) {
        Ok(()) => true,
        Err(e) => {
            tracing::trace!(error = %e, "a chunk file cannot be marked checked");
            false
        }
    }
}

/// Whether `file` (with `md`, its metadata read from the open file) carries a mark for
/// chunk `id` that still fits the file: the same inode, length and modification time, and
/// the stored hash `hash` where the caller knows one (an index of version 4 on names it
/// for compressed chunks; `None` accepts the mark's chunk id alone).
pub fn is_marked(file: &File, md: &Metadata, id: &ChunkId, hash: Option<StoredHash>) -> bool {
    let Some(m) = file
        .get_xattr(MARK_XATTR)
        .ok()
        .flatten()
        .and_then(|b| Mark::decode(&b))
    else {
        return false;
    };
    let now = Mark::new(id, m.hash, md);
    m == now && (hash.is_none() || hash == m.hash)
}

/// Removes `file`'s mark (it was found damaged), if it has one and may be changed.
pub fn unmark(file: &File) {
    let _ = file.remove_xattr(MARK_XATTR);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("c");
        std::fs::write(&p, bytes).expect("write");
        (t, p)
    }

    #[test]
    fn a_mark_round_trips_and_names_its_chunk_and_stored_hash() {
        let (_t, p) = file(b"\0stored");
        let f = File::open(&p).expect("open");
        let id = ChunkId::of(b"stored");
        let h = StoredHash::of(b"\x01z");
        assert!(
            mark(&f, &id, Some(h)),
            "the test's directory takes user xattrs"
        );
        let md = f.metadata().expect("md");
        assert!(is_marked(&f, &md, &id, Some(h)));
        assert!(
            is_marked(&f, &md, &id, None),
            "an older index names no hash"
        );
        assert!(!is_marked(&f, &md, &ChunkId::of(b"other"), None));
        assert!(!is_marked(&f, &md, &id, Some(StoredHash::of(b"x"))));
        unmark(&f);
        assert!(!is_marked(&f, &md, &id, Some(h)));
    }

    #[test]
    fn a_file_written_after_its_mark_is_not_marked() {
        let (_t, p) = file(b"\0stored");
        let id = ChunkId::of(b"stored");
        let f = File::open(&p).expect("open");
        assert!(
            mark(&f, &id, None),
            "the test's directory takes user xattrs"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .expect("open for append");
        w.write_all(b"!").expect("append");
        let md = f.metadata().expect("md");
        assert!(!is_marked(&f, &md, &id, None), "longer and newer");
        assert_eq!(Mark::decode(b"tck1"), None, "a short mark");
    }
}

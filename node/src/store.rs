//! The node's chunk store: verified chunks as files in a memory-backed directory (diskless
//! nodes are the norm), content-addressed so jobs share identical chunks, with a byte
//! budget enforced by evicting the least recently used chunk.
//!
//! The store and the relays of the jobs using it must agree on what is held: every chunk
//! the store drops (evicted, or found missing or unreadable) is announced to the watchers
//! ([`NodeStore::watch`]), so a relay never believes it holds a chunk the store lost.
//!
//! The stored bytes of the chunks that arrived last are also kept in memory, within their
//! own byte budget ([`NodeStore::open`]'s `recent`): a relay sends each chunk on to its
//! children right after it arrives, and a waiting reader wants it then too, so these are
//! served without reading the file back. They are the bytes checked on arrival
//! ([`CheckedChunk`]), so a reader here uses them without hashing them again; bytes read
//! back from a file are handed out as unchecked, to be verified by whoever uses them: the
//! store's directory is only as trustworthy as its permissions, and files from an earlier
//! run were never checked by this process. A chunk leaves memory in the same step as it
//! leaves the store, so nothing is served from memory once its loss is announced.

use std::path::Path;
use std::sync::Mutex;

use tokio::sync::mpsc;

use manifest::{CheckedChunk, ChunkId, ChunkSink};
use seeder::{DirStore, StoredChunk};

use crate::Error;
use crate::sync::lock;

/// What the store holds; one lock, so a chunk leaves the files' list and the memory of
/// recent chunks in one step.
struct Lru {
    /// Chunks held (as files) and their stored sizes, least recently used first.
    map: lru::LruCache<ChunkId, u64>,
    /// Their total.
    bytes: u64,
    /// Held chunks whose checked bytes are also in memory, least recently used first.
    recent: lru::LruCache<ChunkId, CheckedChunk>,
    /// Their total.
    recent_bytes: u64,
}

impl Lru {
    /// Forgets a chunk's bytes in memory.
    fn forget_recent(&mut self, id: &ChunkId) {
        if let Some(c) = self.recent.pop(id) {
            self.recent_bytes -= c.stored().len() as u64;
        }
    }

    /// Drops a chunk from the store's list (and from memory); its stored size if it was
    /// held.
    fn drop_chunk(&mut self, id: &ChunkId) -> Option<u64> {
        self.forget_recent(id);
        let len = self.map.pop(id)?;
        self.bytes -= len;
        Some(len)
    }
}

/// A budgeted chunk store.
pub struct NodeStore {
    dir: DirStore,
    budget: u64,
    recent_budget: u64,
    lru: Mutex<Lru>,
    watchers: Mutex<Vec<mpsc::UnboundedSender<ChunkId>>>,
    /// Fault injection for the lab's tests: every chunk file write takes this much longer,
    /// as on a slow or fragmented disk.
    #[cfg(feature = "fault-injection")]
    write_delay: std::time::Duration,
}

impl NodeStore {
    /// Opens (creating) the store at `dir`, indexing chunks already there from an earlier
    /// run, within `budget` bytes of files, keeping up to `recent` bytes of the chunks that
    /// arrived last in memory as well.
    pub fn open(dir: &Path, budget: u64, recent: u64) -> Result<Self, Error> {
        let store = DirStore::create(dir)?;
        let mut lru = Lru {
            map: lru::LruCache::unbounded(),
            bytes: 0,
            recent: lru::LruCache::unbounded(),
            recent_bytes: 0,
        };
        for (id, len) in store.stored_chunks() {
            lru.bytes += len;
            lru.map.put(id, len);
        }
        let s = Self {
            dir: store,
            budget,
            recent_budget: recent,
            lru: Mutex::new(lru),
            watchers: Mutex::new(Vec::new()),
            #[cfg(feature = "fault-injection")]
            write_delay: std::time::Duration::ZERO,
        };
        s.evict();
        Ok(s)
    }

    /// Fault injection: makes every chunk file write take `delay` longer (a slow disk).
    #[cfg(feature = "fault-injection")]
    pub(crate) fn with_write_delay(mut self, delay: std::time::Duration) -> Self {
        self.write_delay = delay;
        self
    }

    /// Writes a chunk's file (slowly, under fault injection). An error names the file.
    fn write(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        #[cfg(feature = "fault-injection")]
        if !self.write_delay.is_zero() {
            // The injected fault itself: this thread is the slow disk.
            std::thread::sleep(self.write_delay);
        }
        self.dir.put(id, stored).map_err(|e| {
            let path = self.dir.chunk_path(id);
            std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        lock(&self.lru).bytes
    }

    /// Chunks held.
    pub fn len(&self) -> usize {
        lock(&self.lru).map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a chunk is held.
    pub fn contains(&self, id: &ChunkId) -> bool {
        lock(&self.lru).map.contains(id)
    }

    /// Bytes of recent chunks held in memory (within the `recent` budget).
    pub fn recent_bytes(&self) -> u64 {
        lock(&self.lru).recent_bytes
    }

    /// A chunk's stored bytes if they are in memory (touching it in the LRU); no I/O.
    pub fn get_cached(&self, id: &ChunkId) -> Option<StoredChunk> {
        let mut l = lock(&self.lru);
        l.map.get(id)?;
        l.recent.get(id).cloned().map(StoredChunk::Checked)
    }

    /// A chunk's stored bytes (touching it in the LRU), or `None`: from memory if it
    /// arrived recently, else read from its file. A listed chunk that cannot be read
    /// (deleted behind the store's back, I/O error, out of file descriptors) is dropped
    /// from the store and announced as lost, so that it is fetched again instead of being
    /// believed held.
    pub fn get(&self, id: &ChunkId) -> Option<StoredChunk> {
        // A chunk the store does not list is not served.
        if let Some(c) = self.get_cached(id) {
            return Some(c);
        }
        if !self.contains(id) {
            return None;
        }
        match self.dir.get_chunk(id) {
            Ok(bytes) => Some(StoredChunk::Unchecked(bytes.into())),
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "a stored chunk cannot be read; dropping it so that it is fetched again");
                let dropped = lock(&self.lru).drop_chunk(id).is_some();
                if dropped {
                    let _ = std::fs::remove_file(self.dir.chunk_path(id));
                    self.announce(&[*id]);
                }
                None
            }
        }
    }

    /// Every chunk the store drops from now on (evicted or lost) is sent here. A watcher
    /// goes away when its receiver is dropped.
    pub fn watch(&self) -> mpsc::UnboundedReceiver<ChunkId> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.watchers).push(tx);
        rx
    }

    fn announce(&self, gone: &[ChunkId]) {
        if gone.is_empty() {
            return;
        }
        lock(&self.watchers).retain(|w| gone.iter().all(|id| w.send(*id).is_ok()));
    }

    /// Stores a chunk the caller has verified.
    pub(crate) fn put_verified(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        if self.contains(id) {
            return Ok(());
        }
        self.write(id, stored)?;
        self.list(id, stored.len() as u64, None);
        Ok(())
    }

    /// Stores a chunk checked on arrival and keeps its bytes in memory, so sending it on
    /// and reading it do not read the file back.
    pub fn put_checked(&self, chunk: &CheckedChunk) -> std::io::Result<()> {
        let id = chunk.id();
        if !self.contains(id) {
            self.write(id, chunk.stored())?;
        }
        // Held already (from an earlier job, or a duplicate): the checked bytes are worth
        // keeping in memory all the same.
        self.list(id, chunk.stored().len() as u64, Some(chunk));
        Ok(())
    }

    /// Lists a chunk whose file is written, with its bytes in memory if given, then keeps
    /// both within their budgets.
    fn list(&self, id: &ChunkId, len: u64, chunk: Option<&CheckedChunk>) {
        {
            let mut l = lock(&self.lru);
            if l.map.put(*id, len).is_none() {
                l.bytes += len;
            }
            if let Some(c) = chunk
                && len <= self.recent_budget
                && l.recent.put(*id, c.clone()).is_none()
            {
                l.recent_bytes += len;
            }
            while l.recent_bytes > self.recent_budget {
                let Some((_, old)) = l.recent.pop_lru() else {
                    break;
                };
                l.recent_bytes -= old.stored().len() as u64;
            }
        }
        self.evict();
    }

    fn evict(&self) {
        let mut gone = Vec::new();
        {
            let mut l = lock(&self.lru);
            while l.bytes > self.budget {
                let Some(id) = l.map.peek_lru().map(|(id, _)| *id) else {
                    break;
                };
                l.drop_chunk(&id);
                tracing::debug!(chunk = %id.short(), "evicting chunk over the store budget");
                let _ = std::fs::remove_file(self.dir.chunk_path(&id));
                gone.push(id);
            }
        }
        // Outside the lock: a watcher may read the store.
        self.announce(&gone);
    }
}

impl seeder::ChunkStore for NodeStore {
    fn get(&self, id: &ChunkId) -> Option<StoredChunk> {
        NodeStore::get(self, id)
    }
    fn get_cached(&self, id: &ChunkId) -> Option<StoredChunk> {
        NodeStore::get_cached(self, id)
    }
    fn small_reads_are_cheap(&self) -> bool {
        true
    }
    fn contains(&self, id: &ChunkId) -> bool {
        NodeStore::contains(self, id)
    }
    fn put_checked(&self, chunk: &CheckedChunk) -> std::io::Result<()> {
        NodeStore::put_checked(self, chunk)
    }
}

impl ChunkSink for NodeStore {
    /// Chunks reach a node verified by the job; none is offered twice on purpose.
    fn stored_len(&self, _id: &ChunkId, _plain_len: u32) -> Option<u32> {
        None
    }
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.put_verified(id, stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::{encode_chunk, verify_chunk};

    /// A checked chunk of `len` incompressible bytes made from `seed`.
    fn chunk(seed: u8, len: usize) -> CheckedChunk {
        let mut plain = vec![0u8; len];
        blake3::Hasher::new()
            .update(&[seed])
            .finalize_xof()
            .fill(&mut plain);
        let id = ChunkId::of(&plain);
        verify_chunk(encode_chunk(&plain, 1).into(), &id, len as u32)
            .expect("valid")
            .0
    }

    fn store(budget: u64, recent: u64) -> (tempfile::TempDir, NodeStore) {
        let t = tempfile::tempdir().expect("tempdir");
        let s = NodeStore::open(&t.path().join("store"), budget, recent).expect("store");
        (t, s)
    }

    #[test]
    fn recent_chunks_stay_within_their_budget_and_older_ones_come_from_their_files() {
        let (_t, s) = store(1 << 30, 3 * 1001);
        let chunks: Vec<CheckedChunk> = (0..5).map(|i| chunk(i, 1000)).collect();
        for c in &chunks {
            s.put_checked(c).expect("put");
            assert!(s.recent_bytes() <= 3 * 1001, "{}", s.recent_bytes());
        }
        assert_eq!(s.recent_bytes(), 3 * 1001, "the last three");
        assert_eq!(s.len(), 5, "all of them in files");
        for c in &chunks[..2] {
            assert!(s.get_cached(c.id()).is_none());
            match s.get(c.id()) {
                Some(StoredChunk::Unchecked(b)) => assert_eq!(b, c.stored()),
                other => panic!("an older chunk from its file: {other:?}"),
            }
        }
        for c in &chunks[2..] {
            match s.get_cached(c.id()) {
                Some(StoredChunk::Checked(m)) => assert_eq!(m.stored(), c.stored()),
                other => panic!("a recent chunk from memory: {other:?}"),
            }
        }
        // A chunk larger than the whole budget is not kept in memory at all.
        let big = chunk(9, 4000);
        s.put_checked(&big).expect("put");
        assert!(s.get_cached(big.id()).is_none());
        assert_eq!(s.recent_bytes(), 3 * 1001);
    }

    /// A chunk the store evicts and announces must not be served from memory afterwards:
    /// the relay fetches it again on that announcement, and a child told it was sent
    /// would otherwise get bytes the store no longer accounts for.
    #[test]
    fn an_evicted_chunk_is_announced_and_no_longer_served_from_memory() {
        let (_t, s) = store(2 * 1001, 1 << 20);
        let mut lost = s.watch();
        let a = chunk(1, 1000);
        s.put_checked(&a).expect("put");
        s.put_checked(&chunk(2, 1000)).expect("put");
        assert!(lost.try_recv().is_err(), "within budget");
        s.put_checked(&chunk(3, 1000)).expect("put");
        assert_eq!(lost.try_recv().ok(), Some(*a.id()));
        assert!(s.get_cached(a.id()).is_none());
        assert!(s.get(a.id()).is_none());
        assert!(!s.contains(a.id()));
        assert_eq!(
            s.recent_bytes(),
            2 * 1001,
            "the evicted chunk left memory too"
        );
        assert_eq!(s.bytes(), 2 * 1001);
    }

    /// Bytes read back from a file are never handed out as checked: a file changed behind
    /// the store's back is caught by whoever verifies them.
    #[test]
    fn a_chunk_file_changed_behind_the_stores_back_is_handed_out_unchecked() {
        let (t, s) = store(1 << 30, 0);
        let c = chunk(4, 1000);
        s.put_checked(&c).expect("put");
        let path = DirStore::create(&t.path().join("store"))
            .expect("store")
            .chunk_path(c.id());
        let mut bad = c.stored().to_vec();
        bad[500] ^= 1;
        std::fs::write(&path, &bad).expect("tamper");
        match s.get(c.id()) {
            Some(StoredChunk::Unchecked(b)) => {
                assert!(
                    verify_chunk(b, c.id(), 1000).is_err(),
                    "refused by a reader"
                );
            }
            other => panic!("unchecked bytes from the file: {other:?}"),
        }
        // A missing file is a lost chunk, announced.
        let mut lost = s.watch();
        std::fs::remove_file(&path).expect("rm");
        assert!(s.get(c.id()).is_none());
        assert_eq!(lost.try_recv().ok(), Some(*c.id()));
    }
}

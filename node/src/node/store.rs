//! The node's chunk store: verified chunks as files in a memory-backed directory (diskless
//! nodes are the norm), content-addressed so jobs share identical chunks, with a byte
//! budget enforced by evicting the least recently used chunk.
//!
//! The store and the relays of the jobs using it must agree on what is held: every chunk
//! the store drops (evicted, or found missing or unreadable) is announced to the watchers
//! ([`NodeStore::watch`]), so a relay never believes it holds a chunk the store lost.

use std::path::Path;
use std::sync::Mutex;

use tokio::sync::mpsc;

use manifest::{ChunkId, ChunkSink};
use seeder::DirStore;

use crate::Error;

struct Lru {
    map: lru::LruCache<ChunkId, u64>,
    bytes: u64,
}

/// A budgeted chunk store.
pub struct NodeStore {
    dir: DirStore,
    budget: u64,
    lru: Mutex<Lru>,
    watchers: Mutex<Vec<mpsc::UnboundedSender<ChunkId>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl NodeStore {
    /// Opens (creating) the store at `dir`, indexing chunks already there from an earlier run.
    pub fn open(dir: &Path, budget: u64) -> Result<Self, Error> {
        let store = DirStore::create(dir)?;
        let mut lru = Lru {
            map: lru::LruCache::unbounded(),
            bytes: 0,
        };
        for shard in std::fs::read_dir(dir.join("chunks"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(shard.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let id = f
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<ChunkId>().ok());
                if let (Some(id), Ok(md)) = (id, f.metadata()) {
                    lru.bytes += md.len();
                    lru.map.put(id, md.len());
                }
            }
        }
        let s = Self {
            dir: store,
            budget,
            lru: Mutex::new(lru),
            watchers: Mutex::new(Vec::new()),
        };
        s.evict();
        Ok(s)
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

    /// A chunk's stored bytes (touching it in the LRU), or `None`. A listed chunk that
    /// cannot be read (deleted behind the store's back, I/O error, out of file
    /// descriptors) is dropped from the store and announced as lost, so that it is
    /// fetched again instead of being believed held.
    pub fn get(&self, id: &ChunkId) -> Option<Vec<u8>> {
        // Touch it in the LRU first; a chunk the store does not list is not served.
        lock(&self.lru).map.get(id)?;
        match self.dir.get_chunk(id) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "a stored chunk cannot be read; dropping it so that it is fetched again");
                let dropped = {
                    let mut l = lock(&self.lru);
                    l.map.pop(id).inspect(|len| l.bytes -= len).is_some()
                };
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
    pub fn put_verified(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        if self.contains(id) {
            return Ok(());
        }
        self.dir.put(id, stored)?;
        {
            let mut l = lock(&self.lru);
            if l.map.put(*id, stored.len() as u64).is_none() {
                l.bytes += stored.len() as u64;
            }
        }
        self.evict();
        Ok(())
    }

    fn evict(&self) {
        let mut gone = Vec::new();
        {
            let mut l = lock(&self.lru);
            while l.bytes > self.budget {
                let Some((id, len)) = l.map.pop_lru() else {
                    break;
                };
                l.bytes -= len;
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
    fn get(&self, id: &ChunkId) -> Option<Vec<u8>> {
        NodeStore::get(self, id)
    }
    fn contains(&self, id: &ChunkId) -> bool {
        NodeStore::contains(self, id)
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

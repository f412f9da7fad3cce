//! The node's chunk store: verified chunks as files in a memory-backed directory (diskless
//! nodes are the norm), content-addressed so jobs share identical chunks, with a byte
//! budget enforced by evicting the least recently used chunk.

use std::path::Path;
use std::sync::Mutex;

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

    /// A chunk's stored bytes (touching it in the LRU), or `None`.
    pub fn get(&self, id: &ChunkId) -> Option<Vec<u8>> {
        // Touch it in the LRU first; a chunk the store does not list is not served.
        lock(&self.lru).map.get(id)?;
        self.dir.get_chunk(id).ok()
    }

    /// Stores a chunk the caller has verified.
    pub fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
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
        let mut l = lock(&self.lru);
        while l.bytes > self.budget {
            let Some((id, len)) = l.map.pop_lru() else {
                break;
            };
            l.bytes -= len;
            tracing::debug!(chunk = %id.short(), "evicting chunk over the store budget");
            let _ = std::fs::remove_file(self.dir.chunk_path(&id));
        }
    }
}

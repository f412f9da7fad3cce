//! Where chunk bytes come from. The filesystem asks a [`ChunkSource`] for a chunk and
//! verifies the stored bytes it gets itself, so a source can be a local store now and a
//! parent peer in the tree later, and a lying source can never make the mount return wrong
//! data. A source that has already verified a chunk (a node that checked it on arrival)
//! hands over the [`Verified`] plain bytes instead, so no chunk is decoded and hashed twice.
//! A mounted job's source is [`JobSource`]: the node's store, else the tree on demand.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use manifest::{ChunkInfo, Index, Verified};
use peertree::relay::ChunkNo;
use seeder::DirStore;

use crate::job::JobCore;

/// What a fetch produced.
#[derive(Debug)]
pub enum Fetched {
    /// The stored (encoded) bytes, which the reader verifies.
    Stored(bytes::Bytes),
    /// The plain bytes, already decoded and checked against the chunk's id.
    Verified(Verified),
}

/// A fetch in progress.
pub type ChunkFuture = Pin<Box<dyn Future<Output = Result<Fetched, crate::Error>> + Send>>;

/// A provider of chunk bytes.
pub trait ChunkSource: Send + Sync + 'static {
    /// Starts fetching chunk `at` of the index. Must not block the caller; the work
    /// happens when the future is polled (on the runtime), so a slow fetch never holds a
    /// FUSE thread.
    fn fetch(&self, at: ChunkNo) -> ChunkFuture;

    /// Whether the chunk is available without waiting (decides passthrough eligibility).
    fn is_local(&self, at: ChunkNo) -> bool;

    /// The chunk at once, on the caller's thread, if this source holds it on this machine
    /// (in memory or in a file on a local file system): the caller may block on local I/O
    /// for it, never on the network. `None`: not here now; use [`ChunkSource::fetch`].
    /// A FUSE thread answers reads of local chunks this way, without handing them to
    /// another thread.
    fn fetch_local(&self, _at: ChunkNo) -> Option<Result<Fetched, crate::Error>> {
        None
    }
}

/// Chunk `at` of an index's chunk table, or the error that says it is not one of them.
pub(crate) fn chunk_info(chunks: &[ChunkInfo], at: ChunkNo) -> Result<ChunkInfo, crate::Error> {
    chunks
        .get(at.index())
        .copied()
        .ok_or(crate::Error::NoSuchChunk {
            chunk: at,
            chunks: chunks.len(),
        })
}

/// Chunks of one index from a [`DirStore`] on a local or shared file system.
pub struct StoreSource {
    store: Arc<DirStore>,
    /// The index's chunk table.
    chunks: Arc<[ChunkInfo]>,
    /// The store is on a local file system, so reading it never waits on a network.
    local: bool,
}

impl StoreSource {
    /// A source reading the chunks of `index` from `store`.
    pub fn new(store: DirStore, index: &Index) -> Self {
        let local = on_local_fs(store.root());
        Self {
            store: Arc::new(store),
            chunks: index.chunks.clone().into(),
            local,
        }
    }
}

/// Whether `path` is on a file system of this machine's memory or disks, by its type:
/// anything else (NFS, Lustre, GPFS, CIFS, FUSE, unknown) may wait on a network.
pub(crate) fn on_local_fs(path: &std::path::Path) -> bool {
    use nix::sys::statfs::{
        BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, F2FS_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC, statfs,
    };
    statfs(path).is_ok_and(|s| {
        [
            TMPFS_MAGIC,
            EXT4_SUPER_MAGIC,
            F2FS_SUPER_MAGIC,
            XFS_SUPER_MAGIC,
            BTRFS_SUPER_MAGIC,
        ]
        .contains(&s.filesystem_type())
    })
}

impl ChunkSource for StoreSource {
    fn fetch(&self, at: ChunkNo) -> ChunkFuture {
        let store = self.store.clone();
        let chunk = chunk_info(&self.chunks, at);
        Box::pin(async move {
            let id = chunk?.id;
            let stored = tokio::task::spawn_blocking(move || store.get_chunk(&id)).await??;
            Ok(Fetched::Stored(stored.into()))
        })
    }

    fn is_local(&self, at: ChunkNo) -> bool {
        chunk_info(&self.chunks, at).is_ok_and(|c| self.store.chunk_path(&c.id).exists())
    }

    fn fetch_local(&self, at: ChunkNo) -> Option<Result<Fetched, crate::Error>> {
        if !self.local {
            return None;
        }
        let chunk = match chunk_info(&self.chunks, at) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        match self.store.get_chunk(&chunk.id) {
            Ok(stored) => Some(Ok(Fetched::Stored(stored.into()))),
            Err(seeder::Error::MissingChunk(_)) => None,
            Err(e) => Some(Err(e.into())),
        }
    }
}

/// Chunks for a mounted job: from the node's store, or from the tree on demand.
pub(crate) struct JobSource {
    core: Arc<JobCore>,
    /// The node's store, which the job keeps its chunks in: always on this node (memory
    /// or local disk), so a reader may read it on its own thread.
    store: Arc<dyn seeder::ChunkStore>,
}

impl JobSource {
    /// Chunks of `core`'s job, held in `store` (the store the job writes them to).
    pub fn new(core: Arc<JobCore>, store: Arc<dyn seeder::ChunkStore>) -> Self {
        Self { core, store }
    }
}

impl ChunkSource for JobSource {
    fn fetch(&self, at: ChunkNo) -> ChunkFuture {
        let core = self.core.clone();
        Box::pin(async move { core.want(at).await })
    }

    fn is_local(&self, at: ChunkNo) -> bool {
        self.core.has(at)
    }

    fn fetch_local(&self, at: ChunkNo) -> Option<Result<crate::source::Fetched, crate::Error>> {
        use crate::source::Fetched;
        use seeder::StoredChunk;
        // Checked bytes from memory are decoded without hashing them again; bytes read
        // from a file are verified by the reader, as `JobCore::want` hands them out.
        let chunk = match crate::source::chunk_info(&self.core.index.chunks, at) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(match self.store.get(&chunk.id)? {
            StoredChunk::Checked(c) => match c.plain() {
                Ok(plain) => Fetched::Verified(plain),
                Err(_) => Fetched::Stored(c.stored().clone()),
            },
            StoredChunk::Unchecked(b) => Fetched::Stored(b),
        }))
    }
}

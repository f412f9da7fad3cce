//! Where chunk bytes come from. The filesystem asks a [`ChunkSource`] for a chunk's stored
//! bytes and verifies them itself, so a source can be a local store now and a parent peer in
//! the tree later, and a lying source can never make the mount return wrong data.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use manifest::{ChunkId, ChunkInfo};
use seeder::DirStore;

/// A fetch in progress: resolves to the chunk's stored (encoded) bytes.
pub type ChunkFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, crate::Error>> + Send>>;

/// A provider of chunk bytes.
pub trait ChunkSource: Send + Sync + 'static {
    /// Starts fetching a chunk. Must not block the caller; the work happens when the future
    /// is polled (on the runtime), so a slow fetch never holds a FUSE thread.
    fn fetch(&self, chunk: ChunkInfo) -> ChunkFuture;

    /// Whether the chunk is available without waiting (decides passthrough eligibility).
    fn is_local(&self, id: &ChunkId) -> bool;
}

/// Chunks from a [`DirStore`] on a local or shared file system.
pub struct StoreSource {
    store: Arc<DirStore>,
}

impl StoreSource {
    /// A source reading from `store`.
    pub fn new(store: DirStore) -> Self {
        Self {
            store: Arc::new(store),
        }
    }
}

impl ChunkSource for StoreSource {
    fn fetch(&self, chunk: ChunkInfo) -> ChunkFuture {
        let store = self.store.clone();
        Box::pin(async move {
            Ok(tokio::task::spawn_blocking(move || store.get_chunk(&chunk.id)).await??)
        })
    }

    fn is_local(&self, id: &ChunkId) -> bool {
        self.store.chunk_path(id).exists()
    }
}

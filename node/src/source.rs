//! Where chunk bytes come from. The filesystem asks a [`ChunkSource`] for a chunk and
//! verifies the stored bytes it gets itself, so a source can be a local store now and a
//! parent peer in the tree later, and a lying source can never make the mount return wrong
//! data. A source that has already verified a chunk (a node that checked it on arrival)
//! hands over the [`Verified`] plain bytes instead, so no chunk is decoded and hashed twice.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use manifest::{ChunkId, ChunkInfo, Verified};
use seeder::DirStore;

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
    /// Starts fetching chunk number `at` of the index (`chunk`). Must not block the caller;
    /// the work happens when the future is polled (on the runtime), so a slow fetch never
    /// holds a FUSE thread.
    fn fetch(&self, at: u32, chunk: ChunkInfo) -> ChunkFuture;

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
    fn fetch(&self, _at: u32, chunk: ChunkInfo) -> ChunkFuture {
        let store = self.store.clone();
        Box::pin(async move {
            let stored = tokio::task::spawn_blocking(move || store.get_chunk(&chunk.id)).await??;
            Ok(Fetched::Stored(stored.into()))
        })
    }

    fn is_local(&self, id: &ChunkId) -> bool {
        self.store.chunk_path(id).exists()
    }
}

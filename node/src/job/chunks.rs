//! A chunk's arrival at a job (verified, kept, handed to waiting readers, told to the
//! relay) and the reading of a chunk's stored bytes to send on or to read, each on the
//! task that needs it when the work is small, else on the blocking pool.

use std::sync::Arc;

use bytes::Bytes;
use manifest::{ChunkId, Verified, verify_chunk};
use peertree::NodeId;
use peertree::relay::ChunkNo;
use seeder::StoredChunk;

use super::{ArrivalHook, Arrivals, Input, JobCore, lock};

/// Chunks of at most this many stored bytes are verified and kept (or read from a node's
/// store) on the task that needs them: tens of microseconds of work, less than a hand-off
/// to another thread and back (four context switches each, 40% of the daemon's CPU on a
/// many-file layer).
pub(crate) const INLINE_CHUNK_MAX: usize = 64 << 10;

/// What became of a chunk handed to a job.
#[derive(Debug)]
pub(crate) enum ChunkTaken {
    /// Refused: its sender is not in the job's tree.
    Refused,
    /// Verified, kept and handed on already.
    Done,
    /// Being verified and kept on the blocking pool.
    Working(tokio::task::JoinHandle<()>),
}

impl ChunkTaken {
    /// The work still running for the chunk, if any.
    pub fn pending(self) -> Option<tokio::task::JoinHandle<()>> {
        match self {
            ChunkTaken::Working(w) => Some(w),
            ChunkTaken::Refused | ChunkTaken::Done => None,
        }
    }
}

impl JobCore {
    /// A chunk's stored bytes (touching it in the store's LRU), without blocking this task
    /// for long: from the store's memory of recent chunks, else read here if it is small
    /// and the store's reads are cheap (a node's own store), else on the blocking pool.
    pub(super) async fn stored(&self, id: &ChunkId, stored_len: u32) -> Option<StoredChunk> {
        if let Some(s) = self.bytes.get_cached(id) {
            return Some(s);
        }
        if stored_len as usize <= INLINE_CHUNK_MAX && self.bytes.small_reads_are_cheap() {
            return self.bytes.get(id);
        }
        let (bytes, id) = (self.bytes.clone(), *id);
        self.rt
            .spawn_blocking(move || bytes.get(&id))
            .await
            .ok()
            .flatten()
    }

    /// Chunk number `chunk` from the peer named `from_host`: verified, kept and handed to
    /// the waiting readers before the relay hears of it. A small chunk (see
    /// [`INLINE_CHUNK_MAX`]) is taken on the caller's task; a larger one (hashing a MiB,
    /// writing a file) on the blocking pool, while the stream's reader reads the next frame
    /// and awaits the returned task before it delivers that frame. So one stream's chunks
    /// are taken in order, and a sender faster than verification is held back by QUIC flow
    /// control instead of queueing chunks here without bound.
    pub(crate) fn on_chunk_msg(
        self: &Arc<Self>,
        from_host: &str,
        chunk: ChunkNo,
        data: Bytes,
    ) -> ChunkTaken {
        let Some(from) = self.sender(from_host) else {
            return ChunkTaken::Refused;
        };
        if data.len() <= INLINE_CHUNK_MAX && self.store_is_fast() {
            self.on_chunk(from, chunk, data);
            return ChunkTaken::Done;
        }
        let this = self.clone();
        ChunkTaken::Working(
            self.rt
                .spawn_blocking(move || this.on_chunk(from, chunk, data)),
        )
    }

    /// Whether chunks may be written on a runtime thread: not on the lab's slow disk.
    fn store_is_fast(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.knobs.slow_store.is_zero();
        #[cfg(not(feature = "fault-injection"))]
        true
    }

    pub(super) fn on_chunk(&self, from: NodeId, chunk: ChunkNo, data: Bytes) {
        let Some(info) = self.index.chunks.get(chunk.index()).copied() else {
            return;
        };
        let len = data.len() as u64;
        let (checked, plain) = match verify_chunk(data, &info.id, info.plain_len) {
            Ok(v) => v,
            Err(_) => {
                lock(&self.counters).bad_chunks += 1;
                tracing::error!(chunk = %info.id.short(), peer = ?from, "peer sent a chunk that does not match its id; dropping it and re-attaching");
                self.tell(Input::Chunk {
                    from,
                    chunk,
                    valid: false,
                });
                return;
            }
        };
        if let Err(e) = self.bytes.put_checked(&checked) {
            // Readers waiting for it still get it; the relay does not count it as held.
            self.wake(chunk, &plain);
            if !self
                .store_failed
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                let why = format!(
                    "its store cannot keep the job's chunks: {e}; free space there or make it \
                     writable (the daemon's --state-dir), then push again"
                );
                tracing::error!("leaving the job's tree: {why}");
                self.tell(Input::StoreFailed(why));
            }
            return;
        }
        {
            let mut c = lock(&self.counters);
            c.chunks_in += 1;
            c.bytes_in += len;
        }
        self.tell(Input::Chunk {
            from,
            chunk,
            valid: true,
        });
        self.wake(chunk, &plain);
        self.arrived(chunk, &plain);
    }

    /// Tells the job's listener of a chunk that arrived ([`JobCore::on_arrival`]), or
    /// notes it until one listens.
    pub(super) fn arrived(&self, chunk: ChunkNo, plain: &Verified) {
        let hook = match &mut *lock(&self.arrivals) {
            Arrivals::Hook(h) => h.clone(),
            Arrivals::Early(early) => {
                early.push(chunk);
                return;
            }
        };
        hook(chunk, plain);
    }

    /// From now on `hook` hears of each chunk that arrives verified. Returns the chunks
    /// that arrived before, which it did not hear of (each number once at most).
    pub(crate) fn on_arrival(&self, hook: ArrivalHook) -> Vec<ChunkNo> {
        match std::mem::replace(&mut *lock(&self.arrivals), Arrivals::Hook(hook)) {
            Arrivals::Early(early) => early,
            Arrivals::Hook(_) => Vec::new(),
        }
    }

    /// Hands a verified chunk to the readers waiting for it.
    pub(super) fn wake(&self, chunk: ChunkNo, plain: &Verified) {
        if let Some(ws) = lock(&self.waiters).remove(&chunk) {
            for w in ws {
                let _ = w.send(Ok(plain.clone()));
            }
        }
    }
}

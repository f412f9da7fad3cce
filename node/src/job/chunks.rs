//! A chunk's arrival at a job (verified, kept, handed to waiting readers, told to the
//! relay) and the reading of a chunk's stored bytes to send on or to read, each on the
//! task that needs it when the work is small, else on the blocking pool.

use std::sync::Arc;

use bytes::Bytes;
use manifest::{CheckedChunk, ChunkId, Verified, check_chunk};
use peertree::NodeId;
use peertree::relay::ChunkNo;
use seeder::StoredChunk;

use super::{ArrivalHook, Arrivals, Input, JobCore, lock};
use crate::fs::ahead::Placement;
use crate::peers::Ticket;

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

    /// Chunk number `chunk` from the peer named `from_host`, at its place `order` in its
    /// stream: verified, kept and handed to the waiting readers, then the relay hears of it
    /// once it has heard of every chunk before it on the stream. A small chunk (see
    /// [`INLINE_CHUNK_MAX`]) is taken on the caller's task; a larger one (hashing a MiB,
    /// writing a file) on the blocking pool, while the stream's reader reads on and may
    /// start the next ones beside it (`peers::InOrder`): one stream's chunks use more than
    /// one core, and a sender faster than that is held back by QUIC flow control.
    pub(crate) fn on_chunk_msg(
        self: &Arc<Self>,
        from_host: &str,
        chunk: ChunkNo,
        data: Bytes,
        order: Ticket,
    ) -> ChunkTaken {
        let Some(from) = self.sender(from_host) else {
            return ChunkTaken::Refused;
        };
        if self.knobs.filler {
            self.on_filler(from, chunk, &data, order);
            return ChunkTaken::Done;
        }
        if data.len() <= INLINE_CHUNK_MAX && self.store_is_fast() {
            self.on_chunk(from, chunk, data, order);
            return ChunkTaken::Done;
        }
        let this = self.clone();
        ChunkTaken::Working(
            self.rt
                .spawn_blocking(move || this.on_chunk(from, chunk, data, order)),
        )
    }

    /// Whether chunks may be written on a runtime thread: not on the lab's slow disk.
    fn store_is_fast(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.knobs.slow_store.is_zero();
        #[cfg(not(feature = "fault-injection"))]
        true
    }

    /// Takes a chunk (see [`JobCore::on_chunk_msg`]); the relay hears of it through
    /// `order`, in its stream's order.
    pub(super) fn on_chunk(
        self: &Arc<Self>,
        from: NodeId,
        chunk: ChunkNo,
        data: Bytes,
        order: Ticket,
    ) {
        let Some(info) = self.index.chunks.get(chunk.index()).copied() else {
            return;
        };
        let len = data.len() as u64;
        let tell = |valid: bool| {
            let this = self.clone();
            move || this.tell(Input::Chunk { from, chunk, valid })
        };
        let (checked, plain) = match check_chunk(data, &info) {
            Ok(v) => v,
            Err(_) => {
                lock(&self.counters).bad_chunks += 1;
                tracing::error!(chunk = %info.id.short(), peer = ?from, "peer sent a chunk that does not match its id; dropping it and re-attaching");
                order.release(tell(false));
                return;
            }
        };
        let plain = Arrived::new(&checked, plain);
        // Into the copies made ahead first, if the mount listens: a raw chunk written there
        // is kept there. Before it listens, the chunk is noted only once stored, since the
        // notes are read back from the store.
        let heard = self.listener().map(|hook| hook(chunk, &plain));
        let kept = match heard.as_ref().and_then(Option::as_ref) {
            Some(p) => self.bytes.put_placed(&checked, &p.file, p.at),
            None => self.bytes.put_checked(&checked),
        };
        if let Err(e) = kept {
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
        order.release(tell(true));
        // Woken once stored: a reader that found it missing before registered to wait.
        self.wake(chunk, &plain);
        if heard.is_none() {
            self.arrived(chunk, &plain);
        }
        if plain.decoded() {
            lock(&self.counters).decoded += 1;
        }
    }

    /// A rates probe's filler chunk: counted and told to the relay when it has the size the
    /// filler says, else told as a bad one (its sender re-attaches its child). It is
    /// payload only: not verified, not kept, never read.
    fn on_filler(&self, from: NodeId, chunk: ChunkNo, data: &Bytes, order: Ticket) {
        let want = self.index.chunks.get(chunk.index()).map(|c| c.stored_len);
        let valid = want.is_some_and(|l| l as usize == data.len());
        if valid {
            let mut c = lock(&self.counters);
            c.chunks_in += 1;
            c.bytes_in += data.len() as u64;
        } else {
            lock(&self.counters).bad_chunks += 1;
        }
        let inputs = self.inputs.clone();
        order.release(move || {
            let _ = inputs.send(Input::Chunk { from, chunk, valid });
        });
    }

    /// The job's listener to arrivals, once there is one ([`JobCore::on_arrival`]).
    fn listener(&self) -> Option<ArrivalHook> {
        match &*lock(&self.arrivals) {
            Arrivals::Hook(h) => Some(h.clone()),
            Arrivals::Early(_) => None,
        }
    }

    /// Tells the job's listener of a stored chunk that arrived ([`JobCore::on_arrival`]),
    /// or notes it until one listens. A raw chunk the listener writes into a copy moves
    /// there ([`JobCore::keep_placed`]).
    pub(super) fn arrived(&self, chunk: ChunkNo, plain: &Arrived<'_>) {
        let hook = match &mut *lock(&self.arrivals) {
            Arrivals::Hook(h) => h.clone(),
            Arrivals::Early(early) => {
                early.push(chunk);
                return;
            }
        };
        if let Some(place) = hook(chunk, plain) {
            self.keep_placed(chunk, &place);
        }
    }

    /// A chunk that arrived before the mount listened was since written at `place` in a
    /// copy made ahead: the store may keep it there ([`seeder::ChunkStore::keep_placed`]).
    pub(crate) fn keep_placed(&self, chunk: ChunkNo, place: &Placement) {
        if let Some(info) = self.index.chunks.get(chunk.index()) {
            (self.bytes).keep_placed(&info.id, info.plain_len, &place.file, place.at);
        }
    }

    /// From now on `hook` hears of each chunk that arrives verified. Returns the chunks
    /// that arrived before, which it did not hear of (each number once at most).
    pub(crate) fn on_arrival(&self, hook: ArrivalHook) -> Vec<ChunkNo> {
        match std::mem::replace(&mut *lock(&self.arrivals), Arrivals::Hook(hook)) {
            Arrivals::Early(early) => early,
            Arrivals::Hook(_) => Vec::new(),
        }
    }

    /// Hands a verified chunk to the readers waiting for it (decoding it if none did).
    pub(super) fn wake(&self, chunk: ChunkNo, plain: &Arrived<'_>) {
        let Some(ws) = lock(&self.waiters).remove(&chunk) else {
            return;
        };
        let got = plain.plain();
        for w in ws {
            let _ = w.send(got.cloned().ok_or_else(|| {
                crate::Error::Manifest(manifest::Error::CorruptChunk {
                    id: *plain.checked.id(),
                    reason: "it matched its stored hash but does not decode to its id".into(),
                })
            }));
        }
    }
}

/// A chunk that arrived checked, and its plain bytes as the arrival needs them: given when
/// the check made them, else decoded at the first ask (a waiting reader, a copy made
/// ahead) and at most once. A chunk checked by its stored hash that nothing reads now is
/// never decoded here.
pub(crate) struct Arrived<'a> {
    checked: &'a CheckedChunk,
    plain: std::cell::OnceCell<Option<Verified>>,
}

impl<'a> Arrived<'a> {
    /// `checked`, with its plain bytes if the check made them.
    pub(crate) fn new(checked: &'a CheckedChunk, plain: Option<Verified>) -> Self {
        let plain = plain.map_or_else(std::cell::OnceCell::new, |p| Some(p).into());
        Self { checked, plain }
    }

    /// Whether a compressed chunk's plain bytes were made: by its check, or since.
    pub(crate) fn decoded(&self) -> bool {
        self.checked.compressed() && self.plain.get().is_some_and(Option::is_some)
    }

    /// The plain bytes, decoded now if need be; `None` (logged) if they do not decode to
    /// the chunk's id, which only an index that lies about the chunk's stored form makes.
    pub(crate) fn plain(&self) -> Option<&Verified> {
        self.plain
            .get_or_init(|| match self.checked.plain() {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::error!(chunk = %self.checked.id().short(), error = %e, "a chunk that matched its stored hash does not decode to its id: the index's publisher is broken; it is never read");
                    None
                }
            })
            .as_ref()
    }
}

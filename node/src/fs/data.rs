//! File contents: fetching chunks through a [`ChunkSource`], verifying each against its id
//! before a byte is used, caching plain chunks in a byte-bounded LRU, and keeping at most
//! one fetch in flight per chunk however many readers wait for it.
//!
//! A read whose chunks are cached or held on this machine is answered on the caller's
//! thread ([`Data::read_now`]): decoding a chunk costs less than handing the read to a task
//! and back. Only a read that must wait for a chunk from elsewhere goes to a task.
//!
//! Every fetch is bounded in time ([`Data::with_read_timeout`]): a chunk that cannot be
//! had within the bound fails the read with EIO and an error line, so no reader waits for
//! ever inside FUSE (fuser answers the kernel's interrupts with ENOSYS, so a waiting read
//! ends only when the daemon answers it). A chunk that could not be had is remembered for
//! a while ([`FAILURE_MEMORY`]): further reads of it fail at once instead of each waiting
//! the bound again (a whole-file `cat` took twice the bound, and every retry as long).
//!
//! Also materialises whole files into the [`Copies`] directory so the FUSE layer can hand
//! them to the kernel for passthrough reads, and checks a copy against the index before a
//! mount first uses it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use manifest::{EntryIdx, EntryKind, FileData, Slot, verify_chunk};
use peertree::relay::{ChunkNo, Schedule};
use tokio::sync::OnceCell;

use super::FsError;
use super::ahead::{Ahead, Placement};
use super::copies::{Copies, CopyUser, Lease, copy_name, verify_copy};
use super::tree::Tree;
use crate::source::{ChunkSource, Fetched};
use crate::sync::lock;

type Shared = Arc<OnceCell<Result<Bytes, FsError>>>;

struct Lru {
    map: lru::LruCache<ChunkNo, Bytes>,
    bytes: u64,
    budget: u64,
}

/// Counters for tests and status output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataStats {
    /// Fetches started through the source.
    pub fetches: u64,
    /// Chunks that failed verification.
    pub corrupt: u64,
    /// Chunks this reader decoded and checked itself (a source's already verified chunks
    /// are not counted: they are not checked twice).
    pub decoded: u64,
    /// Of the fetches, those of local chunks read on the reader's own thread.
    pub local: u64,
}

/// The content side of a mounted layer.
pub struct Data {
    tree: Arc<Tree>,
    source: Arc<dyn ChunkSource>,
    cache: Mutex<Lru>,
    inflight: Mutex<HashMap<ChunkNo, Shared>>,
    stats: Mutex<DataStats>,
    read_timeout: Duration,
    /// This mount, towards the copies it uses.
    copy_user: CopyUser,
    /// Copies this mount has checked against its index (or made itself).
    verified: Mutex<HashSet<String>>,
    /// Chunks whose fetch timed out lately: the error, and until when it stands.
    failed: Mutex<HashMap<ChunkNo, (Instant, FsError)>>,
    /// How long such a chunk is remembered ([`FAILURE_MEMORY`]).
    failure_memory: Duration,
    /// Copies made as chunks arrive ([`Data::with_ahead`]).
    ahead: Option<Ahead>,
    /// The kernel refused passthrough: copies are of no use, none is made ahead.
    ahead_off: AtomicBool,
}

/// How long a chunk whose fetch timed out is remembered as not to be had: long enough that
/// the kernel's retries and a reader going on through the file do not wait again, short
/// enough that a re-attached tree is used soon (a chunk that arrives meanwhile is read at
/// once: only chunks still not here are refused).
pub(crate) const FAILURE_MEMORY: Duration = Duration::from_secs(10);

/// How long a read waits for a chunk by default before failing with EIO: long enough for
/// the tree to notice a dead parent (seconds) and re-attach, short enough that a reader is
/// never stuck for good.
pub(crate) const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);

static NEXT_COPY_USER: AtomicU64 = AtomicU64::new(1);

/// The bytes of a read: a slice of one cached chunk when the read falls inside it (the
/// usual case for kernel reads of a chunked file, answered without copying), else a
/// buffer assembled for it.
pub enum ReadBytes {
    /// A slice of a cached chunk.
    Shared(Bytes),
    /// Assembled from several chunks, holes or inline data.
    Owned(Vec<u8>),
}

impl std::ops::Deref for ReadBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBytes::Shared(slice) => slice,
            ReadBytes::Owned(v) => v,
        }
    }
}

impl ReadBytes {
    /// As an owned buffer (copies a shared slice).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            ReadBytes::Shared(slice) => slice.to_vec(),
            ReadBytes::Owned(v) => v,
        }
    }
}

/// Chunk fetches a materialisation keeps in flight: enough to keep every core decoding
/// while the next chunks are read, few enough to bound memory (each is one chunk).
const MATERIALIZE_WINDOW: usize = 8;

/// The slots a read of `[off, off + len)` touches, clipped to the file.
struct Span {
    start: u64,
    end: u64,
}

impl Data {
    /// Contents over `tree`, from `source`, caching up to `cache_bytes` of plain chunks.
    pub fn new(tree: Arc<Tree>, source: Arc<dyn ChunkSource>, cache_bytes: u64) -> Self {
        Self {
            tree,
            source,
            cache: Mutex::new(Lru {
                map: lru::LruCache::unbounded(),
                bytes: 0,
                budget: cache_bytes,
            }),
            inflight: Mutex::new(HashMap::new()),
            stats: Mutex::new(DataStats::default()),
            read_timeout: DEFAULT_READ_TIMEOUT,
            copy_user: CopyUser(NEXT_COPY_USER.fetch_add(1, Ordering::Relaxed)),
            verified: Mutex::new(HashSet::new()),
            failed: Mutex::new(HashMap::new()),
            failure_memory: FAILURE_MEMORY,
            ahead: None,
            ahead_off: AtomicBool::new(false),
        }
    }

    /// Makes the passthrough copies of the files of at least `min_size` bytes that `push`
    /// needs to start ([`Ahead::plan`]) in `copies` as their chunks arrive
    /// ([`Data::arrived`]), unless the kernel refuses passthrough ([`Data::no_passthrough`]).
    pub(crate) fn with_ahead(
        mut self,
        push: &Schedule,
        copies: Arc<Copies>,
        min_size: u64,
    ) -> Self {
        self.ahead = Some(Ahead::plan(
            self.tree.index(),
            push,
            min_size,
            copies,
            self.copy_user,
        ));
        self
    }

    /// The kernel refused passthrough for this mount: no copy is made ahead from now on.
    pub fn no_passthrough(&self) {
        self.ahead_off.store(true, Ordering::Relaxed);
    }

    /// Chunk number `ci` arrived at this node, verified, with the plain bytes `plain`:
    /// written into the copies made ahead that need it. Its caller already paid for the
    /// decoding, so a file whose chunks all arrived is a copy before its first open.
    /// Returns where a raw chunk's bytes were written, for the store to keep it there.
    pub(crate) fn arrived(&self, ci: ChunkNo, plain: &[u8]) -> Option<Placement> {
        let ahead = self.ahead.as_ref()?;
        if self.ahead_off.load(Ordering::Relaxed) {
            return None;
        }
        let done = ahead.arrived(ci, plain);
        if !done.made.is_empty() {
            // Written by this mount from verified bytes: no check before its first use.
            lock(&self.verified).extend(done.made);
        }
        done.placed
    }

    /// Whether a copy made ahead still waits for chunk `ci`: only then is an arriving
    /// chunk's plain bytes worth decoding for it.
    pub fn awaits(&self, ci: ChunkNo) -> bool {
        self.ahead
            .as_ref()
            .is_some_and(|a| !self.ahead_off.load(Ordering::Relaxed) && a.awaits(ci))
    }

    /// Chunks that arrived before the copies made ahead could be told of them (before the
    /// mount was up): read from the source, checked, and written as if arriving now.
    /// Returns where raw ones were written, for the store to keep them there.
    pub(crate) fn arrived_earlier(&self, chunks: &[ChunkNo]) -> Vec<(ChunkNo, Placement)> {
        let Some(ahead) = &self.ahead else {
            return Vec::new();
        };
        let mut placed = Vec::new();
        for &ci in chunks {
            if !ahead.awaits(ci) {
                continue;
            }
            if let Some(Ok(plain)) = self.plain_now(ci)
                && let Some(p) = self.arrived(ci, &plain)
            {
                placed.push((ci, p));
            }
        }
        placed
    }

    /// Remembers a chunk whose fetch timed out for `t` instead of [`FAILURE_MEMORY`].
    pub fn with_failure_memory(mut self, t: Duration) -> Self {
        self.failure_memory = t;
        self
    }

    /// Bounds every chunk fetch to `t`; a fetch that takes longer fails with
    /// [`FsError::TimedOut`] (EIO).
    pub(crate) fn with_read_timeout(mut self, t: Duration) -> Self {
        self.read_timeout = t;
        self
    }

    /// This mount, towards the copies it uses (release them with [`Copies::release`]).
    pub(crate) fn copy_user(&self) -> CopyUser {
        self.copy_user
    }

    /// Counters so far.
    pub fn stats(&self) -> DataStats {
        *lock(&self.stats)
    }

    fn file(&self, e: EntryIdx) -> Result<(u64, &FileData), FsError> {
        let idx = self.tree.index();
        match &idx.entry(idx.resolve(e)).kind {
            EntryKind::File { size, data } => Ok((*size, data)),
            EntryKind::Dir => Err(FsError::IsDir),
            _ => Err(FsError::Invalid),
        }
    }

    fn span(size: u64, off: u64, len: u32) -> Span {
        let start = off.min(size);
        Span {
            start,
            end: off.saturating_add(u64::from(len)).min(size),
        }
    }

    fn cached(&self, ci: ChunkNo) -> Option<Bytes> {
        lock(&self.cache).map.get(&ci).cloned()
    }

    /// Answers a read at once, on the caller's thread, if every chunk it needs is cached
    /// or local to the source (read, decoded and verified here, each chunk once); `None`
    /// means the caller must go the slow way ([`Data::read`]) on a task: a chunk is to be
    /// fetched from elsewhere, or another reader is fetching it now. A read inside one
    /// chunk borrows the chunk instead of copying it.
    pub fn read_now(
        &self,
        file: EntryIdx,
        off: u64,
        len: u32,
    ) -> Option<Result<ReadBytes, FsError>> {
        self.read_with(file, off, len, |ci| self.chunk_now(ci))
    }

    /// Answers a read from memory if every chunk it needs is cached.
    pub(crate) fn read_cached(
        &self,
        file: EntryIdx,
        off: u64,
        len: u32,
    ) -> Option<Result<ReadBytes, FsError>> {
        self.read_with(file, off, len, |ci| self.cached(ci).map(Ok))
    }

    /// A read assembled from the chunks `get` gives (`None` from it: not now).
    fn read_with(
        &self,
        file: EntryIdx,
        off: u64,
        len: u32,
        mut get: impl FnMut(ChunkNo) -> Option<Result<Bytes, FsError>>,
    ) -> Option<Result<ReadBytes, FsError>> {
        let (size, data) = match self.file(file) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let span = Self::span(size, off, len);
        match data {
            FileData::Inline(bytes) => Some(Ok(ReadBytes::Owned(
                bytes[span.start as usize..span.end as usize].to_vec(),
            ))),
            FileData::Chunks(slots) => {
                let cs = u64::from(self.tree.index().chunk_size);
                if span.start < span.end && span.start / cs == (span.end - 1) / cs {
                    let slot = (span.start / cs) as usize;
                    let in_chunk = (span.start % cs) as usize;
                    let range = in_chunk..in_chunk + (span.end - span.start) as usize;
                    return match chunk_of(&slots[slot]) {
                        Some(ci) => Some(get(ci)?.map(|c| ReadBytes::Shared(c.slice(range)))),
                        None => Some(Ok(ReadBytes::Owned(vec![0; range.len()]))),
                    };
                }
                let mut out = Vec::with_capacity((span.end - span.start) as usize);
                for (slot, range) in pieces(&span, cs) {
                    match chunk_of(&slots[slot]) {
                        None => out.resize(out.len() + range.len(), 0),
                        Some(ci) => match get(ci)? {
                            Ok(chunk) => out.extend_from_slice(&chunk[range]),
                            Err(e) => return Some(Err(e)),
                        },
                    }
                }
                Some(Ok(ReadBytes::Owned(out)))
            }
        }
    }

    /// Whether a read of `[off, off + len)` needs a chunk that is neither cached here nor
    /// local to the source, so it waits for the chunk to come from elsewhere (on a node: a
    /// demand request up the tree). Looks without touching the cache's order.
    pub(crate) fn must_wait(&self, file: EntryIdx, off: u64, len: u32) -> bool {
        let Ok((size, FileData::Chunks(slots))) = self.file(file) else {
            return false;
        };
        let idx = self.tree.index();
        let cs = u64::from(idx.chunk_size);
        let uncached: Vec<ChunkNo> = {
            let cache = lock(&self.cache);
            pieces(&Self::span(size, off, len), cs)
                .filter_map(|(slot, _)| slots.get(slot).and_then(chunk_of))
                .filter(|ci| !cache.map.contains(ci))
                .collect()
        };
        // The source is asked without the cache's lock held.
        uncached.into_iter().any(|ci| !self.source.is_local(ci))
    }

    /// Reads `[off, off + len)` of a file, fetching missing chunks (concurrently) and waiting
    /// for them. Holes read as zeros without a fetch.
    pub async fn read(
        self: Arc<Self>,
        file: EntryIdx,
        off: u64,
        len: u32,
    ) -> Result<Vec<u8>, FsError> {
        self.read_shared(file, off, len)
            .await
            .map(ReadBytes::into_vec)
    }

    /// Like [`Data::read`], but a read inside one chunk borrows the cached chunk.
    pub(crate) async fn read_shared(
        self: Arc<Self>,
        file: EntryIdx,
        off: u64,
        len: u32,
    ) -> Result<ReadBytes, FsError> {
        let (size, data) = self.file(file)?;
        let span = Self::span(size, off, len);
        let FileData::Chunks(slots) = data else {
            return self
                .read_cached(file, off, len)
                .unwrap_or(Err(FsError::Invalid));
        };
        let cs = u64::from(self.tree.index().chunk_size);
        let first = span.start / cs;
        let last = if span.end > span.start {
            (span.end - 1) / cs
        } else {
            first
        };
        let wanted: Vec<ChunkNo> = (first..=last.min(slots.len().saturating_sub(1) as u64))
            .filter_map(|s| slots.get(s as usize).and_then(chunk_of))
            .collect();
        // Concurrently. The first error is the read's answer at once; the other fetches
        // go on without it (none is aborted half-way: others may be waiting on the same
        // single flight, and a fetch that times out is remembered).
        let mut fetches = tokio::task::JoinSet::new();
        for &ci in &wanted {
            fetches.spawn(self.clone().chunk(ci));
        }
        while let Some(r) = fetches.join_next().await {
            if let Err(e) = r.expect("chunk fetch tasks do not panic") {
                fetches.detach_all();
                return Err(e);
            }
        }
        // Everything needed is now cached unless the budget is smaller than one read; fall
        // back to a fresh fetch per chunk in that case.
        if let Some(r) = self.read_cached(file, off, len) {
            return r;
        }
        let mut out = Vec::with_capacity((span.end - span.start) as usize);
        for (slot, range) in pieces(&span, cs) {
            match chunk_of(&slots[slot]) {
                None => out.resize(out.len() + range.len(), 0),
                Some(ci) => out.extend_from_slice(&self.clone().chunk(ci).await?[range]),
            }
        }
        Ok(ReadBytes::Owned(out))
    }

    /// One verified chunk, from the cache or a single shared fetch.
    pub async fn chunk(self: Arc<Self>, ci: ChunkNo) -> Result<Bytes, FsError> {
        if let Some(c) = self.cached(ci) {
            return Ok(c);
        }
        let cell = lock(&self.inflight).entry(ci).or_default().clone();
        let result = cell
            .get_or_init(|| {
                let this = self.clone();
                async move { this.fetch_verified(ci).await }
            })
            .await
            .clone();
        self.land(ci, &cell, &result);
        result
    }

    /// The error of a fetch of `ci` that timed out less than the failure memory ago, if
    /// the chunk is still not here.
    fn recently_failed(&self, ci: ChunkNo) -> Option<FsError> {
        let mut failed = lock(&self.failed);
        let (until, e) = failed.get(&ci)?;
        if Instant::now() >= *until || self.source.is_local(ci) {
            failed.remove(&ci);
            return None;
        }
        tracing::debug!(
            chunk = %ci,
            "failing a read at once: its chunk could not be had lately"
        );
        Some(e.clone())
    }

    /// One verified chunk now, on this thread, if it is cached or local to the source;
    /// `None` if it is not local, or if another reader is fetching it (then
    /// [`Data::chunk`] joins that flight). Shares the single flight of [`Data::chunk`]:
    /// the flight is claimed, run to its end at once, or left to its owner.
    fn chunk_now(&self, ci: ChunkNo) -> Option<Result<Bytes, FsError>> {
        use std::task::{Context, Poll, Waker};
        if let Some(c) = self.cached(ci) {
            return Some(Ok(c));
        }
        let info = *self.tree.index().chunks.get(ci.index())?;
        let cell = lock(&self.inflight).entry(ci).or_default().clone();
        /// The source does not hold the chunk here: the flight is left unclaimed.
        struct NotLocal;
        let init = cell.get_or_try_init(|| async {
            let fetched = self.source.fetch_local(ci).ok_or(NotLocal)?;
            self.count_local();
            Ok(fetched
                .map_err(|e| FsError::unavailable("reading a local chunk", e))
                .and_then(|f| self.check(info, f)))
        });
        // The flight's work is all synchronous, so one poll runs it to its end; it stays
        // pending only while another reader owns the flight.
        let polled = std::pin::pin!(init).poll(&mut Context::from_waker(Waker::noop()));
        let result = match polled {
            Poll::Ready(Ok(r)) => r.clone(),
            Poll::Ready(Err(NotLocal)) | Poll::Pending => return None,
        };
        self.land(ci, &cell, &result);
        Some(result)
    }

    /// A chunk's plain bytes now if cached or local, else `None`; without caching it
    /// (a copy is being made of it, whose reads the kernel serves) nor joining a flight.
    fn plain_now(&self, ci: ChunkNo) -> Option<Result<Bytes, FsError>> {
        if let Some(c) = self.cached(ci) {
            return Some(Ok(c));
        }
        let info = *self.tree.index().chunks.get(ci.index())?;
        let fetched = self.source.fetch_local(ci)?;
        self.count_local();
        Some(
            fetched
                .map_err(|e| FsError::unavailable("reading a local chunk", e))
                .and_then(|f| self.check(info, f)),
        )
    }

    fn count_local(&self) {
        let mut st = lock(&self.stats);
        st.fetches += 1;
        st.local += 1;
    }

    /// Ends a flight: caches its chunk, then removes the flight (if it is still `cell`).
    /// Cached before the flight ends: a reader arriving in between finds one or the other,
    /// never neither (which would fetch the chunk a second time).
    fn land(&self, ci: ChunkNo, cell: &Shared, result: &Result<Bytes, FsError>) {
        if let Ok(chunk) = result {
            self.insert(ci, chunk.clone());
        }
        let mut inflight = lock(&self.inflight);
        if inflight.get(&ci).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            inflight.remove(&ci);
        }
    }

    fn insert(&self, ci: ChunkNo, chunk: Bytes) {
        let mut c = lock(&self.cache);
        if c.map.contains(&ci) || c.budget == 0 {
            return;
        }
        c.bytes += chunk.len() as u64;
        c.map.put(ci, chunk);
        while c.bytes > c.budget {
            match c.map.pop_lru() {
                Some((_, old)) => c.bytes -= old.len() as u64,
                None => break,
            }
        }
    }

    /// Fetches and verifies a chunk without caching it (a source that verified it already
    /// hands over plain bytes, which are not checked again). Fails at once with the error
    /// of a fetch of it that timed out lately, unless the chunk is here now: every reader
    /// (a read, a passthrough copy) comes through here.
    async fn fetch_verified(&self, ci: ChunkNo) -> Result<Bytes, FsError> {
        let info = *self
            .tree
            .index()
            .chunks
            .get(ci.index())
            .ok_or(FsError::Invalid)?;
        if let Some(e) = self.recently_failed(ci) {
            return Err(e);
        }
        lock(&self.stats).fetches += 1;
        let fetch = self.source.fetch(ci);
        let stored = match tokio::time::timeout(self.read_timeout, fetch).await {
            Ok(r) => r.map_err(|e| {
                if let crate::Error::Unobtainable { .. } = e {
                    // The job said so once, naming the sources it asked; each read that
                    // fails at once after it is not worth a line.
                    tracing::debug!(chunk = %info.id.short(), error = %e, "chunk fetch failed");
                } else {
                    tracing::warn!(chunk = %info.id.short(), error = %e, "chunk fetch failed");
                }
                FsError::unavailable("fetching a chunk", e)
            })?,
            Err(_) => {
                tracing::error!(
                    chunk = %info.id.short(),
                    waited_s = self.read_timeout.as_secs_f64(),
                    "a read waited too long for a chunk and fails with EIO; check the node's parent with `teesfs status` and the tree with `teesfs health`"
                );
                let e = FsError::TimedOut {
                    chunk: info.id.short(),
                    waited: self.read_timeout,
                };
                let until = Instant::now() + self.failure_memory;
                lock(&self.failed).insert(ci, (until, e.clone()));
                return Err(e);
            }
        };
        self.check(info, stored)
    }

    /// The plain bytes of a fetched chunk: verified ones as they are, stored ones decoded
    /// and checked against the chunk's id first.
    fn check(&self, info: manifest::ChunkInfo, fetched: Fetched) -> Result<Bytes, FsError> {
        let stored = match fetched {
            Fetched::Verified(plain) => return Ok(plain.into_bytes()),
            Fetched::Stored(stored) => stored,
        };
        lock(&self.stats).decoded += 1;
        let (_, plain) = verify_chunk(stored, &info.id, info.plain_len).map_err(|e| {
            lock(&self.stats).corrupt += 1;
            tracing::error!(chunk = %info.id, error = %e, "refusing a corrupt chunk: reads of it fail with EIO");
            FsError::Corrupt(e.to_string())
        })?;
        Ok(plain.into_bytes())
    }

    /// Whether every chunk of a file is available locally (passthrough candidates).
    pub(crate) fn all_local(&self, file: EntryIdx) -> bool {
        match self.file(file) {
            Ok((_, FileData::Chunks(slots))) => slots
                .iter()
                .all(|s| chunk_of(s).is_none_or(|ci| self.source.is_local(ci))),
            _ => false,
        }
    }

    /// The whole verified file as a copy in `copies`, leased for one open file: an
    /// existing copy is checked against the index before this mount first uses it (and
    /// made again if it fails); a new one is written from verified chunks. The copy's name
    /// is a digest of the file's chunk list, so equal files share it.
    pub async fn materialize(
        self: Arc<Self>,
        file: EntryIdx,
        copies: &Arc<Copies>,
    ) -> Result<(Lease, PathBuf), FsError> {
        let (size, data) = self.file(file)?;
        let FileData::Chunks(slots) = data else {
            return Err(FsError::Invalid);
        };
        let idx = self.tree.index();
        let pieces: Vec<Option<manifest::ChunkId>> = slots
            .iter()
            .map(|s| s.chunk_index().map(|ci| idx.chunks[ci].id))
            .collect();
        let cs = u64::from(idx.chunk_size);
        // Holes take no memory in the copy: the budget counts the bytes of chunks.
        let cost = (pieces.iter().flatten().count() as u64 * cs).min(size);
        let name = copy_name(size, &pieces);
        if let Some((lease, path)) = copies.lease(&name, self.copy_user) {
            if lock(&self.verified).contains(&name) {
                return Ok((lease, path));
            }
            let check = path.clone();
            let checked =
                tokio::task::spawn_blocking(move || verify_copy(&check, size, cs, &pieces))
                    .await
                    .map_err(|e| FsError::unavailable("checking a passthrough copy", e))?;
            match checked {
                Ok(()) => {
                    lock(&self.verified).insert(name);
                    return Ok((lease, path));
                }
                Err(e) => {
                    tracing::error!(error = %e, "a passthrough copy does not match the index; making it again");
                    drop(lease);
                    copies.discard(&name);
                }
            }
        }
        if !copies.reserve(cost) {
            return Err(FsError::NoCopyRoom);
        }
        let unavailable = |e: std::io::Error| FsError::unavailable("making a passthrough copy", e);
        let tmp = tempfile::NamedTempFile::new_in(copies.dir()).map_err(unavailable)?;
        tmp.as_file().set_len(size).map_err(unavailable)?;
        // Local chunks are decoded here, one after the other, without a task each. Others
        // are fetched and verified a window at once so every core decodes and reads
        // overlap decoding; this file is written by this task alone, as chunks complete.
        // Returning early (an error) drops the set, which cancels the fetches left.
        let mut todo = slots
            .iter()
            .enumerate()
            .filter_map(|(pos, s)| chunk_of(s).map(|ci| (pos as u64 * cs, ci)));
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < MATERIALIZE_WINDOW {
                let Some((at, ci)) = todo.next() else { break };
                if let Some(plain) = self.plain_now(ci) {
                    tmp.as_file()
                        .write_all_at(&plain?, at)
                        .map_err(unavailable)?;
                    continue;
                }
                let this = self.clone();
                running.spawn(async move { this.fetch_verified(ci).await.map(|p| (at, p)) });
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            let (at, plain) =
                match done.map_err(|e| FsError::unavailable("fetching a chunk for a copy", e))? {
                    Ok(piece) => piece,
                    Err(e) => {
                        // The fetches left run to their end (a timeout is remembered, so
                        // reads of those chunks do not wait for it again).
                        running.detach_all();
                        return Err(e);
                    }
                };
            tmp.as_file()
                .write_all_at(&plain, at)
                .map_err(unavailable)?;
        }
        tmp.persist(copies.dir().join(&name))
            .map_err(|e| unavailable(e.error))?;
        lock(&self.verified).insert(name.clone());
        Ok(copies.add(&name, cost, self.copy_user))
    }
}

/// The pieces of `span` one per chunk slot: the slot and the byte range inside its chunk.
/// The chunk a slot of a file points at, by its number; `None` for a hole.
fn chunk_of(slot: &Slot) -> Option<ChunkNo> {
    slot.chunk_index().and_then(ChunkNo::at)
}

fn pieces(span: &Span, cs: u64) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> {
    let end = span.end;
    std::iter::successors(Some(span.start), move |&pos| {
        let next = (pos / cs + 1) * cs;
        (next < end).then_some(next)
    })
    .filter(move |&pos| pos < end)
    .map(move |pos| {
        let in_chunk = (pos % cs) as usize;
        let take = (cs - pos % cs).min(end - pos) as usize;
        ((pos / cs) as usize, in_chunk..in_chunk + take)
    })
}

#[cfg(test)]
#[path = "data_tests.rs"]
mod tests;

//! The node's chunk store: verified chunks as files in a memory-backed directory (diskless
//! nodes are the norm), content-addressed so jobs share identical chunks, with a byte
//! budget enforced by evicting the least recently used chunk.
//!
//! A job mounted here pins its layer's chunks ([`NodeStore::pin`]): the budget evicts only
//! chunks that no running job needs (those kept from earlier jobs, least recently used
//! first), so a job's files stay readable for as long as it runs, whatever its root does.
//! A job whose layer does not fit beside the chunks the node's other jobs pin is refused
//! when it starts, naming the sizes and the setting to raise, rather than admitted to lose
//! chunks it may never get back.
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
//!
//! A raw chunk that a copy made ahead already wrote is kept there: the store links the
//! copy's file instead of writing the bytes again ([`NodeStore::put_placed`],
//! [`crate::placed`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use manifest::{CheckedChunk, ChunkId, ChunkSink, Index};
use seeder::{DirStore, StoredChunk};

use crate::Error;
use crate::placed::{self, Packs, Place};
use crate::sync::lock;

/// What the store holds; one lock, so a chunk leaves the files' list and the memory of
/// recent chunks in one step.
struct Lru {
    /// Chunks held (as files) that no running job pins, and their stored sizes, least
    /// recently used first: the only ones eviction takes.
    map: lru::LruCache<ChunkId, u64>,
    /// Chunks held that a running job pins, and their stored sizes.
    pinned_held: HashMap<ChunkId, u64>,
    /// The total of both.
    bytes: u64,
    /// Every chunk some running job pins (held or still to come): how many jobs pin it,
    /// and its stored size by the job's index.
    pins: HashMap<ChunkId, (u32, u64)>,
    /// The total stored size of `pins`: what the running jobs may need at once.
    pinned_bytes: u64,
    /// Held chunks whose checked bytes are also in memory, least recently used first.
    recent: lru::LruCache<ChunkId, CheckedChunk>,
    /// Their total.
    recent_bytes: u64,
    /// Held chunks kept at their place in a copy's file, not in a file of their own.
    placed: Packs,
}

impl Lru {
    /// Forgets a chunk's bytes in memory.
    fn forget_recent(&mut self, id: &ChunkId) {
        if let Some(c) = self.recent.pop(id) {
            self.recent_bytes -= c.stored().len() as u64;
        }
    }

    /// Drops a chunk from the store's list (and from memory); where it was kept if it was
    /// held. A placed chunk's bytes stay charged while its pack has other links.
    fn drop_chunk(&mut self, id: &ChunkId) -> Option<Kept> {
        self.forget_recent(id);
        let len = self.map.pop(id).or_else(|| self.pinned_held.remove(id))?;
        match self.placed.forget(id, len) {
            Some((place, freed)) => {
                self.bytes -= freed;
                Some(Kept::Placed(place))
            }
            None => {
                self.bytes -= len;
                Some(Kept::File)
            }
        }
    }

    /// A held chunk's stored size.
    fn stored_len(&self, id: &ChunkId) -> Option<u64> {
        self.map
            .peek(id)
            .or_else(|| self.pinned_held.get(id))
            .copied()
    }

    /// Whether a chunk is held.
    fn holds(&self, id: &ChunkId) -> bool {
        self.map.contains(id) || self.pinned_held.contains_key(id)
    }

    /// Lists a held chunk (again): among the pinned if a job pins it, else as the most
    /// recently used of the rest.
    fn hold(&mut self, id: ChunkId, len: u64) {
        let new = if self.pins.contains_key(&id) {
            self.pinned_held.insert(id, len).is_none()
        } else {
            self.map.put(id, len).is_none()
        };
        if new {
            self.bytes += len;
        }
    }
}

/// Where a dropped chunk was kept: the file to remove.
enum Kept {
    File,
    Placed(Place),
}

/// The chunks one running job pins ([`NodeStore::pin`]); unpinned by [`Pin::release`] or
/// when dropped.
pub struct Pin {
    store: Arc<NodeStore>,
    chunks: Mutex<Vec<(ChunkId, u64)>>,
}

impl Pin {
    /// Gives the chunks back to eviction (after the job's mount is gone). Once only.
    pub fn release(&self) {
        let chunks = std::mem::take(&mut *lock(&self.chunks));
        self.store.unpin(&chunks);
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.release();
    }
}

/// What a job's layer would need of the store, and why it cannot have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    /// The stored size of the layer's chunks.
    pub layer: u64,
    /// Of those, what no running job pins yet (what pinning this layer adds).
    pub more: u64,
    /// What the node's running jobs pin already.
    pub pinned: u64,
    /// The store's budget.
    pub budget: u64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use bytesize::ByteSize;
        write!(
            f,
            "the layer needs {} in this node's store ({} more than its running jobs hold), \
             but the running jobs keep {} of its {} budget; raise the daemon's \
             --store-budget (TEESFS_DAEMON_OPTS in /etc/teesfs/daemon.env) to at least {}, or \
             run the job where fewer jobs share the node",
            ByteSize(self.layer),
            ByteSize(self.more),
            ByteSize(self.pinned),
            ByteSize(self.budget),
            ByteSize(self.pinned + self.more),
        )
    }
}

/// A budgeted chunk store.
pub struct NodeStore {
    dir: DirStore,
    /// Where placed chunks' links are ([`crate::placed::dir`]).
    placed_dir: PathBuf,
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
            pinned_held: HashMap::new(),
            bytes: 0,
            pins: HashMap::new(),
            pinned_bytes: 0,
            recent: lru::LruCache::unbounded(),
            recent_bytes: 0,
            placed: Packs::default(),
        };
        for (id, len) in store.stored_chunks() {
            lru.bytes += len;
            lru.map.put(id, len);
        }
        let placed_dir = placed::dir(dir);
        for (id, place) in placed::scan(&placed_dir) {
            if lru.holds(&id) {
                // Kept twice by a run that died between the two: the chunk file stays.
                let _ = std::fs::remove_file(placed::path(&placed_dir, &id, &place));
                continue;
            }
            lru.hold(id, u64::from(place.len) + 1);
            lru.placed.add(id, place);
        }
        let s = Self {
            dir: store,
            placed_dir,
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

    /// Under fault injection, the slow disk: every write to the store takes this long more.
    fn slow_disk(&self) {
        #[cfg(feature = "fault-injection")]
        if !self.write_delay.is_zero() {
            // The injected fault itself: this thread is the slow disk.
            std::thread::sleep(self.write_delay);
        }
    }

    /// Writes a chunk's file (slowly, under fault injection). An error names the file.
    fn write(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.slow_disk();
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
        let l = lock(&self.lru);
        l.map.len() + l.pinned_held.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a chunk is held.
    pub fn contains(&self, id: &ChunkId) -> bool {
        lock(&self.lru).holds(id)
    }

    /// What running jobs pin: the stored size of their layers' chunks (held or to come).
    pub fn pinned_bytes(&self) -> u64 {
        lock(&self.lru).pinned_bytes
    }

    /// Bytes held that no running job pins: chunks kept from earlier jobs, evicted first.
    pub fn cached_bytes(&self) -> u64 {
        let l = lock(&self.lru);
        l.bytes - l.pinned_held.values().sum::<u64>()
    }

    /// Pins the chunks of `index` for a job that starts here: eviction leaves them alone
    /// until the returned [`Pin`] is released. Refused when they do not fit in the budget
    /// beside what the node's running jobs pin already.
    pub fn pin(self: &Arc<Self>, index: &Index) -> Result<Pin, NoRoom> {
        self.pin_chunks(index.chunks.iter().map(|c| (c.id, u64::from(c.stored_len))))
    }

    /// [`NodeStore::pin`] of chunks given by id and stored size.
    fn pin_chunks(
        self: &Arc<Self>,
        chunks: impl IntoIterator<Item = (ChunkId, u64)>,
    ) -> Result<Pin, NoRoom> {
        let mut chunks: Vec<(ChunkId, u64)> = chunks.into_iter().collect();
        chunks.sort_unstable_by_key(|c| c.0);
        chunks.dedup_by_key(|c| c.0);
        let mut l = lock(&self.lru);
        let layer: u64 = chunks.iter().map(|c| c.1).sum();
        let more: u64 = chunks
            .iter()
            .filter(|c| !l.pins.contains_key(&c.0))
            .map(|c| c.1)
            .sum();
        if l.pinned_bytes + more > self.budget {
            return Err(NoRoom {
                layer,
                more,
                pinned: l.pinned_bytes,
                budget: self.budget,
            });
        }
        for &(id, len) in &chunks {
            let e = l.pins.entry(id).or_insert((0, len));
            e.0 += 1;
            if e.0 == 1 {
                l.pinned_bytes += len;
                if let Some(held) = l.map.pop(&id) {
                    l.pinned_held.insert(id, held);
                }
            }
        }
        drop(l);
        Ok(Pin {
            store: self.clone(),
            chunks: Mutex::new(chunks),
        })
    }

    /// Unpins a job's chunks: those no other job pins go back to eviction as its first
    /// candidates (a running job's layer is worth more than one that ended).
    fn unpin(&self, chunks: &[(ChunkId, u64)]) {
        if chunks.is_empty() {
            return;
        }
        {
            let mut l = lock(&self.lru);
            for (id, _) in chunks {
                let Some(e) = l.pins.get_mut(id) else {
                    continue;
                };
                e.0 -= 1;
                if e.0 > 0 {
                    continue;
                }
                let (_, len) = l.pins.remove(id).unwrap_or_default();
                l.pinned_bytes -= len;
                if let Some(held) = l.pinned_held.remove(id) {
                    l.map.put(*id, held);
                    l.map.demote(id);
                }
            }
        }
        self.evict();
    }

    /// Bytes of recent chunks held in memory (within the `recent` budget).
    pub fn recent_bytes(&self) -> u64 {
        lock(&self.lru).recent_bytes
    }

    /// A chunk's stored bytes if they are in memory (touching it in the LRU); no I/O.
    pub fn get_cached(&self, id: &ChunkId) -> Option<StoredChunk> {
        let mut l = lock(&self.lru);
        if l.map.get(id).is_none() && !l.pinned_held.contains_key(id) {
            return None;
        }
        l.recent.get(id).cloned().map(StoredChunk::Checked)
    }

    /// A chunk's stored bytes (touching it in the LRU), or `None`: from memory if it
    /// arrived recently, else read from its file or its place. A listed chunk that cannot be read
    /// (deleted behind the store's back, I/O error, out of file descriptors) is dropped
    /// from the store and announced as lost, so that it is fetched again instead of being
    /// believed held.
    pub fn get(&self, id: &ChunkId) -> Option<StoredChunk> {
        // A chunk the store does not list is not served.
        if let Some(c) = self.get_cached(id) {
            return Some(c);
        }
        let place = {
            let l = lock(&self.lru);
            if !l.holds(id) {
                return None;
            }
            l.placed.get(id).copied()
        };
        // A place is checked as it is read: it shares its bytes with a copy, which nothing
        // stops root from changing, and a bad one is then dropped and fetched again like a
        // lost file, not served as unchecked bytes that every later read refuses.
        let mut read = self.read_kept(id, place.as_ref());
        if read.is_err() && place.is_none() {
            // Its file may have just made way for a place ([`NodeStore::keep_placed`]).
            if let Some(p) = lock(&self.lru).placed.get(id).copied() {
                read = self.read_kept(id, Some(&p));
            }
        }
        match read {
            Ok(chunk) => Some(chunk),
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "a stored chunk cannot be read; dropping it so that it is fetched again");
                let dropped = lock(&self.lru).drop_chunk(id);
                if let Some(kept) = dropped {
                    self.remove(id, &kept);
                    self.announce(&[*id]);
                }
                None
            }
        }
    }

    /// A held chunk read from its place, or from its file.
    fn read_kept(&self, id: &ChunkId, place: Option<&Place>) -> std::io::Result<StoredChunk> {
        match place {
            Some(p) => placed::read(&self.placed_dir, id, p).map(StoredChunk::Checked),
            None => (self.dir.get_chunk(id))
                .map(|b| StoredChunk::Unchecked(b.into()))
                .map_err(std::io::Error::other),
        }
    }

    /// Removes a dropped chunk's file or link.
    fn remove(&self, id: &ChunkId, kept: &Kept) {
        let _ = std::fs::remove_file(match kept {
            Kept::File => self.dir.chunk_path(id),
            Kept::Placed(p) => placed::path(&self.placed_dir, id, p),
        });
    }

    /// Chunks kept at their place in a copy's file ([`NodeStore::put_placed`]).
    pub fn placed(&self) -> usize {
        lock(&self.lru).placed.len()
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

    /// Stores a raw chunk checked on arrival whose plain bytes the caller wrote at `at` in
    /// `file` (a copy made ahead): links that file as the chunk's place instead of writing
    /// the bytes again. A compressed chunk, one held already, or one that cannot be linked
    /// (the copy lost its name, another file system) is stored as by
    /// [`NodeStore::put_checked`].
    pub fn put_placed(
        &self,
        chunk: &CheckedChunk,
        file: &std::fs::File,
        at: u64,
    ) -> std::io::Result<()> {
        let id = chunk.id();
        let len = chunk.stored().len() as u64;
        if chunk.compressed() || self.contains(id) {
            return self.put_checked(chunk);
        }
        self.slow_disk();
        let place = match placed::link(&self.placed_dir, file, id, at, (len - 1) as u32) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(chunk = %id.short(), error = %e, "cannot keep a chunk in its copy; writing it");
                return self.put_checked(chunk);
            }
        };
        // Unless another thread stored it meanwhile: its keeping stands.
        self.record_place(id, place, |l| !l.holds(id));
        self.list(id, len, Some(chunk));
        Ok(())
    }

    /// Records chunk `id` at its linked `place` if `take` holds of the store under its lock,
    /// else removes the link; whether it did.
    fn record_place(&self, id: &ChunkId, place: Place, take: impl Fn(&Lru) -> bool) -> bool {
        let taken = {
            let mut l = lock(&self.lru);
            let taken = take(&l);
            if taken {
                l.placed.add(*id, place);
            }
            taken
        };
        if !taken {
            let _ = std::fs::remove_file(placed::path(&self.placed_dir, id, &place));
        }
        taken
    }

    /// A raw chunk held in a file of its own whose `plain_len` plain bytes the caller has
    /// since written at `at` in `file` (a copy made ahead of chunks that arrived before its
    /// mount): keeps the chunk there instead and removes its file, giving its memory back.
    /// Nothing changes for a compressed chunk, one placed already, or one that cannot be
    /// linked.
    pub fn keep_placed(&self, id: &ChunkId, plain_len: u32, file: &std::fs::File, at: u64) {
        // Held in a file of its own, raw (a compressed chunk's stored form is shorter).
        let in_file = |l: &Lru| {
            l.placed.get(id).is_none() && l.stored_len(id) == Some(u64::from(plain_len) + 1)
        };
        if !in_file(&lock(&self.lru)) {
            return;
        }
        let Ok(place) = placed::link(&self.placed_dir, file, id, at, plain_len) else {
            return;
        };
        if self.record_place(id, place, in_file) {
            // A reader that chose the file just before finds its place instead (`get`).
            let _ = std::fs::remove_file(self.dir.chunk_path(id));
        }
    }

    /// Lists a chunk whose file is written, with its bytes in memory if given, then keeps
    /// both within their budgets.
    fn list(&self, id: &ChunkId, len: u64, chunk: Option<&CheckedChunk>) {
        {
            let mut l = lock(&self.lru);
            l.hold(*id, len);
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
            // Only unpinned chunks are candidates; pinned ones fit (see `pin`).
            while l.bytes > self.budget {
                let Some(id) = l.map.peek_lru().map(|(id, _)| *id) else {
                    break;
                };
                let kept = l.drop_chunk(&id);
                tracing::debug!(chunk = %id.short(), "evicting chunk over the store budget");
                if let Some(kept) = &kept {
                    self.remove(&id, kept);
                }
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
    fn put_placed(
        &self,
        chunk: &CheckedChunk,
        file: &std::fs::File,
        at: u64,
    ) -> std::io::Result<()> {
        NodeStore::put_placed(self, chunk, file, at)
    }
    fn keep_placed(&self, id: &ChunkId, plain_len: u32, file: &std::fs::File, at: u64) {
        NodeStore::keep_placed(self, id, plain_len, file, at);
    }
}

impl ChunkSink for NodeStore {
    /// Chunks reach a node verified by the job; none is offered twice on purpose.
    fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<manifest::StoredForm> {
        None
    }
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.put_verified(id, stored)
    }
}

#[cfg(test)]
#[path = "store_placed_tests.rs"]
mod placed_tests;

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

//! Recording what a program needs from the layer: the files it opens and the names it looks
//! up that the layer lacks, each once, in the order of first access. The FUSE adapter feeds
//! it; the order becomes the urgent set and its push order.
//!
//! Two users: `teesfs record` records everything a command does against a local mount, and
//! the daemon records every job it mounts, so the next publish can learn the urgent set from
//! a real run (`teesfs record --from-job`). A job's record takes what the job uses while it
//! starts up, that is until the node holds the whole layer ([`Recorder::close_window`]); from
//! then on only reads that still had to wait for a chunk are added. A record keeps at most
//! [`MAX_RECORDED`] accesses, so a job that walks a huge layer cannot grow the daemon without
//! bound. No I/O here: the window is closed by whoever learns that the layer arrived.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use indexmap::IndexSet;
use manifest::{EntryKind, Index};

use super::tree::Ino;
use crate::sync::lock;

/// The most accesses one record keeps (some 50 bytes each, so about 50 MB at most, plus the
/// names looked up in vain); later ones are counted in [`Recording::dropped`], not kept.
pub(crate) const MAX_RECORDED: usize = 1_000_000;

/// One recorded access.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A file was opened (or executed, or mapped), or a read of it waited for a chunk.
    Opened(Ino),
    /// `name` was looked up in directory `parent` and the layer has no such entry.
    Absent(Ino, Box<[u8]>),
}

/// Why an access is noted, which decides whether it is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// An open or a lookup: kept while the window is open.
    Use,
    /// A read that had to wait for a chunk from elsewhere (a demand fetch): always kept,
    /// since it is exactly what the urgent set should have brought in advance.
    Wait,
}

/// Whether an access for `cause` is kept while the window is `open` or closed.
fn kept(cause: Cause, open: bool) -> bool {
    open || cause == Cause::Wait
}

/// The accesses in first-access order, bounded by a limit.
#[derive(Debug)]
struct Log {
    order: IndexSet<Access>,
    limit: usize,
    dropped: u64,
}

impl Log {
    /// Adds `a` unless it is there already; returns whether the log was full for it.
    fn push(&mut self, a: Access) -> bool {
        if self.order.contains(&a) {
            return false;
        }
        if self.order.len() >= self.limit {
            self.dropped += 1;
            return true;
        }
        self.order.insert(a);
        false
    }
}

/// Collects accesses in first-access order; shared by the FUSE threads.
#[derive(Debug)]
pub struct Recorder {
    log: Mutex<Log>,
    /// Open until the node holds the whole layer (always, for `teesfs record`).
    window: AtomicBool,
    /// Whether the record being full was logged.
    warned_full: AtomicBool,
    /// Counts every open and lookup, recorded or not (applications are active).
    uses: Vec<Arc<AtomicU64>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::with_limit(MAX_RECORDED)
    }
}

/// What a recording found, as layer paths (relative, without a leading `/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// Files opened (or waited for), in order of first access.
    pub opened: Vec<Vec<u8>>,
    /// Names looked up that the layer does not have, in order of first lookup.
    pub absent: Vec<Vec<u8>>,
    /// Total size of the opened files.
    pub opened_bytes: u64,
    /// Accesses not kept because the record was full.
    pub dropped: u64,
}

impl Recorder {
    /// A recorder keeping at most `limit` accesses, with its window open.
    pub(crate) fn with_limit(limit: usize) -> Self {
        Self {
            log: Mutex::new(Log {
                order: IndexSet::new(),
                limit,
                dropped: 0,
            }),
            window: AtomicBool::new(true),
            warned_full: AtomicBool::new(false),
            uses: Vec::new(),
        }
    }

    /// Also counts every open and lookup into `uses` (a job's sign of applications
    /// starting, whether or not the window is still open); may be given more than once.
    pub fn counting(mut self, uses: Arc<AtomicU64>) -> Self {
        self.uses.push(uses);
        self
    }

    /// Notes an open or a lookup (kept while the window is open; later repeats are ignored).
    pub fn note(&self, a: Access) {
        self.note_for(a, Cause::Use);
    }

    /// Notes that a read of `ino` had to wait for a chunk (kept whether or not the window
    /// is open).
    pub(crate) fn note_wait(&self, ino: Ino) {
        self.note_for(Access::Opened(ino), Cause::Wait);
    }

    fn note_for(&self, a: Access, cause: Cause) {
        for u in &self.uses {
            u.fetch_add(1, Ordering::Relaxed);
        }
        // Checked without the lock: once the layer has arrived, opens cost one load.
        if !kept(cause, self.window.load(Ordering::Acquire)) {
            return;
        }
        let full = lock(&self.log).push(a);
        if full && !self.warned_full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limit = MAX_RECORDED,
                "the record of the files a job used is full; later ones are not recorded"
            );
        }
    }

    /// The node holds the whole layer: from now on only reads that wait are recorded.
    pub(crate) fn close_window(&self) {
        self.window.store(false, Ordering::Release);
    }

    /// Whether opens and lookups are still recorded.
    pub fn window_open(&self) -> bool {
        self.window.load(Ordering::Acquire)
    }

    /// The accesses so far as layer paths of `index` (the index the mount serves).
    pub fn recording(&self, index: &Index) -> Recording {
        let g = lock(&self.log);
        let path = |ino: Ino| {
            ino.entry()
                .filter(|e| e.get() < index.entries.len())
                .map(|e| (e, index.path_of(e)))
        };
        let mut out = Recording {
            dropped: g.dropped,
            ..Recording::default()
        };
        for a in &g.order {
            match a {
                Access::Opened(ino) => {
                    if let Some((e, p)) = path(*ino) {
                        out.opened.push(p);
                        if let EntryKind::File { size, .. } = index.entry(index.resolve(e)).kind {
                            out.opened_bytes += size;
                        }
                    }
                }
                Access::Absent(parent, name) => {
                    if let Some((_, mut p)) = path(*parent) {
                        if !p.is_empty() {
                            p.push(b'/');
                        }
                        p.extend_from_slice(name);
                        out.absent.push(p);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::{Entry, EntryFlags, EntryIdx, EntryKind, FileData, Meta};

    fn index() -> Index {
        let e = |parent: u32, name: &str, kind: EntryKind| Entry {
            parent: EntryIdx(parent),
            name: name.as_bytes().into(),
            meta: Meta::default(),
            flags: EntryFlags::default(),
            kind,
        };
        let file = |n: usize| EntryKind::File {
            size: n as u64,
            data: FileData::Inline(vec![b'x'; n].into()),
        };
        Index {
            chunk_size: 4096,
            chunks: vec![],
            entries: vec![
                e(0, "", EntryKind::Dir),
                e(0, "bin", EntryKind::Dir),
                e(1, "app", file(1)),
                e(0, "top", file(1)),
                e(0, "late", file(10)),
                e(0, "huge", file(100)),
            ],
            urgent: vec![],
            image: None,
        }
    }

    const APP: Ino = Ino(3);
    const TOP: Ino = Ino(4);
    const LATE: Ino = Ino(5);
    const HUGE: Ino = Ino(6);

    #[test]
    fn first_access_order_without_repeats() {
        let r = Recorder::default();
        r.note(Access::Opened(APP));
        r.note(Access::Absent(Ino(2), (*b"libx.so").into()));
        r.note(Access::Opened(TOP));
        r.note(Access::Opened(APP));
        r.note(Access::Absent(Ino::ROOT, (*b"nope").into()));
        r.note(Access::Absent(Ino(2), (*b"libx.so").into()));
        let rec = r.recording(&index());
        assert_eq!(rec.opened, [b"bin/app".to_vec(), b"top".to_vec()]);
        assert_eq!(rec.absent, [b"bin/libx.so".to_vec(), b"nope".to_vec()]);
        assert_eq!(rec.opened_bytes, 2);
        assert_eq!(rec.dropped, 0);
    }

    #[test]
    fn opens_before_the_whole_layer_are_kept_after_it_only_reads_that_wait() {
        let r = Recorder::default();
        r.note(Access::Opened(APP));
        r.note(Access::Absent(Ino::ROOT, (*b"probe").into()));
        r.note_wait(TOP);
        assert!(r.window_open());
        r.close_window();
        assert!(!r.window_open());
        r.note(Access::Opened(LATE));
        r.note(Access::Absent(Ino::ROOT, (*b"late-probe").into()));
        // Evicted and fetched again after the layer had arrived: still wanted early.
        r.note_wait(HUGE);
        // Already recorded: keeps its first place.
        r.note_wait(APP);
        let rec = r.recording(&index());
        assert_eq!(
            rec.opened,
            [b"bin/app".to_vec(), b"top".to_vec(), b"huge".to_vec()]
        );
        assert_eq!(rec.absent, [b"probe".to_vec()]);
        assert_eq!(rec.opened_bytes, 102);
    }

    #[test]
    fn a_wait_for_a_file_already_opened_does_not_list_it_twice() {
        let r = Recorder::default();
        r.note(Access::Opened(TOP));
        r.note_wait(TOP);
        r.note_wait(APP);
        r.note(Access::Opened(APP));
        let rec = r.recording(&index());
        assert_eq!(rec.opened, [b"top".to_vec(), b"bin/app".to_vec()]);
    }

    #[test]
    fn a_full_record_keeps_its_first_entries_and_counts_the_rest() {
        let r = Recorder::with_limit(2);
        r.note(Access::Opened(APP));
        r.note(Access::Opened(TOP));
        r.note(Access::Opened(LATE));
        r.note_wait(HUGE);
        // Repeats of what is kept are not losses.
        r.note(Access::Opened(APP));
        let rec = r.recording(&index());
        assert_eq!(rec.opened, [b"bin/app".to_vec(), b"top".to_vec()]);
        assert_eq!(rec.dropped, 2);
    }

    #[test]
    fn inodes_outside_the_index_are_left_out() {
        let r = Recorder::default();
        r.note(Access::Opened(Ino(99)));
        r.note(Access::Absent(Ino(0), (*b"x").into()));
        r.note(Access::Opened(TOP));
        let rec = r.recording(&index());
        assert_eq!(rec.opened, [b"top".to_vec()]);
        assert!(rec.absent.is_empty());
    }
}

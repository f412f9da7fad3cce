//! Copies made ahead: as a job's chunks arrive at a node, verified and decoded, their plain
//! bytes are written straight into the passthrough copies of the files of the push's urgent
//! set they belong to (of every file the push streams, for a push without one). A file
//! whose chunks have all arrived is then a copy before anyone opens it, so its first
//! open decodes nothing and its reads are the kernel's (passthrough), as from a plain
//! directory. Without this, the first open of each file decodes every chunk of it a second
//! time (the daemon decoded them once to verify them) and writes the copy while the
//! application waits.
//!
//! A raw chunk's plain bytes are its stored bytes, so where they were written into a copy
//! of a file of raw chunks only, the store keeps the chunk there rather than writing it a
//! second time ([`Placement`], `crate::placed`).
//!
//! Must not:
//! - write a byte that was not verified (callers hand over [`manifest::Verified`] bytes);
//! - evict anything: room comes from the free part of the copies budget
//!   ([`Copies::hold`]), so files made ahead never push out copies of files in use, and
//!   files beyond the budget are left to be made at their first open;
//! - wait on the network: it runs on the thread that verified the chunk.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use manifest::{EntryIdx, EntryKind, FileData, Index};
use peertree::relay::{ChunkNo, Schedule};
use tempfile::TempPath;

use super::copies::{Copies, CopyUser, copy_name};
use crate::sync::lock;

/// A copy being made: where its bytes go, and how many chunk places are still to fill.
struct Partial {
    name: String,
    size: u64,
    /// Bytes the copy counts against the budget (its chunks' bytes, holes excluded).
    cost: u64,
    /// Chunk places not yet written.
    left: u32,
    /// The copy being written, from its first chunk on (room held for it meanwhile).
    file: Option<(Arc<File>, TempPath)>,
    /// Not made ahead (no room, a failed write, or the copy exists already).
    dropped: bool,
    /// Every chunk of the file is stored raw (by the index): its places may keep them.
    raw: bool,
}

/// Where an arriving raw chunk's plain bytes were written: a copy's file, open, and the
/// offset. The file is written nowhere else at that place and never truncated.
pub(crate) struct Placement {
    pub file: Arc<File>,
    pub at: u64,
}

/// What a chunk's arrival did: the copies it completed, and a place that keeps it.
#[derive(Default)]
pub(crate) struct Arrival {
    pub made: Vec<String>,
    pub placed: Option<Placement>,
}

struct State {
    /// For each chunk number not yet arrived, the places it fills: (file, byte offset).
    wanted: HashMap<ChunkNo, Vec<(EntryIdx, u64)>>,
    files: HashMap<EntryIdx, Partial>,
}

/// The copies a mount makes ahead of their first open, as chunks arrive.
pub(crate) struct Ahead {
    copies: Arc<Copies>,
    user: CopyUser,
    state: Mutex<State>,
}

impl Ahead {
    /// Plans a copy of each file of at least `min_size` bytes (the files the mount serves
    /// through passthrough) that a start needs, made in `copies` for `user` as chunks
    /// arrive: the files with a chunk in the push's urgent set (what its application opens
    /// to start, however the push chose it: the index's list, globs, a learned record), or
    /// with a chunk the push streams where it has no urgent set. Copies of the rest would
    /// cost each node CPU and memory for files that may never be opened; they are made at
    /// their first open.
    pub fn plan(
        index: &Index,
        push: &Schedule,
        min_size: u64,
        copies: Arc<Copies>,
        user: CopyUser,
    ) -> Self {
        let cs = u64::from(index.chunk_size);
        let needed = |c: ChunkNo| match push.urgent {
            0 => push.pushed_chunk(c),
            _ => push.urgent_chunk(c),
        };
        let mut wanted: HashMap<ChunkNo, Vec<(EntryIdx, u64)>> = HashMap::new();
        let mut files = HashMap::new();
        for (i, e) in index.entries.iter().enumerate() {
            let file = EntryIdx(i as u32);
            let EntryKind::File {
                size,
                data: FileData::Chunks(slots),
            } = &e.kind
            else {
                continue;
            };
            if *size < min_size.max(1) {
                continue;
            }
            let chunks = || {
                slots
                    .iter()
                    .filter_map(|s| s.chunk_index().and_then(ChunkNo::at))
            };
            if !chunks().any(needed) {
                continue;
            }
            let mut left = 0u32;
            let mut raw = true;
            for (pos, slot) in slots.iter().enumerate() {
                if let Some(ci) = slot.chunk_index().and_then(ChunkNo::at) {
                    wanted.entry(ci).or_default().push((file, pos as u64 * cs));
                    left += 1;
                    let c = &index.chunks[ci.index()];
                    raw &= c.stored_len == c.plain_len.saturating_add(1);
                }
            }
            if left == 0 {
                continue;
            }
            let pieces: Vec<_> = slots
                .iter()
                .map(|s| s.chunk_index().map(|ci| index.chunks[ci].id))
                .collect();
            let partial = Partial {
                name: copy_name(*size, &pieces),
                size: *size,
                cost: (u64::from(left) * cs).min(*size),
                left,
                file: None,
                dropped: false,
                raw,
            };
            files.insert(file, partial);
        }
        Self {
            copies,
            user,
            state: Mutex::new(State { wanted, files }),
        }
    }

    /// Chunk number `ci` arrived, verified, with the plain bytes `plain`: writes it into
    /// the copies it belongs to. Returns the names of the copies it completed (made, in
    /// place, and recorded in the copies' budget for this mount), and a place written in a
    /// copy of raw chunks only. A chunk seen before is ignored.
    pub fn arrived(&self, ci: ChunkNo, plain: &[u8]) -> Arrival {
        let Some(places) = lock(&self.state).wanted.remove(&ci) else {
            return Arrival::default();
        };
        let mut done = Arrival::default();
        for (file, at) in places {
            let Some((out, raw)) = self.begin(file) else {
                continue;
            };
            let wrote = out.write_all_at(plain, at);
            if let Err(e) = &wrote {
                tracing::debug!(error = %e, "a copy made ahead could not be written; it will be made at its first open");
            }
            if raw && wrote.is_ok() && done.placed.is_none() {
                done.placed = Some(Placement { file: out, at });
            }
            if let Some(name) = self.placed(file, wrote.is_ok()) {
                done.made.push(name);
            }
        }
        done
    }

    /// The file a copy is written to, created (with room held) at its first chunk, and
    /// whether its chunks are all raw; `None` if the copy is not made ahead.
    fn begin(&self, file: EntryIdx) -> Option<(Arc<File>, bool)> {
        let mut st = lock(&self.state);
        let p = st.files.get_mut(&file)?;
        if p.dropped {
            return None;
        }
        let raw = p.raw;
        if let Some((f, _)) = &p.file {
            return Some((f.clone(), raw));
        }
        if self.copies.contains(&p.name) || !self.copies.hold(p.cost) {
            p.dropped = true;
            return None;
        }
        let made = tempfile::NamedTempFile::new_in(self.copies.dir()).and_then(|t| {
            t.as_file().set_len(p.size)?;
            Ok(t.into_parts())
        });
        match made {
            Ok((f, path)) => {
                let f = Arc::new(f);
                p.file = Some((f.clone(), path));
                Some((f, raw))
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot start a copy ahead; it will be made at its first open");
                self.copies.unhold(p.cost);
                p.dropped = true;
                None
            }
        }
    }

    /// One chunk place of `file` was written (or failed to be): the copy's name if that
    /// completed it.
    fn placed(&self, file: EntryIdx, wrote: bool) -> Option<String> {
        let (name, cost, path) = {
            let mut st = lock(&self.state);
            let p = st.files.get_mut(&file)?;
            if p.dropped {
                return None;
            }
            if !wrote {
                p.dropped = true;
                p.file = None;
                self.copies.unhold(p.cost);
                return None;
            }
            p.left -= 1;
            if p.left > 0 {
                return None;
            }
            let (_, path) = p.file.take()?;
            p.dropped = true;
            (p.name.clone(), p.cost, path)
        };
        match path.persist(self.copies.dir().join(&name)) {
            Ok(()) => {
                self.copies.add_held(&name, cost, self.user);
                Some(name)
            }
            Err(e) => {
                tracing::debug!(error = %e.error, "cannot put a copy made ahead in place");
                self.copies.unhold(cost);
                None
            }
        }
    }

    /// Whether chunk `ci` is still awaited by a copy.
    pub(crate) fn awaits(&self, ci: ChunkNo) -> bool {
        lock(&self.state).wanted.contains_key(&ci)
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Copies never completed (the mount ended first): their files go with their
        // `TempPath`s, and their room is given back.
        let st = lock(&self.state);
        for p in st.files.values().filter(|p| p.file.is_some()) {
            self.copies.unhold(p.cost);
        }
    }
}

#[cfg(test)]
#[path = "ahead_tests.rs"]
mod tests;

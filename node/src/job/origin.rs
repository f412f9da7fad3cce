//! The last sources of a chunk, as the relay's search decides them: the origin store (a
//! shared file system the site names, read through the store crate's one reader on the
//! blocking pool, every chunk checked against its id like any other), and, when no
//! source is left, the end of every read waiting for the chunk, at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use manifest::{ChunkInfo, check_chunk};
use peertree::relay::{ChunkNo, Source};

use super::{Input, JobCore, lock};
use crate::Error;

impl JobCore {
    /// Chunks no node gives are read from the store at `origin` before a read fails. Call
    /// it before [`JobCore::start`]; later calls change nothing.
    pub(crate) fn use_origin(&self, origin: PathBuf) {
        if let Some((relay, _)) = lock(&self.parked).as_mut() {
            relay.set_origin(true);
            let _ = self.origin.set(origin);
        }
    }

    /// Reads `chunk` from the origin store on the blocking pool (it may sit on a network
    /// file system), then tells the relay whether it got it.
    pub(super) fn read_origin(self: &Arc<Self>, chunk: ChunkNo) {
        let (Some(origin), Some(info)) = (
            self.origin.get().cloned(),
            self.index.chunks.get(chunk.index()).copied(),
        ) else {
            self.tell(Input::Origin { chunk, got: false });
            return;
        };
        let this = self.clone();
        self.rt.spawn_blocking(move || {
            let got = this.take_from_origin(&origin, chunk, info);
            this.tell(Input::Origin { chunk, got });
        });
    }

    /// `chunk` from the origin store at `origin`: verified, kept and handed to the waiting
    /// readers. Whether it was.
    fn take_from_origin(&self, origin: &Path, chunk: ChunkNo, info: ChunkInfo) -> bool {
        let stored = seeder::DirStore::open(origin).and_then(|s| s.get_chunk(&info.id));
        let data = match stored {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(chunk = %info.id.short(), origin = %origin.display(), error = %e, "the origin store cannot give a chunk");
                return false;
            }
        };
        let (checked, plain) = match check_chunk(Bytes::from(data), &info) {
            Ok(v) => v,
            Err(e) => {
                lock(&self.counters).bad_chunks += 1;
                tracing::error!(chunk = %info.id.short(), origin = %origin.display(), error = %e, "the origin store's copy of a chunk does not match its id; not used");
                return false;
            }
        };
        // Readers get it even if the store cannot keep it; said before they wake, so that
        // what a reader saw is in the log by the time its read returns.
        let kept = self.bytes.put_checked(&checked);
        tracing::info!(chunk = %info.id.short(), origin = %origin.display(), "read a chunk no node gave from the origin store");
        let plain = super::chunks::Arrived::new(&checked, plain);
        self.wake(chunk, &plain);
        if let Err(e) = kept {
            tracing::warn!(chunk = %info.id.short(), error = %e, "a chunk read from the origin store cannot be kept");
            return false;
        }
        self.arrived(chunk, &plain);
        true
    }

    /// No source could give `chunk`: every reader waiting for it fails now. Said once per
    /// failed search; a read that fails again at once (nothing changed) is not logged
    /// above debug.
    pub(super) fn unobtainable(&self, chunk: ChunkNo, tried: &[Source], again: bool) {
        let id = self
            .index
            .chunks
            .get(chunk.index())
            .map_or_else(|| chunk.to_string(), |c| c.id.short());
        let tried = self.describe(tried);
        if again {
            tracing::debug!(chunk = %id, "a read fails at once: no source had its chunk lately");
        } else {
            tracing::error!(chunk = %id, asked = %tried, "no source could give a chunk: reads of it fail with EIO until a source comes back (a new parent, a node that holds it, the origin store readable)");
        }
        let waiting = lock(&self.waiters).remove(&chunk).unwrap_or_default();
        for w in waiting {
            let _ = w.send(Err(Error::Unobtainable {
                chunk: id.clone(),
                tried: tried.clone(),
            }));
        }
    }

    /// The sources a search asked, as an operator reads them.
    fn describe(&self, tried: &[Source]) -> String {
        if tried.is_empty() {
            return "nobody: no parent, no other node, no origin store".to_string();
        }
        let origin = self.origin.get().map(|p| p.display().to_string());
        tried
            .iter()
            .map(|s| match s {
                Source::Parent(n) => format!("the parent {}", self.host_of(*n)),
                Source::Peer(n) => self.host_of(*n),
                Source::Origin => {
                    format!("the origin store {}", origin.as_deref().unwrap_or("(none)"))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

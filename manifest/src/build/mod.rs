//! Building an index from a directory tree: walk it, cut regular files into fixed-size
//! chunks, hash and compress them in parallel, and hand new chunks to a [`ChunkSink`].
//!
//! Reading the layer is the only I/O done here; where chunks are kept is the sink's job.
//! Holes of sparse files (found with `SEEK_DATA`, or chunks that are all zeros) are
//! recorded as [`Slot::HOLE`](crate::index::Slot::HOLE) and never stored.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::Error;
use crate::ids::ChunkId;
use crate::index::{EntryIdx, EntryKind, Index};

pub use crate::chunk::StoredForm;

mod read;
mod walk;

use read::{Outcome, process};
use walk::Walk;

/// Where new chunks go (the publisher's store). Must be safe to call from many threads and
/// idempotent: the same chunk may be offered twice at once.
pub trait ChunkSink: Sync {
    /// The stored form of a chunk that is already present **and intact** (it decodes to
    /// `plain_len` bytes hashing to `id`; [`StoredForm::of`] its bytes), or `None`: then
    /// the builder puts it again, replacing whatever is there.
    fn stored_form(&self, id: &ChunkId, plain_len: u32) -> Option<StoredForm>;
    /// Stores a chunk in its encoded form.
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()>;
}

/// Progress callbacks while building (bytes of file content hashed).
pub trait BuildProgress: Sync {
    /// Called once the walk is done, with the total bytes to hash.
    fn total(&self, _bytes: u64) {}
    /// Called as content is processed.
    fn advance(&self, _bytes: u64) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl BuildProgress for NoProgress {}

/// Knobs for building.
#[derive(Clone, Copy, Debug)]
pub struct BuildOptions {
    /// Chunk size in bytes (default 1 MiB); with `adaptive_chunks`, the largest.
    pub chunk_size: u32,
    /// Take the chunk size from the layer's size ([`chunk_size_for`]), at most
    /// `chunk_size` (default false: always `chunk_size`).
    pub adaptive_chunks: bool,
    /// Files at most this long are stored inside the index (default 2 KiB).
    pub inline_max: u32,
    /// zstd level for chunks (default 1: compress once, fast).
    pub zstd_level: i32,
    /// Publish files with extended attributes or ACLs (which the index cannot keep) with
    /// a warning, instead of refusing them.
    pub ignore_xattrs: bool,
    /// When the signed index stops being valid, in seconds since the Unix epoch (`None`:
    /// never); nodes refuse it from then on.
    pub expires: Option<u64>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            chunk_size: 1 << 20,
            adaptive_chunks: false,
            inline_max: 2048,
            zstd_level: 1,
            ignore_xattrs: false,
            expires: None,
        }
    }
}

/// Something in the layer that an index cannot hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Path relative to the layer root.
    pub path: PathBuf,
    /// What it is ("fifo", "socket", "character device", "block device").
    pub kind: &'static str,
}

/// What a build did.
#[derive(Clone, Debug, Default)]
pub struct BuildReport {
    /// Directories, root included.
    pub dirs: u64,
    /// Regular files (hard links excluded).
    pub files: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Extra names of already-seen files.
    pub hardlinks: u64,
    /// Overlay whiteouts (names deleted in this layer), kept as whiteout entries.
    pub whiteouts: u64,
    /// Opaque directories (overlay's `overlay.opaque` xattr), kept as flagged directories.
    pub opaque_dirs: u64,
    /// Entries the index cannot hold, reported rather than silently dropped.
    pub skipped: Vec<Skipped>,
    /// Bytes of regular-file content (logical sizes).
    pub file_bytes: u64,
    /// Bytes inside sparse holes (not stored).
    pub hole_bytes: u64,
    /// Bytes stored inline in the index.
    pub inline_bytes: u64,
    /// Chunk references in file chunk lists (holes excluded).
    pub chunk_refs: u64,
    /// Plain bytes over all chunk references.
    pub chunk_ref_bytes: u64,
    /// Unique chunks.
    pub unique_chunks: u64,
    /// Plain bytes over unique chunks.
    pub unique_plain_bytes: u64,
    /// Stored bytes over unique chunks.
    pub unique_stored_bytes: u64,
    /// Chunks the sink did not have before.
    pub new_chunks: u64,
    /// Stored bytes of those.
    pub new_stored_bytes: u64,
}

impl BuildReport {
    /// Bytes not stored thanks to identical chunks.
    pub fn dedup_saved(&self) -> u64 {
        self.chunk_ref_bytes - self.unique_plain_bytes
    }

    /// Bytes not stored thanks to compression (negative savings count as zero).
    pub fn compression_saved(&self) -> u64 {
        self.unique_plain_bytes
            .saturating_sub(self.unique_stored_bytes)
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A file that shrank, grew or went away while it was read: [`Error::FileChanged`], which
/// a publisher answers by reading the layer again.
fn changed(path: &Path) -> Error {
    Error::FileChanged {
        path: path.to_path_buf(),
    }
}

/// Walks `root` and builds its index, sending chunks to `sink`.
pub fn build(
    root: &Path,
    opts: &BuildOptions,
    sink: &dyn ChunkSink,
    progress: &dyn BuildProgress,
) -> Result<(Index, BuildReport), Error> {
    // A layer given as a symlink to a directory is that directory (walking the link
    // itself would make the root a symlink entry).
    let resolved;
    let root = if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) {
        resolved = root.canonicalize().map_err(io_err(root))?;
        resolved.as_path()
    } else {
        root
    };
    let mut walk = Walk::run(root, opts)?;
    let chunk_size = if opts.adaptive_chunks {
        chunk_size_for(walk.total_bytes(), opts.chunk_size)
    } else {
        opts.chunk_size
    };
    walk.cut(chunk_size);
    progress.total(walk.total_bytes());
    let outcomes: Vec<Outcome> = walk
        .work
        .par_iter()
        .map(|w| process(w, &walk.paths, opts, sink, progress))
        .collect::<Result<_, _>>()?;
    walk.check_unchanged()?;
    Ok(walk.assemble(outcomes, chunk_size))
}

/// The largest chunk `teesfs publish --chunk-size auto` chooses (the `max` it gives
/// [`chunk_size_for`]).
pub const MAX_AUTO_CHUNK: u32 = 1 << 20;

/// Smallest chunk [`chunk_size_for`] chooses.
pub const MIN_ADAPTIVE_CHUNK: u32 = 256 << 10;

/// Chunks [`chunk_size_for`] cuts a layer into at least, when the sizes allow.
pub const CHUNKS_PER_LAYER: u64 = 64;

/// The chunk size for a layer of `layer_bytes` bytes of file content: the largest power of
/// two at most 1/[`CHUNKS_PER_LAYER`] of it, within [`MIN_ADAPTIVE_CHUNK`]..=`max` (`max`
/// alone if it is smaller).
///
/// Why: a chunk crosses each level of the tree whole before it is verified and sent on, so
/// the last node of a tree `d` levels deep gets the layer about `d` chunk times after a
/// one-hop transfer would. As a share of the layer's own time that is `d` x chunk size /
/// layer size, whatever the link rate: with 1 MiB chunks a 16 MiB layer pays 6% per level
/// (1.41-1.58x the bound at 8,760-68,160 nodes in the simulator), with 1/64 of the layer
/// 1.6% per level (1.11-1.22x). Large layers keep `max`, so their chunk count (index size,
/// per-chunk work) stays what it was.
///
/// The price: two versions of a layer share chunks only if they are cut alike, so a layer
/// that crosses 32 or 64 MiB between versions shares none with the version before (with
/// `max` 1 MiB; from 64 MiB on the size no longer changes). Pipelines that publish small,
/// growing layers often and rely on nodes keeping the old chunks should fix the size.
pub fn chunk_size_for(layer_bytes: u64, max: u32) -> u32 {
    let target = layer_bytes / CHUNKS_PER_LAYER;
    let pow2 = if target == 0 {
        1
    } else {
        1u64 << target.ilog2()
    };
    let floor = u64::from(MIN_ADAPTIVE_CHUNK.min(max));
    pow2.clamp(floor, u64::from(max)) as u32
}

/// Makes `paths` the index's ordered urgent set (see [`Index::urgent`]).
///
/// Each path is relative to the layer root (a leading `/` is allowed and means the same),
/// in the order the files are needed; a path named again keeps its first position. Every
/// path must name an entry of the index, through directories only (a symlinked directory
/// in the middle is refused, list the path behind it): an unknown path is an error naming
/// the missing part, never silently dropped.
pub fn set_urgent_paths<P: AsRef<Path>>(index: &mut Index, paths: &[P]) -> Result<(), Error> {
    use std::collections::hash_map::Entry as Slot;
    use std::path::Component;
    let mut children: HashMap<(u32, &[u8]), u32> = HashMap::with_capacity(index.entries.len());
    for (i, e) in index.entries.iter().enumerate().skip(1) {
        if let Slot::Vacant(v) = children.entry((e.parent.0, &e.name[..])) {
            v.insert(i as u32);
        }
    }
    let mut list = Vec::with_capacity(paths.len());
    for path in paths {
        let path = path.as_ref();
        let bad = |reason: String| Error::UnknownUrgentPath {
            path: path.display().to_string(),
            reason,
        };
        let mut cur = 0u32;
        let mut walked = PathBuf::new();
        for c in path.components() {
            let name = match c {
                Component::RootDir | Component::CurDir => continue,
                Component::Normal(n) => n,
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(bad("`..` is not allowed in a layer path".into()));
                }
            };
            match index.entries[cur as usize].kind {
                EntryKind::Dir => {}
                EntryKind::Symlink { .. } => {
                    return Err(bad(format!(
                        "{} is a symlink; list the path behind it",
                        walked.display()
                    )));
                }
                _ => return Err(bad(format!("{} is not a directory", walked.display()))),
            }
            walked.push(name);
            cur = *children
                .get(&(cur, name.as_bytes()))
                .ok_or_else(|| bad(format!("no entry {}", walked.display())))?;
        }
        if cur == 0 {
            return Err(bad("the layer root itself cannot be urgent".into()));
        }
        list.push(EntryIdx(cur));
    }
    drop(children);
    index.set_urgent(list);
    Ok(())
}

#[cfg(test)]
mod tests;

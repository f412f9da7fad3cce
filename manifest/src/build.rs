//! Building an index from a directory tree: walk it, cut regular files into fixed-size
//! chunks, hash and compress them in parallel, and hand new chunks to a [`ChunkSink`].
//!
//! Reading the layer is the only I/O done here; where chunks are kept is the sink's job.
//! Holes of sparse files (found with `SEEK_DATA`, or chunks that are all zeros) are
//! recorded as [`Slot::HOLE`] and never stored.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::Error;
use crate::chunk::encode_chunk;
use crate::ids::ChunkId;
use crate::index::{
    ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Meta, Slot,
};

/// Where new chunks go (the publisher's store). Must be safe to call from many threads and
/// idempotent: the same chunk may be offered twice at once.
pub trait ChunkSink: Sync {
    /// Stored length of a chunk that is already present **and intact** (it decodes to
    /// `plain_len` bytes hashing to `id`), or `None`: then the builder puts it again,
    /// replacing whatever is there.
    fn stored_len(&self, id: &ChunkId, plain_len: u32) -> Option<u32>;
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

enum Work {
    Inline {
        entry: u32,
        size: u64,
    },
    Chunk {
        entry: u32,
        /// Where the chunk starts in the file.
        off: u64,
        len: u32,
        /// The file has fewer blocks than bytes, so it may have holes worth a `SEEK_DATA`.
        sparse: bool,
    },
}

/// A file's content as the walk found it, before it is cut into reads: inline, or cut into
/// [`Work::Chunk`]s once the walk has found the layer's size (which may choose the chunk
/// size).
enum Planned {
    Inline {
        entry: u32,
        size: u64,
    },
    File {
        entry: u32,
        size: u64,
        /// As [`Work::Chunk`]'s.
        sparse: bool,
    },
}

enum Outcome {
    Inline(Box<[u8]>),
    Hole,
    Chunk {
        id: ChunkId,
        plain_len: u32,
        stored_len: u32,
        new: bool,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `md` is an overlay whiteout: the character device 0/0.
fn is_whiteout(md: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    md.file_type().is_char_device() && md.rdev() == 0
}

/// Whether a directory carries overlayfs's opaque mark (`trusted.` when the overlay was
/// mounted by root, `user.` for overlays in user namespaces, as `teesfs run` makes).
fn is_opaque(path: &Path) -> bool {
    ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|name| matches!(xattr::get(path, name), Ok(Some(v)) if v == b"y"))
}

/// A file's size and times: any write changes the mtime or ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    size: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(md: &std::fs::Metadata) -> Self {
        Self {
            size: md.len(),
            ino: md.ino(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        }
    }
}

/// Extended attributes the index keeps in its own way (overlay whiteouts and opaque
/// directories) or that carry no access rights of the layer (SELinux labels are the
/// node's policy).
fn xattr_is_kept(name: &str) -> bool {
    name.starts_with("trusted.overlay.")
        || name.starts_with("user.overlay.")
        || name == "security.selinux"
}

/// Refuses (or, with `ignore_xattrs`, warns about) attributes an index cannot keep.
fn check_xattrs(path: &Path, opts: &BuildOptions) -> Result<(), Error> {
    let Ok(names) = xattr::list(path) else {
        // No xattr support on this file system: nothing can be lost.
        return Ok(());
    };
    for name in names {
        let name = name.to_string_lossy().into_owned();
        if xattr_is_kept(&name) {
            continue;
        }
        if opts.ignore_xattrs {
            tracing::warn!(path = %path.display(), attribute = %name, "dropping an extended attribute the index cannot keep (--ignore-xattrs)");
        } else {
            return Err(Error::Xattr {
                path: path.to_path_buf(),
                name,
            });
        }
    }
    Ok(())
}

fn meta_of(md: &std::fs::Metadata) -> Meta {
    Meta {
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        mtime: md.mtime(),
        mtime_nsec: md.mtime_nsec().clamp(0, 999_999_999) as u32,
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

/// The layer as the walk found it: entries in index order, with file contents still to be
/// read, and the reads that will fill them in.
#[derive(Default)]
struct Walk {
    entries: Vec<Entry>,
    report: BuildReport,
    paths: HashMap<u32, PathBuf>,
    /// What each file looked like before its content was read: compared afterwards, so a
    /// file written while it was published is never signed as half old, half new.
    stamps: HashMap<u32, Stamp>,
    /// Files in walk order, until [`Walk::cut`] turns them into `work`.
    planned: Vec<Planned>,
    work: Vec<Work>,
    /// The first entry of each file with more than one name, by device and inode.
    seen_inodes: HashMap<(u64, u64), u32>,
    /// The entry of each directory on the way from the root to the current item.
    dir_stack: Vec<u32>,
}

impl Walk {
    /// Walks `root` in name order, so an unchanged tree always gives the same entries.
    fn run(root: &Path, opts: &BuildOptions) -> Result<Self, Error> {
        let mut walk = Self::default();
        let walker = walkdir::WalkDir::new(root)
            .follow_links(false)
            .sort_by(|a, b| a.file_name().cmp(b.file_name()));
        for item in walker {
            let item = item.map_err(|e| {
                let path = e.path().unwrap_or(root).to_path_buf();
                Error::Io {
                    path,
                    source: e.into_io_error().unwrap_or_else(|| {
                        std::io::Error::other("filesystem loop while walking the layer")
                    }),
                }
            })?;
            walk.add(root, &item, opts)?;
        }
        Ok(walk)
    }

    /// Records one item of the walk as an entry, or as skipped if an index cannot hold it.
    fn add(
        &mut self,
        root: &Path,
        item: &walkdir::DirEntry,
        opts: &BuildOptions,
    ) -> Result<(), Error> {
        let depth = item.depth();
        let path = item.path();
        let md = item.metadata().map_err(|e| Error::Io {
            path: path.to_path_buf(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("metadata")),
        })?;
        let idx = self.entries.len() as u32;
        let (parent, name): (u32, Box<[u8]>) = if depth == 0 {
            (0, Box::default())
        } else {
            self.dir_stack.truncate(depth);
            (
                self.dir_stack[depth - 1],
                item.file_name().as_bytes().into(),
            )
        };
        let ft = md.file_type();
        check_xattrs(path, opts)?;
        let mut flags = EntryFlags::default();
        let kind = if ft.is_dir() {
            self.report.dirs += 1;
            self.dir_stack.push(idx);
            if depth > 0 && is_opaque(path) {
                self.report.opaque_dirs += 1;
                flags.0 |= EntryFlags::OPAQUE;
            }
            EntryKind::Dir
        } else if is_whiteout(&md) {
            self.report.whiteouts += 1;
            flags.0 |= EntryFlags::WHITEOUT;
            EntryKind::File {
                size: 0,
                data: FileData::Inline(Box::default()),
            }
        } else if ft.is_symlink() {
            self.report.symlinks += 1;
            let target = std::fs::read_link(path).map_err(io_err(path))?;
            EntryKind::Symlink {
                target: target.as_os_str().as_bytes().into(),
            }
        } else if ft.is_file() {
            if let Some(target) = self.earlier_name(&md, idx) {
                self.report.hardlinks += 1;
                self.entries.push(Entry {
                    parent: EntryIdx(parent),
                    name,
                    meta: self.entries[target as usize].meta,
                    flags: EntryFlags::default(),
                    kind: EntryKind::Hardlink {
                        target: EntryIdx(target),
                    },
                });
                return Ok(());
            }
            self.add_file(idx, path, &md, opts)
        } else {
            self.skip(root, path, ft);
            return Ok(());
        };
        self.entries.push(Entry {
            parent: EntryIdx(parent),
            name,
            meta: meta_of(&md),
            flags,
            kind,
        });
        Ok(())
    }

    /// For a file with more than one name, the entry of a name the walk met before; the
    /// first name met becomes the one later names link to.
    fn earlier_name(&mut self, md: &std::fs::Metadata, idx: u32) -> Option<u32> {
        if md.nlink() <= 1 {
            return None;
        }
        let inode = (md.dev(), md.ino());
        if let Some(&target) = self.seen_inodes.get(&inode) {
            return Some(target);
        }
        self.seen_inodes.insert(inode, idx);
        None
    }

    /// Plans the reads of a regular file's content (inline, or one per chunk) and answers
    /// its entry kind, whose data the assembly fills in.
    fn add_file(
        &mut self,
        idx: u32,
        path: &Path,
        md: &std::fs::Metadata,
        opts: &BuildOptions,
    ) -> EntryKind {
        self.report.files += 1;
        let size = md.len();
        self.report.file_bytes += size;
        self.paths.insert(idx, path.to_path_buf());
        self.stamps.insert(idx, Stamp::of(md));
        if size <= u64::from(opts.inline_max) {
            self.planned.push(Planned::Inline { entry: idx, size });
        } else {
            let sparse = md.blocks().saturating_mul(512) < size;
            self.planned.push(Planned::File {
                entry: idx,
                size,
                sparse,
            });
        }
        EntryKind::File {
            size,
            data: FileData::Chunks(Box::default()),
        }
    }

    /// Reports a special file an index cannot hold, rather than dropping it silently.
    fn skip(&mut self, root: &Path, path: &Path, ft: std::fs::FileType) {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_fifo() {
            "fifo"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_char_device() {
            "character device"
        } else {
            "block device"
        };
        let rel = path.strip_prefix(root).unwrap_or(path).to_path_buf();
        tracing::warn!(path = %rel.display(), kind = what, "skipping: an index cannot hold it");
        self.report.skipped.push(Skipped {
            path: rel,
            kind: what,
        });
    }

    /// Bytes of file content the reads will hash.
    fn total_bytes(&self) -> u64 {
        self.planned
            .iter()
            .map(|p| match p {
                Planned::Inline { size, .. } | Planned::File { size, .. } => *size,
            })
            .sum()
    }

    /// Cuts every planned file into reads of `chunk_size` bytes (the order of the work, and
    /// so of the chunk table, stays the walk's).
    fn cut(&mut self, chunk_size: u32) {
        let cs = u64::from(chunk_size);
        for p in std::mem::take(&mut self.planned) {
            match p {
                Planned::Inline { entry, size } => self.work.push(Work::Inline { entry, size }),
                Planned::File {
                    entry,
                    size,
                    sparse,
                } => {
                    for pos in 0..size.div_ceil(cs) {
                        let off = pos * cs;
                        self.work.push(Work::Chunk {
                            entry,
                            off,
                            len: (size - off).min(cs) as u32,
                            sparse,
                        });
                    }
                }
            }
        }
    }

    /// Refuses the build if any file changed or went away while its content was read.
    fn check_unchanged(&self) -> Result<(), Error> {
        for (idx, before) in &self.stamps {
            let path = &self.paths[idx];
            let after = std::fs::symlink_metadata(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    changed(path)
                } else {
                    io_err(path)(e)
                }
            })?;
            if Stamp::of(&after) != *before {
                return Err(changed(path));
            }
        }
        Ok(())
    }

    /// Fills the file entries in from the outcomes of their reads, numbers the unique
    /// chunks and completes the report.
    fn assemble(self, outcomes: Vec<Outcome>, chunk_size: u32) -> (Index, BuildReport) {
        let Self {
            mut entries,
            mut report,
            work,
            ..
        } = self;
        // Assemble in work order, which follows entry order, so the chunk table and hence
        // the index id are deterministic for an unchanged tree.
        let mut chunks: Vec<ChunkInfo> = Vec::new();
        let mut table: HashMap<ChunkId, u32> = HashMap::new();
        let mut slots: HashMap<u32, Vec<Slot>> = HashMap::new();
        let mut new_ids: std::collections::HashSet<ChunkId> = Default::default();
        for (w, o) in work.iter().zip(outcomes) {
            match (w, o) {
                (Work::Inline { entry, .. }, Outcome::Inline(bytes)) => {
                    report.inline_bytes += bytes.len() as u64;
                    if let EntryKind::File { data, .. } = &mut entries[*entry as usize].kind {
                        *data = FileData::Inline(bytes);
                    }
                }
                (Work::Chunk { entry, len, .. }, Outcome::Hole) => {
                    report.hole_bytes += u64::from(*len);
                    slots.entry(*entry).or_default().push(Slot::HOLE);
                }
                (
                    Work::Chunk { entry, .. },
                    Outcome::Chunk {
                        id,
                        plain_len,
                        stored_len,
                        new,
                    },
                ) => {
                    report.chunk_refs += 1;
                    report.chunk_ref_bytes += u64::from(plain_len);
                    let pos = *table.entry(id).or_insert_with(|| {
                        chunks.push(ChunkInfo {
                            id,
                            plain_len,
                            stored_len,
                        });
                        (chunks.len() - 1) as u32
                    });
                    if new && new_ids.insert(id) {
                        report.new_chunks += 1;
                        report.new_stored_bytes += u64::from(stored_len);
                    }
                    slots.entry(*entry).or_default().push(Slot::chunk(pos));
                }
                _ => unreachable!("process() answers each work item with its own kind"),
            }
        }
        for (entry, s) in slots {
            if let EntryKind::File { data, .. } = &mut entries[entry as usize].kind {
                *data = FileData::Chunks(s.into());
            }
        }
        report.unique_chunks = chunks.len() as u64;
        report.unique_plain_bytes = chunks.iter().map(|c| u64::from(c.plain_len)).sum();
        report.unique_stored_bytes = chunks.iter().map(|c| u64::from(c.stored_len)).sum();
        let index = Index {
            chunk_size,
            chunks,
            entries,
            urgent: Vec::new(),
        };
        (index, report)
    }
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

fn process(
    w: &Work,
    paths: &HashMap<u32, PathBuf>,
    opts: &BuildOptions,
    sink: &dyn ChunkSink,
    progress: &dyn BuildProgress,
) -> Result<Outcome, Error> {
    match *w {
        Work::Inline { entry, size } => {
            let path = &paths[&entry];
            let mut buf = Vec::with_capacity(size as usize);
            open_walked(path)?
                .take(size + 1)
                .read_to_end(&mut buf)
                .map_err(io_err(path))?;
            if buf.len() as u64 != size {
                return Err(changed(path));
            }
            progress.advance(size);
            Ok(Outcome::Inline(buf.into()))
        }
        Work::Chunk {
            entry,
            off,
            len,
            sparse,
        } => {
            let path = &paths[&entry];
            let file = open_walked(path)?;
            // A file with all its blocks has no holes: skip the lseek (one syscall per
            // chunk, a tenth of the work for a small file). All-zero chunks are still
            // found below, so this is only ever a shortcut.
            let outcome = if sparse && is_hole(&file, off, len) {
                Outcome::Hole
            } else {
                // One read buffer per worker thread, reused: a fresh zeroed 1 MiB per chunk
                // costs a page fault per 4 KiB and a memset before the read overwrites it.
                READ_BUF.with_borrow_mut(|buf| {
                    buf.resize(len as usize, 0);
                    let buf = &mut buf[..len as usize];
                    file.read_exact_at(buf, off).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            changed(path)
                        } else {
                            io_err(path)(e)
                        }
                    })?;
                    if buf.iter().all(|&b| b == 0) {
                        return Ok(Outcome::Hole);
                    }
                    let id = ChunkId::of(buf);
                    if let Some(stored_len) = sink.stored_len(&id, len) {
                        return Ok(Outcome::Chunk {
                            id,
                            plain_len: len,
                            stored_len,
                            new: false,
                        });
                    }
                    let stored = encode_chunk(buf, opts.zstd_level);
                    sink.put(&id, &stored)
                        .map_err(|source| Error::Sink { id, source })?;
                    Ok::<_, Error>(Outcome::Chunk {
                        id,
                        plain_len: len,
                        stored_len: stored.len() as u32,
                        new: true,
                    })
                })?
            };
            progress.advance(u64::from(len));
            Ok(outcome)
        }
    }
}

thread_local! {
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A file that shrank, grew or went away while it was read: [`Error::FileChanged`], which
/// a publisher answers by reading the layer again.
fn changed(path: &Path) -> Error {
    Error::FileChanged {
        path: path.to_path_buf(),
    }
}

/// Opens a regular file found by the walk. One deleted or replaced by a symlink since is a
/// change, not an I/O failure; one replaced by a FIFO does not block the open (and fails
/// the stamp check after reading).
fn open_walked(path: &Path) -> Result<File, Error> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32)
            {
                changed(path)
            } else {
                io_err(path)(e)
            }
        })
}

/// Whether `[off, off+len)` lies entirely in a hole, by `SEEK_DATA`.
fn is_hole(file: &File, off: u64, len: u32) -> bool {
    use nix::unistd::{Whence, lseek};
    match lseek(file, off as i64, Whence::SeekData) {
        Ok(data) => data as u64 >= off + u64::from(len),
        Err(nix::errno::Errno::ENXIO) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A sink that keeps chunks in memory.
    #[derive(Default)]
    struct Mem(Mutex<HashMap<ChunkId, Vec<u8>>>);

    impl ChunkSink for Mem {
        fn stored_len(&self, id: &ChunkId, _plain_len: u32) -> Option<u32> {
            let m = self.0.lock().expect("lock");
            m.get(id).map(|b| b.len() as u32)
        }
        fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
            self.0.lock().expect("lock").insert(*id, stored.to_vec());
            Ok(())
        }
    }

    /// Appends to `file` the first time any content is read: a file written in place while
    /// it is being published.
    struct WriteOnce {
        file: PathBuf,
        done: AtomicBool,
    }

    impl BuildProgress for WriteOnce {
        fn advance(&self, _bytes: u64) {
            if !self.done.swap(true, Ordering::SeqCst) {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.file)
                    .expect("open");
                f.write_all(&[1u8; 4096]).expect("append");
            }
        }
    }

    fn opts() -> BuildOptions {
        BuildOptions {
            chunk_size: 64 << 10,
            ..BuildOptions::default()
        }
    }

    fn noise(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| blake3::hash(&i.to_le_bytes()).as_bytes()[0])
            .collect()
    }

    #[test]
    fn the_adaptive_chunk_size_cuts_a_layer_into_64_chunks_within_256_kib_and_the_maximum() {
        const MIB: u64 = 1 << 20;
        let max = 1 << 20;
        for (layer, want) in [
            (0, 256 << 10),
            (3 * MIB, 256 << 10),
            (16 * MIB, 256 << 10),
            (32 * MIB, 512 << 10),
            (63 * MIB, 512 << 10),
            (64 * MIB, 1 << 20),
            (5 << 30, 1 << 20),
        ] {
            assert_eq!(chunk_size_for(layer, max), want, "layer of {layer} bytes");
        }
        // A maximum below the floor is the chunk size; a larger one is reached.
        assert_eq!(chunk_size_for(64 * MIB, 64 << 10), 64 << 10);
        assert_eq!(chunk_size_for(1 << 32, 64 << 20), 64 << 20);
        for layer in [1, 1000, 17 * MIB + 3, 1 << 40] {
            let cs = chunk_size_for(layer, 4 << 20);
            assert!(cs.is_power_of_two() && (MIN_ADAPTIVE_CHUNK..=4 << 20).contains(&cs));
        }
    }

    /// With `adaptive_chunks` the walk's total picks the chunk size, every file is cut by
    /// it, and the index says so (readers find chunks by it).
    #[test]
    fn an_adaptive_build_cuts_every_file_by_the_size_the_layer_chose() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::write(t.path().join("a.bin"), noise(3 << 20)).expect("write");
        std::fs::write(t.path().join("b.bin"), noise(700_000)).expect("write");
        std::fs::write(t.path().join("small"), b"inline").expect("write");
        let adaptive = BuildOptions {
            chunk_size: 1 << 20,
            adaptive_chunks: true,
            ..BuildOptions::default()
        };
        let (index, report) =
            build(t.path(), &adaptive, &Mem::default(), &NoProgress).expect("build");
        assert_eq!(index.chunk_size, MIN_ADAPTIVE_CHUNK);
        // 12 chunks of a.bin, 3 of b.bin (700,000 bytes: 2 x 256 KiB and the rest).
        assert_eq!(report.chunk_refs, 12 + 3);
        assert!(
            index
                .chunks
                .iter()
                .all(|c| c.plain_len <= MIN_ADAPTIVE_CHUNK)
        );
        let fixed = BuildOptions {
            chunk_size: 1 << 20,
            ..BuildOptions::default()
        };
        let (index, report) = build(t.path(), &fixed, &Mem::default(), &NoProgress).expect("build");
        assert_eq!(index.chunk_size, 1 << 20);
        assert_eq!(report.chunk_refs, 3 + 1);
    }

    #[test]
    fn a_file_changed_while_it_is_read_is_an_error_naming_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let file = t.path().join("busy.bin");
        std::fs::write(&file, noise(300_000)).expect("write");
        let progress = WriteOnce {
            file: file.clone(),
            done: AtomicBool::new(false),
        };
        match build(t.path(), &opts(), &Mem::default(), &progress) {
            Err(Error::FileChanged { path }) => assert_eq!(path, file),
            other => panic!("a torn read was not noticed: {other:?}"),
        }
        // Unchanged since, it builds.
        build(t.path(), &opts(), &Mem::default(), &NoProgress).expect("build");
    }

    #[test]
    fn a_file_deleted_while_the_layer_is_read_is_a_change_not_an_io_error() {
        let t = tempfile::tempdir().expect("tempdir");
        let file = t.path().join("gone.bin");
        std::fs::write(&file, noise(100_000)).expect("write");
        struct Remove(PathBuf);
        impl BuildProgress for Remove {
            fn total(&self, _bytes: u64) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        match build(t.path(), &opts(), &Mem::default(), &Remove(file.clone())) {
            Err(Error::FileChanged { path }) => assert_eq!(path, file),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_layer_path_that_is_a_symlink_to_a_directory_builds_the_directory() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = t.path().join("layer");
        std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("sub/f.txt"), b"hello").expect("write");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        let (via_link, _) = build(&link, &opts(), &Mem::default(), &NoProgress).expect("build");
        let (direct, _) = build(&dir, &opts(), &Mem::default(), &NoProgress).expect("build");
        assert!(matches!(via_link.entries[0].kind, EntryKind::Dir));
        assert_eq!(via_link.entries.len(), 3, "root, sub, sub/f.txt");
        assert_eq!(via_link, direct);
    }

    /// Sets an attribute, or says why this file system or user cannot (CI runs as root on
    /// a file system with ACLs and capabilities; elsewhere the test skips).
    fn try_set(path: &Path, name: &str, value: &[u8]) -> bool {
        match xattr::set(path, name, value) {
            Ok(()) => true,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "cannot set {name} under CI: {e}"
                );
                eprintln!("SKIP: cannot set {name} here: {e}");
                false
            }
        }
    }

    fn refused_attribute(root: &Path) -> (PathBuf, String) {
        match build(root, &opts(), &Mem::default(), &NoProgress) {
            Err(Error::Xattr { path, name }) => (path, name),
            other => panic!("an attribute the index cannot keep was dropped: {other:?}"),
        }
    }

    /// An ACL that denied someone was dropped silently: the published file was open to
    /// them through its group bits.
    #[test]
    fn a_file_with_an_acl_is_refused_naming_the_file_and_the_acl() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("private.txt");
        std::fs::write(&f, b"secret").expect("write");
        // user::rw- user:nobody:--- group::r-- mask::r-- other::---
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (0x01u16, 6u16, u32::MAX),
            (0x02, 0, 65534),
            (0x04, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            acl.extend(tag.to_le_bytes());
            acl.extend(perm.to_le_bytes());
            acl.extend(id.to_le_bytes());
        }
        if !try_set(&f, "system.posix_acl_access", &acl) {
            return;
        }
        let (path, name) = refused_attribute(t.path());
        assert_eq!((path, name.as_str()), (f, "system.posix_acl_access"));
        let o = BuildOptions {
            ignore_xattrs: true,
            ..opts()
        };
        build(t.path(), &o, &Mem::default(), &NoProgress).expect("dropped when asked");
    }

    #[test]
    fn a_file_capability_is_refused_naming_the_file() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("ping");
        std::fs::write(&f, b"#!/bin/sh\n").expect("write");
        // vfs_cap_data revision 2, effective, permitted = CAP_NET_RAW.
        let mut cap = (0x0200_0000u32 | 1).to_le_bytes().to_vec();
        for word in [1u32 << 13, 0, 0, 0] {
            cap.extend(word.to_le_bytes());
        }
        if !try_set(&f, "security.capability", &cap) {
            return;
        }
        let (path, name) = refused_attribute(t.path());
        assert_eq!((path, name.as_str()), (f, "security.capability"));
    }

    #[test]
    fn overlay_marks_are_not_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = t.path().join("opaque");
        std::fs::create_dir(&d).expect("mkdir");
        if !try_set(&d, "user.overlay.opaque", b"y") {
            return;
        }
        let (index, report) =
            build(t.path(), &opts(), &Mem::default(), &NoProgress).expect("build");
        assert_eq!(report.opaque_dirs, 1);
        assert!(index.entries[1].flags.opaque());
    }
}

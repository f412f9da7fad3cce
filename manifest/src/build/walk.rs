//! The walk of a layer: every item becomes an entry in index order (or is reported as
//! skipped), each regular file's content is planned as reads, and once the reads are done
//! their outcomes are assembled into the index. Reads no file content itself (that is
//! [`super::read`]'s), only metadata, links and extended attributes.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::read::Outcome;
use super::{BuildOptions, BuildReport, Skipped, changed, io_err};
use crate::Error;
use crate::ids::ChunkId;
use crate::index::{
    ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Meta, Slot,
};

/// One read of file content: a whole small file, or one chunk of a larger one.
pub(super) enum Work {
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

/// The layer as the walk found it: entries in index order, with file contents still to be
/// read, and the reads that will fill them in.
#[derive(Default)]
pub(super) struct Walk {
    entries: Vec<Entry>,
    report: BuildReport,
    pub(super) paths: HashMap<u32, PathBuf>,
    /// What each file looked like before its content was read: compared afterwards, so a
    /// file written while it was published is never signed as half old, half new.
    stamps: HashMap<u32, Stamp>,
    /// Files in walk order, until [`Walk::cut`] turns them into `work`.
    planned: Vec<Planned>,
    pub(super) work: Vec<Work>,
    /// The first entry of each file with more than one name, by device and inode.
    seen_inodes: HashMap<(u64, u64), u32>,
    /// The entry of each directory on the way from the root to the current item.
    dir_stack: Vec<u32>,
}

impl Walk {
    /// Walks `root` in name order, so an unchanged tree always gives the same entries.
    pub(super) fn run(root: &Path, opts: &BuildOptions) -> Result<Self, Error> {
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
    pub(super) fn total_bytes(&self) -> u64 {
        self.planned
            .iter()
            .map(|p| match p {
                Planned::Inline { size, .. } | Planned::File { size, .. } => *size,
            })
            .sum()
    }

    /// Cuts every planned file into reads of `chunk_size` bytes (the order of the work, and
    /// so of the chunk table, stays the walk's).
    pub(super) fn cut(&mut self, chunk_size: u32) {
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
    pub(super) fn check_unchanged(&self) -> Result<(), Error> {
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
    pub(super) fn assemble(self, outcomes: Vec<Outcome>, chunk_size: u32) -> (Index, BuildReport) {
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
                        stored_hash,
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
                            stored_hash,
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
            image: None,
        };
        (index, report)
    }
}

//! The pure, read-only view of an index as a filesystem tree: inode numbers, directory
//! listings sorted for binary-search lookup, link counts and attributes.
//!
//! No I/O and no FUSE types here, so it is tested directly. Inode `n` is entry `n - 1`
//! (FUSE's root inode 1 is entry 0); a hard link resolves to its target's inode.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use manifest::{EntryIdx, EntryKind, FileData, Index};

use super::FsError;

/// A FUSE inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ino(pub u64);

impl Ino {
    /// The root directory's inode.
    pub const ROOT: Ino = Ino(1);

    /// The entry this inode stands for.
    pub fn entry(self) -> Option<EntryIdx> {
        self.0
            .checked_sub(1)
            .and_then(|i| u32::try_from(i).ok())
            .map(EntryIdx)
    }

    /// The inode of an entry.
    pub fn of(e: EntryIdx) -> Ino {
        Ino(u64::from(e.0) + 1)
    }
}

/// What kind of node an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Directory.
    Dir,
    /// Regular file.
    File,
    /// Symbolic link.
    Symlink,
    /// An overlay whiteout: the character device 0/0 (a name deleted in the layer).
    Whiteout,
}

/// Attributes of an inode, independent of the FUSE crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Kind.
    pub kind: NodeKind,
    /// Size in bytes (symlinks: target length).
    pub size: u64,
    /// 512-byte blocks of data (`st_blocks`): the size less a sparse file's holes, which
    /// hold nothing, so that `du` and `cp --sparse` see the file as it was published.
    pub blocks: u64,
    /// Permission bits.
    pub perm: u16,
    /// Hard link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time (also used for atime and ctime).
    pub mtime: SystemTime,
}

/// A listing entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// Inode of the child (after hard-link resolution).
    pub ino: Ino,
    /// Kind of the child.
    pub kind: NodeKind,
    /// Name.
    pub name: &'a [u8],
}

/// Bytes in holes ([`manifest::Slot::HOLE`]: zeros neither stored nor sent) of every file
/// that has any, by entry.
fn hole_bytes(index: &Index) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    for (i, e) in index.entries.iter().enumerate() {
        let EntryKind::File {
            size,
            data: FileData::Chunks(slots),
        } = &e.kind
        else {
            continue;
        };
        let holes: u64 = (0u64..)
            .zip(slots.iter())
            .filter(|(_, s)| s.chunk_index().is_none())
            .map(|(pos, _)| u64::from(index.slot_len(*size, pos)))
            .sum();
        if holes > 0 {
            out.insert(i as u32, holes);
        }
    }
    out
}

/// Navigation structures over an [`Index`].
pub struct Tree {
    index: Index,
    /// Children of every directory, as a CSR: `children[start[d]..start[d + 1]]`, sorted by name.
    start: Vec<u32>,
    children: Vec<u32>,
    nlink: Vec<u32>,
    /// See [`Tree::set_root_owner`].
    root_owner: Option<u32>,
    /// Whether any entry has extended attributes (see [`Tree::has_xattrs`]).
    xattrs: bool,
    /// Bytes in holes, for the files that have any (few do: a map, not a column).
    hole_bytes: HashMap<u32, u64>,
}

impl Tree {
    /// Builds the lookup tables (O(n log n) in the entry count).
    pub fn new(index: Index) -> Self {
        let n = index.entries.len();
        let mut counts = vec![0u32; n + 1];
        let mut nlink = vec![1u32; n];
        for (i, e) in index.entries.iter().enumerate().skip(1) {
            counts[e.parent.get()] += 1;
            match e.kind {
                EntryKind::Dir => nlink[e.parent.get()] += 1,
                EntryKind::Hardlink { target } => nlink[target.get()] += 1,
                _ => {}
            }
            if matches!(e.kind, EntryKind::Dir) {
                nlink[i] += 1;
            }
        }
        nlink[0] += 1;
        let mut start = vec![0u32; n + 1];
        for i in 0..n {
            start[i + 1] = start[i] + counts[i];
        }
        let mut fill = start.clone();
        let mut children = vec![0u32; n.saturating_sub(1)];
        for (i, e) in index.entries.iter().enumerate().skip(1) {
            let p = e.parent.get();
            children[fill[p] as usize] = i as u32;
            fill[p] += 1;
        }
        for d in 0..n {
            let (a, b) = (start[d] as usize, start[d + 1] as usize);
            if b - a > 1 {
                children[a..b].sort_unstable_by(|&x, &y| {
                    index.entries[x as usize]
                        .name
                        .cmp(&index.entries[y as usize].name)
                });
            }
        }
        let xattrs = index.entries.iter().any(|e| e.flags.opaque());
        let hole_bytes = hole_bytes(&index);
        Self {
            index,
            start,
            children,
            nlink,
            root_owner: None,
            xattrs,
            hole_bytes,
        }
    }

    /// Whether any inode has extended attributes ([`Tree::xattrs`]): a layer without
    /// opaque directories has none at all.
    pub(crate) fn has_xattrs(&self) -> bool {
        self.xattrs
    }

    /// The underlying index.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Makes the root directory `uid`'s with no access for group and others (`None`: as
    /// the index says).
    pub(crate) fn set_root_owner(&mut self, uid: Option<u32>) {
        self.root_owner = uid;
    }

    /// The path of an inode relative to the layer root (empty for the root).
    pub fn path(&self, ino: Ino) -> Result<Vec<u8>, FsError> {
        Ok(self.index.path_of(self.entry(ino)?))
    }

    /// Entry number for an inode, checked.
    pub fn entry(&self, ino: Ino) -> Result<EntryIdx, FsError> {
        ino.entry()
            .filter(|e| e.get() < self.index.entries.len())
            .ok_or(FsError::NotFound)
    }

    fn kind_of(&self, e: EntryIdx) -> NodeKind {
        match self.index.entry(self.index.resolve(e)).kind {
            EntryKind::Dir => NodeKind::Dir,
            EntryKind::File { .. } if self.index.entry(self.index.resolve(e)).flags.whiteout() => {
                NodeKind::Whiteout
            }
            EntryKind::File { .. } | EntryKind::Hardlink { .. } => NodeKind::File,
            EntryKind::Symlink { .. } => NodeKind::Symlink,
        }
    }

    fn child_slice(&self, dir: EntryIdx) -> &[u32] {
        let d = dir.get();
        &self.children[self.start[d] as usize..self.start[d + 1] as usize]
    }

    /// Finds `name` in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr, FsError> {
        let p = self.entry(parent)?;
        if !matches!(self.index.entry(p).kind, EntryKind::Dir) {
            return Err(FsError::NotDir);
        }
        let kids = self.child_slice(p);
        let pos = kids
            .binary_search_by(|&c| self.index.entries[c as usize].name[..].cmp(name))
            .map_err(|_| FsError::NotFound)?;
        Ok(self.attr_of(self.index.resolve(EntryIdx(kids[pos]))))
    }

    /// The extended attributes of an inode, as (name, value) pairs: only overlayfs's
    /// opaque mark on opaque directories (both the `trusted.` and the `user.` spelling, so
    /// an overlay mounted by root or in a user namespace honours it).
    pub fn xattrs(&self, ino: Ino) -> Result<&'static [(&'static str, &'static [u8])], FsError> {
        const OPAQUE: &[(&str, &[u8])] = &[
            ("trusted.overlay.opaque", b"y"),
            ("user.overlay.opaque", b"y"),
        ];
        let e = self.entry(ino)?;
        Ok(if self.index.entry(e).flags.opaque() {
            OPAQUE
        } else {
            &[]
        })
    }

    /// Attributes of an inode.
    pub(crate) fn getattr(&self, ino: Ino) -> Result<Attr, FsError> {
        let e = self.entry(ino)?;
        Ok(self.attr_of(self.index.resolve(e)))
    }

    fn attr_of(&self, e: EntryIdx) -> Attr {
        let entry = self.index.entry(e);
        let size = match &entry.kind {
            EntryKind::File { size, .. } => *size,
            EntryKind::Symlink { target } => target.len() as u64,
            EntryKind::Dir | EntryKind::Hardlink { .. } => 0,
        };
        let holes = self.hole_bytes.get(&(e.get() as u32)).copied().unwrap_or(0);
        let blocks = size.saturating_sub(holes).div_ceil(512);
        let m = entry.meta;
        let mtime = if m.mtime >= 0 {
            UNIX_EPOCH + Duration::new(m.mtime as u64, m.mtime_nsec)
        } else {
            UNIX_EPOCH - Duration::from_secs(m.mtime.unsigned_abs())
                + Duration::from_nanos(u64::from(m.mtime_nsec))
        };
        let (uid, perm) = match self.root_owner {
            Some(owner) if e.get() == 0 => (owner, (m.mode & 0o700) as u16),
            _ => (m.uid, (m.mode & 0o7777) as u16),
        };
        Attr {
            ino: Ino::of(e),
            kind: self.kind_of(e),
            size,
            blocks,
            perm,
            nlink: self.nlink[e.get()],
            uid,
            gid: m.gid,
            mtime,
        }
    }

    /// The listing of a directory from position `offset` (0 = start). Positions 0 and 1
    /// are `.` and `..`; each returned item carries the offset of the next one.
    pub fn readdir(
        &self,
        dir: Ino,
        offset: u64,
    ) -> Result<impl Iterator<Item = (u64, DirEntry<'_>)> + '_, FsError> {
        let d = self.entry(dir)?;
        let entry = self.index.entry(d);
        if !matches!(entry.kind, EntryKind::Dir) {
            return Err(FsError::NotDir);
        }
        let dots = [
            DirEntry {
                ino: dir,
                kind: NodeKind::Dir,
                name: b".",
            },
            DirEntry {
                ino: Ino::of(entry.parent),
                kind: NodeKind::Dir,
                name: b"..",
            },
        ];
        // Resume by slicing rather than skipping, so listing a huge directory in many
        // replies stays linear.
        let kids = self.child_slice(d);
        let skip_kids = (offset as usize).saturating_sub(2).min(kids.len());
        let kids = kids[skip_kids..].iter().enumerate().map(move |(i, &c)| {
            let c = EntryIdx(c);
            let item = DirEntry {
                ino: Ino::of(self.index.resolve(c)),
                kind: self.kind_of(c),
                name: &self.index.entry(c).name,
            };
            ((skip_kids + i + 3) as u64, item)
        });
        let dots = dots
            .into_iter()
            .enumerate()
            .skip(offset as usize)
            .map(|(i, e)| (i as u64 + 1, e));
        Ok(dots.chain(kids))
    }

    /// A symlink's target.
    pub fn readlink(&self, ino: Ino) -> Result<&[u8], FsError> {
        match &self.index.entry(self.entry(ino)?).kind {
            EntryKind::Symlink { target } => Ok(target),
            _ => Err(FsError::Invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::{Entry, EntryFlags, FileData, Meta};

    fn e(parent: u32, name: &str, kind: EntryKind) -> Entry {
        Entry {
            parent: EntryIdx(parent),
            name: name.as_bytes().into(),
            meta: Meta {
                mode: 0o644,
                ..Meta::default()
            },
            flags: EntryFlags::default(),
            kind,
        }
    }

    fn tree() -> Tree {
        let file = EntryKind::File {
            size: 2,
            data: FileData::Inline((*b"hi").into()),
        };
        Tree::new(Index {
            chunk_size: 4096,
            chunks: vec![],
            entries: vec![
                e(0, "", EntryKind::Dir),
                e(0, "zeta", EntryKind::Dir),
                e(0, "alpha", file.clone()),
                e(1, "inner", EntryKind::Dir),
                e(
                    1,
                    "hard",
                    EntryKind::Hardlink {
                        target: EntryIdx(2),
                    },
                ),
                e(
                    0,
                    "ln",
                    EntryKind::Symlink {
                        target: (*b"alpha").into(),
                    },
                ),
            ],
            urgent: vec![],
            image: None,
        })
    }

    #[test]
    fn lookup_finds_children_and_resolves_hardlinks() {
        let t = tree();
        let a = t.lookup(Ino::ROOT, b"alpha").expect("exists");
        assert_eq!(a.ino, Ino(3));
        assert_eq!(a.nlink, 2);
        let zeta = t.lookup(Ino::ROOT, b"zeta").expect("exists");
        let h = t.lookup(zeta.ino, b"hard").expect("exists");
        assert_eq!(h.ino, a.ino);
        assert!(matches!(
            t.lookup(Ino::ROOT, b"nope"),
            Err(FsError::NotFound)
        ));
        assert!(matches!(t.lookup(a.ino, b"x"), Err(FsError::NotDir)));
    }

    #[test]
    fn directory_link_counts_follow_unix_rules() {
        let t = tree();
        assert_eq!(t.getattr(Ino::ROOT).expect("root").nlink, 3);
        let zeta = t.lookup(Ino::ROOT, b"zeta").expect("exists");
        assert_eq!(zeta.nlink, 3);
    }

    #[test]
    fn readdir_is_sorted_and_resumable() {
        let t = tree();
        let all: Vec<_> = t.readdir(Ino::ROOT, 0).expect("dir").collect();
        let names: Vec<&[u8]> = all.iter().map(|(_, e)| e.name).collect();
        assert_eq!(names, [&b"."[..], b"..", b"alpha", b"ln", b"zeta"]);
        let (next, _) = all[2];
        let rest: Vec<_> = t.readdir(Ino::ROOT, next).expect("dir").collect();
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].1.name, b"ln");
    }

    #[test]
    fn only_a_layer_with_an_opaque_directory_has_xattrs() {
        assert!(!tree().has_xattrs());
        let mut opaque = e(0, "o", EntryKind::Dir);
        opaque.flags = EntryFlags(EntryFlags::OPAQUE);
        let t = Tree::new(Index {
            chunk_size: 4096,
            chunks: vec![],
            entries: vec![e(0, "", EntryKind::Dir), opaque],
            urgent: vec![],
            image: None,
        });
        assert!(t.has_xattrs());
        assert_eq!(t.xattrs(Ino(2)).expect("dir").len(), 2);
    }

    #[test]
    fn bad_inodes_are_not_found() {
        let t = tree();
        assert!(matches!(t.getattr(Ino(0)), Err(FsError::NotFound)));
        assert!(matches!(t.getattr(Ino(99)), Err(FsError::NotFound)));
        assert_eq!(t.readlink(Ino(6)).expect("symlink"), b"alpha");
        assert!(matches!(t.readlink(Ino(3)), Err(FsError::Invalid)));
    }

    /// Issue 29: a sparse file reported its full size as blocks in use. Its blocks are the
    /// bytes of its data slots; holes count nothing.
    #[test]
    fn a_sparse_file_reports_only_its_data_as_blocks() {
        let sparse = EntryKind::File {
            size: 3 * 4096 + 100,
            data: FileData::Chunks(
                vec![
                    manifest::Slot::chunk(0),
                    manifest::Slot::HOLE,
                    manifest::Slot::HOLE,
                    manifest::Slot::chunk(0),
                ]
                .into(),
            ),
        };
        let t = Tree::new(Index {
            chunk_size: 4096,
            chunks: vec![manifest::ChunkInfo {
                id: manifest::ChunkId([1; 32]),
                plain_len: 4096,
                stored_len: 4097,
                stored_hash: None,
            }],
            entries: vec![e(0, "", EntryKind::Dir), e(0, "sparse", sparse)],
            urgent: vec![],
            image: None,
        });
        let a = t.lookup(Ino::ROOT, b"sparse").expect("exists");
        assert_eq!(a.size, 3 * 4096 + 100);
        // The first slot (4096) and the last (100 bytes): 4196 bytes, 9 blocks.
        assert_eq!(a.blocks, 9);
        assert_eq!(tree().lookup(Ino::ROOT, b"alpha").expect("dense").blocks, 1);
    }
}

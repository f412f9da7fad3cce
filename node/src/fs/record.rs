//! Recording what a program needs from the layer (`teesfs record`): the files it opens and
//! the names it looks up that the layer lacks, each once, in the order of first access.
//! The FUSE adapter feeds it; the order becomes the urgent set and its push order.

use std::collections::HashSet;
use std::sync::Mutex;

use super::tree::{Ino, Tree};

/// One recorded access.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A file was opened (or executed, or mapped).
    Opened(Ino),
    /// `name` was looked up in directory `parent` and the layer has no such entry.
    Absent(Ino, Box<[u8]>),
}

/// Collects accesses in first-access order; shared by the FUSE threads.
#[derive(Debug, Default)]
pub struct Recorder {
    inner: Mutex<(Vec<Access>, HashSet<Access>)>,
}

/// What a recording found, as layer paths (relative, without a leading `/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// Files opened, in order of first open.
    pub opened: Vec<Vec<u8>>,
    /// Names looked up that the layer does not have, in order of first lookup.
    pub absent: Vec<Vec<u8>>,
    /// Total size of the opened files.
    pub opened_bytes: u64,
}

impl Recorder {
    /// Notes an access (later repeats are ignored).
    pub fn note(&self, a: Access) {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.1.insert(a.clone()) {
            g.0.push(a);
        }
    }

    /// The accesses so far as layer paths.
    pub fn recording(&self, tree: &Tree) -> Recording {
        let g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Recording::default();
        for a in &g.0 {
            match a {
                Access::Opened(ino) => {
                    if let (Ok(p), Ok(attr)) = (tree.path(*ino), tree.getattr(*ino)) {
                        out.opened.push(p);
                        out.opened_bytes += attr.size;
                    }
                }
                Access::Absent(parent, name) => {
                    if let Ok(mut p) = tree.path(*parent) {
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
    use manifest::{Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Meta};

    fn tree() -> Tree {
        let e = |parent: u32, name: &str, kind: EntryKind| Entry {
            parent: EntryIdx(parent),
            name: name.as_bytes().into(),
            meta: Meta::default(),
            flags: EntryFlags::default(),
            kind,
        };
        let file = || EntryKind::File {
            size: 1,
            data: FileData::Inline((*b"x").into()),
        };
        Tree::new(Index {
            chunk_size: 4096,
            chunks: vec![],
            entries: vec![
                e(0, "", EntryKind::Dir),
                e(0, "bin", EntryKind::Dir),
                e(1, "app", file()),
                e(0, "top", file()),
            ],
            urgent: vec![],
        })
    }

    #[test]
    fn first_access_order_without_repeats() {
        let t = tree();
        let r = Recorder::default();
        r.note(Access::Opened(Ino(3)));
        r.note(Access::Absent(Ino(2), (*b"libx.so").into()));
        r.note(Access::Opened(Ino(4)));
        r.note(Access::Opened(Ino(3)));
        r.note(Access::Absent(Ino::ROOT, (*b"nope").into()));
        r.note(Access::Absent(Ino(2), (*b"libx.so").into()));
        let rec = r.recording(&t);
        assert_eq!(rec.opened, [b"bin/app".to_vec(), b"top".to_vec()]);
        assert_eq!(rec.absent, [b"bin/libx.so".to_vec(), b"nope".to_vec()]);
        assert_eq!(rec.opened_bytes, 2);
    }
}

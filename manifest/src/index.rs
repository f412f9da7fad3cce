//! The in-memory index: a table of unique chunks and a table of entries in which every
//! entry's parent comes before it (so the tree is acyclic by construction).
//!
//! Entry 0 is the root directory. Hard links are entries that name an earlier regular file;
//! they share its contents, metadata and inode.

use crate::ids::{ChunkId, StoredHash};
use crate::image::ImageConfig;

/// Position of an entry in [`Index::entries`]; 0 is the root directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryIdx(pub u32);

impl EntryIdx {
    /// The root directory.
    pub const ROOT: EntryIdx = EntryIdx(0);

    /// As a `usize` for indexing.
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// One slot of a file's chunk list: a hole (zeros, nothing stored) or a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(pub u32);

impl Slot {
    /// A run of zeros as long as the chunk at this position; nothing is stored or sent.
    pub const HOLE: Slot = Slot(0);

    /// The slot for position `i` of the chunk table.
    pub fn chunk(i: u32) -> Slot {
        Slot(i + 1)
    }

    /// The chunk-table position, or `None` for a hole.
    pub fn chunk_index(self) -> Option<usize> {
        self.0.checked_sub(1).map(|i| i as usize)
    }
}

/// One unique chunk of the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// blake3 of the plain bytes.
    pub id: ChunkId,
    /// Length of the plain bytes.
    pub plain_len: u32,
    /// Length of the stored (possibly compressed) form, header included.
    pub stored_len: u32,
    /// blake3 of the stored form, for a compressed chunk (index version 4 on): a node
    /// checks the chunk against it on arrival and decompresses it only when its bytes are
    /// read. `None` for a raw chunk (checked where it lies, at no decoding cost) and in
    /// older indexes (checked by decoding).
    pub stored_hash: Option<StoredHash>,
}

/// Metadata common to every entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Meta {
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Nanoseconds part of the modification time.
    pub mtime_nsec: u32,
}

/// Per-entry flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EntryFlags(pub u8);

impl EntryFlags {
    /// The entry belongs to the urgent set (needed to start the application). Always
    /// equal to the entry being in [`Index::urgent`], which also gives the order.
    pub const URGENT: u8 = 1;
    /// An overlay whiteout (an empty file entry): the name is deleted in this layer, and
    /// lower layers' entries of that name are hidden. Shown as the character device 0/0
    /// overlayfs uses for whiteouts.
    pub const WHITEOUT: u8 = 2;
    /// An opaque directory (directories only): lower layers' entries below it are hidden.
    pub const OPAQUE: u8 = 4;
    /// All flag bits this version knows.
    pub const KNOWN: u8 = Self::URGENT | Self::WHITEOUT | Self::OPAQUE;

    /// Whether the entry is in the urgent set.
    pub fn urgent(self) -> bool {
        self.0 & Self::URGENT != 0
    }

    /// Whether the entry is an overlay whiteout.
    pub fn whiteout(self) -> bool {
        self.0 & Self::WHITEOUT != 0
    }

    /// Whether the directory is opaque.
    pub fn opaque(self) -> bool {
        self.0 & Self::OPAQUE != 0
    }
}

/// Contents of a regular file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileData {
    /// Small files live in the index itself.
    Inline(Box<[u8]>),
    /// One slot per `chunk_size` bytes of the file.
    Chunks(Box<[Slot]>),
}

/// What an entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file of `size` bytes.
    File {
        /// Length in bytes.
        size: u64,
        /// Where the bytes are.
        data: FileData,
    },
    /// A symbolic link; the target is kept byte for byte and never resolved.
    Symlink {
        /// The link's target.
        target: Box<[u8]>,
    },
    /// Another name for an earlier regular file.
    Hardlink {
        /// The file this name refers to.
        target: EntryIdx,
    },
}

/// One name in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The directory holding it (the root is its own parent).
    pub parent: EntryIdx,
    /// The name within its parent (empty for the root).
    pub name: Box<[u8]>,
    /// Metadata (for hard links, that of the target applies).
    pub meta: Meta,
    /// Flags.
    pub flags: EntryFlags,
    /// The kind and its payload.
    pub kind: EntryKind,
}

/// Decoder limits: every count and length read from untrusted bytes is checked against
/// these before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest signed index file accepted, in bytes.
    pub max_signed_bytes: u64,
    /// Largest decompressed index body, in bytes.
    pub max_body_bytes: u64,
    /// Most entries.
    pub max_entries: u64,
    /// Most unique chunks.
    pub max_chunks: u64,
    /// Longest entry name, in bytes.
    pub max_name_len: u64,
    /// Longest symlink target, in bytes.
    pub max_symlink_len: u64,
    /// Largest inline file.
    pub max_inline_len: u64,
    /// Smallest chunk size.
    pub min_chunk_size: u64,
    /// Largest chunk size.
    pub max_chunk_size: u64,
    /// Largest file size.
    pub max_file_size: u64,
    /// Most strings in each list of an image config (env, entrypoint, cmd) and most labels.
    pub max_image_strings: u64,
    /// Longest string of an image config, in bytes (the kernel's `MAX_ARG_STRLEN`).
    pub max_image_string_len: u64,
    /// Most string bytes of an image config in all.
    pub max_image_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_signed_bytes: 2 << 30,
            max_body_bytes: 4 << 30,
            max_entries: 64 << 20,
            max_chunks: 256 << 20,
            max_name_len: 255,
            max_symlink_len: 4095,
            max_inline_len: 64 << 10,
            min_chunk_size: 4 << 10,
            max_chunk_size: 64 << 20,
            max_file_size: 1 << 50,
            max_image_strings: 4096,
            max_image_string_len: 128 << 10,
            max_image_bytes: 4 << 20,
        }
    }
}

/// A decoded, validated index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// Size of every chunk but the last of each file.
    pub chunk_size: u32,
    /// Unique chunks, referenced by [`Slot`]s.
    pub chunks: Vec<ChunkInfo>,
    /// Entries; parents always come before their children.
    pub entries: Vec<Entry>,
    /// The urgent set in the order it is needed (the access order when it was recorded,
    /// the load order of a dependency analysis): distinct entries, each with the
    /// [`EntryFlags::URGENT`] flag, and no other entry has the flag. Set it with
    /// [`Index::set_urgent`] to keep the two in step.
    pub urgent: Vec<EntryIdx>,
    /// For an index published from a container image, the image's config (what a task
    /// started in it follows); `None` for a plain layer.
    pub image: Option<ImageConfig>,
}

impl Index {
    /// Makes `list` the ordered urgent set: clears every entry's urgent flag, then flags
    /// the listed entries. Later repeats of an entry are dropped (the first position wins).
    ///
    /// Panics if an entry index is out of range (callers pass indexes of this index).
    pub fn set_urgent(&mut self, list: impl IntoIterator<Item = EntryIdx>) {
        for e in &mut self.entries {
            e.flags.0 &= !EntryFlags::URGENT;
        }
        self.urgent.clear();
        for idx in list {
            let flags = &mut self.entries[idx.get()].flags;
            if !flags.urgent() {
                flags.0 |= EntryFlags::URGENT;
                self.urgent.push(idx);
            }
        }
    }

    /// The uncompressed, unsigned body encoding of this index (what [`crate::SignedIndex`]
    /// compresses and signs). For tools and fuzzing; published indexes are always signed.
    pub fn encode_body(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    /// Strictly decodes an uncompressed body, checking every count and length against
    /// `limits` and the tree invariants. The bytes are not authenticated: nodes only decode
    /// bodies of indexes whose signature they verified first ([`crate::SignedIndex::open`]).
    pub fn decode_body(body: &[u8], limits: &Limits) -> Result<Index, crate::Error> {
        crate::codec::decode(body, limits)
    }

    /// The entry at `idx`.
    pub fn entry(&self, idx: EntryIdx) -> &Entry {
        &self.entries[idx.get()]
    }

    /// The entry holding contents and metadata for `idx` (follows hard links).
    pub fn resolve(&self, idx: EntryIdx) -> EntryIdx {
        match self.entries[idx.get()].kind {
            EntryKind::Hardlink { target } => target,
            _ => idx,
        }
    }

    /// Path of an entry relative to the layer root, `/`-separated, as bytes.
    pub fn path_of(&self, idx: EntryIdx) -> Vec<u8> {
        let mut parts = Vec::new();
        let mut cur = idx;
        while cur != EntryIdx::ROOT {
            let e = self.entry(cur);
            parts.push(&e.name[..]);
            cur = e.parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }

    /// Total plain bytes of all regular files (hard links counted once).
    pub fn total_file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match e.kind {
                EntryKind::File { size, .. } => size,
                _ => 0,
            })
            .sum()
    }

    /// Sum of stored bytes over the unique chunks.
    pub fn total_stored_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.stored_len)).sum()
    }

    /// Mean stored size of the unique chunks (`None` without chunks): what a planner needs
    /// to know of a payload to tell a push bound by its links from one bound by each
    /// chunk's CPU.
    pub fn mean_stored_chunk(&self) -> Option<u64> {
        self.total_stored_bytes()
            .checked_div(self.chunks.len() as u64)
    }

    /// Number of slots a file of `size` bytes has.
    pub fn slots_for(&self, size: u64) -> u64 {
        size.div_ceil(u64::from(self.chunk_size))
    }

    /// Plain length of the chunk at slot position `pos` of a file of `size` bytes.
    pub fn slot_len(&self, size: u64, pos: u64) -> u32 {
        let cs = u64::from(self.chunk_size);
        (size - pos * cs).min(cs) as u32
    }
}

//! The index body codec: a compact binary encoding (varints, length-prefixed names, chunk
//! references as table positions) and its strict decoder.
//!
//! Layout: magic `TEESIDX` + version byte; chunk size; chunk table (id, plain length,
//! stored length); entry table (parent, name, kind, flags, metadata, kind payload);
//! since version 2, the ordered urgent list (count, then entry positions); since version 3,
//! the optional image section ([`crate::image`]: an OCI image's config).
//!
//! Version 4 adds, after each chunk's stored length, a presence byte and the blake3 of its
//! stored form ([`ChunkInfo::stored_hash`], written for compressed chunks), and always has
//! the image section (with its own presence byte).
//!
//! Version 1 (no urgent list) still decodes: its list is the flagged entries in entry
//! order, which is what version 1 meant. Version 2 decodes with no image. The encoder
//! writes version 4 for an index with a stored hash, else version 3 for one with an image
//! and version 2 otherwise, so an index built without stored hashes keeps its bytes (and
//! id) and stays readable by older nodes.
//! The decoder checks every field against [`Limits`] and the tree invariants before it
//! returns, so consumers can index without further checks.

use crate::Error;
use crate::ids::{ChunkId, StoredHash};
use crate::index::{
    ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Limits, Meta, Slot,
};
use crate::wire::{Reader, Writer};

const MAGIC: &[u8; 7] = b"TEESIDX";
const VERSION: u8 = 4;
/// The version before stored hashes: chunk records without them, the image section present.
const VERSION_3: u8 = 3;
/// The version without the image section (what the encoder writes for an index without one).
const VERSION_2: u8 = 2;
/// The first version, without the urgent list.
const VERSION_1: u8 = 1;

const KIND_DIR: u8 = 0;
const KIND_FILE: u8 = 1;
const KIND_SYMLINK: u8 = 2;
const KIND_HARDLINK: u8 = 3;

const DATA_INLINE: u8 = 0;
const DATA_CHUNKS: u8 = 1;

/// Encodes an index body (uncompressed).
pub(crate) fn encode(index: &Index) -> Vec<u8> {
    let mut w = Writer::with_capacity(64 + index.chunks.len() * 40 + index.entries.len() * 48);
    w.raw(MAGIC);
    let version = if index.chunks.iter().any(|c| c.stored_hash.is_some()) {
        VERSION
    } else if index.image.is_some() {
        VERSION_3
    } else {
        VERSION_2
    };
    w.u8(version);
    w.varint(u64::from(index.chunk_size));
    w.varint(index.chunks.len() as u64);
    for c in &index.chunks {
        w.raw(&c.id.0);
        w.varint(u64::from(c.plain_len));
        w.varint(u64::from(c.stored_len));
        if version == VERSION {
            match &c.stored_hash {
                Some(h) => {
                    w.u8(1);
                    w.raw(&h.0);
                }
                None => w.u8(0),
            }
        }
    }
    w.varint(index.entries.len() as u64);
    for e in &index.entries {
        w.varint(u64::from(e.parent.0));
        w.bytes(&e.name);
        let kind = match e.kind {
            EntryKind::Dir => KIND_DIR,
            EntryKind::File { .. } => KIND_FILE,
            EntryKind::Symlink { .. } => KIND_SYMLINK,
            EntryKind::Hardlink { .. } => KIND_HARDLINK,
        };
        w.u8(kind);
        w.u8(e.flags.0);
        if let EntryKind::Hardlink { target } = e.kind {
            w.varint(u64::from(target.0));
            continue;
        }
        w.varint(u64::from(e.meta.mode));
        w.varint(u64::from(e.meta.uid));
        w.varint(u64::from(e.meta.gid));
        w.zigzag(e.meta.mtime);
        w.varint(u64::from(e.meta.mtime_nsec));
        match &e.kind {
            EntryKind::Dir | EntryKind::Hardlink { .. } => {}
            EntryKind::File { size, data } => {
                w.varint(*size);
                match data {
                    FileData::Inline(bytes) => {
                        w.u8(DATA_INLINE);
                        w.bytes(bytes);
                    }
                    FileData::Chunks(slots) => {
                        w.u8(DATA_CHUNKS);
                        for s in slots.iter() {
                            w.varint(u64::from(s.0));
                        }
                    }
                }
            }
            EntryKind::Symlink { target } => w.bytes(target),
        }
    }
    w.varint(index.urgent.len() as u64);
    for e in &index.urgent {
        w.varint(u64::from(e.0));
    }
    if version != VERSION_2 {
        crate::image::encode(&mut w, index.image.as_ref());
    }
    w.buf
}

/// Reads the ordered urgent list (version 2) and checks it against the entries' flags:
/// every position names an existing entry, no entry twice, and exactly the flagged
/// entries are listed.
fn decode_urgent(
    r: &mut Reader<'_>,
    entries: &[Entry],
    limits: &Limits,
) -> Result<Vec<EntryIdx>, Error> {
    let n_entries = entries.len() as u64;
    let count = r.bounded("urgent list length", limits.max_entries.min(n_entries))?;
    // Each position takes at least one byte.
    if count > r.remaining() as u64 {
        return Err(Error::Truncated("urgent list"));
    }
    let mut seen = vec![false; entries.len()];
    let mut list = Vec::with_capacity(count as usize);
    for position in 0..count {
        let entry = r.varint("urgent list entry")?;
        let bad = |reason: String| Error::BadUrgentList {
            position,
            entry,
            reason,
        };
        if entry >= n_entries {
            return Err(bad(format!("the index has {n_entries} entries")));
        }
        if std::mem::replace(&mut seen[entry as usize], true) {
            return Err(bad("listed twice".into()));
        }
        if !entries[entry as usize].flags.urgent() {
            return Err(bad("the entry is not flagged urgent".into()));
        }
        list.push(EntryIdx(entry as u32));
    }
    let flagged = entries.iter().filter(|e| e.flags.urgent()).count() as u64;
    if flagged != count {
        let (i, _) = entries
            .iter()
            .enumerate()
            .find(|(i, e)| e.flags.urgent() && !seen[*i])
            .expect("more flagged entries than listed ones, so one is unlisted");
        return Err(Error::BadEntry {
            entry: i as u64,
            reason: "flagged urgent but missing from the urgent list".into(),
        });
    }
    Ok(list)
}

fn check_name(entry: u64, name: &[u8], limits: &Limits) -> Result<(), Error> {
    let bad = |reason| Error::BadName {
        entry,
        name: String::from_utf8_lossy(name).into_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name == b"." || name == b".." {
        return Err(bad("`.` and `..` are not entry names"));
    }
    if name.contains(&b'/') {
        return Err(bad("contains `/`"));
    }
    if name.contains(&0) {
        return Err(bad("contains a NUL byte"));
    }
    if name.len() as u64 > limits.max_name_len {
        return Err(bad("too long"));
    }
    Ok(())
}

/// Refuses two entries with one name in one directory.
///
/// Siblings are grouped by a counting sort on the parent and each group is checked in name
/// order. The memory touched is two `u32` arrays rather than a hash table of every name: at
/// a million entries this is several times faster than hashing each `(parent, name)`.
fn check_unique_names(entries: &[Entry]) -> Result<(), Error> {
    let n = entries.len();
    let mut start = vec![0u32; n + 1];
    for e in &entries[1..] {
        start[e.parent.get() + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut kids = vec![0u32; n.saturating_sub(1)];
    for (i, e) in entries.iter().enumerate().skip(1) {
        let slot = &mut fill[e.parent.get()];
        kids[*slot as usize] = i as u32;
        *slot += 1;
    }
    drop(fill);
    let name = |i: u32| &entries[i as usize].name[..];
    for dir in 0..n {
        let group = &mut kids[start[dir] as usize..start[dir + 1] as usize];
        if group.len() < 2 {
            continue;
        }
        if !group.is_sorted_by(|&a, &b| name(a) < name(b)) {
            group.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
        }
        if let Some(w) = group.windows(2).find(|w| name(w[0]) == name(w[1])) {
            return Err(Error::DuplicateName {
                entry: u64::from(w[1]),
                parent: dir as u64,
                name: String::from_utf8_lossy(name(w[1])).into_owned(),
            });
        }
    }
    Ok(())
}

/// Decodes and validates an index body.
pub(crate) fn decode(body: &[u8], limits: &Limits) -> Result<Index, Error> {
    let mut r = Reader::new(body);
    let (version, chunk_size) = decode_header(&mut r, limits)?;
    let chunks = decode_chunk_table(&mut r, chunk_size, version == VERSION, limits)?;
    let (entries, siblings_sorted) = decode_entries(&mut r, chunk_size, &chunks, limits)?;
    let urgent = if version == VERSION_1 {
        (0..entries.len() as u32)
            .map(EntryIdx)
            .filter(|&i| entries[i.get()].flags.urgent())
            .collect()
    } else {
        decode_urgent(&mut r, &entries, limits)?
    };
    let image = if matches!(version, VERSION | VERSION_3) {
        crate::image::decode(&mut r, limits)?
    } else {
        None
    };
    if r.remaining() != 0 {
        return Err(Error::TrailingBytes(r.remaining()));
    }
    if !siblings_sorted {
        check_unique_names(&entries)?;
    }
    Ok(Index {
        chunk_size,
        chunks,
        entries,
        urgent,
        image,
    })
}

/// Reads the magic, the version and the chunk size; answers the version and chunk size.
fn decode_header(r: &mut Reader<'_>, limits: &Limits) -> Result<(u8, u32), Error> {
    if r.raw(MAGIC.len(), "magic")? != MAGIC {
        return Err(Error::BadMagic { what: "index" });
    }
    let version = r.u8("version")?;
    if !matches!(version, VERSION | VERSION_3 | VERSION_2 | VERSION_1) {
        return Err(Error::UnsupportedVersion {
            what: "index",
            version,
        });
    }
    let chunk_size = r.bounded("chunk size", limits.max_chunk_size)?;
    if chunk_size < limits.min_chunk_size {
        return Err(Error::LimitExceeded {
            what: "chunk size (below minimum)",
            value: chunk_size,
            limit: limits.min_chunk_size,
        });
    }
    Ok((version, chunk_size as u32))
}

/// Reads the chunk table: no chunk longer than the chunk size (plus the stored form's
/// codec byte) and none empty; with `hashes` (version 4), each record's stored hash.
fn decode_chunk_table(
    r: &mut Reader<'_>,
    chunk_size: u32,
    hashes: bool,
    limits: &Limits,
) -> Result<Vec<ChunkInfo>, Error> {
    // Each chunk record takes at least 34 bytes, so a count larger than that allows is
    // refused before anything is allocated.
    let n_chunks = r.bounded("chunk count", limits.max_chunks)?;
    if n_chunks > (r.remaining() / 34) as u64 {
        return Err(Error::Truncated("chunk table"));
    }
    let mut chunks = Vec::with_capacity(n_chunks as usize);
    for i in 0..n_chunks {
        let id = ChunkId(r.array32("chunk id")?);
        let plain_len = r.bounded("chunk plain length", u64::from(chunk_size))? as u32;
        let stored_len = r.bounded("chunk stored length", u64::from(chunk_size) + 1)? as u32;
        if plain_len == 0 || stored_len == 0 {
            return Err(Error::BadChunkTable {
                chunk: i,
                reason: "zero length".into(),
            });
        }
        let stored_hash = match hashes.then(|| r.u8("stored hash presence")).transpose()? {
            None | Some(0) => None,
            Some(1) => Some(StoredHash(r.array32("stored hash")?)),
            Some(b) => {
                return Err(Error::BadChunkTable {
                    chunk: i,
                    reason: format!("stored hash presence byte {b}"),
                });
            }
        };
        chunks.push(ChunkInfo {
            id,
            plain_len,
            stored_len,
            stored_hash,
        });
    }
    Ok(chunks)
}

/// Reads the entry table. Also answers whether every directory's children came in strictly
/// increasing name order, in which case no two siblings can share a name.
fn decode_entries(
    r: &mut Reader<'_>,
    chunk_size: u32,
    chunks: &[ChunkInfo],
    limits: &Limits,
) -> Result<(Vec<Entry>, bool), Error> {
    let n_entries = r.bounded("entry count", limits.max_entries)?;
    // The smallest entry (a hard link) takes 5 bytes.
    if n_entries > (r.remaining() / 5) as u64 + 1 {
        return Err(Error::Truncated("entry table"));
    }
    if n_entries == 0 {
        return Err(Error::BadEntry {
            entry: 0,
            reason: "the index has no root directory".into(),
        });
    }
    let table = EntryTable {
        n_entries,
        chunk_size,
        chunks,
        limits,
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(n_entries as usize);
    // The builder writes siblings in name order. While that holds (each name above the
    // previous sibling's), no two siblings can share a name and the grouped check at the
    // end is skipped; one entry out of order and every directory is checked.
    let mut last_child = vec![0u32; n_entries as usize];
    let mut in_order = true;
    for i in 0..n_entries {
        let (parent, name) = table.place(r, i, &entries)?;
        if i != 0 {
            let prev = std::mem::replace(&mut last_child[parent as usize], i as u32);
            if in_order && prev != 0 && entries[prev as usize].name[..] >= *name {
                in_order = false;
            }
        }
        let entry = table.entry(r, i, EntryIdx(parent as u32), name, &entries)?;
        entries.push(entry);
    }
    Ok((entries, in_order))
}

/// What each entry of the table is checked against.
struct EntryTable<'c> {
    n_entries: u64,
    chunk_size: u32,
    chunks: &'c [ChunkInfo],
    limits: &'c Limits,
}

impl EntryTable<'_> {
    /// Reads entry `i`'s parent and name and checks where it sits: the root first and its
    /// own parent, every other entry under a directory that comes before it.
    fn place<'a>(
        &self,
        r: &mut Reader<'a>,
        i: u64,
        entries: &[Entry],
    ) -> Result<(u64, &'a [u8]), Error> {
        let parent = r.varint("parent")?;
        // Read up to 4 KiB so an overlong name is reported with its entry, not as a bare limit.
        let name = r.bytes("name", self.limits.max_name_len.max(4096))?;
        if i == 0 {
            if parent != 0 || !name.is_empty() {
                return Err(Error::BadEntry {
                    entry: 0,
                    reason: "the root must have an empty name and be its own parent".into(),
                });
            }
            return Ok((parent, name));
        }
        check_name(i, name, self.limits)?;
        if parent >= self.n_entries {
            return Err(Error::DanglingParent { entry: i, parent });
        }
        if parent >= i {
            return Err(Error::Cycle { entry: i, parent });
        }
        if !matches!(entries[parent as usize].kind, EntryKind::Dir) {
            return Err(Error::ParentNotDirectory { entry: i, parent });
        }
        Ok((parent, name))
    }

    /// Reads the rest of entry `i` (kind, flags, metadata, kind payload) once its place is
    /// known.
    fn entry(
        &self,
        r: &mut Reader<'_>,
        i: u64,
        parent: EntryIdx,
        name: &[u8],
        entries: &[Entry],
    ) -> Result<Entry, Error> {
        let kind_tag = r.u8("entry kind")?;
        let flags = r.u8("entry flags")?;
        if flags & !EntryFlags::KNOWN != 0 {
            return Err(Error::BadEntry {
                entry: i,
                reason: format!("unknown flag bits {flags:#04x}"),
            });
        }
        if i == 0 && kind_tag != KIND_DIR {
            return Err(Error::BadEntry {
                entry: 0,
                reason: "the root is not a directory".into(),
            });
        }
        if kind_tag == KIND_HARDLINK {
            // A hard link carries no metadata of its own: it shares its target's.
            let target = r.varint("hard link target")?;
            let ok = target < i && matches!(entries[target as usize].kind, EntryKind::File { .. });
            if !ok {
                return Err(Error::BadHardlink { entry: i, target });
            }
            return Ok(Entry {
                parent,
                name: name.into(),
                meta: entries[target as usize].meta,
                flags: EntryFlags(flags),
                kind: EntryKind::Hardlink {
                    target: EntryIdx(target as u32),
                },
            });
        }
        let meta = decode_meta(r)?;
        let kind = match kind_tag {
            KIND_DIR => EntryKind::Dir,
            KIND_SYMLINK => decode_symlink(r, i, self.limits)?,
            KIND_FILE => self.file(r, i)?,
            t => {
                return Err(Error::BadEntry {
                    entry: i,
                    reason: format!("unknown entry kind {t}"),
                });
            }
        };
        check_overlay_flags(i, EntryFlags(flags), &kind)?;
        Ok(Entry {
            parent,
            name: name.into(),
            meta,
            flags: EntryFlags(flags),
            kind,
        })
    }

    /// Reads a regular file's size and content: inline bytes of exactly that size, or one
    /// chunk reference per chunk-size piece.
    fn file(&self, r: &mut Reader<'_>, i: u64) -> Result<EntryKind, Error> {
        let size = r.bounded("file size", self.limits.max_file_size)?;
        let data = match r.u8("file data tag")? {
            DATA_INLINE => {
                let bytes = r.bytes("inline data", self.limits.max_inline_len)?;
                if bytes.len() as u64 != size {
                    return Err(Error::BadEntry {
                        entry: i,
                        reason: format!(
                            "inline data is {} bytes but the size says {size}",
                            bytes.len()
                        ),
                    });
                }
                FileData::Inline(bytes.into())
            }
            DATA_CHUNKS => self.chunk_list(r, i, size)?,
            t => {
                return Err(Error::BadEntry {
                    entry: i,
                    reason: format!("unknown file data tag {t}"),
                });
            }
        };
        Ok(EntryKind::File { size, data })
    }

    /// Reads the chunk list of a file of `size` bytes: each reference is a hole or a chunk
    /// whose plain length is exactly the piece of the file it stands for.
    fn chunk_list(&self, r: &mut Reader<'_>, i: u64, size: u64) -> Result<FileData, Error> {
        let chunk_size = u64::from(self.chunk_size);
        let n = size.div_ceil(chunk_size);
        // Each reference takes at least one byte.
        if n > r.remaining() as u64 {
            return Err(Error::Truncated("chunk list"));
        }
        let mut slots = Vec::with_capacity(n as usize);
        for pos in 0..n {
            let s = r.bounded("chunk reference", self.chunks.len() as u64)?;
            if s > 0 {
                let want = (size - pos * chunk_size).min(chunk_size);
                let have = self.chunks[(s - 1) as usize].plain_len;
                if u64::from(have) != want {
                    return Err(Error::BadEntry {
                        entry: i,
                        reason: format!("chunk {pos} is {have} bytes where the file needs {want}"),
                    });
                }
            }
            slots.push(Slot(s as u32));
        }
        Ok(FileData::Chunks(slots.into()))
    }
}

/// Reads the metadata that every entry but a hard link carries.
fn decode_meta(r: &mut Reader<'_>) -> Result<Meta, Error> {
    let mode = r.bounded("mode", 0o7777)? as u32;
    let uid = r.u32_bounded("uid")?;
    let gid = r.u32_bounded("gid")?;
    let mtime = r.zigzag("mtime")?;
    let mtime_nsec = r.bounded("mtime nanoseconds", 999_999_999)? as u32;
    Ok(Meta {
        mode,
        uid,
        gid,
        mtime,
        mtime_nsec,
    })
}

/// Reads a symlink target: a path the kernel will accept from `readlink`.
fn decode_symlink(r: &mut Reader<'_>, i: u64, limits: &Limits) -> Result<EntryKind, Error> {
    let target = r.bytes("symlink target", limits.max_symlink_len)?;
    if target.is_empty() || target.contains(&0) {
        return Err(Error::BadEntry {
            entry: i,
            reason: "symlink target is empty or contains NUL".into(),
        });
    }
    Ok(EntryKind::Symlink {
        target: target.into(),
    })
}

/// Refuses overlay marks on entries that overlayfs would not give them: a whiteout is an
/// empty file, only a directory can be opaque.
fn check_overlay_flags(i: u64, flags: EntryFlags, kind: &EntryKind) -> Result<(), Error> {
    if flags.whiteout() && !matches!(kind, EntryKind::File { size: 0, .. }) {
        return Err(Error::BadEntry {
            entry: i,
            reason: "a whiteout that is not an empty file entry".into(),
        });
    }
    if flags.opaque() && !matches!(kind, EntryKind::Dir) {
        return Err(Error::BadEntry {
            entry: i,
            reason: "an opaque flag on something that is not a directory".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(parent: u32, name: &str, kind: EntryKind) -> Entry {
        Entry {
            parent: EntryIdx(parent),
            name: name.as_bytes().into(),
            meta: Meta::default(),
            flags: EntryFlags::default(),
            kind,
        }
    }

    fn with_children(names: &[&str]) -> Index {
        let mut entries = vec![entry(0, "", EntryKind::Dir), entry(0, "d", EntryKind::Dir)];
        for (i, n) in names.iter().enumerate() {
            // Interleave children of the root so siblings of `d` are not contiguous.
            entries.push(entry(0, &format!("r{i}"), EntryKind::Dir));
            entries.push(entry(1, n, EntryKind::Dir));
        }
        Index {
            chunk_size: 4096,
            chunks: vec![],
            entries,
            urgent: vec![],
            image: None,
        }
    }

    #[test]
    fn unique_siblings_in_any_order_decode() {
        for names in [&["a", "b", "c", "d"][..], &["d", "a", "c", "b"]] {
            let index = with_children(names);
            let decoded = decode(&encode(&index), &Limits::default()).expect("valid");
            assert_eq!(decoded, index);
        }
    }

    #[test]
    fn duplicate_among_sorted_siblings_is_refused() {
        let index = with_children(&["a", "b", "b", "c"]);
        assert!(matches!(
            decode(&encode(&index), &Limits::default()),
            Err(Error::DuplicateName { entry: 7, .. })
        ));
    }

    #[test]
    fn duplicate_among_unsorted_siblings_names_the_later_entry() {
        let index = with_children(&["zz", "b", "q", "b", "a"]);
        match decode(&encode(&index), &Limits::default()) {
            Err(Error::DuplicateName {
                entry,
                parent,
                name,
                ..
            }) => {
                assert_eq!((entry, parent, name.as_str()), (9, 1, "b"));
            }
            other => panic!("expected a duplicate name, got {other:?}"),
        }
    }

    fn flagged(flags: u8, kind: EntryKind) -> Index {
        let mut index = with_children(&[]);
        let mut e = entry(0, "x", kind);
        e.flags = EntryFlags(flags);
        index.entries.push(e);
        index
    }

    fn empty_file() -> EntryKind {
        EntryKind::File {
            size: 0,
            data: FileData::Inline(Box::default()),
        }
    }

    #[test]
    fn whiteouts_and_opaque_dirs_round_trip() {
        for index in [
            flagged(EntryFlags::WHITEOUT, empty_file()),
            flagged(EntryFlags::OPAQUE, EntryKind::Dir),
        ] {
            let decoded = decode(&encode(&index), &Limits::default()).expect("valid");
            assert_eq!(decoded, index);
        }
    }

    #[test]
    fn misplaced_whiteout_and_opaque_flags_are_refused() {
        let file = EntryKind::File {
            size: 1,
            data: FileData::Inline((*b"a").into()),
        };
        for index in [
            flagged(EntryFlags::WHITEOUT, EntryKind::Dir),
            flagged(EntryFlags::WHITEOUT, file),
            flagged(EntryFlags::OPAQUE, empty_file()),
        ] {
            assert!(
                matches!(
                    decode(&encode(&index), &Limits::default()),
                    Err(Error::BadEntry { entry: 2, .. })
                ),
                "{index:?}"
            );
        }
    }
}

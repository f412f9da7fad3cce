//! Raw chunks a node keeps where a copy made ahead already wrote them, not in files of their
//! own.
//!
//! A raw chunk (stored uncompressed) that arrives for a passthrough copy made ahead
//! (`fs::ahead`) has its plain bytes written into the copy at their place. Writing the same
//! bytes again into a chunk file of its own cost the receiving daemon a second tmpfs write of
//! every byte (23% of its CPU, BENCHMARKS.md, issue 33) and the node their memory twice.
//! Instead the store links the copy's file as `chunks/placed/<id>.<offset>.<length>`:
//! - the link keeps the bytes whatever becomes of the copy (evicted, released with its
//!   mount, never completed) and survives a daemon restart as a chunk file does;
//! - it costs no page: both names are one file;
//! - reading the chunk reads its place and puts the raw codec byte in front; the bytes are
//!   handed out unchecked, as a chunk file's are.
//!
//! Memory is charged per linked file (a *pack*): dropping one chunk of a pack frees nothing
//! while another of its links lives, so its bytes stay charged to the store until the
//! pack's last link goes ([`Packs::forget`]).
//!
//! A copy's file is written only at chunk places, each once, from verified bytes, and never
//! truncated, so a place's bytes do not change once linked.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use manifest::{CheckedChunk, ChunkId};

/// The directory of placed chunks in a node store at `root`. Not a shard's name, so the
/// chunk files' scan passes it by.
pub(crate) fn dir(root: &Path) -> PathBuf {
    seeder::layout::chunks_dir(root).join("placed")
}

/// A linked file, by device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PackKey {
    dev: u64,
    ino: u64,
}

impl PackKey {
    fn of(md: &std::fs::Metadata) -> Self {
        Self {
            dev: md.dev(),
            ino: md.ino(),
        }
    }
}

/// Where a placed chunk's plain bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub pack: PackKey,
    /// Byte offset in the pack.
    pub at: u64,
    /// Plain bytes (the stored form is one byte longer).
    pub len: u32,
}

impl Place {
    /// The link's name.
    fn name(&self, id: &ChunkId) -> String {
        format!("{}.{}.{}", id.to_hex(), self.at, self.len)
    }
}

/// A chunk's place parsed from its link's name (without its pack).
fn parse(name: &str) -> Option<(ChunkId, u64, u32)> {
    let mut parts = name.split('.');
    let id = parts.next()?.parse().ok()?;
    let at = parts.next()?.parse().ok()?;
    let len = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((id, at, len))
}

/// The link of a placed chunk.
pub(crate) fn path(dir: &Path, id: &ChunkId, place: &Place) -> PathBuf {
    dir.join(place.name(id))
}

/// Links `file` (open, with a name) as chunk `id`'s place: `len` plain bytes at `at`.
/// Fails where the file has no name any more or lies on another file system than `dir`
/// (the caller then writes a chunk file as before).
pub(crate) fn link(
    dir: &Path,
    file: &File,
    id: &ChunkId,
    at: u64,
    len: u32,
) -> std::io::Result<Place> {
    use nix::fcntl::{AT_FDCWD, AtFlags};
    let md = file.metadata()?;
    if !md.is_file() || md.len() < at + u64::from(len) {
        return Err(std::io::Error::other(
            "the copy does not hold the chunk's place",
        ));
    }
    let place = Place {
        pack: PackKey::of(&md),
        at,
        len,
    };
    let dest = path(dir, id, &place);
    let from = format!("/proc/self/fd/{}", file.as_raw_fd());
    let link = || {
        nix::unistd::linkat(
            AT_FDCWD,
            from.as_str(),
            AT_FDCWD,
            &dest,
            AtFlags::AT_SYMLINK_FOLLOW,
        )
    };
    let linked = match link() {
        Err(nix::errno::Errno::ENOENT) if !dir.is_dir() => {
            std::fs::create_dir_all(dir)?;
            link()
        }
        Err(nix::errno::Errno::EEXIST) => {
            // Left by a run that died before listing it: this one replaces it.
            std::fs::remove_file(&dest)?;
            link()
        }
        other => other,
    };
    linked.map_err(std::io::Error::from)?;
    Ok(place)
}

/// A placed chunk read from its link (the raw codec byte, then the place's bytes) and
/// checked against its id: bytes changed in the copy are an error, as a missing file is.
pub(crate) fn read(dir: &Path, id: &ChunkId, place: &Place) -> std::io::Result<CheckedChunk> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path(dir, id, place))?;
    let stored = manifest::raw_stored(place.len as usize, |out| file.read_exact_at(out, place.at))?;
    let (checked, _) =
        manifest::verify_chunk(stored.into(), id, place.len).map_err(std::io::Error::other)?;
    Ok(checked)
}

/// The placed chunks found in `dir`, with their stored sizes: links named as places, to a
/// regular file that holds the place. Anything else there is removed (a link that no place
/// names is not trusted as one).
pub(crate) fn scan(dir: &Path) -> Vec<(ChunkId, Place)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let found = name.to_str().and_then(parse).and_then(|(id, at, len)| {
            let md = std::fs::symlink_metadata(e.path()).ok()?;
            let fits = md.is_file() && md.len() >= at + u64::from(len);
            let pack = PackKey::of(&md);
            fits.then_some((id, Place { pack, at, len }))
        });
        match found {
            Some(f) => out.push(f),
            None => {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    out
}

/// A pack's links and what its dropped chunks still hold.
#[derive(Debug, Default)]
struct Pack {
    links: u32,
    /// Stored bytes of its chunks dropped while other links lived: still in memory.
    dropped: u64,
}

/// The placed chunks of a store, and their packs.
#[derive(Debug, Default)]
pub(crate) struct Packs {
    places: HashMap<ChunkId, Place>,
    packs: HashMap<PackKey, Pack>,
}

impl Packs {
    /// Records chunk `id` at `place`.
    pub fn add(&mut self, id: ChunkId, place: Place) {
        if self.places.insert(id, place).is_none() {
            self.packs.entry(place.pack).or_default().links += 1;
        }
    }

    /// Where chunk `id` is placed, if it is.
    pub fn get(&self, id: &ChunkId) -> Option<&Place> {
        self.places.get(id)
    }

    /// Forgets chunk `id` of `stored` bytes: `None` if it was not placed, else its place
    /// and the stored bytes its drop frees: none while its pack has other links, and all
    /// the pack's dropped bytes once it has none.
    pub fn forget(&mut self, id: &ChunkId, stored: u64) -> Option<(Place, u64)> {
        let place = self.places.remove(id)?;
        let pack = self.packs.entry(place.pack).or_default();
        pack.links = pack.links.saturating_sub(1);
        pack.dropped += stored;
        if pack.links > 0 {
            return Some((place, 0));
        }
        let freed = pack.dropped;
        self.packs.remove(&place.pack);
        Some((place, freed))
    }

    /// How many chunks are placed.
    pub fn len(&self) -> usize {
        self.places.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(ino: u64, at: u64) -> Place {
        Place {
            pack: PackKey { dev: 1, ino },
            at,
            len: 10,
        }
    }

    #[test]
    fn a_packs_bytes_are_freed_with_its_last_link() {
        let (a, b, c) = (ChunkId::of(b"a"), ChunkId::of(b"b"), ChunkId::of(b"c"));
        let mut p = Packs::default();
        p.add(a, place(7, 0));
        p.add(b, place(7, 10));
        p.add(c, place(8, 0));
        assert_eq!(p.forget(&a, 11), Some((place(7, 0), 0)), "b still links it");
        assert_eq!(p.forget(&a, 11), None, "once only");
        assert_eq!(p.forget(&c, 11), Some((place(8, 0), 11)));
        assert_eq!(p.forget(&b, 11), Some((place(7, 10), 22)), "a's bytes too");
        assert_eq!(p.len(), 0);
        assert!(p.packs.is_empty());
    }

    #[test]
    fn names_round_trip_and_strangers_are_not_places() {
        let id = ChunkId::of(b"x");
        let name = place(1, 4096).name(&id);
        assert_eq!(parse(&name), Some((id, 4096, 10)));
        for bad in ["x.1.2", &format!("{}.1", id.to_hex()), &format!("{name}.3")] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_linked_place_reads_back_as_its_raw_chunk_and_survives_the_copys_name() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut plain = vec![0u8; 3000];
        blake3::Hasher::new().finalize_xof().fill(&mut plain);
        let copy = tmp.path().join("copy");
        let mut bytes = vec![9u8; 100];
        bytes.extend_from_slice(&plain);
        std::fs::write(&copy, &bytes).expect("write");
        let file = File::open(&copy).expect("open");
        let id = ChunkId::of(&plain);
        let dir = dir(tmp.path());
        let p = link(&dir, &file, &id, 100, plain.len() as u32).expect("link");
        std::fs::remove_file(&copy).expect("the copy goes");
        let stored = read(&dir, &id, &p).expect("read");
        assert_eq!(stored.stored()[..], manifest::encode_chunk(&plain, 1)[..]);
        assert_eq!(scan(&dir), vec![(id, p)]);
        assert!(
            link(&dir, &file, &id, 100, 5000).is_err(),
            "a place beyond the file's end"
        );
        drop(file);
        // A stranger in the directory is removed by the scan.
        std::fs::write(dir.join("junk"), b"x").expect("junk");
        assert_eq!(scan(&dir).len(), 1);
        assert!(!dir.join("junk").exists());
    }

    #[test]
    fn a_copy_removed_before_it_is_placed_cannot_be_placed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (f, path) = tempfile::NamedTempFile::new_in(tmp.path())
            .expect("named")
            .into_parts();
        f.write_all_at(&[1u8; 64], 0).expect("write");
        drop(path);
        let id = ChunkId::of(&[1u8; 64]);
        assert!(link(&dir(tmp.path()), &f, &id, 0, 64).is_err());
    }
}

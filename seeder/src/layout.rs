//! The store's layout on disk, in one place: every path of the store's objects is built
//! here, and every name found in its directories is parsed here.
//!
//! ```text
//! STORE/.lock                   the store's advisory lock (crate::lock)
//! STORE/chunks/<xx>/<id>        an encoded chunk; <xx> is its id's first two hex digits
//! STORE/indexes/<id>.idx        a signed index
//! STORE/indexes/tags/<name>     the id a tag names (crate::tags)
//! STORE/learned/<id>.list       an index's learned urgent list (crate::learned)
//! STORE/learned/rates.json      the link rates the pushes measured (crate::rates)
//! .tmp*                         a write not yet renamed into place, in any of these
//! ```
//!
//! Pure: names and paths only. It must not touch the filesystem: how a directory is read
//! (following links or not, by path or by descriptor) is its reader's business, so that
//! gc's descriptor-relative walk (`crate::dirs`) and a plain one share the names.

use std::path::{Path, PathBuf};

use manifest::{ChunkId, IndexId};

/// The directory of the chunk shards.
pub const CHUNKS: &str = "chunks";
/// The directory of the signed indexes.
pub const INDEXES: &str = "indexes";
/// The directory of the tags, inside [`INDEXES`].
pub const TAGS: &str = "tags";
/// The directory of the learned urgent lists.
pub const LEARNED: &str = "learned";
/// The learned link rates' file, inside [`LEARNED`].
pub const RATES: &str = "rates.json";
/// The store's lock file.
pub const LOCK: &str = ".lock";
/// How the name of a write not yet renamed into place starts.
pub const TEMP_PREFIX: &str = ".tmp";
/// How a temporary file this crate names itself starts (`learned/`).
pub const OWN_TEMP_PREFIX: &str = ".tmp-";

const INDEX_SUFFIX: &str = ".idx";
const LEARNED_SUFFIX: &str = ".list";

/// `STORE/chunks`.
pub fn chunks_dir(root: &Path) -> PathBuf {
    root.join(CHUNKS)
}

/// `STORE/indexes`.
pub fn indexes_dir(root: &Path) -> PathBuf {
    root.join(INDEXES)
}

/// `STORE/indexes/tags`.
pub fn tags_dir(root: &Path) -> PathBuf {
    indexes_dir(root).join(TAGS)
}

/// `STORE/learned`.
pub fn learned_dir(root: &Path) -> PathBuf {
    root.join(LEARNED)
}

/// `STORE/learned/rates.json`.
pub fn learned_rates(root: &Path) -> PathBuf {
    learned_dir(root).join(RATES)
}

/// `STORE/.lock`.
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK)
}

/// The shard directory's name of a chunk: its id's first two hex digits.
pub fn shard_of(id: &ChunkId) -> String {
    let mut hex = id.to_hex();
    hex.truncate(2);
    hex
}

/// `STORE/chunks/<xx>/<id>`.
pub fn chunk_path(root: &Path, id: &ChunkId) -> PathBuf {
    chunks_dir(root).join(shard_of(id)).join(id.to_hex())
}

/// `<id>.idx`, an index's file name in [`INDEXES`].
pub fn index_file_name(id: &IndexId) -> String {
    format!("{}{INDEX_SUFFIX}", id.to_hex())
}

/// `STORE/indexes/<id>.idx`.
pub fn index_path(root: &Path, id: &IndexId) -> PathBuf {
    indexes_dir(root).join(index_file_name(id))
}

/// `<id>.list`, a learned list's file name in [`LEARNED`].
pub fn learned_file_name(id: &IndexId) -> String {
    format!("{}{LEARNED_SUFFIX}", id.to_hex())
}

/// `STORE/learned/<id>.list`.
pub fn learned_path(root: &Path, id: &IndexId) -> PathBuf {
    learned_dir(root).join(learned_file_name(id))
}

/// Whether `name` in [`CHUNKS`] is a shard's: two hex digits.
pub fn is_shard(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The chunk a file `name` in shard `shard` holds: a chunk id starting with the shard's
/// digits. Other names are not chunks.
pub fn parse_chunk_name(shard: &str, name: &str) -> Option<ChunkId> {
    if !is_shard(shard) || !name.starts_with(shard) {
        return None;
    }
    name.parse().ok()
}

/// The index a file `name` in [`INDEXES`] holds (`<id>.idx`).
pub fn parse_index_name(name: &str) -> Option<IndexId> {
    name.strip_suffix(INDEX_SUFFIX)?.parse().ok()
}

/// The index whose learned list a file `name` in [`LEARNED`] is (`<id>.list`).
pub fn parse_learned_name(name: &str) -> Option<IndexId> {
    name.strip_suffix(LEARNED_SUFFIX)?.parse().ok()
}

/// Whether `name` is a write not yet renamed into place ([`TEMP_PREFIX`]).
pub fn is_temp(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// Whether `name` in [`LEARNED`] is a temporary file this crate made there
/// ([`OWN_TEMP_PREFIX`]).
pub fn is_own_temp(name: &str) -> bool {
    name.starts_with(OWN_TEMP_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_built_parses_back_to_its_id() {
        let root = Path::new("/s");
        let chunk = ChunkId::of(b"chunk");
        let hex = chunk.to_hex();
        let path = chunk_path(root, &chunk);
        assert_eq!(path, Path::new("/s/chunks").join(&hex[..2]).join(&hex));
        let shard = path
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .expect("shard");
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert_eq!(parse_chunk_name(shard, name), Some(chunk));

        let index = IndexId::of(b"index");
        let path = index_path(root, &index);
        assert_eq!(
            path,
            Path::new(&format!("/s/indexes/{}.idx", index.to_hex()))
        );
        assert_eq!(parse_index_name(&index_file_name(&index)), Some(index));
        let path = learned_path(root, &index);
        assert_eq!(
            path,
            Path::new(&format!("/s/learned/{}.list", index.to_hex()))
        );
        assert_eq!(parse_learned_name(&learned_file_name(&index)), Some(index));
        assert_eq!(tags_dir(root), Path::new("/s/indexes/tags"));
        assert_eq!(lock_path(root), Path::new("/s/.lock"));
    }

    #[test]
    fn names_that_are_not_objects_are_not_parsed() {
        let chunk = ChunkId::of(b"chunk").to_hex();
        let other_shard = if chunk.starts_with("00") { "01" } else { "00" };
        assert_eq!(parse_chunk_name(other_shard, &chunk), None, "wrong shard");
        assert_eq!(parse_chunk_name(&chunk[..3], &chunk), None, "not a shard");
        assert_eq!(parse_chunk_name(&chunk[..2], &chunk[..40]), None, "short");
        assert!(!is_shard("zz") && !is_shard("abc") && is_shard("0F"));
        let index = IndexId::of(b"index").to_hex();
        assert_eq!(parse_index_name(&index), None, "no suffix");
        assert_eq!(parse_index_name(&format!("{index}.list")), None);
        assert_eq!(parse_learned_name(&format!("{index}.idx")), None);
        assert!(is_temp(".tmpXYZ") && is_temp(".tmp-1") && !is_temp("tmp"));
        assert!(is_own_temp(".tmp-1") && !is_own_temp(".tmpXYZ"));
    }
}

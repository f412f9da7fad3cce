//! The JSON documents the store commands print with `--format json` (`publish`, `inspect`,
//! `verify`, `gc`): one typed struct per document, written by the `teesfs` binary and read by
//! tests and scripts through the same type, so the two cannot drift apart.
//!
//! Every document carries `"version": 1` ([`VERSION`]). Within a version fields are only ever
//! added; a field that changes meaning or goes away raises it. Sizes are bytes, times are
//! seconds since the Unix epoch, ids are lowercase hex. The other commands' documents live
//! with what they describe: `push` and `prefetch` in [`crate::PushReport`], `status` and
//! `health` in the node library (`node::control::Status`, `node::health::HealthReport`).
//!
//! Nothing here reads a store or formats for a terminal.

use serde::{Deserialize, Serialize};

/// The version of every document in this module.
pub const VERSION: u32 = 1;

/// What `teesfs publish --format json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishDoc {
    /// [`VERSION`].
    pub version: u32,
    /// The new index's id.
    pub index: String,
    /// The tag `--tag` pointed at it, if any.
    #[serde(default)]
    pub tag: Option<String>,
    /// When the index stops being accepted, if it was signed with an expiry.
    pub expires: Option<u64>,
    /// Regular files in the index.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links.
    pub hardlinks: u64,
    /// Entries an index cannot hold, left out (sockets, devices, ...): their paths.
    pub skipped: Vec<String>,
    /// Bytes of file content.
    pub file_bytes: u64,
    /// The index's chunk size in bytes (`--chunk-size auto` chose it from `file_bytes`).
    #[serde(default)]
    pub chunk_size: u64,
    /// Entries in the urgent set.
    pub urgent_entries: u64,
    /// Chunks of the urgent set.
    pub urgent_chunks: u64,
    /// Stored bytes of those chunks.
    pub urgent_bytes: u64,
    /// Chunk references (with repeats).
    pub chunks: u64,
    /// Distinct chunks.
    pub unique_chunks: u64,
    /// Chunks the store did not hold before.
    pub new_chunks: u64,
    /// Stored bytes of those.
    pub new_stored_bytes: u64,
    /// Stored (compressed) bytes of the distinct chunks.
    pub stored_bytes: u64,
    /// Size of the signed index file.
    pub index_bytes: u64,
    /// Wall time of the publish.
    pub elapsed_s: f64,
}

/// What `teesfs inspect --format json` prints without `--index`: the store's indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexList {
    /// [`VERSION`].
    pub version: u32,
    /// The store.
    pub store: String,
    /// Its indexes, by id.
    pub indexes: Vec<IndexSummary>,
}

/// One index of [`IndexList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexSummary {
    /// The index id.
    pub id: String,
    /// Size of the signed index file.
    pub bytes: u64,
    /// The publisher's public key.
    pub publisher: String,
    /// When it stops being accepted, if signed with an expiry.
    pub expires: Option<u64>,
    /// The tags that name it.
    #[serde(default)]
    pub tags: Vec<String>,
    /// When it was last published (its file's modification time).
    #[serde(default)]
    pub published: u64,
    /// Regular files in it.
    #[serde(default)]
    pub files: u64,
    /// Bytes of file content.
    #[serde(default)]
    pub file_bytes: u64,
    /// Stored (compressed) bytes of its distinct chunks.
    #[serde(default)]
    pub stored_bytes: u64,
    /// Stored bytes of the urgent set's chunks.
    #[serde(default)]
    pub urgent_bytes: u64,
}

/// What `teesfs inspect --format json --index ID` prints: one index and its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDoc {
    /// [`VERSION`].
    pub version: u32,
    /// The index id.
    pub id: String,
    /// The publisher's public key.
    pub publisher: String,
    /// When it stops being accepted, if signed with an expiry.
    pub expires: Option<u64>,
    /// Bytes of file content.
    pub file_bytes: u64,
    /// Distinct chunks.
    pub chunks: u64,
    /// Their stored (compressed) bytes.
    pub stored_bytes: u64,
    /// The chunk size.
    pub chunk_size: u64,
    /// Every entry, parents before children.
    pub entries: Vec<EntryDoc>,
    /// The image config of an index published with `teesfs publish --image`; null for a
    /// layer published from a directory.
    #[serde(default)]
    pub image: Option<ImageDoc>,
}

/// The image config of [`IndexDoc`]: the parts of the OCI image's config the index keeps,
/// as the image has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageDoc {
    /// `Env`: `NAME=value` strings, in the config's order.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`, if the image names one.
    pub working_dir: Option<String>,
    /// `User`, as the config has it (tasks run as their own user, not as this one).
    pub user: Option<String>,
    /// `Labels`, by key.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// One entry of [`IndexDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryDoc {
    /// Its path in the layer, relative to the root (lossy UTF-8).
    pub path: String,
    /// `file`, `dir`, `symlink` or `hardlink`.
    pub kind: String,
    /// Permission bits (of the target for a hard link).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// File size (of the target for a hard link; the target's length for a symlink).
    pub size: u64,
    /// A symlink's target, or the path a hard link points to.
    pub target: Option<String>,
    /// Its place in the urgent set (1 first), if it is in it.
    pub urgent: Option<u64>,
}

/// What `teesfs verify --format json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyDoc {
    /// [`VERSION`].
    pub version: u32,
    /// Whether every index checked verified.
    pub ok: bool,
    /// Every index checked.
    pub indexes: Vec<VerifiedIndex>,
}

/// One index of [`VerifyDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedIndex {
    /// The index id.
    pub id: String,
    /// Whether its signature and every chunk verified.
    pub ok: bool,
    /// Why the index itself was refused (signature, damage, untrusted key), if it was.
    pub refused: Option<String>,
    /// The publisher's public key, when the index opened.
    pub publisher: Option<String>,
    /// Entries in the index.
    pub entries: u64,
    /// Chunks it references.
    pub chunks: u64,
    /// Their stored bytes.
    pub stored_bytes: u64,
    /// What is wrong with each bad chunk (missing, damaged), all of them.
    pub bad_chunks: Vec<String>,
}

/// What `teesfs gc --format json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcDoc {
    /// [`VERSION`].
    pub version: u32,
    /// The store.
    pub store: String,
    /// Whether nothing was deleted (`--dry-run`).
    pub dry_run: bool,
    /// Whether the store's lock was held (false on a filesystem without locks, where the
    /// grace period was the only guard against a concurrent publish).
    pub locked: bool,
    /// Ids of the indexes kept.
    pub kept_indexes: Vec<String>,
    /// The indexes removed, newest first.
    pub removed_indexes: Vec<GcRemovedIndex>,
    /// Chunks kept because a kept index references them.
    pub kept_chunks: u64,
    /// Their bytes.
    pub kept_chunk_bytes: u64,
    /// Chunks no kept index references, kept because they are younger than the grace period.
    pub young_chunks: u64,
    /// Their bytes.
    pub young_chunk_bytes: u64,
    /// Chunks removed.
    pub removed_chunks: u64,
    /// Their bytes.
    pub removed_chunk_bytes: u64,
    /// Temporary files a crashed publish or `learn` left, removed (older than the grace
    /// period), and learned lists of indexes no longer in the store.
    #[serde(default)]
    pub removed_temp_files: u64,
    /// Their bytes.
    #[serde(default)]
    pub removed_temp_bytes: u64,
    /// Bytes freed: removed chunks, index files and temporary files.
    pub freed_bytes: u64,
    /// Tag files that could not be read as tags; while there is one, every index counts as
    /// tagged (gc removes none that a tag would keep).
    #[serde(default)]
    pub unreadable_tags: Vec<GcUnreadableTag>,
}

/// A tag file of [`GcDoc`] that does not hold an index id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcUnreadableTag {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

/// One index of [`GcDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRemovedIndex {
    /// The index id.
    pub id: String,
    /// The tags that named it, removed with it.
    pub tags: Vec<String>,
    /// When it was last published.
    pub published: u64,
    /// Size of its file.
    pub bytes: u64,
    /// Size of its learned urgent list (`learned/<id>.list`), removed with it; 0 without one.
    #[serde(default)]
    pub learned_bytes: u64,
}

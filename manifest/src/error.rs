//! The crate's one error type. Every decoding failure is a typed variant, never a panic.

use std::path::PathBuf;

use crate::ids::{ChunkId, IndexId};

/// Everything that can go wrong while encoding, decoding, verifying or building an index.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes do not start with the expected magic number.
    #[error("not a teesfs {what} (bad magic number)")]
    BadMagic {
        /// Which format was expected.
        what: &'static str,
    },
    /// The format version is newer or older than this build understands.
    #[error("unsupported {what} format version {version}")]
    UnsupportedVersion {
        /// Which format.
        what: &'static str,
        /// The version found.
        version: u8,
    },
    /// The input ended in the middle of a field.
    #[error("index truncated while reading {0}")]
    Truncated(&'static str),
    /// Bytes were left over after the last entry.
    #[error("{0} trailing bytes after the last index entry")]
    TrailingBytes(usize),
    /// A variable-length integer is longer than 10 bytes or overflows.
    #[error("malformed integer while reading {0}")]
    BadVarint(&'static str),
    /// A size or count is beyond the decoder's limits.
    #[error("{what} is {value}, above the limit of {limit}")]
    LimitExceeded {
        /// What was being counted.
        what: &'static str,
        /// The value found.
        value: u64,
        /// The configured limit.
        limit: u64,
    },
    /// An entry name is empty, `.`/`..`, contains `/` or NUL, or is too long.
    #[error("entry {entry}: invalid name {name:?}: {reason}")]
    BadName {
        /// Index of the entry.
        entry: u64,
        /// The name, lossily decoded.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Two entries of one directory have the same name.
    #[error("entry {entry}: duplicate name {name:?} in directory entry {parent}")]
    DuplicateName {
        /// Index of the second entry.
        entry: u64,
        /// Its parent directory.
        parent: u64,
        /// The name, lossily decoded.
        name: String,
    },
    /// An entry's parent index points past the end of the entry table.
    #[error("entry {entry}: parent {parent} does not exist")]
    DanglingParent {
        /// Index of the entry.
        entry: u64,
        /// The missing parent.
        parent: u64,
    },
    /// An entry's parent is itself or comes later, which could form a cycle.
    #[error("entry {entry}: parent {parent} is not an earlier entry (cycle or forward reference)")]
    Cycle {
        /// Index of the entry.
        entry: u64,
        /// The parent it names.
        parent: u64,
    },
    /// An entry's parent is not a directory.
    #[error("entry {entry}: parent {parent} is not a directory")]
    ParentNotDirectory {
        /// Index of the entry.
        entry: u64,
        /// The parent it names.
        parent: u64,
    },
    /// A hard link points at something that is not an earlier regular file.
    #[error("entry {entry}: hard link target {target} is not an earlier regular file")]
    BadHardlink {
        /// Index of the link entry.
        entry: u64,
        /// The target it names.
        target: u64,
    },
    /// An entry is inconsistent in some other way (size against chunk list, bad kind).
    #[error("entry {entry}: {reason}")]
    BadEntry {
        /// Index of the entry.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
    /// The ordered urgent list names a missing entry, one entry twice, or an unflagged one.
    #[error("urgent list position {position}: entry {entry}: {reason}")]
    BadUrgentList {
        /// Position in the list.
        position: u64,
        /// The entry it names.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
    /// A path given as urgent is not in the layer.
    #[error("urgent path {path:?} is not in the layer: {reason}")]
    UnknownUrgentPath {
        /// The path as given.
        path: String,
        /// Which part is missing or why it cannot be used.
        reason: String,
    },
    /// The image config section of an index is malformed (a bad presence byte, a string
    /// that is not UTF-8 or holds NUL, labels out of order).
    #[error("image config: {0}")]
    BadImageConfig(String),
    /// The chunk table is inconsistent.
    #[error("chunk table entry {chunk}: {reason}")]
    BadChunkTable {
        /// Position in the chunk table.
        chunk: u64,
        /// What is wrong.
        reason: String,
    },
    /// A signed index whose expiry has passed: its publisher must sign it again.
    #[error(
        "index {id} expired at {at} (seconds since 1970; now {now}): ask its publisher to \
         publish it again (`teesfs publish --expires-in ...`)"
    )]
    Expired {
        /// The index.
        id: crate::ids::IndexId,
        /// When it expired.
        at: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// The signature does not verify against the key in the envelope.
    #[error(
        "index signature does not verify (publisher key {key}): the index was altered or corrupted"
    )]
    BadSignature {
        /// The publisher key named in the envelope.
        key: String,
    },
    /// The index is signed by a key that is not trusted.
    #[error("index is signed by publisher key {key}, which is not among the trusted keys")]
    UntrustedKey {
        /// The publisher key named in the envelope.
        key: String,
    },
    /// The index content does not hash to the id it was requested by.
    #[error("index id mismatch: expected {expected}, content hashes to {actual}")]
    IdMismatch {
        /// The id asked for.
        expected: IndexId,
        /// The id of the bytes received.
        actual: IndexId,
    },
    /// A stored chunk does not decode to bytes matching its id.
    #[error("chunk {id} is corrupt: {reason}")]
    CorruptChunk {
        /// The chunk's id.
        id: ChunkId,
        /// What did not match.
        reason: String,
    },
    /// zstd could not decompress the index body.
    #[error("index body does not decompress: {0}")]
    Decompress(std::io::Error),
    /// A hex string (id or key) is malformed.
    #[error("invalid {what}: {reason}")]
    BadHex {
        /// What was parsed.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A key file is malformed.
    #[error("invalid key file: {0}")]
    BadKey(String),
    /// A file changed (size, mtime or ctime) while it was being read.
    #[error("{} changed while it was being published", path.display())]
    FileChanged {
        /// The file.
        path: PathBuf,
    },
    /// A file carries an extended attribute or ACL that an index cannot keep: publishing
    /// without it could widen access (an ACL that denied someone) or drop a capability.
    #[error("{} has the extended attribute {name:?}, which an index cannot keep (dropping an ACL can widen access); remove it (setfacl -b / setfattr -x) or publish with --ignore-xattrs", path.display())]
    Xattr {
        /// The file.
        path: PathBuf,
        /// The attribute.
        name: String,
    },
    /// Reading the layer failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path being read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The chunk sink (the store) refused a chunk.
    #[error("cannot store chunk {id}: {source}")]
    Sink {
        /// The chunk being stored.
        id: ChunkId,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The job spec (`manifest.toml`) is malformed.
    #[error("manifest.toml: {0}")]
    JobSpec(String),
    /// The site configuration (`teesfs.toml`) is malformed: the file, line and key.
    #[error("site configuration {0}")]
    SiteConfig(String),
    /// The operating system's random number generator failed.
    #[error("no randomness available for key generation: {0}")]
    Random(String),
}

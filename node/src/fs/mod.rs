//! The read-only layer filesystem.
//!
//! - [`tree`]: pure navigation over an index (lookup, attributes, listings).
//! - [`ahead`]: passthrough copies made as a node's chunks arrive, before any open.
//! - [`copies`]: materialised files for passthrough: a private directory, a budget, and
//!   a check before each mount's first use.
//! - [`data`]: file contents: chunk fetch through a [`crate::source::ChunkSource`], verify,
//!   cache, one in-flight fetch per chunk, and materialised files for passthrough.
//! - [`fuse`]: the thin fuser adapter; the only place that speaks errno.
//! - [`counters`]: the requests a mount answered, by kind (tests, the read-path benchmark).
//! - [`mount`](mod@mount): mounting, options, and clean unmount on signals.
//! - [`record`]: what a program opens, probes and waits for, for `teesfs record` and the
//!   daemon's record of each job's start.

pub mod ahead;
pub mod copies;
pub mod counters;
pub mod data;
pub mod fuse;
pub mod mount;
pub mod record;
pub mod tree;

/// Why a filesystem request failed. Mapped to errno in exactly one place ([`FsError::errno`]).
/// `Clone`, because one failed fetch answers every reader that waited for it: the error
/// underneath is shared, not flattened into text.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FsError {
    /// No such entry or inode.
    #[error("no such file or directory")]
    NotFound,
    /// A directory operation on something else.
    #[error("not a directory")]
    NotDir,
    /// A file operation on a directory.
    #[error("is a directory")]
    IsDir,
    /// The request makes no sense for this inode (readlink on a file).
    #[error("invalid argument")]
    Invalid,
    /// The layer is read-only.
    #[error("read-only layer")]
    ReadOnly,
    /// A chunk failed verification: the data is never returned.
    #[error("chunk failed verification: {0}")]
    Corrupt(String),
    /// A chunk could not be fetched, or a passthrough copy not made: what failed, and the
    /// error underneath.
    #[error("{what}: {source}")]
    Unavailable {
        /// What could not be done.
        what: &'static str,
        /// Why.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    /// No room for a passthrough copy within the copies budget.
    #[error("no room for a passthrough copy within the copies budget")]
    NoCopyRoom,
    /// A chunk did not arrive within the read bound.
    #[error("chunk {chunk} did not arrive within {} s", .waited.as_secs())]
    TimedOut {
        /// The chunk (short id).
        chunk: String,
        /// How long the read waited.
        waited: std::time::Duration,
    },
}

impl FsError {
    /// The errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::Invalid => libc::EINVAL,
            FsError::ReadOnly => libc::EROFS,
            FsError::Corrupt(_)
            | FsError::Unavailable { .. }
            | FsError::NoCopyRoom
            | FsError::TimedOut { .. } => libc::EIO,
        }
    }

    /// `what` could not be done because of `source`.
    pub(crate) fn unavailable(
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> FsError {
        FsError::Unavailable {
            what,
            source: std::sync::Arc::new(source),
        }
    }
}

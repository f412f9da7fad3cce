//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong on the publishing side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An index or chunk format error.
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    /// A file or directory of the store could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The layer to publish is not a directory.
    #[error("{0} is not a directory: a layer is a directory tree")]
    NotADirectory(PathBuf),
    /// No index in the store matches the id or prefix.
    #[error("no index {id} in store {store} (run `teesfs inspect --store {store}` to list them)")]
    IndexNotFound {
        /// What was asked for.
        id: String,
        /// The store searched.
        store: PathBuf,
    },
    /// An id prefix matches several indexes.
    #[error("index prefix {prefix} is ambiguous: it matches {count} indexes; give more characters")]
    AmbiguousPrefix {
        /// The prefix given.
        prefix: String,
        /// How many matched.
        count: usize,
    },
    /// A chunk listed in the index is not in the store.
    #[error("chunk {0} is missing from the store")]
    MissingChunk(manifest::ChunkId),
    /// A chunk in the store does not decode to its id (damaged, truncated or planted).
    #[error("chunk {id} in the store ({}) is bad: {reason}; publish the layer again to replace it", path.display())]
    BadChunk {
        /// The chunk.
        id: manifest::ChunkId,
        /// Its file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file kept changing while it was published.
    #[error("{} kept changing while it was published ({attempts} attempts); publish it when it is not being written", path.display())]
    ChangedWhilePublished {
        /// The file.
        path: PathBuf,
        /// Attempts made.
        attempts: u32,
    },
    /// A command to analyse is not in the view.
    #[error("command {command:?} not found: {reason}")]
    CommandNotFound {
        /// The command as given.
        command: String,
        /// Where it was looked for.
        reason: String,
    },
    /// A file that must run is neither ELF nor a usable `#!` script.
    #[error("{path}: {reason}")]
    NotExecutable {
        /// The file (a view path).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An ELF file the loader would read is malformed.
    #[error("{path}: {reason}")]
    BadElf {
        /// The file (a view path).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

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
    /// No index in the store matches the tag, id or prefix.
    #[error(
        "no index {id} in store {store}: give at least 4 hex characters of the id, or a tag \
         (`teesfs inspect --store {store}` lists them)",
        store = store.display()
    )]
    IndexNotFound {
        /// What was asked for.
        id: String,
        /// The store searched.
        store: PathBuf,
    },
    /// A store holds no index to work on.
    #[error("store {} holds no index", store.display())]
    NoIndex {
        /// The store.
        store: PathBuf,
    },
    /// What `--index` was given is neither a tag name nor at least 4 hex characters.
    #[error(
        "{given:?} is neither a tag nor an index id prefix: give at least 4 hex characters of \
         the id, or a tag (`teesfs inspect --store {store}` lists them)",
        store = store.display()
    )]
    NotAnIndexName {
        /// What was given.
        given: String,
        /// The store.
        store: PathBuf,
    },
    /// An id prefix matches several indexes.
    #[error(
        "index prefix {prefix} is ambiguous: it matches {count} indexes; give more hex \
         characters of the id, or a tag (`teesfs inspect --store {store}` lists them)",
        store = store.display()
    )]
    AmbiguousPrefix {
        /// The prefix given.
        prefix: String,
        /// How many matched.
        count: usize,
        /// The store.
        store: PathBuf,
    },
    /// A tag names an index the store no longer holds.
    #[error(
        "tag {tag} names index {id}, which store {store} no longer holds; publish it again \
         with --tag {tag}, or give another index",
        store = store.display()
    )]
    TagTargetMissing {
        /// The tag.
        tag: String,
        /// The index it names.
        id: String,
        /// The store.
        store: PathBuf,
    },
    /// A tag name breaks the naming rule.
    #[error(
        "bad tag name {name:?}: {reason}; a tag is 1 to 64 characters of A-Z a-z 0-9 . _ -, \
         not starting with . or -, and not all hex digits (that would read as an id prefix)"
    )]
    BadTagName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A tag file does not hold an index id.
    #[error("tag file {} is damaged ({reason}); tag the index again with `teesfs publish --tag` or remove the file", path.display())]
    BadTag {
        /// The tag file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another process holds the store's lock (a publish, a reader such as a push, a mount
    /// or a storage-mode node, or another gc).
    #[error("store {} is busy: {holder} holds {} (a publish, a push, a mount or another gc); run gc again when it is done", store.display(), crate::layout::lock_path(store).display())]
    StoreBusy {
        /// The store.
        store: PathBuf,
        /// Who holds it, as far as this user can see.
        holder: String,
    },
    /// A wait for the store's lock (a gc holds it) gave up.
    #[error("gave up after {waited} waiting for the lock of store {}: {holder} holds {} (a gc); run again when it is done, or wait longer (--lock-wait)", store.display(), crate::layout::lock_path(store).display())]
    LockTimeout {
        /// The store.
        store: PathBuf,
        /// Who holds it, as far as this user can see.
        holder: String,
        /// How long it waited.
        waited: String,
    },
    /// A store whose own directories gc cannot trust: a top-level entry is a link, not a
    /// directory, writable by everyone, or belongs to someone else.
    #[error(
        "store {} refused: its {entry} {reason}; gc never follows links or works in \
         directories others control: check who changed it, put the store's own {entry} back \
         (owned by uid {owner}, the store directory's owner, or root) and run gc again",
        store.display()
    )]
    UnsafeStore {
        /// The store.
        store: PathBuf,
        /// The entry, relative to the store.
        entry: String,
        /// What is wrong with it.
        reason: String,
        /// The store directory's owner.
        owner: u32,
    },
    /// An index that gc keeps cannot be read, so the chunks it needs are unknown.
    #[error("index {id} in store {} cannot be read ({reason}), so gc cannot tell which chunks it needs; \
             publish it again or remove {}, then run gc again", store.display(), crate::layout::index_path(store, id).display())]
    UnreadableIndex {
        /// The index.
        id: manifest::IndexId,
        /// The store.
        store: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A learned urgent list in the store is not one ([`crate::learned`]).
    #[error("learned urgent list {} is unusable: {reason}; remove it, or run `teesfs learn` again to replace it", path.display())]
    BadLearnedList {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The learned link rates' file in the store cannot be read ([`crate::rates`]).
    #[error("learned link rates {} are unusable: {reason}; they are ignored (the next push rewrites them; remove the file to start afresh)", path.display())]
    BadLearnedRates {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
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

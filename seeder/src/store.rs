//! A content-addressed store in a directory:
//! `chunks/<first two hex>/<id>` hold encoded chunks, `indexes/<id>.idx` signed indexes,
//! `indexes/tags/<name>` the ids tags name ([`crate::tags`]); [`crate::layout`] builds and
//! parses these paths.
//! An index id names content **and** signer ([`SignedIndex::id`]), so the same layer signed
//! with two keys is two files, and `--index PREFIX` always means one envelope.
//!
//! Writes go to a temporary file and are renamed into place, so a reader never sees a
//! half-written object and two publishers writing the same chunk do not conflict.
//!
//! A file's existence proves nothing (a truncated write, a planted object): a chunk already
//! present counts as present only if it decodes to its id ([`ChunkSink::stored_form`]), and
//! a bad one is replaced. Objects are read without following symlinks, only if regular
//! files, and only up to the longest a valid object can be.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use manifest::{CheckedChunk, ChunkId, ChunkSink, IndexId, SignedIndex};

use crate::files::{Symlinks, read_limited};
use crate::{Error, layout};

/// The longest a stored chunk can be: the largest chunk size, raw, plus its header.
pub const MAX_STORED_CHUNK: u64 = (64 << 20) + 4096;

/// A chunk and index store rooted at a directory.
#[derive(Clone, Debug)]
pub struct DirStore {
    root: PathBuf,
    /// The store's lock, held shared while this (or a clone) reads
    /// ([`DirStore::locked_for_reading`]).
    reading: Option<std::sync::Arc<crate::lock::StoreLock>>,
    /// How long taking the lock shared waits for a gc ([`DirStore::with_lock_wait`]).
    lock_wait: std::time::Duration,
}

/// The store's error for an I/O failure on `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl DirStore {
    /// Opens a store, creating its directories if needed.
    pub fn create(root: &Path) -> Result<Self, Error> {
        for p in [layout::chunks_dir(root), layout::indexes_dir(root)] {
            crate::shared::make_dirs(root, &p).map_err(io(&p))?;
        }
        Ok(Self {
            root: root.to_path_buf(),
            reading: None,
            lock_wait: crate::lock::DEFAULT_LOCK_WAIT,
        })
    }

    /// Opens an existing store.
    pub fn open(root: &Path) -> Result<Self, Error> {
        if !layout::indexes_dir(root).is_dir() {
            return Err(Error::Io {
                path: root.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a teesfs store (no indexes/ directory); publish into it first",
                ),
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
            reading: None,
            lock_wait: crate::lock::DEFAULT_LOCK_WAIT,
        })
    }

    /// This store, holding `lock` for as long as it or a clone lives.
    pub(crate) fn holding(&self, lock: crate::lock::StoreLock) -> Self {
        Self {
            root: self.root.clone(),
            reading: Some(std::sync::Arc::new(lock)),
            lock_wait: self.lock_wait,
        }
    }

    /// This store with `wait` as the longest a publish or a reader waits for a gc to
    /// release the store's lock ([`crate::lock::DEFAULT_LOCK_WAIT`] by default).
    pub fn with_lock_wait(mut self, wait: std::time::Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Whether this handle holds the store's lock shared for reading
    /// ([`DirStore::locked_for_reading`]; false on a filesystem without locks).
    pub fn holds_read_lock(&self) -> bool {
        self.reading.as_ref().is_some_and(|l| l.is_held())
    }

    /// How long taking the lock shared waits for a gc.
    pub fn lock_wait(&self) -> std::time::Duration {
        self.lock_wait
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a chunk lives.
    pub fn chunk_path(&self, id: &ChunkId) -> PathBuf {
        layout::chunk_path(&self.root, id)
    }

    /// Where an index lives.
    pub fn index_path(&self, id: &IndexId) -> PathBuf {
        layout::index_path(&self.root, id)
    }

    /// Reads a chunk's encoded bytes (a regular file, not a symlink, of at most
    /// [`MAX_STORED_CHUNK`] bytes).
    pub fn get_chunk(&self, id: &ChunkId) -> Result<Vec<u8>, Error> {
        self.read_chunk(id).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingChunk(*id)
            } else {
                Error::Io {
                    path: self.chunk_path(id),
                    source: e,
                }
            }
        })
    }

    /// [`DirStore::get_chunk`], with the I/O error as it is.
    pub(crate) fn read_chunk(&self, id: &ChunkId) -> std::io::Result<Vec<u8>> {
        read_limited(&self.chunk_path(id), MAX_STORED_CHUNK, Symlinks::Refuse)
    }

    /// The chunk files in the store with their sizes: every `chunks/<xx>/<id>` entry named
    /// as a chunk ([`layout::parse_chunk_name`]), as found: neither read nor verified, a
    /// link counted as itself. Best effort: what cannot be read is skipped, as if absent.
    pub fn stored_chunks(&self) -> Vec<(ChunkId, u64)> {
        let mut out = Vec::new();
        let top = layout::chunks_dir(&self.root);
        for shard in std::fs::read_dir(top).into_iter().flatten().flatten() {
            let shard_name = shard.file_name();
            let Some(shard_name) = shard_name.to_str().filter(|n| layout::is_shard(n)) else {
                continue;
            };
            for f in std::fs::read_dir(shard.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let id = f
                    .file_name()
                    .to_str()
                    .and_then(|n| layout::parse_chunk_name(shard_name, n));
                if let (Some(id), Ok(md)) = (id, f.metadata()) {
                    out.push((id, md.len()));
                }
            }
        }
        out
    }

    pub(crate) fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.write_atomic_then(dest, bytes, |_| {})
    }

    /// [`Self::write_atomic`], calling `written` with the file once its bytes are in and
    /// before it is renamed into place.
    fn write_atomic_then(
        &self,
        dest: &Path,
        bytes: &[u8],
        written: impl FnOnce(&std::fs::File),
    ) -> std::io::Result<()> {
        let dir = dest.parent().expect("store paths always have a parent");
        // Objects are content-addressed and the index is signed: readable by whoever may
        // enter the store's directory (the Slurm prolog runs as the Slurm user, not as the
        // publisher). A private layer is a store directory others cannot enter.
        use std::os::unix::fs::PermissionsExt;
        let create = || {
            tempfile::Builder::new()
                .permissions(std::fs::Permissions::from_mode(0o644))
                .tempfile_in(dir)
        };
        let mut tmp = match create() {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::shared::make_dirs(&self.root, dir)?;
                create()?
            }
            Err(e) => return Err(e),
        };
        tmp.write_all(bytes)?;
        written(tmp.as_file());
        tmp.persist(dest).map_err(|e| e.error)?;
        Ok(())
    }

    /// Writes `id`'s stored form, as the publisher just encoded it, and marks the file as
    /// holding it ([`crate::mark`]), so the push root need not hash it at every push.
    pub(crate) fn put_marked(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        let hash = manifest::StoredForm::of(stored).hash;
        self.write_atomic_then(&self.chunk_path(id), stored, |f| {
            crate::mark::mark(f, id, hash);
        })
    }

    /// Stores a signed index; returns its id. An existing file of that id that is not
    /// this envelope (truncated, damaged, planted) is replaced: signing is deterministic,
    /// so a good copy is byte for byte the same.
    pub fn put_index(&self, signed: &SignedIndex) -> Result<IndexId, Error> {
        let id = signed.id();
        let p = self.index_path(&id);
        let same = read_limited(&p, signed.as_bytes().len() as u64, Symlinks::Refuse)
            .is_ok_and(|b| b == signed.as_bytes());
        if same {
            // Published again: it is the newest for `gc --keep N`. Best effort: another
            // user's file keeps its time, which only makes it older to gc.
            let touched = std::fs::File::options()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            if let Err(e) = touched {
                tracing::warn!(path = %p.display(), error = %e, "cannot refresh the time of a republished index");
            }
        } else {
            self.write_atomic(&p, signed.as_bytes()).map_err(io(&p))?;
        }
        Ok(id)
    }

    /// Reads a signed index's bytes (not yet verified): a regular file, not a symlink, of
    /// at most the signed-index size limit.
    pub fn get_index(&self, id: &IndexId) -> Result<Vec<u8>, Error> {
        let p = self.index_path(id);
        read_limited(
            &p,
            manifest::Limits::default().max_signed_bytes,
            Symlinks::Refuse,
        )
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::IndexNotFound {
                    id: id.to_hex(),
                    store: self.root.clone(),
                }
            } else {
                Error::Io { path: p, source: e }
            }
        })
    }

    /// Ids of all indexes in the store, sorted.
    pub fn list_indexes(&self) -> Result<Vec<IndexId>, Error> {
        let dir = layout::indexes_dir(&self.root);
        let mut out = Vec::new();
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            if let Some(id) = item.file_name().to_str().and_then(layout::parse_index_name) {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Whether the store holds an index file of that id (without reading it).
    pub fn has_index(&self, id: &IndexId) -> bool {
        std::fs::symlink_metadata(self.index_path(id)).is_ok_and(|m| m.is_file())
    }

    /// When an index was last published: its file's modification time (a publish of an
    /// index already there refreshes it).
    pub fn index_published(&self, id: &IndexId) -> Result<std::time::SystemTime, Error> {
        let p = self.index_path(id);
        std::fs::symlink_metadata(&p)
            .and_then(|m| m.modified())
            .map_err(io(&p))
    }
}

/// A chunk's stored bytes as a [`ChunkStore`] hands them out.
#[derive(Debug, Clone)]
pub enum StoredChunk {
    /// Checked against the chunk's id when they came in, and held in memory since: usable
    /// as they are.
    Checked(CheckedChunk),
    /// Read back from the store's files, which prove nothing: whoever uses them verifies
    /// them first (a reader here, or the child they are sent to).
    Unchecked(Bytes),
}

impl StoredChunk {
    /// The stored bytes, shared.
    pub fn bytes(&self) -> &Bytes {
        match self {
            StoredChunk::Checked(c) => c.stored(),
            StoredChunk::Unchecked(b) => b,
        }
    }
}

/// A content-addressed chunk store, as a push and a node use it: the one trait of the
/// publisher's [`DirStore`] (the root of a push reads from it) and of a node's budgeted
/// store (which keeps what arrives and serves its children). Writing goes through
/// [`ChunkSink`], which the builder uses too.
pub trait ChunkStore: ChunkSink + Send + Sync + 'static {
    /// The stored bytes of a chunk, if held and readable. May read a file: call it where
    /// blocking is allowed, unless [`ChunkStore::get_cached`] had it.
    fn get(&self, id: &ChunkId) -> Option<StoredChunk>;
    /// Whether reading a small chunk from this store costs less than handing the read to
    /// another thread and back: true for a node's own store (its files live in memory or
    /// a local page cache), false where a read may wait on a disk or a network file system.
    fn small_reads_are_cheap(&self) -> bool {
        false
    }
    /// The stored bytes of a chunk if the store has them in memory (no I/O), else `None`.
    fn get_cached(&self, _id: &ChunkId) -> Option<StoredChunk> {
        None
    }
    /// Whether a chunk is held (cheap: no read).
    fn contains(&self, id: &ChunkId) -> bool;
    /// Keeps a chunk checked on arrival. A store that keeps recent chunks in memory keeps
    /// this one, so that sending it on or reading it does not read its file back.
    fn put_checked(&self, chunk: &CheckedChunk) -> std::io::Result<()> {
        self.put(chunk.id(), chunk.stored())
    }
    /// Keeps a raw chunk checked on arrival whose plain bytes the caller has written at
    /// `at` in `file` (a node's copy made ahead, never written there again): a store that
    /// can keep the chunk in that file need not write its bytes a second time.
    fn put_placed(
        &self,
        chunk: &CheckedChunk,
        _file: &std::fs::File,
        _at: u64,
    ) -> std::io::Result<()> {
        self.put_checked(chunk)
    }
    /// A raw chunk held already whose plain bytes (`plain_len` of them) the caller has
    /// since written at `at` in `file`, as for [`ChunkStore::put_placed`]: a store that can
    /// keep the chunk there may give up its own copy of the bytes.
    fn keep_placed(&self, _id: &ChunkId, _plain_len: u32, _file: &std::fs::File, _at: u64) {}
}

impl ChunkStore for DirStore {
    fn get(&self, id: &ChunkId) -> Option<StoredChunk> {
        self.get_chunk(id)
            .ok()
            .map(|b| StoredChunk::Unchecked(b.into()))
    }
    fn contains(&self, id: &ChunkId) -> bool {
        self.chunk_path(id).exists()
    }
}

impl ChunkSink for DirStore {
    fn stored_form(&self, id: &ChunkId, plain_len: u32) -> Option<manifest::StoredForm> {
        let stored = match self.get_chunk(id) {
            Ok(s) => s,
            Err(Error::MissingChunk(_)) => return None,
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "an object in the store cannot be used; replacing it");
                return None;
            }
        };
        match manifest::decode_chunk(&stored, id, plain_len) {
            Ok(_) => Some(manifest::StoredForm::of(&stored)),
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "a chunk in the store is damaged or planted; replacing it");
                None
            }
        }
    }

    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.write_atomic(&self.chunk_path(id), stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn store() -> (tempfile::TempDir, DirStore) {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(&t.path().join("store")).expect("store");
        (t, s)
    }

    /// A chunk of 100 KB that compresses, its id and encoded form.
    fn chunk() -> (ChunkId, Vec<u8>) {
        let plain = b"teesfs ".repeat(100_000 / 7);
        (ChunkId::of(&plain), manifest::encode_chunk(&plain, 1))
    }

    /// What a node's store counts at start: the chunk files, by their names' ids, and
    /// nothing else found in the chunk directories.
    #[test]
    fn stored_chunks_are_the_files_named_as_chunks_in_their_shards() {
        let (_t, s) = store();
        let (id, stored) = chunk();
        s.put(&id, &stored).expect("put");
        let other = ChunkId::of(b"other");
        s.put(&other, b"12345").expect("put");
        let top = layout::chunks_dir(s.root());
        let wrong_shard = if other.to_hex().starts_with("00") {
            "01"
        } else {
            "00"
        };
        std::fs::create_dir_all(top.join(wrong_shard)).expect("mkdir");
        std::fs::write(top.join(wrong_shard).join(other.to_hex()), b"x").expect("misplaced");
        std::fs::write(top.join(layout::shard_of(&id)).join(".tmp-1"), b"x").expect("tmp");
        std::fs::create_dir_all(top.join("zz")).expect("mkdir");
        std::fs::write(top.join("zz").join(id.to_hex()), b"x").expect("not a shard");
        let mut found = s.stored_chunks();
        found.sort();
        let mut want = vec![(id, stored.len() as u64), (other, 5)];
        want.sort();
        assert_eq!(found, want);
    }

    /// Runs `f` on a thread and fails the test if it has not answered within 10 s (a FIFO
    /// opened for reading without a writer blocks for ever).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the store hung on a FIFO")
    }

    #[test]
    fn a_chunk_symlinked_to_dev_zero_is_refused_not_read() {
        let (_t, s) = store();
        let (id, _) = chunk();
        let p = s.chunk_path(&id);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink("/dev/zero", &p).expect("symlink");
        let err = s.get_chunk(&id).expect_err("a symlink");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(s.stored_form(&id, 100_000), None, "not counted as present");
    }

    #[test]
    fn a_fifo_chunk_does_not_hang_get_chunk() {
        let (_t, s) = store();
        let (id, stored) = chunk();
        let p = s.chunk_path(&id);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let s2 = s.clone();
        let err = within_10s(move || s2.get_chunk(&id)).expect_err("a FIFO");
        assert!(err.to_string().contains("FIFO"), "{err}");
        let s2 = s.clone();
        assert_eq!(within_10s(move || s2.stored_form(&id, 99_995)), None);
        s.put(&id, &stored).expect("put replaces the FIFO");
        assert_eq!(s.get_chunk(&id).expect("chunk"), stored);
    }

    #[test]
    fn an_oversized_chunk_file_is_refused_at_the_bound() {
        let (_t, s) = store();
        let (id, _) = chunk();
        let p = s.chunk_path(&id);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let f = std::fs::File::create(&p).expect("create");
        f.set_len(MAX_STORED_CHUNK + 1).expect("sparse file");
        let err = s.get_chunk(&id).expect_err("too long");
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    /// An existing object counted as present by its name alone: an empty, truncated or
    /// planted file under a chunk's id was kept, and the index that listed it signed.
    #[test]
    fn an_existing_chunk_counts_only_if_it_decodes_to_its_id_and_put_replaces_it() {
        let (_t, s) = store();
        let (id, stored) = chunk();
        let plain_len = 100_000 / 7 * 7;
        let p = s.chunk_path(&id);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let planted = manifest::encode_chunk(&vec![1u8; plain_len as usize], 1);
        for bad in [&b""[..], &stored[..stored.len() / 2], &planted[..]] {
            std::fs::write(&p, bad).expect("write");
            assert_eq!(
                s.stored_form(&id, plain_len),
                None,
                "{} bad bytes",
                bad.len()
            );
            s.put(&id, &stored).expect("put");
            assert_eq!(
                s.stored_form(&id, plain_len),
                Some(manifest::StoredForm::of(&stored))
            );
        }
    }

    /// A planted symlink at a chunk's path is replaced, never written through.
    #[test]
    fn put_replaces_a_symlinked_chunk_without_writing_to_its_target() {
        let (t, s) = store();
        let (id, stored) = chunk();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep me").expect("write");
        let p = s.chunk_path(&id);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&victim, &p).expect("symlink");
        s.put(&id, &stored).expect("put");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
        assert!(std::fs::symlink_metadata(&p).expect("stat").is_file());
    }

    #[test]
    fn put_index_replaces_a_damaged_index_and_get_index_refuses_a_fifo() {
        let (_t, s) = store();
        let key = manifest::SecretKey::generate().expect("key");
        let index = manifest::Index {
            chunk_size: 1 << 20,
            chunks: Vec::new(),
            entries: vec![manifest::Entry {
                parent: manifest::EntryIdx(0),
                name: Box::default(),
                meta: manifest::Meta::default(),
                flags: manifest::EntryFlags::default(),
                kind: manifest::EntryKind::Dir,
            }],
            urgent: Vec::new(),
            image: None,
        };
        let signed = SignedIndex::sign(&index, &key, 3);
        let id = s.put_index(&signed).expect("put");
        let p = s.index_path(&id);
        let good = std::fs::read(&p).expect("read");
        std::fs::write(&p, &good[..good.len() - 3]).expect("truncate");
        s.put_index(&signed).expect("put again");
        assert_eq!(s.get_index(&id).expect("index"), good, "repaired");

        std::fs::remove_file(&p).expect("rm");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let s2 = s.clone();
        let err = within_10s(move || s2.get_index(&id)).expect_err("a FIFO");
        assert!(err.to_string().contains("FIFO"), "{err}");
        s.put_index(&signed).expect("put replaces the FIFO");
        assert_eq!(s.get_index(&id).expect("index"), good);
    }
}

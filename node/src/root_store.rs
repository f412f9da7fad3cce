//! The push root's reads from the login node's store, checked: every chunk it is about to
//! send is verified against the index first, and a chunk that is missing, unreadable or
//! damaged is reported to the push at once ([`BadChunk`]), named with its index and the
//! store, instead of being sent for the nodes to refuse. Sent anyway, the nodes called the
//! root a liar and the push waited out its timeout (30 minutes in the Slurm prolog) without
//! a word about the store.
//!
//! A chunk is hashed once per file: read again (the root sends each chunk to every child),
//! it is checked again only if its file changed since (another inode, size or change
//! time), so the root's CPU stays on sending. Across pushes, a file's mark
//! ([`seeder::mark`], set by the publisher and by the check here) stands for that check:
//! hashing was a fifth of the root's CPU per GiB (issue 33). Damage a mark cannot see goes
//! out, every node refuses it, and the push then checks the whole store without marks
//! ([`CheckedStore::recheck`]) and fails naming the chunk. This never repairs the store and
//! never fetches anything: what to do is the operator's (`teesfs verify`, publish again).

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::sync::lock;
use manifest::{ChunkId, ChunkSink, Index, IndexId};
use peertree::relay::ChunkNo;
use seeder::{ChunkStore, DirStore, StoredChunk};
use tokio::sync::mpsc;

/// What is wrong with a chunk in the root's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Its file is gone (removed by `teesfs gc` or by hand, or never published whole).
    Missing,
    /// Its file is there but cannot be read (permissions, a symlink, an I/O error).
    Unreadable(String),
    /// Its bytes do not decode to its id (damaged on disk, truncated, planted).
    Damaged(String),
}

/// A chunk of the index the root could not send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadChunk {
    /// The chunk.
    pub chunk: ChunkId,
    /// Its number in the index's chunk table.
    pub position: ChunkNo,
    /// Its file.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: Problem,
}

impl std::fmt::Display for BadChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chunk {} (number {}) ", self.chunk, self.position)?;
        match &self.problem {
            Problem::Missing => write!(
                f,
                "is missing: {} is gone (removed by `teesfs gc` or by hand, or the layer was \
                 never published whole)",
                self.path.display()
            ),
            Problem::Unreadable(why) => {
                write!(f, "cannot be read: {}: {why}", self.path.display())
            }
            Problem::Damaged(why) => write!(
                f,
                "is damaged on disk: {} does not match its id ({why})",
                self.path.display()
            ),
        }
    }
}

/// Chunks of a pushed index the root's store cannot deliver: the push fails with this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFault {
    /// The store.
    pub store: PathBuf,
    /// The index pushed.
    pub index: IndexId,
    /// The chunks, at least one.
    pub bad: Vec<BadChunk>,
}

/// How many bad chunks a fault names one by one.
const NAMED: usize = 5;

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = self.store.display();
        write!(
            f,
            "the root's store {store} cannot deliver index {}: ",
            self.index
        )?;
        for (i, b) in self.bad.iter().take(NAMED).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{b}")?;
        }
        if self.bad.len() > NAMED {
            write!(f, "; and {} more", self.bad.len() - NAMED)?;
        }
        let verify = format!(
            "`teesfs verify --store {store} --index {}` lists every chunk at fault",
            self.index.short()
        );
        let missing = self.bad.iter().any(|b| b.problem == Problem::Missing);
        let damaged = self
            .bad
            .iter()
            .any(|b| matches!(b.problem, Problem::Damaged(_)));
        match (missing, damaged) {
            (true, _) => write!(
                f,
                ". Publish the layer again into {store} (or push an index the store still \
                 holds whole); {verify}"
            )?,
            (false, true) => write!(
                f,
                ". The store is damaged: {verify}; publishing the layer again replaces the \
                 damaged chunks"
            )?,
            (false, false) => write!(
                f,
                ". Check the file's owner, permissions and disk; {verify}"
            )?,
        }
        f.write_str(". The nodes and the network are not at fault")
    }
}

/// What identifies a chunk file's content without reading it: a file checked once and
/// unchanged since need not be hashed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Stamp {
    fn of(md: &std::fs::Metadata) -> Self {
        Self {
            dev: md.dev(),
            ino: md.ino(),
            len: md.len(),
            ctime: (md.ctime(), md.ctime_nsec()),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }
}

/// The login node's store as a push root reads it: checked (see the module's doc).
pub(crate) struct CheckedStore {
    store: DirStore,
    index: Arc<Index>,
    position: HashMap<ChunkId, ChunkNo>,
    checked: Mutex<HashMap<ChunkNo, Stamp>>,
    faults: mpsc::UnboundedSender<BadChunk>,
    /// Whether large chunk files are mapped rather than read (the store is on a local file
    /// system, where reading a mapped page cannot fail).
    mapped: bool,
}

/// The least stored size of a chunk mapped rather than read: below it the map's setup
/// costs more than the copy it saves.
const MAP_AT_LEAST: u64 = 256 << 10;

/// Whether the file system at `dir` is local memory or a local disk, where a mapped
/// page's read cannot fail (on NFS, Lustre or GPFS it can, and the process gets SIGBUS).
fn maps_safely(dir: &std::path::Path) -> bool {
    use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    nix::sys::statfs::statfs(dir).is_ok_and(|fs| {
        [
            TMPFS_MAGIC,
            EXT4_SUPER_MAGIC,
            XFS_SUPER_MAGIC,
            BTRFS_SUPER_MAGIC,
        ]
        .contains(&fs.filesystem_type())
    })
}

impl CheckedStore {
    /// `store` read for `index`; every chunk it cannot deliver is also sent to the
    /// receiver returned.
    pub fn new(store: DirStore, index: Arc<Index>) -> (Self, mpsc::UnboundedReceiver<BadChunk>) {
        let (faults, rx) = mpsc::unbounded_channel();
        let position = (0u32..)
            .zip(&index.chunks)
            .map(|(p, c)| (c.id, ChunkNo(p)))
            .collect();
        let mapped = maps_safely(&seeder::layout::chunks_dir(store.root()));
        let s = Self {
            store,
            index,
            position,
            checked: Mutex::new(HashMap::new()),
            faults,
            mapped,
        };
        (s, rx)
    }

    /// Chunk number `position`'s stored bytes, checked against its id unless its file was
    /// checked before and has not changed since: by this root, or as its mark says (the
    /// publisher's, or an earlier push's; [`seeder::mark`]). Blocks on the file.
    pub fn read(&self, position: ChunkNo) -> Result<StoredChunk, BadChunk> {
        self.read_trusting(position, Trust::Marks)
    }

    fn read_trusting(&self, position: ChunkNo, trust: Trust) -> Result<StoredChunk, BadChunk> {
        let info = self.index.chunks[position.index()];
        let path = self.store.chunk_path(&info.id);
        let bad = |problem| BadChunk {
            chunk: info.id,
            position,
            path: path.clone(),
            problem,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => bad(Problem::Missing),
                _ if e.raw_os_error() == Some(libc::ELOOP) => {
                    bad(Problem::Unreadable("is a symlink".into()))
                }
                _ => bad(Problem::Unreadable(e.to_string())),
            })?;
        let md = file
            .metadata()
            .map_err(|e| bad(Problem::Unreadable(e.to_string())))?;
        let stamp = Stamp::of(&md);
        // Only what this root hashed is remembered: a scan (`Trust::Memory`) never takes a
        // mark for a check.
        let hashed = lock(&self.checked).get(&position) == Some(&stamp);
        let known = match trust {
            Trust::Nothing => false,
            Trust::Memory => hashed,
            Trust::Marks => {
                hashed
                    || (md.len() == u64::from(info.stored_len)
                        && seeder::mark::is_marked(&file, &md, &info.id, info.stored_hash))
            }
        };
        let bytes = self.bytes_of(&file, &md).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => bad(Problem::Damaged(e.to_string())),
            _ => bad(Problem::Unreadable(e.to_string())),
        })?;
        // A file that changed while it was read is checked as any other.
        if known && bytes.len() as u64 == md.len() {
            return Ok(StoredChunk::Unchecked(bytes));
        }
        let (checked, _) = manifest::check_chunk(bytes, &info).map_err(|e| {
            seeder::mark::unmark(&file);
            match e {
                manifest::Error::CorruptChunk { reason, .. } => bad(Problem::Damaged(reason)),
                other => bad(Problem::Damaged(other.to_string())),
            }
        })?;
        // Marked for the next push; the mark changes the file's change time, so the
        // stamp is taken after it.
        let stamp = match seeder::mark::mark(&file, &info.id, info.stored_hash) {
            true => file.metadata().map_or(stamp, |md| Stamp::of(&md)),
            false => stamp,
        };
        lock(&self.checked).insert(position, stamp);
        Ok(StoredChunk::Checked(checked))
    }

    /// The stored bytes of a chunk file whose metadata is `md`: mapped where the store is
    /// on a local file system and the chunk is large (the root sends them from the page
    /// cache, without a copy), else read.
    #[allow(unsafe_code)] // A file map has no safe constructor; see SAFETY below.
    fn bytes_of(&self, file: &std::fs::File, md: &std::fs::Metadata) -> std::io::Result<Bytes> {
        if !self.mapped || md.len() < MAP_AT_LEAST || md.len() > seeder::store::MAX_STORED_CHUNK {
            let bytes = seeder::files::read_file_limited(file, seeder::store::MAX_STORED_CHUNK)?;
            return Ok(bytes.into());
        }
        if !md.file_type().is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is not a regular file",
            ));
        }
        // SAFETY: the map is read only, and of a chunk file, which no writer of the store
        // changes in place: publishing, a node's or a root's repair and `teesfs gc` write a
        // new file and rename it, or unlink it, which leaves this map's pages as they were.
        // (A file cut short in place by hand would end the push with SIGBUS; the module's
        // doc says so. File systems whose reads can fail under a map are never mapped.)
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(md.len() as usize)
                .populate()
                .map(file)?
        };
        Ok(Bytes::from_owner(map))
    }

    /// Checks the chunks at `positions` and returns those the store cannot deliver, in the
    /// order given (for a push whose nodes read the store themselves: marks are not
    /// trusted here, since nothing else checks what the nodes read). Blocks on the files,
    /// a few threads at a time: a parallel file system answers several reads at once.
    pub fn check(&self, positions: impl IntoIterator<Item = ChunkNo>) -> Vec<BadChunk> {
        self.check_trusting(positions.into_iter().collect(), Trust::Memory)
    }

    /// Checks every chunk of the index, trusting neither marks nor earlier checks: a node
    /// refused a chunk the root sent, and the root names the damaged ones (damage that
    /// left a file's mark standing: the disk's, or a write that restored its time).
    /// Damaged files lose their marks, and each is also sent to the receiver
    /// [`CheckedStore::new`] returned.
    pub fn recheck(&self) -> Vec<BadChunk> {
        let all = (0..self.index.chunks.len())
            .filter_map(ChunkNo::at)
            .collect();
        let bad = self.check_trusting(all, Trust::Nothing);
        for b in &bad {
            tracing::error!("{b}");
            let _ = self.faults.send(b.clone());
        }
        bad
    }

    fn check_trusting(&self, positions: Vec<ChunkNo>, trust: Trust) -> Vec<BadChunk> {
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 4);
        let per = positions.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let parts: Vec<_> = positions
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .filter_map(|&p| self.read_trusting(p, trust).err())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        })
    }
}

/// What a read of the store may take as checked without hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    /// This root's own checks of unchanged files, and files' marks.
    Marks,
    /// This root's own checks of unchanged files only.
    Memory,
    /// Nothing.
    Nothing,
}

impl ChunkStore for CheckedStore {
    fn get(&self, id: &ChunkId) -> Option<StoredChunk> {
        let &position = self.position.get(id)?;
        match self.read(position) {
            Ok(s) => Some(s),
            Err(bad) => {
                tracing::error!("{bad}");
                let _ = self.faults.send(bad);
                None
            }
        }
    }
    fn contains(&self, id: &ChunkId) -> bool {
        self.store.contains(id)
    }
}

impl ChunkSink for CheckedStore {
    fn stored_form(&self, id: &ChunkId, plain_len: u32) -> Option<manifest::StoredForm> {
        self.store.stored_form(id, plain_len)
    }
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.store.put(id, stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store holding a three-chunk index of incompressible bytes.
    fn store() -> (tempfile::TempDir, DirStore, Arc<Index>) {
        store_in(tempfile::tempdir().expect("tempdir"), 5000)
    }

    /// A store in `t` holding a three-chunk index of `len` incompressible bytes each.
    fn store_in(t: tempfile::TempDir, len: usize) -> (tempfile::TempDir, DirStore, Arc<Index>) {
        let store = DirStore::create(&t.path().join("store")).expect("store");
        let mut chunks = Vec::new();
        for seed in 0u8..3 {
            let mut plain = vec![0u8; len];
            blake3::Hasher::new()
                .update(&[seed])
                .finalize_xof()
                .fill(&mut plain);
            let id = ChunkId::of(&plain);
            let stored = manifest::encode_chunk(&plain, 1);
            store.put(&id, &stored).expect("put");
            chunks.push(manifest::ChunkInfo {
                id,
                plain_len: plain.len() as u32,
                stored_len: stored.len() as u32,
                stored_hash: None,
            });
        }
        let index = Index {
            chunk_size: 1 << 20,
            chunks,
            entries: Vec::new(),
            urgent: Vec::new(),
            image: None,
        };
        (t, store, Arc::new(index))
    }

    /// The root sent a damaged chunk as it lay, and the nodes called the root a liar. Each
    /// problem is told apart now, and a file damaged after its first check (the root reads
    /// every chunk once per child) is caught when read again.
    #[test]
    fn a_missing_or_damaged_chunk_in_the_root_store_is_named_not_sent() {
        let (_t, store, index) = store();
        let (checked, mut faults) = CheckedStore::new(store.clone(), index.clone());
        assert!(
            checked.check((0..3).map(ChunkNo)).is_empty(),
            "a whole store"
        );
        let path = store.chunk_path(&index.chunks[1].id);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[100] ^= 1;
        std::fs::write(&path, &bytes).expect("damage it after it was checked once");
        let bad = checked.read(ChunkNo(1)).expect_err("damaged");
        assert!(matches!(bad.problem, Problem::Damaged(_)), "{bad:?}");
        std::fs::remove_file(store.chunk_path(&index.chunks[2].id)).expect("rm");
        assert!(checked.get(&index.chunks[2].id).is_none(), "not sent");
        let sent = faults.try_recv().expect("the push hears of it");
        assert_eq!(
            (sent.position, sent.problem),
            (ChunkNo(2), Problem::Missing)
        );
        let fault = StoreFault {
            store: store.root().to_path_buf(),
            index: IndexId([7; 32]),
            bad: checked.check((0..3).map(ChunkNo)),
        };
        let text = fault.to_string();
        for part in [
            &index.chunks[1].id.to_hex(),
            &index.chunks[2].id.to_hex(),
            "damaged on disk",
            "is missing",
            "teesfs gc",
            "teesfs verify --store",
            &IndexId([7; 32]).to_hex(),
            "not at fault",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// Damage that leaves a file's mark standing (the time put back) is sent as it lies,
    /// by this root and by a new one; the check without marks names it and takes the mark
    /// away, so the next read hashes the file again.
    #[test]
    fn a_mark_stands_for_the_check_until_the_store_is_checked_again() {
        let (_t, store, index) = store();
        let path = store.chunk_path(&index.chunks[0].id);
        let (first, _) = CheckedStore::new(store.clone(), index.clone());
        assert!(matches!(
            first.read(ChunkNo(0)),
            Ok(StoredChunk::Checked(_))
        ));
        let file = std::fs::File::open(&path).expect("open");
        let md = file.metadata().expect("md");
        assert!(
            seeder::mark::is_marked(&file, &md, &index.chunks[0].id, None),
            "checked once, marked"
        );
        let (again, mut faults) = CheckedStore::new(store.clone(), index.clone());
        assert!(
            matches!(again.read(ChunkNo(0)), Ok(StoredChunk::Unchecked(_))),
            "a new root takes the mark for the check"
        );
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[7] ^= 1;
        std::fs::write(&path, &bytes).expect("damage");
        let f = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        f.set_times(std::fs::FileTimes::new().set_modified(md.modified().expect("mtime")))
            .expect("the time put back");
        assert!(
            matches!(again.read(ChunkNo(0)), Ok(StoredChunk::Unchecked(_))),
            "the mark hides this damage"
        );
        assert_eq!(
            again.check([ChunkNo(0)]).len(),
            1,
            "a storage-mode scan never takes a mark for a check"
        );
        let bad = again.recheck();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(matches!(bad[0].problem, Problem::Damaged(_)), "{bad:?}");
        assert_eq!(faults.try_recv().expect("told").position, ChunkNo(0));
        assert!(
            matches!(
                again.read(ChunkNo(0)),
                Err(BadChunk {
                    problem: Problem::Damaged(_),
                    ..
                })
            ),
            "unmarked, hashed, refused"
        );
    }

    /// Large chunks on a memory file system are mapped, not read: the same bytes, checked
    /// the same way, damage found.
    #[test]
    fn large_chunks_on_tmpfs_are_mapped_and_checked_alike() {
        let t = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
        let (_t, store, index) = store_in(t, 300 << 10);
        let (checked, _faults) = CheckedStore::new(store.clone(), index.clone());
        assert!(checked.mapped, "tmpfs is mapped");
        let path = store.chunk_path(&index.chunks[1].id);
        let on_disk = std::fs::read(&path).expect("read");
        match checked.read(ChunkNo(1)) {
            Ok(StoredChunk::Checked(c)) => assert_eq!(c.stored(), &on_disk[..]),
            other => panic!("{other:?}"),
        }
        match checked.read(ChunkNo(1)) {
            Ok(StoredChunk::Unchecked(b)) => assert_eq!(b, on_disk),
            other => panic!("{other:?}"),
        }
        let mut bytes = on_disk.clone();
        bytes[200_000] ^= 1;
        std::fs::write(&path, &bytes).expect("damage");
        let bad = checked.read(ChunkNo(1)).expect_err("damaged");
        assert!(matches!(bad.problem, Problem::Damaged(_)), "{bad:?}");
    }
}

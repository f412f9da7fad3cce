//! Materialised copies of whole files, handed to the kernel for FUSE passthrough.
//!
//! A copy is named after the file's content (a digest of its chunk ids), so equal files in
//! different jobs share it. Because the kernel serves a copy's bytes without asking the
//! daemon, a copy is trusted only as far as this module makes it trustworthy:
//! - copies live in a directory only the daemon's user can write: created 0700, and
//!   refused if it belongs to someone else or others may write it;
//! - the directory is emptied when it is opened (daemon start), so nothing from an earlier
//!   run is ever served; a copy is verified against the index before its first use by each
//!   mount (`Data::verified` in the content layer);
//! - copies count against a byte budget; copies no handle has open are evicted, least
//!   recently used first, to make room; a mount's copies go when it is released (unless
//!   another mount uses them too).
//!
//! This module holds the bookkeeping and the checks; making a copy is `Data::materialize`.

use std::collections::HashSet;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::FsError;
use crate::Error;
use crate::sync::lock;

/// A mount's identity towards the copies it uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CopyUser(pub u64);

#[derive(Debug)]
struct Copy {
    size: u64,
    open: u32,
    users: HashSet<CopyUser>,
    /// Every user was released while it was open: it goes when its last lease does.
    orphan: bool,
}

#[derive(Debug)]
struct State {
    /// Least recently leased first.
    files: lru::LruCache<String, Copy>,
    bytes: u64,
    /// Room held for copies being made ahead of their first open ([`Copies::hold`]).
    held: u64,
}

impl State {
    /// The copy `name`, recorded with `size` bytes (and no user) if it is new.
    fn record(&mut self, name: &str, size: u64) -> &mut Copy {
        if !self.files.contains(name) {
            self.bytes += size;
            let new = Copy {
                size,
                open: 0,
                users: HashSet::new(),
                orphan: false,
            };
            self.files.put(name.to_owned(), new);
        }
        self.files
            .get_mut(name)
            .expect("the copy is recorded: just now, or before")
    }
}

/// The copies directory and its budget, shared by every mount of a daemon.
#[derive(Debug)]
pub struct Copies {
    dir: PathBuf,
    budget: u64,
    state: Mutex<State>,
}

/// A copy in use by one open file: it is not evicted while any lease on it lives.
#[derive(Debug)]
pub struct Lease {
    copies: Arc<Copies>,
    name: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = lock(&self.copies.state);
        let Some(c) = st.files.peek_mut(&self.name) else {
            return;
        };
        c.open = c.open.saturating_sub(1);
        if c.open == 0 && c.orphan {
            if let Some(c) = st.files.pop(&self.name) {
                st.bytes -= c.size;
            }
            drop(st);
            let _ = std::fs::remove_file(self.copies.path(&self.name));
        }
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        // Nobody can lease these any more (a kernel that still has one open keeps its own
        // reference); the directory goes too once empty.
        let st = lock(&self.state);
        for (name, _) in st.files.iter() {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        drop(st);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Copies {
    /// Opens the copies directory `dir` with a budget of `budget` bytes: creates it (0700)
    /// if missing, refuses it if it is a symlink, not a directory, not owned by this
    /// process's user or writable by others, and removes every copy an earlier run left.
    pub fn open(dir: &Path, budget: u64) -> Result<Arc<Self>, Error> {
        let refuse = |problem: String| Error::CopiesDir {
            dir: dir.to_path_buf(),
            problem,
        };
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Parents missing: create them the usual way, the directory itself 0700.
                if let Some(parent) = dir.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| refuse(format!("cannot create its parent: {e}")))?;
                }
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| refuse(format!("cannot create it: {e}")))?;
            }
            Err(e) => return Err(refuse(format!("cannot create it: {e}"))),
        }
        let md = std::fs::symlink_metadata(dir)
            .map_err(|e| refuse(format!("cannot inspect it: {e}")))?;
        let me = nix::unistd::geteuid().as_raw();
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty())
            && let Ok(pmd) = std::fs::metadata(parent)
            && pmd.mode() & 0o022 != 0
            && pmd.mode() & 0o1000 == 0
        {
            return Err(refuse(format!(
                "its parent {} may be written by others without the sticky bit, so they could swap the directory; give a directory under a private parent",
                parent.display()
            )));
        }
        if !md.is_dir() {
            return Err(refuse(
                "is not a directory (or is a symlink); give a private directory".into(),
            ));
        }
        if md.uid() != me {
            return Err(refuse(format!(
                "belongs to uid {}, not to this daemon's uid {me}: another user could plant copies that the kernel would serve; remove it or give another directory",
                md.uid()
            )));
        }
        if md.mode() & 0o077 != 0 {
            return Err(refuse(format!(
                "has mode {:04o}; only the daemon may use it (chmod 700 it, or give another directory)",
                md.permissions().mode() & 0o7777
            )));
        }
        let entries = std::fs::read_dir(dir).map_err(|e| refuse(format!("cannot list it: {e}")))?;
        let mut removed = 0u64;
        for item in entries.flatten() {
            let p = item.path();
            let gone = if item.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            match gone {
                Ok(()) => removed += 1,
                Err(e) => {
                    return Err(refuse(format!(
                        "cannot remove {} left by an earlier run: {e}",
                        p.display()
                    )));
                }
            }
        }
        if removed > 0 {
            tracing::info!(dir = %dir.display(), removed, "removed passthrough copies left by an earlier run");
        }
        Ok(Arc::new(Self {
            dir: dir.to_path_buf(),
            budget,
            state: Mutex::new(State {
                files: lru::LruCache::unbounded(),
                bytes: 0,
                held: 0,
            }),
        }))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of copies held.
    pub fn bytes(&self) -> u64 {
        lock(&self.state).bytes
    }

    /// Copies held.
    pub fn len(&self) -> usize {
        lock(&self.state).files.len()
    }

    /// Whether no copy is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A lease on the copy `name` if it exists, for `user`.
    pub(crate) fn lease(self: &Arc<Self>, name: &str, user: CopyUser) -> Option<(Lease, PathBuf)> {
        let mut st = lock(&self.state);
        let c = st.files.get_mut(name)?;
        c.open += 1;
        c.users.insert(user);
        c.orphan = false;
        Some((
            Lease {
                copies: self.clone(),
                name: name.to_owned(),
            },
            self.path(name),
        ))
    }

    /// Makes room for a new copy of `size` bytes, evicting copies nobody has open, least
    /// recently used first. `false` if it cannot fit (serve the file from the daemon).
    pub(crate) fn reserve(&self, size: u64) -> bool {
        if size > self.budget {
            return false;
        }
        let mut gone = Vec::new();
        {
            let mut st = lock(&self.state);
            while st.bytes + st.held + size > self.budget {
                let victim = st
                    .files
                    .iter()
                    .rev()
                    .find(|(_, c)| c.open == 0)
                    .map(|(n, _)| n.clone());
                let Some(name) = victim else {
                    return false;
                };
                if let Some(c) = st.files.pop(&name) {
                    st.bytes -= c.size;
                    gone.push(name);
                }
            }
        }
        for name in gone {
            tracing::debug!(copy = %name, "evicting a passthrough copy over the budget");
            let _ = std::fs::remove_file(self.path(&name));
        }
        true
    }

    /// Records the copy `name` (just written in [`Copies::dir`] and renamed into place) and
    /// leases it to `user`.
    pub fn add(self: &Arc<Self>, name: &str, size: u64, user: CopyUser) -> (Lease, PathBuf) {
        lock(&self.state).record(name, size);
        self.lease(name, user).expect(
            "the copy was recorded just now and only eviction of unopened copies removes it",
        )
    }

    /// Whether the copy `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        lock(&self.state).files.contains(name)
    }

    /// Holds room for a copy of `size` bytes made ahead of its first open, from the free
    /// part of the budget only: nothing is evicted for it, so copies made ahead never push
    /// out the copies of files in use. Give the room back with [`Copies::unhold`], or turn
    /// it into the copy with [`Copies::add_held`].
    pub fn hold(&self, size: u64) -> bool {
        let mut st = lock(&self.state);
        if st.bytes + st.held + size > self.budget {
            return false;
        }
        st.held += size;
        true
    }

    /// Gives back room held with [`Copies::hold`] for a copy that will not be made.
    pub(crate) fn unhold(&self, size: u64) {
        let mut st = lock(&self.state);
        st.held = st.held.saturating_sub(size);
    }

    /// Records the copy `name` made ahead with room held for it (just renamed into place),
    /// used by `user` and open nowhere yet.
    pub(crate) fn add_held(&self, name: &str, size: u64, user: CopyUser) {
        let mut st = lock(&self.state);
        st.held = st.held.saturating_sub(size);
        let c = st.record(name, size);
        c.users.insert(user);
        c.orphan = false;
    }

    /// Forgets a copy that failed its check and removes its file.
    pub(crate) fn discard(&self, name: &str) {
        let mut st = lock(&self.state);
        if let Some(c) = st.files.pop(name) {
            st.bytes -= c.size;
        }
        drop(st);
        let _ = std::fs::remove_file(self.path(name));
    }

    /// `user` is gone (its job released, its mount ended): its copies that no other user
    /// shares are removed, at once or when the last file open on one is closed.
    pub fn release(&self, user: CopyUser) {
        let mut gone = Vec::new();
        {
            let mut st = lock(&self.state);
            let names: Vec<String> = st.files.iter().map(|(n, _)| n.clone()).collect();
            for name in names {
                let Some(c) = st.files.peek_mut(&name) else {
                    continue;
                };
                if !c.users.remove(&user) || !c.users.is_empty() {
                    continue;
                }
                if c.open > 0 {
                    c.orphan = true;
                    continue;
                }
                if let Some(c) = st.files.pop(&name) {
                    st.bytes -= c.size;
                    gone.push(name);
                }
            }
        }
        for name in &gone {
            let _ = std::fs::remove_file(self.path(name));
        }
        if !gone.is_empty() {
            tracing::debug!(
                copies = gone.len(),
                "removed a released mount's passthrough copies"
            );
        }
    }
}

/// The name of the copy of a file of `size` bytes made of `pieces` (chunk ids, `None` for
/// a hole): a digest of both, so equal files share one copy.
pub(crate) fn copy_name(size: u64, pieces: &[Option<manifest::ChunkId>]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&size.to_le_bytes());
    for p in pieces {
        h.update(p.as_ref().map_or(&[0u8; 32], |id| &id.0));
    }
    h.finalize().to_hex().to_string()
}

/// Checks the copy at `path` against what it must hold: a regular file of this user (not
/// a symlink), of `size` bytes, whose every `chunk_size` piece hashes to its chunk id
/// (`None` for a hole: all zeros).
pub(crate) fn verify_copy(
    path: &Path,
    size: u64,
    chunk_size: u64,
    pieces: &[Option<manifest::ChunkId>],
) -> Result<(), FsError> {
    use std::io::Read;
    let bad = |why: String| FsError::Corrupt(format!("passthrough copy {}: {why}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(format!("cannot open: {e}")))?;
    let md = f.metadata().map_err(|e| bad(format!("cannot stat: {e}")))?;
    if !md.is_file() || md.uid() != nix::unistd::geteuid().as_raw() || md.len() != size {
        return Err(bad(
            "not the regular file of this user and size it must be".into()
        ));
    }
    let mut buf = vec![0u8; chunk_size as usize];
    for (i, want) in pieces.iter().enumerate() {
        let len = (size - i as u64 * chunk_size).min(chunk_size) as usize;
        f.read_exact(&mut buf[..len])
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        let ok = match want {
            Some(id) => manifest::ChunkId::of(&buf[..len]) == *id,
            None => buf[..len].iter().all(|&b| b == 0),
        };
        if !ok {
            return Err(bad(format!("piece {i} does not match the index")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_writable_copies_directory_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = t.path().join("files");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = Copies::open(&dir, 1 << 20).expect_err("refused");
        assert!(e.to_string().contains("0777"), "{e}");
    }

    #[test]
    fn a_symlinked_copies_directory_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let real = t.path().join("real");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&real)
            .expect("mkdir");
        let link = t.path().join("files");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert!(Copies::open(&link, 1 << 20).is_err());
    }

    #[test]
    fn copies_are_created_private_and_emptied_at_open() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = t.path().join("a/files");
        let c = Copies::open(&dir, 1 << 20).expect("open");
        assert_eq!(
            std::fs::metadata(&dir).expect("md").permissions().mode() & 0o777,
            0o700
        );
        std::fs::write(dir.join("left-over"), b"x").expect("write");
        drop(c);
        let c = Copies::open(&dir, 1 << 20).expect("open again");
        assert!(
            !dir.join("left-over").exists(),
            "an earlier run's copy is removed"
        );
        assert!(c.is_empty());
    }

    #[test]
    fn copies_over_the_budget_evict_unopened_ones_only() {
        let t = tempfile::tempdir().expect("tempdir");
        let c = Copies::open(&t.path().join("files"), 100).expect("open");
        let u = CopyUser(1);
        for name in ["a", "b"] {
            std::fs::write(c.dir().join(name), [0u8; 40]).expect("write");
        }
        assert!(c.reserve(40));
        let (open_a, _) = c.add("a", 40, u);
        assert!(c.reserve(40));
        let (b, _) = c.add("b", 40, u);
        drop(b);
        // 80 held; 40 more needs room: "b" is not open, "a" is.
        assert!(c.reserve(40));
        assert!(c.dir().join("a").exists() && !c.dir().join("b").exists());
        assert_eq!(c.bytes(), 40);
        // Larger than what can ever be freed while "a" is open.
        assert!(!c.reserve(70));
        drop(open_a);
        assert!(c.reserve(70));
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn a_released_users_copies_go_unless_shared_or_open() {
        let t = tempfile::tempdir().expect("tempdir");
        let c = Copies::open(&t.path().join("files"), 1000).expect("open");
        for name in ["mine", "shared", "open"] {
            std::fs::write(c.dir().join(name), [1u8; 10]).expect("write");
            drop(c.add(name, 10, CopyUser(1)));
        }
        drop(c.lease("shared", CopyUser(2)));
        let held = c.lease("open", CopyUser(1));
        c.release(CopyUser(1));
        assert!(!c.dir().join("mine").exists());
        assert!(c.dir().join("shared").exists());
        assert!(c.dir().join("open").exists());
        drop(held);
        assert!(
            !c.dir().join("open").exists(),
            "an orphan goes with its last lease"
        );
        c.release(CopyUser(2));
        assert!(!c.dir().join("shared").exists());
        assert!(c.is_empty());
        let dir = c.dir().to_path_buf();
        drop(c);
        assert!(!dir.exists(), "the directory goes with the registry");
    }

    #[test]
    fn a_flipped_byte_in_a_copy_fails_verification() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("copy");
        let data = vec![7u8; 300];
        std::fs::write(&p, &data).expect("write");
        let ids: Vec<Option<manifest::ChunkId>> = data
            .chunks(128)
            .map(|c| Some(manifest::ChunkId::of(c)))
            .collect();
        verify_copy(&p, 300, 128, &ids).expect("intact copy passes");
        let mut bad = data.clone();
        bad[200] ^= 1;
        std::fs::write(&p, &bad).expect("write");
        assert!(verify_copy(&p, 300, 128, &ids).is_err());
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert!(
            verify_copy(&link, 300, 128, &ids).is_err(),
            "symlinks are not followed"
        );
    }
}

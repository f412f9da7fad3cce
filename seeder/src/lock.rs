//! The store's lock, `STORE/.lock`: an open-file-description record lock (`fcntl`
//! `F_OFD_SETLK`) over the whole file. A publish holds it shared from its first chunk to its
//! index and tag, and so does everything that reads a store while it works (the root of a
//! push, `teesfs mount`, a storage-mode node: [`DirStore::locked_for_reading`]); gc holds
//! it exclusive. A publish writes its chunks before its index, so while it runs its chunks
//! are referenced by nothing, and a reader's index may be the one gc would remove: the
//! lock is what keeps gc from taking either.
//!
//! Why a record lock and not `flock`: `flock -x` needs only a read descriptor, so anyone
//! who could read the store could take the lock exclusive and stall every publish (issue
//! 29). An exclusive record lock needs a descriptor open for writing, which only those who
//! may write the store get; a reader can take it shared, which keeps gc out (as it should)
//! and never stalls a publish. A wait says at once whom it waits for, and gives up after
//! its timeout.
//!
//! A filesystem without locks (Lustre mounted `noflock`) gives no lock: publish goes on
//! with a warning and gc relies on its grace period alone ([`crate::gc`]). Nothing here
//! decides what to delete.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::FcntlArg;

use crate::{DirStore, Error};

/// How long a publish or a reader waits for a gc by default.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(600);

/// A held store lock (shared or exclusive), released when dropped. `None` inside when the
/// filesystem does not support locks, or a reader could not open the lock file.
#[derive(Debug)]
pub struct StoreLock {
    held: Option<File>,
}

impl StoreLock {
    /// Whether a lock is actually held (false on a filesystem without locks).
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }
}

/// Errors of `fcntl` locks that mean the filesystem has none, not that someone holds one.
fn unsupported(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::ENOLCK | Errno::EINVAL
    )
}

/// Shared (read) or exclusive (write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shared,
    Exclusive,
}

/// The whole-file lock request of `kind`.
fn whole(kind: Kind) -> libc::flock {
    libc::flock {
        l_type: match kind {
            Kind::Shared => libc::F_RDLCK,
            Kind::Exclusive => libc::F_WRLCK,
        } as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// Takes the lock on `file` without waiting: `Ok(false)` when someone else holds it.
fn try_take(file: &File, kind: Kind) -> Result<bool, Errno> {
    match nix::fcntl::fcntl(file, FcntlArg::F_OFD_SETLK(&whole(kind))) {
        Ok(_) => Ok(true),
        Err(Errno::EAGAIN | Errno::EACCES) => Ok(false),
        Err(e) => Err(e),
    }
}

impl DirStore {
    fn lock_path(&self) -> PathBuf {
        crate::layout::lock_path(self.root())
    }

    fn lock_io(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.lock_path(),
            source,
        }
    }

    /// Opens (creating it) the lock file, never through a symlink: for writing when this
    /// user may (only such a descriptor can take the lock exclusive), else for reading.
    fn lock_file(&self) -> Result<(File, bool), Error> {
        let p = self.lock_path();
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(&p)
        };
        let (file, writable) = match open(true) {
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    || e.raw_os_error() == Some(libc::EROFS) =>
            {
                (open(false), false)
            }
            other => (other, true),
        };
        let file = file.map_err(|e| self.lock_io(e))?;
        let md = file.metadata().map_err(|e| self.lock_io(e))?;
        if !md.is_file() {
            return Err(self.lock_io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is not a regular file; remove it",
            )));
        }
        if writable {
            crate::shared::share_lock_file(self.root(), &file).map_err(|e| self.lock_io(e))?;
        }
        Ok((file, writable))
    }

    /// Takes the lock as `kind`, waiting at most `wait` for whoever holds it (saying at
    /// once whom, on stderr through the log). `None` inside on a filesystem without locks.
    fn lock(&self, kind: Kind, file: File, wait: Duration) -> Result<StoreLock, Error> {
        match try_take(&file, kind) {
            Ok(true) => return Ok(StoreLock { held: Some(file) }),
            Ok(false) => {}
            Err(e) if unsupported(e) => {
                tracing::warn!(lock = %self.lock_path().display(), error = %e,
                    "the store's filesystem has no locks: gc relies on its grace period alone");
                return Ok(StoreLock { held: None });
            }
            Err(e) => return Err(self.lock_io(e.into())),
        }
        let holders = crate::holders::describe(&self.lock_path());
        tracing::warn!(store = %self.root().display(),
            "waiting up to {} for the store's lock: {holders} holds it", secs(wait));
        if wait.is_zero() {
            return Err(Error::LockTimeout {
                store: self.root().to_path_buf(),
                holder: holders,
                waited: secs(wait),
            });
        }
        // The waiting call runs on a thread of its own so the wait can end at `wait`; a
        // lock it gets after that is dropped at once (nobody receives it).
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let r = nix::fcntl::fcntl(&file, FcntlArg::F_OFD_SETLKW(&whole(kind)));
            let _ = tx.send(r.map(|_| file));
        });
        match rx.recv_timeout(wait) {
            Ok(Ok(file)) => Ok(StoreLock { held: Some(file) }),
            Ok(Err(e)) => Err(self.lock_io(e.into())),
            Err(_) => Err(Error::LockTimeout {
                store: self.root().to_path_buf(),
                holder: crate::holders::describe(&self.lock_path()),
                waited: secs(wait),
            }),
        }
    }

    /// Takes the lock shared, as a publish does, waiting while a gc holds it, at most
    /// the store's lock wait ([`DirStore::with_lock_wait`]).
    pub fn lock_shared(&self) -> Result<StoreLock, Error> {
        let (file, _) = self.lock_file()?;
        self.lock(Kind::Shared, file, self.lock_wait())
    }

    /// This store, holding its lock shared for as long as it or a clone of it lives: what
    /// a reader (a push's root, a mount, a storage-mode node) uses so that gc does not
    /// delete what it reads. Waits while a gc holds the lock, at most the store's lock
    /// wait. A reader that cannot open the lock file (a read-only store without one) reads
    /// without it.
    pub fn locked_for_reading(&self) -> Result<DirStore, Error> {
        let lock = match self.lock_file() {
            Ok((file, _)) => self.lock(Kind::Shared, file, self.lock_wait())?,
            Err(e) => {
                tracing::warn!(error = %e, "reading the store without its lock: a gc may remove what this reads");
                StoreLock { held: None }
            }
        };
        Ok(self.holding(lock))
    }

    /// Opens the existing store at `root` for a job that reads it (a storage-mode node),
    /// holding its lock shared for as long as the job keeps it ([`Self::locked_for_reading`]);
    /// fails at once, naming the gc, while a gc holds the lock.
    pub fn open_for_a_job(root: &std::path::Path) -> Result<DirStore, Error> {
        DirStore::open(root)?
            .with_lock_wait(Duration::ZERO)
            .locked_for_reading()
    }

    /// Takes the lock exclusive, as gc does, failing at once, naming the holders, if anyone
    /// holds it.
    pub fn try_lock_exclusive(&self) -> Result<StoreLock, Error> {
        let (file, writable) = self.lock_file()?;
        if !writable {
            return Err(self.lock_io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "cannot be opened for writing, which gc needs to lock the store; run gc as the \
                 store's owner",
            )));
        }
        match try_take(&file, Kind::Exclusive) {
            Ok(true) => Ok(StoreLock { held: Some(file) }),
            Ok(false) => Err(Error::StoreBusy {
                store: self.root().to_path_buf(),
                holder: crate::holders::describe(&self.lock_path()),
            }),
            Err(e) if unsupported(e) => {
                tracing::warn!(lock = %self.lock_path().display(), error = %e,
                    "the store's filesystem has no locks: gc relies on its grace period alone");
                Ok(StoreLock { held: None })
            }
            Err(e) => Err(self.lock_io(e.into())),
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishers_and_readers_share_the_lock_and_gc_is_refused_while_they_hold_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(t.path()).expect("store");
        let s = s.with_lock_wait(Duration::from_millis(50));
        let a = s.lock_shared().expect("shared");
        let b = s.locked_for_reading().expect("reader");
        if !a.is_held() {
            eprintln!("skipped: no locks on this filesystem");
            return;
        }
        let e = s.try_lock_exclusive().expect_err("busy").to_string();
        assert!(e.contains("busy") && e.contains(".lock"), "{e}");
        assert!(
            e.contains(&format!("pid {}", std::process::id())),
            "names the holder: {e}"
        );
        drop(a);
        assert!(s.try_lock_exclusive().is_err(), "the reader still holds it");
        drop(b);
        let gc = s.try_lock_exclusive().expect("free again");
        assert!(gc.is_held());
        let e = s.lock_shared().expect_err("a gc holds it");
        assert!(e.to_string().contains("gave up"), "{e}");
    }

    #[test]
    fn a_read_only_descriptor_cannot_take_the_lock_exclusive() {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(t.path()).expect("store");
        drop(s.lock_shared().expect("creates the file"));
        let ro = File::open(s.lock_path()).expect("open for reading");
        match try_take(&ro, Kind::Exclusive) {
            Err(Errno::EBADF) => {}
            Err(e) if unsupported(e) => eprintln!("skipped: no locks on this filesystem"),
            other => panic!("a reader took the lock exclusive: {other:?}"),
        }
        assert!(try_take(&ro, Kind::Shared).expect("shared") || !cfg!(target_os = "linux"));
        // A reader's shared lock never stalls a publish.
        assert!(s.lock_shared().expect("publish").is_held());
    }

    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(&t.path().join("s")).expect("store");
        std::os::unix::fs::symlink(t.path().join("elsewhere"), s.lock_path()).expect("ln");
        assert!(s.lock_shared().is_err());
        assert!(
            !t.path().join("elsewhere").exists(),
            "not created through it"
        );
    }
}

//! The store's advisory lock, `STORE/.lock` (flock): a publish holds it shared from its
//! first chunk to its index and tag, gc holds it exclusive. A publish writes its chunks
//! before its index, so while it runs its chunks are referenced by nothing; the lock is
//! what keeps gc from taking them.
//!
//! A filesystem without flock (Lustre mounted `noflock`) gives no lock: publish goes on
//! with a warning and gc relies on its grace period alone ([`crate::gc`]). Nothing here
//! decides what to delete.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::{DirStore, Error};

/// A held store lock (shared or exclusive), released when dropped. `None` inside when the
/// filesystem does not support locks.
#[derive(Debug)]
pub struct StoreLock {
    _held: Option<Flock<File>>,
}

impl StoreLock {
    /// Whether a lock is actually held (false on a filesystem without flock).
    pub fn is_held(&self) -> bool {
        self._held.is_some()
    }
}

/// Errors of `flock` that mean the filesystem has no locks, not that someone holds one.
fn unsupported(e: Errno) -> bool {
    matches!(e, Errno::ENOSYS | Errno::EOPNOTSUPP | Errno::ENOLCK)
}

impl DirStore {
    fn lock_path(&self) -> PathBuf {
        self.root().join(".lock")
    }

    /// Opens (creating it, readable by all) the lock file, never through a symlink. Read-only
    /// when it belongs to someone else: flock needs no write access.
    fn lock_file(&self) -> Result<File, Error> {
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
        let file = match open(true) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => open(false),
            other => other,
        }
        .map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        let md = file.metadata().map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        if !md.is_file() {
            return Err(Error::Io {
                path: p,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "is not a regular file; remove it",
                ),
            });
        }
        Ok(file)
    }

    fn lock(&self, arg: FlockArg) -> Result<Result<StoreLock, Errno>, Error> {
        let file = self.lock_file()?;
        Ok(match Flock::lock(file, arg) {
            Ok(held) => Ok(StoreLock { _held: Some(held) }),
            Err((_, e)) if unsupported(e) => {
                tracing::warn!(lock = %self.lock_path().display(), error = %e,
                    "the store's filesystem has no flock: gc relies on its grace period alone");
                Ok(StoreLock { _held: None })
            }
            Err((_, e)) => Err(e),
        })
    }

    /// Takes the lock shared, as a publish does, waiting while a gc holds it.
    pub fn lock_shared(&self) -> Result<StoreLock, Error> {
        let io = |e: Errno| Error::Io {
            path: self.lock_path(),
            source: e.into(),
        };
        match self.lock(FlockArg::LockSharedNonblock)? {
            Ok(l) => Ok(l),
            Err(Errno::EWOULDBLOCK) => {
                tracing::info!(store = %self.root().display(), "waiting for a gc of the store to finish");
                self.lock(FlockArg::LockShared)?.map_err(io)
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Takes the lock exclusive, as gc does, failing at once if anyone holds it.
    pub fn try_lock_exclusive(&self) -> Result<StoreLock, Error> {
        match self.lock(FlockArg::LockExclusiveNonblock)? {
            Ok(l) => Ok(l),
            Err(Errno::EWOULDBLOCK) => Err(Error::StoreBusy {
                store: self.root().to_path_buf(),
                holder: "a publish (or another gc)",
            }),
            Err(e) => Err(Error::Io {
                path: self.lock_path(),
                source: e.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishers_share_the_lock_and_gc_is_refused_while_they_hold_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(t.path()).expect("store");
        let a = s.lock_shared().expect("shared");
        let b = s.lock_shared().expect("shared twice");
        if !a.is_held() {
            eprintln!("skipped: no flock on this filesystem");
            return;
        }
        let e = s.try_lock_exclusive().expect_err("busy").to_string();
        assert!(e.contains("busy") && e.contains(".lock"), "{e}");
        drop((a, b));
        let gc = s.try_lock_exclusive().expect("free again");
        assert!(gc.is_held());
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

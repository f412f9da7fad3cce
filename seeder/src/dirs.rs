//! The store's own directories, opened once for gc: the store directory, `chunks/`,
//! `indexes/` and `indexes/tags/`, each opened relative to its parent's descriptor with
//! `O_NOFOLLOW`. Everything gc lists, reads, stats or deletes is named relative to those
//! descriptors, so a link or a rename at the top of a store (someone who can write the
//! store directory swapping `chunks/` for a link to another store) cannot send gc
//! elsewhere. A store whose top-level entries are links, or belong to someone other than
//! the store directory's owner (or root), is refused before anything is read.
//!
//! Nothing here decides what to delete.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use crate::{Error, layout};

/// A directory of the store, by descriptor (its path is for messages only).
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What [`Dir::stat`] tells of an entry, never following a link.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub kind: SFlag,
    pub uid: u32,
    pub gid: u32,
    pub bytes: u64,
    pub modified: SystemTime,
}

impl Meta {
    fn of(st: &FileStat) -> Self {
        let modified = u64::try_from(st.st_mtime).map_or(SystemTime::UNIX_EPOCH, |s| {
            SystemTime::UNIX_EPOCH + Duration::new(s, st.st_mtime_nsec.clamp(0, 999_999_999) as u32)
        });
        Meta {
            kind: SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT,
            uid: st.st_uid,
            gid: st.st_gid,
            bytes: u64::try_from(st.st_size).unwrap_or(0),
            modified,
        }
    }

    pub fn is_file(&self) -> bool {
        self.kind == SFlag::S_IFREG
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == SFlag::S_IFLNK
    }

    pub fn is_dir(&self) -> bool {
        self.kind == SFlag::S_IFDIR
    }
}

fn nix_io(path: PathBuf) -> impl FnOnce(Errno) -> Error {
    move |e| Error::Io {
        path,
        source: e.into(),
    }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl Dir {
    /// The path of `name` in it, for messages and reports.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The sub-directory `name`, never through a link (`ELOOP`, `ENOTDIR` as they come).
    pub fn sub(&self, name: &str) -> Result<Dir, Errno> {
        let fd = nix::fcntl::openat(&self.fd, name, DIR_FLAGS, Mode::empty())?;
        Ok(Dir {
            fd,
            path: self.path_of(name),
        })
    }

    /// The names in it (without `.` and `..`; names that are not UTF-8 are not a store's).
    pub fn names(&self) -> Result<Vec<String>, Error> {
        let mut d = nix::dir::Dir::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())
            .map_err(nix_io(self.path.clone()))?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e.map_err(nix_io(self.path.clone()))?;
            if let Ok(n) = e.file_name().to_str()
                && n != "."
                && n != ".."
            {
                out.push(n.to_owned());
            }
        }
        Ok(out)
    }

    /// What `name` is, without following a link; `None` if it is gone.
    pub fn stat(&self, name: &str) -> Result<Option<Meta>, Error> {
        match nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Meta::of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(nix_io(self.path_of(name))(e)),
        }
    }

    /// The bytes of the regular file `name`, at most `max` ([`crate::files`]), never
    /// through a link and never blocking on a FIFO.
    pub fn read(&self, name: &str, max: u64) -> std::io::Result<Vec<u8>> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(&self.fd, name, flags, Mode::empty()).map_err(|e| {
            if e == Errno::ELOOP {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a symlink")
            } else {
                e.into()
            }
        })?;
        crate::files::read_file_limited(&std::fs::File::from(fd), max)
    }

    /// Removes the entry `name` (a file or a link, never a directory); a missing one is
    /// not an error.
    pub fn remove(&self, name: &str) -> Result<(), Error> {
        match nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(nix_io(self.path_of(name))(e)),
        }
    }
}

/// The store's directories, checked and held open.
#[derive(Debug)]
pub(crate) struct StoreDirs {
    /// `chunks/` (absent in a store nothing was published into).
    pub chunks: Option<Dir>,
    /// `indexes/`.
    pub indexes: Dir,
    /// `indexes/tags/`, if any tag was ever set.
    pub tags: Option<Dir>,
    /// `learned/`, if `teesfs learn` ever wrote a list ([`crate::learned`]).
    pub learned: Option<Dir>,
}

impl StoreDirs {
    /// Opens the store at `root` (which may itself be a link: the user named it) and its
    /// directories, refusing links and entries that belong to someone else.
    pub fn open(root: &Path) -> Result<Self, Error> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(nix_io(root.to_path_buf()))?;
        let root_st = nix::sys::stat::fstat(&fd).map_err(nix_io(root.to_path_buf()))?;
        let owner = root_st.st_uid;
        // A store shared by a group (`crate::shared`): its members make entries too.
        let group = (root_st.st_mode & 0o2020 == 0o2020).then_some(root_st.st_gid);
        let trusted = |uid: u32, gid: u32| uid == owner || uid == 0 || group == Some(gid);
        let top = Dir {
            fd,
            path: root.to_path_buf(),
        };
        let unsafe_store = |entry: &str, reason: String| Error::UnsafeStore {
            store: root.to_path_buf(),
            entry: entry.to_owned(),
            reason,
            owner,
        };
        for name in top.names()? {
            let Some(m) = top.stat(&name)? else { continue };
            if m.is_symlink() {
                return Err(unsafe_store(&name, "is a symbolic link".into()));
            }
            if !trusted(m.uid, m.gid) {
                return Err(unsafe_store(&name, format!("belongs to uid {}", m.uid)));
            }
        }
        let open = |parent: &Dir, name: &str, entry: &str| -> Result<Option<Dir>, Error> {
            let d = match parent.sub(name) {
                Ok(d) => d,
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ELOOP) => {
                    return Err(unsafe_store(entry, "is a symbolic link".into()));
                }
                Err(Errno::ENOTDIR) => {
                    return Err(unsafe_store(entry, "is not a directory".into()));
                }
                Err(e) => return Err(nix_io(parent.path_of(name))(e)),
            };
            let st = nix::sys::stat::fstat(&d.fd).map_err(nix_io(d.path.clone()))?;
            if !trusted(st.st_uid, st.st_gid) {
                return Err(unsafe_store(entry, format!("belongs to uid {}", st.st_uid)));
            }
            if st.st_mode & 0o002 != 0 {
                return Err(unsafe_store(entry, "is writable by everyone".into()));
            }
            Ok(Some(d))
        };
        let chunks = open(&top, layout::CHUNKS, layout::CHUNKS)?;
        let indexes = open(&top, layout::INDEXES, layout::INDEXES)?.ok_or_else(|| Error::Io {
            path: root.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not a teesfs store (no indexes/ directory); publish into it first",
            ),
        })?;
        let tags_entry = format!("{}/{}", layout::INDEXES, layout::TAGS);
        let tags = open(&indexes, layout::TAGS, &tags_entry)?;
        let learned = open(&top, layout::LEARNED, layout::LEARNED)?;
        Ok(StoreDirs {
            chunks,
            indexes,
            tags,
            learned,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linked_or_world_writable_store_directories_are_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let other = crate::DirStore::create(&t.path().join("other")).expect("other");
        let s = crate::DirStore::create(&t.path().join("s")).expect("store");
        assert!(StoreDirs::open(s.root()).is_ok());

        let chunks = s.root().join("chunks");
        std::fs::remove_dir(&chunks).expect("rmdir");
        std::os::unix::fs::symlink(other.root().join("chunks"), &chunks).expect("ln");
        let e = StoreDirs::open(s.root()).expect_err("a link").to_string();
        assert!(e.contains("chunks") && e.contains("symbolic link"), "{e}");
        std::fs::remove_file(&chunks).expect("rm");

        std::fs::create_dir(&chunks).expect("mkdir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&chunks, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = StoreDirs::open(s.root()).expect_err("o+w").to_string();
        assert!(e.contains("writable by everyone"), "{e}");
    }
}

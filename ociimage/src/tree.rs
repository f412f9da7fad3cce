//! The staging tree: the image's root filesystem as the layers build it up, written under
//! one directory that nothing escapes.
//!
//! Every operation starts from the staging root's descriptor and opens each path component
//! with `openat(O_NOFOLLOW | O_DIRECTORY)`, so a symlink in the middle of an entry's path
//! is an error, never followed; the last component is made with `mkdirat`, `openat(O_CREAT
//! | O_EXCL | O_NOFOLLOW)`, `symlinkat` or `linkat` (which does not follow either). Names are
//! checked before any of that: no `..`, no absolute paths.
//!
//! What the publisher may not be able to set (owners, setuid bits, a mode without the
//! owner's read bit) is never set on disk: files are written `0600` and directories `0700`,
//! and the image's metadata is kept in [`Tree::meta`], keyed by path, for the index.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use manifest::Meta;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, symlinkat, unlinkat};

use crate::Error;

/// A path inside the image, as its components (never `.`, `..` or empty).
pub(crate) type Comps = Vec<Vec<u8>>;

/// Splits an archive path into components: `./` prefixes and empty components are dropped,
/// `..` and absolute paths are refused (`reason` says which).
pub(crate) fn clean(raw: &[u8]) -> Result<Comps, &'static str> {
    if raw.first() == Some(&b'/') {
        return Err("an absolute path");
    }
    if raw.contains(&0) {
        return Err("a NUL byte in the path");
    }
    let mut out = Vec::new();
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("a `..` component"),
            c if c.len() > 255 => return Err("a component longer than 255 bytes"),
            c => out.push(c.to_vec()),
        }
    }
    Ok(out)
}

/// The key of a path in [`Tree::meta`]: its components joined by `/` (the root is empty).
pub(crate) fn key(comps: &[Vec<u8>]) -> Vec<u8> {
    comps.join(&b'/')
}

/// Shown in errors.
pub(crate) fn show(comps: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&key(comps)).into_owned()
}

/// The staging directory being filled, and the image's metadata for what is in it.
pub(crate) struct Tree {
    root: OwnedFd,
    /// The image's metadata of every path in the tree (the root under the empty key).
    pub(crate) meta: BTreeMap<Vec<u8>, Meta>,
    /// Paths created by the layer being applied: an opaque directory hides only what the
    /// layers below put there.
    this_layer: HashSet<Vec<u8>>,
}

/// What a failed step says, before the entry is named.
pub(crate) type Why = String;

fn errno(what: &str, e: Errno) -> Why {
    format!("{what}: {}", e.desc())
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// The metadata of a directory the archive never describes (made for a deeper entry).
const IMPLICIT_DIR: Meta = Meta {
    mode: 0o755,
    uid: 0,
    gid: 0,
    mtime: 0,
    mtime_nsec: 0,
};

impl Tree {
    /// Opens `staging` (an empty directory) as the tree's root.
    pub(crate) fn new(staging: &Path) -> Result<Self, Error> {
        let root =
            openat(nix::fcntl::AT_FDCWD, staging, dir_flags(), Mode::empty()).map_err(|e| {
                Error::Io {
                    path: staging.to_path_buf(),
                    source: e.into(),
                }
            })?;
        let mut meta = BTreeMap::new();
        meta.insert(Vec::new(), IMPLICIT_DIR);
        Ok(Self {
            root,
            meta,
            this_layer: HashSet::new(),
        })
    }

    /// Starts a new layer (for opaque directories).
    pub(crate) fn next_layer(&mut self) {
        self.this_layer.clear();
    }

    /// The directory `comps` names, opened without following any symlink; missing
    /// directories are made (and recorded as implicit) when `create`, else `None`.
    fn dir(&mut self, comps: &[Vec<u8>], create: bool) -> Result<Option<OwnedFd>, Why> {
        let mut cur = self.root.try_clone().map_err(|e| e.to_string())?;
        for (i, c) in comps.iter().enumerate() {
            let c = c.as_slice();
            match openat(&cur, c, dir_flags(), Mode::empty()) {
                Ok(fd) => cur = fd,
                Err(Errno::ENOENT) if create => {
                    mkdirat(&cur, c, Mode::from_bits_truncate(0o700))
                        .map_err(|e| errno(&format!("making {}", show(&comps[..=i])), e))?;
                    self.meta.entry(key(&comps[..=i])).or_insert(IMPLICIT_DIR);
                    cur = openat(&cur, c, dir_flags(), Mode::empty())
                        .map_err(|e| errno("opening a new directory", e))?;
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                    let what = match fstatat(&cur, c, AtFlags::AT_SYMLINK_NOFOLLOW) {
                        Ok(st)
                            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
                                == SFlag::S_IFLNK =>
                        {
                            "a symlink (never followed while unpacking)"
                        }
                        _ => "not a directory",
                    };
                    return Err(format!("{} is {what}", show(&comps[..=i])));
                }
                Err(e) => return Err(errno(&format!("opening {}", show(&comps[..=i])), e)),
            }
        }
        Ok(Some(cur))
    }

    /// The parent directory of `comps` (made if missing) and the last name.
    fn parent<'c>(&mut self, comps: &'c [Vec<u8>]) -> Result<(OwnedFd, &'c [u8]), Why> {
        let (name, dirs) = comps.split_last().ok_or("the root itself")?;
        let fd = self
            .dir(dirs, true)?
            .ok_or("the parent directory is missing")?;
        Ok((fd, name))
    }

    /// Forgets the metadata of `k` and everything below it.
    fn forget(&mut self, k: &[u8]) {
        self.meta.remove(k);
        let mut lo = k.to_vec();
        lo.push(b'/');
        let mut hi = k.to_vec();
        hi.push(b'/' + 1);
        let below: Vec<Vec<u8>> = self.meta.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for b in below {
            self.meta.remove(&b);
        }
    }

    /// Makes room for a new `name` in `dir`: removes what is there, except a directory
    /// when `keep_dir` (a directory entry over a directory only updates its metadata).
    /// Answers whether a directory was kept.
    fn clear(&mut self, dir: &OwnedFd, name: &[u8], k: &[u8], keep_dir: bool) -> Result<bool, Why> {
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(errno("looking at the old entry", e)),
        };
        let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        if is_dir && keep_dir {
            return Ok(true);
        }
        remove_at(dir, name).map_err(|e| errno("removing the old entry", e))?;
        self.forget(k);
        Ok(false)
    }

    fn record(&mut self, comps: &[Vec<u8>], meta: Meta) {
        let k = key(comps);
        self.this_layer.insert(k.clone());
        self.meta.insert(k, meta);
    }

    /// A directory entry.
    pub(crate) fn mkdir(&mut self, comps: &[Vec<u8>], meta: Meta) -> Result<(), Why> {
        if comps.is_empty() {
            self.record(comps, meta);
            return Ok(());
        }
        let (dir, name) = self.parent(comps)?;
        if !self.clear(&dir, name, &key(comps), true)? {
            mkdirat(&dir, name, Mode::from_bits_truncate(0o700))
                .map_err(|e| errno("making the directory", e))?;
        }
        self.record(comps, meta);
        Ok(())
    }

    /// A regular file of `size` bytes read from `data`.
    pub(crate) fn file(
        &mut self,
        comps: &[Vec<u8>],
        meta: Meta,
        data: &mut dyn Read,
        size: u64,
    ) -> Result<(), Why> {
        let (dir, name) = self.parent(comps)?;
        self.clear(&dir, name, &key(comps), false)?;
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&dir, name, flags, Mode::from_bits_truncate(0o600))
            .map_err(|e| errno("creating the file", e))?;
        let mut file = File::from(fd);
        let copied = std::io::copy(&mut data.take(size), &mut file).map_err(|e| e.to_string())?;
        if copied != size {
            return Err(format!(
                "the archive ends {} bytes into a {size}-byte file",
                copied
            ));
        }
        self.record(comps, meta);
        Ok(())
    }

    /// A symbolic link (its target is kept, never resolved).
    pub(crate) fn symlink(
        &mut self,
        comps: &[Vec<u8>],
        meta: Meta,
        target: &[u8],
    ) -> Result<(), Why> {
        if target.is_empty() || target.contains(&0) || target.len() > 4095 {
            return Err("an empty, overlong or NUL-holding symlink target".into());
        }
        let (dir, name) = self.parent(comps)?;
        self.clear(&dir, name, &key(comps), false)?;
        symlinkat(target, &dir, name).map_err(|e| errno("making the symlink", e))?;
        self.record(
            comps,
            Meta {
                mode: 0o777,
                ..meta
            },
        );
        Ok(())
    }

    /// A hard link to an earlier regular file of the tree.
    pub(crate) fn hardlink(&mut self, comps: &[Vec<u8>], target: &[Vec<u8>]) -> Result<(), Why> {
        let (tname, tdirs) = target.split_last().ok_or("a hard link to the root")?;
        let tdir = self
            .dir(tdirs, false)?
            .ok_or_else(|| format!("the link target {} does not exist", show(target)))?;
        match fstatat(&tdir, tname.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {}
            Ok(_) => {
                return Err(format!(
                    "the link target {} is not a regular file",
                    show(target)
                ));
            }
            Err(e) => return Err(errno(&format!("the link target {}", show(target)), e)),
        }
        let meta = self.meta.get(&key(target)).copied().unwrap_or(IMPLICIT_DIR);
        let (dir, name) = self.parent(comps)?;
        if key(comps) == key(target) {
            return Ok(());
        }
        self.clear(&dir, name, &key(comps), false)?;
        linkat(&tdir, tname.as_slice(), &dir, name, AtFlags::empty())
            .map_err(|e| errno("making the hard link", e))?;
        self.record(comps, meta);
        Ok(())
    }

    /// A whiteout: `comps` and all below it are deleted (if the layers below have it).
    pub(crate) fn whiteout(&mut self, comps: &[Vec<u8>]) -> Result<(), Why> {
        let Some((name, dirs)) = comps.split_last() else {
            return Err("a whiteout of the root".into());
        };
        let Some(dir) = self.dir(dirs, false)? else {
            return Ok(());
        };
        self.clear(&dir, name, &key(comps), false)?;
        Ok(())
    }

    /// An opaque directory: what the layers below put in `comps` is hidden.
    pub(crate) fn opaque(&mut self, comps: &[Vec<u8>]) -> Result<(), Why> {
        let Some(dir) = self.dir(comps, true)? else {
            return Ok(());
        };
        self.hide_lower(&dir, comps)
    }

    fn hide_lower(&mut self, dir: &OwnedFd, comps: &[Vec<u8>]) -> Result<(), Why> {
        let names = list(dir).map_err(|e| errno("listing an opaque directory", e))?;
        for n in names {
            let mut child = comps.to_vec();
            child.push(n.clone());
            let k = key(&child);
            if !self.this_layer.contains(&k) {
                remove_at(dir, n.as_slice()).map_err(|e| errno("hiding a lower entry", e))?;
                self.forget(&k);
            } else if let Ok(sub) = openat(dir, n.as_slice(), dir_flags(), Mode::empty()) {
                self.hide_lower(&sub, &child)?;
            }
        }
        Ok(())
    }
}

/// The names in a directory (without `.` and `..`).
fn list(dir: &OwnedFd) -> nix::Result<Vec<Vec<u8>>> {
    let fd = openat(dir, ".", dir_flags(), Mode::empty())?;
    let mut d = nix::dir::Dir::from_fd(fd)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let name = e?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// Removes `name` from `dir`, a directory with all it holds; never follows a symlink.
fn remove_at(dir: &OwnedFd, name: &[u8]) -> nix::Result<()> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Err(Errno::EISDIR) => {}
        other => return other,
    }
    let sub = openat(dir, name, dir_flags(), Mode::empty())?;
    for child in list(&sub)? {
        remove_at(&sub, &child)?;
    }
    unlinkat(dir, name, UnlinkatFlags::RemoveDir)
}

/// Removes a staging directory when dropped (its contents were written `0600`/`0700` by
/// this user, so nothing in it resists).
pub struct Staging {
    path: std::path::PathBuf,
}

impl Staging {
    /// Makes a fresh private directory under `parent`.
    pub fn new(parent: &Path) -> Result<Self, Error> {
        let io = |source| Error::Io {
            path: parent.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(parent).map_err(io)?;
        for n in 0..1000u32 {
            let path = parent.join(format!("image-staging-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                        .map_err(io)?;
                    return Ok(Self { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(e)),
            }
        }
        Err(io(std::io::Error::other("no free staging directory name")))
    }

    /// Where the tree is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove the image staging directory");
        }
    }
}

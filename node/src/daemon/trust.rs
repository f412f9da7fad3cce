//! Finding and reading what a node trusts: the publisher keys (the `--trust` files, else
//! the user's own `publisher.pub` and the `*.pub` files of the trusted directories), the
//! keys bound to users (`<dir>/<user or uid>/*.pub`), and the revoked index ids. Read at
//! the daemon's start and on every reload ([`Sources::load`]); the commands that check a
//! signature read the keys the same way. Errors name the file, never its content.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use manifest::{IndexId, PublicKey};

use crate::Error;
use crate::admit::Trust;

/// Where nodes list revoked index ids by default.
pub const REVOKED_DEFAULT: &str = "/etc/teesfs/revoked";

/// The largest key or list file read.
const MAX_FILE: u64 = 16 << 20;

/// Where a daemon reads what it trusts, at its start and on every reload.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Trusted publisher keys (`--trust`); empty: the defaults ([`trust_files`]).
    pub keys: Vec<PathBuf>,
    /// Publisher keys bound to users: `<dir>/<user or uid>/*.pub`; a missing directory
    /// binds none.
    pub users: PathBuf,
    /// The revoked index ids; the default file ([`REVOKED_DEFAULT`]) may be missing.
    pub revoked: PathBuf,
}

impl Sources {
    /// The trusted keys (with the users they sign for) and the revoked index ids.
    pub fn load(&self) -> Result<(Trust, HashSet<IndexId>), Error> {
        let trust = load_user_trust(load_trust(&self.keys)?, &self.users)?;
        Ok((trust, load_revoked(&self.revoked)?))
    }
}

/// An error about `path`.
fn bad(path: &Path, problem: impl std::fmt::Display) -> Error {
    Error::Trust {
        path: path.to_path_buf(),
        problem: problem.to_string(),
    }
}

/// The text of a key or list file: a regular file (a symlink is followed), at most 16 MiB,
/// read without blocking on a FIFO.
fn read_text(path: &Path, what: &str) -> Result<String, Error> {
    seeder::files::read_limited_to_string(path, MAX_FILE, seeder::files::Symlinks::Follow)
        .map_err(|e| bad(path, format_args!("reading {what}: {e}")))
}

/// The per-user configuration directory: `$TEESFS_CONFIG`, else `$XDG_CONFIG_HOME/teesfs`,
/// else `~/.config/teesfs`.
pub fn config_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TEESFS_CONFIG") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CONFIG_HOME") {
        return PathBuf::from(p).join("teesfs");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".config/teesfs")
}

/// A uid from a user name or a number; `None` for a name this host does not know.
pub fn uid_of(user: &str) -> Option<u32> {
    user.parse().ok().or_else(|| {
        nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    })
}

/// The files [`load_trust`] reads: the `explicit` files if given, else the user's own
/// `publisher.pub`, `*.pub` in `<config>/trusted/` and in `/etc/teesfs/trusted/`.
pub fn trust_files(explicit: &[PathBuf]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = explicit.to_vec();
    if files.is_empty() {
        let own = config_dir().join("publisher.pub");
        if own.exists() {
            files.push(own);
        }
        for dir in [
            config_dir().join("trusted"),
            PathBuf::from("/etc/teesfs/trusted"),
        ] {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                files.extend(
                    rd.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "pub")),
                );
            }
        }
    }
    files
}

/// Trusted publisher keys: the `explicit` files if given, else the defaults
/// ([`trust_files`]); none at all is an error saying where to put one.
pub fn load_trust(explicit: &[PathBuf]) -> Result<Vec<PublicKey>, Error> {
    let files = trust_files(explicit);
    if files.is_empty() {
        return Err(Error::NoTrustedKeys {
            config_dir: config_dir(),
        });
    }
    files
        .iter()
        .map(|f| {
            let text = read_text(f, "trusted key")?;
            PublicKey::from_file_text(&text).map_err(|e| bad(f, e))
        })
        .collect()
}

/// The site's `keys` with the user-bound keys of `dir` (`dir/<user or uid>/*.pub`): those
/// are trusted too, for their users' jobs only.
pub fn load_user_trust(keys: Vec<PublicKey>, dir: &Path) -> Result<Trust, Error> {
    let mut trust = Trust {
        keys,
        owners: Default::default(),
    };
    let Ok(users) = std::fs::read_dir(dir) else {
        return Ok(trust); // none bound
    };
    for user in users.flatten().filter(|e| e.path().is_dir()) {
        let name = user.file_name().to_string_lossy().into_owned();
        let uid = uid_of(&name).ok_or_else(|| {
            bad(
                &user.path(),
                format_args!("no user {name:?} on this node; name the directory by the uid"),
            )
        })?;
        let rd = std::fs::read_dir(user.path()).map_err(|e| bad(&user.path(), e))?;
        for f in rd.flatten().map(|e| e.path()) {
            if f.extension().is_none_or(|x| x != "pub") {
                continue;
            }
            let text = read_text(&f, "trusted key")?;
            let key = PublicKey::from_file_text(&text).map_err(|e| bad(&f, e))?;
            trust.owners.entry(key.to_hex()).or_default().insert(uid);
            if !trust.keys.contains(&key) {
                trust.keys.push(key);
            }
        }
    }
    Ok(trust)
}

/// The revoked index ids in `path`: one id per line, `#` comments, blank lines ignored.
/// The default file may be missing (nothing revoked); another path must exist. Errors name
/// the file and line.
pub fn load_revoked(path: &Path) -> Result<HashSet<IndexId>, Error> {
    if path == Path::new(REVOKED_DEFAULT) && !path.exists() {
        return Ok(HashSet::new());
    }
    let text = read_text(path, "revoked index list")?;
    let mut ids = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let id: IndexId = line.parse().map_err(|e| {
            bad(
                path,
                format_args!(
                    "line {}: {e}: list one index id (as `teesfs publish` prints it) per line",
                    n + 1
                ),
            )
        })?;
        ids.insert(id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoked_ids_are_read_by_line_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("revoked");
        let id = "ab".repeat(32);
        std::fs::write(&path, format!("# revoked\n\n{id}  # a bad push\n")).expect("write");
        let ids = load_revoked(&path).expect("reads");
        assert_eq!(ids.len(), 1);
        std::fs::write(&path, format!("{id}\nnot-an-id\n")).expect("write");
        let e = load_revoked(&path).expect_err("a bad line").to_string();
        assert!(e.contains("line 2") && e.contains("revoked"), "{e}");
        assert!(
            load_revoked(&dir.path().join("missing")).is_err(),
            "only the default may be missing"
        );
    }

    #[test]
    fn user_bound_keys_are_trusted_for_their_users_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = manifest::SecretKey::generate().expect("a key").public();
        std::fs::create_dir(dir.path().join("1234")).expect("mkdir");
        std::fs::write(dir.path().join("1234/k.pub"), key.to_file_text()).expect("write");
        let trust = load_user_trust(Vec::new(), dir.path()).expect("loads");
        assert_eq!(trust.keys, [key]);
        assert_eq!(trust.owners[&key.to_hex()], HashSet::from([1234]));
        // A missing directory binds none.
        let none = load_user_trust(vec![key], &dir.path().join("missing")).expect("loads");
        assert!(none.owners.is_empty() && none.keys.len() == 1);
    }
}

//! The link rates the pushes measured, kept in the store at `STORE/learned/rates.json`
//! (the format and the estimate are `pushreport::rates`): every push from this store folds
//! its figures in, and the next plan without configured rates uses them. The file sits
//! beside the learned urgent lists and is written the same way: atomically, readable by
//! everyone who may enter the store, so that the users of a shared store learn together.
//! Bytes only: nothing here parses the figures, talks to the network or follows a symlink
//! in the store.

use std::path::PathBuf;

use crate::files::{Symlinks, read_limited};
use crate::store::DirStore;
use crate::{Error, layout};

/// The largest file read back (the format keeps a few dozen pushes: a few kB).
pub const MAX_RATES_BYTES: u64 = 1 << 20;

/// Where the store keeps its learned rates.
pub fn rates_path(store: &DirStore) -> PathBuf {
    layout::learned_rates(store.root())
}

/// The learned rates' bytes, `None` when there are none yet. A file that is not a regular
/// file (a symlink is not followed) or is too large is [`Error::BadLearnedRates`].
pub fn read_rates(store: &DirStore) -> Result<Option<Vec<u8>>, Error> {
    let path = rates_path(store);
    let bad = |reason: String| Error::BadLearnedRates {
        path: path.clone(),
        reason,
    };
    match read_limited(&path, MAX_RATES_BYTES, Symlinks::Refuse) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(bad(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            Err(bad(format!("larger than {MAX_RATES_BYTES} bytes")))
        }
        Err(source) => Err(Error::Io {
            path: path.clone(),
            source,
        }),
    }
}

/// Replaces the learned rates with `bytes`, atomically; returns the file.
pub fn write_rates(store: &DirStore, bytes: &[u8]) -> Result<PathBuf, Error> {
    let path = rates_path(store);
    crate::learned::write_in_learned(store, &path, "rates", bytes)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_written_atomically_readable_by_all_and_a_symlink_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DirStore::create(dir.path()).expect("store");
        assert_eq!(read_rates(&store).expect("none yet"), None);
        let path = write_rates(&store, b"{}\n").expect("written");
        assert_eq!(read_rates(&store).expect("reads"), Some(b"{}\n".to_vec()));
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "others of a shared store read it");
        write_rates(&store, b"[]\n").expect("replaced");
        assert_eq!(read_rates(&store).expect("reads"), Some(b"[]\n".to_vec()));
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["rates.json"], "no temporary file left");
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", &path).expect("symlink");
        let e = read_rates(&store).expect_err("a symlink").to_string();
        assert!(e.contains("unusable") && e.contains("ignored"), "{e}");
    }
}

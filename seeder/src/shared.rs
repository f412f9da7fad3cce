//! A store several users publish into: its root directory is group-writable and setgid
//! (`chgrp teesfs-publish DIR; chmod 2775 DIR`). Every directory teesfs then makes in it
//! (`chunks/`, `chunks/xx/`, `indexes/`, `indexes/tags/`, `learned/`) is made group-writable
//! and setgid as well, and the lock file group-writable, so that the next member of the
//! group can add chunks to a directory the first one made, take the lock, move a tag and
//! collect garbage. Files stay read-only: chunks are content-addressed and indexes signed,
//! so nobody rewrites them, only adds or replaces them by rename.
//!
//! A store whose root is not both group-writable and setgid is a personal one: directories
//! get the creator's umask, as before.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// `setgid` and group-write, the marks of a shared store's root.
const SHARED_MARKS: u32 = 0o2020;

/// The mode of a directory of a shared store.
const SHARED_DIR_MODE: u32 = 0o2775;

/// Whether the store at `root` is shared by a group.
pub fn is_shared(root: &Path) -> bool {
    std::fs::metadata(root).is_ok_and(|md| md.mode() & SHARED_MARKS == SHARED_MARKS)
}

/// Makes `dir` and its missing parents inside the store at `root`; in a shared store,
/// every one of them this user owns is made group-writable and setgid.
pub fn make_dirs(root: &Path, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if !is_shared(root) {
        return Ok(());
    }
    let me = nix::unistd::geteuid().as_raw();
    let mut d = Some(dir);
    while let Some(p) = d.filter(|p| p.starts_with(root) && *p != root) {
        if let Ok(md) = std::fs::symlink_metadata(p)
            && md.is_dir()
            && md.uid() == me
            && md.mode() & 0o7777 != SHARED_DIR_MODE
        {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(SHARED_DIR_MODE))?;
        }
        d = p.parent();
    }
    Ok(())
}

/// In a shared store, makes the lock file `file` (opened for writing) group-writable if
/// this user owns it, so that another member of the group can take it.
pub fn share_lock_file(root: &Path, file: &std::fs::File) -> std::io::Result<()> {
    if !is_shared(root) {
        return Ok(());
    }
    let md = file.metadata()?;
    if md.uid() == nix::unistd::geteuid().as_raw() && md.mode() & 0o060 != 0o060 {
        file.set_permissions(std::fs::Permissions::from_mode(0o664))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_stores_new_directories_are_group_writable_and_setgid() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("store");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2775)).expect("chmod");
        assert!(is_shared(&root));
        make_dirs(&root, &root.join("chunks/ab")).expect("make");
        for d in ["chunks", "chunks/ab"] {
            let mode = std::fs::metadata(root.join(d)).expect("md").mode() & 0o7777;
            assert_eq!(mode, SHARED_DIR_MODE, "{d}: {mode:o}");
        }
        // The root itself is the admin's: left as it is.
        let mode = std::fs::metadata(&root).expect("md").mode() & 0o7777;
        assert_eq!(mode, 0o2775);
        // A personal store keeps the umask's modes.
        let own = t.path().join("own");
        std::fs::create_dir(&own).expect("mkdir");
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(!is_shared(&own));
        make_dirs(&own, &own.join("chunks/ab")).expect("make");
        let mode = std::fs::metadata(own.join("chunks/ab")).expect("md").mode();
        assert_eq!(mode & 0o2020, 0, "{mode:o}");
    }
}

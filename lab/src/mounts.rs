//! Mounts the lab makes on this host: each node's state tmpfs, and the lazy detach of
//! whatever is left under a lab's directory.

use std::path::{Path, PathBuf};

use crate::cluster::STATE_TMPFS;
use crate::error::{LabError, Result};

/// Mounts a tmpfs of [`STATE_TMPFS`] bytes at `dir` (made if missing) unless one is there
/// already (a daemon restarted on its state keeps it).
pub(crate) fn mount_state_tmpfs(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(LabError::io(dir))?;
    let canonical = std::fs::canonicalize(dir).map_err(LabError::io(dir))?;
    let mounted = teesfs_node::sys::mountinfo::read(None)
        .unwrap_or_default()
        .iter()
        .any(|m| m.mount_point == canonical);
    if mounted {
        return Ok(());
    }
    nix::mount::mount(
        Some("tmpfs"),
        &canonical,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(format!("size={STATE_TMPFS},mode=0755").as_str()),
    )
    .map_err(|e| LabError::io(dir)(std::io::Error::from(e)))
}

/// Lazily detaches any mount under `dir` in this mount namespace: the nodes' state
/// tmpfs, and a safety net for `clean` (the daemons' FUSE mounts live in private
/// namespaces and should never be here).
pub fn detach_mounts_under(dir: &Path) {
    let Ok(root) = std::fs::canonicalize(dir) else {
        return;
    };
    let mut points: Vec<PathBuf> = teesfs_node::sys::mountinfo::read(None)
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|mp| mp.starts_with(&root))
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for mp in points {
        let _ = nix::mount::umount2(&mp, nix::mount::MntFlags::MNT_DETACH);
    }
}

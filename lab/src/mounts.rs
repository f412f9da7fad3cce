//! Mounts the lab makes on this host: each node's state tmpfs, and the lazy detach of
//! whatever is left under a lab's directory.

use std::path::{Path, PathBuf};

use teesfs_node::sys::mountinfo::Mount;

use crate::cluster::{MARKER, STATE_TMPFS};
use crate::error::{LabError, Result};
use crate::layout::PREFIX_ROOT;

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

/// The lab work directories with a mount under them in this mount namespace, wherever they
/// are: a lab run with another `TMPDIR` (say `/var/tmp/labw`) leaves its nodes' state
/// tmpfs where a scan of the usual temporary directories does not look. A lab with several
/// mounts is named once for each.
pub(crate) fn lab_dirs_mounted() -> Vec<PathBuf> {
    teesfs_node::sys::mountinfo::read(None)
        .unwrap_or_default()
        .iter()
        .filter_map(|m| lab_dir_of(m, &|d| d.join(MARKER).exists()))
        .collect()
}

/// The lab work directory mount `m` is under: its nearest ancestor named like one
/// (`tlab…`) that holds the lab's marker, or, where the marker went with a half-done
/// removal, that `m` is a node's state tmpfs in (`<lab>/<node>/state`).
fn lab_dir_of(m: &Mount, has_marker: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let dir = m.mount_point.ancestors().skip(1).find(|a| {
        a.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(PREFIX_ROOT))
    })?;
    let state = m.fs_type == "tmpfs"
        && m.mount_point.file_name().is_some_and(|n| n == "state")
        && m.mount_point.parent().and_then(Path::parent) == Some(dir);
    (state || has_marker(dir)).then(|| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(at: &str, fs_type: &str) -> Mount {
        Mount {
            mount_point: at.into(),
            fs_type: fs_type.into(),
            source: fs_type.into(),
        }
    }

    #[test]
    fn a_nodes_state_tmpfs_names_its_lab_wherever_the_lab_ran() {
        let none = |_: &Path| false;
        let lab = Some(PathBuf::from("/var/tmp/labw/tlab1a2b"));
        let state = mount("/var/tmp/labw/tlab1a2b/n07/state", "tmpfs");
        assert_eq!(lab_dir_of(&state, &none), lab, "without its marker too");
        let deeper = mount("/var/tmp/labw/tlab1a2b/n07/state/x", "tmpfs");
        assert_eq!(
            lab_dir_of(&deeper, &none),
            None,
            "not a node's state: needs the marker"
        );
        assert_eq!(
            lab_dir_of(&deeper, &|d| d == Path::new("/var/tmp/labw/tlab1a2b")),
            lab
        );
        let fuse = mount("/var/tmp/labw/tlab1a2b/n07/mnt", "fuse.teesfs");
        assert_eq!(lab_dir_of(&fuse, &none), None);
        for other in [
            "/var/tmp/labw/n07/state",
            "/tlab/state",
            "/home/x/tlab",
            "/",
        ] {
            assert_eq!(lab_dir_of(&mount(other, "tmpfs"), &none), None, "{other}");
        }
        let no_lab = mount("/var/tmp/labw/n07/state", "tmpfs");
        assert_eq!(
            lab_dir_of(&no_lab, &|_| true),
            None,
            "nothing named like a lab"
        );
    }

    /// Needs root (mounts a tmpfs); CI runs as root, so there it fails rather than skip.
    #[test]
    fn a_state_tmpfs_left_in_another_tmpdir_is_found_and_detached() {
        if !nix::unistd::geteuid().is_root() {
            assert!(std::env::var_os("CI").is_none(), "needs root under CI");
            return eprintln!("SKIP: needs root to mount a tmpfs");
        }
        let base = tempfile::Builder::new()
            .prefix("labw-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let lab = base.path().join(format!("{PREFIX_ROOT}test"));
        let state = lab.join("n01/state");
        struct Detach(PathBuf);
        impl Drop for Detach {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        mount_state_tmpfs(&state).expect("mount");
        let _guard = Detach(state.clone());
        let lab = std::fs::canonicalize(&lab).expect("canonical");
        assert!(
            lab_dirs_mounted().contains(&lab),
            "not found: {}",
            lab.display()
        );
        detach_mounts_under(&lab);
        let left = teesfs_node::sys::mountinfo::read(None).expect("mountinfo");
        assert!(
            left.iter().all(|m| !m.mount_point.starts_with(&lab)),
            "still mounted"
        );
        assert!(!lab_dirs_mounted().contains(&lab));
    }
}

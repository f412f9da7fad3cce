//! The mount(2) side of the environment: carries out a [`layout`](super::layout) plan, and
//! holds the few other mount-table changes `runenv` makes (propagation, the new /proc,
//! switching to the new root, detaching the staging tmpfs).
//!
//! It is the only place in `runenv` that mounts or unmounts, and it decides nothing: what
//! goes where is the plan's business, when is the caller's.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use super::image::Skel;
use super::layout::{Op, overlay_options};
use super::{Result, nix_err, sys};

/// Carries out `ops` in order, stopping at the first that fails. Returns the upper
/// directories it created ([`Op::MkUpper`] on a path that did not exist).
pub fn apply(ops: &[Op]) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    for op in ops {
        apply_one(op, &mut created)?;
    }
    Ok(created)
}

fn apply_one(op: &Op, created: &mut Vec<PathBuf>) -> Result<()> {
    match op {
        Op::Tmpfs { target } => mount(
            Some("teesfs-run"),
            target,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        )
        .map_err(nix_err(format!("mounting a tmpfs on {}", target.display()))),
        Op::Mkdir { path, mode } => {
            std::fs::create_dir_all(path).map_err(sys(format!("creating {}", path.display())))?;
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                // Best effort: the directory only mirrors the host's, whose own
                // permissions still apply to what is mounted on it.
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode));
            }
            Ok(())
        }
        Op::MkUpper { path } => {
            if !path.exists() {
                created.push(path.clone());
            }
            std::fs::create_dir_all(path).map_err(sys(format!("creating {}", path.display())))
        }
        Op::File { path } => {
            std::fs::write(path, b"").map_err(sys(format!("creating {}", path.display())))
        }
        Op::Symlink { path, to } => std::os::unix::fs::symlink(to, path)
            .map_err(sys(format!("creating {}", path.display()))),
        Op::Bind {
            source,
            target,
            recursive,
        } => {
            let mut flags = MsFlags::MS_BIND;
            if *recursive {
                flags |= MsFlags::MS_REC;
            }
            mount::<Path, Path, str, str>(Some(source), target, None, flags, None).map_err(nix_err(
                format!("binding {} onto {}", source.display(), target.display()),
            ))
        }
        Op::Overlay {
            target,
            lowers,
            upper,
            work,
            userxattr,
        } => {
            let data = overlay_options(lowers, upper, work, *userxattr);
            mount(
                Some("teesfs-run"),
                target,
                Some("overlay"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(data.as_str()),
            )
            .map_err(nix_err(format!(
                "mounting an overlay on {} ({data})",
                target.display()
            )))
        }
    }
}

/// Writes an image's skeleton (directories mode 0755, files mode 0644) on the staging
/// tmpfs.
pub fn skeleton(entries: &[Skel]) -> Result<()> {
    for e in entries {
        match e {
            Skel::Dir(d) => {
                std::fs::create_dir_all(d).map_err(sys(format!("creating {}", d.display())))?
            }
            Skel::File(f, content) => {
                if let Some(parent) = f.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(sys(format!("creating {}", parent.display())))?;
                }
                std::fs::write(f, content).map_err(sys(format!("writing {}", f.display())))?
            }
        }
    }
    Ok(())
}

/// Sets the propagation of every mount of this namespace (`MS_PRIVATE` or `MS_SLAVE`).
pub fn propagate_all(propagation: MsFlags, what: &str) -> Result<()> {
    mount::<str, str, str, str>(None, "/", None, MsFlags::MS_REC | propagation, None)
        .map_err(nix_err(what))
}

/// Detaches whatever is mounted on `path` (lazily: it goes once nothing uses it).
pub fn detach(path: &Path) -> Result<()> {
    umount2(path, MntFlags::MNT_DETACH).map_err(nix_err(format!("detaching {}", path.display())))
}

/// Mounts a proc of this PID namespace on `dir`; binds the host's when the kernel refuses
/// a new one (in a user namespace it does when the host's /proc has mounts over parts of
/// it, which a new proc would uncover).
pub fn mount_proc(dir: &Path) -> Result<()> {
    if let Err(e) = mount::<str, Path, str, str>(
        Some("proc"),
        dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    ) {
        tracing::warn!(error = %e, "cannot mount a new /proc; binding the host's");
        mount::<str, Path, str, str>(
            Some("/proc"),
            dir,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )
        .map_err(nix_err("binding /proc"))?;
    }
    Ok(())
}

/// Makes `root` this process's "/" (and its mount namespace's, for whoever joins it).
pub fn switch_root(root: &Path) -> Result<()> {
    nix::unistd::chdir(root).map_err(nix_err(format!("entering {}", root.display())))?;
    match nix::unistd::pivot_root(".", ".") {
        Ok(()) => {
            umount2(".", MntFlags::MNT_DETACH).map_err(nix_err("detaching the old root"))?;
        }
        Err(e) => {
            // "/" is the initramfs (diskless nodes that never switched root): pivot_root
            // refuses it, but the new root can be moved over it, as switch_root does.
            tracing::debug!(error = %e, "pivot_root refused; moving the new root over /");
            mount::<str, str, str, str>(Some("."), "/", None, MsFlags::MS_MOVE, None)
                .map_err(nix_err("moving the new root over /"))?;
            nix::unistd::chroot(".").map_err(nix_err("chroot into the new root"))?;
        }
    }
    nix::unistd::chdir("/").map_err(nix_err("entering /"))
}

/// Makes `root` this process's "/" for the namespace's init, leaving the working directory
/// at the new root: pivot_root, or chroot where the kernel refuses it (the old root stays
/// mounted beneath, unreachable, and goes with the namespace).
pub fn enter_root(root: &Path) -> Result<()> {
    nix::unistd::chdir(root).map_err(nix_err(format!("entering {}", root.display())))?;
    match nix::unistd::pivot_root(".", ".") {
        Ok(()) => {
            umount2(".", MntFlags::MNT_DETACH).map_err(nix_err("detaching the old root"))?;
        }
        Err(e) => {
            tracing::debug!(error = %e, "pivot_root refused; using chroot");
            nix::unistd::chroot(".").map_err(nix_err("chroot into the new root"))?;
        }
    }
    Ok(())
}

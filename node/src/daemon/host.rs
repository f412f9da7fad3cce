//! What a daemon does to its host when it starts: takes its state directory's lock, clears
//! mounts a dead predecessor left, and raises its open-file limit.

use crate::Error;

/// Detaches FUSE mounts under `root` left by a daemon that died without unmounting (their
/// reads would fail with ENOTCONN forever), and removes the empty mountpoints of its jobs;
/// the mounts at `spare` (jobs taken up from the keeper) stay.
///
/// Nothing here looks into a mount (a `stat` of a mount nobody serves yet would wait for
/// an answer that never comes): mounts are told by their names under the root.
pub(super) fn clean_stale_mounts(root: &std::path::Path, spare: &[std::path::PathBuf]) {
    let spare: Vec<&std::ffi::OsStr> = spare.iter().filter_map(|p| p.file_name()).collect();
    detach_stale_mounts(root, &spare);
    // No job runs yet: every other directory left under the mount root is a dead job's.
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let kept = spare.contains(&e.file_name().as_os_str());
            if !kept && std::fs::remove_dir(e.path()).is_ok() {
                tracing::info!(dir = %e.path().display(), "removed a stale job mountpoint");
            }
        }
    }
}

fn detach_stale_mounts(root: &std::path::Path, spare: &[&std::ffi::OsStr]) {
    let Ok(root) = std::fs::canonicalize(root) else {
        return;
    };
    let Ok(mounts) = crate::sys::mountinfo::read(None) else {
        return;
    };
    for m in mounts {
        let mp = &m.mount_point;
        let spared = mp.parent() == Some(root.as_path())
            && mp.file_name().is_some_and(|n| spare.contains(&n));
        if m.fs_type.starts_with("fuse") && mp.starts_with(&root) && !spared {
            match nix::mount::umount2(mp, nix::mount::MntFlags::MNT_DETACH) {
                Ok(()) => {
                    tracing::warn!(mountpoint = %mp.display(), "detached a stale mount from an earlier run")
                }
                Err(e) => {
                    tracing::error!(mountpoint = %mp.display(), error = %e, "cannot detach a stale mount")
                }
            }
            let _ = std::fs::remove_dir(mp);
        }
    }
}

/// Takes the state directory's exclusive lock (creating the directory), or says which daemon
/// holds it. The lock file holds the owner's pid.
pub(super) fn lock_state_dir(
    dir: &std::path::Path,
) -> Result<nix::fcntl::Flock<std::fs::File>, Error> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("daemon.lock");
    let io = |source: std::io::Error| Error::StateDir {
        dir: dir.to_path_buf(),
        problem: format!("cannot lock {}: {source}", path.display()),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut locked) => {
            locked.set_len(0).map_err(io)?;
            locked.rewind().map_err(io)?;
            writeln!(locked, "{}", std::process::id()).map_err(io)?;
            Ok(locked)
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            let pid = if pid.chars().all(|c| c.is_ascii_digit()) && !pid.is_empty() {
                pid.to_string()
            } else {
                "unknown".to_string()
            };
            Err(Error::StateDir {
                dir: dir.to_path_buf(),
                problem: format!(
                    "another teesfs daemon (pid {pid}) uses it; stop that one first (systemctl stop teesfs-daemon) or give this one its own --state-dir"
                ),
            })
        }
        Err((_, e)) => Err(io(std::io::Error::from(e))),
    }
}

/// Raises the soft limit on open files to the hard limit: jobs, peers, chunk reads and
/// mounts need descriptors, and control clients must never be what exhausts them.
pub(super) fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(error = %e, soft, hard, "cannot raise the open-file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}

//! The first process of the environment's PID namespace (`teesfs __run-init`), and the
//! supervision it shares with `teesfs run`: forwarding signals to the command, reaping
//! orphans, reporting how the command ended.
//!
//! It must not lay anything out: the root it enters is built before it starts; it only
//! mounts the namespace's own /proc (which only a process of the namespace can) and moves
//! into the root.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::{INIT_SUBCOMMAND, Outcome, Result, apply, map_ids, nix_err, sys};

/// What to say when a program is missing because a layer's own top-level `bin/` (pip
/// `--target` makes one) replaced the node's `/bin`, on merged-/usr systems a link to
/// `usr/bin`: `/bin/sh` is gone while `/usr/bin/sh` is there.
fn hidden_system_dir_hint(e: &std::io::Error) -> &'static str {
    let hidden = !Path::new("/bin/sh").exists() && Path::new("/usr/bin/sh").exists();
    if e.kind() == std::io::ErrorKind::NotFound && hidden {
        " (the layer's own top-level bin/ hides the node's /bin: put the layer's files under a \
         prefix such as opt/APP)"
    } else {
        ""
    }
}

/// Signals passed on to the command when a process (not the terminal) sends them.
const FORWARDED: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// The caught signals, with who sent each.
pub type Signals =
    signal_hook::iterator::SignalsInfo<signal_hook::iterator::exfiltrator::WithOrigin>;

/// Catches the signals to pass on, and SIGCHLD, so that [`supervise`] waits on signals
/// instead of polling. No thread: a process that has unshared its PID namespace cannot
/// start one.
pub fn catch_signals() -> Result<Signals> {
    Signals::new(FORWARDED.iter().copied().chain([libc::SIGCHLD]))
        .map_err(sys("installing signal handlers"))
}

/// Passes caught signals on to `pid` until it ends (reaping any other child on the way, as
/// an init must) and returns how it ended.
pub fn supervise(pid: Pid, signals: &mut Signals) -> Outcome {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use signal_hook::low_level::siginfo::Cause;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == pid => return Outcome::Exited(code),
                Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                    return Outcome::Signaled(sig as i32);
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    tracing::error!(error = %e, "waiting for the command");
                    return Outcome::Exited(255);
                }
            }
        }
        // Blocks until a signal comes: one to pass on, or SIGCHLD (a child ended; one that
        // ended since the reaping above is pending already, so nothing is missed).
        for origin in signals.wait() {
            // The terminal signals the whole foreground process group, the command
            // included; pass on only what a process sent to us.
            if origin.signal == libc::SIGCHLD || matches!(origin.cause, Cause::Kernel) {
                continue;
            }
            if let Ok(sig) = Signal::try_from(origin.signal) {
                let _ = nix::sys::signal::kill(pid, sig);
            }
        }
    }
}

/// The namespace's init (`teesfs __run-init ROOT STATUS UID GID CWD [WORKDIR] -- CMD...`): mounts
/// `/proc`, switches to the new root, drops back to the invoking user, runs the command,
/// forwards signals, reaps orphans and writes the command's outcome to STATUS.
pub fn init_main(args: &[OsString]) -> Result<std::convert::Infallible> {
    let bad = || crate::Error::InvalidRun(format!("{INIT_SUBCOMMAND}: bad arguments {args:?}"));
    let (head, cmd) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => return Err(bad()),
    };
    // CWD, then (an image's WorkingDir) where to start when CWD is not in the environment.
    let (root, status, uid, gid, cwd, workdir) = match head {
        [root, status, uid, gid, cwd] => (root, status, uid, gid, cwd, None),
        [root, status, uid, gid, cwd, w] => (root, status, uid, gid, cwd, Some(w)),
        _ => return Err(bad()),
    };
    let num = |s: &OsString| {
        s.to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(bad)
    };
    let (uid, gid) = (num(uid)?, num(gid)?);
    let root = PathBuf::from(root);
    let mut status = std::fs::OpenOptions::new()
        .write(true)
        .open(status)
        .map_err(sys("opening the status file"))?;
    // If `teesfs run` itself is killed outright, take the whole environment with it.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if cmd.is_empty() {
        return Err(bad());
    }

    // A mount namespace of its own: pivot_root moves the root of every process of the
    // namespace, and `teesfs run` (which shares it so far) must keep the host's view to read
    // the status file and tear the staging directory down afterwards.
    unshare(CloneFlags::CLONE_NEWNS).map_err(nix_err("creating the init's mount namespace"))?;
    apply::mount_proc(&root.join("proc"))?;
    apply::enter_root(&root)?;
    let cwd = PathBuf::from(cwd);
    if nix::unistd::chdir(&cwd).is_err() {
        match workdir {
            Some(w) if nix::unistd::chdir(Path::new(w)).is_ok() => {}
            _ => {
                let cwd = cwd.display();
                tracing::warn!(%cwd, "working directory missing in the environment; using /");
                nix::unistd::chdir("/").map_err(nix_err("entering /"))?;
            }
        }
    }
    // Back to the invoking user: a nested user namespace maps them to the root of this one.
    if uid != 0 || gid != 0 {
        unshare(CloneFlags::CLONE_NEWUSER).map_err(nix_err("creating the user's namespace"))?;
        map_ids(uid, 0, gid, 0)?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(nix_err("setting no_new_privs"))?;

    let mut signals = catch_signals()?;
    let child = Command::new(&cmd[0]).args(&cmd[1..]).spawn();
    let outcome = match child {
        Ok(child) => supervise(Pid::from_raw(child.id() as i32), &mut signals),
        Err(e) => {
            // Best effort: a closed or full stderr must not change the exit status.
            let _ = writeln!(
                std::io::stderr(),
                "teesfs run: cannot run {}: {e}{}",
                Path::new(&cmd[0]).display(),
                hidden_system_dir_hint(&e)
            );
            Outcome::Exited(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
    };
    let _ = status.write_all(outcome.encode().as_bytes());
    let _ = status.sync_all();
    std::process::exit(0)
}

//! Processes inside lab nodes: started in the node's network namespace and in a fresh,
//! private mount namespace (so their FUSE mounts never reach the host and vanish with
//! them), tied to the lab's lifetime by a parent-death signal, stopped by Drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A command that runs `program` in `netns` and in a new private mount namespace.
///
/// `nsenter` (not `ip netns exec`, which remounts /sys) enters the network namespace,
/// `setpriv --pdeathsig KILL` makes the process die with the lab even after `kill -9`,
/// and `unshare --mount --propagation private` gives it mounts nobody else sees. Each tool
/// execs the next, so the returned child's pid is the program's pid.
pub fn in_new_mounts(netns: &str, program: &str) -> Command {
    let mut c = crate::cgroup::nsenter(netns);
    c.arg(format!("--net=/run/netns/{netns}"))
        .args(["setpriv", "--pdeathsig", "KILL", "--"])
        .args(["unshare", "--mount", "--propagation", "private", "--"])
        .arg(program);
    c
}

/// A command that runs `program` in `netns` only (the host's mounts), dying with the lab.
pub fn in_net(netns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = crate::cgroup::nsenter(netns);
    c.arg(format!("--net=/run/netns/{netns}"))
        .args(["setpriv", "--pdeathsig", "KILL", "--"])
        .arg(program);
    c
}

/// A command that runs `program` in `netns` and in the mount namespace of process `pid`
/// (a node's daemon), so it sees that node's FUSE mounts.
pub fn in_mounts_of(netns: &str, pid: u32, program: &str) -> Command {
    let mut c = crate::cgroup::nsenter(netns);
    c.arg(format!("--net=/run/netns/{netns}"))
        .arg(format!("--mount=/proc/{pid}/ns/mnt"))
        .args(["setpriv", "--pdeathsig", "KILL", "--"])
        .arg(program);
    c
}

/// `path` as process `pid` sees it, through its mount namespace (`/proc/PID/root`): a
/// node's FUSE mount shows there once it is up.
pub fn seen_by(pid: u32, path: &Path) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{}", path.display()))
}

/// A long-running process in a node, stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct NodeProc {
    /// The node it runs on.
    pub host: String,
    /// Its log file.
    pub log: PathBuf,
    child: Option<Child>,
}

impl NodeProc {
    /// Adopts a started child.
    pub fn new(host: &str, log: PathBuf, child: Child) -> Self {
        Self {
            host: host.to_string(),
            log,
            child: Some(child),
        }
    }

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Whether it has exited successfully (`Some`), or is still running (`None`). A
    /// process that cannot be waited for counts as failed.
    pub fn try_exit(&mut self) -> Option<bool> {
        let Some(c) = self.child.as_mut() else {
            return Some(false);
        };
        match c.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => {
                self.child = None;
                Some(status.success())
            }
            Err(_) => {
                self.child = None;
                Some(false)
            }
        }
    }

    /// Sends SIGTERM without waiting (and SIGCONT, in case it was stopped).
    pub fn signal_stop(&self) {
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
    }

    /// Sends `sig`; false when it is not running.
    pub fn signal(&self, sig: Signal) -> bool {
        match &self.child {
            Some(c) => i32::try_from(c.id()).is_ok_and(|pid| kill(Pid::from_raw(pid), sig).is_ok()),
            None => false,
        }
    }

    /// Kills it with SIGKILL, like a crash: no chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops it: SIGTERM, up to `grace` to exit (unmounting its jobs), then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        self.signal_stop();
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// CPU seconds (user + system) process `pid` has used so far; 0 when it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_seconds(pid, 2)
}

/// CPU seconds of process `pid` plus those of its children it has waited for (a daemon
/// that forks a helper per request); 0 when it is gone.
pub fn cpu_seconds_with_children(pid: u32) -> f64 {
    stat_seconds(pid, 4)
}

/// The first `fields` of utime, stime, cutime and cstime (fields 14 to 17 of
/// `/proc/PID/stat`) of `pid`, in seconds.
fn stat_seconds(pid: u32, fields: usize) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The fields after the parenthesised command name, which may hold spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(fields)
        .filter_map(|s| s.parse::<u64>().ok())
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1);
    ticks as f64 / hz as f64
}

/// Waits for `child` to exit and returns the CPU seconds it and the children it waited for
/// used (read from the exited process before it is reaped), with its exit status.
///
/// Drain its piped output first: this blocks until it exits.
pub fn wait_with_cpu(child: &mut Child) -> std::io::Result<(std::process::ExitStatus, f64)> {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    // Left unreaped, the process's /proc/PID/stat still holds its final times.
    let cpu = match waitid(Id::Pid(Pid::from_raw(child.id() as i32)), flags) {
        Ok(_) => cpu_seconds_with_children(child.id()),
        Err(_) => 0.0,
    };
    Ok((child.wait()?, cpu))
}

/// Whether `child` has exited, without reaping it (so its CPU can still be read).
pub fn has_exited(child: &Child) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    !matches!(
        waitid(Id::Pid(Pid::from_raw(child.id() as i32)), flags),
        Ok(WaitStatus::StillAlive)
    )
}

/// CPU seconds of this process's waited-for children so far.
pub fn children_cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_childs_cpu_counts_what_it_waited_for_and_is_read_before_it_is_reaped() {
        // `sh` runs a busy child and waits for it: its CPU is the child's.
        let mut c = std::process::Command::new("sh")
            .args(["-c", "timeout 0.5 sh -c 'while :; do :; done'; exit 3"])
            .spawn()
            .expect("sh");
        let (status, cpu) = super::wait_with_cpu(&mut c).expect("waited");
        assert_eq!(status.code(), Some(3));
        assert!(cpu >= 0.2, "a busy half second counted {cpu} CPU-s");
        assert!(super::has_exited(&c), "a reaped child counts as exited");
    }

    #[test]
    fn own_cpu_is_readable() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(super::cpu_seconds(std::process::id()) >= 0.0);
        assert_eq!(super::cpu_seconds(u32::MAX), 0.0);
    }
}

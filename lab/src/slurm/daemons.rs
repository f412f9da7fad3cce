//! The lab Slurm's daemons and their lifetime: munge, `slurmctld` and one `slurmd` per node
//! started in their namespaces and waited for, and all of it (with every process Slurm
//! started, found by UTS namespace) stopped and removed again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{START_TIMEOUT, Slurm, log_file, slurm_conf, which};
use crate::check_interrupt;
use crate::error::{LabError, Result};
use crate::proc::NodeProc;

fn mkdir(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p).map_err(LabError::io(p))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(LabError::io(p))
}

fn spawn(cmd: &mut Command, host: &str, log: PathBuf) -> Result<NodeProc> {
    let child = cmd.spawn().map_err(|source| LabError::Spawn {
        program: "nsenter".into(),
        source,
    })?;
    Ok(NodeProc::new(host, log, child))
}

/// The UTS namespace of `pid` (`uts:[4026532685]`), if it can be read.
fn uts_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/uts"))
        .ok()
        .map(|p| p.display().to_string())
}

/// Pids of every process whose UTS namespace is one of `uts`.
pub(super) fn pids_in_uts(uts: &[String]) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| uts_of(pid as u32).is_some_and(|u| uts.contains(&u)))
        .collect()
}

impl Slurm<'_> {
    /// Starts munge, `slurmctld` on the login node and a `slurmd` on every compute node,
    /// and waits until every node is idle.
    pub(super) fn start(&mut self) -> Result<()> {
        let layout = self.lab.layout();
        let login = layout
            .node("login")
            .ok_or_else(|| LabError::Shape("no login node".into()))?
            .netns
            .clone();
        mkdir(&self.dir, 0o755)?;
        mkdir(&self.dir.join("ctld"), 0o755)?;
        if let Some(user) = &self.scripts.slurm_user {
            // slurmctld keeps its state and log as the Slurm user.
            let u = nix::unistd::User::from_name(user)
                .ok()
                .flatten()
                .ok_or_else(|| LabError::Shape(format!("no user {user} on this machine")))?;
            let ctld = self.dir.join("ctld");
            nix::unistd::chown(&ctld, Some(u.uid), Some(u.gid))
                .map_err(|e| LabError::io(&ctld)(std::io::Error::from(e)))?;
        }
        mkdir(&self.local_dir(), 0o755)?;
        for h in &self.hosts {
            mkdir(&self.dir.join("nodes").join(h).join("spool"), 0o755)?;
            mkdir(&self.node_local(h), 0o755)?;
        }
        let socket = self.start_munge(&login)?;

        if !self.scripts.plugstack.is_empty() {
            let p = self.dir.join("plugstack.conf");
            let mut text = self.scripts.plugstack.join("\n");
            text.push('\n');
            std::fs::write(&p, text).map_err(LabError::io(&p))?;
        }
        let conf = slurm_conf(layout, &self.dir, &socket, &self.scripts);
        std::fs::write(&self.conf, conf).map_err(LabError::io(&self.conf))?;

        let ctld = which("slurmctld").unwrap_or_else(|| "slurmctld".into());
        let log = self.dir.join("ctld").join("slurmctld.log");
        let exec = format!("{} -D -i -f {}", ctld.display(), self.conf.display());
        let host = super::controller_host(&self.scripts);
        let ctl_ns = layout
            .node(host)
            .ok_or_else(|| LabError::Shape(format!("no {host} node")))?
            .netns
            .clone();
        let mut cmd = in_node_uts(&ctl_ns, None, host, None, &exec);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir.join("ctld").join("out"))?);
        self.ctld = Some(spawn(&mut cmd, host, log)?);

        let slurmd = which("slurmd").unwrap_or_else(|| "slurmd".into());
        for n in layout.compute() {
            let ndir = self.dir.join("nodes").join(&n.host);
            let bind = (self.node_local(&n.host), self.local_dir());
            let exec = format!(
                "{} -D -N {} -f {}",
                slurmd.display(),
                n.host,
                self.conf.display()
            );
            let daemon = self.lab.daemon_pid(&n.host);
            let mut cmd = in_node_uts(&n.netns, daemon, &n.host, Some(bind), &exec);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file(&ndir.join("out"))?);
            self.slurmds
                .push(spawn(&mut cmd, &n.host, ndir.join("slurmd.log"))?);
        }
        self.wait_idle()?;
        let own = uts_of(std::process::id());
        self.uts = self
            .ctld
            .iter()
            .chain(&self.slurmds)
            .filter_map(|p| p.pid().and_then(uts_of))
            .filter(|u| Some(u) != own.as_ref())
            .collect();
        Ok(())
    }

    /// Starts munged in the login node's network namespace with a fresh key and a private
    /// socket; returns the socket once it exists.
    fn start_munge(&mut self, login: &str) -> Result<PathBuf> {
        let mdir = self.dir.join("munge");
        mkdir(&mdir, 0o711)?;
        let key = mdir.join("munge.key");
        let mut k = [0u8; 1024];
        getrandom::fill(&mut k).map_err(|e| LabError::Io {
            path: key.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key)
                .map_err(LabError::io(&key))?;
            f.write_all(&k).map_err(LabError::io(&key))?;
        }
        let socket = mdir.join("munge.socket");
        let munged = which("munged").unwrap_or_else(|| "munged".into());
        let log = mdir.join("munged.log");
        let mut cmd = crate::proc::in_net(login, &munged);
        cmd.args(["--foreground", "--force"])
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", mdir.join("munged.pid").display()))
            .arg(format!(
                "--seed-file={}",
                mdir.join("munged.seed").display()
            ))
            .arg(format!("--log-file={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&mdir.join("munged.out"))?);
        self.munged = Some(spawn(&mut cmd, "login", log.clone())?);
        self.wait_for("munged", &log, || socket.exists())?;

        Ok(socket)
    }

    /// Waits until `ready`, failing if a daemon died or the time is up.
    fn wait_for(&mut self, what: &str, log: &Path, mut ready: impl FnMut() -> bool) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !ready() {
            check_interrupt()?;
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(LabError::Daemon {
                    host: "login".into(),
                    reason: format!("{what} not ready after {} s", START_TIMEOUT.as_secs()),
                    log: log.to_path_buf(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn check_alive(&mut self) -> Result<()> {
        for p in self
            .munged
            .iter_mut()
            .chain(self.ctld.iter_mut())
            .chain(self.slurmds.iter_mut())
        {
            if !p.alive() {
                let tail = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = tail.lines().rev().take(5).collect();
                return Err(LabError::Daemon {
                    host: p.host.clone(),
                    reason: format!(
                        "exited: {}",
                        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    ),
                    log: p.log.clone(),
                });
            }
        }
        Ok(())
    }

    /// Waits until `sinfo` shows every node idle.
    fn wait_idle(&mut self) -> Result<()> {
        let log = self.dir.join("ctld").join("slurmctld.log");
        // 32 slurmds registering on a loaded 2-core machine can take longer than one
        // client command may.
        let deadline = Instant::now() + 2 * START_TIMEOUT;
        let mut last: String;
        loop {
            check_interrupt()?;
            self.check_alive()?;
            match self.run("sinfo", &["-h", "-N", "-o", "%N %t"], START_TIMEOUT) {
                Ok(out) => {
                    let idle = out
                        .lines()
                        .filter(|l| l.split_whitespace().nth(1) == Some("idle"))
                        .count();
                    if idle == self.hosts.len() {
                        return Ok(());
                    }
                    last = out;
                }
                Err(e) => last = format!("sinfo: {e}"),
            }
            if Instant::now() > deadline {
                return Err(LabError::Daemon {
                    host: "login".into(),
                    reason: format!("not every slurmd registered idle: {}", last.trim()),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Cancels every job, stops every Slurm process and munge, removes Slurm's files.
    /// Errors name what would not stop.
    pub fn down(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if self.ctld.as_mut().is_some_and(NodeProc::alive) {
            let _ = self.run("scancel", &["--user=root"], Duration::from_secs(10));
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                match self.run("squeue", &["-h", "-o", "%i"], Duration::from_secs(5)) {
                    Ok(s) if !s.trim().is_empty() => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    _ => break,
                }
            }
        }
        for p in self.slurmds.iter().chain(&self.ctld) {
            p.signal_stop();
        }
        for p in self.slurmds.iter_mut().chain(self.ctld.iter_mut()) {
            p.stop(Duration::from_secs(5));
        }
        self.slurmds.clear();
        self.ctld = None;
        // slurmstepd and job tasks are not our children: find them by namespace.
        let mut left = Vec::new();
        for _ in 0..50 {
            left = pids_in_uts(&self.uts);
            if left.is_empty() {
                break;
            }
            for &p in &left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut m) = self.munged.take() {
            m.stop(Duration::from_secs(5));
        }
        let removed = if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).map_err(LabError::io(&self.dir))
        } else {
            Ok(())
        };
        if !left.is_empty() {
            return Err(LabError::Command {
                command: "stopping Slurm".into(),
                stderr: format!("processes {left:?} would not die"),
            });
        }
        removed
    }
}

impl Drop for Slurm<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("lab slurm teardown: {e}");
        }
    }
}

/// `sh -c` in node `netns` (and in the mount namespace of `mounts_of`, a pid, or a private
/// new one), in a fresh UTS namespace named `host`, optionally bind-mounting `bind.0` over
/// `bind.1` first, then `exec`ing `exec` (a shell command line).
fn in_node_uts(
    netns: &str,
    mounts_of: Option<u32>,
    host: &str,
    bind: Option<(PathBuf, PathBuf)>,
    exec: &str,
) -> Command {
    let mut c = crate::cgroup::nsenter(netns);
    c.arg(format!("--net=/run/netns/{netns}"));
    if let Some(pid) = mounts_of {
        c.arg(format!("--mount=/proc/{pid}/ns/mnt"));
    }
    c.args(["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--uts"]);
    if mounts_of.is_none() {
        c.args(["--mount", "--propagation", "private"]);
    }
    let mut script = format!("hostname {host} && ");
    if let Some((from, to)) = bind {
        script.push_str(&format!(
            "mount --bind '{}' '{}' && ",
            from.display(),
            to.display()
        ));
    }
    script.push_str("exec ");
    script.push_str(exec);
    c.args(["--", "sh", "-c", &script]);
    c
}

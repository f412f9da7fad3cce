//! Faults injected into a running [`Lab`], for failure tests: crash a node's daemon
//! (SIGKILL) and start it again, stop it (SIGSTOP: alive but silent) and let it continue,
//! pull a node's cable (its switch port down) and plug it back; plus a push left running
//! in the background while that happens, and what a node's daemon reports and mounts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use teesfs_node::sys::mountinfo::Mount;

use crate::cluster::{Lab, PushOptions};
use crate::error::{LabError, Result};
use crate::proc::NodeProc;
use crate::report::PushReport;
use crate::{check_interrupt, sh};

/// The FUSE mounts among `mounts` (a daemon's mount table) that are a node's own: under
/// `node_dir`, the node's directory in the lab, which holds its mount root. A daemon's mount
/// namespace begins as a copy of the host's, so it also lists every FUSE mount the host had
/// (a developer's sshfs, another teesfs mount, another lab's nodes); none of those is the
/// node's, and counting them failed the soak's "every mount gone" on such a machine.
pub fn own_fuse_mounts(mounts: Vec<Mount>, node_dir: &Path) -> Vec<PathBuf> {
    mounts
        .into_iter()
        .filter(|m| m.fs_type.starts_with("fuse") && m.mount_point.starts_with(node_dir))
        .map(|m| m.mount_point)
        .collect()
}

/// A `teesfs push` running in the background; killed if dropped before it ends.
#[derive(Debug)]
pub struct PushInFlight {
    proc: NodeProc,
    report: PathBuf,
    log: PathBuf,
}

/// How a background push ended.
#[derive(Debug, Clone)]
pub struct PushEnd {
    /// Whether `teesfs push` exited 0 (it does not when any node failed).
    pub success: bool,
    /// Its report.
    pub report: PushReport,
    /// Its output.
    pub log: PathBuf,
}

impl PushInFlight {
    /// Waits up to `timeout` for the push to exit and reads its report.
    pub fn wait(mut self, timeout: Duration) -> Result<PushEnd> {
        let deadline = Instant::now() + timeout;
        let success = loop {
            check_interrupt()?;
            if let Some(ok) = self.proc.try_exit() {
                break ok;
            }
            if Instant::now() > deadline {
                return Err(LabError::Timeout(format!(
                    "teesfs push still running after {} s (log {})",
                    timeout.as_secs(),
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !self.report.exists() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            return Err(LabError::Command {
                command: format!("teesfs push (log {})", self.log.display()),
                stderr: text.lines().rev().take(12).collect::<Vec<_>>().join("\n"),
            });
        }
        Ok(PushEnd {
            success,
            report: crate::report::load(&self.report)?,
            log: self.log.clone(),
        })
    }
}

impl Lab {
    /// `f` of `host`'s running daemon.
    fn with_daemon<T>(&self, host: &str, f: impl FnOnce(&mut NodeProc) -> T) -> Result<T> {
        self.daemons()
            .iter_mut()
            .find(|d| d.host == host && d.pid().is_some())
            .map(f)
            .ok_or_else(|| LabError::Daemon {
                host: host.into(),
                reason: "not running".into(),
                log: self.work().join(host).join("daemon.log"),
            })
    }

    fn signal_daemon(&self, host: &str, sig: Signal) -> Result<()> {
        if self.with_daemon(host, |d| d.signal(sig))? {
            Ok(())
        } else {
            Err(LabError::Daemon {
                host: host.into(),
                reason: format!("cannot send {sig}"),
                log: self.work().join(host).join("daemon.log"),
            })
        }
    }

    /// Kills `host`'s daemon with SIGKILL (a crash: no unmount, no goodbye). Its private
    /// mount namespace, and so its FUSE mounts, die with it. [`Lab::restart_daemon`]
    /// brings it back.
    pub fn kill_daemon(&self, host: &str) -> Result<()> {
        self.with_daemon(host, NodeProc::kill)
    }

    /// Stops `host`'s daemon with SIGSTOP: its sockets stay open, nothing answers.
    pub fn pause_daemon(&self, host: &str) -> Result<()> {
        self.signal_daemon(host, Signal::SIGSTOP)
    }

    /// Lets a paused daemon continue (SIGCONT).
    pub fn resume_daemon(&self, host: &str) -> Result<()> {
        self.signal_daemon(host, Signal::SIGCONT)
    }

    fn switch_port(&self, host: &str, iface: &str) -> Result<String> {
        let node = self
            .layout()
            .node(host)
            .ok_or_else(|| LabError::Shape(format!("no node {host}")))?;
        node.ifaces
            .iter()
            .find(|i| i.name == iface)
            .map(|i| i.port.clone())
            .ok_or_else(|| LabError::Shape(format!("{host} has no {iface}")))
    }

    /// Pulls the cable of `host`'s `iface`: its port on the lab switch goes down, so
    /// nothing passes either way, while the node keeps its addresses and routes. For a
    /// proxy's `eth0` this cuts its whole group off.
    pub fn link_down(&self, host: &str, iface: &str) -> Result<()> {
        let port = self.switch_port(host, iface)?;
        sh::ip_in(&self.layout().switch_netns, &["link", "set", &port, "down"]).map(drop)
    }

    /// Plugs the cable back in (undoes [`Lab::link_down`]).
    pub fn link_up(&self, host: &str, iface: &str) -> Result<()> {
        let port = self.switch_port(host, iface)?;
        sh::ip_in(&self.layout().switch_netns, &["link", "set", &port, "up"]).map(drop)
    }

    /// `teesfs status --format json` of `host`'s daemon.
    pub fn status(&self, host: &str) -> Result<teesfs_node::control::Status> {
        let sock = self.work().join(host).join("sock");
        let out = self.run_teesfs(&[
            "status",
            "--all",
            "--format",
            "json",
            "--control",
            &sock.display().to_string(),
        ])?;
        serde_json::from_str(&out).map_err(|e| LabError::Parse {
            what: format!("status of {host}"),
            detail: e.to_string(),
        })
    }

    /// The FUSE mounts of `host` in the mount namespace of its daemon: those under the
    /// node's own directory (its mount root, state and copies), see [`own_fuse_mounts`].
    pub fn fuse_mounts(&self, host: &str) -> Result<Vec<PathBuf>> {
        let pid = self.with_daemon(host, |d| d.pid().unwrap_or(0))?;
        let path = PathBuf::from(format!("/proc/{pid}/mountinfo"));
        let mounts = teesfs_node::sys::mountinfo::read(Some(pid)).map_err(LabError::io(&path))?;
        Ok(own_fuse_mounts(mounts, &self.work().join(host)))
    }

    /// Starts `teesfs push` on the root node and returns at once; the push is measured by
    /// nothing but its report.
    pub fn push_background(&self, o: &PushOptions) -> Result<PushInFlight> {
        let root = self
            .layout()
            .node(&o.root)
            .ok_or_else(|| LabError::Shape(format!("no node {}", o.root)))?
            .clone();
        let (mut cmd, report, log) = self.push_command(o, &root)?;
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: "nsenter".into(),
            source,
        })?;
        Ok(PushInFlight {
            proc: NodeProc::new(&root.host, log.clone(), child),
            report,
            log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: `lab_soak::a_short_soak_leaves_nothing_behind` failed ("every mount gone:
    /// left 16") on a machine with other FUSE mounts: the host's mounts propagate into the
    /// daemons' namespaces and were counted. Only the node's own count.
    #[test]
    fn fuse_mounts_elsewhere_on_the_host_are_not_a_nodes_own() {
        let table = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:40 / /home/dev/remote rw,nosuid,nodev - fuse.sshfs dev@host:/srv rw,user_id=1000
41 22 0:41 / /tmp/other/jobs/00000000000004d2 ro,nosuid,nodev - fuse.teesfs teesfs ro
42 22 0:42 / /tmp/lab-x/n02/jobs/00000000000004d2 ro,nosuid,nodev - fuse.teesfs teesfs ro
43 22 0:43 / /tmp/lab-x/n01/jobs/00000000000004d2 ro,nosuid,nodev - fuse.teesfs teesfs ro
44 22 0:44 / /tmp/lab-x/n01/state rw - tmpfs tmpfs rw
45 22 0:45 / /tmp/lab-x/n010/jobs/1 ro - fuse.teesfs teesfs ro
";
        let mounts = teesfs_node::sys::mountinfo::parse(table);
        assert_eq!(
            own_fuse_mounts(mounts, Path::new("/tmp/lab-x/n01")),
            vec![PathBuf::from("/tmp/lab-x/n01/jobs/00000000000004d2")]
        );
    }
}

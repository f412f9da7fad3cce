//! Faults injected into a running [`Lab`], for failure tests: crash a node's daemon
//! (SIGKILL) and start it again, stop it (SIGSTOP: alive but silent) and let it continue,
//! pull a node's cable (its switch port down) and plug it back; plus a push left running
//! in the background while that happens, and what a node's daemon reports and mounts.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cluster::{Lab, PushOptions};
use crate::error::{LabError, Result};
use crate::proc::NodeProc;
use crate::report::PushReport;
use crate::{check_interrupt, sh};

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
    pub fn status(&self, host: &str) -> Result<teesfs::node::control::Status> {
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

    /// This lab's FUSE mounts in the mount namespace of `host`'s daemon.
    pub fn fuse_mounts(&self, host: &str) -> Result<Vec<PathBuf>> {
        let pid = self.with_daemon(host, |d| d.pid().unwrap_or(0))?;
        let path = PathBuf::from(format!("/proc/{pid}/mountinfo"));
        let mounts = teesfs::sys::mountinfo::read(Some(pid)).map_err(LabError::io(&path))?;
        Ok(mounts
            .into_iter()
            // The daemon's mount namespace began as a copy of the host's: FUSE mounts
            // made on the host by anything else are not the node's.
            .filter(|m| m.fs_type.starts_with("fuse") && m.mount_point.starts_with(self.work()))
            .map(|m| m.mount_point)
            .collect())
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

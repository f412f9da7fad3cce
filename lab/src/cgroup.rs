//! The scale model on the system: one CPU cgroup per lab node with the quota
//! [`ScaleModel`] chose, and every process started in that node's network namespace
//! (its daemon, its applications, its slurmd and through it the job steps, a push run on
//! the login node) placed in it before it runs, so a node's work competes only with itself.
//!
//! The cgroup of a node is named after its network namespace
//! (`<cpu hierarchy>/teesfs-lab/<netns>`), so whatever enters a node through
//! [`nsenter`] joins it, with no table to pass around; in a pooled lab the directory does
//! not exist and nothing is joined. cgroup v1's `cpu` controller (`cpu.cfs_quota_us`) is
//! used where it is mounted, v2's `cpu.max` otherwise. [`NodeCgroups`] removes its
//! directories when dropped, killing what is left in them first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{LabError, Result};
use crate::layout::{Layout, Role};
use crate::scale::ScaleModel;

/// The directory, under the CPU hierarchy, that holds every lab's node cgroups.
pub const PARENT: &str = "teesfs-lab";

/// Which cgroup interface carries the `cpu` controller.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hierarchy {
    /// cgroup v1: a hierarchy of its own with `cpu.cfs_period_us`/`cpu.cfs_quota_us`.
    V1(PathBuf),
    /// cgroup v2: the unified hierarchy with `cpu.max`.
    V2(PathBuf),
}

impl Hierarchy {
    fn root(&self) -> &Path {
        match self {
            Hierarchy::V1(p) | Hierarchy::V2(p) => p,
        }
    }
}

/// The hierarchy with the `cpu` controller on this machine, if any.
fn hierarchy() -> Option<&'static Hierarchy> {
    static FOUND: OnceLock<Option<Hierarchy>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let v1 = Path::new("/sys/fs/cgroup/cpu");
            if v1.join("cpu.cfs_quota_us").exists() {
                return Some(Hierarchy::V1(v1.to_path_buf()));
            }
            let v2 = Path::new("/sys/fs/cgroup");
            let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
            controllers
                .split_whitespace()
                .any(|c| c == "cpu")
                .then(|| Hierarchy::V2(v2.to_path_buf()))
        })
        .as_ref()
}

/// The cgroup directory of the node in network namespace `netns`.
pub fn dir_of(netns: &str) -> Option<PathBuf> {
    hierarchy().map(|h| h.root().join(PARENT).join(netns))
}

/// `nsenter` for a process in node `netns`: when the node has a cgroup, a shell first
/// moves itself into it and then execs `nsenter`, so the process and all it starts run
/// under the node's quota from their first instruction (and keep the shell's pid).
/// The caller adds `nsenter`'s arguments.
pub fn nsenter(netns: &str) -> Command {
    match dir_of(netns).filter(|d| d.is_dir()) {
        Some(dir) => {
            let mut c = Command::new("sh");
            c.args(join_then_exec(&dir)).arg("nsenter");
            c
        }
        None => Command::new("nsenter"),
    }
}

/// What a node's applications' cgroup is called after the node's
/// ([`crate::scale::AppQuota::Own`]).
const APPS_SUFFIX: &str = "-apps";

/// The key of `host`'s applications' cgroup among [`NodeCgroups`]'s: not a host name.
fn apps_key(host: &str) -> String {
    format!("{host}{APPS_SUFFIX}")
}

/// `sh`'s arguments that move the shell into the cgroup `dir` and then exec the program
/// and arguments that follow them, which thus run under that cgroup from their first
/// instruction (and keep the shell's pid).
pub fn join_then_exec(dir: &Path) -> [&std::ffi::OsStr; 3] {
    [
        "-c".as_ref(),
        r#"echo $$ > "$0/cgroup.procs" && exec "$@""#.as_ref(),
        dir.as_os_str(),
    ]
}

/// Throttling counters of one node's cgroup (`cpu.stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Throttling {
    /// Periods in which the node wanted CPU.
    pub periods: u64,
    /// Periods in which it ran out of quota.
    pub throttled: u64,
    /// Time it spent throttled, nanoseconds.
    pub throttled_ns: u64,
}

impl Throttling {
    fn parse(text: &str) -> Self {
        let mut t = Self::default();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse().ok())) else {
                continue;
            };
            match k {
                "nr_periods" => t.periods = v,
                "nr_throttled" => t.throttled = v,
                "throttled_time" => t.throttled_ns = v,
                "throttled_usec" => t.throttled_ns = v * 1_000,
                _ => {}
            }
        }
        t
    }
}

/// The node cgroups of one lab, removed when dropped.
#[derive(Debug)]
pub struct NodeCgroups {
    dirs: Vec<(String, PathBuf)>,
}

impl NodeCgroups {
    /// Makes a cgroup for every node of `layout` (compute nodes, login, storage) with the
    /// quota of `model`, and, where the model gives applications a quota of their own
    /// ([`crate::scale::AppQuota::Own`]), one more per compute node for them.
    pub fn create(layout: &Layout, model: &ScaleModel) -> Result<Self> {
        let h = hierarchy().ok_or_else(|| {
            LabError::Shape(
                "the scale model needs the cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 \
                 with cpu in cgroup.controllers); mount it, or run the lab with --node-cpu pooled"
                    .into(),
            )
        })?;
        let parent = h.root().join(PARENT);
        mkdir(&parent)?;
        if let Hierarchy::V2(root) = h {
            write(&root.join("cgroup.subtree_control"), "+cpu")?;
            write(&parent.join("cgroup.subtree_control"), "+cpu")?;
        }
        let mut made = Self { dirs: Vec::new() };
        for node in &layout.nodes {
            let cores = match node.role {
                Role::Login | Role::Controller => model.login_cpu,
                Role::Storage => model.storage_cpu,
                Role::Proxy | Role::Slave => model.node_cpu,
            };
            let mut names = vec![(node.host.clone(), node.netns.clone(), cores)];
            if model.app_cpu > 0.0 && matches!(node.role, Role::Proxy | Role::Slave) {
                let name = format!("{}{APPS_SUFFIX}", node.netns);
                names.push((apps_key(&node.host), name, model.app_cpu));
            }
            for (key, name, cores) in names {
                let (period, quota) = (model.period_us, model.quota_us(cores));
                let dir = parent.join(name);
                mkdir(&dir)?;
                made.dirs.push((key, dir.clone()));
                match h {
                    Hierarchy::V1(_) => {
                        write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
                        write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    }
                    Hierarchy::V2(_) => write(&dir.join("cpu.max"), &format!("{quota} {period}"))?,
                }
            }
        }
        Ok(made)
    }

    /// The cgroup of `host`'s applications, under [`crate::scale::AppQuota::Own`].
    pub fn apps_dir(&self, host: &str) -> Option<&Path> {
        let key = apps_key(host);
        self.dirs
            .iter()
            .find(|(h, _)| *h == key)
            .map(|(_, d)| d.as_path())
    }

    /// The throttling counters of `host`'s cgroup so far.
    pub fn throttling(&self, host: &str) -> Option<Throttling> {
        let dir = &self.dirs.iter().find(|(h, _)| h == host)?.1;
        let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
        Some(Throttling::parse(&text))
    }

    /// Seconds the cgroups of `hosts` have spent throttled so far, summed: differences
    /// tell how long the model's CPU quotas held those nodes back during a step.
    pub fn throttled_s<'a>(&self, hosts: impl IntoIterator<Item = &'a str>) -> f64 {
        hosts
            .into_iter()
            .filter_map(|h| self.throttling(h))
            .map(|t| t.throttled_ns as f64 / 1e9)
            .sum()
    }

    /// The pids in `host`'s cgroup.
    pub fn pids(&self, host: &str) -> Vec<u32> {
        self.dirs
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, d)| pids_in(d))
            .unwrap_or_default()
    }
}

impl Drop for NodeCgroups {
    fn drop(&mut self) {
        for (_, dir) in &self.dirs {
            remove(dir);
        }
    }
}

fn pids_in(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills what is left in `dir` and removes it. The kernel takes a moment to let a killed
/// process leave its cgroup, so this polls `cgroup.procs` for a short while.
fn remove(dir: &Path) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = pids_in(dir);
        for &pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if (pids.is_empty() && std::fs::remove_dir(dir).is_ok()) || !dir.exists() {
            return;
        }
        if Instant::now() > until {
            tracing::warn!("could not remove the lab cgroup {}", dir.display());
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes every lab cgroup left by a killed run (for `teesfs lab clean`): those whose
/// network namespace is gone or listed in `namespaces`. Returns the ones removed.
pub fn clean(namespaces: &[String]) -> Vec<PathBuf> {
    let Some(h) = hierarchy() else {
        return Vec::new();
    };
    let parent = h.root().join(PARENT);
    let Ok(rd) = std::fs::read_dir(&parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // A node's applications' cgroup goes with the node's namespace.
        let ns = name.strip_suffix(APPS_SUFFIX).unwrap_or(&name).to_string();
        let gone = !Path::new("/run/netns").join(&ns).exists();
        if e.path().is_dir() && (gone || namespaces.contains(&ns)) {
            remove(&e.path());
            if !e.path().exists() {
                removed.push(e.path());
            }
        }
    }
    removed
}

fn mkdir(dir: &Path) -> Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(LabError::io(dir)(e)),
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(LabError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_reads_v1_and_v2_counters() {
        let v1 = Throttling::parse("nr_periods 10\nnr_throttled 4\nthrottled_time 7000\n");
        assert_eq!(
            v1,
            Throttling {
                periods: 10,
                throttled: 4,
                throttled_ns: 7000
            }
        );
        let v2 =
            Throttling::parse("usage_usec 5\nnr_periods 3\nnr_throttled 1\nthrottled_usec 2\n");
        assert_eq!(v2.throttled_ns, 2000);
        assert_eq!(v2.periods, 3);
    }
}

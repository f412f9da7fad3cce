//! An emulated cluster on one Linux machine, for tests, benchmarks and `teesfs lab`.
//!
//! Layers, bottom up:
//! - [`layout`]: the lab's shape as pure data (namespaces, links, addresses, routes, caps);
//! - [`net`]: builds that shape with `ip` and `tc`, reads kernel byte counters, tears down;
//! - [`proc`]: processes inside a node's network namespace and a private mount namespace;
//! - [`cluster`]: a [`cluster::Lab`]: the network plus a real `teesfs daemon` per node,
//!   publishing and pushing as the login node, running programs from a node's mount;
//! - [`report`]: the push report as `teesfs push --report` writes it, read back and drawn
//!   with the node library's picture (`teesfs_node::report`);
//! - [`demo`]: push urgent-first and start an application on every node as it mounts;
//! - [`bench`]: the same job by each method, with ratios;
//! - [`launch`]: one application started on every node by each launch method, with ratios;
//! - [`sweep`] and [`plot`]: simulated pushes at scale (`teesfs sim`), their table, CSV and
//!   plots;
//! - [`slurm`]: real Slurm (munge, slurmctld, one slurmd per node) in a lab, and `sbcast`;
//! - [`torrent`]: the BitTorrent baseline (a tracker, `mktorrent`, `aria2c` per node);
//! - [`image`]: the image launch's baselines (registry pull, sbcast+unsquash, squashfuse);
//! - [`fault`]: faults injected into a running lab (daemon crash, stop, link down) and
//!   pushes left running while they happen.
//!
//! Root is required. Every resource carries a unique `tlab…` prefix and is removed on drop,
//! on error, on panic and on Ctrl-C (see [`catch_signals`]); [`clean`] removes what a
//! killed run left. This crate never touches the host's own network namespace or mounts.

pub mod bench;
pub mod cgroup;
pub mod cluster;
pub mod demo;
pub mod error;
pub mod fault;
pub mod host;
pub mod image;
pub mod launch;
pub mod layout;
pub mod mounts;
pub mod net;
pub mod plot;
pub mod proc;
pub mod report;
pub mod scale;
mod sh;
pub mod slurm;
pub mod soak;
pub mod sweep;
pub mod torrent;
pub mod traffic;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use cluster::{Lab, LabOptions, PushOptions, PushRun};
pub use error::{LabError, Result};
pub use layout::{JUMBO_MTU, LabSpec, Layout, Rates};
pub use slurm::Slurm;

/// Fails with [`LabError::NotRoot`] unless running as root.
pub fn require_root() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

fn flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Turns SIGINT and SIGTERM into a flag the lab's waits check, so a Ctrl-C unwinds through
/// the Drop guards instead of killing the process with the lab still up. Call once, early,
/// from a command-line program (tests do not need it).
pub fn catch_signals() -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag().clone()).map_err(|e| LabError::Io {
            path: "signal handler".into(),
            source: e,
        })?;
    }
    Ok(())
}

/// Errors with [`LabError::Interrupted`] once a caught signal has arrived.
pub fn check_interrupt() -> Result<()> {
    if flag().load(Ordering::Relaxed) {
        Err(LabError::Interrupted)
    } else {
        Ok(())
    }
}

/// What [`clean`] removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Processes killed.
    pub processes: usize,
    /// Work directories removed.
    pub dirs: Vec<std::path::PathBuf>,
    /// Node CPU cgroups of the scale model removed.
    pub cgroups: Vec<std::path::PathBuf>,
    /// Lab users (`<prefix>u`, [`slurm::site`]) removed.
    pub users: Vec<String>,
}

/// Removes every lab resource on this machine: kills processes in lab namespaces, deletes
/// the namespaces (and with them every lab link and bridge), removes lab work directories
/// and their mounts (the nodes' tmpfs stores) from TMPDIR, `/tmp`, `/dev/shm` and
/// `/var/tmp`, and those with a mount left anywhere (a lab run with another TMPDIR). Meant
/// for leftovers of a run that was killed; running labs are destroyed too.
pub fn clean() -> Result<Cleaned> {
    require_root()?;
    let mut done = Cleaned::default();
    let namespaces = net::lab_namespaces()?;
    for ns in &namespaces {
        for pid in net::namespace_pids(ns)? {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            done.processes += 1;
        }
    }
    if done.processes > 0 {
        // Let the kernel reap them before their namespaces go.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    for ns in namespaces {
        sh::run("ip", &["netns", "del", &ns])?;
        done.namespaces.push(ns);
    }
    done.cgroups = cgroup::clean(&done.namespaces);
    done.users = slurm::site::remove_lab_users();
    // A lab's work directory is in the TMPDIR it ran with, which may not be this one's.
    let mut tmps = vec![std::env::temp_dir()];
    for d in ["/tmp", "/dev/shm", "/var/tmp"].map(std::path::PathBuf::from) {
        if !tmps.contains(&d) {
            tmps.push(d);
        }
    }
    let mut dirs = mounts::lab_dirs_mounted();
    for rd in tmps.iter().filter_map(|t| std::fs::read_dir(t).ok()) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(layout::PREFIX_ROOT) && e.path().join(cluster::MARKER).exists() {
                dirs.push(e.path());
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        mounts::detach_mounts_under(&dir);
        std::fs::remove_dir_all(&dir).map_err(LabError::io(&dir))?;
        done.dirs.push(dir);
    }
    Ok(done)
}

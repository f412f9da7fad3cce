//! Real Slurm inside a lab: one `munged` with a generated key, `slurmctld` in the login
//! node's network namespace (or, as a site runs it, on the lab's own `ctl` host: [`site`])
//! and one `slurmd` per compute node namespace, all driven by a
//! generated `slurm.conf` that names the lab's nodes and addresses.
//!
//! How the daemons are placed:
//! - every daemon is entered into its node with `nsenter --net` only, so it keeps the
//!   host's cgroups (`ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`, no
//!   cgroup plugin), and gets a parent-death signal so it cannot outlive the lab process;
//! - `slurmctld` and each `slurmd` get their own UTS namespace whose host name is the node
//!   name (`srun hostname` answers `n01`, ...); the guard finds every process Slurm started
//!   (slurmstepd, job tasks) by that namespace when it cleans up;
//! - each `slurmd` runs in the mount namespace of that node's `teesfs daemon`, so jobs see
//!   the node's FUSE mounts, and there a per-node directory is bind-mounted over one common
//!   path, [`Slurm::local_dir`]: the node-local disk `sbcast` writes to
//!   ([`Slurm::node_local`] is the same directory seen from the host).
//!
//! Clients (`srun`, `sbatch`, `sbcast`, ...) run in the login node's namespace with
//! `SLURM_CONF` pointing at the generated file: [`Slurm::client`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::check_interrupt;
use crate::cluster::Lab;
use crate::error::{LabError, Result};
use crate::proc::NodeProc;

mod conf;
mod daemons;
pub mod site;

pub use conf::{SlurmScripts, controller_host, slurm_conf};
use daemons::pids_in_uts;

/// Port `slurmctld` listens on (in the login node's namespace).
pub const SLURMCTLD_PORT: u16 = 6817;
/// Port every `slurmd` listens on (each in its own node's namespace).
pub const SLURMD_PORT: u16 = 6818;

/// The programs a lab Slurm needs, with the Debian package providing each.
pub const PROGRAMS: [(&str, &str); 7] = [
    ("munged", "munge"),
    ("slurmctld", "slurmctld"),
    ("slurmd", "slurmd"),
    ("srun", "slurm-client"),
    ("sbatch", "slurm-client"),
    ("sbcast", "slurm-client"),
    ("sinfo", "slurm-client"),
];

/// How long daemons get to come up and client commands to finish by default.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether every program Slurm needs is installed; the first one missing otherwise.
pub fn available() -> Result<()> {
    for (prog, package) in PROGRAMS {
        if which(prog).is_none() {
            return Err(LabError::Missing {
                program: prog.into(),
                package: package.into(),
            });
        }
    }
    Ok(())
}

/// The full path of `prog` on `PATH` (plus the sbin directories, where the daemons live).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// A Slurm job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u32);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Slurm running in a lab. Dropping it cancels every job, stops every `slurmd`,
/// `slurmstepd`, job task, `slurmctld` and `munged` it started and removes its files;
/// [`Slurm::down`] does the same and reports what it could not stop.
#[derive(Debug)]
pub struct Slurm<'a> {
    lab: &'a Lab,
    dir: PathBuf,
    conf: PathBuf,
    hosts: Vec<String>,
    scripts: SlurmScripts,
    munged: Option<NodeProc>,
    ctld: Option<NodeProc>,
    slurmds: Vec<NodeProc>,
    /// UTS namespaces of slurmctld and every slurmd: whatever runs in them is Slurm's.
    uts: Vec<String>,
}

impl Lab {
    /// Starts munge, `slurmctld` on the login node and a `slurmd` on every compute node,
    /// and waits until every node is idle. Needs the Debian packages `munge`,
    /// `slurmctld`, `slurmd` and `slurm-client` (`scripts/deps.sh` installs them).
    pub fn start_slurm(&self) -> Result<Slurm<'_>> {
        self.start_slurm_with(SlurmScripts::default())
    }

    /// Like [`Lab::start_slurm`], with `slurm.conf` naming `scripts`, which slurmctld and
    /// slurmd then run themselves, as on a site.
    pub fn start_slurm_with(&self, scripts: SlurmScripts) -> Result<Slurm<'_>> {
        available()?;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = self
            .work()
            .join(format!("slurm{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        let mut s = Slurm {
            lab: self,
            conf: dir.join("slurm.conf"),
            dir,
            hosts: self.layout().compute().map(|n| n.host.clone()).collect(),
            scripts,
            munged: None,
            ctld: None,
            slurmds: Vec::new(),
            uts: Vec::new(),
        };
        s.start()?;
        Ok(s)
    }
}

fn log_file(p: &Path) -> Result<std::fs::File> {
    std::fs::File::create(p).map_err(LabError::io(p))
}

/// Runs `cmd` to completion within `timeout`, output collected through files in `dir`
/// (pipes would need reader threads), and the exit checked.
fn run_timeout(cmd: &mut Command, what: &str, dir: &Path, timeout: Duration) -> Result<Output> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let out_p = dir.join(format!("cmd{n}.out"));
    let err_p = dir.join(format!("cmd{n}.err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log_file(&out_p)?)
        .stderr(log_file(&err_p)?)
        .spawn()
        .map_err(|source| LabError::Spawn {
            program: what.split(' ').next().unwrap_or(what).into(),
            source,
        })?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(LabError::io(&out_p))? {
            break s;
        }
        if Instant::now() > deadline || check_interrupt().is_err() {
            let _ = child.kill();
            let _ = child.wait();
            check_interrupt()?;
            return Err(LabError::Timeout(format!("`{what}`")));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = std::fs::read(&out_p).unwrap_or_default();
    let stderr = std::fs::read(&err_p).unwrap_or_default();
    let _ = std::fs::remove_file(&out_p);
    let _ = std::fs::remove_file(&err_p);
    if !status.success() {
        return Err(LabError::Command {
            command: what.into(),
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        });
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

impl Slurm<'_> {
    /// munged's socket (`munge -S`, `unmunge -S`): one munged serves the lab's hosts, all
    /// on one machine, with one key.
    pub fn munge_socket(&self) -> PathBuf {
        self.dir.join("munge").join("munge.socket")
    }

    /// The generated `slurm.conf` (clients need `SLURM_CONF` set to it).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// Slurm's directory (state, spool, logs) inside the lab's work directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Slurm node names (the lab's compute hosts), hostlist order.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The node-local directory as every node sees it (one path, a different directory on
    /// each node); `sbcast` destinations go here.
    pub fn local_dir(&self) -> PathBuf {
        self.dir.join("local")
    }

    /// Node `host`'s local directory seen from the host (to check what a node holds).
    pub fn node_local(&self, host: &str) -> PathBuf {
        self.dir.join("nodes").join(host).join("local")
    }

    /// A client command (`srun`, `sbatch`, `sbcast`, `scontrol`, ...) run on the login
    /// node: its network namespace, `SLURM_CONF` set, killed if the lab process dies.
    pub fn client(&self, program: &str) -> Command {
        let login = self
            .lab
            .layout()
            .node("login")
            .map(|n| n.netns.clone())
            .unwrap_or_default();
        let mut c = crate::proc::in_net(&login, program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Runs a client command to completion (at most `timeout`); its stdout on success.
    pub fn run(&self, program: &str, args: &[&str], timeout: Duration) -> Result<String> {
        let what = format!("{program} {}", args.join(" "));
        let out = run_timeout(self.client(program).args(args), &what, &self.dir, timeout)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits a batch job holding every node (`sbatch -N <all> --wrap 'sleep ...'`) and
    /// waits until it runs, so `sbcast` and `srun --jobid` can use the allocation.
    pub fn allocate(&self) -> Result<JobId> {
        self.allocate_with(&[])
    }

    /// Like [`Slurm::allocate`] with `extra` `sbatch` options (e.g. `--comment=...`); it
    /// returns once the job runs, so after a `PrologSlurmctld` succeeded.
    pub fn allocate_with(&self, extra: &[&str]) -> Result<JobId> {
        let n = self.hosts.len().to_string();
        let mut args = vec![
            "-N",
            &n,
            "--exclusive",
            "--parsable",
            "-J",
            "lab-alloc",
            "-o",
            "/dev/null",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--wrap", "exec sleep 1000000"]);
        let out = self.run("sbatch", &args, START_TIMEOUT)?;
        let id = parsable_job_id(&out)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            check_interrupt()?;
            let state = self.run(
                "squeue",
                &["-h", "-j", &id.to_string(), "-o", "%T"],
                START_TIMEOUT,
            )?;
            match state.trim() {
                "RUNNING" => return Ok(id),
                "PENDING" | "CONFIGURING" | "" if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                s => {
                    return Err(LabError::Timeout(format!(
                        "job {id} over all nodes (state {s:?})"
                    )));
                }
            }
        }
    }

    /// `sbatch --parsable ARGS` run in `cwd` (relative paths in ARGS are relative to it), as
    /// `user` (uid, gid) when given (root otherwise); the job id. The user's `HOME`, `USER`
    /// and `LOGNAME` are theirs, as in their login shell (sbatch passes them to the job).
    pub fn submit(&self, cwd: &Path, args: &[&str], user: Option<(u32, u32)>) -> Result<JobId> {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        let what = format!("sbatch {}", all.join(" "));
        let mut cmd = match user {
            Some((uid, gid)) => {
                let mut c = self.client("setpriv");
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={gid}"),
                    "--clear-groups".into(),
                    "--".into(),
                    "sbatch".into(),
                ]);
                let entry = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid));
                if let Ok(Some(u)) = entry {
                    c.env("HOME", &u.dir)
                        .env("USER", &u.name)
                        .env("LOGNAME", &u.name);
                }
                c
            }
            None => self.client("sbatch"),
        };
        cmd.args(&all).current_dir(cwd);
        let out = run_timeout(&mut cmd, &what, &self.dir, START_TIMEOUT)?;
        parsable_job_id(&String::from_utf8_lossy(&out.stdout))
    }

    /// The state Slurm gives job `id` (`RUNNING`, `COMPLETED`, `FAILED`, ...).
    pub fn job_state(&self, id: JobId) -> Result<String> {
        let out = self.run(
            "scontrol",
            &["show", "job", "-o", &id.to_string()],
            START_TIMEOUT,
        )?;
        out.split_whitespace()
            .find_map(|f| f.strip_prefix("JobState="))
            .map(str::to_string)
            .ok_or_else(|| LabError::Parse {
                what: format!("scontrol show job {id}"),
                detail: out.trim().to_string(),
            })
    }

    /// Waits until job `id` has ended (its epilog included) and returns its final state.
    pub fn wait_ended(&self, id: JobId, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            check_interrupt()?;
            let state = self.job_state(id)?;
            let ended = !matches!(
                state.as_str(),
                "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING" | "SUSPENDED"
            );
            if ended {
                return Ok(state);
            }
            if Instant::now() > deadline {
                return Err(LabError::Timeout(format!("job {id} ({state})")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Cancels job `id`.
    pub fn cancel(&self, id: JobId) -> Result<()> {
        self.run("scancel", &[&id.to_string()], START_TIMEOUT)
            .map(drop)
    }

    /// `sbcast -j <id> -f src <local_dir>/<name>`: copies `src` to every node of the job;
    /// returns when every node holds it. Returns the destination path as nodes see it.
    pub fn sbcast(&self, id: JobId, src: &Path, name: &str, extra: &[&str]) -> Result<PathBuf> {
        self.sbcast_within(id, src, name, extra, Duration::from_secs(600))
    }

    /// [`Self::sbcast`], given up as timed out after `limit` (a big file to many nodes over
    /// the scale model's slow links takes longer than the default ten minutes).
    pub fn sbcast_within(
        &self,
        id: JobId,
        src: &Path,
        name: &str,
        extra: &[&str],
        limit: Duration,
    ) -> Result<PathBuf> {
        let dest = self.local_dir().join(name);
        let mut args = vec!["-j".to_string(), id.to_string(), "-f".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(src.display().to_string());
        args.push(dest.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run("sbcast", &args, limit)?;
        Ok(dest)
    }

    /// CPU seconds used so far by every Slurm daemon and process (slurmctld, slurmd,
    /// slurmstepd, tasks, and their waited-for children).
    pub fn cpu_seconds(&self) -> f64 {
        pids_in_uts(&self.uts)
            .into_iter()
            .map(|p| crate::proc::cpu_seconds_with_children(p as u32))
            .sum()
    }

    /// Every process of this Slurm right now: munged, slurmctld, the slurmds and whatever
    /// they started (slurmstepd, job tasks).
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = pids_in_uts(&self.uts)
            .into_iter()
            .map(|p| p as u32)
            .collect();
        v.extend(self.munged.as_ref().and_then(NodeProc::pid));
        v
    }
}

/// The job id in `sbatch --parsable` output (`id` or `id;cluster`).
fn parsable_job_id(out: &str) -> Result<JobId> {
    out.trim()
        .split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .map(JobId)
        .ok_or_else(|| LabError::Parse {
            what: "sbatch --parsable output".into(),
            detail: format!("{out:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LabSpec, Layout};

    #[test]
    fn conf_names_every_node_and_the_controller() {
        let spec = LabSpec {
            groups: 2,
            group_size: 3,
            ..LabSpec::default()
        };
        let l = Layout::new("tlab0001", &spec).expect("layout");
        let scripts = SlurmScripts {
            prolog_slurmctld: Some("/p/prolog.sh".into()),
            epilog: Some("/p/epilog.sh".into()),
            epilog_slurmctld: Some("/p/epilog-slurmctld.sh".into()),
            slurm_user: None,
            own_controller: false,
            plugstack: vec!["required /p/teesfs_spank.so".into()],
            cred_expire: None,
        };
        let c = slurm_conf(&l, Path::new("/w/slurm0"), Path::new("/w/m.sock"), &scripts);
        assert!(c.contains("SlurmUser=root\n"), "{c}");
        assert!(c.contains("PrologSlurmctld=/p/prolog.sh\n"), "{c}");
        assert!(c.contains("Epilog=/p/epilog.sh\n"), "{c}");
        assert!(
            c.contains("EpilogSlurmctld=/p/epilog-slurmctld.sh\n"),
            "{c}"
        );
        assert!(
            c.contains("PlugStackConfig=/w/slurm0/plugstack.conf\n"),
            "{c}"
        );
        assert!(c.contains("SlurmctldHost=login(10.77.0.1)\n"), "{c}");
        assert!(c.contains("NodeName=n01 NodeAddr=10.77.0.10 "), "{c}");
        assert!(c.contains("NodeName=n05 NodeAddr=10.77.2.2 "), "{c}");
        assert_eq!(c.matches("NodeName=").count(), 6);
        assert!(c.contains("AuthInfo=socket=/w/m.sock\n"));
        assert!(c.contains("SlurmdSpoolDir=/w/slurm0/nodes/%n/spool\n"));
        assert!(c.contains("ProctrackType=proctrack/linuxproc\n"));
        assert!(!c.contains("cgroup"), "no cgroup plugin in namespaces: {c}");
        // As a site runs it: slurmctld on a host of its own.
        let own = SlurmScripts {
            own_controller: true,
            slurm_user: Some("slurm".into()),
            ..scripts
        };
        let c = slurm_conf(&l, Path::new("/w/slurm0"), Path::new("/w/m.sock"), &own);
        assert!(c.contains("SlurmctldHost=ctl(10.77.0.3)\n"), "{c}");
        assert!(c.contains("SlurmUser=slurm\n"), "{c}");
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-teesfs").is_none());
    }
}

//! teesfs's SPANK plugin: a job asks for its layer with `--teesfs=SPEC` (or
//! `#SBATCH --teesfs=SPEC`), and every task of the job starts inside it.
//!
//! Slurm loads the plugin in several places (see spank(7)); it does one thing in each:
//!
//! - **sbatch, salloc, srun (allocator and local contexts)**: the `--teesfs=SPEC` option, or
//!   `TEESFS_SPEC` in the submitting environment, is resolved to an absolute path and read,
//!   as the submitting user (at most [`MAX_SPEC`] bytes); the job control environment gets
//!   the path as `SPANK_TEESFS_SPEC` and the content, hex-encoded, as
//!   `SPANK_TEESFS_SPEC_TEXT`. `PrologSlurmctld` (`prolog-slurmctld.sh`) hands both to the
//!   seeder (or pushes itself), so the controller never reads the user's file; jobs
//!   without it are left alone.
//! - **slurmstepd (remote context), each task, before it drops privileges**: if the node's
//!   daemon has the job mounted (`<mount_root>/<Slurm job id>`), the task enters
//!   the execution environment: the layer over "/", writes to a private tmpfs, the user's
//!   own "/home", "/tmp", "/run", "/dev", "/sys" and "/proc". The mount namespace is built by
//!   `teesfs __task-env` (a separate, single-threaded process) and joined here with
//!   `setns`; when the task ends, the namespace and its writes go with it. Slurm then drops
//!   to the user's uid and execs the command as usual: no wrapper in the command line.
//!   A task of a job that asked for a layer which is not mounted fails with an error saying
//!   so; tasks of other jobs are untouched.
//! - **slurmstepd, the batch script's task**: when an earlier start of the job failed on a
//!   bad node (the prolog drained it and Slurm requeued the job), the job's AdminComment
//!   says so, and the task prints it into the job's stderr ([`restart`]).
//!
//! plugstack.conf: `optional /usr/lib/teesfs/teesfs_spank.so teesfs=PATH mount_root=DIR`
//! (`%h` in `mount_root` is the node's short host name, for several nodes on one host as in
//! teesfs's lab). `optional` so that a plugin Slurm refuses (built for another release) does
//! not stop every job; give at least one argument: with none, Slurm passes a null `argv`,
//! which slurm-spank 0.2 turns into a slice (debug builds abort on it).

// Implementing SPANK's `Plugin` trait is `unsafe` by the crate's design (callbacks run in
// forked children of a threaded daemon); everything here is single-threaded system calls.
#![allow(unsafe_code)]

use std::error::Error as StdError;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use slurm_spank::{Context, LogLevel, Plugin, SpankHandle, SpankOption};

pub mod restart;

/// The symbols Slurm looks up by name: `SPANK_PLUGIN!(b"teesfs", <SLURM_VERSION_NUMBER of the
/// headers>, Teesfs)`, written by build.rs.
#[allow(missing_docs, clippy::all)]
mod symbols {
    use super::{Plugin, Teesfs};
    include!(concat!(env!("OUT_DIR"), "/plugin.rs"));
}

/// The option's name: `--teesfs=SPEC`.
pub const OPTION: &str = "teesfs";
/// The job control variable (Slurm prefixes `SPANK_`) the prolog reads the spec from.
pub const SPEC_VAR: &str = "TEESFS_SPEC";
/// The job control variable (`SPANK_` prefixed by Slurm) carrying the spec's content, hex.
pub const SPEC_TEXT_VAR: &str = "TEESFS_SPEC_TEXT";
/// The largest spec the plugin passes on (the seeder's limit too): 32 KiB.
pub const MAX_SPEC: u64 = 32 * 1024;
/// The hidden `teesfs` subcommand that builds a task's environment.
pub const TASK_ENV_SUBCOMMAND: &str = "__task-env";
/// What `teesfs __task-env` prints once the namespace is ready to join.
pub const READY: &str = "ready";

/// What goes wrong in the plugin; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// An argument in plugstack.conf is not one the plugin knows.
    #[error(
        "plugstack.conf: unknown teesfs plugin argument {0:?} (known: teesfs=PATH, mount_root=DIR)"
    )]
    BadArgument(String),
    /// The spec named by `--teesfs` or `TEESFS_SPEC` cannot be used.
    #[error("--teesfs={spec}: {source}; name a readable manifest.toml")]
    Spec {
        /// The spec as given.
        spec: String,
        /// Why it cannot be used.
        source: std::io::Error,
    },
    /// The spec is larger than a job spec may be.
    #[error(
        "--teesfs={spec}: the file is over {MAX_SPEC} bytes, the most a job spec may be; name \
         a manifest.toml, not the layer itself"
    )]
    SpecTooBig {
        /// The spec as given.
        spec: String,
    },
    /// The job asked for a layer, but this node has none mounted for it.
    #[error(
        "job {job} asked for a teesfs layer (--teesfs) but {dir} is not mounted on this node; \
         is `teesfs daemon` running here, and did the prolog's push reach this node? \
         (see /var/log/teesfs/job-{job}.log on the controller)"
    )]
    NotMounted {
        /// The Slurm job id.
        job: u32,
        /// Where the job's layer should be.
        dir: PathBuf,
    },
    /// `teesfs __task-env` could not build the task's environment.
    #[error("building the task's environment with {teesfs}: {detail}")]
    Helper {
        /// The `teesfs` binary run.
        teesfs: PathBuf,
        /// What it said (its standard error), or why it could not run.
        detail: String,
    },
    /// A Slurm or system call failed.
    #[error("{what}: {detail}")]
    Call {
        /// What was being done.
        what: &'static str,
        /// The error.
        detail: String,
    },
}

/// The plugin's settings, from its arguments in plugstack.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    /// The `teesfs` binary.
    pub teesfs: PathBuf,
    /// Where the node's daemon mounts jobs; `%h` is the short host name.
    pub mount_root: String,
}

impl Default for Conf {
    fn default() -> Self {
        Conf {
            teesfs: PathBuf::from("/usr/bin/teesfs"),
            mount_root: "/run/teesfs/jobs".into(),
        }
    }
}

impl Conf {
    /// Parses plugstack.conf arguments (`key=value`).
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Conf, PluginError> {
        let mut c = Conf::default();
        for a in args {
            match a.split_once('=') {
                Some(("teesfs", v)) if !v.is_empty() => c.teesfs = PathBuf::from(v),
                Some(("mount_root", v)) if !v.is_empty() => c.mount_root = v.to_string(),
                _ => return Err(PluginError::BadArgument(a.to_string())),
            }
        }
        Ok(c)
    }

    /// The directory where the daemon of host `host` mounts Slurm job `job`: named by the
    /// job's number.
    pub fn job_dir(&self, host: &str, job: u32) -> PathBuf {
        PathBuf::from(self.mount_root.replace("%h", host)).join(job.to_string())
    }

    /// Where the job's layer is mounted on host `host`, if it is: [`Self::job_dir`], or
    /// during a rolling upgrade the 16 hex digits a daemon of an earlier release names it by.
    pub fn mounted_dir(&self, host: &str, job: u32) -> Option<PathBuf> {
        let dir = self.job_dir(host, job);
        let earlier = dir.with_file_name(job_hex(job));
        [dir, earlier].into_iter().find(|d| is_mount(d))
    }
}

/// A Slurm job id as earlier releases named the job's directory: 16 hex digits.
pub fn job_hex(job: u32) -> String {
    format!("{:016x}", u64::from(job))
}

/// Whether `dir` has a file system mounted on it (its device differs from its parent's).
pub fn is_mount(dir: &Path) -> bool {
    let (Ok(md), Some(parent)) = (std::fs::metadata(dir), dir.parent()) else {
        return false;
    };
    std::fs::metadata(parent).is_ok_and(|p| p.dev() != md.dev())
}

/// The plugin's state across callbacks in one process.
#[derive(Default)]
pub struct Teesfs {
    conf: Conf,
    /// Why an earlier start of this job failed, printed into the task's stderr
    /// ([`restart`]).
    note: Option<String>,
}

fn call(what: &'static str) -> impl FnOnce(slurm_spank::SpankError) -> PluginError {
    move |e| PluginError::Call {
        what,
        detail: e.to_string(),
    }
}

unsafe impl Plugin for Teesfs {
    fn init(&mut self, spank: &mut SpankHandle<'_>) -> Result<(), Box<dyn StdError>> {
        self.conf = Conf::parse(
            spank
                .plugin_argv()
                .map_err(call("reading plugin arguments"))?,
        )?;
        spank.register_option(
            SpankOption::new(OPTION)
                .takes_value("SPEC")
                .usage("run the job inside the teesfs layer named by SPEC (a manifest.toml)"),
        )?;
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle<'_>) -> Result<(), Box<dyn StdError>> {
        let ctx = spank.context()?;
        if !matches!(ctx, Context::Allocator | Context::Local) {
            return Ok(());
        }
        // srun inside an existing allocation starts a step; the layer was pushed when the
        // job was allocated, and the job control environment is no longer read.
        if ctx == Context::Local && std::env::var_os("SLURM_JOB_ID").is_some() {
            return Ok(());
        }
        let given = spank
            .get_option_value(OPTION)
            .map_err(call("reading --teesfs"))?
            .map(|v| v.into_owned())
            .or_else(|| std::env::var(SPEC_VAR).ok().filter(|s| !s.is_empty()));
        let Some(spec) = given else {
            return Ok(());
        };
        let abs = std::fs::canonicalize(&spec).map_err(|source| PluginError::Spec {
            spec: spec.clone(),
            source,
        })?;
        let text = read_spec(&abs, &spec)?;
        spank
            .job_control_setenv(SPEC_VAR, abs.as_os_str(), true)
            .map_err(call("passing the spec to the prolog"))?;
        spank
            .job_control_setenv(SPEC_TEXT_VAR, hex_of(&text), true)
            .map_err(call("passing the spec's content to the prolog"))?;
        Ok(())
    }

    fn task_init_privileged(
        &mut self,
        spank: &mut SpankHandle<'_>,
    ) -> Result<(), Box<dyn StdError>> {
        if spank.context()? != Context::Remote {
            return Ok(());
        }
        let job = spank.job_id().map_err(call("reading the job id"))?;
        let uid = spank.job_uid().map_err(call("reading the job's uid"))?;
        // The host's name, not the task's $SLURMD_NODENAME: srun passes the submitting
        // environment on, so that may name another node.
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let short = host.split('.').next().unwrap_or_default();
        let Some(dir) = self.conf.mounted_dir(short, job) else {
            if spank.is_option_set(OPTION) {
                let dir = self.conf.job_dir(short, job);
                return Err(PluginError::NotMounted { job, dir }.into());
            }
            return Ok(());
        };
        // The batch script of a job whose earlier start failed: say why, where the user
        // looks (asked here, on the host, before the task enters its layer). Slurm gives
        // the batch step no restart count here, so the job's comment is asked for once per
        // start of every teesfs job, and says nothing for one that never failed.
        if spank.job_stepid().is_ok_and(|s| s == restart::BATCH_STEP) {
            let conf = spank.getenv("SLURM_CONF").ok().flatten();
            self.note = restart::failed_start_note(job, conf);
        }
        let cwd = std::env::current_dir().ok();
        enter(&self.conf.teesfs, &dir, uid)?;
        // The same working directory, now resolved in the environment (home and scratch
        // are the host's own there).
        if cwd.is_none_or(|c| nix::unistd::chdir(&c).is_err()) {
            let _ = nix::unistd::chdir("/");
        }
        spank
            .setenv("TEESFS_JOB", job.to_string(), true)
            .map_err(call("setting TEESFS_JOB"))?;
        slurm_spank::spank_log(
            LogLevel::Debug,
            &format!(
                "teesfs: job {job}: task entered its layer {}",
                dir.display()
            ),
        );
        Ok(())
    }

    /// The task's own stdio is in place here: the note of a failed earlier start goes to its
    /// stderr.
    fn task_init(&mut self, _spank: &mut SpankHandle<'_>) -> Result<(), Box<dyn StdError>> {
        if let Some(note) = self.note.take() {
            eprintln!("{note}");
        }
        Ok(())
    }

    /// No tracing subscriber: the plugin logs through Slurm's own log ([`Self::report_error`]).
    fn setup(&self, _spank: &mut SpankHandle<'_>) -> Result<(), Box<dyn StdError>> {
        Ok(())
    }

    /// Errors go to Slurm's log and, from sbatch, salloc and srun, to the user's terminal.
    fn report_error(&self, error: &dyn StdError) {
        slurm_spank::spank_log(LogLevel::Error, &format!("teesfs: {error}"));
    }
}

/// The spec's content, read as the submitting user; `given` names it in errors.
pub fn read_spec(abs: &Path, given: &str) -> Result<Vec<u8>, PluginError> {
    let spec_err = |source| PluginError::Spec {
        spec: given.to_string(),
        source,
    };
    let mut text = Vec::new();
    std::fs::File::open(abs)
        .and_then(|f| f.take(MAX_SPEC + 1).read_to_end(&mut text))
        .map_err(spec_err)?;
    if text.len() as u64 > MAX_SPEC {
        return Err(PluginError::SpecTooBig {
            spec: given.to_string(),
        });
    }
    Ok(text)
}

/// `bytes` as lowercase hex (the job control environment carries text only).
pub fn hex_of(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Has `teesfs __task-env` build the environment of `layer` for `uid`, joins its mount
/// namespace, and lets the helper exit.
fn enter(teesfs: &Path, layer: &Path, uid: u32) -> Result<(), PluginError> {
    let helper_err = |detail: String| PluginError::Helper {
        teesfs: teesfs.to_path_buf(),
        detail,
    };
    let mut child = Command::new(teesfs)
        .arg(TASK_ENV_SUBCOMMAND)
        .arg(layer)
        .arg(uid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            helper_err(format!(
                "cannot run it: {e} (set teesfs=PATH in plugstack.conf)"
            ))
        })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let joined = if line.trim() == READY {
        std::fs::File::open(format!("/proc/{}/ns/mnt", child.id()))
            .map_err(|e| e.to_string())
            .and_then(|ns| {
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNS)
                    .map_err(|e| format!("joining its mount namespace: {e}"))
            })
    } else {
        Err(String::new())
    };
    // Closing its stdin lets the helper exit; the namespace lives on in this task.
    drop(child.stdin.take());
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let status = child.wait();
    match joined {
        Ok(()) => Ok(()),
        Err(why) => {
            let said = stderr.trim();
            Err(helper_err(match (said.is_empty(), why.is_empty()) {
                (false, _) => said.to_string(),
                (true, false) => why,
                (true, true) => format!("it ended without building it ({status:?})"),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_set_the_binary_and_the_mount_root() {
        assert_eq!(Conf::parse([]).expect("empty"), Conf::default());
        let c = Conf::parse(["teesfs=/opt/t/bin/teesfs", "mount_root=/lab/%h/jobs"]).expect("args");
        assert_eq!(c.teesfs, Path::new("/opt/t/bin/teesfs"));
        assert_eq!(c.job_dir("n07", 42), Path::new("/lab/n07/jobs/42"));
        assert_eq!(
            Conf::default().job_dir("x", 7),
            Path::new("/run/teesfs/jobs/7")
        );
    }

    #[test]
    fn unknown_or_empty_arguments_are_refused_by_name() {
        for bad in ["mountroot=/x", "teesfs=", "verbose"] {
            let e = Conf::parse([bad]).expect_err(bad).to_string();
            assert!(e.contains(bad) && e.contains("plugstack.conf"), "{e}");
        }
    }

    #[test]
    fn job_ids_match_the_prologs_push() {
        assert_eq!(job_hex(1), "0000000000000001");
        assert_eq!(job_hex(u32::MAX), "00000000ffffffff");
        // The daemon names a Slurm job's directory as peertree's JobId shows it.
        for j in [1, 4242, u32::MAX] {
            let shown = peertree::relay::JobId(u64::from(j)).to_string();
            assert_eq!(
                Conf::default().job_dir("x", j).file_name(),
                Some(shown.as_ref())
            );
        }
        // Not mounted anywhere: neither form is taken.
        assert_eq!(Conf::default().mounted_dir("x", 4242), None);
    }

    /// Issue 30 item 1: the plugin hands the spec's content on, read as the user, and a
    /// spec over 32 KiB stops the submission naming the file.
    #[test]
    fn the_spec_is_read_whole_up_to_32_kib_and_passed_as_hex() {
        let d = tempfile::tempdir().expect("tempdir");
        let small = d.path().join("manifest.toml");
        std::fs::write(&small, "[layer]\nindex = \"ab\"\n").expect("spec");
        let text = read_spec(&small, "manifest.toml").expect("small spec");
        assert_eq!(hex_of(&text), hex::encode(&text));
        let edge = d.path().join("edge.toml");
        std::fs::write(&edge, vec![b'#'; MAX_SPEC as usize]).expect("spec");
        assert_eq!(read_spec(&edge, "edge.toml").expect("32 KiB").len(), 32768);
        let big = d.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_SPEC as usize + 1]).expect("spec");
        let e = read_spec(&big, "big.toml")
            .expect_err("too big")
            .to_string();
        assert!(
            e.contains("--teesfs=big.toml") && e.contains("32768"),
            "{e}"
        );
        let e = read_spec(&d.path().join("none"), "none").expect_err("missing");
        assert!(e.to_string().contains("--teesfs=none"), "{e}");
    }

    #[test]
    fn a_plain_directory_is_not_a_mount() {
        let d = std::env::temp_dir();
        assert!(!is_mount(&d.join("teesfs-spank-no-such-dir")));
        assert!(is_mount(Path::new("/proc")));
    }
}

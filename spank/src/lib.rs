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
//!   The node mounts the job in the background, so the job may start a moment before its
//!   mount shows: a task of a job that asked for a layer waits for it ([`mounted`], at most
//!   `mount_wait=` seconds, 30 by default), and fails with an error saying so if it never
//!   comes; tasks of other jobs are untouched.
//! - **An image job** (`--teesfs-image=SPEC`, or `image = true` under `[layer]` in the
//!   spec): the layer is every `srun` task's whole root instead, as with enroot and
//!   pyxis: `teesfs __task-env --image` builds it (only `/proc`, `/dev`, `/sys`, `/tmp`, the
//!   user's home and the site's `[run] image_binds` from the node), asks the node's daemon
//!   (`control=`) for the image's config, and tells the plugin the environment changes
//!   and working directory it sets here (a task whose directory the image lacks moves to
//!   the image's WorkingDir in `task_init`, after slurmstepd's own change of directory);
//!   the task gets `no_new_privs`. The batch script itself stays on the node (it runs
//!   `srun`, which the image need not have). Every step sees `--teesfs-image`; a spec's
//!   `image = true` reaches the steps as `SLURM_SPANK_TEESFS_IMAGE` in the job's
//!   environment ([`IMAGE_JOB_VAR`]), which a bare `srun` sets in its own ([`own_image_env`]).
//! - **slurmstepd, the batch script's task**: when an earlier start of the job failed on a
//!   bad node (the prolog drained it and Slurm requeued the job), the job's AdminComment
//!   says so, and the task prints it into the job's stderr ([`restart`]).
//!
//! plugstack.conf: `optional /usr/lib/teesfs/teesfs_spank.so teesfs=PATH mount_root=DIR
//! control=PATH [mount_wait=SECONDS]` (`%h` in `mount_root` and `control` is the node's
//! short host name, for several nodes on one host as in teesfs's lab). `optional` so that a plugin Slurm refuses (built for another release) does
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

pub mod mounted;
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
/// The image option's name: `--teesfs-image=SPEC`.
pub const IMAGE_OPTION: &str = "teesfs-image";
/// Set to `1` in the job's control environment when the job runs in its layer as an image
/// (sbatch passes it into the job's own environment as `SLURM_SPANK_TEESFS_IMAGE`, which
/// `srun` in the job passes on); `TEESFS_IMAGE=1` in the job's own environment does the
/// same.
pub const IMAGE_VAR: &str = "TEESFS_IMAGE";
/// [`IMAGE_VAR`] as a task's environment has it: Slurm's prefix for the job control
/// environment in a job's own.
pub const IMAGE_JOB_VAR: &str = "SLURM_SPANK_TEESFS_IMAGE";
/// The job control variable (Slurm prefixes `SPANK_`) the prolog reads the spec from.
pub const SPEC_VAR: &str = "TEESFS_SPEC";
/// [`SPEC_VAR`] as a task's environment has it (sbatch and salloc pass the job control
/// environment into the job's): set for every job that asked for a layer, whether by the
/// option or by `TEESFS_SPEC` in the submitting environment.
pub const SPEC_JOB_VAR: &str = "SLURM_SPANK_TEESFS_SPEC";
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
        "plugstack.conf: unknown or bad teesfs plugin argument {0:?} (known: teesfs=PATH, \
         mount_root=DIR, control=PATH, mount_wait=SECONDS, 0 to 3600)"
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
        "job {job} asked for a teesfs layer (--teesfs) but {dir} is not mounted on this node \
         after waiting {waited} s for it; is `teesfs daemon` running here, and did the \
         prolog's push reach this node? (see /var/log/teesfs/job-{job}.log on the controller, \
         and `teesfs status` here)"
    )]
    NotMounted {
        /// The Slurm job id.
        job: u32,
        /// Where the job's layer should be.
        dir: PathBuf,
        /// How long the task waited for it, in seconds.
        waited: u64,
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
    /// The node's daemon's control socket; `%h` is the short host name.
    pub control: String,
    /// How long a task of a teesfs job waits for the job's mount ([`mounted`]).
    pub mount_wait: std::time::Duration,
}

impl Default for Conf {
    fn default() -> Self {
        Conf {
            teesfs: PathBuf::from("/usr/bin/teesfs"),
            mount_root: "/run/teesfs/jobs".into(),
            control: "/run/teesfs/daemon.sock".into(),
            mount_wait: mounted::MOUNT_WAIT,
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
                Some(("control", v)) if !v.is_empty() => c.control = v.to_string(),
                Some(("mount_wait", v)) => {
                    c.mount_wait = mounted::parse_wait(v)
                        .ok_or_else(|| PluginError::BadArgument(a.to_string()))?
                }
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
    /// Where an image task starts when the image lacks its working directory: slurmstepd
    /// changes to that directory after [`Plugin::task_init_privileged`] (to /tmp when it
    /// is not there), so the task moves here in [`Plugin::task_init`], just before its exec.
    start_in: Option<PathBuf>,
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
        spank.register_option(SpankOption::new(IMAGE_OPTION).takes_value("SPEC").usage(
            "run every srun task of the job in the teesfs image named by SPEC (a \
                 manifest.toml): the image is the task's whole root",
        ))?;
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
        let as_image = spank
            .get_option_value(IMAGE_OPTION)
            .map_err(call("reading --teesfs-image"))?
            .map(|v| v.into_owned());
        let given = (as_image.clone())
            .or(spank
                .get_option_value(OPTION)
                .map_err(call("reading --teesfs"))?
                .map(|v| v.into_owned()))
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
        let image = as_image.is_some() || spec_is_image(&String::from_utf8_lossy(&text));
        if image {
            // The job's tasks find it in their environment ([`IMAGE_JOB_VAR`]).
            spank
                .job_control_setenv(IMAGE_VAR, "1", true)
                .map_err(call("marking the job as an image job"))?;
        }
        if let Some((var, value)) = own_image_env(ctx == Context::Local, image) {
            // SAFETY: srun runs its plugins' `init_post_opt` while it is single-threaded,
            // before it asks for the allocation and starts its message threads.
            unsafe { std::env::set_var(var, value) };
        }
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
        let asked = spank.is_option_set(OPTION) || spank.is_option_set(IMAGE_OPTION);
        // `--teesfs-image` reaches every step as an option; a spec's `image = true` only
        // as the job's environment.
        let image = spank.is_option_set(IMAGE_OPTION)
            || [IMAGE_JOB_VAR, IMAGE_VAR]
                .iter()
                .any(|v| spank.getenv(v).ok().flatten().as_deref() == Some("1"));
        // A teesfs job's mount may show a moment after its task starts ([`mounted`]); any
        // other job only looks (it may still have been pushed, by its comment).
        let spec = spank.getenv(SPEC_JOB_VAR).ok().flatten();
        let ours = asked || image || spec.is_some_and(|s| !s.is_empty());
        let wait = if ours {
            self.conf.mount_wait
        } else {
            std::time::Duration::ZERO
        };
        let Some((dir, waited)) = self.conf.wait_mounted(short, job, wait) else {
            if ours {
                let dir = self.conf.job_dir(short, job);
                let waited = wait.as_secs();
                return Err(PluginError::NotMounted { job, dir, waited }.into());
            }
            return Ok(());
        };
        if !waited.is_zero() {
            slurm_spank::spank_log(
                LogLevel::Info,
                &format!(
                    "teesfs: job {job}: the task waited {:.3} s for the layer's mount {}",
                    waited.as_secs_f64(),
                    dir.display()
                ),
            );
        }
        // The batch script of a job whose earlier start failed: say why, where the user
        // looks (asked here, on the host, before the task enters its layer). Slurm gives
        // the batch step no restart count here, so the job's comment is asked for once per
        // start of every teesfs job, and says nothing for one that never failed.
        if spank.job_stepid().is_ok_and(|s| s == restart::BATCH_STEP) {
            let conf = spank.getenv("SLURM_CONF").ok().flatten();
            self.note = restart::failed_start_note(job, conf);
        }
        let batch = spank.job_stepid().is_ok_and(|s| s == restart::BATCH_STEP);
        let cwd = std::env::current_dir().ok();
        if image && batch {
            // The batch script runs `srun`, which lives on the node, not in the image.
            spank
                .setenv("TEESFS_JOB", job.to_string(), true)
                .map_err(call("setting TEESFS_JOB"))?;
            return Ok(());
        }
        let control = self.conf.control.replace("%h", short);
        let said = enter(
            &self.conf.teesfs,
            &dir,
            uid,
            image.then_some(control.as_str()),
        )?;
        let workdir = if image {
            image_env(spank, &said)?
        } else {
            None
        };
        // The same working directory, now resolved in the environment (home and scratch
        // are the host's own there); in an image, else the image's WorkingDir, else "/".
        if cwd.is_none_or(|c| nix::unistd::chdir(&c).is_err()) {
            let start = (workdir.filter(|w| nix::unistd::chdir(w).is_ok()))
                .unwrap_or_else(|| PathBuf::from("/"));
            let _ = nix::unistd::chdir(&start);
            self.start_in = image.then_some(start);
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
    /// stderr. An image task whose working directory the image lacks moves to where it
    /// starts (slurmstepd has just put it in /tmp).
    fn task_init(&mut self, spank: &mut SpankHandle<'_>) -> Result<(), Box<dyn StdError>> {
        if let Some(note) = self.note.take() {
            eprintln!("{note}");
        }
        if let Some(dir) = self.start_in.take()
            && nix::unistd::chdir(&dir).is_ok()
        {
            spank
                .setenv("PWD", dir.as_os_str(), true)
                .map_err(call("setting PWD"))?;
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

/// What the submitting command sets in its own environment for the job's tasks to know they
/// run in an image (`local`: a bare `srun`, which makes its own allocation). sbatch hands
/// the job control environment ([`IMAGE_VAR`]) to the job's environment and salloc to its
/// command's, as [`IMAGE_JOB_VAR`]; a bare srun hands its tasks only its own environment,
/// so it sets [`IMAGE_JOB_VAR`] there itself (a `SLURM_` variable: it reaches the tasks
/// under `--export=NONE` too). Without it, `srun --teesfs=SPEC` with `image = true` in the
/// spec would run its tasks with the layer over the node's "/".
pub fn own_image_env(local: bool, image: bool) -> Option<(&'static str, &'static str)> {
    (local && image).then_some((IMAGE_JOB_VAR, "1"))
}

/// Whether a job spec's `[layer]` table says `image = true` (the prolog's `prefetch`
/// checks the whole spec; this only looks for that one key, written that way).
pub fn spec_is_image(text: &str) -> bool {
    let mut in_layer = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            in_layer = line.trim_matches(|c| c == '[' || c == ']').trim() == "layer";
        } else if in_layer
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == "image"
        {
            return v.trim() == "true";
        }
    }
    false
}

/// Applies what `teesfs __task-env --image` said (`env-set`, `env-default`, `env-unset`,
/// `workdir`; names and values hex) to the task's environment; returns the workdir.
fn image_env(spank: &mut SpankHandle<'_>, said: &[String]) -> Result<Option<PathBuf>, PluginError> {
    use std::os::unix::ffi::OsStringExt;
    let os = |h: &str| std::ffi::OsString::from_vec(unhex(h));
    let mut workdir = None;
    for line in said {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["env-set", k, v] => spank
                .setenv(os(k), os(v), true)
                .map_err(call("setting the image's environment"))?,
            ["env-default", k, v] => match spank.setenv(os(k), os(v), false) {
                Ok(()) | Err(slurm_spank::SpankError::EnvExists(_)) => {}
                Err(e) => return Err(call("setting the image's environment")(e)),
            },
            ["env-unset", k] => spank
                .unsetenv(os(k))
                .map_err(call("dropping the host's locale"))?,
            ["workdir", w] => workdir = Some(PathBuf::from(os(w))),
            _ => {}
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| PluginError::Call {
        what: "setting no_new_privs",
        detail: e.to_string(),
    })?;
    Ok(workdir)
}

/// The bytes of lowercase or uppercase hex (bad digits are dropped).
fn unhex(h: &str) -> Vec<u8> {
    h.as_bytes()
        .chunks(2)
        .filter_map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
        })
        .collect()
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

/// Has `teesfs __task-env` build the environment of `layer` for `uid` (with `image`, the
/// daemon's control socket: the layer as the task's whole root), joins its mount
/// namespace, and lets the helper exit. Returns the lines the helper said before `ready`.
fn enter(
    teesfs: &Path,
    layer: &Path,
    uid: u32,
    image: Option<&str>,
) -> Result<Vec<String>, PluginError> {
    let helper_err = |detail: String| PluginError::Helper {
        teesfs: teesfs.to_path_buf(),
        detail,
    };
    let mut helper = Command::new(teesfs);
    helper.arg(TASK_ENV_SUBCOMMAND);
    if let Some(control) = image {
        helper.arg("--image").arg(control);
    }
    let mut child = helper
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
    let mut said = Vec::new();
    if let Some(out) = child.stdout.take() {
        let mut out = BufReader::new(out);
        while out.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != READY {
            said.push(std::mem::take(&mut line).trim().to_string());
        }
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
        Ok(()) => Ok(said),
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
        assert_eq!(c.mount_wait, mounted::MOUNT_WAIT);
        assert_eq!(c.job_dir("n07", 42), Path::new("/lab/n07/jobs/42"));
        let c = Conf::parse(["mount_wait=5"]).expect("mount_wait");
        assert_eq!(c.mount_wait, std::time::Duration::from_secs(5));
        assert_eq!(
            Conf::default().job_dir("x", 7),
            Path::new("/run/teesfs/jobs/7")
        );
    }

    #[test]
    fn unknown_or_empty_arguments_are_refused_by_name() {
        for bad in [
            "mountroot=/x",
            "teesfs=",
            "verbose",
            "mount_wait=30s",
            "mount_wait=",
        ] {
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
    fn an_image_spec_is_told_by_its_layer_table() {
        assert!(spec_is_image(
            "[layer]\nindex = \"ab\"\nimage = true # an image\n"
        ));
        assert!(!spec_is_image("[layer]\nindex = \"ab\"\nimage = false\n"));
        assert!(!spec_is_image(
            "[layer]\nindex = \"ab\"\n[nodes]\nimage = true\n"
        ));
        assert!(!spec_is_image("[layer]\nindex = \"ab\"\n"));
        assert_eq!(unhex(&hex_of(b"PATH=/a b")), b"PATH=/a b");
        let c = Conf::parse(["control=/lab/%h/sock"]).expect("control");
        assert_eq!(c.control, "/lab/%h/sock");
        assert_eq!(Conf::default().control, "/run/teesfs/daemon.sock");
    }

    #[test]
    fn a_bare_srun_marks_its_own_environment_for_an_image_job_only() {
        assert_eq!(
            own_image_env(true, true),
            Some(("SLURM_SPANK_TEESFS_IMAGE", "1"))
        );
        // sbatch and salloc hand the job control environment on; a layer job is left alone.
        assert_eq!(own_image_env(false, true), None);
        assert_eq!(own_image_env(true, false), None);
    }

    #[test]
    fn a_plain_directory_is_not_a_mount() {
        let d = std::env::temp_dir();
        assert!(!is_mount(&d.join("teesfs-spank-no-such-dir")));
        assert!(is_mount(Path::new("/proc")));
    }
}

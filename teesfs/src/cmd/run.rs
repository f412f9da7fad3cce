//! `teesfs run`: run a command (or a shell) in the execution environment, the node's "/"
//! with the job's layer on top and a private place for writes.
//!
//! On a compute node the layer is the job's mount and writes land in a tmpfs that goes away
//! with the command. On the login node, `--upper DIR` gives the user their own persistent
//! layer instead: what they install or delete anywhere lands in DIR, which they publish.
//! The mechanics are in `runenv`.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use peertree::relay::JobId;
use runenv::{self, Outcome, RunSpec, Upper};

use super::util;

/// Arguments of `teesfs run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs run -- python3 app.py             # on a node: the only job's layer over /
  teesfs run --job 1234 -- ./bin/solver    # Slurm job 1234's layer
  srun -N 128 teesfs run -- ./app          # under Slurm: the job pushed for $SLURM_JOB_ID
  teesfs run --upper ~/layer               # login node: a shell whose changes land in ~/layer

Inside, every top-level directory of / on the root file system is an overlay (the layer
over the host's directory, writes to a tmpfs or to --upper); mount points such as /home,
/scratch, /tmp, /run, /dev and /sys are the host's own, and /proc is new. The command runs as
you, with no_new_privs, in new user, mount and PID namespaces; setuid bits give nothing.
When it ends, every mount of the environment goes away and its exit status (or signal) is
passed on.")]
pub struct RunArgs {
    /// The job whose layer to use: the Slurm job id in decimal (e.g. 1234), the name
    /// of its directory under --mount-root (16 hex digits outside Slurm), or hex with 0x (default: $TEESFS_JOB,
    /// then the job pushed for $SLURM_JOB_ID, then the only job mounted on this node).
    #[arg(long, value_name = "ID", conflicts_with = "layer")]
    pub(super) job: Option<JobId>,
    /// Use this directory as the read-only layer instead of a job (e.g. a `teesfs mount`).
    #[arg(long, value_name = "DIR")]
    pub(super) layer: Option<PathBuf>,
    /// Keep writes in DIR (the user's own layer on the login node) instead of a tmpfs.
    /// Without --job or --layer this is the login node's private environment.
    #[arg(long, value_name = "DIR")]
    pub(super) upper: Option<PathBuf>,
    /// Also bind this top-level directory from the host as it is (repeatable), like
    /// /home and /tmp are (e.g. a site's /scratch on the root file system).
    #[arg(long, value_name = "DIR")]
    pub(super) bind: Vec<PathBuf>,
    /// Where the daemon mounts jobs.
    #[arg(long, value_name = "DIR", default_value = "/run/teesfs/jobs")]
    pub(super) mount_root: PathBuf,
    /// How long to wait for the job's layer to be mounted (the index may still be on its
    /// way when the job is launched in advance).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(super) wait: Duration,
    /// Run in an image: the layer is the whole root, not a layer over this node's "/"
    /// (only /proc, /dev, /sys, /tmp, your home and the site's paths come from the node).
    /// Alone, the job's layer (or --layer DIR) is the image; with TAG|ID, that index of
    /// --store is mounted for the run (FUSE: root, or fusermount3).
    #[arg(long, value_name = "TAG|ID", num_args = 0..=1, default_missing_value = "",
          require_equals = false, conflicts_with = "upper")]
    pub(super) image: Option<String>,
    /// The store of --image TAG|ID (default: the site's [store] path).
    #[arg(long, value_name = "DIR")]
    pub(super) store: Option<PathBuf>,
    /// Trusted publisher public key for --image TAG|ID (repeatable).
    #[arg(long, value_name = "FILE.pub")]
    pub(super) trust: Vec<PathBuf>,
    /// Host paths bound into an image at the same place, where this node has them
    /// (repeatable; default: the site's [run] image_binds).
    #[arg(long, value_name = "PATH", default_values = manifest::site::run::DEFAULT_IMAGE_BINDS)]
    pub(super) image_bind: Vec<PathBuf>,
    /// The daemon's control socket, asked for a job's image config (--image).
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    pub(super) control: PathBuf,
    /// The image's config as JSON, from the `teesfs run --image TAG|ID` that mounted it.
    #[arg(long, value_name = "JSON", hide = true, requires = "image")]
    pub(super) image_config: Option<String>,
    /// The command and its arguments (default: $SHELL; in an image, its Entrypoint and Cmd).
    #[arg(last = true, value_name = "CMD")]
    pub(super) command: Vec<OsString>,
}

/// Runs `teesfs run`; returns the process exit code (a signal is re-raised first).
pub fn run(args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    if args.image.as_deref().is_some_and(|i| !i.is_empty()) {
        return super::run_image::from_store(&args);
    }
    let layer = match (&args.layer, &args.job, &args.upper) {
        (Some(l), _, _) => Some(l.clone()),
        (None, None, Some(_)) => None,
        (None, job, _) => Some(find_job(&args.mount_root, *job, args.wait)?),
    };
    if let Some(l) = &layer {
        readable(l, args.layer.is_none())?;
    }
    if let Some(u) = &args.upper {
        std::fs::create_dir_all(u)
            .with_context(|| format!("creating the upper directory {}", u.display()))?;
    }
    let mut spec = RunSpec {
        layer,
        upper: args.upper.clone().map_or(Upper::Tmpfs, Upper::Dir),
        bind: args.bind.clone(),
        command: args.command.clone(),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        image: None,
    };
    if args.image.is_some() {
        super::run_image::make_image_spec(&args, &mut spec)?;
    } else if spec.command.is_empty() {
        spec.command = vec![std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into())];
    }
    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    exit_code(runenv::enter(&spec, &exe)?)
}

/// `teesfs run`'s exit code for how the command ended (a signal is re-raised first).
pub(super) fn exit_code(outcome: Outcome) -> anyhow::Result<std::process::ExitCode> {
    match outcome {
        Outcome::Exited(c) => Ok(std::process::ExitCode::from(c.clamp(0, 255) as u8)),
        Outcome::Signaled(s) => {
            // Die of the same signal, so the shell or srun sees what the command saw.
            if let Ok(sig) = nix::sys::signal::Signal::try_from(s) {
                let _ = signal_hook::low_level::emulate_default_handler(sig as i32);
            }
            Ok(std::process::ExitCode::from((128 + s).clamp(0, 255) as u8))
        }
    }
}

/// Refuses a layer the caller cannot read, naming it (the job, for a job's mount) and its
/// owner: the environment would leave out what it cannot read, and the command ran on the
/// bare host with exit 0 (issue 29).
pub(super) fn readable(layer: &Path, is_job: bool) -> anyhow::Result<()> {
    use nix::unistd::{AccessFlags, Uid, User, access};
    let Err(e) = access(layer, AccessFlags::R_OK | AccessFlags::X_OK) else {
        return Ok(());
    };
    if e == nix::errno::Errno::ENOENT || e == nix::errno::Errno::ENOTDIR {
        // Not there at all: the environment says so, naming the path.
        return Ok(());
    }
    let owner = match std::fs::metadata(layer).map(|m| m.uid()) {
        Ok(uid) => match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(u)) => format!("uid {uid} ({})", u.name),
            _ => format!("uid {uid}"),
        },
        Err(_) => "an unknown owner".into(),
    };
    let me = Uid::current();
    let what = match layer.file_name().filter(|_| is_job) {
        Some(job) => {
            let job = job.to_string_lossy();
            let shown = job
                .parse::<JobId>()
                .map_or(job.to_string(), |j| j.to_string());
            format!("job {shown}'s layer ({})", layer.display())
        }
        None => format!("layer {}", layer.display()),
    };
    bail!(
        "{what} belongs to {owner} and you (uid {me}) cannot read it ({e}): nothing was run; \
         run it as its owner, or name your own job with --job (a job is its owner's: `push \
         --owner UID`)"
    )
}

/// Finds the mount of `job` (or the default job) under `root`, waiting up to `wait` for it.
pub(super) fn find_job(root: &Path, job: Option<JobId>, wait: Duration) -> anyhow::Result<PathBuf> {
    let wanted = match job {
        Some(j) => Some(j),
        None => util::job_from_env()?,
    };
    let deadline = Instant::now() + wait;
    let mut watch =
        teesfs_node::sys::mountinfo::Watch::new().context("watching the mount table")?;
    loop {
        let mounted = mounted_jobs(root);
        let found: Vec<&PathBuf> = match &wanted {
            // By its number, or by the 16 hex digits a daemon of an earlier release used.
            Some(w) => mounted
                .iter()
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.parse::<JobId>().ok())
                        == Some(*w)
                })
                .collect(),
            None => mounted.iter().collect(),
        };
        match (found.as_slice(), &wanted) {
            ([one], _) => return Ok((*one).clone()),
            ([], _) if Instant::now() < deadline => {}
            ([], Some(w)) => bail!(
                "no job {w} is mounted under {} after {} (is `teesfs daemon` running and \
                 was the job pushed to this node? Under Slurm the prolog pushes it with \
                 --job-id $SLURM_JOB_ID; otherwise pass --job ID. `teesfs status` lists jobs)",
                root.display(),
                util::duration(wait)
            ),
            ([], None) => bail!(
                "no job is mounted under {} after {}; pass --job ID, or --upper DIR for the \
                 login node's private environment",
                root.display(),
                util::duration(wait)
            ),
            (many, _) => bail!(
                "{} jobs match under {}: {}; pass --job ID",
                many.len(),
                root.display(),
                many.iter()
                    .filter_map(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
        // Woken by the next mount (or unmount) in this namespace.
        watch.changed(deadline.saturating_duration_since(Instant::now()))?;
    }
}

/// Job directories under `root` that have a file system mounted on them.
fn mounted_jobs(root: &Path) -> Vec<PathBuf> {
    let Ok(root_md) = std::fs::metadata(root) else {
        return Vec::new();
    };
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.dev() != root_md.dev()))
        .collect();
    out.sort();
    out
}

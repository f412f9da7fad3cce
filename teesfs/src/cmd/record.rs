//! `teesfs record`: run a command once against a published layer and write down, in order,
//! the files it opened and the names it probed that exist nowhere. The list is the urgent
//! set (and its push order) for `teesfs publish --urgent-list`.
//!
//! With `--image` the command runs as `teesfs run --image` runs it, the index as the whole
//! root with the image's Env and WorkingDir (by default its Entrypoint and Cmd), so the list
//! names what the image's application needs, by its paths in the image.
//!
//! With `--from-job` nothing runs: the list is learned from a job that ran on this node, as
//! the node's daemon recorded it (`record JOB` on its control socket). Both write the same
//! format (`seeder::learned::UrgentList`), which `teesfs learn` writes too when it merges
//! every node's record of a job.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use anyhow::{Context, bail};
use peertree::relay::JobId;
use runenv::image::ImageConfig;
use teesfs_node::control::{JobRecord, Request};
use teesfs_node::fs::mount::{MountConfig, mount};
use teesfs_node::fs::record::Recorder;
use teesfs_node::source::StoreSource;

use super::util;

/// Arguments of `teesfs record`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Example (login node):
  teesfs publish ~/layer --store /shared/teesfs            # prints the index id
  teesfs record --store /shared/teesfs --index 3a6a -o urgent.list -- python3 /opt/app/main.py
  teesfs publish ~/layer --store /shared/teesfs --urgent-list urgent.list

The command runs in `teesfs run`'s environment with the published layer (mounted with FUSE,
which needs root or fusermount3) over \"/\", so it sees exactly what a compute node will.

Example (an image: what its Entrypoint and Cmd open, or a command given after --):
  teesfs publish --image ./app-oci --store /shared/teesfs --tag app     # prints the index id
  teesfs record --image app --store /shared/teesfs -o urgent.list
  teesfs record --image app --store /shared/teesfs -o urgent.list -- python3 -c 'import torch'
  teesfs publish --image ./app-oci --store /shared/teesfs --tag app --urgent-list urgent.list

With --image the command runs as `teesfs run --image` runs it: the image is the whole root,
with its Env and WorkingDir; the list names paths in the image, and every name looked up in
vain (the node's \"/\" is not under an image).

Example (learned from a job, without a recording run; in the job script, after the
application has started, or in an interactive allocation):
  srun -N1 teesfs record --from-job $SLURM_JOB_ID -o urgent.list
  teesfs publish ~/layer --store /shared/teesfs --urgent-list urgent.list

Every node's daemon records each job it mounts: the files opened through the mount until the
node held the whole layer, and any file a read of which had to wait for data to arrive, in
the order of first use (at most 1,000,000 entries); for a job run in an image
(`--teesfs-image`, `run --image`), by their paths in the image. --from-job writes that
record of this node; the daemon keeps the records of its last 16 released jobs, so it can be
asked after the job too.

Usually nothing needs doing by hand: `teesfs learn` (the Slurm EpilogSlurmctld) merges the
records of all the job's nodes when it ends and keeps the result beside the index, and the
next push of that index sends those files first without a republish (see `teesfs learn
--help`).

The list holds one layer path per line in the order of first use; lines starting with `#`
are comments and lines starting with `!` are names the command looked up that exist neither
in the layer nor on this node (a node answers those from its index, without the network).")]
pub struct RecordArgs {
    /// The store holding the index and chunks.
    #[arg(long, value_name = "DIR", required_unless_present = "from_job")]
    store: Option<PathBuf>,
    /// A tag, or at least 4 hex characters of the index id (`teesfs inspect --store DIR`
    /// lists both).
    #[arg(long, value_name = "TAG|ID", required_unless_present_any = ["from_job", "image"])]
    index: Option<String>,
    /// Record in this index as an image (`teesfs publish --image`), as `teesfs run --image`
    /// runs it: the index is the whole root, with the image's Env and WorkingDir; without a
    /// command, its Entrypoint and Cmd run.
    #[arg(long, value_name = "TAG|ID", conflicts_with_all = ["index", "from_job"])]
    image: Option<String>,
    /// Trusted publisher public key (repeatable); see `teesfs verify --help`.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// Learn the list from a job this node ran instead of running a command. ID is the
    /// Slurm job id in decimal as pushed (`push --job`; default: $TEESFS_JOB, else
    /// $SLURM_JOB_ID), 16 hex digits (a push outside Slurm, as `teesfs status` shows it),
    /// or hex with 0x.
    #[arg(
        long,
        value_name = "ID",
        conflicts_with_all = ["store", "index", "trust", "command"]
    )]
    from_job: Option<Option<String>>,
    /// The daemon's control socket (with --from-job).
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
    /// Where to write the list.
    #[arg(short, long, value_name = "FILE", default_value = "urgent.list")]
    output: PathBuf,
    /// The command to record and its arguments (with --image, by default the image's
    /// Entrypoint and Cmd).
    #[arg(last = true, required_unless_present_any = ["from_job", "image"], value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `teesfs record`.
pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    if let Some(job) = &args.from_job {
        return from_job(&args, job.as_deref());
    }
    let at = util::IndexArgs {
        store: args.store.clone().context("--store is required")?,
        index: (args.image.clone().or_else(|| args.index.clone()))
            .context("--index is required")?,
        trust: args.trust.clone(),
    };
    let (store, id, index) = at.open().context("refusing to record against it")?;
    let image = (args.image.is_some())
        .then(|| image_config(&index, &at.index, &args.command))
        .transpose()?;
    let shown = shown_command(&args.command, image.as_ref());
    let paths_of = index.clone();
    let mountpoint = tempfile::Builder::new()
        .prefix("teesfs-record.")
        .tempdir()
        .context("creating a mountpoint")?;
    let recorder = Arc::new(Recorder::default());
    let cfg = MountConfig {
        recorder: Some(recorder.clone()),
        ..MountConfig::default()
    };
    let source = Arc::new(StoreSource::new(store, &index));
    let mounted = mount(index, id, source, mountpoint.path(), &cfg)
        .context("mounting the layer to record against (needs root, or fusermount3 from fuse3)")?;

    let status = run_in(mountpoint.path(), &args.command, image.as_ref());
    let recording = recorder.recording(&paths_of);
    mounted.unmount()?;
    let status = status?;

    let absent: Vec<&[u8]> = match &image {
        // Nothing of the node's "/" is under an image: a name it lacks is missing.
        Some(_) => recording.absent.iter().map(Vec::as_slice).collect(),
        None => exist_nowhere(recording.absent.iter().map(Vec::as_slice)),
    };
    let header = [
        match &image {
            Some(_) => format!("teesfs record of `{shown}` in image index {id}"),
            None => format!("teesfs record of `{shown}` against index {id}"),
        },
        format!(
            "{} files in order of first use, then `!` names looked up that exist nowhere",
            recording.opened.len()
        ),
    ];
    let opened = recording.opened.iter().map(Vec::as_slice);
    write_list(&args.output, header.to_vec(), opened, &absent)
        .with_context(|| format!("writing {}", args.output.display()))?;
    outln!(
        "recorded {} files opened ({}) and {} names that exist nowhere -> {}",
        recording.opened.len(),
        util::bytes(recording.opened_bytes),
        absent.len(),
        args.output.display()
    );
    if !status.success() {
        bail!(
            "the command failed ({status}); the list holds what it used until then. Record a \
             run that succeeds"
        );
    }
    let what = if image.is_some() {
        "--image SOURCE"
    } else {
        "LAYER"
    };
    outln!(
        "next: teesfs publish {what} --store {} --urgent-list {}",
        at.store.display(),
        args.output.display()
    );
    Ok(())
}

/// The image config of `index` (named `name`) for `record --image`; an error saying what
/// to do when there is nothing to run: no `command`, and no Entrypoint or Cmd.
fn image_config(
    index: &manifest::Index,
    name: &str,
    command: &[OsString],
) -> anyhow::Result<ImageConfig> {
    let config = super::run_image::index_config(index);
    if runenv::image::command(command, &config).is_some() {
        return Ok(config);
    }
    let what = match index.image {
        None => {
            "is not an image (it was published from a directory, not with `teesfs publish \
                 --image`), so it has no Entrypoint or Cmd"
        }
        Some(_) => "is an image without an Entrypoint or Cmd",
    };
    bail!(
        "index {name} {what}: give the command to record, `teesfs record --image {name} \
         --store DIR -- CMD`"
    )
}

/// The command as the list's header shows it: `command`, else the image's Entrypoint and
/// Cmd.
fn shown_command(command: &[OsString], image: Option<&ImageConfig>) -> String {
    let cmd = match image {
        Some(c) => runenv::image::command(command, c).unwrap_or_default(),
        None => command.to_vec(),
    };
    let words: Vec<String> = cmd
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    words.join(" ")
}

/// Runs `command` under `teesfs run` with the layer mounted at `mnt`: over "/", or as the
/// image of `config` (its Entrypoint and Cmd when `command` is empty), as `teesfs run
/// --image` does.
fn run_in(
    mnt: &Path,
    command: &[OsString],
    image: Option<&ImageConfig>,
) -> anyhow::Result<ExitStatus> {
    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    let mut child = std::process::Command::new(exe);
    child.arg("run");
    if let Some(config) = image {
        let json = super::run_image::config_to_json(config).to_string();
        child.arg("--image").arg("--image-config").arg(json);
    }
    child.arg("--layer").arg(mnt);
    if !command.is_empty() {
        child.arg("--").args(command);
    }
    child.status().context("starting `teesfs run`")
}

/// `teesfs record --from-job`: writes the list from the record this node's daemon kept of
/// the job.
fn from_job(args: &RecordArgs, job: Option<&str>) -> anyhow::Result<()> {
    let id = match job {
        Some(j) => j.parse::<JobId>()?,
        None => util::job_from_env()?.context(
            "which job? pass --from-job ID or set $SLURM_JOB_ID (`teesfs status` lists the jobs)",
        )?,
    };
    // From the environment, the job as Slurm numbers it.
    let text = job.map_or_else(|| id.0.to_string(), |j| j.trim().to_owned());
    let line =
        super::status::ask(&args.control, &Request::Record(id).to_string()).with_context(|| {
            format!(
                "asking this node's daemon for the record of job {text} (run this on a node \
                 of the job, e.g. with `srun -N1`)"
            )
        })?;
    let rec: JobRecord = serde_json::from_str(&line)
        .context("the daemon's answer is not a job record (is it another teesfs version?)")?;
    check_recorded(&rec, &text)?;
    let absent = exist_nowhere(rec.absent.iter().map(|p| p.0.as_slice()));
    // The job as `teesfs status` shows it, and as the user named it if that is another job.
    let named = match text.trim().parse::<peertree::relay::JobId>() {
        Ok(j) if j.to_string() == rec.job => rec.job.clone(),
        _ => format!("{} ({})", text.trim(), rec.job),
    };
    let header = [
        format!(
            "teesfs record learned from job {named} on {}: {} files ({}) in order of first use",
            rec.host,
            rec.files.len(),
            util::bytes(rec.file_bytes)
        ),
        format!(
            "index {}; then `!` names the job looked up that exist nowhere",
            rec.index
        ),
    ];
    let files = rec.files.iter().map(|p| p.0.as_slice());
    write_list(&args.output, header.to_vec(), files, &absent)
        .with_context(|| format!("writing {}", args.output.display()))?;
    outln!(
        "learned {} files ({}) and {} names that exist nowhere from job {text} on {} -> {}",
        rec.files.len(),
        util::bytes(rec.file_bytes),
        absent.len(),
        rec.host,
        args.output.display()
    );
    if !rec.whole_layer {
        outln!(
            "note: {} does not hold the whole layer yet; what the job opens from now on is \
             still recorded (ask again later for a fuller list)",
            rec.host
        );
    }
    if rec.dropped > 0 {
        tracing::warn!(
            dropped = rec.dropped,
            "the record was full: later files are not in the list"
        );
    }
    outln!(
        "next: teesfs publish LAYER --store DIR --urgent-list {}",
        args.output.display()
    );
    Ok(())
}

/// Refuses a record that holds no file, saying why.
fn check_recorded(rec: &JobRecord, job: &str) -> anyhow::Result<()> {
    let host = &rec.host;
    if !rec.recording {
        bail!(
            "job {job} is not recorded on {host}: its daemon does not mount jobs (relay only), \
             or the job reads its chunks from shared storage"
        );
    }
    if !rec.files.is_empty() {
        return Ok(());
    }
    if !rec.mounted {
        bail!("nothing recorded yet for job {job} on {host}: its layer is not mounted yet");
    }
    bail!(
        "nothing recorded yet for job {job} on {host}: no file was opened through its mount \
         before the whole layer had arrived, and no read had to wait for data. Ask after the \
         application has started and before the job ends"
    )
}

/// The names of `absent` that do not exist on this machine either (the node's own files
/// are on every node already).
fn exist_nowhere<'a>(absent: impl Iterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    absent
        .filter(|p| !Path::new("/").join(std::ffi::OsStr::from_bytes(p)).exists())
        .collect()
}

/// Writes an urgent list: `#` header lines, the files, then the absent names as `!` lines.
fn write_list<'a>(
    output: &Path,
    header: Vec<String>,
    files: impl Iterator<Item = &'a [u8]>,
    absent: &[&[u8]],
) -> anyhow::Result<()> {
    let list = seeder::learned::UrgentList {
        header,
        files: files.map(<[u8]>::to_vec).collect(),
        absent: absent.iter().map(|p| p.to_vec()).collect(),
    };
    let (out, left_out) = list.render();
    if left_out > 0 {
        tracing::warn!(left_out, "names with a newline cannot be listed; left out");
    }
    super::outfile::write(output, &out)
}

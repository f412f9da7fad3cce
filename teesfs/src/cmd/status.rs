//! `teesfs status`: ask a running daemon what it holds and does, or stop one job on it.
//!
//! Every local user may ask; the daemon answers root about everything and other users only
//! about the jobs they own: their `status` lists their own jobs (see
//! `teesfs_node::control`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::Context;
use peertree::relay::JobId;

use teesfs_node::control::{JobStatus, Request, STATUS_VERSION, Status};

use super::util;

/// Arguments of `teesfs status`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs status                      # every job (root), your own jobs (other users)
  teesfs status --job 1234           # Slurm job 1234 (in a job: the default)
  teesfs status --job 1234 --stop    # end it on this node, as `teesfs release` does

Root sees every job; another user sees the jobs pushed for them (`push --owner UID`, the Slurm
prolog's $SLURM_JOB_UID) and nothing of other users' jobs.")]
pub struct StatusArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
    /// What to print: `text`, or `json`: the daemon's answer, `{"version": 1, "host",
    /// "listen", "store_bytes", "store_chunks", "store_budget", "store_pinned", "store_cached",
    /// "store_placed", "cpu_quota_cores", "bulk_yielded_s", "jobs": [JOB]}`, or with a job
    /// JOB alone: `{"version": 1, "job" (a Slurm job id in decimal, else 16 hex digits), "index", "parent", "children",
    /// "have", "chunks", "urgent_s", "all_s", "mountpoint", "finished", "owner", "counters":
    /// {"chunks_in", "bytes_in", "bad_chunks", "chunks_out", "bytes_out", ...}}`; with --stop
    /// `{"version": 1, "stopped": JOB}` (teesfs_node::control::Status and JobStatus).
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
    /// The same as --format json (the old spelling).
    #[arg(long, hide = true)]
    json: bool,
    /// Only this job: the Slurm job id in decimal (e.g. 1234), the 16 hex digits this
    /// command shows for a push outside Slurm, or hex with 0x. Default: $TEESFS_JOB, else $SLURM_JOB_ID (inside a
    /// Slurm job, its own job), else every job you may see.
    #[arg(long, value_name = "ID", conflicts_with = "all")]
    job: Option<JobId>,
    /// Every job you may see, even inside a Slurm job (ignore $SLURM_JOB_ID).
    #[arg(long)]
    all: bool,
    /// Stop the job (--job or $SLURM_JOB_ID) on this node: unmount it and stop relaying it.
    #[arg(long, conflicts_with = "all")]
    stop: bool,
}

/// Sends one request line to the daemon at `control` and returns its reply line, or the
/// daemon's refusal as an error.
pub fn ask(control: &Path, request: &str) -> anyhow::Result<String> {
    let mut s = UnixStream::connect(control).with_context(|| {
        format!(
            "no daemon answers at {} (is `teesfs daemon` running? pass --control)",
            control.display()
        )
    })?;
    s.write_all(format!("{request}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    /// Every reply is an object; a refusal has an `error` field (and nothing else).
    #[derive(serde::Deserialize)]
    struct Refusal {
        error: Option<String>,
    }
    let r: Refusal = serde_json::from_str(&line).context("daemon reply is not JSON")?;
    if let Some(e) = r.error {
        anyhow::bail!("the daemon at {} refused: {e}", control.display());
    }
    Ok(line)
}

/// Runs `teesfs status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let job = match (args.job, args.all) {
        (Some(j), _) => Some(j),
        (None, true) => None,
        (None, false) => util::job_from_env()?,
    };
    let request = match (job, args.stop) {
        (Some(job), true) => Request::Stop(job),
        (Some(job), false) => Request::Job(job),
        (None, true) => anyhow::bail!(
            "which job to stop? pass --job ID (`teesfs status` lists the jobs you may see)"
        ),
        (None, false) => Request::Status,
    };
    let line = ask(&args.control, &request.to_string())?;
    let json = args.json || args.format == util::Format::Json;
    let parse =
        |what: &str| format!("the daemon's answer is not {what} (is it another teesfs version?)");
    match request {
        Request::Stop(job) => {
            let s: Stopped = serde_json::from_str(&line).with_context(|| parse("a stop"))?;
            if s.stopped != job.to_string() {
                anyhow::bail!("asked to stop job {job}, the daemon stopped {}", s.stopped);
            }
            if json {
                return util::print_json(&StoppedDoc {
                    version: STATUS_VERSION,
                    stopped: job.to_string(),
                });
            }
            outln!("stopped job {job}");
        }
        Request::Job(_) | Request::Record(_) => {
            let j: JobStatus = serde_json::from_str(&line).with_context(|| parse("a job"))?;
            if json {
                return util::print_json(&j);
            }
            print_job(&j);
        }
        Request::Status => {
            let st: Status = serde_json::from_str(&line).with_context(|| parse("a status"))?;
            if json {
                return util::print_json(&st);
            }
            print_status(&st);
        }
    }
    Ok(())
}

/// The daemon's answer to `stop JOB`.
#[derive(serde::Deserialize)]
struct Stopped {
    stopped: String,
}

/// What `status --stop --format json` prints.
#[derive(serde::Serialize)]
struct StoppedDoc {
    version: u32,
    stopped: String,
}

/// The daemon's line and every job's.
fn print_status(st: &Status) {
    outln!(
        "{} listening on {}; store {} in {} chunks (budget {}; running jobs pin {}, {} kept from earlier jobs)",
        st.host,
        st.listen,
        util::bytes(st.store_bytes),
        st.store_chunks,
        util::bytes(st.store_budget),
        util::bytes(st.store_pinned),
        util::bytes(st.store_cached)
    );
    if let Some(m) = &st.metrics {
        outln!("metrics at {m}");
    }
    if let Some(q) = st.cpu_quota_cores {
        outln!(
            "CPU quota {q:.3} cores: pushed chunks waited {} so that applications on the mounts got it",
            util::duration(std::time::Duration::from_secs_f64(
                st.bulk_yielded_s.max(0.0)
            ))
        );
    }
    if st.jobs.is_empty() {
        outln!("no jobs");
    }
    for j in &st.jobs {
        print_job(j);
    }
}

/// One job's lines.
fn print_job(j: &JobStatus) {
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.2} s"));
    outln!(
        "job {}{} index {}: {}/{} chunks, urgent {}, all {}, parent {}, children [{}]{}",
        j.job,
        slurm_number(&j.job),
        j.index.get(..12).unwrap_or(&j.index),
        j.have,
        j.chunks,
        secs(j.urgent_s),
        secs(j.all_s),
        if j.parent.is_empty() {
            "(re-attaching)"
        } else {
            &j.parent
        },
        j.children.join(", "),
        if j.finished { ", finished" } else { "" },
    );
    outln!("  mounted at {}", j.mountpoint);
    let c = &j.counters;
    outln!(
        "  in {} ({} chunks, {} refused), out {} ({} chunks)",
        util::bytes(c.bytes_in),
        c.chunks_in,
        c.bad_chunks,
        util::bytes(c.bytes_out),
        c.chunks_out
    );
}

/// ` (Slurm job N)` for a job id that fits a Slurm job id (pushed with `--job N`).
fn slurm_number(job: &str) -> String {
    match job.parse::<JobId>() {
        Ok(JobId(n)) if n <= u64::from(u32::MAX) => format!(" (Slurm job {n})"),
        _ => String::new(),
    }
}

/// Arguments of `teesfs release`.
#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The job to end on this node: the Slurm job id in decimal (e.g. 1234), 16 hex
    /// digits (a push outside Slurm, as `teesfs status` shows it), or hex with 0x. Default: $TEESFS_JOB, else
    /// $SLURM_JOB_ID (as the Slurm epilog runs it).
    #[arg(long, value_name = "ID")]
    job: Option<JobId>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
}

/// Runs `teesfs release`: `teesfs status --job ID --stop` with the job taken from
/// `$SLURM_JOB_ID` when not given.
pub fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let job = match args.job {
        Some(j) => j,
        None => util::job_from_env()?.context(
            "which job? pass --job ID or set $SLURM_JOB_ID (`teesfs status` lists the jobs)",
        )?,
    };
    run(StatusArgs {
        control: args.control,
        format: util::Format::Text,
        json: false,
        job: Some(job),
        all: false,
        stop: true,
    })
}

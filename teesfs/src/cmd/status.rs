//! `teesfs status`: ask a running daemon what it holds and does, or stop one job on it.
//!
//! Every local user may ask; the daemon answers root about everything and other users only
//! about the jobs they own: their `status` lists their own jobs (see
//! `teesfs::node::control`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::Context;
use peertree::relay::JobId;

use teesfs::node::control::Request;

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
    /// Print the raw JSON.
    #[arg(long)]
    json: bool,
    /// Only this job: the Slurm job id in decimal (e.g. 1234), the 16 hex digits this
    /// command shows, or hex with 0x. Default: $TEESFS_JOB, else $SLURM_JOB_ID (inside a
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
    let v: serde_json::Value = serde_json::from_str(&line).context("daemon reply is not JSON")?;
    if args.json {
        print!("{line}");
        return Ok(());
    }
    if let Some(job) = v["stopped"].as_str() {
        println!("stopped job {job}");
        return Ok(());
    }
    if job.is_some() {
        print_job(&v);
        return Ok(());
    }
    let u = |k: &str| v[k].as_u64().unwrap_or(0);
    println!(
        "{} listening on {}; store {} in {} chunks (budget {})",
        v["host"].as_str().unwrap_or("?"),
        v["listen"].as_str().unwrap_or("?"),
        util::bytes(u("store_bytes")),
        u("store_chunks"),
        util::bytes(u("store_budget"))
    );
    let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("no jobs");
    }
    for j in jobs {
        print_job(&j);
    }
    Ok(())
}

/// One job's lines.
fn print_job(j: &serde_json::Value) {
    {
        let secs = |k: &str| {
            j[k].as_f64()
                .map_or("-".to_string(), |s| format!("{s:.2} s"))
        };
        println!(
            "job {} index {}: {}/{} chunks, urgent {}, all {}, parent {}, children [{}]{}",
            j["job"].as_str().unwrap_or("?"),
            &j["index"].as_str().unwrap_or("?")[..12.min(j["index"].as_str().unwrap_or("").len())],
            j["have"],
            j["chunks"],
            secs("urgent_s"),
            secs("all_s"),
            j["parent"]
                .as_str()
                .filter(|p| !p.is_empty())
                .unwrap_or("(re-attaching)"),
            j["children"]
                .as_array()
                .map(|c| c
                    .iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default(),
            if j["finished"].as_bool() == Some(true) {
                ", finished"
            } else {
                ""
            },
        );
        println!("  mounted at {}", j["mountpoint"].as_str().unwrap_or("?"));
        let c = &j["counters"];
        println!(
            "  in {} ({} chunks, {} refused), out {} ({} chunks)",
            util::bytes(c["bytes_in"].as_u64().unwrap_or(0)),
            c["chunks_in"],
            c["bad_chunks"],
            util::bytes(c["bytes_out"].as_u64().unwrap_or(0)),
            c["chunks_out"]
        );
    }
}

/// Arguments of `teesfs release`.
#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The job to end on this node: the Slurm job id in decimal (e.g. 1234), its 16 hex
    /// digits as `teesfs status` shows them, or hex with 0x. Default: $TEESFS_JOB, else
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
        json: false,
        job: Some(job),
        all: false,
        stop: true,
    })
}

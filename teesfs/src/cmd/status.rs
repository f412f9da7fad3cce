//! `teesfs status`: ask a running daemon what it holds and does, or stop one job on it.
//!
//! Every local user may ask; the daemon answers root about everything and other users only
//! about the jobs they own (see `teesfs::node::control`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::util;

/// Arguments of `teesfs status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
    /// Print the raw JSON.
    #[arg(long)]
    json: bool,
    /// Only this job (its 16-hex-digit id). Needed by users other than root, who may see only
    /// the jobs they own.
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// Stop the job given with --job on this node: unmount it and stop relaying it.
    #[arg(long, requires = "job")]
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
    let request = match (&args.job, args.stop) {
        (Some(job), true) => format!("stop {job}"),
        (Some(job), false) => format!("status {job}"),
        (None, _) => "status".to_owned(),
    };
    let line = ask(&args.control, &request)?;
    let v: serde_json::Value = serde_json::from_str(&line).context("daemon reply is not JSON")?;
    if args.json {
        print!("{line}");
        return Ok(());
    }
    if let Some(job) = v["stopped"].as_str() {
        println!("stopped job {job}");
        return Ok(());
    }
    if args.job.is_some() {
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
    /// The job to end on this node, its 16-hex-digit id (default: the job pushed for
    /// $SLURM_JOB_ID, as the Slurm epilog uses it).
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
}

/// Runs `teesfs release`: `teesfs status --job ID --stop` with the job taken from
/// `$SLURM_JOB_ID` when not given.
pub fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let job = match args.job {
        Some(j) => j,
        None => match std::env::var("SLURM_JOB_ID")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(n) => format!("{n:016x}"),
            None => anyhow::bail!("which job? pass --job ID (`teesfs status` lists them)"),
        },
    };
    run(StatusArgs {
        control: args.control,
        json: false,
        job: Some(job),
        stop: true,
    })
}

//! `teesfs status`: ask a running daemon what it holds and does.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

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
}

/// Runs `teesfs status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let mut s = UnixStream::connect(&args.control).with_context(|| {
        format!(
            "no daemon answers at {} (is `teesfs daemon` running? pass --control)",
            args.control.display()
        )
    })?;
    s.write_all(b"status\n")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    if args.json {
        print!("{line}");
        return Ok(());
    }
    let v: serde_json::Value = serde_json::from_str(&line).context("daemon reply is not JSON")?;
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
    Ok(())
}

/// Arguments of `teesfs release`.
#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The job to end on this node: its id or a unique prefix (default: the job pushed for
    /// $SLURM_JOB_ID, as the Slurm epilog uses it).
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
}

/// Runs `teesfs release`: the daemon unmounts the job and stops relaying it.
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
    let mut s = UnixStream::connect(&args.control).with_context(|| {
        format!(
            "no daemon answers at {} (is `teesfs daemon` running? pass --control)",
            args.control.display()
        )
    })?;
    s.write_all(format!("release {job}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    let v: serde_json::Value = serde_json::from_str(&line).context("daemon reply is not JSON")?;
    match v["released"].as_str() {
        Some(id) => {
            println!("released job {id}");
            Ok(())
        }
        None => anyhow::bail!("{}", v["error"].as_str().unwrap_or("the daemon refused")),
    }
}

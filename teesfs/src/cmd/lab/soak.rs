//! `teesfs lab soak`: many jobs through one lab, in sequence and several at a time, with a
//! daemon restarted and a proxy killed during a push; the daemons' memory, descriptors,
//! threads, stores, jobs, mounts and namespaces afterwards against a baseline. Exits
//! non-zero when something was left behind.

use std::path::PathBuf;

use anyhow::{Context, bail};

use super::super::util;
use super::ShapeArgs;

/// Arguments of `teesfs lab soak`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: 100 jobs on the reference lab, 4 at a time in the second half:
  sudo teesfs lab soak --jobs 100 --parallel 4 --json soak.json"
)]
pub struct SoakArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Jobs in all: the first half one after another (a daemon restarted a quarter of the
    /// way), then a push whose proxy is killed, then the rest --parallel at a time.
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// Jobs pushed at once in the second half.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Size of each job's layer (4 layers, the jobs cycling through them).
    #[arg(long, default_value = "2MiB", value_parser = util::parse_size)]
    layer: u64,
    /// Wait this long after the last job before measuring: connections no job uses close
    /// after the transport's idle timeout (30 s).
    #[arg(long, default_value = "35s", value_parser = humantime::parse_duration)]
    settle: std::time::Duration,
    /// Write the figures as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Runs the soak.
pub fn run(a: SoakArgs) -> anyhow::Result<()> {
    let lab = a.shape.up()?;
    let dir = lab.work().join("soak-layers");
    let layers = lab::soak::make_layers(&dir, 5, a.layer)?;
    let indexes = layers
        .iter()
        .map(|l| lab.publish(l))
        .collect::<lab::Result<Vec<_>>>()?;
    let compute: Vec<_> = lab.layout().compute().cloned().collect();
    let restart = compute
        .iter()
        .find(|n| n.role == lab::layout::Role::Slave)
        .map(|n| n.host.clone())
        .context("the lab has no slave to restart")?;
    let kill_proxy = compute
        .iter()
        .rfind(|n| n.role == lab::layout::Role::Proxy)
        .map(|n| n.host.clone())
        .context("the lab has no proxy to kill")?;
    let spec = lab::soak::SoakSpec {
        jobs: a.jobs,
        parallel: a.parallel,
        restart,
        kill_proxy,
        settle: a.settle,
    };
    errln!(
        "soak: {} jobs of {} ({} at a time in the second half), {} restarted, {} killed during a push",
        spec.jobs,
        util::bytes(a.layer),
        spec.parallel,
        spec.restart,
        spec.kill_proxy
    );
    let rep = lab::soak::run(&lab, &indexes[..4], &indexes[4], "payload.bin", &spec)?;
    let nodes = compute.len() as u64;
    lab.down()?;
    let (b, f) = (&rep.baseline, &rep.after);
    outln!("{:<18} {:>14} {:>14}", "daemons (sum)", "before", "after");
    for (what, x, y) in [
        (
            "RSS",
            util::bytes(b.rss_kib << 10),
            util::bytes(f.rss_kib << 10),
        ),
        ("file descriptors", b.fds.to_string(), f.fds.to_string()),
        ("threads", b.threads.to_string(), f.threads.to_string()),
        (
            "store",
            util::bytes(b.store_bytes),
            util::bytes(f.store_bytes),
        ),
        ("jobs", b.jobs.to_string(), f.jobs.to_string()),
        (
            "FUSE mounts",
            b.fuse_mounts.to_string(),
            f.fuse_mounts.to_string(),
        ),
        (
            "namespaces",
            b.namespaces.to_string(),
            f.namespaces.to_string(),
        ),
    ] {
        outln!("{what:<18} {x:>14} {y:>14}");
    }
    let mut times = rep.job_s.clone();
    times.sort_by(f64::total_cmp);
    outln!(
        "{} jobs in {:.1} s: {} complete, {} with the failure injected; per job median {:.2} s, max {:.2} s",
        rep.job_s.len(),
        rep.wall_s,
        rep.complete,
        rep.with_failures,
        times.get(times.len() / 2).copied().unwrap_or(0.0),
        times.last().copied().unwrap_or(0.0)
    );
    if let Some(p) = &a.json {
        crate::cmd::outfile::write(p, &serde_json::to_vec_pretty(&rep)?)?;
        errln!("figures in {}", p.display());
    }
    let leaks = rep.leaks(nodes);
    if !leaks.is_empty() {
        bail!(
            "resources left behind after the soak:\n  {}",
            leaks.join("\n  ")
        );
    }
    outln!("nothing left behind");
    Ok(())
}

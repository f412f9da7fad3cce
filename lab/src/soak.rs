//! The soak: many jobs through one lab, in sequence and several at a time, with the faults
//! of days of operation (a daemon restarted between jobs, a proxy killed during a push),
//! each job pushed, read on a node and released on every node as the Slurm epilog does;
//! then the daemons' resources compared with where they stood before.
//!
//! A node daemon runs for months through thousands of jobs on nodes whose only storage is
//! RAM: whatever a job leaves behind (memory, descriptors, mounts, store bytes beyond the
//! layers' own) adds up. The soak measures what is left after the jobs against a baseline
//! taken after a warm-up round of the same layers, so the store's cache of those layers
//! (kept on purpose, content-addressed) is in both.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::check_interrupt;
use crate::cluster::{Lab, PushOptions};
use crate::error::{LabError, Result};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSpec {
    /// Jobs in all.
    pub jobs: usize,
    /// Jobs pushed at once in the concurrent part (the second half of the jobs).
    pub parallel: usize,
    /// Restart this compute node's daemon (SIGKILL, start again) after the first quarter.
    pub restart: String,
    /// Kill this proxy's daemon during one push at half-way, then start it again.
    pub kill_proxy: String,
    /// How long to wait after the last job before measuring: connections no job uses close
    /// after the transport's idle timeout (30 s).
    pub settle: Duration,
}

/// The daemons' resources, summed over the compute nodes.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Resources {
    /// Resident memory (KiB).
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Threads.
    pub threads: u64,
    /// Bytes in the chunk stores.
    pub store_bytes: u64,
    /// Jobs the daemons hold.
    pub jobs: u64,
    /// FUSE mounts in the daemons' mount namespaces.
    pub fuse_mounts: u64,
    /// Network namespaces of this lab.
    pub namespaces: u64,
}

/// What the soak found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// The spec.
    pub spec: SoakSpec,
    /// Before the jobs (after a warm-up round of the layers, all released).
    pub baseline: Resources,
    /// After every job was released.
    pub after: Resources,
    /// Pushes that completed on every node.
    pub complete: usize,
    /// Pushes that reported failures (the one with the killed proxy).
    pub with_failures: usize,
    /// Store bytes the soak may add: the layer of the push whose proxy is killed, on every
    /// node (it is new to the nodes, so that the kill hits a push in flight).
    pub store_allowance: u64,
    /// Seconds per job (push, read, release), in order.
    pub job_s: Vec<f64>,
    /// Seconds for the whole soak.
    pub wall_s: f64,
}

impl SoakReport {
    /// Resources that grew beyond the margins: RSS by more than 25% plus 16 MiB per node
    /// (the allocator keeps some freed pages; measured: 19 to 33 MiB per daemon over 300
    /// jobs), descriptors and threads by more than 4 per node (the blocking pool may hold a
    /// thread for a while), anything else at all beyond the stated allowance.
    pub fn leaks(&self, nodes: u64) -> Vec<String> {
        let (b, a) = (&self.baseline, &self.after);
        let mut out = Vec::new();
        let rss_limit = b.rss_kib + b.rss_kib / 4 + 16384 * nodes;
        if a.rss_kib > rss_limit {
            out.push(format!(
                "RSS {} KiB after, {} KiB before (limit {rss_limit})",
                a.rss_kib, b.rss_kib
            ));
        }
        for (what, before, after, slack) in [
            ("file descriptors", b.fds, a.fds, 4 * nodes),
            ("threads", b.threads, a.threads, 4 * nodes),
            (
                "store bytes",
                b.store_bytes,
                a.store_bytes,
                self.store_allowance,
            ),
            ("jobs", b.jobs, a.jobs, 0),
            ("FUSE mounts", b.fuse_mounts, a.fuse_mounts, 0),
            ("namespaces", b.namespaces, a.namespaces, 0),
        ] {
            if after > before + slack {
                out.push(format!("{what}: {after} after, {before} before"));
            }
        }
        out
    }
}

/// Counts a `/proc` status field (`VmRSS:`, `Threads:`) of `pid`.
fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The daemons' resources now.
pub fn resources(lab: &Lab) -> Result<Resources> {
    let mut r = Resources::default();
    for node in lab.layout().compute() {
        let pid = lab
            .daemon_pid(&node.host)
            .ok_or_else(|| LabError::Shape(format!("{} has no daemon", node.host)))?;
        r.rss_kib += proc_status(pid, "VmRSS:");
        r.threads += proc_status(pid, "Threads:");
        r.fds += std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        let st = lab.status(&node.host)?;
        r.store_bytes += st.store_bytes;
        r.jobs += st.jobs.len() as u64;
        r.fuse_mounts += lab.fuse_mounts(&node.host)?.len() as u64;
    }
    let prefix = format!("{}-", lab.layout().prefix);
    r.namespaces = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count() as u64
        })
        .unwrap_or(0);
    Ok(r)
}

/// Releases `job` on every compute node but `skip` (a daemon restarted since, which lost
/// the job with its process), as the Slurm epilog does.
fn release_everywhere_but(lab: &Lab, job: &str, skip: Option<&str>) -> Result<()> {
    for node in lab.layout().compute() {
        if Some(node.host.as_str()) == skip {
            continue;
        }
        lab.release(&node.host, job)?;
    }
    Ok(())
}

/// Releases `job` on every compute node.
fn release_everywhere(lab: &Lab, job: &str) -> Result<()> {
    release_everywhere_but(lab, job, None)
}

/// One job: push `index` as job `id`, read its first urgent file's bytes on one node and
/// compare them, release it everywhere. Returns whether every node completed.
fn one_job(lab: &Lab, index: &str, id: u64, reader: &str, check: &str) -> Result<bool> {
    let mut o = PushOptions::new(index);
    o.timeout = Duration::from_secs(120);
    o.extra = vec!["--job-id".into(), id.to_string()];
    let run = lab.push(&o)?;
    let job = run.report.job.clone();
    let mp = lab.mountpoint(reader, &job);
    wait_mounted(lab, reader, &mp.join(check))?;
    let out = lab
        .command_on(reader, "cat")?
        .arg(mp.join(check))
        .output()
        .map_err(|source| LabError::Spawn {
            program: "cat".into(),
            source,
        })?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(LabError::Command {
            command: format!("cat {check} in job {job} on {reader}"),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    release_everywhere(lab, &job)?;
    Ok(run.report.failures.is_empty())
}

/// The longest a node's mount may take to show after its push ended.
const MOUNT_GRACE: Duration = Duration::from_secs(30);

/// Waits until `path` shows in `host`'s mount of a job, seen through its daemon's mount
/// namespace. A node mounts a job in the background once it has taken it, so the push of a
/// layer its store already holds can end before the mount is up.
fn wait_mounted(lab: &Lab, host: &str, path: &std::path::Path) -> Result<()> {
    let pid = lab.running_daemon_pid(host)?;
    let through = crate::proc::seen_by(pid, path);
    let deadline = Instant::now() + MOUNT_GRACE;
    while !through.exists() {
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!(
                "{} on {host}: the job's mount did not show within {} s of its push",
                path.display(),
                MOUNT_GRACE.as_secs()
            )));
        }
        check_interrupt()?;
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Runs the soak over `indexes` (published layers, each holding the file `check`), the
/// jobs cycling through them; the push whose proxy is killed carries `kill_index`, a layer
/// the nodes do not hold yet, rate-limited so that it is still in flight.
pub fn run(
    lab: &Lab,
    indexes: &[String],
    kill_index: &str,
    check: &str,
    spec: &SoakSpec,
) -> Result<SoakReport> {
    if indexes.is_empty() || spec.jobs == 0 || spec.parallel == 0 {
        return Err(LabError::Shape(
            "a soak needs layers, at least one job and a parallelism of at least 1".into(),
        ));
    }
    let reader = lab
        .layout()
        .compute()
        .last()
        .map(|n| n.host.clone())
        .ok_or_else(|| LabError::Shape("the lab has no compute node".into()))?;
    let base_id = 7_000_000u64;
    // Warm-up: every layer once, so the stores hold them in the baseline too.
    for (i, index) in indexes.iter().enumerate() {
        one_job(lab, index, base_id + i as u64, &reader, check)?;
    }
    let baseline = resources(lab)?;
    let started = Instant::now();
    let mut tally = Tally::default();
    let sequential = spec.jobs / 2;
    let first = base_id + 1000;
    for i in 0..sequential {
        check_interrupt()?;
        if i == sequential / 2 {
            lab.restart_daemon(&spec.restart)?;
        }
        let t = Instant::now();
        let ok = one_job(
            lab,
            &indexes[i % indexes.len()],
            first + i as u64,
            &reader,
            check,
        )?;
        tally.count(ok, t.elapsed().as_secs_f64());
    }
    let store_allowance = killed_proxy_job(lab, kill_index, first + 5000, spec, &mut tally)?;
    let jobs = Jobs {
        indexes,
        first,
        reader: &reader,
        check,
    };
    jobs.in_parallel(
        lab,
        sequential..spec.jobs.saturating_sub(1),
        spec.parallel,
        &mut tally,
    )?;
    let wall_s = started.elapsed().as_secs_f64();
    // Waiting on the daemons' own timers (idle connections closing), not on a message.
    std::thread::sleep(spec.settle);
    let after = resources(lab)?;
    Ok(SoakReport {
        spec: spec.clone(),
        baseline,
        after,
        complete: tally.complete,
        with_failures: tally.with_failures,
        store_allowance,
        job_s: tally.job_s,
        wall_s,
    })
}

/// The soak's jobs so far: how long each took, and how many ended complete or with
/// failures.
#[derive(Default)]
struct Tally {
    job_s: Vec<f64>,
    complete: usize,
    with_failures: usize,
}

impl Tally {
    /// Counts one job, complete (`ok`) or not, that took `secs`.
    fn count(&mut self, ok: bool, secs: f64) {
        self.job_s.push(secs);
        if ok {
            self.complete += 1;
        } else {
            self.with_failures += 1;
        }
    }
}

/// The killed proxy: a push of `kill_index` (job `job`) in the background, rate-limited,
/// its proxy killed once it holds the job and restarted after the push ended. Answers the
/// store bytes the nodes may have grown by (the layer once on every node).
fn killed_proxy_job(
    lab: &Lab,
    kill_index: &str,
    job: u64,
    spec: &SoakSpec,
    tally: &mut Tally,
) -> Result<u64> {
    let mut o = PushOptions::new(kill_index);
    o.timeout = Duration::from_secs(120);
    o.extra = vec![
        "--job-id".into(),
        job.to_string(),
        "--deadline".into(),
        "2s".into(),
        "--rate-limit".into(),
        "2MiB".into(),
    ];
    let t = Instant::now();
    let push = lab.push_background(&o)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        check_interrupt()?;
        let st = lab.status(&spec.kill_proxy)?;
        if !st.jobs.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!(
                "{} never took the job to be killed in",
                spec.kill_proxy
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.kill_daemon(&spec.kill_proxy)?;
    let end = push.wait(Duration::from_secs(120))?;
    lab.restart_daemon(&spec.kill_proxy)?;
    release_everywhere_but(lab, &end.report.job, Some(&spec.kill_proxy))?;
    tally.count(end.report.failures.is_empty(), t.elapsed().as_secs_f64());
    Ok(end.report.total_bytes * lab.layout().compute().count() as u64)
}

/// The soak's ordinary jobs: job `i` runs layer `i` (cycling) as job id `first + i`, and
/// `reader` reads `check` in it.
struct Jobs<'a> {
    indexes: &'a [String],
    first: u64,
    reader: &'a str,
    check: &'a str,
}

impl Jobs<'_> {
    /// Runs the jobs `range`, `parallel` at a time; each of a batch is counted with the
    /// batch's time shared out.
    fn in_parallel(
        &self,
        lab: &Lab,
        range: std::ops::Range<usize>,
        parallel: usize,
        tally: &mut Tally,
    ) -> Result<()> {
        let mut next = range.start;
        while next < range.end {
            check_interrupt()?;
            let batch: Vec<usize> = (next..(next + parallel).min(range.end)).collect();
            next += batch.len();
            let t = Instant::now();
            let results: Vec<Result<bool>> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|&i| {
                        s.spawn(move || {
                            one_job(
                                lab,
                                &self.indexes[i % self.indexes.len()],
                                self.first + i as u64,
                                self.reader,
                                self.check,
                            )
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(LabError::Shape("a soak job panicked".into())))
                    })
                    .collect()
            });
            let per = t.elapsed().as_secs_f64() / batch.len() as f64;
            for r in results {
                tally.count(r?, per);
            }
        }
        Ok(())
    }
}

/// Writes `count` layers of `bytes` incompressible bytes each (different content per
/// layer) under `dir`, each with the file `payload.bin`; returns their directories.
pub fn make_layers(
    dir: &std::path::Path,
    count: usize,
    bytes: u64,
) -> Result<Vec<std::path::PathBuf>> {
    (0..count)
        .map(|i| {
            let layer = dir.join(format!("layer{i}"));
            crate::bench::write_payload(&layer, bytes, i as u64 + 1)?;
            Ok(layer)
        })
        .collect()
}

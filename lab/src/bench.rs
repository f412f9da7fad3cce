//! The deployment benchmark as a library: the same payload deployed by each method in turn
//! on one lab, several repetitions, fresh content each run (so no node starts warm), with
//! time, uplink bytes and CPU per run and medians, ratios and lower bounds per method.
//! Methods: teesfs pushes with each plan, and two real baselines, BitTorrent
//! ([`crate::torrent`]) and Slurm's `sbcast` ([`crate::slurm`]).
//!
//! JSON format of [`BenchReport`] (version 1; fields are only ever added; field meanings
//! in docs/lab.md):
//! ```text
//! { "version": 1, "groups": 4, "group_size": 8, "payload_bytes": N, "stored_bytes": N, "chunk_bytes": N,
//!   "reps": 3, "lower_bound_s": 1.34, "min_uplink_bytes": N,
//!   "runs": [ { "method": "topo", "rep": 0, "all_s": 1.9, "wall_s": 2.2,
//!               "uplink_in_bytes": N, "root_out_bytes": N, "cpu_s": 3.1, "throttled_s": 12.0 } ],
//!   "summary": [ { "method": "topo", "all_s": 1.9, "vs_topo": 1.0, "vs_lower_bound": 1.4,
//!                  "uplink_in_bytes": N, "uplink_vs_min": 1.03, "uplink_vs_random": 0.25,
//!                  "cpu_s": 3.1, "throttled_per_node_s": 0.4 } ] }
//! ```
//! Summary figures are medians over the repetitions.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::check_interrupt;
use crate::cluster::{Lab, PushOptions};
use crate::error::{LabError, Result};
use crate::slurm::{JobId, Slurm};

/// A distribution method the bench knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// teesfs, topology-aware tree, told the lab's link rates (as a site configures).
    Topo,
    /// teesfs, the topology-aware tree without link rates (nor learned ones): a proxy
    /// feeds 3 members and chains the rest.
    #[serde(rename = "topo-unrated")]
    TopoUnrated,
    /// teesfs, the topology-aware tree with the link rates its first push learned (issue
    /// 33): the run forgets what the store learned, pushes the layer once without rates
    /// (which learns them), starts the nodes afresh and pushes it again; the second push
    /// is measured.
    #[serde(rename = "topo-learned")]
    TopoLearned,
    /// teesfs, the topology-aware tree told the lab's rates, with the login node feeding
    /// as many hosts as its link carries (`--login-copies 64`, a site's wide login link;
    /// `topo` sends one copy).
    #[serde(rename = "topo-wide-login")]
    TopoWideLogin,
    /// teesfs, the paper's Algorithm 1.
    #[serde(rename = "topo-paper")]
    TopoPaper,
    /// teesfs, random tree of the same width.
    Random,
    /// teesfs, tree in hostlist order (sbcast's way).
    Hostlist,
    /// teesfs, login node sends to every node.
    Flat,
    /// teesfs, one-to-all from the storage node's fat link (shared storage's traffic shape).
    Storage,
    /// BitTorrent: aria2c on every node, seeded from the login node, the lab's tracker.
    #[serde(rename = "bittorrent")]
    Torrent,
    /// Slurm's `sbcast` from the login node to an allocation over every node.
    Sbcast,
}

impl Method {
    /// Every method, in table order.
    pub const ALL: [Method; 11] = [
        Method::Topo,
        Method::TopoUnrated,
        Method::TopoLearned,
        Method::TopoWideLogin,
        Method::TopoPaper,
        Method::Random,
        Method::Hostlist,
        Method::Flat,
        Method::Storage,
        Method::Torrent,
        Method::Sbcast,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Topo => "topo",
            Method::TopoUnrated => "topo-unrated",
            Method::TopoLearned => "topo-learned",
            Method::TopoWideLogin => "topo-wide-login",
            Method::TopoPaper => "topo-paper",
            Method::Random => "random",
            Method::Hostlist => "hostlist",
            Method::Flat => "flat",
            Method::Storage => "storage",
            Method::Torrent => "bittorrent",
            Method::Sbcast => "sbcast",
        }
    }

    /// Whether it is a teesfs push (else a baseline).
    pub fn is_teesfs(self) -> bool {
        !matches!(self, Method::Torrent | Method::Sbcast)
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Method> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    fn push_options(self, index: &str) -> PushOptions {
        let mut o = PushOptions::new(index);
        match self {
            Method::Storage => {
                o.strategy = "flat".into();
                o.root = "storage".into();
            }
            Method::TopoUnrated => {
                o.strategy = "topo".into();
                o.links = false;
                // Unrated: not the rates earlier pushes of the bench measured.
                o.extra.push("--no-learned-rates".into());
            }
            Method::TopoLearned => {
                o.strategy = "topo".into();
                o.links = false;
            }
            Method::TopoWideLogin => {
                o.strategy = "topo".into();
                o.extra.extend(["--login-copies".into(), "64".into()]);
            }
            m => o.strategy = m.name().into(),
        }
        o
    }
}

/// One push.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Method.
    pub method: Method,
    /// Repetition.
    pub rep: usize,
    /// Seconds until every node held the payload (root's view).
    pub all_s: f64,
    /// Wall time of the push command.
    pub wall_s: f64,
    /// Bytes into all groups over their uplinks (kernel counters).
    pub uplink_in_bytes: u64,
    /// Bytes out of the root's link (kernel counters).
    pub root_out_bytes: u64,
    /// CPU seconds of all daemons and the push.
    pub cpu_s: f64,
    /// Seconds the compute nodes spent throttled by their CPU quotas during the run, summed
    /// over the nodes (`None` when pooled).
    pub throttled_s: Option<f64>,
}

/// Medians for one method.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Method.
    pub method: Method,
    /// Median time until every node held the payload.
    pub all_s: f64,
    /// Ratio to teesfs-topo's median.
    pub vs_topo: f64,
    /// Ratio to the link lower bound.
    pub vs_lower_bound: f64,
    /// Median uplink bytes.
    pub uplink_in_bytes: u64,
    /// Ratio of uplink bytes to the minimum (each group receives the payload once).
    pub uplink_vs_min: f64,
    /// Ratio of uplink bytes to the random tree's.
    pub uplink_vs_random: f64,
    /// Median CPU seconds.
    pub cpu_s: f64,
    /// Median over the runs of the seconds a compute node spent throttled by its CPU quota,
    /// on average over the nodes (`None` when pooled).
    pub throttled_per_node_s: Option<f64>,
}

impl Summary {
    /// Under the scale model, the share of this method's time that a node spent held by its
    /// CPU quota, on average: near 0 the links bound the run, near 1 the nodes' CPU did.
    pub fn held_share(&self) -> Option<f64> {
        self.throttled_per_node_s
            .map(|t| t / self.all_s)
            .filter(|r| r.is_finite())
    }
}

/// A held share ([`Summary::held_share`]) above which the bench says that the run measured
/// the nodes' CPU quotas rather than the links. A node held back holds its children with
/// it, so a small share already costs much: on a 2-core machine whose nodes were short of
/// CPU, topo was held 13% of its time (0.55 s a node of 4.07 s) and took 2.3x the link
/// bound, against 1.30x pooled (BENCHMARKS.md, "The lab's push on a slower machine").
pub const HELD_BY_CPU: f64 = 0.10;

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Format version.
    pub version: u32,
    /// Groups in the lab.
    pub groups: usize,
    /// Nodes per group.
    pub group_size: usize,
    /// Payload size.
    pub payload_bytes: u64,
    /// Stored (wire) size of the payload.
    pub stored_bytes: u64,
    /// Chunk size the payload was published with.
    pub chunk_bytes: u64,
    /// Repetitions.
    pub reps: usize,
    /// Payload over the slowest node link.
    pub lower_bound_s: f64,
    /// Each group receives the payload once.
    pub min_uplink_bytes: u64,
    /// Every run.
    pub runs: Vec<Run>,
    /// Per method.
    pub summary: Vec<Summary>,
    /// The scale model the lab ran under (`None`: pooled).
    pub model: Option<crate::scale::ScaleModel>,
    /// The model in one line.
    pub model_text: String,
}

/// Writes `bytes` of incompressible data (seeded, so runs differ) as `dir/payload.bin`.
pub fn write_payload(dir: &Path, bytes: u64, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(LabError::io(dir))?;
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut data = vec![0u8; bytes as usize];
    for c in data.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        c.copy_from_slice(&state.to_le_bytes()[..c.len()]);
    }
    let p = dir.join("payload.bin");
    std::fs::write(&p, data).map_err(LabError::io(&p))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How long one baseline distribution may take.
const BASELINE_TIMEOUT: Duration = Duration::from_secs(600);

/// One `sbcast` of `file` to every node of `job`, measured like a push: wall time until it
/// returns (every node holds the file), kernel counters, CPU of every Slurm process and of
/// the client; each node's copy is checked for size and removed.
fn sbcast_run(
    lab: &Lab,
    slurm: &Slurm<'_>,
    job: JobId,
    file: &Path,
    method: Method,
    rep: usize,
) -> Result<Run> {
    let size = std::fs::metadata(file).map_err(LabError::io(file))?.len();
    let name = format!("payload-{rep}.bin");
    let up_before = lab.net().uplinks()?;
    let root_before = lab.net().counters("login", "eth0")?;
    let cpu_before = slurm.cpu_seconds() + crate::proc::children_cpu_seconds();
    let held_before = lab.throttled_s();
    let t0 = Instant::now();
    slurm.sbcast(job, file, &name, &[])?;
    let all_s = t0.elapsed().as_secs_f64();
    let cpu_s = slurm.cpu_seconds() + crate::proc::children_cpu_seconds() - cpu_before;
    let throttled_s = held_since(lab, held_before);
    let up_after = lab.net().uplinks()?;
    let root_after = lab.net().counters("login", "eth0")?;
    for h in slurm.hosts() {
        let copy = slurm.node_local(h).join(&name);
        let got = std::fs::metadata(&copy).map(|m| m.len()).unwrap_or(0);
        if got != size {
            return Err(LabError::Command {
                command: format!("sbcast to {h}"),
                stderr: format!("{} holds {got} of {size} bytes", copy.display()),
            });
        }
        let _ = std::fs::remove_file(&copy);
    }
    Ok(Run {
        method,
        rep,
        all_s,
        wall_s: all_s,
        uplink_in_bytes: up_after
            .iter()
            .zip(&up_before)
            .map(|(a, b)| a.since(*b).rx)
            .sum(),
        root_out_bytes: root_after.since(root_before).tx,
        cpu_s: cpu_s.max(0.0),
        throttled_s,
    })
}

/// Throttled node-seconds since `before` ([`Lab::throttled_s`]).
fn held_since(lab: &Lab, before: Option<f64>) -> Option<f64> {
    lab.throttled_s()
        .zip(before)
        .map(|(now, was)| (now - was).max(0.0))
}

/// Runs every method in `methods` `reps` times (order rotated each repetition) with a
/// fresh `payload`-byte layer per run; `on_run` sees each run as it completes. Slurm is
/// started (and an allocation over every node made) only when `sbcast` is among them.
///
/// After every teesfs run the layer is unpublished and the nodes start again with empty
/// stores ([`Lab::fresh_nodes`]) before `on_run` sees it, so that each run finds the
/// machine's memory as the first did. Otherwise every run leaves the payload in all node
/// stores (tmpfs): on the project's 2-core VM, writing to tmpfs takes about 0.45 s per GiB
/// from most free memory but 1.8-2.7 s per GiB from a band of about 6 GB of it (between
/// about 7 and 0.8 GB free), which made the later repetitions of a 64 MiB bench 20-30%
/// slower, with 30% more CPU.
pub fn run(
    lab: &Lab,
    methods: &[Method],
    reps: usize,
    payload: u64,
    mut on_run: impl FnMut(&Run),
) -> Result<BenchReport> {
    let mut runs = Vec::new();
    let mut stored = 0;
    let mut seed = 1;
    let slurm = if methods.contains(&Method::Sbcast) {
        let s = lab.start_slurm()?;
        let job = s.allocate()?;
        Some((s, job))
    } else {
        None
    };
    for rep in 0..reps {
        for k in 0..methods.len() {
            check_interrupt()?;
            let m = methods[(k + rep) % methods.len()];
            let dir = lab.work().join("bench").join(format!("{}-{rep}", m.name()));
            write_payload(&dir, payload, seed)?;
            seed += 1;
            let file = dir.join("payload.bin");
            let r = match m {
                Method::Sbcast => {
                    let (s, job) = slurm.as_ref().ok_or_else(|| {
                        LabError::Shape("sbcast needs Slurm, which did not start".into())
                    })?;
                    sbcast_run(lab, s, *job, &file, m, rep)?
                }
                _ => {
                    let (r, s) = one_run(lab, m, rep, &dir, &file)?;
                    stored = s.unwrap_or(stored);
                    r
                }
            };
            let _ = std::fs::remove_dir_all(&dir);
            on_run(&r);
            runs.push(r);
        }
    }
    if let Some((s, _)) = slurm {
        s.down()?;
    }
    if stored == 0 {
        // Only baselines ran: they move the payload itself.
        stored = payload;
    }
    Ok(report(lab, methods, reps, payload, stored, runs))
}

/// One run of a BitTorrent or teesfs method on the payload in `dir`; for teesfs also the
/// stored size of the published layer, which is unpublished again, and the nodes start
/// afresh, before this returns (see [`run`]).
fn one_run(
    lab: &Lab,
    m: Method,
    rep: usize,
    dir: &Path,
    file: &Path,
) -> Result<(Run, Option<u64>)> {
    if m == Method::Torrent {
        let held_before = lab.throttled_s();
        let tr = crate::torrent::distribute(lab, file, BASELINE_TIMEOUT, false)?;
        let run = Run {
            method: m,
            rep,
            all_s: tr.all_s,
            wall_s: tr.all_s,
            uplink_in_bytes: tr.uplink_in(),
            root_out_bytes: tr.root_link.tx,
            cpu_s: tr.cpu_s,
            throttled_s: held_since(lab, held_before),
        };
        return Ok((run, None));
    }
    let index = lab.publish(dir)?;
    let _ = std::fs::remove_dir_all(dir);
    if m == Method::TopoLearned {
        // The first push of a lab that knows no rates: it learns them.
        let learned = lab.work().join("store/learned/rates.json");
        match std::fs::remove_file(&learned) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LabError::io(&learned)(e));
            }
            _ => {}
        }
        lab.push(&m.push_options(&index))?;
        lab.fresh_nodes()?;
    }
    let held_before = lab.throttled_s();
    let pr = lab.push(&m.push_options(&index))?;
    let throttled_s = held_since(lab, held_before);
    let run = Run {
        method: m,
        rep,
        all_s: pr.report.all_complete_s.unwrap_or(f64::NAN),
        wall_s: pr.wall_s,
        uplink_in_bytes: pr.uplink_in(),
        root_out_bytes: pr.root_link.tx,
        cpu_s: pr.cpu_s,
        throttled_s,
    };
    lab.unpublish_all()?;
    lab.fresh_nodes()?;
    Ok((run, Some(pr.report.total_bytes)))
}

/// The report: every run, and per method the medians with their ratios to `topo`, to the
/// link lower bound and to the minimum uplink traffic.
fn report(
    lab: &Lab,
    methods: &[Method],
    reps: usize,
    payload: u64,
    stored: u64,
    runs: Vec<Run>,
) -> BenchReport {
    let l = lab.layout();
    let lower = l.lower_bound_s(stored);
    let min_up = stored * l.spec.groups as u64;
    let med = |m: Method, f: &dyn Fn(&Run) -> f64| {
        median(runs.iter().filter(|r| r.method == m).map(f).collect())
    };
    let topo_s = med(Method::Topo, &|r| r.all_s);
    let nodes = l.compute().count().max(1) as f64;
    let random_up = med(Method::Random, &|r| r.uplink_in_bytes as f64);
    let summary = methods
        .iter()
        .map(|&m| {
            let all_s = med(m, &|r| r.all_s);
            let up = med(m, &|r| r.uplink_in_bytes as f64);
            Summary {
                method: m,
                all_s,
                vs_topo: all_s / topo_s,
                vs_lower_bound: all_s / lower,
                uplink_in_bytes: up as u64,
                uplink_vs_min: up / min_up as f64,
                uplink_vs_random: up / random_up,
                cpu_s: med(m, &|r| r.cpu_s),
                throttled_per_node_s: lab
                    .model()
                    .map(|_| med(m, &|r| r.throttled_s.map_or(f64::NAN, |t| t / nodes))),
            }
        })
        .collect();
    BenchReport {
        version: 1,
        groups: l.spec.groups,
        group_size: l.spec.group_size,
        payload_bytes: payload,
        stored_bytes: stored,
        // The payload is one file of `payload` bytes, so this is what publish chose.
        chunk_bytes: lab.chunk_size_for(payload),
        reps,
        lower_bound_s: lower,
        min_uplink_bytes: min_up,
        runs,
        summary,
        model: lab.model().cloned(),
        model_text: lab.model_text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_held_by_the_nodes_quotas_is_told_from_one_bound_by_its_links() {
        let summary = |all_s, held: Option<f64>| Summary {
            method: Method::Topo,
            all_s,
            vs_topo: 1.0,
            vs_lower_bound: all_s / 1.77,
            uplink_in_bytes: 64 << 20,
            uplink_vs_min: 1.0,
            uplink_vs_random: f64::NAN,
            cpu_s: 4.0,
            throttled_per_node_s: held,
        };
        // This machine's 16 MiB push under the model: 1.6 s of 4 s held.
        let held = summary(4.0, Some(1.6)).held_share().expect("a share");
        assert!((held - 0.4).abs() < 1e-9 && held > HELD_BY_CPU, "{held}");
        let free = summary(2.0, Some(0.1)).held_share().expect("a share");
        assert!(free < HELD_BY_CPU, "{free}");
        assert_eq!(summary(2.0, None).held_share(), None, "pooled: no quotas");
        assert_eq!(
            summary(2.0, Some(f64::NAN)).held_share(),
            None,
            "no run counted"
        );
    }

    #[test]
    fn medians_and_names() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(median(vec![f64::NAN]).is_nan());
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(m));
            // The JSON spells methods as the command line does.
            let json = serde_json::to_string(&m).expect("serialize");
            assert_eq!(json, format!("\"{}\"", m.name()));
        }
        assert!(Method::Topo.is_teesfs() && !Method::Sbcast.is_teesfs());
        let o = Method::Storage.push_options("ab");
        assert_eq!((o.strategy.as_str(), o.root.as_str()), ("flat", "storage"));
    }
}

//! Simulated pushes at scale: sweeps of job sizes x strategies x payloads on a modelled
//! machine (`peertree::sim` drives the shipping relay of every node), with the table, the
//! CSV and the plots (the TEES paper's Fig. 4 and Fig. 5) that `teesfs sim` writes. All
//! modelling lives in `peertree`; this module plans, runs and formats.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use peertree::relay::{Event, Phase};
use peertree::sim::{Network, Sim, SimConfig, SimReport, pick_victims};
use peertree::topology::{GroupId, Topology};
use peertree::{NodeId, Plan, PlanOptions, Strategy, measure};
use teesfs_node::report::{EdgeBytes, Failure, FailureKind, NodeTimes, PushReport, Uplink};

use crate::error::{LabError, Result};
use bytesize::ByteSize;

/// The modelled machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    /// Groups of 8 behind a proxy, 10 Gbit/s nodes, 80 Gbit/s proxy port and uplink.
    Tianhe,
    /// Tianhe plus super nodes of 14 groups and cabinets of 168 groups, 2:1 oversubscribed.
    TwoLevel,
    /// The lab's reference shape: 100 Mbit/s slaves, 400 Mbit/s proxy links.
    Lab,
    /// The same in the lab's scale model (its default): every node on 0.0486 cores, link
    /// rates x0.76.
    LabModel,
}

/// What a sweep runs.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// The modelled machine.
    pub machine: Machine,
    /// Job sizes.
    pub nodes: Vec<usize>,
    /// Payloads in bytes.
    pub payloads: Vec<u64>,
    /// Chunk size in bytes; `None`: per payload, what `teesfs publish` chooses for it
    /// ([`manifest::chunk_size_for`] up to [`manifest::MAX_AUTO_CHUNK`]).
    pub chunk: Option<u64>,
    /// Strategies.
    pub strategies: Vec<Strategy>,
    /// Most children per node.
    pub width: usize,
    /// `auto` uses storage at or below this many nodes.
    pub threshold: usize,
    /// Seed of `random` and of the choice of killed nodes.
    pub seed: u64,
    /// Random job nodes killed during each push.
    pub kill: usize,
    /// When they are killed (simulated time).
    pub kill_at: Duration,
    /// Connection set-up cost (default: the machine's).
    pub setup: Option<Duration>,
    /// CPU of each end of a connection's set-up, queued on the host's CPU (default: the
    /// machine's).
    pub setup_cpu: Option<Duration>,
    /// Shared cores for chunk processing (default: the machine's).
    pub cores: Option<u32>,
    /// Per-message latency (default: the machine's).
    pub latency: Option<Duration>,
    /// `flat` and `storage` are skipped above this many nodes.
    pub max_one_to_all: usize,
    /// Index in the machine (from 0) of each job's first node.
    pub first: usize,
    /// Bytes of each payload in its urgent set (`None`: all of it).
    pub urgent: Option<u64>,
    /// The application's own start on one node from local data (0: no application).
    pub app_start: Duration,
    /// Plan without the machine's link rates (a proxy feeds 3 members and chains the rest),
    /// as `teesfs push` does without `--links` or learned rates.
    pub unrated: bool,
    /// Keep each simulation as a push report ([`Row::push`]), as `teesfs push --report`
    /// writes it, for `teesfs report` to draw.
    pub reports: bool,
}

/// One simulation's outcome.
#[derive(Debug, Clone)]
pub struct Row {
    /// Payload bytes.
    pub payload: u64,
    /// Chunk size the payload was simulated in.
    pub chunk: u64,
    /// Job nodes.
    pub nodes: usize,
    /// The plan's strategy.
    pub strategy: Strategy,
    /// The plan's depth.
    pub depth: u32,
    /// The simulation as a push report, when the spec asked for them.
    pub push: Option<PushReport>,
    /// The least bytes that must enter the job's groups.
    pub min_uplink: u64,
    /// What the simulator measured.
    pub report: SimReport,
    /// Wall time the simulation took.
    pub wall: Duration,
}

/// A sweep ready to run: the machine built once for the largest job.
pub struct Sweep {
    spec: SweepSpec,
    topology: Topology,
    network: Network,
    hosts: Vec<String>,
}

impl Sweep {
    /// Builds the machine for `spec`.
    pub fn new(spec: SweepSpec) -> Result<Self> {
        if spec.nodes.is_empty() || spec.strategies.is_empty() || spec.payloads.is_empty() {
            return Err(LabError::Shape(
                "give at least one --nodes, --strategy and --payload".into(),
            ));
        }
        let largest = spec.nodes.iter().copied().max().unwrap_or(0);
        let topology = machine_topology(spec.machine, largest + spec.first + 4)?;
        let mut network = match spec.machine {
            Machine::Tianhe => Network::tianhe(),
            Machine::TwoLevel => Network::two_level(),
            Machine::Lab => Network::lab(),
            Machine::LabModel => Network::lab_model(),
        };
        let topology = if spec.unrated {
            topology
        } else {
            topology.with_links(network.link_rates())
        };
        network.setup = spec.setup.unwrap_or(network.setup);
        network.setup_cpu = spec.setup_cpu.unwrap_or(network.setup_cpu);
        network.latency = spec.latency.unwrap_or(network.latency);
        network.shared_cores = spec.cores.unwrap_or(network.shared_cores);
        let hosts = (0..topology.len())
            .map(|i| {
                topology
                    .host(peertree::topology::TopoId(i as u32))
                    .to_string()
            })
            .collect();
        Ok(Self {
            spec,
            topology,
            network,
            hosts,
        })
    }

    /// The simulations to run: (payload, nodes, strategy), payload-major.
    pub fn jobs(&self) -> Vec<(u64, usize, Strategy)> {
        let s = &self.spec;
        let mut jobs = Vec::new();
        for &payload in &s.payloads {
            for &n in &s.nodes {
                for &strategy in &s.strategies {
                    let one_to_all = matches!(strategy, Strategy::Flat | Strategy::Storage);
                    if !(one_to_all && n > s.max_one_to_all) {
                        jobs.push((payload, n, strategy));
                    }
                }
            }
        }
        jobs
    }

    /// Plans and simulates one job of `n` contiguous nodes from the spec's first.
    pub fn run(&self, payload: u64, n: usize, strategy: Strategy) -> Result<Row> {
        let s = &self.spec;
        let chunk = s.chunk.unwrap_or_else(|| {
            u64::from(manifest::chunk_size_for(payload, manifest::MAX_AUTO_CHUNK))
        });
        let opts = PlanOptions {
            width: s.width,
            threshold: s.threshold,
            seed: s.seed,
            // The modelled machines have a shared file system.
            shared_storage: true,
            // As `teesfs push` tells the planner the pushed index's mean chunk.
            mean_chunk: Some(chunk),
            ..PlanOptions::default()
        };
        let job = &self.hosts[s.first..s.first + n];
        let sim_err = |what: &str| {
            let what = format!("{what} {n} nodes with {strategy}");
            move |e: peertree::Error| LabError::Sim { what, source: e }
        };
        let plan =
            peertree::plan(&self.topology, job, strategy, &opts).map_err(sim_err("planning"))?;
        let mut cfg = SimConfig::new(self.network.clone(), payload, chunk);
        cfg.limit = Duration::from_secs(24 * 3600);
        cfg.urgent = s.urgent.map_or(payload, |u| u.min(payload));
        cfg.app_start = s.app_start;
        let started = Instant::now();
        let urgent = cfg.urgent;
        let (report, push) = simulate(
            &plan,
            &self.topology,
            cfg,
            (s.kill, s.kill_at, s.seed),
            s.reports.then_some(urgent),
        )
        .map_err(sim_err("simulating"))?;
        let metrics = measure(&plan, &self.topology, payload);
        Ok(Row {
            payload,
            chunk,
            nodes: n,
            strategy: plan.strategy,
            depth: plan.depth(),
            min_uplink: metrics.min_uplink_bytes,
            push,
            report,
            wall: started.elapsed(),
        })
    }
}

/// Runs one simulation (killing `kill.0` nodes at `kill.1`, chosen with seed `kill.2`), and
/// with `urgent` (the urgent set's bytes) also returns it as a push report.
fn simulate(
    plan: &Plan,
    topology: &Topology,
    cfg: SimConfig,
    kill: (usize, Duration, u64),
    urgent: Option<u64>,
) -> std::result::Result<(SimReport, Option<PushReport>), peertree::Error> {
    let (chunk, payload) = (cfg.chunk, cfg.payload);
    let mut sim = Sim::new(plan, Some(topology), cfg, Instant::now())?;
    if kill.0 > 0 {
        sim.kill(kill.1, pick_victims(plan, kill.0, kill.2));
    }
    let report = sim.run()?;
    let push =
        urgent.map(|urgent| push_report(&sim, plan, topology, &report, (payload, urgent, chunk)));
    Ok((report, push))
}

/// A simulated push as the push report a real one writes (`teesfs_node::report`), so that
/// `teesfs report` draws both with the same code. Times are simulated seconds; bytes are
/// payload bytes (the simulator does not compress).
/// `sizes` are the payload's, its urgent set's and a chunk's bytes.
pub fn push_report(
    sim: &Sim<'_>,
    plan: &Plan,
    topology: &Topology,
    report: &SimReport,
    sizes: (u64, u64, u64),
) -> PushReport {
    let (payload, urgent, chunk) = sizes;
    let host = |id: NodeId| plan.host(id).to_string();
    let secs = |d: Duration| d.as_secs_f64();
    let job: Vec<NodeId> = plan.ids().skip(1).collect();
    let per_node = job
        .iter()
        .map(|&id| NodeTimes {
            host: host(id),
            parent: plan.parent[id.index()].map_or_else(String::new, host),
            urgent_s: sim.done_at(id, Phase::Urgent).map(secs),
            all_s: sim.done_at(id, Phase::All).map(secs),
            group: plan.group[id.index()].map(|g| g.0 as usize),
            app_start_s: None,
        })
        .collect();
    let edges = plan
        .ids()
        .filter_map(|p| sim.relay(p).map(|r| (p, r)))
        .flat_map(|(p, r)| {
            r.child_bytes()
                .filter(|&(_, b)| b > 0)
                .map(move |(c, bytes)| EdgeBytes {
                    parent: host(p),
                    child: host(c),
                    bytes,
                })
        })
        .collect();
    let mut groups: Vec<GroupId> = plan.group.iter().flatten().copied().collect();
    groups.sort();
    groups.dedup();
    let uplinks = groups
        .into_iter()
        .map(|g| Uplink {
            group: g.0 as usize,
            proxy: topology.host(topology.group(g).proxy).to_string(),
            in_bytes: sim.group_uplink_in(g),
            out_bytes: sim.group_uplink_out(g),
        })
        .collect();
    let failures = sim
        .root_events()
        .filter_map(|(t, e)| {
            let (kind, p, c) = match e {
                Event::EdgeFailed(p, c) => (FailureKind::Failed, p, c),
                Event::Unreachable(p, c) => (FailureKind::Unreachable, p, c),
                Event::Liar(p, c) => (FailureKind::Liar, p, c),
                _ => return None,
            };
            Some(Failure {
                kind,
                parent: host(*p),
                child: host(*c),
                at_s: secs(t),
                reason: None,
                cause: None,
            })
        })
        .collect();
    let chunks = report.chunks;
    PushReport {
        version: 1,
        job: format!("sim-{}-{}", job.len(), plan.strategy),
        index: format!("{} payload, {} chunks", ByteSize::b(payload), chunks),
        strategy: plan.strategy.to_string(),
        root: host(plan.root),
        nodes: job.len(),
        urgent_chunks: usize::try_from(urgent.div_ceil(chunk.max(1)))
            .unwrap_or(chunks)
            .min(chunks),
        chunks,
        urgent_bytes: urgent,
        total_bytes: payload,
        streamed_bytes: payload,
        urgent_complete_s: Some(secs(report.urgent)),
        all_complete_s: Some(secs(report.deploy)),
        per_node,
        edges,
        uplinks,
        failures,
        learned_files: 0,
        rates: None,
    }
}

/// The machine: `nodes` hosts `cn00001...` in groups of 8, the first the proxy, with the
/// two upper levels for `two-level`.
fn machine_topology(machine: Machine, nodes: usize) -> Result<Topology> {
    let nodes = nodes.next_multiple_of(8);
    let mut toml = format!(
        "[[pattern]]\nnodes = \"cn[00001-{nodes:05}]\"\ngroup_size = 8\nproxy = \"first\"\n"
    );
    if machine == Machine::TwoLevel {
        toml.push_str("[[level]]\nname = \"supernode\"\nsize = 112\n");
        toml.push_str("[[level]]\nname = \"cabinet\"\nsize = 1344\n");
    }
    Topology::from_toml(&toml).map_err(|source| LabError::Sim {
        what: "building the modelled machine".into(),
        source,
    })
}

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The `topo` row of the same payload and size, if it was run.
pub(crate) fn topo_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter()
        .find(|t| t.strategy == Strategy::Topo && t.payload == r.payload && t.nodes == r.nodes)
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

/// The sweep as a Markdown table (ratios to the bound, to `topo` and to the minimum uplink).
pub fn table(rows: &[Row], kill: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| payload | nodes | strategy | depth | deploy | ÷ bound | ÷ topo | urgent | app started | uplink in | ÷ topo | ÷ min |{} events | wall |",
        if kill > 0 {
            " killed | failed edges | unreachable | incomplete |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}---:|---:|",
        if kill > 0 { "---:|---:|---:|---:|" } else { "" }
    );
    for r in rows {
        let t = topo_of(rows, r);
        let rep = &r.report;
        let failures = if kill > 0 {
            format!(
                " {} | {} | {} | {} |",
                rep.killed,
                rep.failed_edges.len(),
                rep.unreachable.len(),
                rep.incomplete.len()
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} ms | {:.2} | {} | {:.1} ms | {:.1} ms | {:.2} GiB | {} | {:.2} |{failures} {} | {:.1} s |",
            ByteSize::b(r.payload),
            r.nodes,
            r.strategy,
            r.depth,
            secs(rep.deploy) * 1e3,
            secs(rep.deploy) / secs(rep.lower_bound),
            ratio(secs(rep.deploy), t.map(|t| secs(t.report.deploy))),
            secs(rep.urgent) * 1e3,
            secs(rep.app_started) * 1e3,
            rep.uplink_in as f64 / (1u64 << 30) as f64,
            ratio(rep.uplink_in as f64, t.map(|t| t.report.uplink_in as f64)),
            rep.uplink_in as f64 / r.min_uplink.max(1) as f64,
            rep.events,
            secs(r.wall),
        );
    }
    out
}

/// The sweep as CSV, one row per simulation.
pub fn csv(rows: &[Row], machine: Machine) -> String {
    let mut out = String::from(
        "machine,payload_bytes,nodes,strategy,depth,deploy_s,urgent_s,root_done_s,lower_bound_s,\
         deploy_over_bound,deploy_over_topo,uplink_in_bytes,uplink_out_bytes,uplink_over_topo,\
         min_uplink_bytes,core_bytes,start_bytes,link_bytes,killed,failed_edges,unreachable,incomplete,\
         events,wall_s,app_started_s,chunk_bytes\n",
    );
    let machine = format!("{machine:?}").to_lowercase();
    for r in rows {
        let t = topo_of(rows, r);
        let rep = &r.report;
        let _ = writeln!(
            out,
            "{machine},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.4},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.6},{}",
            r.payload,
            r.nodes,
            r.strategy,
            r.depth,
            secs(rep.deploy),
            secs(rep.urgent),
            secs(rep.root_done),
            secs(rep.lower_bound),
            secs(rep.deploy) / secs(rep.lower_bound),
            ratio(secs(rep.deploy), t.map(|t| secs(t.report.deploy))),
            rep.uplink_in,
            rep.uplink_out,
            ratio(rep.uplink_in as f64, t.map(|t| t.report.uplink_in as f64)),
            r.min_uplink,
            rep.core_bytes,
            rep.start_bytes,
            rep.link_bytes,
            rep.killed,
            rep.failed_edges.len(),
            rep.unreachable.len(),
            rep.incomplete.len(),
            rep.events,
            secs(r.wall),
            secs(rep.app_started),
            r.chunk,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(chunk: Option<u64>) -> SweepSpec {
        SweepSpec {
            machine: Machine::Lab,
            nodes: vec![32],
            payloads: vec![16 << 20],
            chunk,
            strategies: vec![Strategy::Topo],
            width: 15,
            threshold: 512,
            seed: 0,
            kill: 0,
            kill_at: Duration::ZERO,
            setup: None,
            setup_cpu: None,
            cores: Some(0),
            latency: None,
            max_one_to_all: 17_560,
            first: 0,
            urgent: None,
            app_start: Duration::ZERO,
            unrated: false,
            reports: false,
        }
    }

    /// Without `--chunk` a payload is simulated in the chunks `teesfs publish` would cut it
    /// into (256 KiB for 16 MiB), and the CSV says which; a given size is kept, and smaller
    /// chunks hold each level back less.
    #[test]
    fn a_sweep_simulates_publishs_chunk_size_unless_told_and_says_which() {
        let auto = Sweep::new(spec(None)).expect("sweep");
        let row = auto.run(16 << 20, 32, Strategy::Topo).expect("run");
        assert_eq!(row.chunk, 256 << 10);
        let text = csv(std::slice::from_ref(&row), Machine::Lab);
        let (header, line) = text.split_once('\n').expect("two lines");
        assert!(header.ends_with(",chunk_bytes"), "{header}");
        assert!(line.trim_end().ends_with(",262144"), "{line}");
        let mib = Sweep::new(spec(Some(1 << 20))).expect("sweep");
        let big = mib.run(16 << 20, 32, Strategy::Topo).expect("run");
        assert_eq!(big.chunk, 1 << 20);
        assert!(
            row.report.deploy < big.report.deploy,
            "{:?} vs {:?}",
            row.report.deploy,
            big.report.deploy
        );
    }
}

//! Times one simulation: `cargo run --release -p peertree --example sim_scale -- NODES
//! STRATEGY [PAYLOAD_MIB]`, on the Tianhe-like machine (groups of 8, width 15).

use std::time::Instant;

use peertree::sim::{Network, Sim, SimConfig};
use peertree::topology::{ProxyPick, Topology};
use peertree::{PlanOptions, Strategy, plan};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(68_160);
    let strategy: Strategy = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(Strategy::Topo);
    let mib: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(16);
    let all: Vec<String> = (1..=n + 8).map(|i| format!("cn{i:05}")).collect();
    let topology = Topology::generated(&all, 8, ProxyPick::First).expect("valid cluster");
    let opts = PlanOptions {
        threshold: 0,
        ..PlanOptions::default()
    };
    let t = Instant::now();
    let p = plan(&topology, &all[4..4 + n], strategy, &opts).expect("plannable");
    let planned = t.elapsed();
    let cfg = SimConfig::new(Network::tianhe(), mib << 20, 1 << 20);
    let t = Instant::now();
    let mut sim = Sim::new(&p, Some(&topology), cfg, Instant::now()).expect("set up");
    let r = sim.run().expect("completes");
    println!(
        "{n} {strategy} {mib} MiB: deploy {:?} (lower bound {:?}, {:.2}x), uplink in {:.2} GiB, {} events, plan {:?}, sim {:?}",
        r.deploy,
        r.lower_bound,
        r.deploy.as_secs_f64() / r.lower_bound.as_secs_f64(),
        r.uplink_in as f64 / (1u64 << 30) as f64,
        r.events,
        planned,
        t.elapsed()
    );
}

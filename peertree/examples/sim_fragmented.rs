//! Simulates one fragmented job (a random quarter of the machine busy, busy proxies not
//! borrowable; the job takes the first NODES free nodes), on the Tianhe-like machine:
//! `cargo run --release -p peertree --example sim_fragmented -- NODES STRATEGY [PAYLOAD_MIB]`.

use std::collections::HashSet;
use std::time::Instant;

use peertree::sim::{Network, Sim, SimConfig};
use peertree::topology::{ProxyPick, Topology};
use peertree::{Availability, PlanOptions, Strategy, plan};
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1_080);
    let strategy: Strategy = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(Strategy::Topo);
    let mib: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(16);
    let machine = n * 4 / 3 + 64;
    let all: Vec<String> = (1..=machine).map(|i| format!("cn{i:05}")).collect();
    let topology = Topology::generated(&all, 8, ProxyPick::First).expect("valid cluster");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let busy: HashSet<usize> = sample(&mut rng, machine, machine / 4).into_iter().collect();
    let free: Vec<String> = (0..machine)
        .filter(|i| !busy.contains(i))
        .map(|i| all[i].clone())
        .collect();
    let opts = PlanOptions {
        threshold: 0,
        availability: Availability::Busy(busy.iter().map(|i| all[*i].clone()).collect()),
        ..PlanOptions::default()
    };
    let p = plan(&topology, &free[..n], strategy, &opts).expect("plannable");
    let cfg = SimConfig::new(Network::tianhe(), mib << 20, 1 << 20);
    let mut sim = Sim::new(&p, Some(&topology), cfg, Instant::now()).expect("set up");
    let r = sim.run().expect("completes");
    println!(
        "{n} {strategy} {mib} MiB fragmented: deploy {:?} ({:.2}x the bound), depth {}, uplink in {:.2} GiB",
        r.deploy,
        r.deploy.as_secs_f64() / r.lower_bound.as_secs_f64(),
        p.depth(),
        r.uplink_in as f64 / (1u64 << 30) as f64,
    );
}

//! A one-file push to the lab's shapes (groups x group size, `topo` with link rates) in the
//! scale model and pooled, with the simulator's fitted fixed costs: the simulator's side of
//! the validation in BENCHMARKS.md ("Fixed costs"). Printed, never a check. Run with
//! `cargo bench -p peertree --bench fit_fixed_costs`.

use std::time::{Duration, Instant};

use peertree::sim::{Network, Sim, SimConfig};
use peertree::topology::ProxyPick;
use peertree::{PlanOptions, Strategy, Topology};

fn main() {
    for (name, net) in [("lab-model", Network::lab_model()), ("lab", Network::lab())] {
        for (groups, size) in [(1usize, 2usize), (2, 4), (4, 4), (4, 8)] {
            let nodes: Vec<String> = (1..=groups * size).map(|i| format!("cn{i:04}")).collect();
            let topo = Topology::generated(&nodes, size, ProxyPick::First)
                .expect("topology")
                .with_links(net.link_rates());
            let plan = peertree::plan(&topo, &nodes, Strategy::Topo, &PlanOptions::default())
                .expect("plan");
            let mut cfg = SimConfig::new(net.clone(), 1024, 1024);
            cfg.app_start = Duration::from_millis(57);
            let mut sim = Sim::new(&plan, Some(&topo), cfg, Instant::now()).expect("set up");
            let r = sim.run().expect("completes");
            assert!(r.incomplete.is_empty(), "{:?}", r.incomplete);
            println!(
                "{name} {groups}x{size}: depth {}, root done {:.1} ms, app started {:.1} ms",
                plan.depth(),
                r.root_done.as_secs_f64() * 1e3,
                r.app_started.as_secs_f64() * 1e3
            );
        }
    }
}

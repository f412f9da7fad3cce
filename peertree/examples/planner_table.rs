//! Prints the planner comparison table of BENCHMARKS.md: depth, group-uplink bytes and
//! hop-bytes of every strategy at 15 to 68,160 nodes, as ratios to `topo` and to the
//! minimum, for a contiguous job and for a fragmented one (a quarter of the machine busy).
//!
//! Run: `cargo run --release -p peertree --example planner_table`

use std::time::Instant;

use peertree::topology::{ProxyPick, Topology};
use peertree::{Metrics, PlanOptions, Strategy, measure, plan};
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

const PAYLOAD: u64 = 16 << 20;
const SIZES: [usize; 6] = [15, 120, 1_080, 8_760, 17_560, 68_160];

fn main() {
    let machine = 68_160 * 4 / 3 + 8;
    let all: Vec<String> = (1..=machine).map(|i| format!("cn{i:05}")).collect();
    let topology = Topology::generated(&all, 8, ProxyPick::First).expect("valid cluster");
    let opts = PlanOptions {
        threshold: 0,
        ..PlanOptions::default()
    };

    // Contiguous jobs start at node 5, so the first and last groups are partial (Fig. 3 b).
    println!("### Contiguous job starting mid-group (cn00005 onwards), width 15, 16 MiB\n");
    table(&topology, &opts, |n| all[4..4 + n].to_vec());

    // Fragmented: a random quarter of the machine is busy; the job takes the next n free nodes.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let busy: std::collections::HashSet<usize> =
        sample(&mut rng, machine, machine / 4).into_iter().collect();
    let free: Vec<String> = (0..machine)
        .filter(|i| !busy.contains(i))
        .map(|i| all[i].clone())
        .collect();
    println!(
        "\n### Fragmented job (a random quarter of the machine busy, busy proxies not borrowable), width 15, 16 MiB\n"
    );
    let busy_opts = PlanOptions {
        availability: peertree::Availability::Busy(busy.iter().map(|i| all[*i].clone()).collect()),
        ..opts.clone()
    };
    table(&topology, &busy_opts, |n| free[..n].to_vec());
}

fn table(topology: &Topology, opts: &PlanOptions, job: impl Fn(usize) -> Vec<String>) {
    println!(
        "| nodes | strategy | depth | uplink in | ÷ topo | ÷ min | hop-bytes | ÷ topo | ÷ min | plan ms |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in SIZES {
        let nodes = job(n);
        let rows: Vec<(Strategy, Metrics, f64)> = Strategy::CONCRETE
            .into_iter()
            .map(|s| {
                let start = Instant::now();
                let p = plan(topology, &nodes, s, opts).expect("plannable");
                let ms = start.elapsed().as_secs_f64() * 1e3;
                (s, measure(&p, topology, PAYLOAD), ms)
            })
            .collect();
        let topo = &rows[0].1;
        for (s, m, ms) in &rows {
            println!(
                "| {n} | {s} | {} | {} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {ms:.1} |",
                m.depth,
                gib(m.uplink_bytes),
                m.uplink_bytes as f64 / topo.uplink_bytes as f64,
                m.uplink_bytes as f64 / m.min_uplink_bytes as f64,
                gib(m.hop_bytes),
                m.hop_bytes as f64 / topo.hop_bytes as f64,
                m.hop_bytes as f64 / m.min_hop_bytes as f64,
            );
        }
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}

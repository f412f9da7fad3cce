//! Planning time at the paper's scale (17,560 nodes) and a 68,160-node machine.
//! Goal: well under 100 ms per plan. Run: `cargo bench -p peertree --bench plan`.

use criterion::{Criterion, criterion_group, criterion_main};
use peertree::topology::{ProxyPick, Topology};
use peertree::{PlanOptions, Strategy, plan};

fn planning(c: &mut Criterion) {
    let all: Vec<String> = (1..=68_160).map(|i| format!("cn{i:05}")).collect();
    let topology = Topology::generated(&all, 8, ProxyPick::First).expect("valid cluster");
    let opts = PlanOptions::default();
    let mut group = c.benchmark_group("plan");
    group.sample_size(20);
    for n in [17_560usize, 68_160] {
        let nodes = &all[..n];
        for s in [
            Strategy::Topo,
            Strategy::TopoPaper,
            Strategy::Random,
            Strategy::Hostlist,
        ] {
            group.bench_function(format!("{s}/{n}"), |b| {
                b.iter(|| plan(&topology, nodes, s, &opts).expect("plannable"));
            });
        }
    }
    group.bench_function("hostlist-expand/68160", |b| {
        b.iter(|| peertree::hostlist::expand("cn[00001-68160]").expect("valid"));
    });
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);

//! Invariants every strategy must keep, over generated clusters and job shapes.

use std::collections::HashSet;

use peertree::topology::Topology;
use peertree::{Availability, LinkRates, PlanOptions, Role, Strategy, measure, plan};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

use crate::common::{cluster, cluster_with_levels};

/// A cluster, a job on it and planning options.
#[derive(Debug, Clone)]
pub struct Case {
    pub groups: usize,
    pub group_size: usize,
    pub levels: bool,
    pub job: Vec<usize>,
    pub busy: Vec<usize>,
    pub width: usize,
    pub seed: u64,
    /// Port, uplink and login link rates as multiples of a node's, when the topology
    /// carries rates.
    pub rates: Option<(u64, u64, u64)>,
}

impl Case {
    pub fn topology(&self) -> Topology {
        let links = self.rates.map(|(port, uplink, login)| LinkRates {
            node: 1000,
            port: port * 1000,
            uplink: uplink * 1000,
            login: login * 1000,
        });
        self.bare_topology().with_links(links)
    }

    fn bare_topology(&self) -> Topology {
        let n = self.groups * self.group_size;
        if self.levels {
            cluster_with_levels(
                n,
                self.group_size,
                &[self.group_size * 3, self.group_size * 9],
            )
        } else {
            cluster(n, self.group_size)
        }
    }

    pub fn nodes(&self) -> Vec<String> {
        self.job.iter().map(|i| format!("cn{:04}", i + 1)).collect()
    }

    pub fn options(&self) -> PlanOptions {
        let busy = self
            .busy
            .iter()
            .map(|i| format!("cn{:04}", i + 1))
            .collect();
        PlanOptions {
            width: self.width,
            seed: self.seed,
            threshold: 4,
            availability: Availability::Busy(busy),
            ..PlanOptions::default()
        }
    }
}

/// Jobs shaped like real allocations: contiguous ranges (often starting or ending inside a
/// group), random subsets (fragmented), and shuffled lists.
pub fn case() -> impl proptest::strategy::Strategy<Value = Case> {
    (
        1usize..30,
        1usize..10,
        any::<bool>(),
        1usize..18,
        any::<u64>(),
        proptest::option::of((1u64..10, 1u64..10, 1u64..10)),
    )
        .prop_flat_map(|(groups, group_size, levels, width, seed, rates)| {
            let n = groups * group_size;
            let contiguous = (0..n, 1..=n)
                .prop_map(move |(start, len)| (start..(start + len).min(n)).collect::<Vec<_>>());
            let all: Vec<usize> = (0..n).collect();
            let fragmented = proptest::sample::subsequence(all.clone(), 1..=n);
            let shuffled = proptest::sample::subsequence(all.clone(), 1..=n).prop_shuffle();
            let job = prop_oneof![contiguous, fragmented, shuffled];
            let busy = proptest::sample::subsequence(all, 0..=n / 2);
            (job, busy).prop_map(move |(job, busy)| Case {
                groups,
                group_size,
                levels,
                job,
                busy,
                width,
                seed,
                rates,
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_strategy_builds_a_valid_tree(case in case()) {
        let topology = case.topology();
        let nodes = case.nodes();
        let opts = case.options();
        for strategy in Strategy::CONCRETE.into_iter().chain([Strategy::Auto]) {
            let p = plan(&topology, &nodes, strategy, &opts).expect("plannable");
            let ctx = format!("{strategy} on {case:?}");
            // Links consistent, one root, everything reachable, no cycles, fan-out <= W.
            prop_assert_eq!(p.check(), Ok(()), "{}", ctx);
            prop_assert_eq!(p.host(p.root), "login");
            prop_assert_eq!(p.roles[p.root.index()], Role::Login);
            // Every job node exactly once, nothing else but login, storage and borrowed.
            let job: Vec<&str> = p.job_nodes().map(|id| p.host(id)).collect();
            prop_assert_eq!(job.len(), nodes.len(), "{}", &ctx);
            let set: HashSet<&str> = job.iter().copied().collect();
            prop_assert_eq!(set, nodes.iter().map(String::as_str).collect::<HashSet<_>>(), "{}", &ctx);
            for (i, role) in p.roles.iter().enumerate() {
                match role {
                    Role::Borrowed => {
                        let t = p.topo[i].expect("borrowed nodes are in the topology");
                        prop_assert!(topology.is_proxy(t), "{}", &ctx);
                        prop_assert!(!nodes.contains(&p.hosts[i]), "{}", &ctx);
                        prop_assert!(opts.availability.is_idle(&p.hosts[i]), "{}", &ctx);
                    }
                    Role::Storage => prop_assert_eq!(p.strategy, Strategy::Storage),
                    Role::Login | Role::Job => {}
                }
            }
            // Deterministic for a seed.
            let again = plan(&topology, &nodes, strategy, &opts).expect("plannable");
            prop_assert_eq!(&again, &p, "{}", &ctx);
            let m = measure(&p, &topology, 1000);
            prop_assert_eq!(m.depth, p.depth());
            prop_assert!(m.uplink_bytes >= m.min_uplink_bytes, "{}", &ctx);
            prop_assert_eq!(m.nodes_per_level.iter().sum::<usize>(), p.len());
        }
    }
}

#[test]
fn auto_reads_from_storage_at_or_below_the_threshold() {
    let topology = cluster(64, 8);
    let nodes = crate::common::names(1, 16);
    let mut opts = PlanOptions {
        threshold: 16,
        ..PlanOptions::default()
    };
    // Without a shared store the tree is the only way, whatever the threshold says.
    assert_eq!(
        plan(&topology, &nodes, Strategy::Auto, &opts)
            .expect("ok")
            .strategy,
        Strategy::Topo
    );
    opts.shared_storage = true;
    assert_eq!(
        plan(&topology, &nodes, Strategy::Auto, &opts)
            .expect("ok")
            .strategy,
        Strategy::Storage
    );
    opts.threshold = 15;
    assert_eq!(
        plan(&topology, &nodes, Strategy::Auto, &opts)
            .expect("ok")
            .strategy,
        Strategy::Topo
    );
    opts.threshold = 0;
    assert_eq!(
        plan(&topology, &nodes[..1], Strategy::Auto, &opts)
            .expect("ok")
            .strategy,
        Strategy::Topo
    );
}

#[test]
fn random_depends_on_the_seed_and_keeps_topo_papers_shape() {
    let topology = cluster(256, 8);
    let nodes = crate::common::names(1, 200);
    let a = plan(
        &topology,
        &nodes,
        Strategy::Random,
        &PlanOptions {
            seed: 1,
            ..PlanOptions::default()
        },
    )
    .expect("ok");
    let b = plan(
        &topology,
        &nodes,
        Strategy::Random,
        &PlanOptions {
            seed: 2,
            ..PlanOptions::default()
        },
    )
    .expect("ok");
    let t = plan(
        &topology,
        &nodes,
        Strategy::TopoPaper,
        &PlanOptions::default(),
    )
    .expect("ok");
    assert_ne!(a.parent, b.parent);
    let shape = |p: &peertree::Plan| measure(p, &topology, 1).nodes_per_level;
    assert_eq!(shape(&a), shape(&t));
    assert_eq!(shape(&b), shape(&t));
}

#[test]
fn hostlist_splits_into_width_spans() {
    let topology = cluster(64, 8);
    let nodes = crate::common::names(1, 40);
    let p = plan(
        &topology,
        &nodes,
        Strategy::Hostlist,
        &PlanOptions {
            width: 4,
            ..PlanOptions::default()
        },
    )
    .expect("ok");
    let heads: Vec<&str> = p.children[0].iter().map(|c| p.host(*c)).collect();
    assert_eq!(heads, ["cn0001", "cn0011", "cn0021", "cn0031"]);
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let topology = cluster(16, 8);
    let opts = PlanOptions::default();
    let err = plan(&topology, &["cn9999".to_owned()], Strategy::Topo, &opts).expect_err("unknown");
    assert!(err.to_string().contains("cn9999"));
    let twice = vec!["cn0001".to_owned(), "cn0001".to_owned()];
    assert!(plan(&topology, &twice, Strategy::Topo, &opts).is_err());
    assert!(plan(&topology, &[], Strategy::Topo, &opts).is_err());
    let zero = PlanOptions {
        width: 0,
        ..PlanOptions::default()
    };
    assert!(plan(&topology, &["cn0001".to_owned()], Strategy::Topo, &zero).is_err());
}

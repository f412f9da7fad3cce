//! Shared fixtures: generated clusters and job shapes.

use peertree::hostlist;
use peertree::topology::{Level, ProxyPick, Topology};

/// `cn[0001-N]` in groups of `size`, first member the proxy.
pub fn cluster(n: usize, size: usize) -> Topology {
    Topology::generated(&names(1, n), size, ProxyPick::First).expect("valid cluster")
}

/// Like [`cluster`], with super nodes and cabinets for the hop model.
pub fn cluster_with_levels(n: usize, size: usize, levels: &[usize]) -> Topology {
    let groups: Vec<(String, Vec<String>)> = names(1, n)
        .chunks(size)
        .map(|c| (c[0].clone(), c.to_vec()))
        .collect();
    let levels = levels
        .iter()
        .enumerate()
        .map(|(i, s)| Level {
            name: format!("l{i}"),
            size: *s,
        })
        .collect();
    Topology::from_groups(&groups, levels).expect("valid cluster")
}

/// `cn{first..first+n}` with four-digit padding.
pub fn names(first: usize, n: usize) -> Vec<String> {
    (first..first + n).map(|i| format!("cn{i:04}")).collect()
}

/// Expands an expression that must be valid.
pub fn hosts(expr: &str) -> Vec<String> {
    hostlist::expand(expr).expect("valid hostlist")
}

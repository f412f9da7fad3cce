//! The baselines TEES is measured against: random P2P, Slurm's hostlist tree, one-to-all
//! and shared storage. They are deliberately blind to groups.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{Builder, Strategy, plan};
use crate::error::Result;
use crate::plan::NodeId;

/// The paper's random P2P: `topo-paper`'s shape, job nodes shuffled into its positions.
///
/// Positions are `topo-paper`'s hosts in breadth-first order; when it borrowed proxies the
/// shape has more positions than the job has nodes, and the last ones (leaves, since a
/// breadth-first suffix holds no parent of an earlier host) are dropped.
pub(super) fn random(b: &mut Builder<'_>, nodes: &[String]) -> Result<()> {
    let shape = plan(b.topology, nodes, Strategy::TopoPaper, b.opts)?;
    let order = shape.bfs();
    let mut position = vec![usize::MAX; shape.len()];
    for (i, id) in order.iter().enumerate() {
        position[id.index()] = i;
    }
    let mut shuffled = b.job.clone();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(b.opts.seed));
    // Position 0 is the root; positions 1..=n take the shuffled job nodes.
    let at = |pos: usize| {
        if pos == 0 {
            b.root()
        } else {
            shuffled[pos - 1]
        }
    };
    let edges: Vec<(NodeId, NodeId)> = order[1..=shuffled.len()]
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let p = shape.parent[id.index()].expect("non-root hosts have a parent");
            (at(position[p.index()]), at(i + 1))
        })
        .collect();
    for (p, c) in edges {
        b.attach(p, c);
    }
    Ok(())
}

/// Slurm's tree forwarding: the list is cut into `width` spans as even as possible; the
/// first host of each span is a child and forwards to the rest of its span the same way.
pub(super) fn hostlist(b: &mut Builder<'_>) {
    let job = b.job.clone();
    let mut stack = vec![(b.root(), job.as_slice())];
    let w = b.width();
    while let Some((parent, list)) = stack.pop() {
        if list.is_empty() {
            continue;
        }
        let k = w.min(list.len());
        let (q, r) = (list.len() / k, list.len() % k);
        let mut start = 0;
        for i in 0..k {
            let len = q + usize::from(i < r);
            let span = &list[start..start + len];
            start += len;
            b.attach(parent, span[0]);
            stack.push((span[0], &span[1..]));
        }
    }
}

/// One-to-all from the login node.
pub(super) fn flat(b: &mut Builder<'_>) {
    for i in 0..b.job.len() {
        let c = b.job[i];
        b.attach(b.root(), c);
    }
}

/// Login writes to the storage node (host 1); every job node reads from it.
pub(super) fn storage(b: &mut Builder<'_>) {
    let storage = NodeId(1);
    b.attach(b.root(), storage);
    for i in 0..b.job.len() {
        let c = b.job[i];
        b.attach(storage, c);
    }
}

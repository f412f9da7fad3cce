//! What a plan costs on the network: depth, fan-out, group-uplink bytes and hop-bytes.
//!
//! **Uplink bytes.** Every byte entering or leaving a group crosses its proxy's uplink. An
//! edge from a host outside group G to a host inside it carries the payload over G's
//! uplink inbound; the reverse, outbound. [`Metrics::uplink_bytes`] is the inbound total,
//! the paper's "network load"; the minimum, [`Metrics::min_uplink_bytes`], is the payload
//! once per group that holds a job node.
//!
//! **Hop model** ([`hops`]). Hosts sit in a tree of switches: a group's members share one
//! segment behind its proxy; proxies hang under the units of the upper levels (super node,
//! cabinet, ...), whose top is the core, where the login and storage nodes sit. With `k`
//! upper levels:
//! - same group: 1 (a slave and its own proxy, or two members of one group);
//! - different groups: `exit(a) + exit(b) + 2 + 2 * (levels where their units differ)`,
//!   where `exit` is 0 for a proxy and 1 for a slave (its traffic goes through the proxy);
//!   so proxy to proxy 2, slave to foreign slave 4 when `k = 0`;
//! - login or storage to a compute host: `exit + 2 + k` (login to proxy 2 when `k = 0`);
//! - login to storage: 2.
//!
//! Hop-bytes is the sum over tree edges of payload x hops; [`Metrics::min_hop_bytes`] is a
//! lower bound no plan can beat. Pure arithmetic, no I/O.

use crate::plan::{NodeId, Plan};
use crate::topology::{GroupId, TopoId, Topology};

/// Bytes over one group's uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupTraffic {
    /// The group.
    pub group: GroupId,
    /// Payload bytes entering the group.
    pub in_bytes: u64,
    /// Payload bytes leaving the group.
    pub out_bytes: u64,
}

/// A plan's costs for one payload size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// Payload size in bytes.
    pub payload: u64,
    /// Job nodes in the plan.
    pub job_nodes: usize,
    /// Groups holding at least one job node.
    pub groups: usize,
    /// Edges on the longest root-to-leaf path.
    pub depth: u32,
    /// Most children of any host.
    pub max_fanout: usize,
    /// Hosts at each depth, root first.
    pub nodes_per_level: Vec<usize>,
    /// `fanout_histogram[c]` hosts have exactly `c` children.
    pub fanout_histogram: Vec<usize>,
    /// Traffic of every group the plan touches, in topology order.
    pub group_uplink: Vec<GroupTraffic>,
    /// Bytes entering groups, summed over groups (the paper's network load).
    pub uplink_bytes: u64,
    /// Bytes leaving groups, summed over groups.
    pub uplink_out_bytes: u64,
    /// The least inbound uplink traffic any plan can have: payload x groups.
    pub min_uplink_bytes: u64,
    /// Sum over edges of payload x hops.
    pub hop_bytes: u64,
    /// A lower bound on hop-bytes for any plan of this job: every job node receives over at
    /// least one hop, and each group's first entry takes at least two (payload x (nodes +
    /// groups)).
    pub min_hop_bytes: u64,
    /// `edges_by_hops[h]` edges span `h` hops.
    pub edges_by_hops: Vec<usize>,
}

/// Hops between two hosts of a plan under the model in the module docs.
pub fn hops(plan: &Plan, topology: &Topology, a: NodeId, b: NodeId) -> u32 {
    if a == b {
        return 0;
    }
    hops_between(topology, plan.topo[a.index()], plan.topo[b.index()])
}

/// Hops between two distinct hosts given their topology places (`None`: login or storage,
/// on the core).
pub fn hops_between(topology: &Topology, a: Option<TopoId>, b: Option<TopoId>) -> u32 {
    let k = topology.levels().len() as u32;
    let exit = |t| u32::from(!topology.is_proxy(t));
    match (a, b) {
        (None, None) => 2,
        (None, Some(t)) | (Some(t), None) => exit(t) + 2 + k,
        (Some(x), Some(y)) => {
            let (gx, gy) = (topology.group_of(x), topology.group_of(y));
            if gx == gy {
                1
            } else {
                exit(x) + exit(y) + 2 + 2 * topology.levels_apart(gx, gy)
            }
        }
    }
}

/// Measures `plan` for a payload of `payload` bytes.
pub fn measure(plan: &Plan, topology: &Topology, payload: u64) -> Metrics {
    let depths = plan.depths();
    let depth = depths
        .iter()
        .copied()
        .filter(|d| *d != u32::MAX)
        .max()
        .unwrap_or(0);
    let mut nodes_per_level = vec![0; depth as usize + 1];
    for d in depths.iter().filter(|d| **d != u32::MAX) {
        nodes_per_level[*d as usize] += 1;
    }
    let max_fanout = plan.max_fanout();
    let mut fanout_histogram = vec![0; max_fanout + 1];
    for c in &plan.children {
        fanout_histogram[c.len()] += 1;
    }

    let ngroups = topology.groups().len();
    let mut touched = vec![false; ngroups];
    let mut inb = vec![0u64; ngroups];
    let mut outb = vec![0u64; ngroups];
    let mut job_groups = vec![false; ngroups];
    let mut job_nodes = 0;
    for (i, t) in plan.topo.iter().enumerate() {
        if let Some(t) = t {
            let g = topology.group_of(*t).0 as usize;
            touched[g] = true;
            if plan.roles[i] == crate::plan::Role::Job {
                job_groups[g] = true;
                job_nodes += 1;
            }
        }
    }
    let mut hop_bytes = 0u64;
    let mut edges_by_hops = Vec::new();
    for (p, c) in plan.edges() {
        let h = hops(plan, topology, p, c);
        hop_bytes += payload * u64::from(h);
        if edges_by_hops.len() <= h as usize {
            edges_by_hops.resize(h as usize + 1, 0);
        }
        edges_by_hops[h as usize] += 1;
        let gp = plan.topo[p.index()].map(|t| topology.group_of(t));
        let gc = plan.topo[c.index()].map(|t| topology.group_of(t));
        if gp != gc {
            if let Some(g) = gc {
                inb[g.0 as usize] += payload;
            }
            if let Some(g) = gp {
                outb[g.0 as usize] += payload;
            }
        }
    }
    let groups = job_groups.iter().filter(|g| **g).count();
    let group_uplink = (0..ngroups)
        .filter(|g| touched[*g])
        .map(|g| GroupTraffic {
            group: GroupId(g as u32),
            in_bytes: inb[g],
            out_bytes: outb[g],
        })
        .collect();
    Metrics {
        payload,
        job_nodes,
        groups,
        depth,
        max_fanout,
        nodes_per_level,
        fanout_histogram,
        group_uplink,
        uplink_bytes: inb.iter().sum(),
        uplink_out_bytes: outb.iter().sum(),
        min_uplink_bytes: payload * groups as u64,
        hop_bytes,
        min_hop_bytes: payload * (job_nodes + groups) as u64,
        edges_by_hops,
    }
}

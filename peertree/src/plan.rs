//! The distribution tree: who sends the layer to whom.
//!
//! A [`Plan`] is a host table plus parent/children links, rooted at the login node. It is
//! what strategies produce, what [`crate::metrics`] measures, and what the relay and the
//! simulator walk: a node needs only [`Plan::subtree`] of itself to forward. Node ids are
//! dense indices into the host table, so per-node state elsewhere can live in `Vec`s.

use crate::error::{Error, Result};
use crate::strategy::Strategy;
use crate::topology::{GroupId, TopoId};

/// A node of a plan: index into [`Plan::hosts`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The id as a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a host is doing in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The login node, the root: it holds the layer.
    Login,
    /// The shared-storage node (only in `storage` plans).
    Storage,
    /// A node of the job.
    Job,
    /// An idle proxy outside the job borrowed to relay to its group; release it afterwards.
    Borrowed,
}

/// A distribution tree rooted at the login node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The strategy that built the tree (`auto` already resolved).
    pub strategy: Strategy,
    /// The tree width the strategy honoured (`flat` and `storage` ignore it).
    pub width: usize,
    /// The login node; always `NodeId(0)`.
    pub root: NodeId,
    /// Host names; the index is the [`NodeId`].
    pub hosts: Vec<String>,
    /// Role of each host.
    pub roles: Vec<Role>,
    /// Each host's place in the topology; `None` for the login and storage nodes.
    pub topo: Vec<Option<TopoId>>,
    /// Each host's group in the topology; `None` where `topo` is.
    pub group: Vec<Option<GroupId>>,
    /// Parent of each host; `None` only for the root.
    pub parent: Vec<Option<NodeId>>,
    /// Children of each host, in sending order.
    pub children: Vec<Vec<NodeId>>,
    /// Proxies borrowed from outside the job.
    pub borrowed: Vec<NodeId>,
    /// Job nodes that could not be placed under their own group's proxy.
    pub orphans: Vec<NodeId>,
    /// The rate each host's parent sends to it at, in bits per second: its share of the
    /// parent's link, no more than the host's own link ([`crate::LinkRates::edge_rates`]).
    /// `None` for the root, and for every host when the topology has no link rates (then
    /// the transport shares the links as it can).
    pub rate: Vec<Option<u64>>,
}

impl Plan {
    /// Number of hosts in the tree (login, storage and borrowed nodes included).
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// True if the plan holds no host (never, for a built plan).
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The name of a host.
    pub fn host(&self, id: NodeId) -> &str {
        &self.hosts[id.index()]
    }

    /// Finds a host by name (linear; build a map for repeated lookups).
    pub fn find(&self, host: &str) -> Option<NodeId> {
        self.hosts
            .iter()
            .position(|h| h == host)
            .map(|i| NodeId(i as u32))
    }

    /// Ids of the job's own nodes, in job order.
    pub fn job_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ids().filter(|id| self.roles[id.index()] == Role::Job)
    }

    /// All ids.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + use<> {
        (0..self.hosts.len() as u32).map(NodeId)
    }

    /// Every `(parent, child)` edge, in host order of the child.
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.parent
            .iter()
            .enumerate()
            .filter_map(|(c, p)| p.map(|p| (p, NodeId(c as u32))))
    }

    /// `node` and everything below it, parents before children (breadth first).
    pub fn subtree(&self, node: NodeId) -> Vec<NodeId> {
        let mut out = vec![node];
        let mut i = 0;
        while i < out.len() {
            out.extend_from_slice(&self.children[out[i].index()]);
            i += 1;
        }
        out
    }

    /// Every host reachable from the root, breadth first.
    pub fn bfs(&self) -> Vec<NodeId> {
        self.subtree(self.root)
    }

    /// Depth of each host (root 0). Hosts not reachable from the root get `u32::MAX`.
    pub fn depths(&self) -> Vec<u32> {
        let mut depth = vec![u32::MAX; self.len()];
        depth[self.root.index()] = 0;
        for id in self.bfs() {
            let d = depth[id.index()];
            for c in &self.children[id.index()] {
                depth[c.index()] = d + 1;
            }
        }
        depth
    }

    /// Edges on the longest root-to-leaf path.
    pub fn depth(&self) -> u32 {
        self.depths()
            .into_iter()
            .filter(|d| *d != u32::MAX)
            .max()
            .unwrap_or(0)
    }

    /// The most children any host has.
    pub fn max_fanout(&self) -> usize {
        self.children.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Checks the tree's invariants: consistent links, one root, everything reachable, no
    /// cycles, fan-out within `width` for tree strategies. The error says what is wrong.
    pub fn check(&self) -> Result<()> {
        let n = self.len();
        if [
            self.roles.len(),
            self.topo.len(),
            self.group.len(),
            self.parent.len(),
            self.children.len(),
        ]
        .iter()
        .any(|l| *l != n)
        {
            return Err(Error::InvalidPlan(
                "per-host tables differ in length".into(),
            ));
        }
        if self.root != NodeId(0) || self.roles[0] != Role::Login || self.parent[0].is_some() {
            return Err(Error::InvalidPlan(
                "the root must be host 0, the login node, without a parent".into(),
            ));
        }
        for (p, c) in self.edges() {
            if !self.children[p.index()].contains(&c) {
                return Err(Error::InvalidPlan(format!(
                    "{} lists parent {} that does not list it",
                    self.host(c),
                    self.host(p)
                )));
            }
        }
        let links: usize = self.children.iter().map(Vec::len).sum();
        if links != n - 1 || self.edges().count() != n - 1 {
            return Err(Error::InvalidPlan(format!(
                "{n} hosts but {links} child links"
            )));
        }
        let mut seen = vec![false; n];
        let mut stack = vec![self.root];
        let mut reached = 0;
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id.index()], true) {
                return Err(Error::InvalidPlan(format!(
                    "{} is reached twice (cycle)",
                    self.host(id)
                )));
            }
            reached += 1;
            stack.extend_from_slice(&self.children[id.index()]);
        }
        if reached != n {
            return Err(Error::InvalidPlan(format!(
                "only {reached} of {n} hosts are reachable from the root"
            )));
        }
        let bounded = !matches!(self.strategy, Strategy::Flat | Strategy::Storage);
        if bounded && self.max_fanout() > self.width {
            return Err(Error::InvalidPlan(format!(
                "fan-out {} exceeds width {}",
                self.max_fanout(),
                self.width
            )));
        }
        Ok(())
    }

    /// The same nodes with the root sending straight to every job node, and the storage
    /// node (which runs no daemon) out of the tree: how a `storage` plan is carried out,
    /// where nodes read chunks from the shared file system and the root only tells each
    /// node to start (and, for a probe, asks each to answer).
    pub fn flat_without_storage(&self) -> Plan {
        let mut p = self.clone();
        let root = p.root;
        let storage: Vec<NodeId> = p
            .ids()
            .filter(|&id| p.roles[id.index()] == Role::Storage)
            .collect();
        for c in p.children.iter_mut() {
            c.clear();
        }
        for id in p.ids() {
            if storage.contains(&id) {
                p.parent[id.index()] = None;
            } else if id != root {
                p.parent[id.index()] = Some(root);
                p.children[root.index()].push(id);
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use crate::{PlanOptions, Role, Strategy, Topology};

    #[test]
    fn a_storage_plan_runs_flat_from_the_root_without_the_storage_node() {
        let cluster: Vec<String> = (1..=8).map(|i| format!("cn{i:02}")).collect();
        let topo =
            Topology::generated(&cluster, 4, crate::topology::ProxyPick::First).expect("topology");
        let opts = PlanOptions {
            shared_storage: true,
            threshold: 100,
            ..PlanOptions::default()
        };
        let plan = crate::plan(&topo, &cluster, Strategy::Storage, &opts).expect("plan");
        let flat = plan.flat_without_storage();
        let storage: Vec<_> = flat
            .ids()
            .filter(|&id| flat.roles[id.index()] == Role::Storage)
            .collect();
        for id in flat.ids() {
            if id == flat.root {
                assert_eq!(
                    flat.children[id.index()].len(),
                    8,
                    "the root feeds every job node"
                );
            } else if storage.contains(&id) {
                assert_eq!(flat.parent[id.index()], None);
                assert!(flat.children[id.index()].is_empty());
            } else {
                assert_eq!(flat.parent[id.index()], Some(flat.root));
                assert!(flat.children[id.index()].is_empty());
            }
        }
        assert_eq!(flat.len(), plan.len());
    }
}

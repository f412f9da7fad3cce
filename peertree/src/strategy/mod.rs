//! Tree-building strategies: the paper's topology-aware tree and the baselines it is
//! measured against.
//!
//! Every strategy returns a [`Plan`] rooted at the login node, holding every job node
//! exactly once, deterministic for a given seed. Tree strategies give no host more than
//! `width` children; `flat` and `storage` are one-to-all by definition. Strategies see only
//! host names and the [`Topology`]; they never measure anything (see [`crate::metrics`]).

mod baseline;
mod topo;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::plan::{NodeId, Plan, Role};
use crate::topology::{GroupId, TopoId, Topology};

/// How to build the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Topology-aware, improved: every group in the job is entered exactly once (a group
    /// without its proxy borrows it when idle, or gets a deputy from its own members), no
    /// host feeds more streams than its links carry at a node's rate, and proxies are laid
    /// out so that a proxy's children are its neighbours in topology order.
    Topo,
    /// Topology-aware exactly as the paper's Algorithm 1 (proxies breadth first, slaves
    /// under their proxy, borrowed proxies, orphans at the last level).
    TopoPaper,
    /// The paper's random P2P: the shape of `topo-paper` with the job's nodes shuffled.
    Random,
    /// Slurm's tree forwarding (sbcast's way): the host list split into `width` spans,
    /// recursively, blind to groups.
    Hostlist,
    /// One-to-all: the login node sends to every node.
    Flat,
    /// Shared storage: the login node writes once to the storage node; every node reads
    /// from it.
    Storage,
    /// `storage` at or below [`PlanOptions::threshold`] nodes, `topo` above; threshold 0
    /// means always `topo`.
    Auto,
}

impl Strategy {
    /// Every concrete strategy (all but `auto`), in report order.
    pub const CONCRETE: [Strategy; 6] = [
        Strategy::Topo,
        Strategy::TopoPaper,
        Strategy::Random,
        Strategy::Hostlist,
        Strategy::Flat,
        Strategy::Storage,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Topo => "topo",
            Strategy::TopoPaper => "topo-paper",
            Strategy::Random => "random",
            Strategy::Hostlist => "hostlist",
            Strategy::Flat => "flat",
            Strategy::Storage => "storage",
            Strategy::Auto => "auto",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Strategy::CONCRETE
            .into_iter()
            .chain([Strategy::Auto])
            .find(|st| st.name() == s)
            .ok_or_else(|| Error::UnknownStrategy(s.to_owned()))
    }
}

/// Which nodes outside the job may be borrowed as proxies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Availability {
    /// Every proxy outside the job is idle.
    #[default]
    AllIdle,
    /// Every proxy outside the job is idle except these hosts.
    Busy(HashSet<String>),
    /// Only these hosts are idle.
    Idle(HashSet<String>),
}

impl Availability {
    /// True if `host` may be borrowed.
    pub fn is_idle(&self, host: &str) -> bool {
        match self {
            Availability::AllIdle => true,
            Availability::Busy(busy) => !busy.contains(host),
            Availability::Idle(idle) => idle.contains(host),
        }
    }
}

/// Parameters of a plan besides the job's nodes and the strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Most children per host (15 on Tianhe: 7 slaves + 8 proxies).
    pub width: usize,
    /// Seed for `random`.
    pub seed: u64,
    /// `auto` uses `storage` for jobs of at most this many nodes (0: always the tree), if
    /// [`PlanOptions::shared_storage`].
    pub threshold: usize,
    /// Whether the nodes can read the layer from a shared store. Without one, `auto` always
    /// plans the tree: picking shared storage would only fail later.
    pub shared_storage: bool,
    /// Name of the login node, the root.
    pub login: String,
    /// Name of the shared-storage node (`storage` plans only).
    pub storage: String,
    /// Which proxies outside the job may be borrowed.
    pub availability: Availability,
    /// The mean stored size of the payload's chunks in bytes, when the planner is told the
    /// payload (`teesfs push` is): `topo` hangs an orphan group as a chain when chunks are
    /// large enough that links, not each chunk's CPU, bound the push ([`crate::strategy`]'s
    /// `hang_orphans`). `None`: unknown, planned as for small chunks.
    pub mean_chunk: Option<u64>,
    /// Most hosts the login node feeds in a `topo` plan: how many copies of the payload
    /// leave it (at least 1; never more than its link carries at a node's rate). `None`:
    /// [`DEFAULT_LOGIN_COPIES`] where the plan has link rates (the other groups then ride
    /// on members' spare uploads), the Tianhe shape's uplink fan-out without them.
    pub login_copies: Option<usize>,
}

/// Copies of the payload the login node sends where the plan knows its link rates and the
/// site did not say (`[tree] login_copies`): one. A login node is shared by its users and
/// by every job's push, and a tree passes the payload on at a node's rate anyway; the
/// other groups take it from members of the groups before them. Measured in the lab
/// (BENCHMARKS.md, "The login node's copies").
pub const DEFAULT_LOGIN_COPIES: usize = 1;

impl PlanOptions {
    /// The most hosts the login node may feed in a plan without link rates:
    /// [`PlanOptions::login_copies`], unbounded when unset.
    pub(crate) fn login_cap(&self) -> usize {
        self.login_copies.unwrap_or(usize::MAX)
    }

    /// The most hosts the login node may feed in a plan with link rates:
    /// [`PlanOptions::login_copies`], [`DEFAULT_LOGIN_COPIES`] when unset.
    pub(crate) fn rated_login_cap(&self) -> usize {
        self.login_copies.unwrap_or(DEFAULT_LOGIN_COPIES)
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            width: 15,
            seed: 0,
            threshold: 512,
            shared_storage: false,
            login: "login".into(),
            storage: "storage".into(),
            availability: Availability::AllIdle,
            mean_chunk: None,
            login_copies: None,
        }
    }
}

/// Builds the distribution tree for a job.
///
/// `nodes` are the job's hosts, each once, all in `topology`. Errors if a node is unknown,
/// listed twice, named like the login or storage node, or if the width is 0.
pub fn plan(
    topology: &Topology,
    nodes: &[String],
    strategy: Strategy,
    opts: &PlanOptions,
) -> Result<Plan> {
    let strategy = match strategy {
        Strategy::Auto
            if opts.shared_storage && opts.threshold > 0 && nodes.len() <= opts.threshold =>
        {
            Strategy::Storage
        }
        Strategy::Auto => Strategy::Topo,
        s => s,
    };
    let mut b = Builder::new(topology, nodes, opts, strategy)?;
    match strategy {
        Strategy::Topo => topo::improved(&mut b),
        Strategy::TopoPaper => topo::paper(&mut b),
        Strategy::Random => baseline::random(&mut b, nodes)?,
        Strategy::Hostlist => baseline::hostlist(&mut b),
        Strategy::Flat => baseline::flat(&mut b),
        Strategy::Storage => baseline::storage(&mut b),
        Strategy::Auto => unreachable!("auto is resolved above"),
    }
    Ok(b.finish())
}

/// A plan under construction, shared by all strategies.
#[derive(Clone)]
pub(crate) struct Builder<'a> {
    topology: &'a Topology,
    opts: &'a PlanOptions,
    strategy: Strategy,
    hosts: Vec<String>,
    roles: Vec<Role>,
    topo: Vec<Option<TopoId>>,
    parent: Vec<Option<NodeId>>,
    children: Vec<Vec<NodeId>>,
    depth: Vec<u32>,
    borrowed: Vec<NodeId>,
    orphans: Vec<NodeId>,
    /// The job's nodes in job order (ids 1.. or 2.. when a storage node is present).
    job: Vec<NodeId>,
}

impl<'a> Builder<'a> {
    fn new(
        topology: &'a Topology,
        nodes: &[String],
        opts: &'a PlanOptions,
        strategy: Strategy,
    ) -> Result<Self> {
        if opts.width == 0 {
            return Err(Error::Request("tree width must be at least 1".into()));
        }
        if opts.login_copies == Some(0) {
            return Err(Error::Request(
                "login copies (--login-copies, [tree] login_copies) must be at least 1: the login node sends the payload at least once"
                    .into(),
            ));
        }
        if nodes.is_empty() {
            return Err(Error::Request("the job has no nodes".into()));
        }
        let extra = 1 + usize::from(strategy == Strategy::Storage);
        let cap = nodes.len() + extra;
        let mut b = Builder {
            topology,
            opts,
            strategy,
            hosts: Vec::with_capacity(cap),
            roles: Vec::with_capacity(cap),
            topo: Vec::with_capacity(cap),
            parent: Vec::with_capacity(cap),
            children: Vec::with_capacity(cap),
            depth: Vec::with_capacity(cap),
            borrowed: Vec::new(),
            orphans: Vec::new(),
            job: Vec::with_capacity(nodes.len()),
        };
        b.push(opts.login.clone(), Role::Login, None);
        b.depth[0] = 0;
        if strategy == Strategy::Storage {
            b.push(opts.storage.clone(), Role::Storage, None);
        }
        let mut seen = vec![false; topology.len()];
        for host in nodes {
            let t = topology
                .lookup(host)
                .ok_or_else(|| Error::UnknownNode { host: host.clone() })?;
            if std::mem::replace(&mut seen[t.0 as usize], true) {
                return Err(Error::Request(format!("node `{host}` is listed twice")));
            }
            let id = b.push(host.clone(), Role::Job, Some(t));
            b.job.push(id);
        }
        for special in [&opts.login, &opts.storage] {
            if topology.lookup(special).is_some_and(|t| seen[t.0 as usize]) {
                return Err(Error::Request(format!(
                    "`{special}` is both the login/storage node and a job node"
                )));
            }
        }
        Ok(b)
    }

    fn push(&mut self, host: String, role: Role, topo: Option<TopoId>) -> NodeId {
        let id = NodeId(self.hosts.len() as u32);
        self.hosts.push(host);
        self.roles.push(role);
        self.topo.push(topo);
        self.parent.push(None);
        self.children.push(Vec::new());
        self.depth.push(u32::MAX);
        id
    }

    /// Adds an idle proxy from outside the job.
    fn borrow(&mut self, t: TopoId) -> NodeId {
        let id = self.push(self.topology.host(t).to_owned(), Role::Borrowed, Some(t));
        self.borrowed.push(id);
        id
    }

    fn attach(&mut self, parent: NodeId, child: NodeId) {
        debug_assert!(self.parent[child.index()].is_none(), "attached twice");
        self.parent[child.index()] = Some(parent);
        self.children[parent.index()].push(child);
        self.depth[child.index()] = self.depth[parent.index()] + 1;
    }

    fn root(&self) -> NodeId {
        NodeId(0)
    }

    fn width(&self) -> usize {
        self.opts.width
    }

    fn spare(&self, id: NodeId) -> usize {
        self.width().saturating_sub(self.children[id.index()].len())
    }

    /// Placed hosts in breadth-first order.
    fn bfs(&self) -> Vec<NodeId> {
        let mut out = vec![self.root()];
        let mut i = 0;
        while i < out.len() {
            out.extend_from_slice(&self.children[out[i].index()]);
            i += 1;
        }
        out
    }

    fn finish(self) -> Plan {
        let group: Vec<Option<GroupId>> = self
            .topo
            .iter()
            .map(|t| t.map(|t| self.topology.group_of(t)))
            .collect();
        let rate = match self.topology.links() {
            Some(links) => {
                let proxy: Vec<bool> = self
                    .topo
                    .iter()
                    .map(|t| t.is_some_and(|t| self.topology.is_proxy(t)))
                    .collect();
                links.edge_rates(&self.parent, &self.children, &proxy, &group)
            }
            None => vec![None; self.hosts.len()],
        };
        Plan {
            strategy: self.strategy,
            width: self.opts.width,
            root: NodeId(0),
            hosts: self.hosts,
            roles: self.roles,
            group,
            topo: self.topo,
            parent: self.parent,
            children: self.children,
            borrowed: self.borrowed,
            orphans: self.orphans,
            rate,
        }
    }
}

/// Hands out parents with spare capacity breadth first; hosts attached through it become
/// candidates themselves, after the ones already queued.
pub(crate) struct Cursor {
    queue: VecDeque<NodeId>,
}

impl Cursor {
    fn new(seed: impl IntoIterator<Item = NodeId>) -> Self {
        Cursor {
            queue: seed.into_iter().collect(),
        }
    }

    /// Attaches `child` under the first queued host with room; `child` joins the queue.
    fn place(&mut self, b: &mut Builder<'_>, child: NodeId) {
        while let Some(&front) = self.queue.front() {
            if b.spare(front) > 0 {
                b.attach(front, child);
                self.queue.push_back(child);
                return;
            }
            self.queue.pop_front();
        }
        // Only reachable when the seed was empty: start from the whole tree.
        self.queue = b.bfs().into();
        self.place(b, child);
    }
}

/// Builds a lookup from host name to plan id for callers that need many lookups.
pub fn host_index(plan: &Plan) -> HashMap<&str, NodeId> {
    plan.hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), NodeId(i as u32)))
        .collect()
}

//! The event loop: one binary heap of timed events, one [`Relay`] per started host, and
//! the glue that turns the relays' `poll_*` outputs into modelled transfers and their
//! arrivals back into `handle_*` calls.
//!
//! Timers are checked lazily: every timeout the relay can create after an input at `t` is
//! at least `t + min(heartbeat, deadline)` away, so after an input the node gets a check at
//! that time at the latest, and the check asks [`Relay::poll_timeout`] for the exact time.
//! This keeps a root with 68,160 children from scanning them after every message. For the
//! same reason a node's timers are handled at most every eighth of the heartbeat: pings
//! and reports go out up to that much late, far inside the deadline.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use super::SimConfig;
use super::net::{Links, Res, transfer_ns};
use crate::error::{Error, Result};
use crate::plan::{NodeId, Plan, Role};
use crate::relay::{
    ChunkNo, Event, JobId, Msg, Phase, Relay, Routed, Schedule, Transmit, plan_nodes,
};
use crate::topology::Topology;

#[path = "engine_cpu.rs"]
mod cpu;

/// What happens at a point of simulated time.
#[derive(Debug)]
enum Ev {
    /// A control message arrives.
    Deliver { from: NodeId, to: NodeId, msg: Msg },
    /// A chunk has fully arrived at the receiver's NIC; processing starts.
    Arrive {
        from: NodeId,
        to: NodeId,
        chunk: u32,
        push: bool,
        /// Link directions it crossed.
        hops: u32,
    },
    /// The receiver verified and stored a chunk.
    Processed {
        from: NodeId,
        to: NodeId,
        chunk: u32,
        push: bool,
    },
    /// A pushed chunk has left the links of the edge: the sender may push the next one.
    TxDone { from: NodeId, to: NodeId },
    /// A connection finished its set-up: what waited for it goes on the links now.
    Depart { from: NodeId, to: NodeId, what: Out },
    /// A grandchild's `Prepare` whose parent's connection is up (or being made): sent now.
    Send { from: NodeId, to: NodeId, what: Out },
    /// Check a node's relay timers.
    Timer { node: NodeId },
    /// These nodes crash now.
    Kill { nodes: Vec<NodeId> },
}

/// Something waiting for a connection.
#[derive(Debug)]
enum Out {
    Control(Msg),
    Chunk { chunk: u32, push: bool },
}

#[derive(Debug)]
struct Entry {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.t, self.seq) == (other.t, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    // Reversed: the heap pops the earliest event, ties in scheduling order.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.t, other.seq).cmp(&(self.t, self.seq))
    }
}

const NEVER: u64 = u64::MAX;

/// The outcome of a simulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimReport {
    /// Job nodes in the plan.
    pub job_nodes: usize,
    /// Chunks in the layer.
    pub chunks: usize,
    /// When the last surviving job node held every chunk (the deployment time).
    pub deploy: Duration,
    /// When the last surviving job node held the urgent set.
    pub urgent: Duration,
    /// When the application had started on the last surviving job node: the push
    /// command's start, then per node the later of its mount and its urgent set, plus the
    /// application's own start ([`super::SimConfig::app_start`]). An upper estimate: a real
    /// application runs while its urgent set arrives.
    pub app_started: Duration,
    /// When the root saw the whole job complete.
    pub root_done: Duration,
    /// The model's lower bound ([`SimConfig::lower_bound`]).
    pub lower_bound: Duration,
    /// Chunk bytes that entered groups over their uplinks (the paper's network load).
    pub uplink_in: u64,
    /// Chunk bytes that left groups over their uplinks.
    pub uplink_out: u64,
    /// Chunk bytes over the core.
    pub core_bytes: u64,
    /// Modelled bytes of `Start` and `Prepare` messages (index and subtrees).
    pub start_bytes: u64,
    /// Chunk bytes times the link directions each crossed (what the lab's kernel forwards).
    pub link_bytes: u64,
    /// Chunks received by push.
    pub pushed: u64,
    /// Chunks received answering demands.
    pub demand: u64,
    /// Chunks a node received while already holding them.
    pub duplicates: u64,
    /// Failed edges the root reported, `(parent, child)`.
    pub failed_edges: Vec<(NodeId, NodeId)>,
    /// Nodes the root declared unreachable, `(planned parent, node)`.
    pub unreachable: Vec<(NodeId, NodeId)>,
    /// Re-attachments the root saw, `(new parent, node)`.
    pub attached: Vec<(NodeId, NodeId)>,
    /// Surviving job nodes that do not hold every chunk.
    pub incomplete: Vec<NodeId>,
    /// Nodes killed.
    pub killed: usize,
    /// Events processed.
    pub events: u64,
}

/// A simulation of one push over one plan.
#[derive(Debug)]
pub struct Sim<'a> {
    plan: &'a Plan,
    cfg: SimConfig,
    links: Links,
    origin: Instant,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Entry>,
    schedule: Arc<Schedule>,
    relays: Vec<Option<Relay>>,
    dead: Vec<bool>,
    /// Hosts that passed a `Prepare` on.
    prepared: Vec<bool>,
    timer_at: Vec<u64>,
    cpu_busy: Vec<u64>,
    /// Busy-until of each shared core ([`super::Network::shared_cores`]).
    cores: Vec<u64>,
    busy_edges: HashSet<(NodeId, NodeId)>,
    /// When the connection between two hosts (smaller id first) is usable.
    conn_ready: HashMap<(NodeId, NodeId), u64>,
    path: Vec<Res>,
    scratch: Vec<Transmit>,
    check_ns: u64,
    done_at: [Vec<u64>; 2],
    /// When each node's `Start` arrived.
    start_at: Vec<u64>,
    pushed_rx: Vec<u32>,
    demand_rx: u64,
    root_events: Vec<(u64, Event)>,
    job_done: [Option<u64>; 2],
    events: u64,
    start_bytes: u64,
    link_bytes: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NEVER)
}

/// Picks `k` job nodes to kill, deterministically for `seed`.
pub fn pick_victims(plan: &Plan, k: usize, seed: u64) -> Vec<NodeId> {
    let job: Vec<NodeId> = plan.job_nodes().collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v: Vec<NodeId> = sample(&mut rng, job.len(), k.min(job.len()))
        .into_iter()
        .map(|i| job[i])
        .collect();
    v.sort();
    v
}

impl<'a> Sim<'a> {
    /// Sets up a push of `cfg.payload` over `plan` on the machine `topology` (`None`: every
    /// host on the core). `origin` is the `Instant` that stands for simulated time zero
    /// (only differences matter; the simulator never reads a clock).
    pub fn new(
        plan: &'a Plan,
        topology: Option<&Topology>,
        cfg: SimConfig,
        origin: Instant,
    ) -> Result<Self> {
        let sizes = cfg.chunk_sizes();
        if sizes.is_empty() {
            return Err(Error::SimSetup("the payload is empty".into()));
        }
        let n = sizes.len();
        let urgent = usize::try_from(cfg.urgent.div_ceil(cfg.chunk.max(1)))
            .unwrap_or(n)
            .min(n);
        let schedule = Arc::new(
            Schedule::new((0..n as u32).map(ChunkNo).collect(), urgent, sizes)
                .map_err(|e| Error::SimSetup(e.to_string()))?,
        );
        let hosts = plan.len();
        let check = cfg.timing.heartbeat_ms.min(cfg.timing.deadline_ms).max(1);
        let shared_cores = cfg.network.shared_cores as usize;
        let mut sim = Self {
            plan,
            links: Links::new(plan, topology, &cfg.network),
            cfg,
            origin,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            schedule,
            relays: (0..hosts).map(|_| None).collect(),
            dead: vec![false; hosts],
            prepared: vec![false; hosts],
            timer_at: vec![NEVER; hosts],
            cpu_busy: vec![0; hosts],
            cores: vec![0; shared_cores],
            busy_edges: HashSet::new(),
            conn_ready: HashMap::new(),
            path: Vec::new(),
            scratch: Vec::new(),
            check_ns: u64::from(check) * 1_000_000,
            done_at: [vec![NEVER; hosts], vec![NEVER; hosts]],
            start_at: vec![NEVER; hosts],
            pushed_rx: vec![0; hosts],
            demand_rx: 0,
            root_events: Vec::new(),
            job_done: [None, None],
            events: 0,
            start_bytes: 0,
            link_bytes: 0,
        };
        // The relays get a tiny dummy index; its modelled size is in `start_bytes`.
        let index: Arc<[u8]> = Arc::from(vec![0u8; 64]);
        let root = Relay::new_root(
            JobId(1),
            plan_nodes(plan, |_| String::new()),
            index,
            sim.schedule.clone(),
            sim.cfg.timing,
            origin,
        )
        .map_err(|e| Error::SimSetup(e.to_string()))?;
        sim.relays[plan.root.index()] = Some(root);
        sim.outputs(plan.root);
        Ok(sim)
    }

    /// Crashes `nodes` at simulated time `at`.
    pub fn kill(&mut self, at: Duration, nodes: Vec<NodeId>) {
        self.push(ns(at), Ev::Kill { nodes });
    }

    /// Runs until the root sees the job complete.
    pub fn run(&mut self) -> Result<SimReport> {
        let limit = ns(self.cfg.limit);
        while let Some(e) = self.heap.pop() {
            if e.t > limit {
                return Err(Error::SimTimeLimit(self.cfg.limit));
            }
            self.now = e.t;
            self.events += 1;
            self.handle(e.ev)?;
            if self.job_done[Phase::All.index()].is_some() {
                return Ok(self.report());
            }
        }
        Err(Error::SimStalled {
            at: Duration::from_nanos(self.now),
        })
    }

    /// A host's relay, once it started.
    pub fn relay(&self, id: NodeId) -> Option<&Relay> {
        self.relays.get(id.index()).and_then(Option::as_ref)
    }

    /// Chunks a host received by push.
    pub fn received_by_push(&self, id: NodeId) -> u32 {
        self.pushed_rx[id.index()]
    }

    /// Chunk bytes received and sent on a host's own NIC (a proxy's port is not its NIC).
    pub fn nic_bytes(&self, id: NodeId) -> (u64, u64) {
        (self.links.nic_rx_bytes(id), self.links.nic_tx_bytes(id))
    }

    /// Chunk bytes that entered one group of the topology over its uplink.
    pub fn group_uplink_in(&self, group: crate::topology::GroupId) -> u64 {
        self.links.group_uplink_in(group.0)
    }

    /// Chunk bytes that left one group of the topology over its uplink.
    pub fn group_uplink_out(&self, group: crate::topology::GroupId) -> u64 {
        self.links.group_uplink_out(group.0)
    }

    /// What the root learned, with the simulated time it learned it.
    pub fn root_events(&self) -> impl Iterator<Item = (Duration, &Event)> + '_ {
        self.root_events
            .iter()
            .map(|(t, e)| (Duration::from_nanos(*t), e))
    }

    /// When a host held every chunk of a phase.
    pub fn done_at(&self, id: NodeId, phase: Phase) -> Option<Duration> {
        let t = self.done_at[phase.index()][id.index()];
        (t != NEVER).then(|| Duration::from_nanos(t))
    }

    /// Whether a host was killed.
    pub fn is_dead(&self, id: NodeId) -> bool {
        self.dead[id.index()]
    }

    fn at(&self, t: u64) -> Instant {
        self.origin + Duration::from_nanos(t)
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            t,
            seq: self.seq,
            ev,
        });
    }

    fn handle(&mut self, ev: Ev) -> Result<()> {
        match ev {
            Ev::Deliver { from, to, msg } => self.deliver(from, to, msg)?,
            Ev::Arrive {
                from,
                to,
                chunk,
                push,
                hops,
            } => self.arrive(from, to, chunk, push, hops),
            Ev::Processed {
                from,
                to,
                chunk,
                push,
            } => self.processed(from, to, chunk, push),
            Ev::TxDone { from, to } => {
                self.busy_edges.remove(&(from, to));
                if !self.dead[from.index()] {
                    let was_open = self.urgent_gate_open(from);
                    self.pump(from, to);
                    // The last urgent chunk to a child lets every child have hysteretic ones.
                    if !was_open && self.urgent_gate_open(from) {
                        self.pump_all(from);
                    }
                }
            }
            Ev::Send { from, to, what } => {
                if !self.dead[from.index()] {
                    self.depart_after_setup(from, to, what);
                }
            }
            Ev::Depart { from, to, what } => {
                if !self.dead[from.index()] {
                    self.depart(from, to, what);
                }
            }
            Ev::Timer { node } => self.timer(node),
            Ev::Kill { nodes } => {
                for n in nodes {
                    self.dead[n.index()] = true;
                }
            }
        }
        Ok(())
    }

    /// A control message reaches `to`.
    fn deliver(&mut self, from: NodeId, to: NodeId, msg: Msg) -> Result<()> {
        let now = self.at(self.now);
        if self.dead[to.index()] || self.dead[from.index()] {
            return Ok(());
        }
        let joined = self.relays[to.index()].is_some();
        match msg.route() {
            Routed::Prepare(p) => {
                // A hint for a node not yet in the job: pass it on at once, which
                // starts the set-up of the connections to its children.
                if !joined && !self.prepared[to.index()] {
                    self.prepared[to.index()] = true;
                    let fwd = crate::relay::forward_prepare(&p)
                        .map_err(|e| Error::SimSetup(e.to_string()))?;
                    for (child, p) in fwd {
                        self.send_prepare(to, child.id, child.parent, p);
                    }
                }
                return Ok(());
            }
            Routed::Start(start) if !joined => {
                let r = Relay::new_node(*start, self.schedule.clone(), now)
                    .map_err(|e| Error::SimSetup(e.to_string()))?;
                self.relays[to.index()] = Some(r);
                self.start_at[to.index()] = self.now;
            }
            Routed::Relay(m) => {
                let Some(r) = &mut self.relays[to.index()] else {
                    return Ok(());
                };
                r.handle_message(now, from, m);
                self.pump(to, from);
            }
            // A second `Start`, or a chunk sent as a message (chunks travel as `Arrive`);
            // records are asked for after a job, never within the simulated push.
            Routed::Start(_)
            | Routed::Chunk { .. }
            | Routed::AskRecord { .. }
            | Routed::Record { .. } => return Ok(()),
        }
        self.outputs(to);
        Ok(())
    }

    /// A chunk's last byte reaches `to`: it waits for a core, then is processed.
    fn arrive(&mut self, from: NodeId, to: NodeId, chunk: u32, push: bool, hops: u32) {
        if self.dead[to.index()] || self.dead[from.index()] {
            return;
        }
        let bytes = u64::from(self.schedule.sizes[chunk as usize]);
        let forwarding = transfer_ns(bytes * u64::from(hops), self.cfg.network.link_cpu_bw);
        let work = self.cfg.network.chunk_ns(bytes) + forwarding;
        let done = self.run_cpu(to, self.now, work);
        self.push(
            done,
            Ev::Processed {
                from,
                to,
                chunk,
                push,
            },
        );
    }

    /// A chunk has been verified and stored at `to`.
    fn processed(&mut self, from: NodeId, to: NodeId, chunk: u32, push: bool) {
        let now = self.at(self.now);
        if self.dead[to.index()] {
            return;
        }
        let Some(r) = &mut self.relays[to.index()] else {
            return;
        };
        r.handle_chunk(now, from, ChunkNo(chunk), true);
        if push {
            self.pushed_rx[to.index()] += 1;
        } else {
            self.demand_rx += 1;
        }
        self.pump_all(to);
        self.outputs(to);
    }

    fn timer(&mut self, node: NodeId) {
        if self.dead[node.index()] || self.timer_at[node.index()] != self.now {
            return;
        }
        self.timer_at[node.index()] = NEVER;
        let now = self.at(self.now);
        let Some(r) = &mut self.relays[node.index()] else {
            return;
        };
        match r.poll_timeout() {
            Some(due) if due <= now => {
                r.handle_timeout(now);
                self.outputs(node);
                self.rearm_exact(node);
            }
            Some(due) => {
                let t = ns(due.saturating_duration_since(self.origin));
                self.set_timer(node, t);
            }
            None => {}
        }
    }

    /// After a timeout: schedule the relay's own next timeout exactly.
    fn rearm_exact(&mut self, node: NodeId) {
        let Some(r) = &self.relays[node.index()] else {
            return;
        };
        if let Some(due) = r.poll_timeout() {
            let t =
                ns(due.saturating_duration_since(self.origin)).max(self.now + self.check_ns / 8);
            if t < self.timer_at[node.index()] {
                self.set_timer(node, t);
            }
        }
    }

    fn set_timer(&mut self, node: NodeId, t: u64) {
        self.timer_at[node.index()] = t;
        self.push(t, Ev::Timer { node });
    }

    /// Drains a relay's transmits and events, then makes sure its timers get checked.
    fn outputs(&mut self, node: NodeId) {
        let now = self.at(self.now);
        let mut out = std::mem::take(&mut self.scratch);
        let Some(r) = &mut self.relays[node.index()] else {
            return;
        };
        while let Some(t) = r.poll_transmit(now) {
            out.push(t);
        }
        let mut events = Vec::new();
        while let Some(e) = r.poll_event() {
            events.push(e);
        }
        for e in events {
            self.record(node, e);
        }
        for t in out.drain(..) {
            self.send(node, t);
        }
        self.scratch = out;
        let check = self.now + self.check_ns;
        if self.timer_at[node.index()] > check {
            self.set_timer(node, check);
        }
    }

    fn record(&mut self, node: NodeId, e: Event) {
        if let Event::LocalPhaseDone(p) = e {
            self.done_at[p.index()][node.index()] = self.now;
            return;
        }
        if node != self.plan.root {
            return;
        }
        match e {
            Event::JobPhaseDone(p) => self.job_done[p.index()] = Some(self.now),
            Event::EdgeFailed(..)
            | Event::Unreachable(..)
            | Event::Attached(..)
            | Event::Liar(..) => {}
            _ => return,
        }
        self.root_events.push((self.now, e));
    }

    /// Nanoseconds until the connection `a`-`b` can carry a message sent now.
    fn send(&mut self, from: NodeId, t: Transmit) {
        if let Transmit::Control {
            to,
            msg: Msg::Prepare(p),
        } = t
        {
            let parent = p.subtree.first().map_or(from, |n| n.parent);
            self.send_prepare(from, to, parent, p);
            return;
        }
        let (to, what) = match t {
            Transmit::Control { to, msg } => (to, Out::Control(msg)),
            Transmit::DemandChunk { to, chunk } => (
                to,
                Out::Chunk {
                    chunk: chunk.0,
                    push: false,
                },
            ),
        };
        self.depart_after_setup(from, to, what);
    }

    /// Sends now if the connection is up, else when its set-up completes (links are only
    /// ever reserved from the present, so a pending handshake never blocks other traffic).
    fn depart_after_setup(&mut self, from: NodeId, to: NodeId, what: Out) {
        if let Out::Chunk { push: true, .. } = what {
            self.busy_edges.insert((from, to));
        }
        let wait = self.connect(from, to);
        if wait > 0 {
            self.push(self.now + wait, Ev::Depart { from, to, what });
        } else {
            self.depart(from, to, what);
        }
    }

    fn depart(&mut self, from: NodeId, to: NodeId, what: Out) {
        let lat = ns(self.cfg.network.latency);
        match what {
            Out::Control(msg) => {
                if self.dead[to.index()] {
                    return;
                }
                let bytes = match &msg {
                    Msg::Start(s) => Some(self.cfg.network.start_bytes(s.subtree.len())),
                    Msg::Prepare(p) => Some(self.cfg.network.prepare_bytes(p.subtree.len())),
                    _ => None,
                };
                let mut arrive = if let Some(bytes) = bytes {
                    self.start_bytes += bytes;
                    self.links.path(from, to, &mut self.path);
                    self.links.transfer(&self.path, self.now, bytes, false) + lat
                } else {
                    self.now + lat
                };
                if let Msg::Start(_) = msg {
                    // Checked and set up before the node acts on it.
                    arrive = self.run_cpu(to, arrive, ns(self.cfg.network.start_cpu));
                }
                self.push(arrive, Ev::Deliver { from, to, msg });
            }
            Out::Chunk { chunk, push } => {
                let bytes = u64::from(self.schedule.sizes[chunk as usize]);
                self.links.path(from, to, &mut self.path);
                let fin = self.links.transfer(&self.path, self.now, bytes, true);
                let hops = self.path.len() as u32;
                self.link_bytes += bytes * u64::from(hops);
                if push {
                    self.push(fin, Ev::TxDone { from, to });
                }
                self.push(
                    fin + lat,
                    Ev::Arrive {
                        from,
                        to,
                        chunk,
                        push,
                        hops,
                    },
                );
            }
        }
    }

    /// Pushes the next chunk to `child` if the edge is idle and the parent holds it.
    fn pump(&mut self, node: NodeId, child: NodeId) {
        if self.busy_edges.contains(&(node, child)) {
            return;
        }
        let now = self.at(self.now);
        let Some(r) = &mut self.relays[node.index()] else {
            return;
        };
        if let Some(chunk) = r.poll_bulk(now, child) {
            self.depart_after_setup(
                node,
                child,
                Out::Chunk {
                    chunk: chunk.0,
                    push: true,
                },
            );
        }
    }

    fn urgent_gate_open(&mut self, node: NodeId) -> bool {
        self.relays[node.index()]
            .as_mut()
            .is_none_or(Relay::urgent_gate_open)
    }

    fn pump_all(&mut self, node: NodeId) {
        let Some(r) = &self.relays[node.index()] else {
            return;
        };
        let kids: Vec<NodeId> = r.children().collect();
        for k in kids {
            self.pump(node, k);
        }
    }

    fn report(&self) -> SimReport {
        let plan = self.plan;
        let survivors = || {
            plan.ids()
                .filter(|id| plan.roles[id.index()] == Role::Job && !self.dead[id.index()])
        };
        let last = |p: Phase| {
            survivors()
                .map(|id| self.done_at[p.index()][id.index()])
                .filter(|&t| t != NEVER)
                .max()
                .unwrap_or(0)
        };
        let edges = |f: fn(&Event) -> Option<(NodeId, NodeId)>| {
            self.root_events
                .iter()
                .filter_map(|(_, e)| f(e))
                .collect::<Vec<_>>()
        };
        let net = &self.cfg.network;
        let mount = ns(super::Network::stretched(net.mount, net.node_cpu));
        let process = net.process;
        let app_started = survivors()
            .map(|id| {
                let (s, u) = (
                    self.start_at[id.index()],
                    self.done_at[Phase::Urgent.index()][id.index()],
                );
                if s == NEVER || u == NEVER {
                    0
                } else {
                    (s + mount).max(u)
                }
            })
            .max()
            .unwrap_or(0);
        let app_started = Duration::from_nanos(app_started) + process + self.cfg.app_start;
        let duplicates = self
            .relays
            .iter()
            .flatten()
            .map(|r| r.stats().duplicates)
            .sum();
        SimReport {
            job_nodes: plan.job_nodes().count(),
            chunks: self.schedule.len(),
            deploy: Duration::from_nanos(last(Phase::All)),
            urgent: Duration::from_nanos(last(Phase::Urgent)),
            app_started,
            root_done: Duration::from_nanos(self.job_done[Phase::All.index()].unwrap_or(0)),
            lower_bound: self.cfg.lower_bound(),
            uplink_in: self.links.uplink_in(),
            uplink_out: self.links.uplink_out(),
            core_bytes: self.links.core_bytes(),
            start_bytes: self.start_bytes,
            link_bytes: self.link_bytes,
            pushed: self.pushed_rx.iter().map(|&c| u64::from(c)).sum(),
            demand: self.demand_rx,
            duplicates,
            failed_edges: edges(|e| match e {
                Event::EdgeFailed(p, c) => Some((*p, *c)),
                _ => None,
            }),
            unreachable: edges(|e| match e {
                Event::Unreachable(p, c) => Some((*p, *c)),
                _ => None,
            }),
            attached: edges(|e| match e {
                Event::Attached(p, c) => Some((*p, *c)),
                _ => None,
            }),
            incomplete: survivors()
                .filter(|id| self.done_at[Phase::All.index()][id.index()] == NEVER)
                .collect(),
            killed: self.dead.iter().filter(|d| **d).count(),
            events: self.events,
        }
    }
}

//! The relay driven by an in-memory network with a fake clock: many nodes, reordering,
//! dead nodes, a liar, demand de-duplication. No sockets, no sleeps.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::topology::Topology;
use crate::{PlanOptions, Strategy};

#[path = "lead_tests.rs"]
mod lead;
#[path = "seek_tests.rs"]
mod seek;

enum Item {
    Msg(Msg),
    Chunk { chunk: ChunkNo },
}

struct Net {
    now: Instant,
    schedule: Arc<Schedule>,
    relays: BTreeMap<NodeId, Relay>,
    dead: HashSet<NodeId>,
    /// Directed links that lose every message.
    cut: HashSet<(NodeId, NodeId)>,
    liars: HashSet<NodeId>,
    queue: Vec<(Instant, u64, NodeId, NodeId, Item)>,
    seq: u64,
    latency: Duration,
    /// Extra one-way latency of every message to or from these nodes.
    slow: HashMap<NodeId, Duration>,
    jitter: Option<ChaCha8Rng>,
    /// Chunks pushed per child per tick (0: no bulk traffic at all).
    rate: usize,
    received: HashMap<NodeId, Vec<ChunkNo>>,
    wants: HashMap<(NodeId, NodeId), usize>,
    root_events: Vec<Event>,
    root_id: NodeId,
    /// Chunk positions each node's store holds before it joins (from an earlier job).
    held: HashMap<NodeId, Vec<ChunkNo>>,
    /// [`Event::Unobtainable`] of every node but the root.
    unobtainable: HashMap<NodeId, Vec<Event>>,
    /// Nodes pass their children's `Start`s on as soon as theirs arrives
    /// ([`forward_start`]), as the daemon does, instead of from their relay.
    early_starts: bool,
    /// How many `Start`s each node received.
    starts: HashMap<NodeId, usize>,
}

fn plan(groups: usize, group: usize, strategy: Strategy) -> crate::Plan {
    let cluster = format!("cn[{:03}-{:03}]", 1, groups * group);
    let nodes = crate::hostlist::expand(&cluster).expect("hostlist");
    let topo =
        Topology::generated(&nodes, group, crate::topology::ProxyPick::First).expect("topology");
    let opts = PlanOptions {
        width: 4,
        ..PlanOptions::default()
    };
    crate::plan(&topo, &nodes, strategy, &opts).expect("plan")
}

impl Net {
    fn new(plan: &crate::Plan, chunks: usize, urgent: usize) -> Self {
        Self::streaming(plan, chunks, urgent, chunks)
    }

    /// A push of `chunks` chunks that streams only the first `pushed` of its order (the
    /// rest are fetched on demand).
    fn streaming(plan: &crate::Plan, chunks: usize, urgent: usize, pushed: usize) -> Self {
        let now = Instant::now();
        let order: Vec<ChunkNo> = (0..chunks as u32).rev().take(pushed).map(ChunkNo).collect();
        let schedule = Arc::new(Schedule::new(order, urgent, vec![1000; chunks]).expect("valid"));
        let nodes = plan_nodes(plan, |h| format!("{h}:7000"));
        let root = Relay::new_root(
            JobId(1),
            nodes,
            Arc::from(&b"index"[..]),
            schedule.clone(),
            Timing {
                heartbeat_ms: 100,
                deadline_ms: 500,
            },
            now,
        )
        .expect("root");
        let root_id = root.me();
        let mut relays = BTreeMap::new();
        relays.insert(root_id, root);
        Self {
            now,
            schedule,
            relays,
            dead: HashSet::new(),
            cut: HashSet::new(),
            liars: HashSet::new(),
            queue: Vec::new(),
            seq: 0,
            latency: Duration::from_millis(2),
            slow: HashMap::new(),
            jitter: None,
            rate: 1,
            received: HashMap::new(),
            wants: HashMap::new(),
            root_events: Vec::new(),
            root_id,
            held: HashMap::new(),
            unobtainable: HashMap::new(),
            early_starts: false,
            starts: HashMap::new(),
        }
    }

    /// A health probe of `plan`: no chunks at all.
    fn new_probe(plan: &crate::Plan) -> Self {
        let mut net = Self::new(plan, 0, 0);
        let nodes = plan_nodes(plan, |h| format!("{h}:7000"));
        let root = Relay::new_probe_root(
            JobId(2),
            nodes,
            Timing {
                heartbeat_ms: 100,
                deadline_ms: 500,
            },
            net.now,
        )
        .expect("probe root");
        net.relays.insert(net.root_id, root);
        net
    }

    /// A rates probe of `plan` carrying `filler`.
    fn new_rates_probe(plan: &crate::Plan, filler: Filler) -> Self {
        let mut net = Self::new_probe(plan);
        net.schedule = Arc::new(filler.schedule());
        let nodes = plan_nodes(plan, |h| format!("{h}:7000"));
        let timing = Timing {
            heartbeat_ms: 100,
            deadline_ms: 500,
        };
        let root = Relay::new_rates_probe_root(JobId(3), nodes, filler, timing, net.now)
            .expect("rates probe root");
        net.relays.insert(net.root_id, root);
        net
    }

    fn send(&mut self, from: NodeId, to: NodeId, item: Item) {
        let extra = self.jitter.as_mut().map_or(0, |r| r.random_range(0..20u64));
        let slow = [from, to]
            .iter()
            .filter_map(|n| self.slow.get(n))
            .copied()
            .sum::<Duration>();
        let at = self.now + self.latency + slow + Duration::from_millis(extra);
        self.seq += 1;
        self.queue.push((at, self.seq, from, to, item));
    }

    fn step(&mut self) {
        // Deliver what is due, in time order.
        self.queue.sort_by_key(|(t, s, ..)| (*t, *s));
        let due = self.queue.partition_point(|(t, ..)| *t <= self.now);
        let items: Vec<_> = self.queue.drain(..due).collect();
        for (_, _, from, to, item) in items {
            if self.dead.contains(&to)
                || self.dead.contains(&from)
                || self.cut.contains(&(from, to))
            {
                continue;
            }
            if let Item::Msg(Msg::Start(_)) = &item {
                *self.starts.entry(to).or_default() += 1;
            }
            match item {
                Item::Msg(Msg::Start(start)) if !self.relays.contains_key(&to) => {
                    let early = self
                        .early_starts
                        .then(|| forward_start(&start).expect("ok"));
                    for (child, s) in early.iter().flatten() {
                        self.send(to, child.id, Item::Msg(Msg::Start(Box::new(s.clone()))));
                    }
                    let mut r = Relay::new_node(*start, self.schedule.clone(), self.now)
                        .expect("valid start");
                    if early.is_some() {
                        r.starts_sent_early(self.now);
                    }
                    if let Some(h) = self.held.get(&to) {
                        r.hold_existing(h.iter().copied());
                    }
                    assert_eq!(r.me(), to);
                    self.relays.insert(to, r);
                }
                Item::Msg(m) => {
                    if let Msg::Want { .. } = m {
                        *self.wants.entry((from, to)).or_default() += 1;
                    }
                    if let (Some(r), crate::relay::Routed::Relay(m)) =
                        (self.relays.get_mut(&to), m.route())
                    {
                        r.handle_message(self.now, from, m);
                    }
                }
                Item::Chunk { chunk } => {
                    let valid = !self.liars.contains(&from);
                    if valid {
                        self.received.entry(to).or_default().push(chunk);
                    }
                    if let Some(r) = self.relays.get_mut(&to) {
                        r.handle_chunk(self.now, from, chunk, valid);
                    }
                }
            }
        }
        // Let every live relay act.
        let ids: Vec<NodeId> = self.relays.keys().copied().collect();
        for id in ids {
            if self.dead.contains(&id) {
                continue;
            }
            let mut out = Vec::new();
            let r = self.relays.get_mut(&id).expect("exists");
            if r.poll_timeout().is_some_and(|t| t <= self.now) {
                r.handle_timeout(self.now);
            }
            while let Some(t) = r.poll_transmit(self.now) {
                out.push(t);
            }
            let kids: Vec<NodeId> = r.children().collect();
            let mut bulk = Vec::new();
            for k in kids {
                for _ in 0..self.rate {
                    match r.poll_bulk(self.now, k) {
                        Some(c) => bulk.push((k, c)),
                        None => break,
                    }
                }
            }
            while let Some(e) = r.poll_event() {
                if id == self.root_id {
                    self.root_events.push(e);
                } else if let Event::Unobtainable { .. } = e {
                    self.unobtainable.entry(id).or_default().push(e);
                }
            }
            for t in out {
                match t {
                    Transmit::Control { to, msg } => self.send(id, to, Item::Msg(msg)),
                    Transmit::DemandChunk { to, chunk } => self.send(id, to, Item::Chunk { chunk }),
                }
            }
            for (to, chunk) in bulk {
                self.send(id, to, Item::Chunk { chunk });
            }
        }
        self.now += Duration::from_millis(1);
    }

    fn run_until(&mut self, limit: usize, f: impl Fn(&Net) -> bool) {
        for _ in 0..limit {
            if f(self) {
                return;
            }
            self.step();
        }
        panic!(
            "did not converge in {limit} steps; root events: {:?}",
            self.root_events
        );
    }

    /// Holds the root's hysteretic set back ([`Relay::set_bulk_hold`]) and runs until the
    /// urgent set is on every node; returns when that was.
    fn hold_bulk_until_urgent(&mut self, max: Duration, quiet: Option<Duration>) -> Instant {
        let root = self.root_id;
        self.relays
            .get_mut(&root)
            .expect("root")
            .set_bulk_hold(BulkHold { max, quiet });
        self.run_until(20_000, |n| n.job_done(Phase::Urgent));
        self.now
    }

    /// A blocked read at `node` wants `chunk` now.
    fn read(&mut self, node: &NodeId, chunk: ChunkNo) {
        let now = self.now;
        self.relays
            .get_mut(node)
            .expect("started")
            .handle_local_want(now, chunk);
    }

    /// Hysteretic chunks received so far, over every node.
    fn hysteretic_received(&self) -> usize {
        self.received
            .values()
            .flatten()
            .filter(|&&c| !self.schedule.urgent_chunk(c))
            .count()
    }

    fn job_done(&self, phase: Phase) -> bool {
        self.root_events.contains(&Event::JobPhaseDone(phase))
    }

    fn root(&self) -> &Relay {
        &self.relays[&self.root_id]
    }
}

fn assert_everyone_has_everything(net: &Net, plan: &crate::Plan) {
    for id in plan.ids().skip(1) {
        if net.dead.contains(&id) || net.liars.contains(&id) {
            continue;
        }
        let r = net
            .relays
            .get(&id)
            .unwrap_or_else(|| panic!("{id:?} never started"));
        assert_eq!(r.have_count(), net.schedule.len(), "{id:?} incomplete");
        assert_eq!(r.stats().duplicates, 0, "{id:?} received a chunk twice");
    }
}

#[test]
fn every_node_gets_everything_exactly_once_urgent_first() {
    let p = plan(5, 8, Strategy::Topo);
    let mut net = Net::new(&p, 30, 10);
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert_everyone_has_everything(&net, &p);
    let urgent_at = net
        .root_events
        .iter()
        .position(|e| *e == Event::JobPhaseDone(Phase::Urgent))
        .expect("urgent phase done");
    let all_at = net
        .root_events
        .iter()
        .position(|e| *e == Event::JobPhaseDone(Phase::All))
        .expect("all done");
    assert!(urgent_at < all_at);
    // Without demand traffic every node receives the urgent set before anything else.
    for (node, got) in &net.received {
        let first_rest = got.iter().position(|&c| !net.schedule.urgent_chunk(c));
        let last_urgent = got.iter().rposition(|&c| net.schedule.urgent_chunk(c));
        if let (Some(a), Some(b)) = (first_rest, last_urgent) {
            assert!(
                b < a,
                "{node:?} got a hysteretic chunk before the urgent set"
            );
        }
    }
    let progress = net.root().job_progress().expect("root");
    assert_eq!(progress.done, [p.len() - 1, p.len() - 1]);
    net.run_until(1_000, |n| n.relays.values().all(Relay::finished));
}

#[test]
fn reordered_delivery_still_completes_without_duplicates() {
    for seed in 0..5 {
        let p = plan(3, 8, Strategy::Random);
        let mut net = Net::new(&p, 20, 5);
        net.jitter = Some(ChaCha8Rng::seed_from_u64(seed));
        net.run_until(50_000, |n| n.job_done(Phase::All));
        assert_everyone_has_everything(&net, &p);
    }
}

#[test]
fn a_dead_proxy_is_reported_and_its_children_reattach() {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 40, 10);
    // Let the push get going, then kill a proxy that has children.
    net.run_until(10_000, |n| n.relays.len() > p.len() / 2);
    let victim = p
        .ids()
        .skip(1)
        .find(|&id| !p.children[id.index()].is_empty() && net.relays.contains_key(&id))
        .expect("a relaying node");
    let vparent = p.parent[victim.index()].expect("not root");
    net.dead.insert(victim);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert!(
        net.root_events
            .contains(&Event::EdgeFailed(vparent, victim)),
        "failed edge reported: {:?}",
        net.root_events
    );
    for &k in &p.children[victim.index()] {
        assert!(
            net.root_events
                .iter()
                .any(|e| matches!(e, Event::Attached(_, n) if *n == k)),
            "{k:?} re-attached"
        );
    }
    assert_everyone_has_everything(&net, &p);
    let progress = net.root().job_progress().expect("root");
    assert_eq!(progress.failed, 1);
}

/// Kills a proxy under the root and every node below it before anything starts; returns
/// the proxy and its subtree (itself included).
fn cut_off_a_group(net: &mut Net, p: &crate::Plan) -> (NodeId, Vec<NodeId>) {
    let proxy = p
        .ids()
        .skip(1)
        .find(|&id| p.parent[id.index()] == Some(p.root) && !p.children[id.index()].is_empty())
        .expect("a proxy under the root");
    let below = p.subtree(proxy);
    for &n in &below {
        net.dead.insert(n);
    }
    (proxy, below)
}

#[test]
fn a_cut_off_group_is_reported_edge_by_edge() {
    let p = plan(3, 4, Strategy::Topo);
    let mut net = Net::new(&p, 10, 3);
    let (proxy, below) = cut_off_a_group(&mut net, &p);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert!(net.root_events.contains(&Event::EdgeFailed(p.root, proxy)));
    for &n in below.iter().filter(|&&n| n != proxy) {
        let parent = p.parent[n.index()].expect("has parent");
        assert!(
            net.root_events.contains(&Event::Unreachable(parent, n)),
            "{n:?} reported unreachable below {parent:?}: {:?}",
            net.root_events
        );
    }
    assert_everyone_has_everything(&net, &p);
}

#[test]
fn a_liar_is_caught_and_its_children_fetch_from_an_ancestor() {
    let p = plan(3, 8, Strategy::Topo);
    let mut net = Net::new(&p, 20, 5);
    let liar = p
        .ids()
        .skip(1)
        .find(|&id| !p.children[id.index()].is_empty())
        .expect("a relaying node");
    net.liars.insert(liar);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert!(
        net.root_events
            .iter()
            .any(|e| matches!(e, Event::Liar(l, _) if *l == liar)),
        "liar reported: {:?}",
        net.root_events
    );
    assert_everyone_has_everything(&net, &p);
}

#[test]
fn concurrent_demands_make_one_request_per_edge() {
    let p = plan(3, 8, Strategy::Topo);
    let mut net = Net::new(&p, 20, 5);
    net.rate = 0; // no bulk push: only demand traffic moves chunks
    net.run_until(10_000, |n| n.relays.len() == p.len());
    let chunk = 7;
    let leaves: Vec<NodeId> = p
        .ids()
        .skip(1)
        .filter(|&id| p.children[id.index()].is_empty())
        .collect();
    for &leaf in &leaves {
        net.read(&leaf, ChunkNo(chunk));
    }
    net.run_until(10_000, |n| {
        leaves.iter().all(|l| n.relays[l].has(ChunkNo(chunk)))
    });
    for (&(from, to), &n) in &net.wants {
        assert_eq!(n, 1, "{from:?} -> {to:?} asked {n} times");
        assert_eq!(p.parent[from.index()], Some(to), "wants go to the parent");
    }
    let asked: HashSet<NodeId> = net.wants.keys().map(|&(from, _)| from).collect();
    let expected: HashSet<NodeId> = p.ids().skip(1).collect();
    assert_eq!(asked, expected, "every node on a leaf's path asked once");
}

#[test]
fn schedules_list_each_chunk_at_most_once() {
    assert!(Schedule::new(vec![ChunkNo(0), ChunkNo(1), ChunkNo(1)], 1, vec![1; 3]).is_err());
    assert!(Schedule::new(vec![ChunkNo(0), ChunkNo(5)], 1, vec![1; 2]).is_err());
    assert!(Schedule::new(vec![ChunkNo(1), ChunkNo(0)], 3, vec![1; 2]).is_err());
    assert!(Schedule::new(vec![ChunkNo(0), ChunkNo(1), ChunkNo(2)], 1, vec![1; 2]).is_err());
    assert!(Schedule::new(vec![ChunkNo(1), ChunkNo(0)], 1, vec![1; 2]).is_ok());
    let part = Schedule::new(vec![ChunkNo(2)], 1, vec![1; 3]).expect("a subset streams only part");
    assert_eq!((part.len(), part.pushed()), (3, 1));
    assert!(part.pushed_chunk(ChunkNo(2)) && !part.pushed_chunk(ChunkNo(0)));
}

/// A push that streams only its urgent set (or nothing): every node completes both phases
/// once it holds what is streamed, nothing else travels unasked, and a chunk left out of
/// the order still reaches a reader through the tree on demand.
#[test]
fn chunks_left_out_of_the_order_travel_only_on_demand() {
    let p = plan(3, 8, Strategy::Topo);
    for pushed in [0, 4] {
        let mut net = Net::streaming(&p, 20, pushed, pushed);
        net.run_until(20_000, |n| n.job_done(Phase::All));
        for id in p.ids().skip(1) {
            let r = &net.relays[&id];
            assert_eq!(
                r.have_count(),
                pushed,
                "{id:?} got only the streamed chunks"
            );
        }
        assert!(net.wants.is_empty(), "nothing was asked for");
        let leaf = p
            .ids()
            .skip(1)
            .find(|&id| p.children[id.index()].is_empty())
            .expect("a leaf");
        let chunk = 0; // last in the full order: never streamed
        net.read(&leaf, ChunkNo(chunk));
        net.run_until(10_000, |n| n.relays[&leaf].has(ChunkNo(chunk)));
        let others = p
            .ids()
            .skip(1)
            .filter(|&id| id != leaf && net.relays[&id].has(ChunkNo(chunk)))
            .count();
        let depth =
            std::iter::successors(p.parent[leaf.index()], |n| p.parent[n.index()]).count() - 1;
        assert_eq!(
            others, depth,
            "only the nodes on the reader's path fetched it"
        );
        assert!(!net.root().finished(), "the root keeps serving demand");
        net.relays
            .get_mut(&net.root_id)
            .expect("root")
            .end_serving();
        net.run_until(10_000, |n| n.relays.values().all(Relay::finished));
    }
}

/// The planned edges `(parent, child)` of a plan.
fn edges(p: &crate::Plan) -> HashSet<(NodeId, NodeId)> {
    p.ids()
        .skip(1)
        .map(|c| (p.parent[c.index()].expect("has parent"), c))
        .collect()
}

fn rtts(net: &Net) -> HashMap<(NodeId, NodeId), Vec<Duration>> {
    let mut out: HashMap<(NodeId, NodeId), Vec<Duration>> = HashMap::new();
    for e in &net.root_events {
        if let Event::EdgeRtt(p, c, d) = e {
            out.entry((*p, *c)).or_default().push(*d);
        }
    }
    out
}

#[test]
fn a_probe_completes_with_no_chunks_and_one_rtt_per_edge() {
    let p = plan(3, 4, Strategy::Topo);
    let mut net = Net::new_probe(&p);
    // One leaf's links are slower: its edge, and only its edge, shows it.
    let slow_leaf = p
        .ids()
        .skip(1)
        .find(|&id| p.children[id.index()].is_empty())
        .expect("a leaf");
    net.slow.insert(slow_leaf, Duration::from_millis(5));
    net.run_until(10_000, |n| n.job_done(Phase::All));
    net.run_until(1_000, |n| {
        n.relays.len() == p.len() && n.relays.values().all(Relay::finished)
    });
    assert!(
        net.received.is_empty(),
        "a probe moved chunks: {:?}",
        net.received
    );
    assert!(net.relays.values().all(Relay::is_probe));
    let rtts = rtts(&net);
    let keys: HashSet<(NodeId, NodeId)> = rtts.keys().copied().collect();
    assert_eq!(keys, edges(&p), "one RTT per planned edge");
    for (&(parent, child), got) in &rtts {
        assert_eq!(got.len(), 1, "{parent:?} -> {child:?} measured {got:?}");
        // Start one way, the child's first report back: two hops of the fake network.
        let slow = if child == slow_leaf { 10 } else { 0 };
        assert_eq!(
            got[0],
            Duration::from_millis(4 + slow),
            "{parent:?} -> {child:?}"
        );
    }
    for id in p.ids().skip(1) {
        assert!(
            net.root_events.contains(&Event::NodeDone(id, Phase::All)),
            "{id:?} answered"
        );
    }
    let progress = net.root().job_progress().expect("root");
    assert_eq!(progress.failed, 0);
    assert!(net.root_events.contains(&Event::Finished));
}

#[test]
fn a_probe_reports_a_dead_proxy_as_the_failed_edge_and_its_children_answer() {
    let p = plan(3, 4, Strategy::Topo);
    let mut net = Net::new_probe(&p);
    let proxy = p
        .ids()
        .skip(1)
        .find(|&id| p.parent[id.index()] == Some(p.root) && !p.children[id.index()].is_empty())
        .expect("a proxy under the root");
    net.dead.insert(proxy);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert!(net.root_events.contains(&Event::EdgeFailed(p.root, proxy)));
    let rtts = rtts(&net);
    assert!(
        !rtts.keys().any(|&(_, c)| c == proxy),
        "no RTT to a dead node"
    );
    for &k in &p.children[proxy.index()] {
        // Started straight from the root once their parent was declared dead.
        assert!(
            rtts.contains_key(&(p.root, k)),
            "{k:?} measured from the root"
        );
        assert!(net.root_events.contains(&Event::NodeDone(k, Phase::All)));
    }
    let progress = net.root().job_progress().expect("root");
    assert_eq!(progress.failed, 1);
}

#[test]
fn a_probe_reports_a_cut_off_group_as_unreachable_below_the_failed_edge() {
    let p = plan(3, 4, Strategy::Topo);
    let mut net = Net::new_probe(&p);
    let (proxy, below) = cut_off_a_group(&mut net, &p);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert!(net.root_events.contains(&Event::EdgeFailed(p.root, proxy)));
    for &n in below.iter().filter(|&&n| n != proxy) {
        let parent = p.parent[n.index()].expect("has parent");
        assert!(
            net.root_events.contains(&Event::Unreachable(parent, n)),
            "{n:?} unreachable below {parent:?}: {:?}",
            net.root_events
        );
        assert!(!net.root_events.contains(&Event::NodeDone(n, Phase::All)));
    }
    let answered: HashSet<NodeId> = rtts(&net).keys().map(|&(_, c)| c).collect();
    let alive: HashSet<NodeId> = p.ids().skip(1).filter(|n| !below.contains(n)).collect();
    assert_eq!(
        answered, alive,
        "an RTT for every live node, none for the dead"
    );
    let progress = net.root().job_progress().expect("root");
    assert_eq!(progress.failed, below.len());
}

#[test]
fn a_probe_start_with_chunks_is_refused() {
    let p = plan(1, 2, Strategy::Topo);
    let nodes = plan_nodes(&p, |h| format!("{h}:7000"));
    let mut root =
        Relay::new_probe_root(JobId(3), nodes, Timing::default(), Instant::now()).expect("root");
    let Some(Transmit::Control {
        msg: Msg::Prepare(_),
        ..
    }) = root.poll_transmit(Instant::now())
    else {
        panic!("the probe root sends a Prepare first");
    };
    let Some(Transmit::Control {
        msg: Msg::Start(start),
        ..
    }) = root.poll_transmit(Instant::now())
    else {
        panic!("then the Start");
    };
    assert!(start.probe && start.index.is_empty() && start.order.is_empty());
    let empty = Arc::new(Schedule::new(vec![], 0, vec![]).expect("empty"));
    assert!(Relay::new_node((*start).clone(), empty, Instant::now()).is_ok());
    let one = Arc::new(Schedule::new(vec![ChunkNo(0)], 0, vec![10]).expect("one chunk"));
    assert!(Relay::new_node(*start, one, Instant::now()).is_err());
}

#[test]
fn a_rates_probe_carries_its_filler_to_every_node_and_reports_every_edges_bytes_and_times() {
    let p = plan(3, 4, Strategy::Topo);
    let filler = Filler::new(1000, 6).expect("filler");
    let mut net = Net::new_rates_probe(&p, filler);
    net.run_until(10_000, |n| n.job_done(Phase::All));
    assert!(net.relays.values().all(Relay::is_probe));
    for id in p.ids().skip(1) {
        let mut got = net.received.get(&id).cloned().unwrap_or_default();
        got.sort();
        assert_eq!(got, (0..6).map(ChunkNo).collect::<Vec<_>>(), "{id:?}");
        for phase in Phase::BOTH {
            assert!(
                net.root_events.contains(&Event::NodeDone(id, phase)),
                "{id:?} {phase:?}"
            );
        }
    }
    // Each planned edge carried the filler once, as a push's edges carry the layer.
    let bytes: HashMap<(NodeId, NodeId), u64> = net
        .root_events
        .iter()
        .filter_map(|e| match *e {
            Event::EdgeBytes(a, b, n) => Some(((a, b), n)),
            _ => None,
        })
        .collect();
    let keys: HashSet<(NodeId, NodeId)> = bytes.keys().copied().collect();
    assert_eq!(keys, edges(&p));
    assert!(bytes.values().all(|&b| b == filler.bytes()), "{bytes:?}");

    // A node takes a rates probe's `Start` only with the filler's schedule.
    let mut root = Relay::new_rates_probe_root(
        JobId(4),
        plan_nodes(&p, |h| format!("{h}:7000")),
        filler,
        Timing::default(),
        Instant::now(),
    )
    .expect("root");
    let start = std::iter::from_fn(|| root.poll_transmit(Instant::now())).find_map(|t| match t {
        Transmit::Control {
            msg: Msg::Start(s), ..
        } => Some(s),
        _ => None,
    });
    let start = start.expect("a Start");
    assert!(start.probe && start.order.len() == 6 && start.urgent == 1);
    let empty = Arc::new(Schedule::new(vec![], 0, vec![]).expect("empty"));
    assert!(Relay::new_node((*start).clone(), empty, Instant::now()).is_err());
    let own = Arc::new(filler.schedule());
    assert!(Relay::new_node(*start, own, Instant::now()).is_ok());
}

#[test]
fn children_that_reattached_before_their_proxy_was_declared_dead_are_not_unreachable() {
    let p = plan(3, 4, Strategy::Topo);
    // Enough chunks that the proxy is still receiving when it dies.
    let mut net = Net::new(&p, 2000, 10);
    net.run_until(10_000, |n| n.relays.len() == p.len());
    let proxy = p
        .ids()
        .skip(1)
        .find(|&id| p.parent[id.index()] == Some(p.root) && !p.children[id.index()].is_empty())
        .expect("a proxy under the root");
    let kids = p.children[proxy.index()].clone();
    // The proxy goes silent towards its children first (they re-attach to the root while
    // the proxy still hears them and still talks to the root), then dies.
    for &k in &kids {
        net.cut.insert((proxy, k));
    }
    net.run_until(10_000, |n| {
        kids.iter().all(|&k| {
            n.root_events
                .iter()
                .any(|e| matches!(e, Event::Attached(_, c) if *c == k))
        })
    });
    assert!(
        !net.root_events.contains(&Event::EdgeFailed(p.root, proxy)),
        "the proxy is still alive at this point"
    );
    net.dead.insert(proxy);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    for &k in &kids {
        assert!(
            !net.root_events
                .iter()
                .any(|e| matches!(e, Event::Unreachable(_, c) if *c == k)),
            "{k:?} re-attached and is not unreachable: {:?}",
            net.root_events
        );
        assert!(
            net.root_events.contains(&Event::NodeDone(k, Phase::All)),
            "{k:?} done: {:?}",
            net.root_events
        );
    }
    assert_everyone_has_everything(&net, &p);
}

#[test]
fn the_owner_set_at_the_root_reaches_every_node() {
    let p = plan(3, 8, Strategy::Topo);
    let mut net = Net::new(&p, 6, 2);
    let root_id = net.root_id;
    net.relays
        .get_mut(&root_id)
        .expect("root")
        .set_owner(Some(4242));
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert_eq!(net.relays.len(), p.len(), "every node started");
    for (id, r) in &net.relays {
        assert_eq!(r.owner(), Some(4242), "{id:?}");
    }
}

#[test]
fn the_prepare_wave_gives_every_node_its_planned_subtree_ahead_of_its_start() {
    // The root sends `Prepare`s (children and grandchildren with children) before any
    // `Start`; passing on the first `Prepare` a node gets with `forward_prepare` reaches
    // every node of the plan, each with the subtree its `Start` will carry. A node with
    // children below the root's children hears first from its grandparent, two levels per
    // hop, and then once more from its parent; a leaf only from its parent.
    let p = plan(6, 4, Strategy::Topo);
    let depth = |mut id: NodeId| {
        let mut d = 0u32;
        while let Some(up) = p.parent[id.index()] {
            id = up;
            d += 1;
        }
        d
    };
    assert!(
        p.ids().map(depth).max() >= Some(3),
        "a plan deep enough to matter"
    );
    let nodes = plan_nodes(&p, |h| format!("{h}:7000"));
    let schedule = Arc::new(Schedule::new(vec![ChunkNo(0)], 1, vec![10]).expect("one chunk"));
    let mut root = Relay::new_root(
        JobId(5),
        nodes,
        Arc::from(&b"index"[..]),
        schedule,
        Timing::default(),
        Instant::now(),
    )
    .expect("root");
    let mut starts: HashMap<NodeId, Vec<NodeInfo>> = HashMap::new();
    // (from, to, prepare, hop count from the root)
    let mut wave = std::collections::VecDeque::new();
    while let Some(t) = root.poll_transmit(Instant::now()) {
        match t {
            Transmit::Control {
                to,
                msg: Msg::Prepare(pr),
            } => {
                assert!(starts.is_empty(), "a Prepare after a Start");
                wave.push_back((root.me(), to, pr, 1));
            }
            Transmit::Control {
                to,
                msg: Msg::Start(s),
            } => {
                starts.insert(to, s.subtree.clone());
            }
            _ => {}
        }
    }
    let mut first: HashMap<NodeId, (NodeId, Vec<NodeInfo>, u32)> = HashMap::new();
    let mut heard: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    while let Some((from, to, pr, hops)) = wave.pop_front() {
        assert_eq!(pr.subtree[0].id, to, "a Prepare names its receiver first");
        heard.entry(to).or_default().push(from);
        if let Some((_, sub, _)) = first.get(&to) {
            assert_eq!(sub, &pr.subtree, "every Prepare of a node says the same");
            continue;
        }
        for (next, fwd) in forward_prepare(&pr).expect("well formed") {
            wave.push_back((to, next.id, fwd, hops + 1));
        }
        first.insert(to, (from, pr.subtree, hops));
    }
    assert_eq!(first.len(), p.len() - 1, "every node but the root");
    for (id, sub) in &starts {
        assert_eq!(&first[id].1, sub, "the Start's subtree");
    }
    for (id, (from, subtree, hops)) in &first {
        // Itself and exactly its descendants in the plan.
        let mut below = vec![*id];
        let mut i = 0;
        while i < below.len() {
            below.extend(p.children[below[i].index()].iter().copied());
            i += 1;
        }
        let mut got: Vec<NodeId> = subtree.iter().map(|n| n.id).collect();
        got.sort();
        below.sort();
        assert_eq!(got, below);
        let d = depth(*id);
        let parent = p.parent[id.index()].expect("not the root");
        let leaf = p.children[id.index()].is_empty();
        if d >= 2 && !leaf {
            let grandparent = p.parent[parent.index()].expect("depth 2");
            assert!(*from == grandparent || *from == parent);
            let mut both = heard[id].clone();
            both.sort();
            let mut want = vec![grandparent, parent];
            want.sort();
            assert_eq!(both, want, "{id:?} hears from its grandparent and parent");
            assert_eq!(*hops, d.div_ceil(2), "two levels per hop");
        } else {
            assert_eq!(heard[id], vec![parent], "{id:?} hears from its parent only");
        }
    }
    assert!(forward_prepare(&Prepare { subtree: vec![] }).is_err());
}

/// Issue 13 item 1: a chunk the store evicted after the push still had its `have` bit, so a
/// read of it asked nobody and waited for ever. Now the relay hears of the loss, and a read
/// fetches it again, from the grandparent when the parent lost it too.
#[test]
fn an_evicted_chunk_is_fetched_again_from_the_tree_when_read() {
    let p = plan(2, 8, Strategy::Topo);
    let mut net = Net::new(&p, 12, 3);
    net.run_until(20_000, |n| n.job_done(Phase::All));
    let leaf = p
        .ids()
        .skip(1)
        .find(|&id| p.children[id.index()].is_empty() && p.parent[id.index()] != Some(net.root_id))
        .expect("a leaf under a proxy");
    let parent = p.parent[leaf.index()].expect("has a parent");
    let chunk = 4;
    let now = net.now;
    for id in [leaf, parent] {
        let r = net.relays.get_mut(&id).expect("started");
        r.handle_lost(now, ChunkNo(chunk));
        assert!(
            !r.has(ChunkNo(chunk)),
            "{id:?} no longer counts the lost chunk as held"
        );
        assert_eq!(r.have_count(), net.schedule.len() - 1);
    }
    // Nobody needs it yet (every child has it): losing it asks for nothing.
    net.step();
    assert!(net.wants.is_empty(), "a loss alone fetches nothing");
    net.read(&leaf, ChunkNo(chunk));
    net.run_until(10_000, |n| n.relays[&leaf].has(ChunkNo(chunk)));
    assert!(
        net.relays[&parent].has(ChunkNo(chunk)),
        "the parent fetched it again on the way"
    );
    assert_eq!(net.relays[&leaf].stats().lost, 1);
    assert_eq!(net.relays[&leaf].have_count(), net.schedule.len());
}

/// A chunk the transport could not read back to forward (gone from the store between
/// arriving and being pushed) must still reach the child: its push would otherwise stall
/// behind it for ever.
#[test]
fn a_chunk_that_vanished_before_forwarding_still_reaches_the_child() {
    let p = plan(2, 8, Strategy::Topo);
    let mut net = Net::new(&p, 12, 3);
    net.run_until(20_000, |n| n.job_done(Phase::All));
    let (proxy, child) = p
        .ids()
        .skip(1)
        .find_map(|id| p.children[id.index()].first().map(|&c| (id, c)))
        .expect("a node with a child");
    let chunk = 2;
    let now = net.now;
    // The child lost it and asks again; the proxy's store cannot produce it either.
    net.relays
        .get_mut(&child)
        .expect("started")
        .handle_lost(now, ChunkNo(chunk));
    net.relays
        .get_mut(&proxy)
        .expect("started")
        .handle_unsent(now, child, ChunkNo(chunk));
    assert!(!net.relays[&proxy].has(ChunkNo(chunk)));
    net.run_until(10_000, |n| {
        n.relays[&proxy].has(ChunkNo(chunk)) && n.relays[&child].has(ChunkNo(chunk))
    });
}

/// A store smaller than the layer drops chunks while the push still runs; the node must
/// still report its phases complete (every chunk arrived once), or the push never ends.
#[test]
fn a_node_that_loses_chunks_during_the_push_still_completes_its_phases() {
    let p = plan(1, 4, Strategy::Topo);
    let mut net = Net::new(&p, 10, 3);
    let leaf = p.ids().last().expect("a node");
    let mut dropped = 0;
    for _ in 0..20_000 {
        if net.job_done(Phase::All) {
            break;
        }
        net.step();
        // The leaf keeps at most 2 chunks, like a 2-chunk store budget.
        let now = net.now;
        if let Some(r) = net.relays.get_mut(&leaf) {
            let held: Vec<ChunkNo> = (0..10).map(ChunkNo).filter(|&c| r.has(c)).collect();
            for &c in held.iter().skip(2) {
                r.handle_lost(now, c);
                dropped += 1;
            }
        }
    }
    assert!(net.job_done(Phase::All), "the push never completed");
    assert!(dropped > 0);
    assert!(net.relays[&leaf].local_done(Phase::All));
    assert!(net.relays[&leaf].have_count() <= 2);
}

#[test]
fn chunks_a_node_kept_from_an_earlier_job_are_not_sent_again() {
    let p = plan(2, 4, Strategy::Topo);
    let mut net = Net::new(&p, 40, 10);
    // Every node kept 30 of the 40 chunks (urgent ones included).
    let kept: Vec<ChunkNo> = (0..30).map(ChunkNo).collect();
    for id in p.ids().skip(1) {
        net.held.insert(id, kept.clone());
    }
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert_everyone_has_everything(&net, &p);
    for id in p.ids().skip(1) {
        let got = net.received.get(&id).cloned().unwrap_or_default();
        assert!(
            got.iter().all(|c| *c >= ChunkNo(30)),
            "{id:?} was sent chunks it held: {got:?}"
        );
        assert_eq!(got.len(), 10, "{id:?} got {got:?}");
    }
}

#[test]
fn a_proxy_forwards_what_it_kept_to_children_that_did_not_keep_it() {
    let p = plan(2, 4, Strategy::Topo);
    let mut net = Net::new(&p, 40, 10);
    let proxies: Vec<NodeId> = p
        .ids()
        .skip(1)
        .filter(|id| p.subtree(*id).len() > 1)
        .collect();
    assert!(!proxies.is_empty());
    for id in &proxies {
        net.held.insert(*id, (0..40).map(ChunkNo).collect());
    }
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert_everyone_has_everything(&net, &p);
    for id in p.ids().skip(1) {
        let got = net.received.get(&id).map_or(0, Vec::len);
        let want = if proxies.contains(&id) { 0 } else { 40 };
        assert_eq!(got, want, "{id:?}");
    }
}

/// Urgent first on a node's own link: once one child has the urgent set, it gets no
/// hysteretic chunk while another child still waits for urgent chunks the node holds; and
/// none before its subtree reports holding the urgent set.
#[test]
fn no_hysteretic_chunk_leaves_while_a_child_waits_for_an_urgent_one() {
    let p = plan(1, 3, Strategy::Flat);
    let mut net = Net::new(&p, 6, 2);
    let now = net.now;
    let root = net.relays.get_mut(&net.root_id).expect("root");
    let kids: Vec<NodeId> = root.children().collect();
    assert!(kids.len() >= 2, "a flat plan of three nodes: {kids:?}");
    let (a, b) = (kids[0], kids[1]);
    for &k in &kids {
        root.handle_message(now, k, RelayMsg::Ping);
    }
    let urgent = |c: ChunkNo| net.schedule.urgent_chunk(c);
    let to_a: Vec<ChunkNo> = std::iter::from_fn(|| root.poll_bulk(now, a)).collect();
    assert_eq!(
        to_a.len(),
        2,
        "only the urgent set goes to a first: {to_a:?}"
    );
    assert!(to_a.iter().all(|&c| urgent(c)));
    assert!(
        !root.bulk_ready(net.now).any(|k| k == a),
        "a is not ready for more"
    );
    for &k in &kids[1..] {
        let got: Vec<ChunkNo> = (0..2).filter_map(|_| root.poll_bulk(now, k)).collect();
        assert!(got.iter().all(|&c| urgent(c)), "{got:?}");
    }
    // Sent is not held: the rest waits until each child's subtree reports the urgent set.
    assert!(!root.bulk_ready(net.now).any(|k| k == a));
    assert_eq!(root.poll_bulk(now, a), None);
    for &k in &kids {
        let report = Report {
            done: vec![(k, Phase::Urgent)],
            ..Report::default()
        };
        root.handle_message(now, k, RelayMsg::Report(report));
    }
    assert!(
        root.bulk_ready(net.now).any(|k| k == a),
        "every child holds the urgent set now"
    );
    let next = root.poll_bulk(now, a).expect("a hysteretic chunk for a");
    assert!(!urgent(next));
    assert!(root.poll_bulk(now, b).is_some_and(|c| !urgent(c)));
}

/// With a hold on the hysteretic set, the root streams only the urgent set until the hold
/// has passed after every node reported it; then the rest flows and the job completes.
#[test]
fn a_held_hysteretic_set_waits_for_its_time_after_the_urgent_set() {
    let p = plan(2, 6, Strategy::Topo);
    let mut net = Net::new(&p, 30, 6);
    let hold = Duration::from_millis(300);
    let urgent_at = net.hold_bulk_until_urgent(hold, None);
    while net.now < urgent_at + hold - Duration::from_millis(5) {
        net.step();
        assert_eq!(net.hysteretic_received(), 0, "bulk left during the hold");
    }
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert!(net.now >= urgent_at + hold);
    assert_everyone_has_everything(&net, &p);
}

/// A hold that ends when demand goes quiet: while reads keep fetching on demand the
/// hysteretic set waits; once no demand reached the root for `quiet`, it flows, long
/// before the hold's maximum.
#[test]
fn a_held_hysteretic_set_flows_once_demand_goes_quiet() {
    let p = plan(2, 6, Strategy::Topo);
    let mut net = Net::new(&p, 30, 6);
    let (max, quiet) = (Duration::from_secs(5), Duration::from_millis(100));
    let urgent_at = net.hold_bulk_until_urgent(max, Some(quiet));
    let leaf = p
        .ids()
        .skip(1)
        .find(|&id| p.children[id.index()].is_empty())
        .expect("a leaf");
    // Reads go on for 300 ms, each fetching a different hysteretic chunk on demand.
    let demanded: Vec<ChunkNo> = (0..30)
        .map(ChunkNo)
        .filter(|&c| !net.schedule.urgent_chunk(c))
        .take(6)
        .collect();
    for &c in &demanded {
        net.read(&leaf, c);
        for _ in 0..50 {
            net.step();
        }
    }
    let reads_end = net.now;
    let pushed = |n: &Net| {
        n.received
            .values()
            .flatten()
            .filter(|&&c| !n.schedule.urgent_chunk(c) && !demanded.contains(&c))
            .count()
    };
    assert_eq!(
        pushed(&net),
        0,
        "bulk left while reads were fetching on demand"
    );
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert!(
        net.now < urgent_at + max / 2,
        "the hold did not end when demand went quiet ({:?} after the urgent set)",
        net.now - urgent_at
    );
    assert!(net.now >= reads_end + quiet - Duration::from_millis(60));
    assert_everyone_has_everything(&net, &p);
}

/// Signs of applications from before the urgent set was everywhere (a node's own set-up,
/// an application that began before it) do not start the quiet clock, and neither does
/// the urgent set's arrival: the rest waits for the job's applications to show themselves
/// after it, and then for them to go quiet. On a cluster they start after the prolog, and
/// their own start-up (an interpreter, MPI) can keep them off the layer for a while.
#[test]
fn the_held_rest_waits_for_applications_after_the_urgent_set_then_for_their_quiet() {
    let p = plan(2, 6, Strategy::Topo);
    let mut net = Net::new(&p, 30, 6);
    let (max, quiet) = (Duration::from_secs(5), Duration::from_millis(100));
    let leaf = p
        .ids()
        .skip(1)
        .find(|&id| p.children[id.index()].is_empty())
        .expect("a leaf");
    let root = net.root_id;
    net.relays
        .get_mut(&root)
        .expect("root")
        .set_bulk_hold(BulkHold {
            max,
            quiet: Some(quiet),
        });
    // A sign before the urgent set is everywhere, once the leaf has its Start: a read of
    // an urgent chunk (a hysteretic one would be fetched on demand, and counted below).
    let urgent = (0..30)
        .map(ChunkNo)
        .find(|&c| net.schedule.urgent_chunk(c))
        .expect("an urgent chunk");
    net.run_until(20_000, |n| n.relays.contains_key(&leaf));
    assert!(!net.job_done(Phase::Urgent));
    net.read(&leaf, urgent);
    net.run_until(20_000, |n| n.job_done(Phase::Urgent));
    let urgent_at = net.now;
    // Ten times the quiet period with no application: nothing of the rest moves.
    while net.now < urgent_at + 10 * quiet {
        net.step();
    }
    assert_eq!(
        net.hysteretic_received(),
        0,
        "the rest flowed before any application"
    );
    // An application shows itself, then is quiet: the rest flows long before the maximum.
    net.read(&leaf, urgent);
    let sign = net.now;
    net.run_until(20_000, |n| n.job_done(Phase::All));
    assert!(
        net.now >= sign + quiet && net.now < urgent_at + max / 2,
        "the rest came {:?} after the sign, {:?} after the urgent set",
        net.now - sign,
        net.now - urgent_at
    );
    assert_everyone_has_everything(&net, &p);
}

/// Within the hold's maximum, demand that starts again after the hysteretic set began to
/// flow pauses it again until demand is quiet once more.
#[test]
fn new_demand_pauses_a_flowing_hysteretic_set_within_the_hold() {
    let p = plan(1, 4, Strategy::Topo);
    let mut net = Net::new(&p, 2000, 4);
    let quiet = Duration::from_millis(50);
    net.hold_bulk_until_urgent(Duration::from_secs(60), Some(quiet));
    let bulk = |n: &Net| n.received.values().flatten().count();
    let leaf = p
        .ids()
        .skip(1)
        .find(|&id| p.children[id.index()].is_empty())
        .expect("a leaf");
    // An application shows itself, then goes quiet: the rest flows.
    net.read(&leaf, ChunkNo(0));
    net.run_until(20_000, |n| bulk(n) > 40);
    net.read(&leaf, ChunkNo(0));
    // Let the sign reach the root (with the next reports) and the chunks already in
    // flight land.
    let read_at = net.now;
    net.run_until(20_000, |n| {
        n.root().last_demand.is_some_and(|d| d >= read_at)
    });
    for _ in 0..15 {
        net.step();
    }
    let paused_at = bulk(&net);
    for _ in 0..25 {
        net.step();
    }
    assert!(
        bulk(&net) <= paused_at + 1,
        "bulk kept flowing during new demand: {} -> {}",
        paused_at,
        bulk(&net)
    );
    net.run_until(50_000, |n| n.job_done(Phase::All));
    assert_everyone_has_everything(&net, &p);
}

/// A relaying node in `p` whose planned children include at least two of its own group's
/// nodes, and those children in plan order (the first is their deputy).
fn a_proxy_with_kin(p: &crate::Plan) -> (NodeId, Vec<NodeId>) {
    p.ids()
        .skip(1)
        .find_map(|id| {
            let kin: Vec<NodeId> = p.children[id.index()]
                .iter()
                .copied()
                .filter(|k| p.group[k.index()] == p.group[id.index()])
                .collect();
            (kin.len() >= 3).then_some((id, kin))
        })
        .expect("a proxy feeding members of its group")
}

/// The parents `node` re-attached to, each once (a node says it again after its own
/// re-attachment).
fn attached_to(net: &Net, node: NodeId) -> Vec<NodeId> {
    let mut to: Vec<NodeId> = net
        .root_events
        .iter()
        .filter_map(|e| match e {
            Event::Attached(parent, n) if *n == node => Some(*parent),
            _ => None,
        })
        .collect();
    to.dedup();
    to
}

/// Issue 17: the orphans of a failed proxy each re-attached across the group's uplink; now
/// each goes to the one before it in the plan, and only the first (the deputy) goes upward.
#[test]
fn orphans_of_a_dead_proxy_hang_below_each_other_and_only_the_deputy_goes_upward() {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 400, 10);
    let (proxy, kin) = a_proxy_with_kin(&p);
    net.run_until(10_000, |n| kin.iter().all(|k| n.relays.contains_key(k)));
    net.dead.insert(proxy);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    let deputy = kin[0];
    let upward = attached_to(&net, deputy);
    assert!(
        !upward.is_empty()
            && upward
                .iter()
                .all(|a| p.group[a.index()] != p.group[deputy.index()]),
        "the deputy re-attached outside its group: {:?}",
        net.root_events
    );
    for pair in kin.windows(2) {
        assert_eq!(
            attached_to(&net, pair[1]),
            vec![pair[0]],
            "{:?} went to the one before it: {:?}",
            pair[1],
            net.root_events
        );
    }
    assert!(net.root_events.contains(&Event::EdgeFailed(
        p.parent[proxy.index()].expect("not the root"),
        proxy
    )));
    assert_eq!(net.root().job_progress().expect("root").failed, 1);
    assert_everyone_has_everything(&net, &p);
}

#[test]
fn orphans_whose_deputy_died_too_reattach_upward() {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 400, 10);
    let (proxy, kin) = a_proxy_with_kin(&p);
    net.run_until(10_000, |n| kin.iter().all(|k| n.relays.contains_key(k)));
    net.dead.insert(proxy);
    net.dead.insert(kin[0]);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    for &ward in &kin[1..] {
        let to = attached_to(&net, ward);
        assert!(
            !to.is_empty() && !to.contains(&kin[0]),
            "{ward:?} re-attached past its dead deputy: {:?}",
            net.root_events
        );
    }
    assert_everyone_has_everything(&net, &p);
}

/// The deputy's wards can learn of the dead proxy first (their connection to it was reset)
/// and hang below the deputy while it still reports to the dead proxy: those reports are
/// lost. When the deputy re-attaches it announces its whole current subtree again, so the
/// root never takes the wards for unreachable (seen in the lab: `unreachable n05 -> n08`).
#[test]
fn wards_adopted_before_their_deputy_noticed_the_dead_proxy_are_not_lost_to_the_root() {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 400, 10);
    let (proxy, kin) = a_proxy_with_kin(&p);
    net.run_until(10_000, |n| kin.iter().all(|k| n.relays.contains_key(k)));
    net.dead.insert(proxy);
    let now = net.now;
    for ward in &kin[1..] {
        net.relays
            .get_mut(ward)
            .expect("started")
            .handle_unreachable(now, proxy);
    }
    net.run_until(100_000, |n| n.job_done(Phase::All));
    let unreachable: Vec<&Event> = net
        .root_events
        .iter()
        .filter(|e| matches!(e, Event::Unreachable(..)))
        .collect();
    assert!(unreachable.is_empty(), "{unreachable:?}");
    for pair in kin.windows(2) {
        assert_eq!(
            attached_to(&net, pair[1]),
            vec![pair[0]],
            "{:?}",
            net.root_events
        );
    }
    assert_eq!(net.root().job_progress().expect("root").failed, 1);
    assert_everyone_has_everything(&net, &p);
}

/// Chunk bytes the root pushed to the members of `group` (each once it held everything).
fn root_bytes_into(net: &Net, p: &crate::Plan, group: Option<crate::topology::GroupId>) -> u64 {
    net.root_events
        .iter()
        .filter_map(|e| match e {
            Event::EdgeBytes(from, to, b)
                if *from == net.root_id && p.group[to.index()] == group =>
            {
                Some(*b)
            }
            _ => None,
        })
        .sum()
}

/// A proxy stopped before it passed on some of its `Start`s (`cut`: they never arrive),
/// then found dead; returns the plan, the proxy and its kin after the job completed.
fn proxy_dead_before_passing_on_starts(
    cut: impl Fn(usize) -> bool,
) -> (Net, crate::Plan, Vec<NodeId>) {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 400, 10);
    let (proxy, kin) = a_proxy_with_kin(&p);
    for (i, &k) in kin.iter().enumerate() {
        if cut(i) {
            net.cut.insert((proxy, k));
        }
    }
    net.run_until(10_000, |n| {
        n.relays.get(&proxy).is_some_and(|r| r.have_count() > 0)
            && kin
                .iter()
                .enumerate()
                .all(|(i, k)| cut(i) || n.relays.contains_key(k))
    });
    net.dead.insert(proxy);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    (net, p, kin)
}

/// Seen in the lab (3x the layer across a group's uplink): a starved proxy stopped before
/// it passed on two of its three `Start`s. The root started those two itself, as its own
/// children, and each drew the whole layer across the uplink. Started from the root, they
/// hang below the one before them like the orphans that had their `Start`.
#[test]
fn orphans_that_never_got_their_start_still_hang_below_their_deputy() {
    let (net, p, kin) = proxy_dead_before_passing_on_starts(|i| i > 0);
    for pair in kin.windows(2) {
        assert_eq!(
            attached_to(&net, pair[1]),
            vec![pair[0]],
            "{:?} went to the one before it: {:?}",
            pair[1],
            net.root_events
        );
    }
    let group = p.group[kin[0].index()];
    let layer = 400 * 1000;
    assert!(
        root_bytes_into(&net, &p, group) <= layer,
        "the group took {} bytes from the root for a layer of {layer}",
        root_bytes_into(&net, &p, group)
    );
    assert_eq!(net.root().job_progress().expect("root").failed, 1);
    assert_everyone_has_everything(&net, &p);
}

/// The same when not even the deputy got its `Start`: the root starts it as its child
/// (it is the one that goes upward anyway), and the others hang below it.
#[test]
fn orphans_none_of_which_got_their_start_take_the_layer_in_once() {
    let (net, p, kin) = proxy_dead_before_passing_on_starts(|_| true);
    assert_eq!(attached_to(&net, kin[0]), vec![net.root_id]);
    for pair in kin.windows(2) {
        assert_eq!(
            attached_to(&net, pair[1]),
            vec![pair[0]],
            "{:?}",
            net.root_events
        );
    }
    let group = p.group[kin[0].index()];
    assert!(root_bytes_into(&net, &p, group) <= 400 * 1000);
    assert_everyone_has_everything(&net, &p);
}

/// Seen in the lab (2.16x the layer across a group's uplink, CI's figure): the proxy never
/// passed on its deputy's `Start`, and a ward that heard nothing from the proxy for a
/// deadline asked the deputy before the root had found the proxy dead and started the
/// deputy. Asked once, the ward went to the root a deadline later; it asks the deputy again.
#[test]
fn a_ward_that_asked_its_deputy_before_the_deputy_had_its_start_still_hangs_below_it() {
    let p = plan(4, 8, Strategy::Topo);
    let mut net = Net::new(&p, 400, 10);
    let (proxy, kin) = a_proxy_with_kin(&p);
    net.cut.insert((proxy, kin[0]));
    net.run_until(10_000, |n| {
        n.relays.get(&proxy).is_some_and(|r| r.have_count() > 0)
            && kin[1..].iter().all(|k| n.relays.contains_key(k))
    });
    // The wards stop hearing from the proxy first, so they ask the deputy before the root
    // notices the proxy (and starts the deputy).
    for ward in &kin[1..] {
        net.cut.insert((proxy, *ward));
    }
    for _ in 0..200 {
        net.step();
    }
    net.dead.insert(proxy);
    net.run_until(100_000, |n| n.job_done(Phase::All));
    assert_eq!(attached_to(&net, kin[0]), vec![net.root_id]);
    for pair in kin.windows(2) {
        assert_eq!(
            attached_to(&net, pair[1]),
            vec![pair[0]],
            "{:?}",
            net.root_events
        );
    }
    let group = p.group[kin[0].index()];
    assert!(root_bytes_into(&net, &p, group) <= 400 * 1000);
    assert_everyone_has_everything(&net, &p);
}

/// Passing the children's `Start`s on before the relay exists changes nothing but when they
/// leave: every node still gets each `Start` once and every chunk once, urgent first, and
/// the root hears every phase of every node.
#[test]
fn starts_passed_on_early_reach_every_node_once_and_the_push_completes() {
    for strategy in [Strategy::Topo, Strategy::Random] {
        let p = plan(4, 8, strategy);
        let mut net = Net::new(&p, 30, 10);
        net.early_starts = true;
        net.run_until(20_000, |n| n.job_done(Phase::All));
        assert_everyone_has_everything(&net, &p);
        for id in p.ids().skip(1) {
            assert_eq!(net.starts.get(&id), Some(&1), "{id:?}: {:?}", net.starts);
        }
        let progress = net.root().job_progress().expect("root");
        assert_eq!(progress.done, [p.len() - 1, p.len() - 1]);
    }
}

/// [`forward_start`] gives exactly the `Start`s a node's relay queues for its children,
/// and [`Relay::starts_sent_early`] drops those from the relay's queue (and nothing else),
/// in a plan with groups (kin), subtrees several levels deep, an owner and a clock.
#[test]
fn forward_start_gives_what_the_relay_would_send_and_the_relay_then_sends_none() {
    let p = plan(3, 8, Strategy::Topo);
    let now = Instant::now();
    let order = (0..6).map(ChunkNo).collect();
    let schedule = Arc::new(Schedule::new(order, 2, vec![100; 6]).expect("valid"));
    let nodes = plan_nodes(&p, |h| format!("{h}:7000"));
    let timing = Timing {
        heartbeat_ms: 100,
        deadline_ms: 500,
    };
    let index = Arc::from(&b"index"[..]);
    let mut root =
        Relay::new_root(JobId(5), nodes, index, schedule.clone(), timing, now).expect("root");
    root.set_owner(Some(1234));
    root.set_root_clock(42);
    let mut pending: Vec<Start> = drain_starts(&mut root, now)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let from_root = pending.len();
    let (mut checked, mut with_kin) = (0, 0);
    while let Some(start) = pending.pop() {
        assert_eq!(start.owner, Some(1234));
        let early = forward_start(&start).expect("forward");
        let mut plain = Relay::new_node(start.clone(), schedule.clone(), now).expect("node");
        let mut relay = Relay::new_node(start, schedule.clone(), now).expect("node");
        let queued = drain_starts(&mut plain, now);
        let early: Vec<(NodeId, Start)> = early.into_iter().map(|(i, s)| (i.id, s)).collect();
        assert_eq!(
            early, queued,
            "what forward_start gives is what the relay sends"
        );
        relay.starts_sent_early(now);
        assert!(
            drain_starts(&mut relay, now).is_empty(),
            "a Start sent twice"
        );
        checked += queued.len();
        with_kin += queued.iter().filter(|(_, s)| !s.kin.is_empty()).count();
        pending.extend(queued.into_iter().map(|(_, s)| s));
    }
    assert_eq!(
        checked + from_root,
        p.len() - 1,
        "every node's Start checked"
    );
    assert!(with_kin > 0, "the plan gave some node kin");
}

/// The `Start`s `relay` queued, in order, with their destinations.
fn drain_starts(relay: &mut Relay, now: Instant) -> Vec<(NodeId, Start)> {
    let mut out = Vec::new();
    while let Some(t) = relay.poll_transmit(now) {
        if let Transmit::Control {
            to,
            msg: Msg::Start(s),
        } = t
        {
            out.push((to, *s));
        }
    }
    out
}

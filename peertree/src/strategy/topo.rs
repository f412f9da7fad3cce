//! The topology-aware tree: the paper's Algorithm 1 and this project's improved variant.
//!
//! Both start the same way. The job's nodes are bucketed by group. A group whose proxy is
//! in the job is led by that proxy. A group whose proxy is not in the job borrows the proxy
//! if more than half of the group (t = size / 2) is in the job and the proxy is idle; its
//! nodes are otherwise **orphans**. Leaders keep `width - slaves` slots for other leaders.
//!
//! - `paper`: leaders breadth first under the root in job order; slaves under their leader;
//!   orphans last, under hosts of the deepest levels, so each orphan enters its group's
//!   uplink separately.
//! - `improved`: laid out so that every stream runs at a node's rate. A leader feeds its
//!   slaves directly and at most [`uplink_fanout`] other groups (as does the login node);
//!   when the topology carries link rates, a leader feeds as many slaves as its port
//!   carries at a node's rate and those relay to the rest in chains, and the login node
//!   feeds one host (a site's `login_copies`, at most what its link carries); the other
//!   groups hang below members with a spare upload rather than on their leader's CPU
//!   ([`relieve_leaders`]);
//!   a group without its proxy borrows it whenever a deputy would otherwise feed two or
//!   more nodes over one NIC, and a remaining orphan group elects a **deputy** that
//!   receives once and feeds the rest of its group, as a chain or, when the group is wide
//!   for the payload's chunks, as a binary tree ([`hang_orphans`]), so every group's
//!   uplink carries the payload inbound exactly once. Leaders are taken in topology order
//!   and laid out by recursive spans, so a leader's children are its neighbours (fewer
//!   hops across super nodes and cabinets).

use super::{Builder, Cursor};
use crate::metrics::hops_between;
use crate::plan::NodeId;
use crate::topology::GroupId;

/// A group's share of the job.
struct Bucket {
    group: GroupId,
    proxy: Option<NodeId>,
    members: Vec<NodeId>,
}

/// A group that will be entered through one host.
struct Lead {
    leader: NodeId,
    slaves: Vec<NodeId>,
}

/// Buckets job nodes by group, in order of each group's first appearance in the job.
fn buckets(b: &Builder<'_>) -> Vec<Bucket> {
    let topology = b.topology;
    let mut slot = vec![u32::MAX; topology.groups().len()];
    let mut out: Vec<Bucket> = Vec::new();
    for &id in &b.job {
        let t = b.topo[id.index()].expect("job nodes have a topology id");
        let g = topology.group_of(t);
        let s = &mut slot[g.0 as usize];
        if *s == u32::MAX {
            *s = out.len() as u32;
            out.push(Bucket {
                group: g,
                proxy: None,
                members: Vec::new(),
            });
        }
        let bucket = &mut out[*s as usize];
        if topology.is_proxy(t) {
            bucket.proxy = Some(id);
        } else {
            bucket.members.push(id);
        }
    }
    out
}

/// Splits buckets into led groups (proxy present or borrowed) and orphan groups.
///
/// The paper borrows an idle proxy when more than half the group is in the job; with
/// `eager`, also when at least three of its nodes are (see [`improved`]).
fn classify(
    b: &mut Builder<'_>,
    buckets: Vec<Bucket>,
    eager: bool,
) -> (Vec<Lead>, Vec<Vec<NodeId>>) {
    let mut leads = Vec::with_capacity(buckets.len());
    let mut orphans = Vec::new();
    for bucket in buckets {
        if let Some(proxy) = bucket.proxy {
            leads.push(Lead {
                leader: proxy,
                slaves: bucket.members,
            });
            continue;
        }
        let group = b.topology.group(bucket.group);
        let proxy = group.proxy;
        let size = group.members.len();
        let n = bucket.members.len();
        let worth = 2 * n > size || (eager && n >= 3);
        if worth && b.opts.availability.is_idle(b.topology.host(proxy)) {
            let leader = b.borrow(proxy);
            leads.push(Lead {
                leader,
                slaves: bucket.members,
            });
        } else {
            b.orphans.extend_from_slice(&bucket.members);
            orphans.push(bucket.members);
        }
    }
    (leads, orphans)
}

/// Hangs `slaves` under `leader`: at most `slots` directly, the rest breadth first under
/// the slaves already placed, so the group's traffic stays inside the group.
fn hang_slaves(b: &mut Builder<'_>, leader: NodeId, slots: usize, slaves: &[NodeId]) {
    let direct = slots.min(slaves.len());
    for &s in &slaves[..direct] {
        b.attach(leader, s);
    }
    if direct < slaves.len() {
        let mut cursor = Cursor::new(slaves[..direct].iter().copied());
        if direct == 0 {
            cursor = Cursor::new([leader]);
        }
        for &s in &slaves[direct..] {
            cursor.place(b, s);
        }
    }
}

/// The paper's Algorithm 1.
pub(super) fn paper(b: &mut Builder<'_>) {
    let w = b.width();
    let buckets = buckets(b);
    let (leads, orphan_groups) = classify(b, buckets, false);

    // Leaders breadth first: each parent takes leaders until its leader slots are used.
    let mut queue = std::collections::VecDeque::new();
    let mut slots = vec![0usize; b.hosts.len()];
    slots[0] = w;
    queue.push_back(b.root());
    let mut stranded = Vec::new();
    for (i, lead) in leads.iter().enumerate() {
        while queue
            .front()
            .is_some_and(|p: &NodeId| slots[p.index()] == 0)
        {
            queue.pop_front();
        }
        let Some(&p) = queue.front() else {
            stranded.push(i);
            continue;
        };
        b.attach(p, lead.leader);
        slots[p.index()] -= 1;
        slots[lead.leader.index()] = w - lead.slaves.len().min(w);
        queue.push_back(lead.leader);
    }
    for lead in &leads {
        if b.parent[lead.leader.index()].is_none() {
            continue;
        }
        hang_slaves(b, lead.leader, w, &lead.slaves);
    }
    // Only when every leader's slots go to its own slaves (width below the group size).
    let mut cursor = Cursor::new(b.bfs());
    for i in stranded {
        cursor.place(b, leads[i].leader);
        hang_slaves(b, leads[i].leader, w, &leads[i].slaves);
    }

    // Orphans at the last level: under hosts one level above the deepest, then deeper.
    let deepest = b
        .bfs()
        .iter()
        .map(|id| b.depth[id.index()])
        .max()
        .unwrap_or(0);
    let from = deepest.saturating_sub(1);
    let seed: Vec<NodeId> = b
        .bfs()
        .into_iter()
        .filter(|id| b.depth[id.index()] >= from)
        .collect();
    let mut cursor = Cursor::new(seed);
    for group in orphan_groups {
        for o in group {
            cursor.place(b, o);
        }
    }
}

/// The improved variant: one entry per group, laid out so that every edge can run at a
/// node's full rate.
///
/// The layout follows from the shape the planner assumes (a proxy's uplink carries its
/// whole group, its port at least 3 streams, a node's NIC one stream):
/// - a leader feeds at most [`UNRATED_DIRECT`] of its slaves directly and the rest of its
///   group hangs below them as chains (without rates a push must show a node's own rate
///   for the next plan to learn it; the paper's leader feeds all of them);
/// - a leader and the login node feed at most [`uplink_fanout`] other groups (the width
///   less a full group's slaves: 8 for groups of 8 and width 15), so no uplink is shared
///   by more streams than it carries at full rate;
/// - a group without its proxy borrows the proxy when it is idle and at least three of
///   its nodes are in the job (the paper: more than half), since a deputy would otherwise
///   feed two or more over one NIC; the remaining orphan groups get a deputy whose group
///   hangs below it as a chain (one stream per NIC) or, beyond 8 nodes (24 where the
///   payload's chunks are large), as a binary tree ([`hang_orphans`]);
/// - leaders are taken in topology order and laid out by recursive spans;
/// - with link rates ([`crate::rates`]), the fan-outs come from them instead: a leader
///   feeds `port / node` slaves and `uplink / node` groups, the login node one host (or
///   [`PlanOptions::login_copies`](super::PlanOptions), at most `login / node`), and the
///   rest of a group hangs below the directly fed slaves as pipelined chains, so a port
///   narrower than its group no longer caps the push (members' uploads are used); finally
///   the other groups a leader feeds move below its members' spare uploads
///   ([`relieve_leaders`]).
pub(super) fn improved(b: &mut Builder<'_>) {
    let w = b.width();
    let mut buckets = buckets(b);
    buckets.sort_by_key(|bk| bk.group);
    let largest = buckets
        .iter()
        .map(|bk| b.topology.group(bk.group).members.len())
        .max()
        .unwrap_or(1);
    let mut fan = Fanouts::new(b, largest);
    let (leads, orphan_groups) = classify(b, buckets, true);
    fan.pick_probe(&leads);
    // Children a host may have: the root `fan.root`, a leader its direct slaves plus
    // `fan.uplink` leaders or deputies, anyone else one (its NIC carries one stream).
    let mut cap = vec![1usize; b.hosts.len()];
    cap[b.root().index()] = fan.root;
    for lead in &leads {
        let d = fan.direct_of(lead);
        cap[lead.leader.index()] = d + (w - d).min(fan.uplink);
    }

    let mut stranded = Vec::new();
    let root = b.root();
    spans(
        b,
        root,
        cap[root.index()],
        &cap,
        &fan,
        &leads,
        &mut stranded,
    );
    for lead in &leads {
        if b.depth[lead.leader.index()] == u32::MAX {
            continue;
        }
        let direct = fan.direct_of(lead);
        match fan.member {
            Some(per_member) => hang_relays(b, lead.leader, direct, per_member, &lead.slaves),
            None if fan.chains(lead.slaves.len()) => {
                hang_relays(b, lead.leader, direct, 1, &lead.slaves)
            }
            None => hang_slaves(b, lead.leader, direct, &lead.slaves),
        }
    }
    // Slaves that feed other slaves (groups wider than the tree) may keep doing so.
    for (c, kids) in cap.iter_mut().zip(&b.children) {
        *c = (*c).max(kids.len());
    }

    let order: Vec<NodeId> = leads.iter().map(|l| l.leader).collect();
    // Stranded leaders (only when width 1 leaves leaders no slot) are proxies: first.
    let deputies = stranded
        .iter()
        .copied()
        .chain(orphan_groups.iter().map(|g| (g[0], &g[1..])));
    hang_deputies(b, &cap, &order, deputies);
    if b.topology.links().is_some() {
        relieve_leaders(b);
    }
}

/// Hands each other group a leader feeds to a member of the leader's group, whose upload
/// the tree otherwise leaves idle, so that a leader's CPU sends only to its own members.
/// With link rates, for every chunk size: with the login node sending one copy (the
/// default) a proxy would otherwise feed every other group itself. A deeper tree costs
/// little now that a relay takes in no faster than it passes on (the daemon's intake,
/// [`crate::relay::Relay::forward_lead`]): in the scale-model lab, 32 nodes, 46.8 MiB of
/// small chunks, one copy took 46 s against four copies' 34 s, where before that each
/// level of the tree added its lag and one copy took 130-134 s against 66-71 s
/// (BENCHMARKS.md, "A relay takes in no faster than it passes on"). The members' uploads
/// to other groups still cross their proxy, which routes them: in the lab that costs the
/// proxy's CPU (the fed proxy was throttled 12.5 s longer with one copy).
///
/// Each member uploads to one host. The leader's direct members start chains that carry the
/// rest of its group; a chain ends in a member with a spare upload or in another group. Of
/// the arrangements that put `k` other groups (the tallest) right below direct members and
/// the rest at the shallowest chain ends, with the group's own members spread evenly over
/// the other chains, the one with the shallowest tree is taken ([`relief_depth`]); a group
/// left over stays with the leader. Every stream still runs at a node's rate and every group
/// is still entered once, from the same group, a level deeper. Measured in the scale-model
/// lab: a proxy that fed its 4 members and 3 other groups (the login node feeding it alone)
/// was throttled by its CPU quota for 2.29 s of a 2.65 s push, where each proxy feeding
/// only its members was for 0.59-0.75 s of 2.01 s (BENCHMARKS.md, "The login node's
/// copies"). In the reference machine too a proxy's CPU, not its port, bounds what it
/// sends (1.56 Gbit/s per core).
fn relieve_leaders(b: &mut Builder<'_>) {
    let group_of = |b: &Builder<'_>, id: NodeId| b.topo[id.index()].map(|t| b.topology.group_of(t));
    for leader in b.bfs() {
        let Some(t) = b.topo[leader.index()].filter(|&t| b.topology.is_proxy(t)) else {
            continue;
        };
        let g = Some(b.topology.group_of(t));
        // The leader's own group below it, breadth first, and the other groups it feeds.
        let (mut own, mut foreign) = (Vec::new(), Vec::new());
        let mut queue = std::collections::VecDeque::from([leader]);
        while let Some(n) = queue.pop_front() {
            for &c in &b.children[n.index()] {
                if group_of(b, c) == g {
                    own.push(c);
                    queue.push_back(c);
                } else {
                    foreign.push(c);
                }
            }
        }
        if foreign.is_empty() || own.is_empty() {
            continue;
        }
        let direct: Vec<NodeId> = own
            .iter()
            .copied()
            .filter(|&m| b.parent[m.index()] == Some(leader))
            .collect();
        let deeper: Vec<NodeId> = own.into_iter().filter(|m| !direct.contains(m)).collect();
        let mut tall: Vec<(usize, NodeId)> = foreign.iter().map(|&f| (height(b, f), f)).collect();
        tall.sort_by_key(|&(h, _)| std::cmp::Reverse(h));
        let heights: Vec<usize> = tall.iter().map(|&(h, _)| h).collect();
        let d1 = b.depth[leader.index()] as usize + 1;
        let most = heights
            .len()
            .min(direct.len() - usize::from(!deeper.is_empty()));
        let k = (0..=most)
            .min_by_key(|&k| relief_depth(d1, direct.len(), deeper.len(), &heights, k))
            .unwrap_or(0);
        for &x in deeper.iter().chain(&foreign) {
            detach(b, x);
        }
        for (&(_, f), &m) in tall.iter().zip(&direct[..k]) {
            b.attach(m, f);
        }
        // The rest of the group in even chains below the other direct members.
        let mut ends: Vec<NodeId> = direct[k..].to_vec();
        for (i, &m) in deeper.iter().enumerate() {
            let chain = i % ends.len();
            b.attach(ends[chain], m);
            ends[chain] = m;
        }
        ends.sort_by_key(|e| b.depth[e.index()]);
        let mut ends = ends.into_iter();
        for &(_, f) in &tall[k..] {
            b.attach(ends.next().unwrap_or(leader), f);
        }
        redepth(b, leader);
    }
}

/// The deepest level below a leader whose direct members are at depth `d1` when `k` of the
/// other groups (of subtree `heights`, tallest first) hang right below `k` direct members,
/// the group's other `deeper` members spread evenly over chains below the remaining
/// `direct - k`, and the other groups at the shallowest chain ends (or, with none left, at
/// the leader). Pure arithmetic for [`relieve_leaders`].
fn relief_depth(d1: usize, direct: usize, deeper: usize, heights: &[usize], k: usize) -> usize {
    let chains = direct - k;
    let mut ends: Vec<usize> = (0..chains)
        .map(|i| d1 + deeper / chains + usize::from(i < deeper % chains))
        .collect();
    ends.sort_unstable();
    let own = ends.last().copied().unwrap_or(d1);
    let placed = heights[..k].iter().map(|h| d1 + h);
    let rest = heights[k..]
        .iter()
        .enumerate()
        .map(|(i, h)| ends.get(i).map_or(d1 - 1 + h, |e| e + h));
    placed.chain(rest).fold(own, usize::max)
}

/// Levels in the subtree of `n`, itself included.
fn height(b: &Builder<'_>, n: NodeId) -> usize {
    1 + b.children[n.index()]
        .iter()
        .map(|&c| height(b, c))
        .max()
        .unwrap_or(0)
}

/// Takes `n` (with its subtree) off its parent.
fn detach(b: &mut Builder<'_>, n: NodeId) {
    if let Some(p) = b.parent[n.index()].take() {
        b.children[p.index()].retain(|&c| c != n);
    }
}

/// Recomputes the depth of every host below `n`.
fn redepth(b: &mut Builder<'_>, n: NodeId) {
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        for i in 0..b.children[x.index()].len() {
            let c = b.children[x.index()][i];
            b.depth[c.index()] = b.depth[x.index()] + 1;
            stack.push(c);
        }
    }
}

/// Deputies: receive-only leaders of orphan groups, each under the closest (fewest hops)
/// of the root and the nearest leaders with room on either side in topology `order`, with
/// the rest of its group below it ([`hang_orphans`]). `cap` is each host's fan-out.
fn hang_deputies<'l>(
    b: &mut Builder<'_>,
    cap: &[usize],
    order: &[NodeId],
    deputies: impl Iterator<Item = (NodeId, &'l [NodeId])>,
) {
    let group_of = |b: &Builder<'_>, id: NodeId| b.topo[id.index()].map(|t| b.topology.group_of(t));
    // Within its fan-out (`cap`), or merely within the width.
    let usable = |b: &Builder<'_>, id: NodeId| {
        b.depth[id.index()] != u32::MAX && b.children[id.index()].len() < cap[id.index()]
    };
    let placed = |b: &Builder<'_>, id: NodeId| b.depth[id.index()] != u32::MAX && b.spare(id) > 0;
    let mut fallback: Option<Cursor> = None;
    let mut prev: Option<NodeId> = None;
    for (deputy, rest) in deputies {
        let g = group_of(b, deputy);
        let pos = order.partition_point(|l| group_of(b, *l) < g);
        let near = |b: &Builder<'_>, ok: &dyn Fn(&Builder<'_>, NodeId) -> bool| {
            let right = order[pos..].iter().take(NEAR).find(|l| ok(b, **l));
            let left = order[..pos].iter().rev().take(NEAR).find(|l| ok(b, **l));
            // A nearby slave can be fewer hops away than the root when there are upper
            // levels.
            let slave = |l: Option<&NodeId>| {
                l.and_then(|l| b.children[l.index()].iter().find(|c| ok(b, **c)))
            };
            [
                right.copied(),
                left.copied(),
                Some(b.root()).filter(|r| ok(b, *r)),
                prev.filter(|p| ok(b, *p)),
                slave(order.get(pos)).copied(),
                slave(pos.checked_sub(1).and_then(|i| order.get(i))).copied(),
            ]
        };
        let dt = b.topo[deputy.index()];
        // Fewest hops first (every byte pays them); among those a parent within its
        // fan-out, then the shallowest.
        let best = near(b, &usable)
            .into_iter()
            .chain(near(b, &placed))
            .flatten()
            .min_by_key(|p| {
                (
                    hops_between(b.topology, b.topo[p.index()], dt),
                    !usable(b, *p),
                    b.depth[p.index()],
                )
            });
        match best {
            Some(p) => b.attach(p, deputy),
            None => fallback
                .get_or_insert_with(|| Cursor::new(b.bfs()))
                .place(b, deputy),
        }
        hang_orphans(b, deputy, rest);
        prev = Some(rest.last().copied().unwrap_or(deputy));
    }
}

/// Where a push's chunks are this large on average (stored bytes) or larger, links bound
/// it; below, each chunk's CPU at every level does ([`hang_orphans`]). The reference node
/// of the scale model (1.56 Gbit/s per core) receives a small chunk in about 170 µs of a
/// core, the time its link takes for 33 KB; this is twice that.
const LINK_BOUND_CHUNK: u64 = 64 << 10;

/// Whether links, not each chunk's CPU, bound the push: the payload's mean chunk is known
/// and at least [`LINK_BOUND_CHUNK`].
fn link_bound(b: &Builder<'_>) -> bool {
    b.opts.mean_chunk.is_some_and(|c| c >= LINK_BOUND_CHUNK)
}

/// Orphan groups of at most this many nodes (the deputy included) hang below their deputy
/// as a chain when the push is bound by its links: at most 23 levels.
const ORPHAN_CHAIN_MAX: usize = 24;

/// Orphan groups of at most this many nodes hang as a chain when each chunk's CPU bounds
/// the push (or the payload is unknown): at most 7 levels.
const ORPHAN_CHAIN_MAX_SMALL_CHUNKS: usize = 8;

/// Hangs the rest of an orphan group below its `deputy`, which is the group's only entry.
///
/// A member's NIC carries one stream at a node's rate, so a chain keeps every stream at
/// that rate and every member uploads the payload once; but each of its `n - 1` levels
/// costs the payload a level's latency. A binary tree is `floor(log2 n)` levels deep, but
/// each relaying member feeds two at half its rate and with twice its CPU. No tree entered
/// once does both, and which costs more depends on what bounds the push, so the shape
/// follows the payload's mean chunk ([`LINK_BOUND_CHUNK`]):
/// - **large chunks, bound by links**: a chain up to [`ORPHAN_CHAIN_MAX`] nodes. In the
///   scale-model lab (BENCHMARKS.md, "Fragmented allocations"; `scripts/bench-fragmented.sh`),
///   250 KB chunks, 12 orphans in groups of 14: the urgent set at 1.09x the whole-group
///   job and the whole layer at 1.07x, against 1.34x and 1.66x as a binary tree (each of
///   whose levels cost 60-350 ms against a chain's 22 ms); 22 orphans in groups of 26: the
///   chain 1.28x, the tree 1.30x, so the chain stops near there;
/// - **small chunks, bound by each chunk's CPU** (software layers: the demo's 14.8 KB mean):
///   a chain up to [`ORPHAN_CHAIN_MAX_SMALL_CHUNKS`] nodes, a binary tree beyond. There every
///   level delays the layer by seconds in the scale model (a relay whose CPU quota its
///   receiving spends forwards about one small chunk per child per period, its bulk pacer
///   losing its place: BENCHMARKS.md): the demo layer's whole layer took 1.7x the
///   whole-group job's along 12-member chains and 1.0x as binary trees; its urgent set
///   0.93x and 0.95x.
fn hang_orphans(b: &mut Builder<'_>, deputy: NodeId, rest: &[NodeId]) {
    let max = if link_bound(b) {
        ORPHAN_CHAIN_MAX
    } else {
        ORPHAN_CHAIN_MAX_SMALL_CHUNKS
    };
    let fan = if rest.len() < max { 1 } else { 2 };
    let fan = fan.min(b.width());
    hang_relays(b, deputy, fan, fan, rest);
}

/// Members a leader feeds itself without rates, the rest of its group hanging below them
/// as chains. A push planned without rates is what teaches the next plan the machine's
/// rates (`pushreport::rates`), and a node's rate shows only in a stream into a member
/// that its proxy's port does not hold back: with the whole group fed from the port, every
/// member's stream is its share of the port, the fastest stream of the push is the login
/// node's into a proxy (whose way in is its group's uplink, wider than a NIC), and in the
/// lab a node's rate taken from it (95 Mbit/s over NICs of 76) counted the port as 3
/// streams instead of 4: the second push took 1.32x the push with the lab's rates
/// (BENCHMARKS.md, "Link rates the tree learns"). Three streams fit a port of at least
/// three nodes' rate (the lab's carry 4, Tianhe's 8), and every chained member receives
/// from a member that receives at a node's rate; the port is then known from below and
/// each later plan gives it one stream more until a push shows it shared.
const UNRATED_DIRECT: usize = 3;

/// Members the leader of the probe group feeds itself without rates
/// ([`Fanouts::pick_probe`]): fewer than [`UNRATED_DIRECT`], so that a port that holds 3
/// streams back does not hold these.
const PROBE_DIRECT: usize = 2;

/// How many streams each kind of host feeds, from the link rates when the topology has
/// them, else from the width and the Tianhe shape (an uplink that carries its whole group;
/// a port that feeds [`UNRATED_DIRECT`] members, the rest chained).
struct Fanouts {
    width: usize,
    /// Hosts the login node feeds.
    root: usize,
    /// Other groups a leader feeds through its uplink.
    uplink: usize,
    /// Members a leader feeds through its port (`usize::MAX`: all, up to the width).
    port: usize,
    /// Children of a member that relays to members; `None` without rates (members
    /// relay only when a group is wider than the tree).
    member: Option<usize>,
    /// Planned without rates: a leader feeds [`UNRATED_DIRECT`] members and chains the rest.
    unrated: bool,
    /// Planned without rates: the leader that feeds [`PROBE_DIRECT`] members and chains
    /// the rest ([`Fanouts::pick_probe`]).
    probe: Option<NodeId>,
}

impl Fanouts {
    fn new(b: &Builder<'_>, largest_group: usize) -> Self {
        let w = b.width();
        match b.topology.links() {
            Some(r) => Fanouts {
                width: w,
                root: r.login_streams().min(w).min(b.opts.rated_login_cap()),
                uplink: r.uplink_streams().min(w),
                port: r.port_streams(),
                member: Some(r.member_streams().min(w)),
                unrated: false,
                probe: None,
            },
            None => {
                let uplink = uplink_fanout(w, largest_group);
                Fanouts {
                    width: w,
                    root: uplink.min(w).min(b.opts.login_cap()),
                    uplink,
                    port: usize::MAX,
                    member: None,
                    unrated: true,
                    probe: None,
                }
            }
        }
    }

    /// Slaves a leader of `n` slaves feeds itself.
    ///
    /// Without rates, a leader feeds at most [`UNRATED_DIRECT`] of a group that fits the
    /// width, and the rest hang below them as chains ([`Fanouts::chains`]).
    fn direct(&self, n: usize) -> usize {
        let w = self.width;
        let by_width = if w > 1 { n.min(w - 1) } else { n.min(w) };
        if self.chains(n) {
            return UNRATED_DIRECT;
        }
        by_width.min(self.port)
    }

    /// Without rates, and with two or more groups that are chained
    /// ([`Fanouts::chains`]), the first of them is fed as [`PROBE_DIRECT`] chains from its
    /// leader: its leader's port carries 2 streams, so they show a node's own rate unless
    /// the port is narrower than 2 NICs. The other groups' 3 streams then show whether
    /// their ports held them back (below that rate: the port is measured) or not (the port
    /// is known from below). Without the probe, 3 streams on a port of 2 nodes' rate ran
    /// at two thirds of a NIC each, as did every chain below them, nothing showed a node's
    /// rate, and the port was taken as 4 streams: in the lab (`--proxy-group-rate
    /// 200mbit`) the second push took 1.92x the push with the lab's rates.
    fn pick_probe(&mut self, leads: &[Lead]) {
        let mut chained = leads.iter().filter(|l| self.chains(l.slaves.len()));
        if let (Some(first), Some(_)) = (chained.next(), chained.next()) {
            self.probe = Some(first.leader);
        }
    }

    /// Slaves `lead` feeds itself: [`PROBE_DIRECT`] for the probe
    /// ([`Fanouts::pick_probe`]), else [`Fanouts::direct`].
    fn direct_of(&self, lead: &Lead) -> usize {
        if self.probe == Some(lead.leader) {
            PROBE_DIRECT
        } else {
            self.direct(lead.slaves.len())
        }
    }

    /// Whether a leader of `n` slaves feeds [`UNRATED_DIRECT`] of them and the rest hang
    /// below those as chains: planned without rates, a group wider than that and within
    /// the width.
    fn chains(&self, n: usize) -> bool {
        self.unrated && n > UNRATED_DIRECT && n < self.width
    }
}

/// Hangs `slaves` under `leader` so that every stream runs at a member's rate: `direct`
/// of them under the leader (what its port carries), each of the rest under the earliest
/// placed member with fewer than `per_member` children. With one child per member the
/// group becomes `direct` pipelined chains of equal length, every member uploading once.
fn hang_relays(
    b: &mut Builder<'_>,
    leader: NodeId,
    direct: usize,
    per_member: usize,
    slaves: &[NodeId],
) {
    // At least one member under the leader, or the first would hang under itself.
    let direct = direct.max(1).min(slaves.len());
    for &s in &slaves[..direct] {
        b.attach(leader, s);
    }
    let per_member = per_member.max(1);
    let mut next = 0;
    for i in direct..slaves.len() {
        let parent = slaves[next];
        b.attach(parent, slaves[i]);
        if b.children[parent.index()].len() >= per_member {
            next += 1;
        }
    }
}

/// Other groups a leader (or the login node) feeds: the width less a full group's slaves,
/// since the planner's width counts a proxy's slaves plus the groups its uplink carries at
/// a node's rate (W = 15 = 7 + 8 on Tianhe). At least 2 so the tree of leaders is not a
/// chain when groups are as wide as the tree.
fn uplink_fanout(width: usize, group_size: usize) -> usize {
    width
        .saturating_sub(group_size.saturating_sub(1))
        .max(2)
        .min(width)
}

/// How far either side of its group a deputy looks for a leader with room.
const NEAR: usize = 16;

/// Places `leads` below `parent` (which has `slots` free): split into `slots` contiguous
/// spans, each span's first leader a child of `parent` and the parent of the rest of it,
/// with as many slots as its `cap` leaves beside its direct slaves.
fn spans<'l>(
    b: &mut Builder<'_>,
    parent: NodeId,
    slots: usize,
    cap: &[usize],
    fan: &Fanouts,
    leads: &'l [Lead],
    stranded: &mut Vec<(NodeId, &'l [NodeId])>,
) {
    if leads.is_empty() {
        return;
    }
    if slots == 0 {
        stranded.extend(leads.iter().map(|l| (l.leader, l.slaves.as_slice())));
        return;
    }
    let k = slots.min(leads.len());
    let cuts = cut_points(b, leads, k);
    let mut start = 0;
    for end in cuts {
        let span = &leads[start..end];
        start = end;
        let head = &span[0];
        b.attach(parent, head.leader);
        let own = cap[head.leader.index()].saturating_sub(fan.direct_of(head));
        spans(b, head.leader, own, cap, fan, &span[1..], stranded);
    }
}

/// Ends of `k` contiguous, non-empty spans covering `leads`: as even as possible, each cut
/// moved to a nearby unit boundary (super node, cabinet) so fewer edges cross units.
fn cut_points(b: &Builder<'_>, leads: &[Lead], k: usize) -> Vec<usize> {
    let n = leads.len();
    let (q, r) = (n / k, n % k);
    let mut cuts = Vec::with_capacity(k);
    let mut even = 0;
    let levels = b.topology.levels().len();
    let group = |i: usize| {
        let t = b.topo[leads[i].leader.index()].expect("leaders are in the topology");
        b.topology.group_of(t)
    };
    // True when a cut before `i` separates two units of some level.
    let boundary = |i: usize| {
        (0..levels).any(|l| b.topology.unit(l, group(i - 1)) != b.topology.unit(l, group(i)))
    };
    for i in 0..k {
        even += q + usize::from(i < r);
        let prev = cuts.last().copied().unwrap_or(0);
        let remaining = k - i - 1;
        let mut cut = even;
        if levels > 0 && remaining > 0 && !boundary(even) {
            let slack = (q / 2).max(1);
            let lo = (prev + 1).max(even.saturating_sub(slack));
            let hi = (n - remaining).min(even + slack);
            cut = (1..=slack)
                .flat_map(|d| [even.checked_sub(d), Some(even + d)])
                .flatten()
                .find(|c| (lo..=hi).contains(c) && boundary(*c))
                .unwrap_or(even);
        }
        let cut = if remaining == 0 {
            n
        } else {
            cut.clamp(prev + 1, n - remaining)
        };
        cuts.push(cut);
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::relief_depth;

    /// The lab's 4 x 8 fed by one copy: a proxy at depth 1 with 4 direct members, 3 more
    /// members and 3 other groups of 3 levels each. Each group right below a direct member,
    /// the other 3 members in one chain, is the shallowest: 5 levels, against 6 with the
    /// groups at the ends of even chains.
    #[test]
    fn relief_puts_tall_groups_high_and_keeps_a_chain_for_the_rest() {
        let depth = |k| relief_depth(2, 4, 3, &[3, 3, 3], k);
        assert_eq!(depth(3), 5);
        assert_eq!(depth(0), 6);
        assert_eq!((0..=3).min_by_key(|&k| depth(k)), Some(3));
        // A group of 14 (4 direct, 9 more) feeding 3 others: one chain of 9 would be 11
        // levels deep, so fewer groups go right below direct members.
        let wide = |k| relief_depth(2, 4, 9, &[4, 4, 4], k);
        assert!(wide(3) > wide(1), "{} {}", wide(3), wide(1));
        // Nothing of the group below: every group right below a direct member.
        assert_eq!(relief_depth(2, 4, 0, &[2, 2], 2), 4);
    }
}

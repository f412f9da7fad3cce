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
//! - `improved`: an orphan group elects one member as **deputy**, which receives once and
//!   feeds the rest inside the group, so every group's uplink carries the payload inbound
//!   exactly once. Leaders are taken in topology order and laid out by recursive spans, so
//!   a leader's children are its neighbours (fewer hops across super nodes and cabinets).
//!   A leader keeps at least one slot for other leaders when `width > 1`.

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
fn classify(b: &mut Builder<'_>, buckets: Vec<Bucket>) -> (Vec<Lead>, Vec<Vec<NodeId>>) {
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
        if 2 * bucket.members.len() > size && b.opts.availability.is_idle(b.topology.host(proxy)) {
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
    let (leads, orphan_groups) = classify(b, buckets);

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

/// The improved variant: deputies for orphan groups, leaders laid out by spans, and the
/// smallest depth budget the job fits in.
///
/// With a budget `D`, a leader at depth `d <= D - 2` hands its slaves to one slave that
/// fans out inside the group (one hop, same uplink traffic) and keeps the other slots for
/// leaders, so more proxies fit near the root. Budgets are tried from the W-ary lower bound
/// up; the first tree that fits is taken.
pub(super) fn improved(b: &mut Builder<'_>) {
    let n = b.job.len();
    let w = b.width() as u64;
    let (mut budget, mut reach, mut level) = (0u32, 0u64, 1u64);
    while reach < n as u64 {
        budget += 1;
        level = level.saturating_mul(w);
        reach = reach.saturating_add(level);
        if w == 1 && budget as usize >= n {
            break;
        }
    }
    if w == 1 {
        improved_within(b, None);
        return;
    }
    for d in budget.max(1)..budget.max(1) + 6 {
        let mut trial = b.clone();
        improved_within(&mut trial, Some(d));
        if trial.depth.iter().all(|x| *x <= d) {
            *b = trial;
            return;
        }
    }
    improved_within(b, None);
}

fn improved_within(b: &mut Builder<'_>, budget: Option<u32>) {
    let w = b.width();
    let mut buckets = buckets(b);
    buckets.sort_by_key(|bk| bk.group);
    let (leads, orphan_groups) = classify(b, buckets);
    let slave_slots = |n: usize| if w > 1 { n.min(w - 1) } else { n.min(w) };
    // Direct slaves of a leader at `depth`: few when the budget leaves room below them.
    let direct = |n: usize, depth: u32| match budget {
        Some(d) if n > 0 && depth + 2 <= d => n.div_ceil(w + 1).min(w - 1).max(1),
        _ => slave_slots(n),
    };

    let mut stranded = Vec::new();
    let root = b.root();
    spans(b, root, w, &leads, &direct, &mut stranded);
    for lead in &leads {
        let depth = b.depth[lead.leader.index()];
        if depth != u32::MAX {
            hang_slaves(
                b,
                lead.leader,
                direct(lead.slaves.len(), depth),
                &lead.slaves,
            );
        }
    }

    // Deputies: receive-only leaders of orphan groups, under the closest (fewest hops)
    // of the root and the nearest leaders with room on either side in topology order.
    let order: Vec<NodeId> = leads.iter().map(|l| l.leader).collect();
    let group_of = |b: &Builder<'_>, id: NodeId| b.topo[id.index()].map(|t| b.topology.group_of(t));
    let usable = |b: &Builder<'_>, id: NodeId| b.depth[id.index()] != u32::MAX && b.spare(id) > 0;
    let mut fallback: Option<Cursor> = None;
    // Stranded leaders (only when width 1 leaves leaders no slot) are proxies: first.
    let deputies = stranded
        .iter()
        .copied()
        .chain(orphan_groups.iter().map(|g| (g[0], &g[1..])));
    let mut prev: Option<NodeId> = None;
    for (deputy, rest) in deputies {
        let g = group_of(b, deputy);
        let pos = order.partition_point(|l| group_of(b, *l) < g);
        let right = order[pos..]
            .iter()
            .take(NEAR)
            .find(|l| usable(b, **l))
            .copied();
        let left = order[..pos]
            .iter()
            .rev()
            .take(NEAR)
            .find(|l| usable(b, **l))
            .copied();
        // A nearby slave can be fewer hops away than the root when there are upper levels.
        let near_slave = |b: &Builder<'_>, l: Option<&NodeId>| {
            l.and_then(|l| {
                b.children[l.index()]
                    .iter()
                    .copied()
                    .find(|c| usable(b, *c))
            })
        };
        let candidates = [
            right,
            left,
            Some(b.root()).filter(|r| usable(b, *r)),
            prev.filter(|p| usable(b, *p)),
            near_slave(b, order.get(pos)),
            near_slave(b, pos.checked_sub(1).and_then(|i| order.get(i))),
        ];
        let dt = b.topo[deputy.index()];
        let best = candidates.into_iter().flatten().min_by_key(|p| {
            (
                hops_between(b.topology, b.topo[p.index()], dt),
                b.depth[p.index()],
            )
        });
        match best {
            Some(p) => b.attach(p, deputy),
            None => fallback
                .get_or_insert_with(|| Cursor::new(b.bfs()))
                .place(b, deputy),
        }
        hang_slaves(b, deputy, slave_slots(rest.len()), rest);
        prev = Some(deputy);
    }
}

/// How far either side of its group a deputy looks for a leader with room.
const NEAR: usize = 16;

/// Places `leads` below `parent` (which has `slots` free): split into `slots` contiguous
/// spans, each span's first leader a child of `parent` and the parent of the rest of it.
fn spans<'l>(
    b: &mut Builder<'_>,
    parent: NodeId,
    slots: usize,
    leads: &'l [Lead],
    slave_slots: &dyn Fn(usize, u32) -> usize,
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
        let own = b.width() - slave_slots(head.slaves.len(), b.depth[head.leader.index()]);
        spans(b, head.leader, own, &span[1..], slave_slots, stranded);
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

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

/// The improved variant: deputies for orphan groups, leaders laid out by spans.
pub(super) fn improved(b: &mut Builder<'_>) {
    let w = b.width();
    let mut buckets = buckets(b);
    buckets.sort_by_key(|bk| bk.group);
    let (leads, orphan_groups) = classify(b, buckets);
    let slave_slots = |n: usize| if w > 1 { n.min(w - 1) } else { n.min(w) };

    let mut stranded = Vec::new();
    let root = b.root();
    spans(b, root, w, &leads, &slave_slots, &mut stranded);
    for lead in &leads {
        if b.depth[lead.leader.index()] != u32::MAX {
            hang_slaves(b, lead.leader, slave_slots(lead.slaves.len()), &lead.slaves);
        }
    }

    // Deputies: receive-only leaders of orphan groups, under the nearest leader (in
    // topology order) that still has room, else breadth first anywhere.
    let order: Vec<NodeId> = leads.iter().map(|l| l.leader).collect();
    let group_of = |b: &Builder<'_>, id: NodeId| b.topo[id.index()].map(|t| b.topology.group_of(t));
    let usable = |b: &Builder<'_>, id: NodeId| b.depth[id.index()] != u32::MAX && b.spare(id) > 0;
    let mut fallback: Option<Cursor> = None;
    let mut next = 0;
    let deputies = orphan_groups
        .iter()
        .map(|g| (g[0], &g[1..]))
        .chain(stranded.iter().copied());
    for (deputy, rest) in deputies {
        let g = group_of(b, deputy);
        while next < order.len()
            && (!usable(b, order[next]) || (group_of(b, order[next]) < g && next + 1 < order.len()))
        {
            next += 1;
        }
        if next < order.len() && usable(b, order[next]) {
            b.attach(order[next], deputy);
        } else {
            fallback
                .get_or_insert_with(|| Cursor::new(b.bfs()))
                .place(b, deputy);
        }
        hang_slaves(b, deputy, slave_slots(rest.len()), rest);
    }
}

/// Places `leads` below `parent` (which has `slots` free): split into `slots` contiguous
/// spans, each span's first leader a child of `parent` and the parent of the rest of it.
fn spans<'l>(
    b: &mut Builder<'_>,
    parent: NodeId,
    slots: usize,
    leads: &'l [Lead],
    slave_slots: &dyn Fn(usize) -> usize,
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
    let (q, r) = (leads.len() / k, leads.len() % k);
    let mut start = 0;
    for i in 0..k {
        let len = q + usize::from(i < r);
        let span = &leads[start..start + len];
        start += len;
        let head = &span[0];
        b.attach(parent, head.leader);
        let own = b.width() - slave_slots(head.slaves.len());
        spans(b, head.leader, own, &span[1..], slave_slots, stranded);
    }
}

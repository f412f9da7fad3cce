//! This node's part of the plan: its children's state, the `Start` and `Prepare` each of
//! them gets (their planned subtree and our ancestry), what they report up, and the push
//! of chunks down to them in the root's order ([`Relay::poll_bulk`]). Failures below are
//! handled in [`super::recovery`]; nothing here decides that a child is dead.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use fixedbitset::FixedBitSet;

use super::msg::bits_from_words;
use super::{ChunkNo, Msg, NodeInfo, Phase, Prepare, Relay, Report, Start, Transmit};
use crate::error::{Error, Result};
use crate::plan::NodeId;

/// What a relay knows about one of its children.
#[derive(Debug)]
pub(super) struct Child {
    /// Who the child is and where it listens.
    pub(super) info: NodeInfo,
    /// Chunks the child holds or has been sent.
    pub(super) sent: FixedBitSet,
    /// Next position in the push order to consider: earlier ones were sent, and any taken
    /// back since (`Lost`) go by demand.
    pub(super) cursor: usize,
    /// `Start` has been handed to the transport.
    pub(super) started: bool,
    /// The child has answered since: bulk may flow.
    pub(super) ready: bool,
    /// The child's last message, for its deadline.
    pub(super) last_heard: Instant,
    /// When the transport last heard from the child ([`Relay::handle_transport_alive`]).
    pub(super) transport_heard: Instant,
    /// Silent past its deadline and kept only because its transport answers (counted once
    /// per silence in [`super::RelayStats::starved`]).
    pub(super) starved: bool,
    /// Our last message to it, for the heartbeat.
    pub(super) last_sent: Instant,
    /// Chunk bytes sent to it, pushed or demanded.
    pub(super) bytes: u64,
    /// Started from here after its planned parent failed: report the adoption when it
    /// first speaks.
    pub(super) restarted: bool,
    /// When its `Start` was handed to the transport, until its first answer (the edge's
    /// round trip is measured from here).
    pub(super) start_sent: Option<Instant>,
    /// Nodes of its planned subtree (itself included) that have not reported holding the
    /// urgent set: no hysteretic chunk goes to it until none is left, so that while the
    /// urgent set spreads below it no node spends link or CPU on the rest of the layer.
    /// Empty for a child whose subtree is not known (adopted) or has changed (a failure or
    /// a re-attachment below it).
    pub(super) urgent_waiting: HashSet<NodeId>,
}

impl Child {
    /// A child that still needs its `Start` (planned, or restarted after its parent failed).
    pub(super) fn pending(info: NodeInfo, chunks: usize, now: Instant, restarted: bool) -> Self {
        Self {
            info,
            sent: FixedBitSet::with_capacity(chunks),
            cursor: 0,
            started: false,
            ready: false,
            last_heard: now,
            transport_heard: now,
            starved: false,
            last_sent: now,
            bytes: 0,
            restarted,
            start_sent: None,
            urgent_waiting: HashSet::new(),
        }
    }

    /// The position in `order` of the first chunk from the cursor on that it has not been
    /// sent (`order.len()` if none).
    fn next_unsent(&self, order: &[ChunkNo]) -> usize {
        let from = self.cursor.min(order.len());
        order[from..]
            .iter()
            .position(|&x| !self.sent.contains(x.index()))
            .map_or(order.len(), |skip| from + skip)
    }
}

impl Relay {
    /// Rewrites the `Start`s queued for my children after a job-wide setting changed.
    pub(super) fn refresh_queued_starts(&mut self) {
        let mut parts = self.child_subtrees();
        let kids: Vec<NodeId> = self.children.keys().copied().collect();
        for k in kids {
            let start = self.start_for(parts.remove(&k).unwrap_or_default());
            for t in self.control.iter_mut() {
                if let Transmit::Control {
                    to,
                    msg: Msg::Start(s),
                } = t
                    && *to == k
                {
                    **s = start.clone();
                }
            }
        }
    }

    /// Creates child state for my planned children and queues their `Start`s.
    pub(super) fn adopt_planned_children(&mut self, now: Instant) {
        let kids: Vec<NodeInfo> = self
            .subtree
            .iter()
            .skip(1)
            .filter(|n| n.parent == self.me)
            .cloned()
            .collect();
        let mut parts = self.child_subtrees();
        // The root starts the wave of `Prepare`s, ahead of every `Start`; below it the
        // caller passes them on ([`forward_prepare`]) as they arrive.
        if self.root.is_some() {
            for (to, p) in prepares_for(self.me, &self.subtree) {
                self.control.push_back(Transmit::Control {
                    to: to.id,
                    msg: Msg::Prepare(p),
                });
            }
        }
        for info in kids {
            let id = info.id;
            let subtree = parts.remove(&id).unwrap_or_default();
            let mut child = Child::pending(info, self.schedule.len(), now, false);
            if self.schedule.urgent > 0 {
                child.urgent_waiting = subtree.iter().map(|n| n.id).collect();
                child.urgent_waiting.insert(id);
            }
            self.children.insert(id, child);
            let start = self.start_for(subtree);
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Start(Box::new(start)),
            });
        }
    }

    /// The planned subtree of each of my planned children.
    pub(super) fn child_subtrees(&self) -> HashMap<NodeId, Vec<NodeInfo>> {
        split_subtree(self.me, &self.subtree)
    }

    /// The `Start` for one of my planned children, given its subtree: it and my ancestry.
    pub(super) fn start_for(&self, subtree: Vec<NodeInfo>) -> Start {
        let mut ancestors = vec![self.subtree[0].clone()];
        ancestors.extend(self.ancestors.iter().cloned());
        // A child restarted from here after its planned parent failed has that parent's
        // children in its group as kin ([`Relay::restart_orphans`]).
        let kin = subtree
            .first()
            .map(|c| self.kin_of(c.parent, c))
            .unwrap_or_default();
        Start {
            job: self.job,
            index: self.index.to_vec(),
            order: self.schedule.order.clone(),
            urgent: self.schedule.urgent as u32,
            subtree,
            ancestors,
            timing: self.timing,
            shared_store: self.shared_store.clone(),
            probe: self.probe,
            owner: self.owner,
            kin,
            root_clock_ms: self.root_clock_ms,
        }
    }

    /// The planned children of `parent` (me, or a failed child of mine) in `child`'s group,
    /// in plan order (its [`Start::kin`]); empty when it is alone there or has no group, and
    /// for the root's own children: the root does not fail.
    pub(super) fn kin_of(&self, parent: NodeId, child: &NodeInfo) -> Vec<NodeInfo> {
        if self.root.is_some() && parent == self.me {
            return Vec::new();
        }
        kin_in(&self.subtree, parent, child)
    }

    /// Marks the `Start`s of my planned children as sent at `at` by the caller, who passed
    /// them on before this relay existed ([`forward_start`], while this node admitted its
    /// own): the queued copies are dropped, and each child's round trip counts from `at`.
    /// Call it right after [`Relay::new_node`], before anything is polled.
    pub fn starts_sent_early(&mut self, at: Instant) {
        let children = &mut self.children;
        self.control.retain(|t| match t {
            Transmit::Control {
                to,
                msg: Msg::Start(_),
            } => match children.get_mut(to) {
                Some(c) if !c.restarted => {
                    c.started = true;
                    c.last_sent = at;
                    c.start_sent = Some(at);
                    false
                }
                _ => true,
            },
            _ => true,
        });
    }

    /// Facts from a child for the root: logged for re-sending after a re-attachment, and
    /// the edge's bytes added once the child completed everything.
    pub(super) fn on_report(&mut self, now: Instant, from: NodeId, mut r: Report) {
        if self.children.contains_key(&from) {
            let mut edge = None;
            if !r.done.is_empty() {
                // A node that completed a phase holds chunks a failed search lacked.
                self.sources.news();
            }
            for &(node, phase) in &r.done {
                self.done_log.push((node, phase));
                if node == from
                    && phase == Phase::All
                    && let Some(c) = self.children.get(&from)
                {
                    edge = Some((self.me, from, c.bytes));
                }
            }
            r.edge_bytes.extend(edge);
            if let Some(c) = self.children.get_mut(&from) {
                if r.failed.is_empty() && r.attached.is_empty() {
                    for (node, _) in &r.done {
                        c.urgent_waiting.remove(node);
                    }
                } else {
                    // The subtree below has changed: stop waiting on it.
                    c.urgent_waiting.clear();
                }
            }
            self.failed_log.extend(r.failed.iter().copied());
            // A node I started after its parent failed, which has not answered me, was
            // adopted elsewhere (by its deputy): it is not mine to wait for.
            for &(parent, node) in &r.attached {
                if parent != self.me && self.children.get(&node).is_some_and(|c| c.restarted) {
                    self.drop_child(node);
                }
            }
            self.absorb(now, r);
        }
    }

    /// A child kept these chunks from an earlier job ([`Msg::Held`]): never send them to it.
    pub(super) fn on_held(&mut self, from: NodeId, have: &[u64]) {
        let n = self.schedule.len();
        if let Some(c) = self.children.get_mut(&from) {
            c.sent.union_with(&bits_from_words(n, have));
        }
    }

    /// The next chunk to push to `child`, if it is started and the chunk next in order is
    /// held here. Marks it as sent. Urgent first, end to end: no child is given a chunk of
    /// the hysteretic set while any child still waits for one of the urgent set
    /// ([`Relay::urgent_gate_open`]: this node's own link), nor before every node of that
    /// child's subtree has reported holding the urgent set (their links and CPUs).
    pub fn poll_bulk(&mut self, now: Instant, child: NodeId) -> Option<ChunkNo> {
        if self.shared_store.is_some() {
            // Everyone reads from shared storage: nothing travels the tree.
            return None;
        }
        let order = &self.schedule.order;
        let c = self.children.get_mut(&child)?;
        if !c.ready {
            return None;
        }
        c.cursor = c.next_unsent(order);
        let at = c.cursor;
        let chunk = *order.get(at)?;
        let subtree_waits = !c.urgent_waiting.is_empty();
        if !self.have.contains(chunk.index()) {
            return None;
        }
        if at >= self.schedule.urgent
            && (subtree_waits || !self.urgent_gate_open() || self.bulk_held(now))
        {
            return None;
        }
        let c = self.children.get_mut(&child)?;
        c.sent.insert(chunk.index());
        c.cursor += 1;
        c.bytes += u64::from(self.schedule.sizes[chunk.index()]);
        c.last_sent = now;
        self.stats.pushed += 1;
        Some(chunk)
    }

    /// How far this node's taking in runs ahead of its passing on: the stored bytes of the
    /// push order it holds from the start without a gap, beyond what it has handed out to
    /// the ready child least behind. `None` at the root (nothing to take in) and with no
    /// ready child (nothing to pass on).
    ///
    /// A node whose CPU bounds the push and that takes in all its parent sends spends that
    /// CPU on receiving, and passes the payload on in a burst once its own copy is in: the
    /// next level then takes that burst in at its own CPU's pace and passes it on later
    /// still, and each level of the tree adds its lag (BENCHMARKS.md, "A relay takes in no
    /// faster than it passes on"). So the node stops reading its parent's stream while
    /// this exceeds a bound, and QUIC flow control holds the parent back. Only the
    /// contiguous part counts: a chunk missing (lost, or refused and asked for again) keeps
    /// the lead low and the stream open, as it must, since the chunk may come on it. The
    /// least-behind child decides, so a child far behind (adopted after a failure, or
    /// slow) does not stop the node while another keeps up.
    pub fn forward_lead(&mut self) -> Option<u64> {
        if self.root.is_some() {
            return None;
        }
        let order = &self.schedule.order;
        while let Some(c) = order.get(self.frontier)
            && self.have.contains(c.index())
        {
            self.frontier += 1;
        }
        let (f, schedule) = (self.frontier, &self.schedule);
        // A child's place skips what it holds already: a child that kept the layer from an
        // earlier job is never behind, and its pump, with nothing to send, never asks.
        self.children
            .values_mut()
            .filter(|c| c.ready)
            .map(|c| {
                c.cursor = c.next_unsent(&schedule.order);
                schedule.bytes_between(c.cursor, f)
            })
            .min()
    }

    /// Whether every ready child has been sent the whole urgent set, so hysteretic chunks
    /// may flow (remembered once true, until a child joins or re-attaches).
    pub fn urgent_gate_open(&mut self) -> bool {
        if !self.urgent_all_sent && self.urgent_sent_to_all() {
            self.urgent_all_sent = true;
        }
        self.urgent_all_sent
    }

    /// The look behind [`Relay::urgent_gate_open`], without remembering it.
    fn urgent_sent_to_all(&self) -> bool {
        let (order, urgent) = (&self.schedule.order, self.schedule.urgent);
        self.children
            .values()
            .filter(|c| c.ready)
            .all(|c| c.next_unsent(order) >= urgent)
    }

    /// Children that have a chunk ready to push right now.
    pub fn bulk_ready(&self, now: Instant) -> impl Iterator<Item = NodeId> + '_ {
        let order = &self.schedule.order;
        let gate = (self.urgent_all_sent || self.urgent_sent_to_all()) && !self.bulk_held(now);
        self.children.iter().filter_map(move |(&id, c)| {
            if !c.ready {
                return None;
            }
            let at = c.next_unsent(order);
            let hysteretic_ok = gate && c.urgent_waiting.is_empty();
            (self.have.contains(order.get(at)?.index())
                && (hysteretic_ok || at < self.schedule.urgent))
                .then_some(id)
        })
    }
}

/// The planned subtree of each of `me`'s planned children (each child first), in one pass
/// over `subtree` (`me` first, parents before children). A per-child scan made a flat
/// plan's root quadratic in the job size.
fn split_subtree(me: NodeId, subtree: &[NodeInfo]) -> HashMap<NodeId, Vec<NodeInfo>> {
    let mut owner: HashMap<NodeId, NodeId> = HashMap::new();
    let mut parts: HashMap<NodeId, Vec<NodeInfo>> = HashMap::new();
    for n in subtree.iter().skip(1) {
        let under = if n.parent == me {
            Some(n.id)
        } else if n.id != n.parent {
            owner.get(&n.parent).copied()
        } else {
            None
        };
        if let Some(child) = under {
            owner.insert(n.id, child);
            parts.entry(child).or_default().push(n.clone());
        }
    }
    parts
}

/// The planned children of `parent` in `child`'s group within `subtree`, in plan order;
/// empty when `child` is alone there or has no group.
fn kin_in(subtree: &[NodeInfo], parent: NodeId, child: &NodeInfo) -> Vec<NodeInfo> {
    if child.group.is_none() {
        return Vec::new();
    }
    let kin: Vec<NodeInfo> = subtree
        .iter()
        .skip(1)
        .filter(|n| n.parent == parent && n.id != parent && n.group == child.group)
        .cloned()
        .collect();
    if kin.len() < 2 { Vec::new() } else { kin }
}

/// The `Start`s a node that joins a job from `start` sends its planned children, exactly
/// as its relay would queue them ([`Relay::new_node`]): computed from the `Start` alone,
/// so a node can pass them on before it has checked the index and built its relay, and
/// the hops of the tree overlap instead of adding up. Each child checks the index itself.
/// Nothing for a health probe, whose relay sends its own.
pub fn forward_start(start: &Start) -> Result<Vec<(NodeInfo, Start)>> {
    let me = start
        .subtree
        .first()
        .ok_or(Error::InvalidStart("no subtree"))?;
    if start.probe {
        return Ok(Vec::new());
    }
    let mut parts = split_subtree(me.id, &start.subtree);
    let mut ancestors = vec![me.clone()];
    ancestors.extend(start.ancestors.iter().cloned());
    let out = start
        .subtree
        .iter()
        .skip(1)
        .filter(|n| n.parent == me.id)
        .map(|child| {
            let subtree = parts.remove(&child.id).unwrap_or_default();
            let kin = subtree
                .first()
                .map(|c| kin_in(&start.subtree, c.parent, c))
                .unwrap_or_default();
            // The same `Start` but for the child's part of the plan and its ancestry.
            let mut s = start.clone();
            (s.subtree, s.ancestors, s.kin) = (subtree, ancestors.clone(), kin);
            (child.clone(), s)
        })
        .collect();
    Ok(out)
}

/// What a node that received a [`Msg::Prepare`] for a job it has not joined yet sends on
/// ([`prepares_for`] of the subtree it was given). The caller hands each to the transport
/// at once, which is what opens the connections early, and passes on only the first
/// `Prepare` of a job it gets (a node with children hears from its grandparent and then its
/// parent). A node that already runs the job ignores `Prepare`s.
pub fn forward_prepare(prepare: &Prepare) -> Result<Vec<(NodeInfo, Prepare)>> {
    let me = prepare
        .subtree
        .first()
        .ok_or(Error::InvalidStart("empty prepare"))?
        .id;
    Ok(prepares_for(me, &prepare.subtree))
}

/// The `Prepare`s of a node with planned `subtree` (`me` first): one to each child, then
/// one to each grandchild that has children of its own. The second kind makes the wave go
/// down two levels per connection set-up: a grandchild starts connecting to its children
/// while its parent is still connecting to it. Leaves get theirs from their parent only;
/// they have nobody to connect to.
pub fn prepares_for(me: NodeId, subtree: &[NodeInfo]) -> Vec<(NodeInfo, Prepare)> {
    let mut parts = split_subtree(me, subtree);
    let mut out = Vec::new();
    let mut second = Vec::new();
    for child in subtree
        .iter()
        .skip(1)
        .filter(|n| n.parent == me && n.id != me)
    {
        let part = parts.remove(&child.id).unwrap_or_default();
        let mut below = split_subtree(child.id, &part);
        for g in part
            .iter()
            .skip(1)
            .filter(|n| n.parent == child.id && n.id != child.id)
        {
            let sub = below.remove(&g.id).unwrap_or_default();
            if sub.len() > 1 {
                second.push((g.clone(), Prepare { subtree: sub }));
            }
        }
        out.push((child.clone(), Prepare { subtree: part }));
    }
    out.extend(second);
    out
}

/// The plan as relay node records, root first, parents before children (breadth first).
/// `addr` maps a host name to where its daemon listens.
pub fn plan_nodes(plan: &crate::plan::Plan, addr: impl Fn(&str) -> String) -> Vec<NodeInfo> {
    plan.bfs()
        .into_iter()
        .map(|id| NodeInfo {
            id,
            host: plan.host(id).to_string(),
            addr: addr(plan.host(id)),
            parent: plan.parent[id.index()].unwrap_or(id),
            group: plan.group[id.index()].map(|g| g.0),
            rate: plan.rate[id.index()],
        })
        .collect()
}

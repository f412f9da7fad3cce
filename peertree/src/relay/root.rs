//! What only the root does: keep the job-wide picture (who completed which phase, which
//! edges failed, who is still re-attaching) and decide when each phase is complete.
//!
//! A node counts as resolved for a phase when it completed it or is known to be lost. A node
//! below a failed edge is "in limbo" until it re-attaches somewhere; if it does not within
//! three deadlines the root starts it itself, alone (it may never have had its `Start`:
//! its planned parent and the node that was to pass the `Start` on both died); if it does
//! not answer that either, it is declared unreachable, with the planned edge above it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use fixedbitset::FixedBitSet;

use super::{Event, NodeInfo, Phase, Relay, Report};
use crate::plan::NodeId;

/// Job-wide progress as the root sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// Nodes in the job (the root excluded).
    pub nodes: usize,
    /// Nodes that completed each phase.
    pub done: [usize; 2],
    /// Nodes declared failed or unreachable.
    pub failed: usize,
    /// Whether each phase is complete for every reachable node.
    pub complete: [bool; 2],
}

#[derive(Debug)]
pub(super) struct RootState {
    me: NodeId,
    planned_parent: HashMap<NodeId, NodeId>,
    /// Where each node hangs now (re-attachments move nodes).
    current_parent: HashMap<NodeId, NodeId>,
    planned_children: HashMap<NodeId, Vec<NodeId>>,
    members: FixedBitSet,
    total: usize,
    done: [FixedBitSet; 2],
    done_count: [usize; 2],
    failed: FixedBitSet,
    failed_count: usize,
    limbo: BTreeMap<NodeId, Instant>,
    /// Nodes the root started itself after their time in limbo ran out.
    restarted: FixedBitSet,
    complete: [bool; 2],
    grace: Duration,
}

impl RootState {
    pub(super) fn new(nodes: &[NodeInfo], _now: Instant) -> Self {
        let me = nodes[0].id;
        let cap = nodes.iter().map(|n| n.id.index() + 1).max().unwrap_or(1);
        let mut planned_parent = HashMap::new();
        let mut planned_children: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        let mut members = FixedBitSet::with_capacity(cap);
        for n in nodes.iter().skip(1) {
            planned_parent.insert(n.id, n.parent);
            planned_children.entry(n.parent).or_default().push(n.id);
            members.insert(n.id.index());
        }
        Self {
            me,
            current_parent: planned_parent.clone(),
            planned_parent,
            planned_children,
            total: members.count_ones(..),
            members,
            done: [
                FixedBitSet::with_capacity(cap),
                FixedBitSet::with_capacity(cap),
            ],
            done_count: [0, 0],
            failed: FixedBitSet::with_capacity(cap),
            failed_count: 0,
            limbo: BTreeMap::new(),
            restarted: FixedBitSet::with_capacity(cap),
            complete: [false, false],
            grace: Duration::ZERO,
        }
    }

    pub(super) fn progress(&self) -> JobProgress {
        JobProgress {
            nodes: self.total,
            done: self.done_count,
            failed: self.failed_count,
            complete: self.complete,
        }
    }

    pub(super) fn next_limbo(&self) -> Option<Instant> {
        self.limbo.values().min().copied()
    }

    fn member(&self, n: NodeId) -> bool {
        self.members.contains(n.index())
    }

    fn resolved(&self, phase: Phase) -> usize {
        // done ∪ failed, counted without double-counting failed nodes that had completed.
        let i = phase.index();
        let failed_not_done = self.failed.difference(&self.done[i]).count();
        self.done_count[i] + failed_not_done
    }

    fn descendants(&self, n: NodeId) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            if let Some(kids) = self.planned_children.get(&x) {
                for &k in kids {
                    out.push(k);
                    stack.push(k);
                }
            }
        }
        out
    }

    /// The nodes hanging below `n` now (re-attachments moved some away from their planned
    /// parent).
    fn current_descendants(&self, n: NodeId) -> Vec<NodeId> {
        let mut kids: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for (&c, &p) in &self.current_parent {
            kids.entry(p).or_default().push(c);
        }
        let mut out = Vec::new();
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            for &k in kids.get(&x).into_iter().flatten() {
                out.push(k);
                stack.push(k);
            }
        }
        out
    }

    /// A node is alive after all (it reported or re-attached).
    fn revive(&mut self, n: NodeId) {
        self.limbo.remove(&n);
        if self.failed.contains(n.index()) {
            self.failed.set(n.index(), false);
            self.failed_count -= 1;
        }
    }

    fn fail(&mut self, n: NodeId) -> bool {
        self.limbo.remove(&n);
        if !self.member(n) || self.failed.put(n.index()) {
            return false;
        }
        self.failed_count += 1;
        true
    }
}

impl Relay {
    pub(super) fn root_absorb(&mut self, now: Instant, r: Report) {
        self.note_activity(now, r.activity);
        let grace = std::time::Duration::from_millis(u64::from(self.timing.deadline_ms) * 3);
        let Some(root) = self.root.as_mut() else {
            return;
        };
        root.grace = grace;
        // Before the completions they came with: whoever stops at the last answer has every
        // round trip.
        for (p, c, us) in r.edge_rtt {
            self.events.push_back(Event::EdgeRtt(
                p,
                c,
                std::time::Duration::from_micros(u64::from(us)),
            ));
        }
        for (parent, node) in r.attached {
            if !root.member(node) {
                continue;
            }
            root.revive(node);
            root.current_parent.insert(node, parent);
            for d in root.descendants(node) {
                root.limbo.remove(&d);
            }
            self.events.push_back(Event::Attached(parent, node));
        }
        for (node, phase) in r.done {
            if !root.member(node) {
                continue;
            }
            root.revive(node);
            let i = phase.index();
            if !root.done[i].put(node.index()) {
                root.done_count[i] += 1;
                self.events.push_back(Event::NodeDone(node, phase));
            }
        }
        for (node, reason) in r.refused {
            self.events.push_back(Event::Refused(node, reason));
        }
        for (parent, child) in r.failed {
            if !root.member(child) || root.done[Phase::All.index()].contains(child.index()) {
                // A node that already holds everything is not lost to the job.
                continue;
            }
            if root.current_parent.get(&child) != Some(&parent) {
                // A former parent noticing that the node left it: not a failure.
                continue;
            }
            if root.fail(child) {
                // A node the root started itself did not answer: it is lost below its
                // planned edge, not below the root.
                let event = if parent == root.me && root.restarted.contains(child.index()) {
                    let planned = root.planned_parent.get(&child).copied();
                    Event::Unreachable(planned.unwrap_or(parent), child)
                } else {
                    Event::EdgeFailed(parent, child)
                };
                self.events.push_back(event);
            }
            // Only the nodes still hanging below it wait to re-attach: one that already
            // moved to another parent (its own deadline ran out first) is not in limbo.
            for d in root.current_descendants(child) {
                let settled = root.done[Phase::All.index()].contains(d.index())
                    || root.failed.contains(d.index());
                if !settled {
                    root.limbo.entry(d).or_insert(now + grace);
                }
            }
        }
        for (parent, child) in r.liars {
            self.events.push_back(Event::Liar(parent, child));
        }
        for (p, c, b) in r.edge_bytes {
            self.events.push_back(Event::EdgeBytes(p, c, b));
        }

        self.root_check(now);
    }

    pub(super) fn root_check(&mut self, now: Instant) {
        let Some(root) = self.root.as_mut() else {
            return;
        };
        let expired: Vec<NodeId> = root
            .limbo
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&n, _)| n)
            .collect();
        let mut restart = Vec::new();
        for n in expired {
            // Once, and never in a probe (its report names the failed edge as it is).
            if !self.probe && root.member(n) && !root.restarted.put(n.index()) {
                root.current_parent.insert(n, root.me);
                root.limbo.insert(n, now + root.grace);
                restart.push(n);
                continue;
            }
            let parent = root.planned_parent.get(&n).copied().unwrap_or(root.me);
            if root.fail(n) {
                self.events.push_back(Event::Unreachable(parent, n));
            }
        }
        for n in restart {
            self.restart_lost(now, n);
        }
        let Some(root) = self.root.as_mut() else {
            return;
        };
        for phase in Phase::BOTH {
            let i = phase.index();
            if !root.complete[i] && root.limbo.is_empty() && root.resolved(phase) == root.total {
                root.complete[i] = true;
                self.events.push_back(Event::JobPhaseDone(phase));
                if phase == Phase::Urgent {
                    self.urgent_done_at = Some(now);
                }
            }
        }
        // A push that leaves chunks to demand stays open for them until it is ended
        // ([`Relay::end_serving`]).
        let everything_streamed = self.schedule.pushed() == self.schedule.len();
        if root.complete == [true, true] && everything_streamed && !self.finished {
            self.finish();
        }
    }
}

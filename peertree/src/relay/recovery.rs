//! Recovery from failures: a child that stops answering is dropped and its planned
//! children are started from here; a node whose parent is silent, unreachable or lied
//! asks its ancestors, nearest first, to adopt it ([`Msg::Attach`]), telling them what it
//! holds so nothing is sent twice; an ancestor adopts such orphans. Deadlines themselves
//! are watched in [`super::timers`]; the root's job-wide view of failures is in
//! [`super::root`]. Nothing here declares a node unreachable or a phase complete: only the
//! root does, from the facts reported up.

use std::collections::HashSet;
use std::time::Instant;

/// How many times a node whose parent is lost asks the root to adopt it before it gives
/// up on the tree ([`super::Event::RootGone`]). Each ask waits twice as long as the one
/// before, from one deadline: 15 deadlines in all (75 s with the default 5 s). A root
/// that is gone (the push ended or was killed) was asked every deadline until the job was
/// released.
pub const ROOT_ASKS: u32 = 4;

/// How many times an orphan asks its deputy to adopt it, a deadline each, before it asks
/// across the group's uplink. The deputy may not run the job yet when first asked: its
/// planned parent died before passing on its `Start`, and the ancestor that found the parent
/// dead starts it only then (seen in the lab: a ward asked such a deputy once, went to the
/// root a deadline later, and the group took the layer in twice). A dead deputy costs its
/// wards this many deadlines.
const DEPUTY_ASKS: u32 = 2;

use super::demand::Waiter;
use super::msg::{bits_from_words, pack_words};
use super::subtree::Child;
use super::timers::ms;
use super::{Event, Msg, NodeInfo, Relay, Report, Transmit};
use crate::plan::NodeId;

/// Re-attaching after the parent was lost: who is being asked, until when.
#[derive(Debug)]
pub(super) struct Attaching {
    /// Index into `ancestors` being asked, or, while `deputy` is set, the one asked if the
    /// deputy does not answer.
    pub(super) target: usize,
    /// The deputy among my siblings is being asked ([`super::Start::kin`]).
    pub(super) deputy: Option<NodeId>,
    /// How many times the deputy was asked ([`DEPUTY_ASKS`]).
    pub(super) deputy_asks: u32,
    /// When to give up on it and ask the next one up.
    pub(super) deadline: Instant,
}

impl Relay {
    /// The transport could not reach `peer` at all (connection refused or reset):
    /// act on it now instead of waiting for the deadline.
    pub fn handle_unreachable(&mut self, now: Instant, peer: NodeId) {
        self.source_silent(now, peer);
        if self.children.contains_key(&peer) {
            self.fail_child(now, peer);
        } else if self.attaching.is_none() && Some(peer) == self.parent && self.root.is_none() {
            self.lose_parent(now);
        } else if self.asking() == Some(peer) && !self.asking_root() {
            // The root is asked again when its back-off is over, not at once.
            self.attach_next(now);
        }
    }

    /// Whether this node is asking the root to adopt it.
    fn asking_root(&self) -> bool {
        self.asking()
            .is_some_and(|p| self.ancestors.last().is_some_and(|r| r.id == p))
    }

    /// Whom this node is asking to adopt it, while re-attaching.
    pub(super) fn asking(&self) -> Option<NodeId> {
        let a = self.attaching.as_ref()?;
        a.deputy
            .or_else(|| self.ancestors.get(a.target).map(|n| n.id))
    }

    /// Forgets a child without calling it failed (it went elsewhere).
    pub(super) fn drop_child(&mut self, child: NodeId) -> bool {
        if self.children.remove(&child).is_none() {
            return false;
        }
        // Its subtree is no longer announced through me: it re-attaches on its own.
        let mut gone = HashSet::from([child]);
        while let Some(n) = self
            .attached_log
            .iter()
            .find(|&(n, p)| !gone.contains(n) && gone.contains(p))
            .map(|(&n, _)| n)
        {
            gone.insert(n);
        }
        self.attached_log.retain(|n, _| !gone.contains(n));
        for waiters in self.wants.values_mut() {
            waiters.retain(|w| *w != Waiter::Child(child));
        }
        true
    }

    pub(super) fn fail_child(&mut self, now: Instant, child: NodeId) {
        if !self.drop_child(child) {
            return;
        }
        self.events.push_back(Event::ChildFailed(child));
        self.failed_log.push((self.me, child));
        let fact = Report {
            failed: vec![(self.me, child)],
            ..Report::default()
        };
        self.absorb(now, fact);
        self.restart_orphans(now, child);
    }

    /// The failed child's planned children may never have received their `Start` (it died
    /// before forwarding it), and then nothing would ever reach them: start them from here.
    /// One that is already running ignores the `Start` and re-attaches on its own.
    ///
    /// Each gets the dead child's children in its group as kin, as the dead child would
    /// have given them. The first (their deputy) becomes my child; the others are not mine:
    /// their `Start` names a planned parent that is not its sender, so they ask the one
    /// before them among their kin to adopt them first ([`Relay::join_orphaned`]), like the
    /// orphans that had their `Start`. Started here, every one of them drew the whole layer
    /// across the group's uplink (3x in the lab when a starved proxy was stopped before it
    /// passed on two of its three `Start`s).
    fn restart_orphans(&mut self, now: Instant, dead: NodeId) {
        let orphans: Vec<NodeInfo> = self
            .subtree
            .iter()
            .filter(|n| n.parent == dead && n.id != dead && !self.children.contains_key(&n.id))
            .cloned()
            .collect();
        for info in orphans {
            let id = info.id;
            let mut inside = HashSet::from([id]);
            let mut subtree = vec![info.clone()];
            for n in &self.subtree {
                if n.id != n.parent && n.id != id && inside.contains(&n.parent) {
                    inside.insert(n.id);
                    subtree.push(n.clone());
                }
            }
            let mut start = self.start_for(subtree);
            if self.probe {
                // A probe moves no layer: each answers from here, its edge measured.
                start.kin.clear();
            }
            let ward = start.kin.first().is_some_and(|deputy| deputy.id != id);
            if !ward {
                self.children
                    .insert(id, Child::pending(info, self.schedule.len(), now, true));
            }
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Start(Box::new(start)),
            });
        }
    }

    /// The root starts `node` itself, alone and as its own child: it sat below a failed
    /// edge for three deadlines without re-attaching, so it may never have had its `Start`
    /// (its planned parent died before passing it on, and so did the ward of the ancestor
    /// that restarted the parent's children, [`Relay::restart_orphans`]). Each such node is
    /// started here, its planned children too when they are in the same state; one that is
    /// running ignores the `Start` and re-attaches on its own. Seen in the simulator: with a
    /// relaying node and its planned parent killed early, its five children were declared
    /// unreachable while alive and never got the layer.
    pub(super) fn restart_lost(&mut self, now: Instant, node: NodeId) {
        if self.children.contains_key(&node) {
            return;
        }
        let Some(info) = self.subtree.iter().find(|n| n.id == node).cloned() else {
            return;
        };
        let mut start = self.start_for(vec![info.clone()]);
        // Not a ward of a deputy: the root's own child.
        start.kin.clear();
        self.children
            .insert(node, Child::pending(info, self.schedule.len(), now, true));
        self.control.push_back(Transmit::Control {
            to: node,
            msg: Msg::Start(Box::new(start)),
        });
    }

    pub(super) fn lose_parent(&mut self, now: Instant) {
        if let Some(p) = self.parent {
            self.events.push_back(Event::ParentLost(p));
        }
        let current = self
            .ancestors
            .iter()
            .position(|a| Some(a.id) == self.parent)
            .unwrap_or(0);
        // Orphaned by the planned parent: the deputy among my siblings first (once), so
        // that only it draws the rest of the layer across the group's uplink.
        if current == 0 && self.ask_deputy(now, current + 1) {
            self.sources_lost_parent(now);
            return;
        }
        self.attaching = Some(Attaching {
            target: current,
            deputy: None,
            deputy_asks: 0,
            deadline: now,
        });
        self.attach_next(now);
        self.sources_lost_parent(now);
    }

    /// Asks the deputy among my siblings (the one before me in [`Start::kin`](super::Start))
    /// to adopt me, once per job; `then` is the ancestor asked if it does not answer.
    /// Whether there was a deputy to ask.
    fn ask_deputy(&mut self, now: Instant, then: usize) -> bool {
        let deputy = self
            .kin
            .iter()
            .position(|k| k.id == self.me)
            .and_then(|i| i.checked_sub(1))
            .map(|i| self.kin[i].id)
            .filter(|_| !self.deputy_asked);
        let Some(d) = deputy else { return false };
        self.deputy_asked = true;
        self.send_attach(d);
        self.attaching = Some(Attaching {
            target: then,
            deputy: Some(d),
            deputy_asks: 1,
            deadline: now + ms(self.timing.deadline_ms),
        });
        true
    }

    /// A node started by an ancestor after its planned parent failed before passing on
    /// its `Start` ([`Relay::restart_orphans`]; the `Start`'s planned parent is not its
    /// sender): it asks its deputy to adopt it before it takes anything from the sender,
    /// which is asked only if the deputy does not answer. Whether it asked a deputy (else it
    /// joins the sender as usual).
    pub(super) fn join_orphaned(&mut self, now: Instant, planned_parent: NodeId) -> bool {
        Some(planned_parent) != self.parent && self.ask_deputy(now, 0)
    }

    /// Ask the next ancestor up. The root never gives up on a live node, but it may be
    /// gone: it is asked [`ROOT_ASKS`] times, each wait twice the last, then this node
    /// stops asking ([`Event::RootGone`]) and keeps what it holds.
    pub(super) fn attach_next(&mut self, now: Instant) {
        let Some(a) = &self.attaching else { return };
        if let Some(d) = a.deputy
            && a.deputy_asks < DEPUTY_ASKS
        {
            let (asks, target) = (a.deputy_asks + 1, a.target);
            self.send_attach(d);
            self.attaching = Some(Attaching {
                target,
                deputy: Some(d),
                deputy_asks: asks,
                deadline: now + ms(self.timing.deadline_ms),
            });
            return;
        }
        // After the deputy, the ancestor it was asked before; else the next one up.
        let last = self.ancestors.len() - 1;
        let next = if a.deputy.is_some() {
            a.target
        } else {
            a.target + 1
        };
        let target = next.min(last);
        let mut wait = ms(self.timing.deadline_ms);
        if target == last {
            if self.root_asks >= ROOT_ASKS {
                self.attaching = None;
                self.parent = None;
                // No more heartbeats, deadlines or asks for this job here.
                self.finished = true;
                self.events.push_back(Event::RootGone(self.root_asks));
                self.sources_no_parent_coming(now);
                return;
            }
            wait *= 1 << self.root_asks;
            self.root_asks += 1;
        }
        let to = self.ancestors[target].id;
        self.send_attach(to);
        self.attaching = Some(Attaching {
            target,
            deputy: None,
            deputy_asks: 0,
            deadline: now + wait,
        });
    }

    /// This node can no longer keep the job's chunks (its store failed): it leaves the
    /// tree. The parent is told why ([`Msg::Refused`]; the root names this node and the
    /// reason in the push's report) and drops it; the children are told the same, and
    /// re-attach elsewhere at once instead of at their deadline. Nothing more is sent or
    /// checked for the job here. Not at the root, nor twice.
    pub fn leave(&mut self, reason: &str) {
        if self.root.is_some() || self.finished {
            return;
        }
        let refused = || Msg::Refused {
            reason: reason.to_string(),
        };
        if let Some(p) = self.parent {
            self.control.push_back(Transmit::Control {
                to: p,
                msg: refused(),
            });
        }
        let kids: Vec<NodeId> = self.children.keys().copied().collect();
        for c in kids {
            self.control.push_back(Transmit::Control {
                to: c,
                msg: refused(),
            });
            self.drop_child(c);
        }
        self.attaching = None;
        self.finished = true;
    }

    /// Asks `to` to adopt me, saying what I hold.
    fn send_attach(&mut self, to: NodeId) {
        let words = self
            .have
            .as_slice()
            .iter()
            .map(|&w| w as u64)
            .collect::<Vec<u64>>();
        let have = pack_words(&words, usize::BITS);
        self.control.push_back(Transmit::Control {
            to,
            msg: Msg::Attach { have },
        });
    }

    pub(super) fn on_attach(&mut self, now: Instant, from: NodeId, have: &[u64]) {
        let sent = bits_from_words(self.schedule.len(), have);
        let info = self
            .subtree
            .iter()
            .chain(&self.kin)
            .find(|x| x.id == from)
            .cloned()
            .unwrap_or(NodeInfo {
                id: from,
                host: String::new(),
                addr: String::new(),
                parent: self.me,
                group: None,
                rate: None,
            });
        if let Some(c) = self.children.get_mut(&from) {
            // A repeated Attach: chunks already on their way stay counted as sent.
            c.sent.union_with(&sent);
            c.cursor = 0;
            self.urgent_all_sent = false;
        } else {
            self.urgent_all_sent = false;
            self.children.insert(
                from,
                Child {
                    info,
                    sent,
                    cursor: 0,
                    started: true,
                    ready: true,
                    last_heard: now,
                    transport_heard: now,
                    starved: false,
                    last_sent: now,
                    bytes: 0,
                    restarted: false,
                    start_sent: None,
                    urgent_waiting: std::collections::HashSet::new(),
                },
            );
        }
        self.control.push_back(Transmit::Control {
            to: from,
            msg: Msg::Adopted,
        });
        if self.finished {
            self.control.push_back(Transmit::Control {
                to: from,
                msg: Msg::Finished,
            });
        }
        let fact = Report {
            attached: vec![(self.me, from)],
            ..Report::default()
        };
        self.absorb(now, fact);
    }

    /// An ancestor we asked took us in ([`Msg::Adopted`]): it is the parent now.
    pub(super) fn on_adopted(&mut self, now: Instant, from: NodeId) {
        if self.attaching.is_some() && self.asking() == Some(from) {
            self.attaching = None;
            self.root_asks = 0;
            self.parent = Some(from);
            self.parent_heard = now;
            self.parent_transport = now;
            self.parent_starved = false;
            self.events.push_back(Event::Reattached(from));
            // The old parent may have died before passing these on. The adoptions in my
            // subtree (mine and those reported through me) are announced again first, so
            // that the root takes failures below them from here.
            self.report.done.extend(self.done_log.iter().copied());
            self.report.failed.extend(self.failed_log.iter().copied());
            self.report.attached.extend(
                self.attached_log
                    .iter()
                    .map(|(&node, &parent)| (parent, node)),
            );
            self.sources_new_parent(now);
        }
    }
}

#[cfg(test)]
#[path = "leave_tests.rs"]
mod tests;

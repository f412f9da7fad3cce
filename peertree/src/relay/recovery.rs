//! Recovery from failures: a child that stops answering is dropped and its planned
//! children are started from here; a node whose parent is silent, unreachable or lied
//! asks its ancestors, nearest first, to adopt it ([`Msg::Attach`]), telling them what it
//! holds so nothing is sent twice; an ancestor adopts such orphans. Deadlines themselves
//! are watched in [`super::timers`]; the root's job-wide view of failures is in
//! [`super::root`]. Nothing here declares a node unreachable or a phase complete: only the
//! root does, from the facts reported up.

use std::collections::HashSet;
use std::time::Instant;

use super::demand::Waiter;
use super::msg::{bits_from_words, pack_words};
use super::subtree::Child;
use super::timers::ms;
use super::{Event, Msg, NodeInfo, Relay, Report, Transmit};
use crate::plan::NodeId;

/// Re-attaching after the parent was lost: which ancestor is being asked, until when.
#[derive(Debug)]
pub(super) struct Attaching {
    /// Index into `ancestors` being asked.
    pub(super) target: usize,
    /// When to give up on it and ask the next one up.
    pub(super) deadline: Instant,
}

impl Relay {
    /// The transport could not reach `peer` at all (connection refused or reset):
    /// act on it now instead of waiting for the deadline.
    pub fn handle_unreachable(&mut self, now: Instant, peer: NodeId) {
        if self.children.contains_key(&peer) {
            self.fail_child(now, peer);
        } else if self.attaching.is_none() && Some(peer) == self.parent && self.root.is_none() {
            self.lose_parent(now);
        } else if let Some(a) = &self.attaching
            && self.ancestors.get(a.target).map(|n| n.id) == Some(peer)
        {
            self.attach_next(now);
        }
    }

    pub(super) fn fail_child(&mut self, now: Instant, child: NodeId) {
        if self.children.remove(&child).is_none() {
            return;
        }
        self.events.push_back(Event::ChildFailed(child));
        for waiters in self.wants.values_mut() {
            waiters.retain(|w| *w != Waiter::Child(child));
        }
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
            self.children
                .insert(id, Child::pending(info, self.schedule.len(), now, true));
            let start = self.start_for(subtree);
            self.control.push_back(Transmit::Control {
                to: id,
                msg: Msg::Start(Box::new(start)),
            });
        }
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
        self.attaching = Some(Attaching {
            target: current,
            deadline: now,
        });
        self.attach_next(now);
    }

    /// Ask the next ancestor up (the root is asked again and again: it never gives up on us).
    pub(super) fn attach_next(&mut self, now: Instant) {
        let Some(a) = &self.attaching else { return };
        let target = (a.target + 1).min(self.ancestors.len() - 1);
        let to = self.ancestors[target].id;
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
        self.attaching = Some(Attaching {
            target,
            deadline: now + ms(self.timing.deadline_ms),
        });
    }

    pub(super) fn on_attach(&mut self, now: Instant, from: NodeId, have: &[u64]) {
        let sent = bits_from_words(self.schedule.len(), have);
        let info = self
            .subtree
            .iter()
            .find(|x| x.id == from)
            .cloned()
            .unwrap_or(NodeInfo {
                id: from,
                host: String::new(),
                addr: String::new(),
                parent: self.me,
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
                    last_sent: now,
                    bytes: 0,
                    restarted: false,
                    adopted: true,
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
        if let Some(a) = &self.attaching
            && self.ancestors.get(a.target).map(|n| n.id) == Some(from)
        {
            self.attaching = None;
            self.parent = Some(from);
            self.parent_heard = now;
            self.events.push_back(Event::Reattached(from));
            // The old parent may have died before passing these on. Children
            // that re-attached here are announced again first, so that the root
            // takes failures below them from here.
            self.report.done.extend(self.done_log.iter().copied());
            self.report.failed.extend(self.failed_log.iter().copied());
            let me = self.me;
            self.report.attached.extend(
                self.children
                    .iter()
                    .filter(|(_, c)| c.adopted)
                    .map(|(&id, _)| (me, id)),
            );
            let asked: Vec<u32> = self.asked.iter().copied().collect();
            for chunk in asked {
                self.send_want(chunk);
            }
        }
    }
}

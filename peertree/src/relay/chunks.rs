//! What this node holds: chunks arriving (verified or not), chunks a store kept from an
//! earlier job, chunks the store lost since, and when a phase is complete here. The caller
//! verifies and stores the bytes; this never sees them and only keeps the relay's view in
//! step with the store.

use std::time::Instant;

use fixedbitset::FixedBitSet;

use super::demand::Waiter;
use super::msg::pack_words;
use super::{ChunkNo, Event, Msg, Phase, Relay, Report, Transmit};
use crate::plan::NodeId;

impl Relay {
    /// This node's store already holds `positions` when it joins (kept from an earlier job
    /// that used the same chunks): they count as received, are forwarded to the children
    /// like any other, and the parent is told ([`Msg::Held`]) so that it does not send them.
    /// Call it right after [`Relay::new_node`].
    pub fn hold_existing(&mut self, positions: impl IntoIterator<Item = ChunkNo>) {
        let n = self.schedule.len();
        let mut held = FixedBitSet::with_capacity(n);
        for p in positions {
            if p.index() < n && !self.have.put(p.index()) {
                held.insert(p.index());
                self.count_held(p, true);
            }
        }
        if held.is_clear() {
            return;
        }
        // While re-attaching, to the one asked to adopt this node (it takes the `Held` after
        // the `Attach` before it on the same stream).
        if let Some(parent) = self.asking().or(self.parent()) {
            self.control.push_back(Transmit::Control {
                to: parent,
                msg: Msg::Held {
                    have: pack_words(
                        &held
                            .as_slice()
                            .iter()
                            .map(|&w| w as u64)
                            .collect::<Vec<_>>(),
                        usize::BITS,
                    ),
                },
            });
        }
        self.check_local_done();
    }

    /// The store no longer holds `chunk` (evicted over its budget, deleted, unreadable):
    /// the relay stops counting it as held, so the store and the relay agree. It is asked
    /// for again at once if a child still needs it (its push would stall behind it) or
    /// somebody waits for it; otherwise when somebody next wants it. The root cannot fetch
    /// anything: a chunk lost there stays lost.
    pub fn handle_lost(&mut self, now: Instant, chunk: ChunkNo) {
        let i = chunk.index();
        if i >= self.schedule.len() || !self.have.contains(i) {
            return;
        }
        self.have.set(i, false);
        self.frontier = 0;
        self.count_held(chunk, false);
        self.stats.lost += 1;
        if self.root.is_some() {
            return;
        }
        if self.lost.insert(chunk) {
            self.count_lost(chunk, true);
        }
        let needed =
            self.wants.contains_key(&chunk) || self.children.values().any(|c| !c.sent.contains(i));
        if needed {
            self.seek(now, chunk);
        }
    }

    /// The transport was told to send `chunk` to `child` (by push or answering a demand)
    /// but the store could not produce it: the chunk counts as lost here and goes to the
    /// child as a demand answer once it is back.
    pub fn handle_unsent(&mut self, now: Instant, child: NodeId, chunk: ChunkNo) {
        let i = chunk.index();
        if i >= self.schedule.len() {
            return;
        }
        if let Some(c) = self.children.get_mut(&child) {
            c.sent.set(i, false);
        }
        self.handle_lost(now, chunk);
        if self.children.contains_key(&child) {
            self.on_want(now, Waiter::Child(child), chunk);
        }
    }

    /// A chunk arrived from `from`; `valid` says whether it matched its id (the caller
    /// verified it and, if valid, stored it).
    pub fn handle_chunk(&mut self, now: Instant, from: NodeId, chunk: ChunkNo, valid: bool) {
        self.touch(from, now);
        if chunk.index() >= self.schedule.len() {
            return;
        }
        if !valid {
            self.stats.bad += 1;
            self.events.push_back(Event::BadChunk { from, chunk });
            let fact = Report {
                liars: vec![(from, self.me)],
                ..Report::default()
            };
            if self.attaching.is_some() && Some(from) == self.parent {
                // Already abandoned this parent; its late chunks change nothing.
                return;
            }
            if Some(from) == self.parent && self.root.is_none() {
                // Never again from this parent: go to the next ancestor, and tell the
                // root through it.
                self.report.merge(fact);
                self.lose_parent(now);
            } else {
                self.absorb(now, fact);
            }
            return;
        }
        self.took(now, chunk);
    }

    /// A verified chunk is here (from a peer or the origin store): counted as held, its
    /// search ended, its waiting children served.
    pub(super) fn took(&mut self, now: Instant, chunk: ChunkNo) {
        if self.have.put(chunk.index()) {
            self.stats.duplicates += 1;
            return;
        }
        self.count_held(chunk, true);
        if self.lost.remove(&chunk) {
            self.count_lost(chunk, false);
        }
        self.sources.arrived(chunk);
        if let Some(waiters) = self.wants.remove(&chunk) {
            for w in waiters {
                if let Waiter::Child(c) = w {
                    self.serve_demand(c, chunk, now);
                }
            }
        }
        self.check_local_done();
    }

    /// Counts `chunk` as held (`up`) or no longer held, overall and in the phase it
    /// belongs to.
    fn count_held(&mut self, chunk: ChunkNo, up: bool) {
        let step = |n: &mut usize| if up { *n += 1 } else { *n -= 1 };
        step(&mut self.have_count);
        if self.schedule.urgent_chunk(chunk) {
            step(&mut self.urgent_have);
        }
        if self.schedule.pushed_chunk(chunk) {
            step(&mut self.pushed_have);
        }
    }

    /// Counts `chunk` as lost here (`up`) or back, in the phase it belongs to.
    fn count_lost(&mut self, chunk: ChunkNo, up: bool) {
        let step = |n: &mut usize| if up { *n += 1 } else { *n -= 1 };
        if self.schedule.urgent_chunk(chunk) {
            step(&mut self.lost_urgent);
        }
        if self.schedule.pushed_chunk(chunk) {
            step(&mut self.lost_pushed);
        }
    }

    pub(super) fn check_local_done(&mut self) {
        let reached = [
            self.urgent_have + self.lost_urgent == self.schedule.urgent,
            self.pushed_have + self.lost_pushed == self.schedule.pushed(),
        ];
        for phase in Phase::BOTH {
            let i = phase.index();
            if reached[i] && !self.local_done[i] {
                self.local_done[i] = true;
                self.events.push_back(Event::LocalPhaseDone(phase));
                self.done_log.push((self.me, phase));
                self.report.done.push((self.me, phase));
            }
        }
    }
}

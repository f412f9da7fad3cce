//! Demand: a chunk needed now, by a blocked read here or by a child's `Want`/`Lost`. It is
//! answered at once when held, otherwise searched for once however many wait for it (the
//! parent first, then other sources: [`super::sources`]), and served to every waiter when
//! it arrives ([`super::Relay::handle_chunk`]). The push order is not touched here.

use std::time::Instant;

use super::{ChunkNo, Msg, Relay, Transmit};
use crate::plan::NodeId;

/// Who waits for a demanded chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Waiter {
    /// A blocked read on this node.
    Local,
    /// A child that asked with `Want` or `Lost`.
    Child(NodeId),
}

impl Relay {
    /// `n` signs of applications starting (demands, opened files) were seen here or
    /// reported from below at `now`: a held hysteretic set keeps waiting
    /// ([`Relay::set_bulk_hold`]). The root hears of them with the next report.
    pub fn note_activity(&mut self, now: Instant, n: u32) {
        if n == 0 {
            return;
        }
        if self.root.is_some() {
            self.last_demand = Some(now);
        } else {
            self.report.activity = self.report.activity.saturating_add(n);
        }
    }

    /// `who` needs `chunk` now: serve it if held, else wait for it, searching for it only
    /// for the first waiter.
    pub(super) fn on_want(&mut self, now: Instant, who: Waiter, chunk: ChunkNo) {
        if chunk.index() >= self.schedule.len() {
            return;
        }
        // Applications are still starting here or below: a held hysteretic set keeps
        // waiting ([`Relay::set_bulk_hold`]); the root hears of it with the next report.
        self.note_activity(now, 1);
        if self.has(chunk) {
            if let Waiter::Child(c) = who {
                self.serve_demand(c, chunk, now);
            }
            return;
        }
        let waiters = self.wants.entry(chunk).or_default();
        if !waiters.contains(&who) {
            waiters.push(who);
        }
        self.seek(now, chunk);
    }

    /// A child lost `chunk` after we sent it ([`Msg::Lost`]): it is no longer counted as
    /// sent there, so the demand is answered although it went out once.
    pub(super) fn on_lost(&mut self, now: Instant, from: NodeId, chunk: ChunkNo) {
        if let Some(c) = self.children.get_mut(&from)
            && (chunk.index()) < self.schedule.len()
        {
            c.sent.set(chunk.index(), false);
        }
        self.on_want(now, Waiter::Child(from), chunk);
    }

    /// Asks the parent for `chunk` (as `Lost` if it was held here once, since the parent
    /// ignores a plain `Want` for a chunk it already sent). Nothing while re-attaching: the
    /// new parent is asked for every outstanding chunk once it adopts us
    /// ([`super::sources::Sources::new_parent`]).
    pub(super) fn send_want(&mut self, chunk: ChunkNo) {
        if let Some(p) = self.parent()
            && self.root.is_none()
        {
            self.stats.wants_sent += 1;
            let msg = if self.lost.contains(&chunk) {
                Msg::Lost { chunk }
            } else {
                Msg::Want { chunk }
            };
            self.control.push_back(Transmit::Control { to: p, msg });
        }
    }

    /// Sends `chunk` to `child` on the priority path, unless the push already sent it.
    pub(super) fn serve_demand(&mut self, child: NodeId, chunk: ChunkNo, now: Instant) {
        if let Some(c) = self.children.get_mut(&child) {
            if c.sent.put(chunk.index()) {
                // Already on its way by push; the child will have it shortly.
                return;
            }
            c.bytes += u64::from(self.schedule.sizes[chunk.index()]);
            c.last_sent = now;
            self.stats.demand_served += 1;
            self.control
                .push_back(Transmit::DemandChunk { to: child, chunk });
        }
    }

    /// A blocked local read needs `chunk`.
    pub fn handle_local_want(&mut self, now: Instant, chunk: ChunkNo) {
        self.on_want(now, Waiter::Local, chunk);
    }
}

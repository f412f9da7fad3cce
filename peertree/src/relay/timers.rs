//! Time in the relay: heartbeats to children and parent, the deadlines after which a silent
//! peer counts as failed, and when the caller should next call
//! [`Relay::handle_timeout`]. The relay never reads a clock; every instant comes from the
//! caller.
//!
//! A peer can be silent because it is dead or because it is starved: a node whose CPU is
//! saturated (its applications, a quota) answers late, and its relay messages come seconds
//! behind while its transport (QUIC acknowledging our data and heartbeats, which costs it
//! next to nothing) still answers. So a peer counts as failed only once both are silent
//! for the deadline: its relay messages and, as the caller reports them
//! ([`Relay::handle_transport_alive`]), its transport. A dead peer (killed, stopped,
//! cut off) answers nothing and is declared failed within its deadline as before; a
//! peer that is alive but no longer runs the job (its transport is shared by every job)
//! is declared failed after [`STARVED_DEADLINES`] deadlines.

use std::time::{Duration, Instant};

use super::root::RootState;
use super::{Msg, Relay, Transmit};
use crate::plan::NodeId;

/// Milliseconds of a [`super::Timing`] field as a duration.
pub(super) fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

/// How many deadlines a peer whose transport still answers may stay silent in the relay
/// before it is declared failed anyway: its process lives, but the job may not (a daemon
/// that dropped the job, or whose job is wedged, still acknowledges packets of others).
pub const STARVED_DEADLINES: u32 = 4;

/// How a peer's silence stands against its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Silence {
    /// Heard from within the deadline.
    Heard,
    /// Silent in the relay past the deadline, but its transport answers: starved.
    Starved,
    /// Silent past the deadline in the relay and the transport (or for
    /// [`STARVED_DEADLINES`]): failed.
    Lapsed,
}

/// Where a peer last heard from in the relay at `heard` and by its transport at
/// `transport` stands at `now` against `deadline`.
fn silence(now: Instant, heard: Instant, transport: Instant, deadline: Duration) -> Silence {
    let quiet = now.saturating_duration_since(heard);
    if quiet <= deadline {
        Silence::Heard
    } else if now.saturating_duration_since(transport) <= deadline
        && quiet <= deadline * STARVED_DEADLINES
    {
        Silence::Starved
    } else {
        Silence::Lapsed
    }
}

/// When [`silence`] turns to [`Silence::Lapsed`] if nothing is heard meanwhile.
fn lapses_at(heard: Instant, transport: Instant, deadline: Duration) -> Instant {
    let starved_limit = heard + deadline * STARVED_DEADLINES;
    (heard + deadline).max((transport + deadline).min(starved_limit)) + Duration::from_millis(1)
}

impl Relay {
    /// Time passed: check deadlines and heartbeats.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let (Some(hold), Some(done)) = (self.bulk_hold, self.urgent_done_at)
            && now >= done + hold.max
        {
            // The hold on the hysteretic set is over for good.
            self.bulk_hold = None;
        }
        self.bulk_woken = self.bulk_release_at().filter(|&t| now >= t);
        if let Some(a) = &self.attaching
            && now >= a.deadline
        {
            self.attach_next(now);
        }
        // Searches for chunks go on after the job is finished: its mount still reads.
        self.sources_due(now);
        if self.finished {
            return;
        }
        self.check_deadlines(now);
        let heartbeat = ms(self.timing.heartbeat_ms);
        for (&id, c) in self.children.iter_mut() {
            if c.started && now.saturating_duration_since(c.last_sent) >= heartbeat {
                c.last_sent = now;
                self.control.push_back(Transmit::Control {
                    to: id,
                    msg: Msg::Ping,
                });
            }
        }
        if self.root.is_none()
            && self.parent().is_some()
            && now.saturating_duration_since(self.last_sent_parent) >= heartbeat
        {
            // The report (possibly empty) doubles as the heartbeat.
            self.flush_report(now, true);
        }
        if self.root.is_some() {
            self.root_check(now);
        }
    }

    /// The transport heard from `peer` at `now` (a packet on a connection to it: an
    /// acknowledgement of our data or heartbeats, its own data): its process is alive and
    /// running, even if its relay is too starved to speak. A parent or child silent in the
    /// relay is not declared failed while this keeps coming, up to [`STARVED_DEADLINES`]
    /// deadlines. Call it for the peers whose connections received anything since the
    /// last call; peers that are neither parent nor child are ignored.
    pub fn handle_transport_alive(&mut self, now: Instant, peer: NodeId) {
        if self.attaching.is_none() && Some(peer) == self.parent {
            self.parent_transport = self.parent_transport.max(now);
        }
        if let Some(c) = self.children.get_mut(&peer) {
            c.transport_heard = c.transport_heard.max(now);
        }
    }

    /// This node did not run for `stalled` up to `now` (its timer fired that late: its own
    /// CPU was starved, or its task busy): whatever its peers sent meanwhile has not been
    /// taken in yet, so their silence over that time is no evidence against them. Every
    /// deadline moves on by `stalled`; a peer that stays silent once this node listens
    /// again is declared failed a full deadline later. Call it before
    /// [`Relay::handle_timeout`] on a late timer.
    pub fn handle_stall(&mut self, now: Instant, stalled: Duration) {
        let credit = |t: &mut Instant| *t = (*t + stalled).min(now).max(*t);
        credit(&mut self.parent_heard);
        credit(&mut self.parent_transport);
        for c in self.children.values_mut() {
            credit(&mut c.last_heard);
            credit(&mut c.transport_heard);
        }
    }

    /// Declares failed the children, and lost the parent, silent past their deadline in the
    /// relay and the transport; counts those kept because their transport answers.
    fn check_deadlines(&mut self, now: Instant) {
        let deadline = ms(self.timing.deadline_ms);
        if self.root.is_none() && self.attaching.is_none() {
            match silence(now, self.parent_heard, self.parent_transport, deadline) {
                Silence::Heard => {}
                Silence::Starved => {
                    if !std::mem::replace(&mut self.parent_starved, true) {
                        self.stats.starved += 1;
                    }
                }
                Silence::Lapsed => self.lose_parent(now),
            }
        }
        let mut lapsed = Vec::new();
        for (&id, c) in self.children.iter_mut() {
            match silence(now, c.last_heard, c.transport_heard, deadline) {
                Silence::Heard => {}
                Silence::Starved => {
                    if !std::mem::replace(&mut c.starved, true) {
                        self.stats.starved += 1;
                    }
                }
                Silence::Lapsed => lapsed.push(id),
            }
        }
        for c in lapsed {
            self.fail_child(now, c);
        }
    }

    /// When [`Relay::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = ms(self.timing.deadline_ms);
        let heartbeat = ms(self.timing.heartbeat_ms);
        let mut t: Option<Instant> = self.attaching.as_ref().map(|a| a.deadline);
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(x) = self.root.as_ref().and_then(RootState::next_limbo) {
            consider(x);
        }
        if let Some(x) = self.sources.poll_timeout() {
            consider(x);
        }
        if let Some(x) = self
            .bulk_release_at()
            .filter(|&x| Some(x) != self.bulk_woken)
        {
            // Wake when the held hysteretic set may flow (once per release).
            consider(x);
        }
        if self.finished {
            return t;
        }
        if self.root.is_none() && self.attaching.is_none() {
            consider(lapses_at(
                self.parent_heard,
                self.parent_transport,
                deadline,
            ));
            consider(self.last_sent_parent + heartbeat);
        }
        for c in self.children.values() {
            consider(lapses_at(c.last_heard, c.transport_heard, deadline));
            if c.started {
                consider(c.last_sent + heartbeat);
            }
        }
        t
    }
}

#[cfg(test)]
#[path = "timers_tests.rs"]
mod tests;

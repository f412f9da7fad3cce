//! Time in the relay: heartbeats to children and parent, the deadlines after which a silent
//! peer counts as failed, and when the caller should next call
//! [`Relay::handle_timeout`]. The relay never reads a clock; every instant comes from the
//! caller.

use std::time::{Duration, Instant};

use super::root::RootState;
use super::{Msg, Relay, Transmit};
use crate::plan::NodeId;

/// Milliseconds of a [`super::Timing`] field as a duration.
pub(super) fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
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
        if self.finished {
            return;
        }
        let deadline = ms(self.timing.deadline_ms);
        let heartbeat = ms(self.timing.heartbeat_ms);
        if self.root.is_none()
            && self.attaching.is_none()
            && now.saturating_duration_since(self.parent_heard) > deadline
        {
            self.lose_parent(now);
        }
        let silent: Vec<NodeId> = self
            .children
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.last_heard) > deadline)
            .map(|(&id, _)| id)
            .collect();
        for c in silent {
            self.fail_child(now, c);
        }
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

    /// When [`Relay::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = ms(self.timing.deadline_ms);
        let heartbeat = ms(self.timing.heartbeat_ms);
        let mut t: Option<Instant> = self.attaching.as_ref().map(|a| a.deadline);
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(x) = self.root.as_ref().and_then(RootState::next_limbo) {
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
            consider(self.parent_heard + deadline + Duration::from_millis(1));
            consider(self.last_sent_parent + heartbeat);
        }
        for c in self.children.values() {
            consider(c.last_heard + deadline + Duration::from_millis(1));
            if c.started {
                consider(c.last_sent + heartbeat);
            }
        }
        t
    }
}

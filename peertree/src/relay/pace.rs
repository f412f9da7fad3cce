//! Pacing one child's bulk stream at a rate: after each chunk is handed to the transport,
//! whether to wait before the next and until when. The rate is the child's planned share
//! of the sender's link ([`crate::Plan::rate`]) or the operator's `--rate-limit`, whichever
//! is lower.
//!
//! The pacer keeps a schedule: when the link is free of what was sent so far at this rate.
//! It asks for no wait shorter than [`MIN_WAIT`] (timers are no finer, and at 100 Gbit/s a
//! 1 MiB chunk takes 84 µs), and a sender that wakes late by up to [`SLACK`] keeps its place
//! in the schedule, so rounded timers cost no rate. A sender later than that (idle, or held
//! up by the transport) starts a new schedule from now: idle time earns no burst. Pure: the
//! caller supplies every instant.

use std::time::{Duration, Instant};

/// Shortest wait worth a timer.
pub const MIN_WAIT: Duration = Duration::from_millis(1);
/// How late a sender may be and still keep its place in the schedule.
pub const SLACK: Duration = Duration::from_millis(5);

/// A bulk stream's pacer.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Bytes per second.
    rate: u64,
    /// When the link is free of what was sent so far, at this rate.
    free_at: Option<Instant>,
}

impl Pacer {
    /// A pacer for at most `bytes_per_s`; `None` for no limit (0 counts as none).
    pub fn new(bytes_per_s: Option<u64>) -> Option<Self> {
        bytes_per_s.filter(|&r| r > 0).map(|rate| Pacer {
            rate,
            free_at: None,
        })
    }

    /// The lower of two optional limits in bytes per second, from a planned rate in bits
    /// per second and a cap in bytes per second.
    pub fn rate(planned_bits_per_s: Option<u64>, cap_bytes_per_s: Option<u64>) -> Option<u64> {
        let planned = planned_bits_per_s.map(|b| b / 8).filter(|&r| r > 0);
        let cap = cap_bytes_per_s.filter(|&r| r > 0);
        match (planned, cap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `bytes` were handed to the transport at `at`: the instant to wait for before the
    /// next chunk, or `None` to go on at once.
    pub fn sent(&mut self, at: Instant, bytes: u64) -> Option<Instant> {
        let start = match self.free_at {
            Some(t) if at <= t + SLACK => t,
            _ => at,
        };
        let free = start + Duration::from_secs_f64(bytes as f64 / self.rate as f64);
        self.free_at = Some(free);
        (free > at + MIN_WAIT).then_some(free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_sent_back_to_back_are_spaced_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000_000)).expect("a rate");
        assert_eq!(p.sent(t0, 500_000), Some(t0 + Duration::from_millis(500)));
        // Handed over early (the caller did not wait): the link is still busy till then.
        assert_eq!(
            p.sent(t0 + Duration::from_millis(100), 500_000),
            Some(t0 + Duration::from_millis(1000))
        );
    }

    #[test]
    fn idle_time_earns_no_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000_000)).expect("a rate");
        p.sent(t0, 1_000);
        let late = t0 + Duration::from_secs(10);
        assert_eq!(p.sent(late, 1_000_000), Some(late + Duration::from_secs(1)));
    }

    #[test]
    fn waking_a_little_late_keeps_the_schedule() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000_000)).expect("a rate");
        let wake = p.sent(t0, 1_000_000).expect("a wait");
        // The timer fired 3 ms late: the next chunk is still due a second after the first.
        let next = p.sent(wake + Duration::from_millis(3), 1_000_000);
        assert_eq!(next, Some(t0 + Duration::from_secs(2)));
    }

    /// At 100 Gbit/s a 1 MiB chunk takes 84 µs, below any timer: the pacer asks for waits
    /// only once a millisecond is owed, and a sender whose timers fire a millisecond late
    /// still keeps the rate.
    #[test]
    fn a_fast_link_keeps_its_rate_with_coarse_timers() {
        let rate = 12_500_000_000u64;
        let chunk = 1u64 << 20;
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(rate)).expect("a rate");
        let mut now = t0;
        let mut waits = 0;
        for _ in 0..10_000 {
            if let Some(until) = p.sent(now, chunk) {
                waits += 1;
                // A timer with 1 ms resolution, rounding up.
                now = until + Duration::from_millis(1);
            }
        }
        let ideal = Duration::from_secs_f64((10_000 * chunk) as f64 / rate as f64);
        let took = now - t0;
        assert!(waits < 10_000 / 5, "{waits} waits");
        assert!(
            took <= ideal + Duration::from_millis(2) && took + Duration::from_millis(2) >= ideal,
            "{took:?} for {ideal:?}"
        );
    }

    #[test]
    fn the_lower_limit_wins_and_zero_is_none() {
        assert_eq!(Pacer::rate(Some(100_000_000), None), Some(12_500_000));
        assert_eq!(Pacer::rate(Some(100_000_000), Some(1 << 20)), Some(1 << 20));
        assert_eq!(Pacer::rate(None, Some(5)), Some(5));
        assert_eq!(Pacer::rate(Some(0), Some(0)), None);
        assert!(Pacer::new(Some(0)).is_none());
        assert!(Pacer::new(None).is_none());
    }
}

//! Pacing one child's bulk stream at a rate: after each chunk is handed to the transport,
//! the instant before which the next may not be. A token bucket without a burst: the rate
//! is the child's planned share of the sender's link ([`crate::Plan::rate`]) or the
//! operator's `--rate-limit`, whichever is lower. Time spent blocked in the transport counts
//! toward the wait, and idle time earns no credit. Pure: the caller supplies every instant.

use std::time::{Duration, Instant};

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

    /// `bytes` were handed to the transport at `at`: the instant before which the next
    /// chunk may not be.
    pub fn sent(&mut self, at: Instant, bytes: u64) -> Instant {
        let start = self.free_at.map_or(at, |t| t.max(at));
        let free = start + Duration::from_secs_f64(bytes as f64 / self.rate as f64);
        self.free_at = Some(free);
        free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_sent_back_to_back_are_spaced_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000_000)).expect("a rate");
        assert_eq!(p.sent(t0, 500_000), t0 + Duration::from_millis(500));
        // Handed over early (the caller did not wait): the link is still busy till then.
        assert_eq!(
            p.sent(t0 + Duration::from_millis(100), 500_000),
            t0 + Duration::from_millis(1000)
        );
    }

    #[test]
    fn idle_time_earns_no_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(1_000_000)).expect("a rate");
        p.sent(t0, 1_000);
        let late = t0 + Duration::from_secs(10);
        assert_eq!(p.sent(late, 1_000_000), late + Duration::from_secs(1));
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

//! How the daemon's accept loops (the control socket's, the metrics endpoint's) live through
//! failing `accept`s without spinning or flooding the log.
//!
//! Out of descriptors (`EMFILE`, `ENFILE`) or memory, `accept` fails at once, and keeps
//! failing while the listener's backlog holds connections: a loop that only logs and tries
//! again spins a core and writes hundreds of thousands of lines a second (issue 29 item
//! 10: 418,816 warnings, 51.8 MB of log, in 3 s). [`AcceptBackoff`] decides, purely, how
//! long to wait before the next try (doubling up to [`MAX_DELAY`]) and whether this failure
//! is worth a warning (the first of a run, then one per [`WARN_EVERY`] naming how many
//! were not logged); [`accept_with_backoff`] is the loop both servers share. A failure
//! that concerns only the connection being accepted (it was reset before it was taken)
//! is tried again at once. This module must not decide anything about the connections
//! themselves.

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

/// The wait after the first failure of a run.
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(20);
/// The longest wait between tries.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(1);
/// At most one warning per this long while accepts keep failing.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(30);

/// What to do after a failed `accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    /// How long to wait before trying again (zero: at once).
    pub delay: Duration,
    /// Log a warning now, saying how many failures since the last one went unlogged.
    pub warn: Option<u64>,
}

/// The state of one accept loop's failures.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    /// The wait after the last failure of the current run (zero: no run).
    delay: Duration,
    /// When the last warning was logged.
    warned_at: Option<Instant>,
    /// Failures since that warning that were not logged.
    unlogged: u64,
    /// Warnings logged so far (tests read it).
    warnings: u64,
}

/// Whether `e` concerns only the connection being accepted (the next one may be fine), as
/// opposed to the process or the system running out of something.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e.raw_os_error() == Some(libc::EPROTO)
}

impl AcceptBackoff {
    /// An `accept` failed with `e` at `now`.
    pub fn failed(&mut self, e: &io::Error, now: Instant) -> Retry {
        if is_per_connection(e) {
            return Retry {
                delay: Duration::ZERO,
                warn: None,
            };
        }
        self.delay = if self.delay.is_zero() {
            FIRST_DELAY
        } else {
            (self.delay * 2).min(MAX_DELAY)
        };
        let due = self
            .warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        let warn = if due {
            self.warned_at = Some(now);
            self.warnings += 1;
            Some(std::mem::take(&mut self.unlogged))
        } else {
            self.unlogged += 1;
            None
        };
        Retry {
            delay: self.delay,
            warn,
        }
    }

    /// An `accept` worked: the next failure starts a new run with a short wait (its
    /// warning still waits for [`WARN_EVERY`] after the last one).
    pub fn succeeded(&mut self) {
        self.delay = Duration::ZERO;
    }

    /// Warnings logged so far.
    #[cfg(test)]
    pub fn warnings(&self) -> u64 {
        self.warnings
    }
}

/// Calls `accept` until it gives a connection, waiting as `backoff` says after each
/// failure and logging the warnings it allows, naming `what` (e.g. "metrics endpoint").
pub(crate) async fn accept_with_backoff<T, F, Fut>(
    what: &'static str,
    backoff: &mut AcceptBackoff,
    mut accept: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<T>>,
{
    loop {
        match accept().await {
            Ok(t) => {
                backoff.succeeded();
                return t;
            }
            Err(e) => {
                let retry = backoff.failed(&e, Instant::now());
                match retry.warn {
                    Some(0) => tracing::warn!(
                        error = %e,
                        "{what}: accept failed; waiting before trying again (raise the open-file limit if this is EMFILE)"
                    ),
                    Some(unlogged) => tracing::warn!(
                        error = %e,
                        unlogged,
                        "{what}: accept failed again; waiting before trying again (raise the open-file limit if this is EMFILE)"
                    ),
                    None => tracing::debug!(error = %e, "{what}: accept failed"),
                }
                if !retry.delay.is_zero() {
                    // Not a wait for an event: nothing signals that descriptors were freed.
                    tokio::time::sleep(retry.delay).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(libc::EMFILE)
    }

    /// Issue 29 item 10: out of descriptors, the metrics endpoint's accept loop tried again
    /// at once and warned each time (418,816 lines in 3 s). Failing for 3 s now costs a
    /// handful of tries and one warning, and a minute of it two more.
    #[test]
    fn an_accept_loop_out_of_descriptors_backs_off_and_warns_a_bounded_number_of_times() {
        let mut b = AcceptBackoff::default();
        let start = Instant::now();
        let (mut now, mut tries, mut warned) = (start, 0u32, Vec::new());
        while now < start + Duration::from_secs(3) {
            let r = b.failed(&emfile(), now);
            tries += 1;
            warned.extend(r.warn);
            assert!(r.delay >= FIRST_DELAY && r.delay <= MAX_DELAY, "{r:?}");
            now += r.delay;
        }
        assert!(tries <= 10, "{tries} tries in 3 s");
        assert_eq!(warned, vec![0], "one warning, first of its run");
        while now < start + Duration::from_secs(61) {
            let r = b.failed(&emfile(), now);
            tries += 1;
            warned.extend(r.warn);
            now += r.delay;
        }
        assert_eq!(b.warnings(), 3, "{warned:?}");
        assert!(
            warned[1] > 0,
            "the later warnings count the unlogged ones: {warned:?}"
        );
        assert!(tries <= 70, "{tries} tries in 61 s");
    }

    #[test]
    fn a_success_restarts_the_wait_short_and_a_reset_connection_is_skipped_at_once() {
        let mut b = AcceptBackoff::default();
        let now = Instant::now();
        for _ in 0..10 {
            b.failed(&emfile(), now);
        }
        assert_eq!(b.failed(&emfile(), now).delay, MAX_DELAY);
        b.succeeded();
        let r = b.failed(&io::Error::from_raw_os_error(libc::ENFILE), now);
        assert_eq!(r.delay, FIRST_DELAY);
        assert_eq!(r.warn, None, "within WARN_EVERY of the last warning");
        let reset = b.failed(&io::Error::from(io::ErrorKind::ConnectionAborted), now);
        assert_eq!(
            reset,
            Retry {
                delay: Duration::ZERO,
                warn: None
            }
        );
    }
}

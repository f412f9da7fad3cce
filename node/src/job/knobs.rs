//! The knobs of one job on one node: the operator's rate cap, what a rates probe's filler
//! changes, and the lab's fault injection.

/// Per-job behaviour knobs.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobKnobs {
    /// Cap on bulk bytes per second to each child (protects a shared uplink); `None` for
    /// no cap. Demand traffic is never capped.
    pub rate_limit: Option<u64>,
    /// Fault injection for the lab's tests: flip a byte in every chunk this node sends,
    /// making it a lying peer. Not built into the shipped binary (feature `fault-injection`, which the binary's `lab` feature turns on).
    #[cfg(feature = "fault-injection")]
    pub corrupt_outgoing: bool,
    /// Fault injection for the lab's tests: every chunk file write on this node takes this
    /// much longer (a slow disk). Applied to the daemon's store.
    #[cfg(feature = "fault-injection")]
    pub slow_store: std::time::Duration,
    /// A rates probe (`teesfs health --rates`): the chunks are filler of the index's sizes,
    /// taken by their length only, never verified, kept or handed to readers
    /// ([`crate::rates_probe`]).
    pub filler: bool,
}

impl JobKnobs {
    /// The production knobs: an optional cap on bulk bytes per second to each child.
    pub(crate) fn rate_limited(rate_limit: Option<u64>) -> Self {
        Self {
            rate_limit,
            #[cfg(feature = "fault-injection")]
            corrupt_outgoing: false,
            #[cfg(feature = "fault-injection")]
            slow_store: std::time::Duration::ZERO,
            filler: false,
        }
    }
}

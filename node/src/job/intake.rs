//! A relay takes in no faster than it passes on: while this node holds more of the push
//! than it has handed to its children ([`Relay::forward_lead`] above [`LEAD_MAX`]), the
//! chunks its parent's bulk stream brings are answered late, so the stream's reader
//! (`peers::InOrder`) stops reading and QUIC flow control holds the parent back. Demand
//! answers and control messages travel on streams of their own and are never held.
//!
//! Where a node's CPU bounds the push, taking in everything its parent sends leaves it no
//! CPU to pass the payload on until its own copy is in; its children then get the payload
//! in a burst that they take in at their own CPU's pace, and every level of the tree adds
//! that lag (BENCHMARKS.md, "A relay takes in no faster than it passes on").

use std::sync::Arc;

use peertree::relay::Relay;

use super::JobCore;

/// Stored bytes a node may hold beyond what it handed to its least-behind child before it
/// stops reading its parent's bulk stream: a few chunks of the largest size, far less than a
/// layer. The children's own stream windows (up to 16 MiB each) come on top.
pub(crate) const LEAD_MAX: u64 = 4 << 20;

impl JobCore {
    /// Sets whether the parent's stream is held, from the relay's lead (never for the
    /// filler of a rate probe, which measures links, not this node's CPU).
    pub(super) fn update_intake(&self, r: &mut Relay) {
        let held = !self.knobs.filler && r.forward_lead().is_some_and(|l| l > LEAD_MAX);
        self.intake_held
            .send_if_modified(|h| std::mem::replace(h, held) != held);
    }

    /// Whether chunks pushed from the parent are taken in more slowly now.
    pub(crate) fn intake_held(&self) -> bool {
        *self.intake_held.borrow()
    }

    /// Waits until the parent's stream is read again, or the job closes.
    pub(crate) async fn intake_room(&self) {
        let mut held = self.intake_held.subscribe();
        let mut closing = self.closing.subscribe();
        tokio::select! {
            _ = held.wait_for(|&h| !h) => {}
            _ = closing.wait_for(|&c| c) => {}
        }
    }

    /// The work still running for a pushed chunk (`pending`), followed, while the intake is
    /// held, by the wait for room: what the stream's reader waits for before it reads on.
    pub(crate) fn pushed_pending(
        self: &Arc<Self>,
        pending: Option<tokio::task::JoinHandle<()>>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if !self.intake_held() {
            return pending;
        }
        let this = self.clone();
        Some(self.rt.spawn(async move {
            if let Some(w) = pending {
                let _ = w.await;
            }
            this.intake_room().await;
        }))
    }
}

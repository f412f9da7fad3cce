//! How a job's task tells a starved peer from a dead one, for its relay: on every pass of
//! the relay's timer it first owns up to its own starvation (a timer that fires late means
//! this node did not run, and what its peers sent meanwhile is still queued:
//! [`Relay::handle_stall`]), then tells the relay which peers the transport heard from
//! since the last look (any datagram on a connection to them, which a starved peer's QUIC
//! stack still sends: [`Relay::handle_transport_alive`]), and only then lets the relay
//! check its deadlines. The decision stays in the relay; this only gathers the evidence.

use std::collections::HashMap;
use std::time::Instant;

use peertree::NodeId;
use peertree::relay::Relay;

use super::JobCore;
#[cfg(doc)]
use crate::peers::Peers;

/// What the job's task last counted of each peer's transport ([`Peers::heard_from`]), and
/// when that count last grew.
#[derive(Default)]
pub(super) struct TransportSeen {
    counts: HashMap<NodeId, u64>,
    alive_at: HashMap<NodeId, Instant>,
    /// How late the relay's timer last fired.
    late: std::time::Duration,
}

impl TransportSeen {
    /// Logs why `peer` (at `host`) was given up, with what the transport last said.
    pub(super) fn gave_up(&self, host: &str, peer: NodeId, now: Instant) {
        let quiet = self
            .alive_at
            .get(&peer)
            .map(|&t| now.saturating_duration_since(t).as_secs_f64());
        tracing::info!(
            peer = %host,
            transport_quiet_s = ?quiet,
            timer_late_s = self.late.as_secs_f64(),
            "gave up on a peer (transport_quiet_s: since its transport last answered; None: not in this job)"
        );
    }
}

impl JobCore {
    /// The relay's timer, due at `due`: first what this task missed while it did not run
    /// (a timer that fires late means this node was starved, and its peers' messages and
    /// acknowledgements are still queued behind), then what the transport heard, then the
    /// deadlines.
    pub(super) fn on_timer(
        &self,
        r: &mut Relay,
        transport: &mut TransportSeen,
        due: Instant,
        now: Instant,
    ) {
        let late = now.saturating_duration_since(due);
        r.handle_stall(now, late);
        transport.late = late;
        self.tell_transport(r, transport, now);
        r.handle_timeout(now);
    }

    /// Tells the relay which of its parent and children the transport heard from since the
    /// last look (datagrams on any connection to them: data, heartbeats, QUIC's
    /// acknowledgements), just before it checks their deadlines: a starved peer answers
    /// there long before its relay speaks again, a dead one does not.
    pub(super) fn tell_transport(&self, r: &mut Relay, seen: &mut TransportSeen, now: Instant) {
        let peers: Vec<NodeId> = r.children().chain(r.parent()).collect();
        for id in peers {
            let Some((host, _)) = self.peer_addr(r, id) else {
                continue;
            };
            let count = self.peers.heard_from(&host);
            if seen
                .counts
                .insert(id, count)
                .is_some_and(|before| count > before)
            {
                seen.alive_at.insert(id, now);
                r.handle_transport_alive(now, id);
            }
        }
    }
}

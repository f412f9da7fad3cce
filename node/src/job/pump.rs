//! A child's pump: pushes chunks to one child on its bulk stream, one at a time as the
//! job's task hands them out, so QUIC flow control is the back-pressure. It never decides
//! anything about the child: what it cannot send it reports to the job's task.

use std::sync::Arc;
use std::time::Instant;

use peertree::NodeId;
use peertree::relay::Pacer;
use tokio::sync::{Notify, oneshot};

use super::{Input, JobCore};
use crate::net::StreamKind;
use crate::peers::chunk_head;

impl JobCore {
    /// Pushes chunks to one child on its bulk stream, one at a time as the job's task hands
    /// them out, so QUIC flow control is the back-pressure. Ends when the child is no
    /// longer a child, cannot be reached, or the job closes.
    pub(super) async fn pump(
        self: Arc<Self>,
        child: NodeId,
        host: String,
        addr: String,
        rate: Option<u64>,
        wake: Arc<Notify>,
    ) {
        self.pump_chunks(child, &host, &addr, Pacer::new(rate), &wake)
            .await;
        self.tell(Input::PumpDone(child));
    }

    async fn pump_chunks(
        &self,
        child: NodeId,
        host: &str,
        addr: &str,
        mut pacer: Option<Pacer>,
        wake: &Notify,
    ) {
        let mut closing = self.closing.subscribe();
        let opened = match self.peers.conn(host, addr).await {
            Ok(conn) => conn.open(StreamKind::Bulk).await,
            Err(e) => Err(e),
        };
        let mut tx = match opened {
            Ok(tx) => tx,
            Err(e) => {
                tracing::warn!(error = %e, "child unreachable");
                self.tell(Input::Unreachable(child));
                return;
            }
        };
        loop {
            let (reply, next) = oneshot::channel();
            self.tell(Input::NextBulk { child, reply });
            let chunk = match next.await {
                Ok(Some(Some(chunk))) => chunk,
                Ok(Some(None)) => {
                    tokio::select! {
                        () = wake.notified() => continue,
                        _ = closing.wait_for(|&c| c) => return,
                    }
                }
                // No longer a child, or the job's task has ended.
                Ok(None) | Err(_) => return,
            };
            let Some(data) = self.chunk_bytes(chunk).await else {
                tracing::warn!(
                    chunk = %chunk,
                    "a chunk to forward is no longer in the store; fetching it again for the child"
                );
                self.tell(Input::Unsent { child, chunk });
                continue;
            };
            // The stored bytes go out as they are, shared with the store's memory and the
            // other children's pumps: nothing copies them before quinn does.
            let head = chunk_head(self.job, chunk, false, data.len());
            let len = head.len() + data.len();
            let handed = Instant::now();
            if let Err(e) = tx.send_parts(&head, data).await {
                tracing::debug!(error = %e, "bulk send failed");
                self.tell(Input::Unreachable(child));
                return;
            }
            if let Some(until) = pacer.as_mut().and_then(|p| p.sent(handed, len as u64)) {
                // Pacing to the child's rate, not waiting for a message.
                tokio::time::sleep_until(until.into()).await;
            }
            if self.is_closed() {
                return;
            }
        }
    }
}

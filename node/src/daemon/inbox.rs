//! Where the network's messages enter the daemon ([`Router`]): a job's chunks and relay
//! messages go straight to the job's task, found in the daemon task's view; what changes
//! the daemon's jobs (a `Start`, a `Prepare`, a request for a record, a peer unreachable)
//! is sent to the daemon task as an [`Input`]. A `Start`'s stream waits until the task
//! routed it ([`super::state::Routed`]), so the stream's next messages find the job.

use std::sync::Arc;

use peertree::relay::{JobId, Routed};
use tokio::sync::oneshot;

use super::Shared;
use super::state::Input;
use crate::job::{ChunkTaken, JobCore};
use crate::peers::{Pending, Router, Ticket};

impl Shared {
    /// The task of a job this node runs.
    fn running(&self, job: JobId) -> Option<Arc<JobCore>> {
        self.view.borrow().jobs.get(&job).map(|j| j.core.clone())
    }
}

impl Router for Shared {
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed, order: Ticket) -> Option<Pending> {
        match msg {
            Routed::Start(start) => {
                let (routed, done) = oneshot::channel();
                let input = Input::Start {
                    from: from_host.to_string(),
                    job,
                    start,
                    routed,
                };
                // The stream's next frame waits until the job is routed (or refused).
                if self.inputs.send(input).is_ok() {
                    return Some(tokio::spawn(async move {
                        let _ = done.await;
                    }));
                }
            }
            Routed::Prepare(prepare) => {
                let _ = self.inputs.send(Input::Prepare {
                    from: from_host.to_string(),
                    job,
                    prepare,
                });
            }
            Routed::Chunk {
                chunk,
                data,
                demand,
            } => {
                let Some(core) = self.running(job) else {
                    tracing::debug!(%job, peer = %from_host, "chunk for an unknown job");
                    self.metrics.chunk_refused();
                    return None;
                };
                let taken = core.on_chunk_msg(from_host, chunk, data, order);
                if matches!(taken, ChunkTaken::Refused) {
                    self.metrics.chunk_refused();
                }
                // A pushed chunk's stream waits while this node runs ahead of its children.
                return if demand {
                    taken.pending()
                } else {
                    core.pushed_pending(taken.pending())
                };
            }
            Routed::Relay(m) => {
                match self.running(job) {
                    Some(j) => j.on_relay_msg(from_host, m),
                    // Perhaps a child's answer to a `Start` passed on before this node's
                    // own was admitted: the task keeps it for the job.
                    None => {
                        let _ = self.inputs.send(Input::Stray {
                            job,
                            from: from_host.to_string(),
                            msg: m,
                        });
                    }
                }
            }
            Routed::AskRecord { reply } => {
                let _ = self.inputs.send(Input::AskRecord {
                    from: from_host.to_string(),
                    job,
                    reply,
                });
            }
            Routed::Record { .. } => {
                tracing::debug!(%job, peer = %from_host, "a record this daemon did not ask for; ignored")
            }
        }
        None
    }

    fn unreachable(&self, host: &str, _why: &str) {
        let _ = self.inputs.send(Input::Unreachable {
            host: host.to_string(),
        });
    }
}

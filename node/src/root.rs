//! The login node as the root of one job's tree, for a push and for a health probe alike:
//! binds the endpoint, tells the nodes where the root listens, drives the root relay over
//! the shared connection manager, hands its events out until a deadline, and closes after
//! its last messages are acknowledged. What the job *is* (an index and a store, or an empty
//! probe) and when it is done are the caller's: [`super::push`] and [`super::health`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifest::{Index, IndexId};
use peertree::relay::{Event, JobId, NodeInfo, Relay, Routed};
use tokio::sync::mpsc;

use super::job::{JobCore, JobKnobs, TimedEvent};
use super::peers::{Peers, Pending, Router, Ticket};
use crate::Error;
use crate::net::{Identity, Transport};

/// How long a root waits, once its job is done, for its nodes to acknowledge its last
/// messages before it closes its endpoint.
pub(crate) const DRAIN_BOUND: Duration = Duration::from_secs(2);

/// Where and as whom the root listens.
pub(crate) struct RootEndpoint {
    /// The login node's credentials.
    pub identity: Identity,
    /// Where to bind (port 0 for any).
    pub listen: SocketAddr,
    /// How nodes reach the root (`host:port`; port 0 means the bound port); default: the
    /// root's host name and the bound port.
    pub advertise: Option<String>,
}

/// What the root's job carries.
pub(crate) struct RootJob {
    /// The index (empty for a probe).
    pub index: Arc<Index>,
    /// Its id.
    pub index_id: IndexId,
    /// Where chunks are served from.
    pub bytes: Arc<dyn seeder::ChunkStore>,
    /// Per-job knobs.
    pub knobs: JobKnobs,
}

/// Routes the messages of a root's one job to it, and keeps why each of the root's own
/// peers could not be reached (for the push's report).
struct RootRouter(
    Arc<JobCore>,
    std::sync::Mutex<std::collections::HashMap<String, String>>,
);

impl Router for RootRouter {
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed, order: Ticket) -> Option<Pending> {
        if job != self.0.job {
            return None;
        }
        match msg {
            Routed::Relay(m) => self.0.on_relay_msg(from_host, m),
            Routed::Chunk { chunk, data, .. } => {
                return self.0.on_chunk_msg(from_host, chunk, data, order).pending();
            }
            // Nobody starts or prepares a job at its root, or asks a root for a record.
            Routed::Start(_)
            | Routed::Prepare(_)
            | Routed::AskRecord { .. }
            | Routed::Record { .. } => {
                tracing::warn!(peer = %from_host, "a message for a node's daemon sent to the root; ignored")
            }
        }
        None
    }
    fn unreachable(&self, host: &str, why: &str) {
        self.1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(host.to_owned(), why.to_owned());
        self.0.on_unreachable(host);
    }
}

/// A running root.
pub(crate) struct RootSession {
    /// When the session started; event times are measured from here.
    pub start: Instant,
    core: Arc<JobCore>,
    peers: Arc<Peers>,
    events: mpsc::UnboundedReceiver<TimedEvent>,
    // Kept alive for as long as the session: the connection manager holds it weakly.
    router: Arc<RootRouter>,
}

impl RootSession {
    /// Binds the endpoint, puts the root's advertised address into `nodes[0]`, builds the
    /// root relay with `relay(nodes, start)` and starts it.
    pub fn open(
        endpoint: &RootEndpoint,
        mut nodes: Vec<NodeInfo>,
        job: RootJob,
        relay: impl FnOnce(Vec<NodeInfo>, Instant) -> Result<Relay, peertree::Error>,
    ) -> Result<RootSession, Error> {
        let start = Instant::now();
        let transport = Transport::bind(endpoint.listen, &endpoint.identity)?;
        let bound = transport.local_addr();
        if let Some(root) = nodes.first_mut() {
            root.addr = super::advertised(endpoint.advertise.as_deref(), &root.host, bound);
        }
        let peers = Peers::new(transport);
        let relay = relay(nodes.clone(), start)?;
        let (core, events) = JobCore::new(
            relay,
            job.index,
            job.index_id,
            peers.clone(),
            job.bytes,
            &nodes,
            job.knobs,
        );
        let router = Arc::new(RootRouter(core.clone(), Default::default()));
        let dyn_router: Arc<dyn Router> = router.clone();
        peers.set_router(Arc::downgrade(&dyn_router));
        tokio::spawn(peers.clone().accept_loop());
        core.start();
        Ok(RootSession {
            start,
            core,
            peers,
            events,
            router,
        })
    }

    /// Why the root could not reach each of its peers it failed to connect to, by host.
    pub(crate) fn connect_errors(&self) -> std::collections::HashMap<String, String> {
        self.router
            .1
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The job's shared state (counters, the relay).
    pub fn core(&self) -> &Arc<JobCore> {
        &self.core
    }

    /// The next event with its time in seconds since the start, or `None` once `until`
    /// has passed.
    pub(crate) async fn next_event(&mut self, until: tokio::time::Instant) -> Option<(f64, Event)> {
        let (at, ev) = tokio::select! {
            e = self.events.recv() => e?,
            _ = tokio::time::sleep_until(until) => return None,
        };
        Some((at.saturating_duration_since(self.start).as_secs_f64(), ev))
    }

    /// An event already queued, if any (the facts that came with the last one).
    pub(crate) fn queued_event(&mut self) -> Option<(f64, Event)> {
        let (at, ev) = self.events.try_recv().ok()?;
        Some((at.saturating_duration_since(self.start).as_secs_f64(), ev))
    }

    /// The push failed before its job started: every node the tree reaches drops the job
    /// ([`peertree::relay::Msg::Release`]). Returns once the release is on its way to the
    /// root's children; [`RootSession::close`] with `drain` then waits for it to arrive.
    pub async fn release(&self) {
        self.core.release(DRAIN_BOUND).await;
    }

    /// Ends the session. With `drain`, first waits (at most [`DRAIN_BOUND`]) until the
    /// nodes have acknowledged the root's last messages (`Finished`), so they drop the job
    /// at once instead of at their deadline.
    pub async fn close(self, drain: bool) {
        self.core.close();
        if drain {
            self.peers.drain(DRAIN_BOUND).await;
        }
        self.peers.close();
    }
}

//! The distribution side of teesfs over real networks.
//!
//! - [`peers`]: QUIC connections to other nodes, shared by all jobs, frames in and out.
//! - [`crls`]: the cluster's revocation list passed on to every peer a process connects
//!   to, and installed by daemons when it is newer than theirs.
//! - [`job`]: one job's relay plus the glue that turns its decisions into traffic.
//! - [`store`]: the node's budgeted, content-addressed chunk store.
//! - [`admit`]: whether a node takes a job a parent offers (pure checks of the `Start`).
//! - [`daemon`]: `teesfs daemon`: accepts jobs from parents, mounts them, serves children.
//! - [`control`]: the daemon's control requests and who may make them.
//! - [`root`]: the login node as the root of one job's tree (one session for push and probe).
//! - [`push`]: a push: the root over the login node's store, and its report.
//! - [`root_store`]: the root's reads from that store, checked, and the chunks it cannot
//!   deliver named.
//! - [`handover`]: a push that returns at the urgent set while a background copy streams
//!   the rest.
//! - [`report`]: the push report (documented JSON).
//! - [`metrics`]: the daemon's Prometheus metrics and their HTTP endpoint.
//! - [`accept`]: the back-off the daemon's accept loops share when `accept` keeps failing.
//! - [`health`]: `teesfs health`, an empty broadcast measuring every edge (documented JSON).
//! - [`learn`]: `teesfs learn`, asking a finished job's nodes for their records of it.
//!
//! All protocol decisions are made by `peertree::relay`; this module only moves bytes.

pub mod accept;
pub mod admit;
pub mod control;
pub mod crls;
pub mod daemon;
pub mod handover;
pub mod health;
pub mod job;
pub mod learn;
pub mod metrics;
pub mod peers;
pub mod push;
pub use pushreport::format as report;
pub mod root;
pub mod root_store;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use peertree::relay::ChunkNo;

use crate::source::{ChunkFuture, ChunkSource};
use job::JobCore;

/// A job id no other push or probe uses: a hash of `what` (the index id, or the kind of
/// probe), this process and the time. Slurm jobs use their own id instead.
pub fn fresh_job_id(what: &[u8]) -> peertree::relay::JobId {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = blake3::Hasher::new();
    h.update(what);
    h.update(&std::process::id().to_be_bytes());
    h.update(&nanos.to_be_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&h.finalize().as_bytes()[..8]);
    // The top bit set: never a Slurm job's (32-bit) number, so it shows as 16 hex digits.
    peertree::relay::JobId(u64::from_be_bytes(id) | 1 << 63)
}

/// The address a root gives its nodes: `advertise` (port 0 there means the port the root
/// bound), else its host name with the bound port, else the bound address itself.
pub fn advertised(advertise: Option<&str>, host: &str, bound: SocketAddr) -> String {
    match advertise {
        Some(a) => match a.rsplit_once(':') {
            Some((h, "0")) => format!("{h}:{}", bound.port()),
            _ => a.to_string(),
        },
        None if bound.ip().is_unspecified() => format!("{host}:{}", bound.port()),
        None => bound.to_string(),
    }
}

/// Chunks for a mounted job: from the node's store, or from the tree on demand.
pub struct JobSource {
    core: Arc<JobCore>,
    /// The node's store, which the job keeps its chunks in: always on this node (memory
    /// or local disk), so a reader may read it on its own thread.
    store: Arc<dyn seeder::ChunkStore>,
}

impl JobSource {
    /// Chunks of `core`'s job, held in `store` (the store the job writes them to).
    pub fn new(core: Arc<JobCore>, store: Arc<dyn seeder::ChunkStore>) -> Self {
        Self { core, store }
    }
}

impl ChunkSource for JobSource {
    fn fetch(&self, at: ChunkNo) -> ChunkFuture {
        let core = self.core.clone();
        Box::pin(async move { core.want(at).await })
    }

    fn is_local(&self, at: ChunkNo) -> bool {
        self.core.has(at)
    }

    fn fetch_local(&self, at: ChunkNo) -> Option<Result<crate::source::Fetched, crate::Error>> {
        use crate::source::Fetched;
        use seeder::StoredChunk;
        // Checked bytes from memory are decoded without hashing them again; bytes read
        // from a file are verified by the reader, as `JobCore::want` hands them out.
        let chunk = match crate::source::chunk_info(&self.core.index.chunks, at) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(match self.store.get(&chunk.id)? {
            StoredChunk::Checked(c) => match c.plain() {
                Ok(plain) => Fetched::Verified(plain),
                Err(_) => Fetched::Stored(c.stored().clone()),
            },
            StoredChunk::Unchecked(b) => Fetched::Stored(b),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::advertised;

    #[test]
    fn a_root_advertises_the_port_it_bound_not_the_daemons_port() {
        let bound = "0.0.0.0:40123".parse().expect("addr");
        assert_eq!(
            advertised(Some("10.0.0.1:0"), "login", bound),
            "10.0.0.1:40123"
        );
        assert_eq!(
            advertised(Some("10.0.0.1:9000"), "login", bound),
            "10.0.0.1:9000"
        );
        assert_eq!(advertised(None, "login", bound), "login:40123");
        let bound = "10.0.0.1:40123".parse().expect("addr");
        assert_eq!(advertised(None, "login", bound), "10.0.0.1:40123");
    }
}

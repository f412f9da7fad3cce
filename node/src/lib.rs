//! The node side of teesfs: the read-only layer filesystem and where its chunks come from.
//!
//! - [`fs`]: the FUSE filesystem (pure tree, content layer, thin fuser adapter, mounting).
//! - [`source`]: the [`source::ChunkSource`] interface and the local-store source.
//! - [`net`]: QUIC transport with mutual TLS between cluster nodes.
//! - The daemon and the push root over real networks (all protocol decisions are made by
//!   `peertree::relay`; these only move bytes):
//!   - [`peers`]: QUIC connections to other nodes, shared by all jobs, frames in and out.
//!   - [`reorder`]: a stream's chunks at work in parallel, handed to the relay in order.
//!   - [`bulk_gate`]: pushed chunks yield a daemon's CPU quota to the applications on its
//!     mounts.
//!   - [`crls`]: the cluster's revocation list passed on to every peer a process connects
//!     to, and installed by daemons when it is newer than theirs.
//!   - [`job`]: one job's relay plus the glue that turns its decisions into traffic.
//!   - [`store`]: the node's budgeted, content-addressed chunk store; `placed`: its raw
//!     chunks kept where a copy made ahead wrote them.
//!   - [`admit`]: whether a node takes a job a parent offers (pure checks of the `Start`).
//!   - [`keeper`] (its own crate, re-exported): `teesfs keep-fds`, which holds the jobs'
//!     FUSE connections while a daemon restarts, and the serving of a live connection.
//!   - [`daemon`]: `teesfs daemon`: accepts jobs from parents, mounts them, serves children.
//!   - [`control`]: the daemon's control requests and who may make them.
//!   - [`root`]: the login node as the root of one job's tree (one session for push and
//!     probe).
//!   - [`push`]: a push: the root over the login node's store, and its report.
//!   - [`root_store`]: the root's reads from that store, checked, and the chunks it cannot
//!     deliver named.
//!   - [`handover`]: a push that returns at the urgent set while a background copy streams
//!     the rest.
//!   - [`metrics`]: the daemon's Prometheus metrics and their HTTP endpoint.
//!   - [`accept`]: the back-off the daemon's accept loops share when `accept` keeps failing.
//!   - [`health`]: `teesfs health`, an empty broadcast measuring every edge (documented
//!     JSON).
//!   - [`learn`]: `teesfs learn`, asking a finished job's nodes for their records of it.
//! - [`report`]: the push report's format and its bounded reader (the `pushreport` crate,
//!   re-exported; its drawing, the feature `draw`, is the binary's, not linked here).
//! - [`output`]: the JSON documents of the store commands (`--format json`), defined in the
//!   report crate (`pushreport::output`) and re-exported.
//! - [`say`]: best-effort stdout and stderr for the commands (never panics on a full log).
//! - [`site`]: reading the site configuration (`/etc/teesfs/teesfs.toml` and drop-ins).
//! - [`handoff`]: the seeder's wire format (a Slurm prolog hands a job to `teesfs seeder`).
//! - [`sys`]: what the kernel reports (the mount table), parsed in one place.
//!
//! The CLI in `main.rs` is a thin shell over this library and the `manifest`, `seeder` and
//! `peertree` crates.

pub mod accept;
pub mod admit;
pub mod bulk_gate;
pub mod control;
pub(crate) mod crls;
pub mod daemon;
pub mod fs;
pub mod handoff;
pub mod handover;
pub mod health;
pub mod job;
pub use keeper;
pub mod learn;
pub mod metrics;
pub mod net;
pub mod peers;
pub(crate) mod placed;
pub mod push;
pub mod rates_probe;
pub mod reorder;
pub use pushreport as report;
pub use pushreport::output;
pub mod root;
pub(crate) mod root_store;
pub mod say;
pub mod site;
pub mod source;
pub mod store;
pub(crate) mod sync;
pub mod sys;

use std::net::SocketAddr;

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
pub(crate) fn advertised(advertise: Option<&str>, host: &str, bound: SocketAddr) -> String {
    match advertise {
        Some(a) => match a.rsplit_once(':') {
            Some((h, "0")) => format!("{h}:{}", bound.port()),
            _ => a.to_string(),
        },
        None if bound.ip().is_unspecified() => format!("{host}:{}", bound.port()),
        None => bound.to_string(),
    }
}

/// Errors of the node-side library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Mounting or unmounting failed.
    #[error("cannot mount at {mountpoint}: {source}")]
    Mount {
        /// The mountpoint.
        mountpoint: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An index or chunk problem.
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    /// A store problem.
    #[error(transparent)]
    Store(#[from] seeder::Error),
    /// A network or TLS problem.
    #[error("network: {0}")]
    Net(#[from] net::NetError),
    /// A job offered to this node names another node first.
    #[error("it was meant for {meant:?}, this node is {me:?}")]
    NotForThisNode {
        /// The node the job's `Start` names first.
        meant: Option<String>,
        /// This node.
        me: String,
    },
    /// A job offered to this node carries an index revoked here.
    #[error(
        "its index {0} is revoked on this node (listed in the daemon's --revoked file): publish \
         the layer again and push the new index"
    )]
    Revoked(manifest::IndexId),
    /// A job's index is signed by a key this node trusts only for other users' jobs.
    #[error(
        "its index is signed by publisher key {key}, which this node trusts only for jobs of \
         uid {allowed}, and the job's owner is {owner}: sign the layer with the owner's own key \
         (or a site key), or push it as its owner (`push --owner UID`)"
    )]
    KeyNotForOwner {
        /// The publisher key (hex).
        key: String,
        /// The uids it signs for, comma-separated.
        allowed: String,
        /// The job's owner as the push named it (`uid N`, or `not named`).
        owner: String,
    },
    /// A job offered to this node did not come from the parent it names.
    #[error("it did not come from the parent it names (it came from {from:?})")]
    WrongParent {
        /// The host (from its certificate) that sent it.
        from: String,
    },
    /// A chunk number beyond the index's chunk table.
    #[error("there is no chunk {chunk}: the index has {chunks} chunks")]
    NoSuchChunk {
        /// The chunk asked for.
        chunk: peertree::relay::ChunkNo,
        /// How many chunks the index has.
        chunks: usize,
    },
    /// The job ended while a reader waited for one of its chunks.
    #[error("job closed while waiting for a chunk")]
    JobClosed,
    /// No source could give a chunk: the parent, the other nodes asked and the origin
    /// store (if the site names one) all lack it or cannot be reached.
    #[error(
        "no source could give chunk {chunk} (asked: {tried}); reads of it fail until a source \
         comes back: check the node's parent with `teesfs status`, or set the origin store \
         (`[store] origin` in teesfs.toml, `teesfs daemon --origin`)"
    )]
    Unobtainable {
        /// The chunk's id (short form).
        chunk: String,
        /// The sources asked, in order.
        tried: String,
    },
    /// A worker task (a blocking store read) failed.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A kept job's record (`<state-dir>/kept`) cannot be used.
    #[error("{0}")]
    KeptRecord(String),
    /// Keeping a job across restarts failed (the keeper, a record).
    #[error(transparent)]
    Keeper(#[from] keeper::Error),
    /// A system call or file operation of the execution environment failed.
    #[error("{what}")]
    Sys {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A request for an execution environment that cannot be carried out (what to do is in
    /// the message).
    #[error("{0}")]
    InvalidRun(String),
    /// A plan, push order or protocol message that the relay refuses.
    #[error(transparent)]
    Protocol(#[from] peertree::Error),
    /// The daemon's state directory cannot be used (locked by another daemon, unwritable).
    #[error("state directory {}: {problem}", dir.display())]
    StateDir {
        /// The directory.
        dir: std::path::PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// A trusted key, a directory of user-bound keys or the revoked list cannot be used.
    #[error("{}: {problem}", path.display())]
    Trust {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// No trusted publisher key was given or found where the defaults look.
    #[error(
        "no trusted publisher keys: pass --trust FILE.pub, or run `teesfs keygen` (its \
         publisher.pub is trusted by default), or put keys in {}/trusted/",
        config_dir.display()
    )]
    NoTrustedKeys {
        /// The user's configuration directory.
        config_dir: std::path::PathBuf,
    },
    /// A site configuration file cannot be read.
    #[error("cannot read the site configuration {}: {source}", path.display())]
    SiteConfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory for passthrough copies cannot be used safely.
    #[error("passthrough copies directory {}: {problem}", dir.display())]
    CopiesDir {
        /// The directory.
        dir: std::path::PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// The metrics endpoint (`--metrics`) cannot listen at its address.
    #[error(
        "cannot serve metrics at {addr}: {source}; pick a free address for --metrics (port 0 lets the system choose)"
    )]
    MetricsListen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A `--metrics-allow` value is not an address or a network.
    #[error(
        "--metrics-allow {text:?}: {problem}; give an address or a network, e.g. 10.0.0.5 or 10.0.0.0/24"
    )]
    MetricsAllow {
        /// The value given.
        text: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A seeder request or reply that cannot be used.
    #[error("{part}: {problem}")]
    Handoff {
        /// The part that is wrong (`the request's spec_text`, `unmunge's UID`, ...).
        part: &'static str,
        /// What is wrong with it, and what to do.
        problem: String,
    },
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

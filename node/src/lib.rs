//! The node side of teesfs: the read-only layer filesystem and where its chunks come from.
//!
//! - [`fs`]: the FUSE filesystem (pure tree, content layer, thin fuser adapter, mounting).
//! - [`source`]: the [`source::ChunkSource`] interface and the local-store source.
//! - [`net`]: QUIC transport with mutual TLS between cluster nodes.
//! - [`node`]: the node daemon and the push root: jobs, relay driving, chunk store.
//! - [`report`]: the push report's format and its bounded reader (the `pushreport` crate,
//!   re-exported; its drawing, the feature `draw`, is the binary's, not linked here).
//! - [`output`]: the JSON documents of the store commands (`--format json`), defined in the
//!   report crate (`pushreport::output`) and re-exported.
//! - [`say`]: best-effort stdout and stderr for the commands (never panics on a full log).
//! - [`site`]: reading the site configuration (`/etc/teesfs/teesfs.toml` and drop-ins).
//! - [`sys`]: what the kernel reports (the mount table), parsed in one place.
//!
//! The CLI in `main.rs` is a thin shell over this library and the `manifest`, `seeder` and
//! `peertree` crates.

pub mod fs;
pub mod net;
pub mod node;
pub use pushreport as report;
pub use pushreport::output;
pub mod say;
pub mod site;
pub mod source;
pub(crate) mod sync;
pub mod sys;

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
    /// A worker task (a blocking store read) failed.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
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
}

//! QUIC transport between cluster nodes, with mandatory mutual TLS.
//!
//! - [`pki`]: issuing cluster credentials. [`make_cluster`] writes a cluster CA and one
//!   certificate and key per host (the host name is the certificate's only subject alternative
//!   name); [`revoke`] lists hosts' certificates in the cluster's revocation list.
//! - [`crl`]: the revocation list as nodes pass it on: whether one received may replace the
//!   one held (signed by the cluster CA, a greater CRL number, not past its next update).
//! - [`tls`]: verifying them. [`Identity`] loads one node's credentials, checks them before
//!   any socket exists, and holds the rustls configurations that refuse peers from another
//!   CA, under another name, outside their validity period or revoked. Their clock is the
//!   system's unless a test injects one ([`Identity::with_clock`], [`Identity::load_at`]).
//! - [`transport`]: [`Transport`], a quinn endpoint that is server and client at once, and
//!   [`Conn`], one authenticated connection whose peer name comes from its verified
//!   certificate.
//! - [`stream`]: unidirectional streams tagged with a [`StreamKind`] that carry
//!   length-prefixed frames ([`FrameSender`], [`FrameReceiver`]). Demand streams are sent
//!   before control streams, control before bulk, so a blocked read never waits behind a push.
//!
//! This layer moves opaque frames between authenticated peers. It does not know the relay
//! protocol's messages (those are `peertree::relay`), keeps no job state and never retries:
//! deciding what a lost connection means is the daemon's business.

pub mod crl;
pub mod csr;
pub mod pki;
pub mod stream;
pub mod tls;
pub mod transport;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use csr::{make_request, sign_request};
pub use pki::{make_cluster, make_cluster_valid_for, revoke};
pub use stream::{FrameReceiver, StreamKind};
pub use tls::{Identity, hardware_aes, suite_order};
pub(crate) use transport::CONNECT_TIMEOUT;
pub use transport::{Conn, Transport};

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Reading or writing a credential file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A credential file is missing, malformed, or does not belong to this cluster or host.
    #[error("{}: {reason}", path.display())]
    Credential {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A revocation list from a peer (or `crl.pem`) that cannot be used: corrupt, too large,
    /// or not issued and signed by this cluster's CA.
    #[error("revocation list refused: {0}")]
    BadCrl(String),
    /// A host name that cannot name a certificate (or a credential file).
    #[error("invalid host name {0:?}: use letters, digits, '-', '.' and '_'")]
    BadHost(String),
    /// Generating a key or certificate failed.
    #[error("cannot generate a certificate: {0}")]
    CertGen(#[from] rcgen::Error),
    /// rustls refused the TLS configuration built from the credentials.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Binding the UDP socket failed.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The endpoint could not start a connection attempt at all.
    #[error("cannot connect to {addr}: {source}")]
    Endpoint {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: quinn::ConnectError,
    },
    /// The connection attempt failed for a reason other than a refused certificate.
    #[error("cannot connect to {host} at {addr}: {source}")]
    Connect {
        /// The address dialled.
        addr: SocketAddr,
        /// The host name the peer's certificate had to carry.
        host: String,
        /// The underlying error.
        source: quinn::ConnectionError,
    },
    /// The peer did not complete the handshake within [`CONNECT_TIMEOUT`].
    #[error("no answer from {host} at {addr} within {CONNECT_TIMEOUT:?}")]
    Timeout {
        /// The address dialled.
        addr: SocketAddr,
        /// The host name the peer's certificate had to carry.
        host: String,
    },
    /// The TLS handshake failed: one side did not accept the other's certificate (another
    /// cluster's CA, the wrong host name) or protocol. The message says which side refused.
    #[error("{0}")]
    PeerRefused(String),
    /// A frame longer than `peertree::relay::MAX_MESSAGE` was sent or announced.
    #[error("frame of {0} bytes exceeds the {max}-byte limit", max = peertree::relay::MAX_MESSAGE)]
    FrameTooLarge(usize),
    /// The stream ended in the middle of a frame.
    #[error("stream ended after {got} of {expected} bytes of a frame")]
    Truncated {
        /// Bytes the frame (or its length prefix) should have had.
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// The connection is closed or was lost.
    #[error("connection lost: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// Writing to a stream failed (connection lost, or the peer stopped the stream).
    #[error("cannot write: {0}")]
    Write(#[from] quinn::WriteError),
    /// Reading from a stream failed (connection lost, or the peer reset the stream).
    #[error("cannot read: {0}")]
    Read(#[from] quinn::ReadError),
    /// The endpoint was closed.
    #[error("the endpoint is closed")]
    Closed,
    /// A peer's address could not be resolved.
    #[error("cannot resolve {addr}: {source}")]
    Resolve {
        /// The address as given (`host:port`).
        addr: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// A peer's address resolved to nothing.
    #[error("{0} resolves to no address")]
    NoAddress(String),
    /// A connection attempt that several senders waited on failed (the same error, shared).
    #[error("{0}")]
    Shared(std::sync::Arc<NetError>),
    /// The connection attempt was abandoned before it finished (the link was replaced).
    #[error("connection attempt abandoned")]
    Abandoned,
    /// A frame shorter than its job id.
    #[error("frame of {0} bytes is shorter than its 8-byte job id")]
    ShortFrame(usize),
    /// A frame whose message does not decode.
    #[error("malformed message: {0}")]
    Message(#[from] peertree::Error),
}

//! The QUIC endpoint ([`Transport`]) and one authenticated connection ([`Conn`]).
//!
//! Every endpoint is server and client at once and both directions use mutual TLS against the
//! cluster CA: a peer without a certificate from that CA is refused inside the handshake, and
//! a connection's peer name is read from its verified certificate, never from anything the
//! peer says.
//!
//! In QUIC the client finishes its side of the handshake before the server has checked the
//! client's certificate, so a successful handshake alone would not tell the client it was
//! accepted. The server therefore opens one internal "hello" stream on every connection it
//! accepts, and [`Transport::connect`] returns only once that stream arrives. A client refused
//! by the server gets [`NetError::PeerRefused`] from `connect`, not a connection that dies
//! moments later. It costs half a round trip per connection, and connections live for a job.
//!
//! The transport parameters are tuned for a few long-lived connections per node carrying
//! 1 MiB chunk frames at high bandwidth: large flow-control windows, keep-alive, a long idle
//! timeout. This module has no notion of jobs or retries.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ConnectionError, Endpoint, VarInt};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::{Instrument as _, debug, info_span, warn};

use super::NetError;
pub(crate) use super::stream::FrameSender;
pub use super::stream::{FrameReceiver, StreamKind};
use super::stream::{HELLO_TAG, Tagged};
use super::tls::{Identity, cert_names, cert_serial};

/// How long [`Transport::connect`] waits for a peer to complete the handshake and accept us.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection with no packets for this long is closed. There are no QUIC keep-alives: a
/// job's relay sends its own heartbeats over its connections while it runs (and judges
/// liveness on them and on the acknowledgements they draw, `Peers::heard_from`), and a
/// connection no job uses any more must go, or a daemon that runs thousands of jobs keeps
/// every connection it ever made (each job starts on fresh ones; see the soak, `teesfs lab
/// soak`). A message for a peer whose connection closed opens a new one. So a job's bulk
/// stream must share its connection with the job's heartbeats: alone on a connection it
/// fell silent while a push held the rest of the layer back, and this timeout closed it
/// (issue 28; a node answers its parent on the connection its `Start` came on).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest per-stream receive window: several 1 MiB chunk frames in flight per stream.
const STREAM_WINDOW: u32 = 16 << 20;
/// Packets of one stream quinn's receive assembler may hold before it compacts them: past
/// 2 x 1024 buffered pieces (quinn-proto 0.11) it copies everything buffered into one
/// buffer, and again as more arrives. A receiver that verifies and stores chunks falls
/// behind the network now and then; with a 16 MiB window of 6.5 KB packets that compaction
/// was 27% of a daemon's CPU in a 256 MiB push (`perf`, issue 16). A stream's window is kept
/// below this many of the path's packets, so flow control holds the sender back instead.
/// The packets counted are this host's for the path: a peer sending smaller ones (after a
/// black hole, or on an asymmetric path) can still trigger the compaction, which costs CPU,
/// not correctness. The threshold is quinn-proto 0.11's (0.11.19 in Cargo.lock); check it
/// when quinn is upgraded.
const ASSEMBLER_PACKETS: u32 = 1900;
/// Per-connection receive window and send buffer: enough for a bandwidth-delay product well
/// beyond any cluster link, with streams of every kind active at once.
const CONNECTION_WINDOW: u32 = 64 << 20;
/// Concurrent unidirectional streams a peer may open (bidirectional streams are unused).
const MAX_UNI_STREAMS: u32 = 256;
/// Congestion window of a new connection, in bytes: one 1 MiB chunk frame in packets of any
/// size. quinn's default (14,720 bytes, two or three packets) makes the first chunk on a
/// connection crawl through slow start, and with an odd packet in flight the receiver holds
/// its acknowledgement for up to 25 ms: on loopback the first cold read of a 1 MiB file cost
/// 27-33 ms more per tree edge than the next ones (5 / 9 / 11 ms at depth 1 / 2 / 3 became
/// 32 / 43 / 43 ms, and 65-103 ms when one read crossed three fresh edges), and with this
/// window 7 / 9 / 11 ms (`scripts/bench-dist.sh`, issue 16). Every job starts on fresh
/// connections, so this is the first urgent chunk of every edge of every job. Bulk streams
/// are paced by plan on top of quinn's own pacing.
const INITIAL_WINDOW: u64 = 1_250_000;
/// Requested UDP socket buffer size, each direction.
const SOCKET_BUFFER: usize = 8 << 20;
/// Handshaken connections waiting for `accept`; more make handshakes wait.
const ACCEPT_BACKLOG: usize = 64;

/// Largest UDP payload this endpoint sends or accepts. A packet costs the kernel and QUIC
/// about the same whatever its size, so bigger packets are less CPU per byte. The cap is
/// quinn's batching: it hands up to 10 packets to one GSO send, and Linux takes at most
/// 64 KiB per send, so with bigger packets whole batches fail and look like loss (measured
/// with 8952-byte packets on loopback: 360 packets lost in a 256 MiB transfer, a black hole
/// declared, every packet back at 1200 bytes).
const MAX_UDP_PAYLOAD: u16 = 6_500;
/// The UDP payload every QUIC path carries (quinn's default start).
const MIN_UDP_PAYLOAD: u16 = 1_200;

/// Application close code for an orderly close.
const CLOSE_NORMAL: u32 = 0;

/// A QUIC endpoint that is both server and client, with mandatory mutual TLS: peers must
/// present a certificate from the same cluster CA; anything else is refused during the
/// handshake. Cheap to clone; all clones share one socket.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    /// The client side of the current credentials (replaced by [`Transport::reload`]).
    client: std::sync::Mutex<quinn::ClientConfig>,
    /// The server side of the current credentials, shared with the accept task.
    server: ServerShared,
    /// The revocation list of the current credentials (DER), passed on to peers.
    crl: std::sync::Mutex<Option<bytes::Bytes>>,
    local_addr: SocketAddr,
    host: String,
    /// Connections whose handshake succeeded, from the accept task.
    accepted: Mutex<mpsc::Receiver<Conn>>,
    /// Dropped with the last `Transport` clone, which ends the accept task.
    _stop: oneshot::Sender<()>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("host", &self.inner.host)
            .field("local_addr", &self.inner.local_addr)
            .finish()
    }
}

/// The server configuration incoming connections are accepted with (per path, [`for_path`]).
type ServerShared = Arc<std::sync::Mutex<quinn::ServerConfig>>;

/// The QUIC server and client configurations of `id`, for paths of the smallest UDP
/// payload (each connection gets its path's with [`for_path`]).
fn quic_configs(id: &Identity) -> (quinn::ServerConfig, quinn::ClientConfig) {
    let transport = Arc::new(transport_config(MIN_UDP_PAYLOAD));
    let server_crypto = QuicServerConfig::try_from(id.server.clone())
        .expect("the ring provider has TLS 1.3 and the QUIC initial cipher suite");
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
    server.transport_config(transport.clone());
    let client_crypto = QuicClientConfig::try_from(id.client.clone())
        .expect("the ring provider has TLS 1.3 and the QUIC initial cipher suite");
    let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
    client.transport_config(transport);
    (server, client)
}

/// The transport parameters for a connection from `local` to `remote`.
fn for_path(local: SocketAddr, remote: SocketAddr) -> Arc<quinn::TransportConfig> {
    let payload = path_payload(local, remote);
    debug!(%remote, payload, "UDP payload of the path");
    Arc::new(transport_config(payload))
}

/// The largest UDP payload the kernel expects to carry from `local` to `remote` without
/// fragmenting: its route's MTU (the interface's, or what ICMP has taught it) less the IPv4
/// and UDP headers, within [`MIN_UDP_PAYLOAD`]..=[`MAX_UDP_PAYLOAD`]. IPv6 paths and any
/// failure to ask give the minimum.
fn path_payload(local: SocketAddr, remote: SocketAddr) -> u16 {
    if !remote.is_ipv4() {
        return MIN_UDP_PAYLOAD;
    }
    let ask = || -> std::io::Result<i32> {
        let probe = std::net::UdpSocket::bind(SocketAddr::new(local.ip(), 0))?;
        probe.connect(remote)?;
        nix::sys::socket::getsockopt(&probe, nix::sys::socket::sockopt::IpMtu)
            .map_err(std::io::Error::from)
    };
    match ask() {
        Ok(mtu) => u16::try_from(mtu.saturating_sub(28).max(0))
            .unwrap_or(u16::MAX)
            .clamp(MIN_UDP_PAYLOAD, MAX_UDP_PAYLOAD),
        Err(e) => {
            debug!(%remote, "cannot ask the kernel for the path MTU: {e}");
            MIN_UDP_PAYLOAD
        }
    }
}

impl Transport {
    /// Binds a UDP socket at `addr` (port 0 picks one) and starts accepting connections in the
    /// background. Must be called inside a tokio runtime.
    pub fn bind(addr: SocketAddr, id: &Identity) -> Result<Transport, NetError> {
        let (server, client) = quic_configs(id);

        let bind_err = |source| NetError::Bind { addr, source };
        let runtime = quinn::default_runtime()
            .ok_or_else(|| bind_err(std::io::Error::other("not inside a tokio runtime")))?;
        let socket = udp_socket(addr).map_err(bind_err)?;
        let mut config = quinn::EndpointConfig::default();
        // What this end accepts, told to peers: path MTU discovery never goes above the
        // peer's figure, and quinn's default (1472) would keep every packet at 1452 bytes.
        config
            .max_udp_payload_size(MAX_UDP_PAYLOAD)
            .expect("a payload size within QUIC's range");
        let endpoint =
            Endpoint::new(config, Some(server.clone()), socket, runtime).map_err(bind_err)?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|source| NetError::Bind { addr, source })?;

        let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
        let (stop_tx, stop_rx) = oneshot::channel();
        let span = info_span!("accept", host = %id.host, %local_addr);
        let server = Arc::new(std::sync::Mutex::new(server));
        tokio::spawn(
            accept_loop(endpoint.clone(), server.clone(), local_addr, tx, stop_rx).instrument(span),
        );

        Ok(Transport {
            inner: Arc::new(Inner {
                endpoint,
                client: std::sync::Mutex::new(client),
                server,
                crl: std::sync::Mutex::new(id.crl.clone()),
                local_addr,
                host: id.host.clone(),
                accepted: Mutex::new(rx),
                _stop: stop_tx,
            }),
        })
    }

    /// Uses `id` (new certificate, CA, CRL) for connections made from now on, both ways;
    /// connections already up keep theirs.
    pub fn reload(&self, id: &Identity) {
        *self
            .inner
            .crl
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = id.crl.clone();
        let (server, client) = quic_configs(id);
        self.inner.endpoint.set_server_config(Some(server.clone()));
        *self
            .inner
            .server
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = server;
        *self
            .inner
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
    }

    /// The revocation list (DER) new connections are verified against, if any.
    pub fn crl(&self) -> Option<bytes::Bytes> {
        self.inner
            .crl
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The address the endpoint is bound to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Connects to `addr`, verifying that the server's certificate is from the cluster CA and
    /// names `host`, and waits until the server has accepted our certificate in turn.
    ///
    /// Fails with [`NetError::PeerRefused`] if either side refuses the other's certificate,
    /// [`NetError::Timeout`] after [`CONNECT_TIMEOUT`] without an answer, and
    /// [`NetError::Connect`] for other connection failures.
    pub async fn connect(&self, addr: SocketAddr, host: &str) -> Result<Conn, NetError> {
        let mut config = self
            .inner
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        config.transport_config(for_path(self.inner.local_addr, addr));
        let connecting = self
            .inner
            .endpoint
            .connect_with(config, addr, host)
            .map_err(|e| match e {
                quinn::ConnectError::InvalidServerName(_) => NetError::BadHost(host.to_owned()),
                quinn::ConnectError::EndpointStopping => NetError::Closed,
                source => NetError::Endpoint { addr, source },
            })?;
        let refused = |e: ConnectionError| match refusal(&e) {
            Some(why) => {
                NetError::PeerRefused(format!("TLS handshake with {host} at {addr}: {why}"))
            }
            None => NetError::Connect {
                addr,
                host: host.to_owned(),
                source: e,
            },
        };
        let began = std::time::Instant::now();
        let mut tls_done = began;
        let handshake = async {
            let connection = connecting.await.map_err(refused)?;
            tls_done = std::time::Instant::now();
            let mut hello = connection.accept_uni().await.map_err(refused)?;
            let mut tag = [0u8; 1];
            match hello.read_exact(&mut tag).await {
                Ok(()) if tag[0] == HELLO_TAG => {}
                Err(quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(e))) => {
                    return Err(refused(e));
                }
                _ => {
                    connection.close(VarInt::from_u32(CLOSE_NORMAL), b"no hello");
                    return Err(NetError::PeerRefused(format!(
                        "{host} at {addr} did not greet us as a teesfs node"
                    )));
                }
            }
            Conn::new(connection)
        };
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
            .await
            .map_err(|_| NetError::Timeout {
                addr,
                host: host.to_owned(),
            })??;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        debug!(
            peer = %conn.peer_host(),
            %addr,
            tls_ms = ms(tls_done - began),
            hello_ms = ms(tls_done.elapsed()),
            "connected"
        );
        Ok(conn)
    }

    /// Next incoming connection whose handshake succeeded; `None` once the endpoint is closed.
    ///
    /// Handshakes run in the background, each on its own, so a slow or refused peer does not
    /// hold up others; refusals are logged at warn level and never end the accept loop.
    pub async fn accept(&self) -> Option<Conn> {
        self.inner.accepted.lock().await.recv().await
    }

    /// Closes every connection of this endpoint at once and stops accepting.
    pub fn close(&self) {
        self.inner
            .endpoint
            .close(VarInt::from_u32(CLOSE_NORMAL), b"endpoint closed");
    }
}

/// A UDP socket with large kernel buffers. With the default (about 200 KiB) a burst at loopback
/// or 10+ Gbit/s speeds overflows the receive buffer, and every drop costs a congestion
/// event.
fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: the kernel silently caps these at net.core.{r,w}mem_max.
    for (what, result) in [
        ("receive", socket.set_recv_buffer_size(SOCKET_BUFFER)),
        ("send", socket.set_send_buffer_size(SOCKET_BUFFER)),
    ] {
        if let Err(e) = result {
            debug!("cannot enlarge the UDP {what} buffer: {e}");
        }
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Takes incoming connections off the endpoint and handshakes each in its own task.
async fn accept_loop(
    endpoint: Endpoint,
    server: ServerShared,
    local_addr: SocketAddr,
    tx: mpsc::Sender<Conn>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let incoming = tokio::select! {
            _ = &mut stop => return,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return,
            },
        };
        let remote = incoming.remote_address();
        let local = incoming
            .local_ip()
            .map_or(local_addr, |ip| SocketAddr::new(ip, 0));
        let mut config = server
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        config.transport_config(for_path(local, remote));
        let tx = tx.clone();
        tokio::spawn(
            async move {
                match handshake(incoming, Arc::new(config)).await {
                    Ok(conn) => {
                        debug!(peer = %conn.peer_host(), "accepted");
                        // Fails only when nobody will ever accept again; dropping the
                        // connection then closes it.
                        let _ = tx.send(conn).await;
                    }
                    Err(e) => warn!("refused incoming connection: {e}"),
                }
            }
            .instrument(info_span!("handshake", %remote)),
        );
    }
}

/// Server side of one handshake: TLS (which checks the client's certificate), then the hello
/// stream that tells the client it was accepted.
async fn handshake(
    incoming: quinn::Incoming,
    config: Arc<quinn::ServerConfig>,
) -> Result<Conn, NetError> {
    let remote = incoming.remote_address();
    let refused = |e: ConnectionError| match refusal(&e) {
        Some(why) => NetError::PeerRefused(format!("TLS handshake with {remote}: {why}")),
        None => NetError::Connection(e),
    };
    let connection = incoming
        .accept_with(config)
        .map_err(refused)?
        .await
        .map_err(refused)?;
    let conn = Conn::new(connection)?;
    let mut hello = conn.inner.open_uni().await?;
    hello.write_all(&[HELLO_TAG]).await?;
    // Fails only if the stream is already finished, which it is not.
    let _ = hello.finish();
    Ok(conn)
}

/// Explains a handshake failure that was a refusal (a TLS alert in either direction), or
/// `None` for other failures (timeouts, resets, a closed endpoint).
fn refusal(e: &ConnectionError) -> Option<String> {
    // QUIC carries TLS alerts as "crypto" transport error codes 0x100..=0x1ff.
    let is_crypto = |code: quinn::TransportErrorCode| (0x100..0x200).contains(&u64::from(code));
    match e {
        ConnectionError::TransportError(te) if is_crypto(te.code) => {
            Some(format!("we refused the peer: {}", te.reason))
        }
        ConnectionError::ConnectionClosed(close) if is_crypto(close.error_code) => {
            let reason = String::from_utf8_lossy(&close.reason);
            Some(format!(
                "the peer refused us: {} ({reason})",
                close.error_code
            ))
        }
        _ => None,
    }
}

/// A stream's receive window on a path of `payload`-byte UDP payloads: at most
/// [`ASSEMBLER_PACKETS`] packets of stream data, at most [`STREAM_WINDOW`]. Even on the
/// smallest (1200 bytes) that is two 1 MiB chunk frames.
fn stream_window(payload: u16) -> u32 {
    // A packet's stream data is its payload less QUIC's short header, frame header and tag.
    let data = u32::from(payload).saturating_sub(64);
    (ASSEMBLER_PACKETS * data).min(STREAM_WINDOW)
}

/// The transport parameters of a connection whose path carries UDP payloads of
/// `initial_mtu` bytes as far as this host knows ([`path_payload`]).
fn transport_config(initial_mtu: u16) -> quinn::TransportConfig {
    let mut config = quinn::TransportConfig::default();
    config
        .max_idle_timeout(Some(
            IDLE_TIMEOUT
                .try_into()
                .expect("60 s fits a QUIC idle timeout"),
        ))
        .keep_alive_interval(None)
        .stream_receive_window(VarInt::from_u32(stream_window(initial_mtu)))
        .receive_window(VarInt::from_u32(CONNECTION_WINDOW))
        .send_window(u64::from(CONNECTION_WINDOW))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .max_concurrent_bidi_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None);
    // Path MTU discovery alone never leaves 1200 bytes under a steady bulk stream (quinn
    // sends a probe only when it has nothing else to send), so start at the path's MTU as
    // the kernel knows it; if a hop beyond is narrower, quinn's black-hole detection falls
    // back to 1200 and discovery searches upward from there.
    config.initial_mtu(initial_mtu);
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(INITIAL_WINDOW);
    config.congestion_controller_factory(Arc::new(cubic));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_UDP_PAYLOAD);
    config.mtu_discovery_config(Some(mtu));
    config
}

/// What a connection's path carries ([`Conn::path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    /// Largest UDP payload sent now, in bytes.
    pub mtu: u16,
    /// UDP datagrams sent.
    pub sent: u64,
    /// Sends to the socket that carried them: fewer than `sent` when the kernel segments
    /// batches of datagrams (UDP GSO).
    pub sends: u64,
    /// UDP datagrams received.
    pub received: u64,
    /// Packets QUIC declared lost.
    pub lost: u64,
    /// Times QUIC decided that its packets were too big for the path and fell back to 1200
    /// bytes.
    pub black_holes: u64,
    /// Congestion window now, in bytes.
    pub cwnd: u64,
}

/// One authenticated connection to a peer. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Conn {
    inner: quinn::Connection,
    peer: Arc<str>,
    /// The serial number of the peer's certificate (raw DER integer bytes).
    serial: Arc<[u8]>,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.peer)
            .field("remote_addr", &self.inner.remote_address())
            .finish()
    }
}

impl Conn {
    /// Wraps a handshaken connection, naming the peer after its verified certificate.
    fn new(inner: quinn::Connection) -> Result<Conn, NetError> {
        let remote = inner.remote_address();
        let leaf = inner
            .peer_identity()
            .and_then(|id| {
                id.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                    .ok()
            })
            .and_then(|chain| chain.first().cloned());
        let names = leaf.as_ref().map(cert_names).unwrap_or_default();
        let serial = leaf.as_ref().map(cert_serial).unwrap_or_default();
        // Cluster certificates carry exactly one name; take the first if someone added more.
        let Some(peer) = names.into_iter().next() else {
            inner.close(VarInt::from_u32(CLOSE_NORMAL), b"certificate names no host");
            return Err(NetError::PeerRefused(format!(
                "the certificate of {remote} names no host"
            )));
        };
        Ok(Conn {
            inner,
            peer: peer.into(),
            serial: serial.into(),
        })
    }

    /// The peer's host name, taken from its verified certificate (not from anything it says).
    pub fn peer_host(&self) -> &str {
        &self.peer
    }

    /// The serial number of the peer's verified certificate (raw DER integer bytes), to
    /// tell whether a revocation list that arrives later lists it.
    pub(crate) fn peer_serial(&self) -> &[u8] {
        &self.serial
    }

    /// The peer's current UDP address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.inner.remote_address()
    }

    /// The largest UDP payload this connection sends now (path MTU discovery's result) and
    /// the UDP datagrams it has sent and received so far.
    pub fn path(&self) -> PathStats {
        let s = self.inner.stats();
        PathStats {
            mtu: s.path.current_mtu,
            sent: s.udp_tx.datagrams,
            sends: s.udp_tx.ios,
            received: s.udp_rx.datagrams,
            lost: s.path.lost_packets,
            black_holes: s.path.black_holes_detected,
            cwnd: s.path.cwnd,
        }
    }

    /// Opens a unidirectional stream of this kind (its first byte on the wire is the kind).
    /// Demand streams are sent before control streams, control before bulk.
    ///
    /// Waits if the peer's limit on concurrent streams is reached.
    pub async fn open(&self, kind: StreamKind) -> Result<FrameSender, NetError> {
        let stream = self.inner.open_uni().await?;
        FrameSender::start(stream, kind).await
    }

    /// Accepts the next unidirectional stream the peer opened.
    ///
    /// Streams with an unknown tag, or that end before their tag, are logged, stopped and
    /// skipped, so an error here always means the connection is gone.
    pub async fn accept_stream(&self) -> Result<(StreamKind, FrameReceiver), NetError> {
        loop {
            let stream = self.inner.accept_uni().await?;
            match FrameReceiver::start(stream).await? {
                Tagged::Kind(kind, receiver) => return Ok((kind, receiver)),
                Tagged::Unknown(tag, mut stream) => {
                    warn!(peer = %self.peer, tag, "skipping a stream of unknown kind");
                    let _ = stream.stop(VarInt::from_u32(CLOSE_NORMAL));
                }
                Tagged::Empty => debug!(peer = %self.peer, "skipping a stream without a tag"),
            }
        }
    }

    /// Resolves when the connection is closed or lost, with the reason (for failure
    /// detection).
    pub async fn closed(&self) -> String {
        self.inner.closed().await.to_string()
    }

    /// Whether the connection is closed or lost already.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.close_reason().is_some()
    }

    /// Closes the connection at once; data not yet acknowledged is abandoned (use
    /// [`FrameSender::finish`] first to make sure it arrived).
    pub fn close(&self) {
        self.inner.close(VarInt::from_u32(CLOSE_NORMAL), b"closed");
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;

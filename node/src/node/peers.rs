//! Connections to other nodes, shared by every job of a process: at most one QUIC
//! connection per peer endpoint (reused for the whole job and across jobs), control and demand
//! messages on their own streams so they never wait behind bulk chunks, and reader tasks
//! that hand every incoming frame to the [`Router`].
//!
//! A frame is the job id (8 bytes, big endian) followed by an encoded [`Msg`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use peertree::relay::{JobId, Msg, Routed};
use tokio::sync::{mpsc, watch};

use crate::net::{Conn, NetError, StreamKind, Transport};

/// Where incoming messages go.
pub trait Router: Send + Sync + 'static {
    /// A message for `job` from the peer whose certificate names `from_host`.
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed);
    /// `host` could not be reached at all.
    fn unreachable(&self, host: &str);
}

/// Encodes a frame.
pub fn frame(job: JobId, msg: &Msg) -> Vec<u8> {
    let body = msg.encode();
    let mut f = Vec::with_capacity(8 + body.len());
    f.extend_from_slice(&job.0.to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// A frame as its head (the job id) and its body (the encoded message), for
/// `FrameSender::send_parts`, which sends them without joining them.
pub fn frame_parts(job: JobId, msg: &Msg) -> ([u8; 8], Vec<u8>) {
    (job.0.to_be_bytes(), msg.encode())
}

/// Decodes a frame.
pub fn unframe(bytes: &[u8]) -> Result<(JobId, Msg), NetError> {
    let Some((head, body)) = bytes.split_first_chunk::<8>() else {
        return Err(NetError::ShortFrame(bytes.len()));
    };
    Ok((JobId(u64::from_be_bytes(*head)), Msg::decode(body)?))
}

/// The outcome of a connection attempt, once known (shared by every sender waiting on it).
type SharedConn = watch::Receiver<Option<Result<Conn, Arc<NetError>>>>;

async fn wait_conn(mut cell: SharedConn) -> Result<Conn, NetError> {
    match cell.wait_for(Option::is_some).await {
        Ok(v) => v
            .clone()
            .expect("wait_for returned a Some")
            .map_err(NetError::Shared),
        Err(_) => Err(NetError::Abandoned),
    }
}

/// Which peer process a link goes to: its certificate's host name and its UDP port. A host
/// runs one daemon, but a login node may run several pushes at once (two Slurm jobs'
/// prologs), each with its own endpoint; keyed by host alone, the newer push's connection
/// would take the older one's replies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LinkKey {
    host: String,
    /// The peer's port; 0 when its address names none (the link is then the host's only).
    port: u16,
}

impl LinkKey {
    /// The key of `host` listening at `addr` (`name:port`, `ip:port` or `[ip6]:port`).
    fn of(host: &str, addr: &str) -> LinkKey {
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0);
        LinkKey {
            host: host.to_string(),
            port,
        }
    }
}

struct Link {
    conn: SharedConn,
    control: mpsc::UnboundedSender<Vec<u8>>,
    demand: mpsc::UnboundedSender<Vec<u8>>,
    /// The control and demand sender tasks: each ends once its channel is closed and the
    /// peer has acknowledged everything it wrote.
    senders: Vec<tokio::task::JoinHandle<()>>,
}

/// The connection manager.
pub struct Peers {
    transport: Transport,
    links: Mutex<HashMap<LinkKey, Link>>,
    router: Mutex<Option<Weak<dyn Router>>>,
    rt: tokio::runtime::Handle,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn resolve(addr: &str) -> Result<SocketAddr, NetError> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|source| NetError::Resolve {
            addr: addr.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| NetError::NoAddress(addr.to_string()))
}

impl Peers {
    /// A manager over `transport`; call [`Peers::set_router`] before traffic flows.
    pub fn new(transport: Transport) -> Arc<Self> {
        Arc::new(Self {
            transport,
            links: Mutex::new(HashMap::new()),
            router: Mutex::new(None),
            rt: tokio::runtime::Handle::current(),
        })
    }

    /// Sets who receives incoming messages.
    pub fn set_router(&self, router: Weak<dyn Router>) {
        *lock(&self.router) = Some(router);
    }

    fn router(&self) -> Option<Arc<dyn Router>> {
        lock(&self.router).as_ref().and_then(Weak::upgrade)
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Accepts incoming connections until the transport closes.
    pub async fn accept_loop(self: Arc<Self>) {
        while let Some(conn) = self.transport.accept().await {
            let host = conn.peer_host().to_string();
            let key = LinkKey {
                host: host.clone(),
                port: conn.remote_addr().port(),
            };
            tracing::debug!(peer = %host, port = key.port, "accepted connection");
            // Use the peer's newest connection for our own sends; register it before
            // reading, so replies to its first message use it. An older link to the same
            // endpoint may be dead without our knowing yet (a `teesfs push` that exited, a
            // restarted daemon: no close frame, idle timeout not reached), and the peer
            // would never hear our replies on it.
            {
                let (tx, cell) = watch::channel(Some(Ok(conn.clone())));
                drop(tx);
                let link = self.start_link(&host, cell);
                lock(&self.links).insert(key, link);
            }
            self.spawn_readers(conn);
        }
    }

    fn spawn_readers(&self, conn: Conn) {
        let weak_router = lock(&self.router).clone();
        self.rt.spawn(async move {
            let host = conn.peer_host().to_string();
            loop {
                let (_kind, mut rx) = match conn.accept_stream().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(peer = %host, error = %e, "connection ended");
                        return;
                    }
                };
                let router = weak_router.clone();
                let host = host.clone();
                tokio::spawn(async move {
                    loop {
                        match rx.recv().await {
                            Ok(Some(bytes)) => match unframe(&bytes) {
                                Ok((job, msg)) => {
                                    if let Some(r) = router.as_ref().and_then(Weak::upgrade) {
                                        r.deliver(&host, job, msg.route());
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(peer = %host, error = %e, "dropping a malformed frame");
                                }
                            },
                            Ok(None) => return,
                            Err(e) => {
                                tracing::debug!(peer = %host, error = %e, "stream ended");
                                return;
                            }
                        }
                    }
                });
            }
        });
    }

    /// Starts the sender tasks of a link whose connection is (or will be) in `cell`.
    fn start_link(&self, host: &str, cell: SharedConn) -> Link {
        let (ctx, crx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (dtx, drx) = mpsc::unbounded_channel::<Vec<u8>>();
        let mut senders = Vec::with_capacity(2);
        for (kind, mut rx) in [(StreamKind::Control, crx), (StreamKind::Demand, drx)] {
            let cell = cell.clone();
            let host = host.to_string();
            senders.push(self.rt.spawn(async move {
                // Wait for the connection the link's creator is establishing.
                let Ok(conn) = wait_conn(cell).await else {
                    return;
                };
                let mut tx = match conn.open(kind).await {
                    Ok(tx) => tx,
                    Err(e) => {
                        tracing::warn!(peer = %host, error = %e, "cannot open stream");
                        return;
                    }
                };
                while let Some(f) = rx.recv().await {
                    if let Err(e) = tx.send_parts(&[], f).await {
                        tracing::debug!(peer = %host, error = %e, "send failed");
                        return;
                    }
                }
                // The link was dropped or drained: end the stream once the peer has it all.
                if let Err(e) = tx.finish().await {
                    tracing::debug!(peer = %host, error = %e, "stream not acknowledged");
                }
            }));
        }
        Link {
            conn: cell,
            control: ctx,
            demand: dtx,
            senders,
        }
    }

    /// The connection to `host` (listening at `addr`), connecting if needed.
    pub async fn conn(self: &Arc<Self>, host: &str, addr: &str) -> Result<Conn, NetError> {
        wait_conn(self.link_cell(host, addr)).await
    }

    fn link_cell(self: &Arc<Self>, host: &str, addr: &str) -> SharedConn {
        let key = LinkKey::of(host, addr);
        let mut links = lock(&self.links);
        if let Some(l) = links.get(&key) {
            // A failed or closed link, or one whose senders gave up, is replaced by a fresh
            // attempt.
            let dead = match l.conn.borrow().as_ref() {
                None => false,
                Some(Err(_)) => true,
                Some(Ok(c)) => c.is_closed(),
            } || l.control.is_closed()
                || l.demand.is_closed();
            if !dead {
                return l.conn.clone();
            }
        }
        let (tx, cell) = watch::channel(None);
        let link = self.start_link(host, cell.clone());
        links.insert(key, link);
        let this = self.clone();
        let (host, addr) = (host.to_string(), addr.to_string());
        self.rt.spawn(async move {
            let result = match resolve(&addr).await {
                Ok(sa) => this.transport.connect(sa, &host).await,
                Err(e) => Err(e),
            }
            .map_err(Arc::new);
            let _ = tx.send(Some(result.clone()));
            match result {
                Ok(conn) => this.spawn_readers(conn),
                Err(e) => {
                    tracing::warn!(peer = %host, %addr, error = %e, "peer unreachable");
                    if let Some(r) = this.router() {
                        r.unreachable(&host);
                    }
                }
            }
        });
        cell
    }

    /// Queues a control or demand frame for `host`.
    pub fn send(self: &Arc<Self>, host: &str, addr: &str, kind: StreamKind, frame: Vec<u8>) {
        self.link_cell(host, addr);
        let links = lock(&self.links);
        let Some(link) = links.get(&LinkKey::of(host, addr)) else {
            return;
        };
        let tx = match kind {
            StreamKind::Demand => &link.demand,
            _ => &link.control,
        };
        let _ = tx.send(frame);
    }

    /// Forgets the links to `host` (a peer declared dead): the next message to it opens a
    /// fresh connection. A crashed and restarted peer never answers on the old one, and
    /// QUIC would only notice at its idle timeout.
    pub fn forget(&self, host: &str) {
        let mut links = lock(&self.links);
        let before = links.len();
        links.retain(|k, _| k.host != host);
        if links.len() != before {
            tracing::debug!(peer = %host, "link forgotten");
        }
    }

    /// Ends every link once the control and demand frames queued on it have been
    /// acknowledged by their peer, or `within` has passed: a root calls it before
    /// [`Peers::close`] so that its last messages (`Finished`) are not abandoned.
    pub async fn drain(&self, within: std::time::Duration) {
        let senders: Vec<_> = lock(&self.links)
            .drain()
            .flat_map(|(_, link)| {
                // Closing the channels ends the sender tasks after what is queued.
                let Link { conn, senders, .. } = link;
                drop(conn);
                senders
            })
            .collect();
        let all = async {
            for s in senders {
                let _ = s.await;
            }
        };
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::debug!("some peers did not acknowledge the last messages in time");
        }
    }

    /// Drops every connection.
    pub fn close(&self) {
        for (_, l) in lock(&self.links).drain() {
            if let Some(Ok(c)) = l.conn.borrow().as_ref() {
                c.close();
            }
        }
        self.transport.close();
    }
}

#[cfg(test)]
mod tests {
    use super::LinkKey;

    #[test]
    fn two_pushes_from_one_login_node_are_two_links() {
        let a = LinkKey::of("login", "10.0.0.1:40001");
        let b = LinkKey::of("login", "login:40002");
        assert_ne!(a, b);
        assert_eq!(a.port, 40001);
        assert_eq!(LinkKey::of("n1", "[fe80::1]:7411").port, 7411);
        assert_eq!(LinkKey::of("n1", "n1").port, 0);
    }
}

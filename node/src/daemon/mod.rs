//! `teesfs daemon`: the node side. Accepts jobs from parents (verifying the index against
//! the trusted publisher keys), mounts each job's layer read-only as soon as its index
//! arrives, forwards to children, answers demand requests, and reports its state on a
//! Unix control socket. Every mounted job is recorded ([`crate::fs::record`]): the files it
//! opens until this node holds the whole layer, and those whose reads wait for a chunk, for
//! `teesfs record --from-job` and `teesfs learn`; releasing the job keeps its record among
//! those of the last few released jobs (`records`). A health probe
//! (`teesfs health`) is a job without index or chunks: it is answered and forwarded, never
//! mounted, and dropped once the root finishes it.
//!
//! One daemon per state directory: the first holds an exclusive lock on
//! `<state-dir>/daemon.lock` for its life, and a second exits naming it before it touches
//! a mount, a copy or the control socket. The control socket is open to every local user
//! and bounded ([`crate::control`]): request lines, connections per user and in all, and
//! idle time; the file descriptor limit is raised at start so the data path never runs out
//! because of the control path.
//!
//! By concern: `control` serves the control socket, `probe` answers health probes,
//! `records` releases jobs, keeping their records, and answers a login node asking for
//! them, `host` is what the daemon does to its host at start (state lock, stale mounts,
//! file limit), `scrape` is what a metrics scrape reads; job admission is decided in
//! [`super::admit`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use peertree::relay::{Event, JobId, Msg, NodeInfo, Phase, Relay, Routed, Start};

use super::admit::Admitted;
use super::job::{ChunkTaken, JobCore};
use super::peers::{Peers, Pending, Router};
use super::store::NodeStore;
use crate::Error;
use crate::fs::copies::Copies;
use crate::fs::mount::Mounted;
use crate::fs::record::Recorder;
use crate::net::{Identity, StreamKind, Transport};
use crate::source::JobSource;
use crate::sync::lock;

/// How a daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// This node's host name (must match its certificate).
    pub host: String,
    /// Where to listen for peers.
    pub listen: SocketAddr,
    /// Directory with `ca.crt`, `<host>.crt`, `<host>.key`.
    pub identity_dir: PathBuf,
    /// Where chunks are kept (memory-backed by default).
    pub state_dir: PathBuf,
    /// Jobs are mounted at `<mount_root>/<job id>`.
    pub mount_root: PathBuf,
    /// Byte budget of the chunk store.
    pub store_budget: u64,
    /// Memory for the stored bytes of recently arrived chunks, which are sent on to
    /// children and read without reading the store back ([`NodeStore::open`]).
    pub recent_bytes: u64,
    /// Memory for decompressed chunks per mount.
    pub cache_bytes: u64,
    /// Serve complete files through FUSE passthrough (root only).
    pub passthrough: bool,
    /// Byte budget of the passthrough copies.
    pub copies_budget: u64,
    /// How long a read waits for a chunk before failing with EIO.
    pub read_timeout: std::time::Duration,
    /// Trusted publisher keys, and the users some sign for.
    pub trusted: super::admit::Trust,
    /// Index ids revoked on this node: jobs carrying them are refused.
    pub revoked: std::collections::HashSet<manifest::IndexId>,
    /// The control socket.
    pub control: PathBuf,
    /// Mount jobs (off only for relay-only nodes).
    pub mount: bool,
    /// Per-job knobs (rate limit, fault injection).
    pub knobs: super::job::JobKnobs,
    /// The origin store: a store directory on a shared file system this node can read,
    /// where a job's chunks no node gives are read before a read fails (`--origin`).
    pub origin: Option<PathBuf>,
}

struct NodeJob {
    core: Arc<JobCore>,
    mounted: Mutex<Option<Mounted>>,
    mountpoint: PathBuf,
    started: Instant,
    phases: Mutex<[Option<f64>; 2]>,
    /// The uid that started the job, who may query and stop it (see [`crate::control`]).
    /// `None` until the start message carries it: then only root may.
    owner: Option<u32>,
    /// A health probe: no index, never mounted, hidden from `status`.
    probe: bool,
    /// What the job uses while it starts (`None`: not recorded here: a probe, a relay-only
    /// daemon, a job read from shared storage).
    record: Option<Arc<Recorder>>,
    /// The push that started it: its root's address. A `Start` for the same job id from
    /// another push is that job pushed again (a Slurm requeue keeps the job id).
    root: Option<String>,
    /// Peers of the job given up on (children failed, parents lost), for the metrics.
    failed_edges: std::sync::atomic::AtomicU64,
    /// How long reads of the job's mount waited for chunks, for the metrics.
    read_waits: prometheus_client::metrics::histogram::Histogram,
    /// The layer's chunks, kept from eviction while the job runs (`None`: a probe, or a
    /// job read from shared storage).
    pin: Option<super::store::Pin>,
}

/// A running daemon.
pub struct Daemon {
    cfg: DaemonConfig,
    peers: Arc<Peers>,
    store: Arc<NodeStore>,
    /// Passthrough copies of every job (`None` without passthrough).
    copies: Option<Arc<Copies>>,
    /// The state directory's lock, held for the daemon's life.
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// Who holds control connections.
    admission: Arc<Mutex<super::control::Admission>>,
    /// Trusted publisher keys (replaced by [`Daemon::reload`]).
    trusted: std::sync::RwLock<super::admit::Trust>,
    /// Revoked index ids (replaced by [`Daemon::reload`]).
    revoked: std::sync::RwLock<std::collections::HashSet<manifest::IndexId>>,
    jobs: Mutex<HashMap<JobId, Arc<NodeJob>>>,
    /// Jobs whose `Prepare` this node passed on (the newest few): a node with children
    /// gets one from its grandparent and one from its parent, and passes on the first.
    prepared: Mutex<std::collections::VecDeque<JobId>>,
    rt: tokio::runtime::Handle,
    me: Weak<Daemon>,
    /// What is counted as it happens, for `--metrics`.
    metrics: Arc<super::metrics::Metrics>,
    /// This node's wall clock minus the login node's, as the last job's `Start` said
    /// (milliseconds, its transit time included).
    clock_skew_ms: Mutex<Option<i64>>,
    /// Where `--metrics` is served, once it is.
    metrics_addr: Mutex<Option<std::net::SocketAddr>>,
    /// The records of the last jobs released here, for `teesfs learn`.
    released: Mutex<records::Released>,
}

/// The children (host, address) whose links a job's mount waits for: on a node whose
/// handshakes take turns on its CPU, its direct children (their `Start`s wait for the
/// links; the application needs its urgent set too, which comes later); none elsewhere.
fn mount_waits_for(start: &Start) -> Vec<(String, String)> {
    let me = start.subtree.first().map(|n| n.id);
    let children: Vec<(String, String)> = (start.subtree.iter().skip(1))
        .filter(|n| Some(n.parent) == me)
        .map(|n| (n.host.clone(), n.addr.clone()))
        .collect();
    if Peers::handshakes_take_turns(children.len() + 1) {
        children
    } else {
        Vec::new()
    }
}

/// The longest a job's mount waits for the links to the node's children.
const MOUNT_AFTER_LINKS: std::time::Duration = std::time::Duration::from_secs(1);

/// How many passed-on `Prepare`s a daemon remembers.
const PREPARED_KEPT: usize = 1024;

pub use super::control::{JobStatus, STATUS_VERSION, Status};

impl Daemon {
    /// Binds the endpoint and opens the store. Must run inside a tokio runtime.
    /// Mounts a crashed earlier run left under the mount root are detached first.
    pub fn start(cfg: DaemonConfig) -> Result<Arc<Self>, Error> {
        let lock = lock_state_dir(&cfg.state_dir)?;
        raise_fd_limit();
        clean_stale_mounts(&cfg.mount_root);
        let identity = Identity::load(&cfg.identity_dir, &cfg.host)?;
        let transport = Transport::bind(cfg.listen, &identity)?;
        let store = NodeStore::open(
            &cfg.state_dir.join("store"),
            cfg.store_budget,
            cfg.recent_bytes,
        )?;
        #[cfg(feature = "fault-injection")]
        let store = store.with_write_delay(cfg.knobs.slow_store);
        let store = Arc::new(store);
        // Copies from an earlier run are removed here, never served.
        let copies = if cfg.passthrough && cfg.mount {
            Some(Copies::open(
                &cfg.state_dir.join("files"),
                cfg.copies_budget,
            )?)
        } else {
            None
        };
        let peers = Peers::new(transport);
        // Newer revocation lists from peers are installed and passed on (`node::crls`).
        peers.keep_crls(super::crls::CrlKeeper::new(
            cfg.identity_dir.clone(),
            cfg.host.clone(),
        ));
        let trusted = std::sync::RwLock::new(cfg.trusted.clone());
        let revoked = std::sync::RwLock::new(cfg.revoked.clone());
        let daemon = Arc::new_cyclic(|me| Self {
            cfg,
            peers: peers.clone(),
            store,
            copies,
            _lock: lock,
            admission: Arc::new(Mutex::new(super::control::Admission::default())),
            trusted,
            revoked,
            jobs: Mutex::new(HashMap::new()),
            prepared: Mutex::new(std::collections::VecDeque::new()),
            rt: tokio::runtime::Handle::current(),
            me: me.clone(),
            metrics: Arc::default(),
            clock_skew_ms: Mutex::new(None),
            metrics_addr: Mutex::new(None),
            released: Mutex::new(records::Released::default()),
        });
        let router: Weak<dyn Router> = Arc::downgrade(&daemon) as Weak<dyn Router>;
        peers.set_router(router);
        tokio::spawn(peers.clone().accept_loop());
        Ok(daemon)
    }

    /// `systemctl reload` (SIGHUP): trusts `trusted` and refuses `revoked` index ids from
    /// now on, and reloads the node's credentials (certificate, CA, CRL) for new
    /// connections. Running jobs, their mounts and connections already up are untouched (a
    /// running job whose index is now revoked is named in a warning; `teesfs release`
    /// ends it). On an error nothing changes.
    pub fn reload(
        &self,
        trusted: super::admit::Trust,
        revoked: std::collections::HashSet<manifest::IndexId>,
    ) -> Result<(), Error> {
        let identity = Identity::load(&self.cfg.identity_dir, &self.cfg.host)?;
        self.peers.transport().reload(&identity);
        let keys = trusted.keys.len();
        for (job, j) in lock(&self.jobs).iter() {
            if revoked.contains(&j.core.index_id) {
                tracing::warn!(%job, index = %j.core.index_id.short(), "a running job's index is revoked now; end it with `teesfs release`");
            }
        }
        let revoked_ids = revoked.len();
        *self
            .trusted
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = trusted;
        *self
            .revoked
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = revoked;
        tracing::info!(
            keys,
            revoked_ids,
            "reloaded the trusted keys, the revoked indexes and the credentials"
        );
        Ok(())
    }

    /// The address peers reach this daemon at.
    pub fn local_addr(&self) -> SocketAddr {
        self.peers.transport().local_addr()
    }

    /// Opens the control socket (mode 0600), replacing a stale one. Open it before telling
    /// anyone the daemon is up, so `teesfs status` works from then on.
    pub fn open_control(&self) -> Option<tokio::net::UnixListener> {
        let _ = std::fs::remove_file(&self.cfg.control);
        if let Some(dir) = self.cfg.control.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match tokio::net::UnixListener::bind(&self.cfg.control) {
            Ok(l) => {
                use std::os::unix::fs::PermissionsExt;
                // Every local user may connect; each request is authorised by the caller's
                // uid from the kernel (SO_PEERCRED), see `control_client`.
                let _ = std::fs::set_permissions(
                    &self.cfg.control,
                    std::fs::Permissions::from_mode(0o666),
                );
                Some(l)
            }
            Err(e) => {
                tracing::error!(path = %self.cfg.control.display(), error = %e, "cannot open the control socket; `teesfs status` will not work");
                None
            }
        }
    }

    /// Serves the control socket (from [`Daemon::open_control`]) until `shutdown`
    /// resolves, then unmounts every job.
    pub async fn serve(
        self: Arc<Self>,
        listener: Option<tokio::net::UnixListener>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let control = self.clone().control_loop(listener);
        tokio::select! {
            _ = shutdown => {}
            _ = control => {}
        }
        self.shutdown().await;
    }

    /// The current state, with every job.
    pub fn status(&self) -> Status {
        self.status_of(0)
    }

    /// The current state as the local user `uid` may see it: the daemon, and the jobs
    /// [`super::control::sees`] lets it see (root: all).
    pub(crate) fn status_of(&self, uid: u32) -> Status {
        let jobs = lock(&self.jobs)
            .values()
            .filter(|j| !j.probe && super::control::sees(uid, j.owner))
            .map(|j| job_status(j))
            .collect();
        Status {
            version: STATUS_VERSION,
            host: self.cfg.host.clone(),
            listen: self.local_addr().to_string(),
            store_bytes: self.store.bytes(),
            store_chunks: self.store.len(),
            store_budget: self.cfg.store_budget,
            store_pinned: self.store.pinned_bytes(),
            store_cached: self.store.cached_bytes(),
            clock_skew_ms: *lock(&self.clock_skew_ms),
            metrics: lock(&self.metrics_addr).map(|a| format!("http://{a}/metrics")),
            jobs,
        }
    }

    /// Unmounts a job and removes its mountpoint (after it left the job table).
    async fn teardown(j: Arc<NodeJob>) {
        j.core.close();
        let m = lock(&j.mounted).take();
        if let Some(m) = m {
            let _ = tokio::task::spawn_blocking(move || drop(m)).await;
        }
        let _ = std::fs::remove_dir(&j.mountpoint);
        // Nothing reads the job's chunks any more: they may be evicted from now on.
        if let Some(p) = &j.pin {
            p.release();
        }
    }

    async fn shutdown(&self) {
        let jobs: Vec<Arc<NodeJob>> = lock(&self.jobs).drain().map(|(_, j)| j).collect();
        for j in jobs {
            Self::teardown(j).await;
        }
        self.peers.close();
        let _ = std::fs::remove_file(&self.cfg.control);
    }

    fn start_job(&self, from_host: &str, job: JobId, start: Start) {
        let root = start.ancestors.last().map(|n| n.addr.clone());
        let existing = lock(&self.jobs).get(&job).cloned();
        if let Some(old) = existing {
            // The same push again (a restarted subtree's `Start`): the job runs already.
            if old.root == root {
                return;
            }
            self.replace_job(from_host, job, start, old);
            return;
        }
        let span = tracing::info_span!("job", %job);
        let _g = span.enter();
        let parent = start.ancestors.first().cloned();
        let refuse = |why: String| self.refuse(job, from_host, parent.as_ref(), &why);
        let (signed, index, schedule) = match self.admit(from_host, &start) {
            Ok(Admitted::Probe) => return self.start_probe(from_host, job, start),
            Ok(Admitted::Job {
                signed,
                index,
                schedule,
            }) => (signed, index, schedule),
            Err(Error::Manifest(e)) => return refuse(format!("index rejected: {e}")),
            Err(e) => return refuse(e.to_string()),
        };
        let known = self.link_peers(from_host, job, &start);
        // Shared-storage mode reads the parallel file system, the store locked against gc.
        let shared = match &start.shared_store {
            Some(path) => match seeder::DirStore::open_for_a_job(std::path::Path::new(path)) {
                Ok(s) => Some(s),
                Err(e) => return refuse(format!("shared store unusable: {e}")),
            },
            None => None,
        };
        let pin = match shared.is_none().then(|| self.store.pin(&index)).transpose() {
            Ok(p) => p,
            Err(no_room) => return refuse(no_room.to_string()),
        };
        let owner = start.owner;
        self.note_clock_skew(&start);
        let children = mount_waits_for(&start);
        let mut relay = match Relay::new_node(start, schedule, Instant::now()) {
            Ok(r) => r,
            Err(e) => return refuse(e.to_string()),
        };
        if shared.is_none() {
            self.hold_stored(&mut relay, &index);
        }
        let index = Arc::new(index);
        let bytes: Arc<dyn seeder::ChunkStore> = match &shared {
            Some(s) => Arc::new(s.clone()),
            None => self.store.clone(),
        };
        let (core, events) = JobCore::new(
            relay,
            index.clone(),
            signed.id(),
            self.peers.clone(),
            bytes,
            &known,
            self.cfg.knobs,
        );
        if let (Some(origin), None) = (&self.cfg.origin, &shared) {
            core.use_origin(origin.clone());
        }
        let mountpoint = self.cfg.mount_root.join(job.to_string());
        // A job read from shared storage never waits for the tree: nothing to learn.
        let record = (self.cfg.mount && shared.is_none())
            .then(|| Arc::new(Recorder::default().counting(core.activity())));
        let nj = Arc::new(NodeJob {
            core: core.clone(),
            mounted: Mutex::new(None),
            mountpoint: mountpoint.clone(),
            started: Instant::now(),
            phases: Mutex::new([None, None]),
            owner,
            probe: false,
            record,
            root,
            failed_edges: Default::default(),
            read_waits: super::metrics::read_wait_histogram(),
            pin,
        });
        lock(&self.jobs).insert(job, nj.clone());
        tracing::info!(index = %signed.id().short(), parent = %from_host, "job accepted");
        core.start();
        if shared.is_none() {
            core.follow_losses(self.store.watch());
        }

        let logged = tracing::Instrument::instrument(
            log_events(nj.clone(), events),
            tracing::info_span!("job", %job),
        );
        self.rt.spawn(logged);

        if self.cfg.mount {
            let source: Arc<dyn crate::source::ChunkSource> = match shared {
                Some(s) => Arc::new(crate::source::StoreSource::new(s, &index)),
                None => Arc::new(JobSource::new(core, self.store.clone())),
            };
            self.spawn_mount(nj, (*index).clone(), (signed.id(), source), owner, children);
        }
    }

    /// Refuses a job: logged, and its parent hears why at once ([`Msg::Refused`]), so the
    /// push names this node and the reason instead of waiting for its deadline; the parent
    /// drops only its own children.
    fn refuse(&self, job: JobId, from_host: &str, parent: Option<&NodeInfo>, why: &str) {
        tracing::error!(parent = %from_host, "refusing job: {why}");
        if let Some(p) = parent {
            let msg = Msg::Refused {
                reason: why.to_string(),
            };
            let frame = super::peers::frame(job, &msg);
            self.peers
                .send(&p.host, &p.addr, StreamKind::Control, frame);
        }
    }

    /// Admits or refuses a `Start` by the trusted keys and revoked index ids in force now.
    fn admit(&self, from_host: &str, start: &Start) -> Result<Admitted, Error> {
        let trusted = self
            .trusted
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let revoked = self
            .revoked
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let policy = super::admit::Policy {
            trusted: &trusted.keys,
            owners: &trusted.owners,
            revoked: &revoked,
            now,
        };
        super::admit::admit(start, &self.cfg.host, from_host, &policy)
    }

    /// The peers a job talks to (its subtree, ancestors and siblings), with fresh links
    /// made to those the job's `Prepare` did not link already.
    fn link_peers(&self, from_host: &str, job: JobId, start: &Start) -> Vec<NodeInfo> {
        let mut known = start.subtree.clone();
        known.extend(start.ancestors.iter().cloned());
        // Siblings: the deputy among them adopts the others if our parent fails.
        known.extend(start.kin.iter().cloned());
        // The children's links were made afresh by the job's `Prepare`, when one came.
        let prepared = lock(&self.prepared).contains(&job);
        let children = start.subtree.iter().skip(1).filter(|_| !prepared);
        // The connection the `Start` came on is live and its peer is no stale process: the
        // job's messages to the sender go on it. Made afresh, it would carry only the
        // sender's bulk stream, which falls silent while the sender holds the rest of the
        // layer back (`push --bulk-after`) and was closed by QUIC's idle timeout under
        // it: every edge of the tree failed at the hold's end (issue 28).
        self.fresh_links(
            children
                .chain(&start.ancestors)
                .map(|n| n.host.as_str())
                .filter(|h| *h != self.cfg.host && *h != from_host),
        );
        known
    }

    /// Remembers how far this node's clock is from the login node's, as a `Start` says.
    fn note_clock_skew(&self, start: &Start) {
        if let Some(root) = start.root_clock_ms {
            let skew = i128::from(super::push::unix_ms_now()) - i128::from(root);
            *lock(&self.clock_skew_ms) = i64::try_from(skew).ok();
        }
    }

    /// Chunks kept from earlier jobs are not sent again: the relay holds them, and tells
    /// the parent so.
    fn hold_stored(&self, relay: &mut Relay, index: &manifest::Index) {
        let store = &self.store;
        relay.hold_existing(
            (0u32..)
                .zip(&index.chunks)
                .filter(|(_, c)| store.contains(&c.id))
                .map(|(p, _)| peertree::relay::ChunkNo(p)),
        );
    }

    /// A job pushed again under the id of one this node runs, by another push (a Slurm
    /// requeue keeps `SLURM_JOB_ID`; an operator pushes again): the old job is released
    /// (unmounted; its chunks stay in the store, so what it had is not sent again) and the
    /// new push's job starts in its place. Ignoring it would leave the new push waiting
    /// for this node until its deadline, blaming the network.
    fn replace_job(&self, from_host: &str, job: JobId, start: Start, old: Arc<NodeJob>) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let removed = {
            let mut jobs = lock(&self.jobs);
            let removed = match jobs.get(&job) {
                Some(j) if Arc::ptr_eq(j, &old) => jobs.remove(&job),
                _ => None,
            };
            if let Some(j) = &removed {
                self.retire(j);
            }
            removed
        };
        let Some(old) = removed else {
            return;
        };
        lock(&self.prepared).retain(|j| *j != job);
        tracing::warn!(
            %job,
            old_root = old.root.as_deref().unwrap_or("?"),
            new_root = start.ancestors.last().map_or("?", |n| n.addr.as_str()),
            "job pushed again by another push (a requeued Slurm job keeps its id): releasing the old one and starting the new one"
        );
        let from_host = from_host.to_string();
        self.rt.spawn(async move {
            // The first run's record stays askable until the new one is released.
            me.keep_record(&old).await;
            Self::teardown(old).await;
            me.start_job(&from_host, job, start);
        });
    }

    /// Forgets the links to `hosts`, so the job's first messages to them go on new
    /// connections. A peer may be a new process since this node last talked to it (its
    /// daemon restarted, its node rebooted): the old connection would take the job's
    /// first messages and lose them until QUIC's idle timeout, and the job would blame the
    /// network. A connection costs one handshake per edge and job, which the simulator
    /// already charges.
    ///
    /// A link another job still being pushed uses is kept: its messages would otherwise be
    /// split over two connections and could overtake each other, and a peer that job talks
    /// to is not a new process (that job would have lost it). A finished job (pushed,
    /// still mounted) no longer talks to its peers.
    fn fresh_links<'h>(&self, hosts: impl Iterator<Item = &'h str>) {
        let jobs: Vec<Arc<NodeJob>> = lock(&self.jobs).values().cloned().collect();
        for host in hosts {
            if !jobs
                .iter()
                .any(|j| j.core.has_peer(host) && !j.core.view().finished)
            {
                self.peers.forget(host);
            }
        }
    }

    /// The mountpoint of a job, once mounted.
    pub fn mountpoint(&self, job: JobId) -> Option<PathBuf> {
        let jobs = lock(&self.jobs);
        let j = jobs.get(&job)?;
        lock(&j.mounted)
            .as_ref()
            .map(|m| m.mountpoint().to_path_buf())
    }

    /// A job this node runs, for a message from `from_host` about it.
    fn running(&self, job: JobId, from_host: &str) -> Option<Arc<NodeJob>> {
        let j = lock(&self.jobs).get(&job).cloned();
        if j.is_none() {
            tracing::debug!(%job, peer = %from_host, "message for an unknown job");
        }
        j
    }

    /// Whether a job's local copy holds `phase`.
    pub fn phase_done(&self, job: JobId, phase: Phase) -> bool {
        lock(&self.jobs)
            .get(&job)
            .is_some_and(|j| j.core.holds(phase))
    }
}

mod control;
mod host;
mod mounting;
mod prepare;
mod probe;
mod records;
mod scrape;

use host::{clean_stale_mounts, lock_state_dir, raise_fd_limit};

impl Router for Daemon {
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed) -> Option<Pending> {
        match msg {
            Routed::Start(start) => {
                tracing::debug!(%job, peer = %from_host, "start received");
                if let Some(d) = self.me.upgrade() {
                    d.start_job(from_host, job, *start);
                }
            }
            Routed::Prepare(prepare) => {
                if let Some(d) = self.me.upgrade() {
                    d.prepare_job(from_host, job, prepare);
                }
            }
            Routed::Chunk { chunk, data, .. } => {
                let taken = self
                    .running(job, from_host)
                    .map_or(ChunkTaken::Refused, |j| {
                        j.core.on_chunk_msg(from_host, chunk, data)
                    });
                if matches!(taken, ChunkTaken::Refused) {
                    self.metrics.chunk_refused();
                }
                return taken.pending();
            }
            Routed::Relay(m) => {
                if let Some(j) = self.running(job, from_host) {
                    j.core.on_relay_msg(from_host, m);
                }
            }
            Routed::AskRecord { reply } => {
                if let Some(d) = self.me.upgrade() {
                    self.rt
                        .spawn(d.answer_record(from_host.to_string(), job, reply));
                }
            }
            Routed::Record { .. } => {
                tracing::debug!(%job, peer = %from_host, "a record this daemon did not ask for; ignored")
            }
        }
        None
    }

    fn unreachable(&self, host: &str, _why: &str) {
        let jobs: Vec<Arc<NodeJob>> = lock(&self.jobs).values().cloned().collect();
        for j in jobs {
            j.core.on_unreachable(host);
        }
    }
}

/// One job as `status` shows it.
fn job_status(j: &NodeJob) -> JobStatus {
    let view = j.core.view();
    let phases = *lock(&j.phases);
    JobStatus {
        version: STATUS_VERSION,
        job: j.core.job.to_string(),
        index: j.core.index_id.to_hex(),
        parent: view.parent.unwrap_or_default(),
        children: view.children,
        have: view.have,
        chunks: view.chunks,
        urgent_s: phases[0],
        all_s: phases[1],
        mountpoint: j.mountpoint.display().to_string(),
        finished: view.finished,
        owner: j.owner,
        counters: j.core.counters(),
    }
}

/// Logs what happens to a job on this node (phases held, parents lost, children failed,
/// corrupt chunks) until its events end.
async fn log_events(
    nj: Arc<NodeJob>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<super::job::TimedEvent>,
) {
    while let Some((at, ev)) = events.recv().await {
        match ev {
            Event::LocalPhaseDone(p) => {
                let t = at.saturating_duration_since(nj.started).as_secs_f64();
                lock(&nj.phases)[p.index()] = Some(t);
                if let (Phase::All, Some(r)) = (p, &nj.record) {
                    // The job has started by now or reads local data: opens from here on
                    // say nothing about what should come first.
                    r.close_window();
                }
                tracing::info!(phase = ?p, seconds = t, "holding phase");
            }
            Event::ParentLost(p) => {
                nj.failed_edges
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(parent = %nj.core.host_of(p), "parent lost; re-attaching")
            }
            Event::Reattached(p) => tracing::warn!(parent = %nj.core.host_of(p), "re-attached"),
            Event::ChildFailed(c) => {
                nj.failed_edges
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(child = %nj.core.host_of(c), "child failed")
            }
            Event::BadChunk { from, chunk } => {
                tracing::error!(from = %nj.core.host_of(from), chunk = %chunk, "peer sent a corrupt chunk")
            }
            Event::RootGone(asks) => tracing::warn!(
                asks,
                "the push's root is gone (it never answered): no longer asking it; the job \
                 keeps serving what it holds, and reads of the rest fail until it is released"
            ),
            _ => {}
        }
    }
}

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
//! One task owns the node's jobs (`task`), as each job's task owns its relay: it is fed
//! one input enum (`state::Input`), keeps each job's real state (`state::JobState`), and
//! publishes a view (`state::View`) that the network's routing (`inbox`), `status` and
//! the metrics read. No lock guards the daemon's state. What a `Start` does, and a job's
//! plan, are pure (`plan`); the launch is short (`launch`); mounts, records and unmounts run
//! in the background and report back. [`Daemon::run`] is the whole service: signals,
//! reloads (with [`trust`] discovery), systemd's notifications, the control socket and the
//! metrics.
//!
//! One daemon per state directory: the first holds an exclusive lock on
//! `<state-dir>/daemon.lock` for its life, and a second exits naming it before it touches
//! a mount, a copy or the control socket. The control socket is open to every local user
//! and bounded ([`crate::control`]): request lines, connections per user and in all, and
//! idle time; the file descriptor limit is raised at start so the data path never runs out
//! because of the control path.
//!
//! By concern: `control` serves the control socket, `records` keeps released jobs'
//! records and answers a login node asking for them, `mounting` makes a job's mount,
//! `prepare` passes on the `Prepare` wave, `kept` keeps jobs across restarts (records
//! and the keeper), `host` is what the daemon does to its host at
//! start (state lock, stale mounts, file limit), `scrape` is what a metrics scrape reads,
//! `run` is the service; job admission is decided in [`super::admit`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::peers::{Peers, Router};
use super::store::NodeStore;
use crate::Error;
use crate::fs::copies::Copies;
use crate::net::{Identity, Transport};
use state::{Input, JobSeen, View};

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
    /// Where the trusted publisher keys, the keys bound to users and the revoked index
    /// ids are read, at the start and on every reload.
    pub trust: trust::Sources,
    /// The control socket.
    pub control: PathBuf,
    /// Mount jobs (off only for relay-only nodes).
    pub mount: bool,
    /// Per-job knobs (rate limit, fault injection).
    pub knobs: super::job::JobKnobs,
    /// The origin store: a store directory on a shared file system this node can read,
    /// where a job's chunks no node gives are read before a read fails (`--origin`).
    pub origin: Option<PathBuf>,
    /// Serve Prometheus metrics at this address, telling what the config allows.
    pub metrics: Option<(SocketAddr, crate::metrics::endpoint::EndpointConfig)>,
    /// Jobs outlive the daemon (`--keep-jobs`): this program (`teesfs`) is started as the
    /// keeper of their FUSE connections (`teesfs keep-fds`, [`crate::keeper`]); a daemon
    /// that stops (or dies) leaves them mounted, and the next one on this state directory
    /// takes them up. `None`: jobs end with the daemon.
    pub keeper: Option<PathBuf>,
}

/// What the daemon's handle, its control clients, its metrics and the network share: the
/// way into the daemon task and the view it publishes.
pub(crate) struct Shared {
    cfg: Arc<DaemonConfig>,
    peers: Arc<Peers>,
    store: Arc<NodeStore>,
    metrics: Arc<super::metrics::Metrics>,
    inputs: mpsc::UnboundedSender<Input>,
    view: watch::Receiver<View>,
}

/// A running daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    /// The state directory's lock, held for the daemon's life.
    _lock: nix::fcntl::Flock<std::fs::File>,
}

pub use super::control::{JobStatus, STATUS_VERSION, Status};

impl Daemon {
    /// Binds the endpoint, opens the store, reads what the node trusts and starts the
    /// daemon task. Must run inside a tokio runtime. Mounts a crashed earlier run left
    /// under the mount root are detached first.
    pub fn start(cfg: DaemonConfig) -> Result<Self, Error> {
        let lock = lock_state_dir(&cfg.state_dir)?;
        let (trust, revoked) = cfg.trust.load()?;
        raise_fd_limit();
        let (keeper, adoptions) = kept::start_keeping(&cfg, &trust, &revoked);
        let spare: Vec<PathBuf> = adoptions
            .iter()
            .map(|(_, a)| a.mountpoint.clone())
            .collect();
        clean_stale_mounts(&cfg.mount_root, &spare);
        let identity = Identity::load(&cfg.identity_dir, &cfg.host)?;
        let transport = Transport::bind(cfg.listen, &identity)?;
        let store = NodeStore::open(
            &cfg.state_dir.join("store"),
            cfg.store_budget,
            cfg.recent_bytes,
        )?;
        #[cfg(feature = "fault-injection")]
        let store = store.with_write_delay(cfg.knobs.slow_store);
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
        let limit = crate::bulk_gate::CpuLimit::of_this_process();
        if let Some(l) = limit {
            tracing::info!(
                cores = l.cores,
                share = crate::bulk_gate::SHARE,
                "the daemon runs under a CPU quota: while applications use its mounts, pushed chunks are taken only within this share of it"
            );
        }
        peers.gate_bulk(crate::bulk_gate::BulkGate::new(limit));
        // Newer revocation lists from peers are installed and passed on (`node::crls`).
        peers.keep_crls(super::crls::CrlKeeper::new(
            cfg.identity_dir.clone(),
            cfg.host.clone(),
        ));
        let parts = task::Parts {
            cfg: Arc::new(cfg),
            peers,
            store: Arc::new(store),
            copies,
            metrics: Arc::default(),
            trust,
            revoked,
            keeper,
        };
        let shared = spawn_task(parts);
        for (job, a) in adoptions {
            let adoption = Box::new(a);
            let _ = shared.inputs.send(Input::Adopt { job, adoption });
        }
        Ok(Self {
            shared,
            _lock: lock,
        })
    }

    /// `systemctl reload` (SIGHUP): reads the trusted keys and the revoked index ids
    /// again and refuses by them from now on, and reloads the node's credentials
    /// (certificate, CA, CRL) for new connections. Running jobs, their mounts and
    /// connections already up are untouched (a running job whose index is now revoked is
    /// named in a warning; `teesfs release` ends it). On an error nothing changes.
    pub async fn reload(&self) -> Result<(), Error> {
        let cfg = &self.shared.cfg;
        let (trust, revoked) = cfg.trust.load()?;
        let identity = Identity::load(&cfg.identity_dir, &cfg.host)?;
        self.shared.peers.transport().reload(&identity);
        let (done, reloaded) = oneshot::channel();
        let input = Input::Reload {
            trust,
            revoked,
            done,
        };
        if self.shared.inputs.send(input).is_ok() {
            let _ = reloaded.await;
        }
        Ok(())
    }

    /// The address peers reach this daemon at.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.peers.transport().local_addr()
    }

    /// Opens the control socket (mode 0666: each request is authorised by the caller's
    /// uid), replacing a stale one. Open it before telling anyone the daemon is up, so
    /// `teesfs status` works from then on.
    pub fn open_control(&self) -> Option<tokio::net::UnixListener> {
        let path = &self.shared.cfg.control;
        let _ = std::fs::remove_file(path);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match tokio::net::UnixListener::bind(path) {
            Ok(l) => {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
                Some(l)
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot open the control socket; `teesfs status` will not work");
                None
            }
        }
    }

    /// Releases every job (unmounted, relays closed; with a keeper, mounted jobs are left
    /// mounted for the next daemon instead), closes the links and removes the control
    /// socket; returns once all is done.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.shared.inputs.send(Input::Shutdown { done }).is_ok() {
            let _ = stopped.await;
        }
    }

    /// The current state, with every job.
    pub fn status(&self) -> Status {
        self.shared.status_of(0)
    }
}

/// Starts the daemon task over `parts`, and lets the network deliver to it.
fn spawn_task(parts: task::Parts) -> Arc<Shared> {
    let (inputs, inputs_rx) = mpsc::unbounded_channel();
    let (view, view_rx) = watch::channel(View::default());
    let shared = Arc::new(Shared {
        cfg: parts.cfg.clone(),
        peers: parts.peers.clone(),
        store: parts.store.clone(),
        metrics: parts.metrics.clone(),
        inputs: inputs.clone(),
        view: view_rx,
    });
    let peers = parts.peers.clone();
    tokio::spawn(task::Task::new(parts, inputs, view).run(inputs_rx));
    let router: std::sync::Weak<dyn Router> =
        Arc::downgrade(&shared) as std::sync::Weak<dyn Router>;
    peers.set_router(router);
    tokio::spawn(peers.accept_loop());
    shared
}

impl Shared {
    /// The current state as the local user `uid` may see it: the daemon, and the jobs
    /// [`super::control::sees`] lets it see (root: all).
    pub(crate) fn status_of(&self, uid: u32) -> Status {
        let view = self.view.borrow().clone();
        let jobs = (view.jobs.values())
            .filter(|j| !j.probe && super::control::sees(uid, j.owner))
            .map(|j| job_status(j))
            .collect();
        let gate = self.peers.bulk_gate();
        let (cpu_quota_cores, bulk_yielded_s) =
            crate::bulk_gate::BulkGate::figures(gate.as_deref());
        Status {
            version: STATUS_VERSION,
            host: self.cfg.host.clone(),
            listen: self.peers.transport().local_addr().to_string(),
            store_bytes: self.store.bytes(),
            store_chunks: self.store.len(),
            store_budget: self.cfg.store_budget,
            store_pinned: self.store.pinned_bytes(),
            store_cached: self.store.cached_bytes(),
            store_placed: self.store.placed(),
            clock_skew_ms: view.clock_skew_ms,
            metrics: view.metrics_addr.map(|a| format!("http://{a}/metrics")),
            cpu_quota_cores,
            bulk_yielded_s,
            jobs,
        }
    }
}

/// One job as `status` shows it.
fn job_status(j: &JobSeen) -> JobStatus {
    let view = j.core.view();
    JobStatus {
        version: STATUS_VERSION,
        job: j.core.job.to_string(),
        index: j.core.index_id.to_hex(),
        parent: view.parent.unwrap_or_default(),
        children: view.children,
        have: view.have,
        chunks: view.chunks,
        urgent_s: j.phases[0],
        all_s: j.phases[1],
        mountpoint: j.mountpoint.display().to_string(),
        finished: view.finished,
        owner: j.owner,
        counters: j.core.counters(),
        image: j.core.index.image.as_ref().map(Into::into),
    }
}

mod control;
mod early;
mod host;
mod inbox;
mod kept;
mod launch;
mod mounting;
mod plan;
mod prepare;
mod records;
mod run;
mod scrape;
mod state;
mod task;
#[cfg(test)]
mod tests;
pub mod trust;

pub use run::{Ended, Signal, Signals};

use host::{clean_stale_mounts, lock_state_dir, raise_fd_limit};

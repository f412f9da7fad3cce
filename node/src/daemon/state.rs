//! What the daemon task owns and is fed: each job's real state ([`JobState`]), the one
//! input enum ([`Input`]) that every peer, control client, signal and background piece of
//! work sends it, and the view it publishes ([`View`]) for `status`, the metrics and the
//! network's routing. Types only: what the task does with them is in `task`, and what a
//! `Start` does to a job's state is decided in `plan`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use peertree::relay::{JobId, Phase, Prepare, Start};
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;

use crate::admit::Trust;
use crate::control::{JobRecord, Request};
use crate::fs::mount::Mounted;
use crate::fs::record::Recorder;
use crate::job::JobCore;
use crate::metrics::Totals;
use crate::store::Pin;

/// Told once a `Start` is routed: its job is in the view (or was refused), so the next
/// frame of the stream it came on finds it.
pub(crate) type Routed = oneshot::Sender<()>;

/// Told the answer to a control request (one JSON line).
pub(crate) type Reply = oneshot::Sender<String>;

/// Everything the daemon task hears, in the order it is sent.
pub(crate) enum Input {
    /// A job's `Start` from the parent `from`; `routed` is told once it is handled.
    Start {
        from: String,
        job: JobId,
        start: Box<Start>,
        routed: Routed,
    },
    /// A job's `Prepare` (its children's links opened ahead of its `Start`).
    Prepare {
        from: String,
        job: JobId,
        prepare: Prepare,
    },
    /// A control request that needs the task (a record, a stop), already parsed.
    Control {
        uid: u32,
        request: Request,
        reply: Reply,
    },
    /// A login node asks `from` for the record of `job`, to be answered at `reply`.
    AskRecord {
        from: String,
        job: JobId,
        reply: String,
    },
    /// New trusted keys and revoked ids (SIGHUP); `done` once they are in force.
    Reload {
        trust: Trust,
        revoked: std::collections::HashSet<manifest::IndexId>,
        done: oneshot::Sender<()>,
    },
    /// The blocking admission of a `Start` is over.
    Admitted {
        job: JobId,
        serial: u64,
        outcome: Box<super::launch::Outcome>,
    },
    /// A job's mount is made (`None`: it failed, and was logged).
    Mounted {
        job: JobId,
        serial: u64,
        mounted: Option<Mounted>,
    },
    /// Something happened to a running job.
    News { job: JobId, serial: u64, news: News },
    /// The record of a job being released, resolved (`None`: none kept).
    RecordKept {
        job: JobId,
        serial: u64,
        record: Option<JobRecord>,
    },
    /// A job's relay is closed and its mount gone.
    TornDown { job: JobId, serial: u64 },
    /// `host` cannot be reached.
    Unreachable { host: String },
    /// A job's message from `from` that found no job running in the view.
    Stray {
        job: JobId,
        from: String,
        msg: peertree::relay::RelayMsg,
    },
    /// `--metrics` is served at this address.
    MetricsAt(std::net::SocketAddr),
    /// Release every job, then stop; `done` once all are torn down.
    Shutdown { done: oneshot::Sender<()> },
    /// Take up a job an earlier daemon left mounted (its record and connection checked).
    Adopt {
        job: JobId,
        adoption: Box<super::kept::Adoption>,
    },
}

/// What a running job's event follower tells the task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum News {
    /// The node holds `phase`, this many seconds after the job arrived.
    Phase(Phase, f64),
    /// A parent lost or a child failed.
    EdgeFailed,
    /// A health probe is over (its root finished it, or its lifetime ran out).
    ProbeOver,
    /// The push's root released the job down the tree: it failed before the job started.
    Released,
}

/// One job's state on this node.
pub(crate) enum JobState {
    /// Its `Prepare` was passed on; no `Start` yet.
    Prepared,
    /// A `Start` is being admitted on the blocking pool.
    Starting(Box<Starting>),
    /// Running: a job (mounted or being mounted) or a health probe.
    Running(Box<Live>),
    /// Being released (stopped, replaced by another push, a probe over, or the daemon
    /// stopping): its record kept, then its relay closed and its mount gone.
    Releasing(Box<Releasing>),
}

/// A `Start` under admission.
pub(crate) struct Starting {
    pub serial: u64,
    pub root: Option<String>,
    pub owner: Option<u32>,
    /// Whether the job's `Prepare` came first (its children's links are made).
    pub prepared: bool,
    pub routed: Vec<Routed>,
    /// Stop requests that came meanwhile: the job is not launched, and they are answered.
    pub stops: Vec<Reply>,
    /// Another push's `Start` for the same id, run once this one is in place.
    pub next: Option<NextStart>,
    /// When the children's `Start`s were passed on, before admission
    /// ([`super::early`]); `None`: the job's relay sends them.
    pub early: Option<std::time::Instant>,
    /// What the children said meanwhile.
    pub inbox: super::early::EarlyInbox,
}

/// A `Start` waiting for the job it replaces to be released.
pub(crate) struct NextStart {
    pub from: String,
    pub start: Box<Start>,
    pub routed: Vec<Routed>,
}

/// A job's mount.
pub(crate) enum MountState {
    /// Not mounted here: a probe, a relay-only daemon, or the mount failed.
    Off,
    Mounting,
    Mounted(Box<Mounted>),
}

/// A job that runs here.
pub(crate) struct Live {
    /// Tells this run of the job from an earlier one under the same id.
    pub serial: u64,
    pub core: Arc<JobCore>,
    /// A health probe: no index, never mounted, hidden from `status`.
    pub probe: bool,
    pub mount: MountState,
    pub mountpoint: PathBuf,
    pub started: std::time::Instant,
    /// Seconds after arrival when the node held the urgent set and the whole layer.
    pub phases: [Option<f64>; 2],
    /// Peers given up on (children failed, parents lost), for the metrics.
    pub failed_edges: u64,
    pub owner: Option<u32>,
    pub root: Option<String>,
    /// What the job uses while it starts (`None`: not recorded here).
    pub record: Option<Arc<Recorder>>,
    pub read_waits: Histogram,
    /// The layer's chunks, kept from eviction while the job runs.
    pub pin: Option<Pin>,
}

/// Where a release is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    KeepingRecord,
    /// The mount is still being made: torn down once it is.
    WaitingForMount,
    TearingDown,
}

/// A job being released.
pub(crate) struct Releasing {
    pub live: Live,
    pub step: Step,
    pub stops: Vec<Reply>,
    pub next: Option<NextStart>,
}

impl Live {
    /// A job just launched: not mounted, nothing held yet.
    pub fn new(serial: u64, core: Arc<JobCore>, owner: Option<u32>, root: Option<String>) -> Self {
        Self {
            serial,
            core,
            probe: false,
            mount: MountState::Off,
            mountpoint: PathBuf::new(),
            started: std::time::Instant::now(),
            phases: [None, None],
            failed_edges: 0,
            owner,
            root,
            record: None,
            read_waits: crate::metrics::read_wait_histogram(),
            pin: None,
        }
    }
}

impl JobState {
    /// The running job, also while it is released.
    pub fn live(&self) -> Option<&Live> {
        match self {
            JobState::Running(l) => Some(l),
            JobState::Releasing(r) => Some(&r.live),
            JobState::Prepared | JobState::Starting(_) => None,
        }
    }
}

/// One job as the view shows it.
pub(crate) struct JobSeen {
    pub core: Arc<JobCore>,
    pub probe: bool,
    pub owner: Option<u32>,
    pub mountpoint: PathBuf,
    pub phases: [Option<f64>; 2],
    pub failed_edges: u64,
    pub read_waits: Histogram,
}

impl JobSeen {
    pub fn of(l: &Live) -> Self {
        Self {
            core: l.core.clone(),
            probe: l.probe,
            owner: l.owner,
            mountpoint: l.mountpoint.clone(),
            phases: l.phases,
            failed_edges: l.failed_edges,
            read_waits: l.read_waits.clone(),
        }
    }

    /// The job's traffic counts, as the metrics show them.
    pub fn totals(&self) -> Totals {
        Totals::of(&self.core.counters(), self.failed_edges)
    }
}

/// What the daemon task last published: read by the network (routing), `status` and the
/// metrics, never written but by the task.
#[derive(Clone, Default)]
pub(crate) struct View {
    /// The jobs that run here (releasing ones too), by id.
    pub jobs: Arc<HashMap<JobId, Arc<JobSeen>>>,
    /// This node's wall clock minus the login node's, as the last `Start` said.
    pub clock_skew_ms: Option<i64>,
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The counts of the jobs released, so node-wide counters never fall.
    pub retired: Totals,
}

//! The daemon task: the one owner of the node's jobs. It is fed one [`Input`] at a time
//! (starts and prepares from peers, control requests, reloads, what its background work
//! reports: admissions, mounts, records, teardowns, a job's news), changes each job's
//! [`JobState`] accordingly, and publishes a [`View`] after every change. It never waits
//! on I/O: admission, mounts, records and unmounts run in spawned tasks that report back
//! with an input, so a job's messages, `status` and the metrics never wait behind them.
//!
//! Ordering guarantees: a `Start`'s stream is held ([`super::state::Routed`]) until its
//! job is in the view (or refused), so the stream's next messages find the job; a job
//! pushed again by another push is released (record kept, mount gone) before the new one
//! starts; a stop is answered once the job's mount is gone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use peertree::relay::{JobId, Start};
use tokio::sync::{mpsc, oneshot, watch};

use super::DaemonConfig;
use super::plan::{OnStart, Seen, on_start};
use super::records::Released;
use super::state::{
    Input, JobSeen, JobState, Live, MountState, News, NextStart, Releasing, Routed, Starting, Step,
    View,
};
use crate::admit::Trust;
use crate::fs::copies::Copies;
use crate::metrics::{Metrics, Totals};
use crate::peers::Peers;
use crate::store::NodeStore;

/// How many passed-on `Prepare`s a daemon remembers.
const PREPARED_KEPT: usize = 1024;

/// The daemon task's state.
pub(crate) struct Task {
    pub(super) cfg: Arc<DaemonConfig>,
    pub(super) peers: Arc<Peers>,
    pub(super) store: Arc<NodeStore>,
    /// Passthrough copies of every job (`None` without passthrough).
    pub(super) copies: Option<Arc<Copies>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) jobs: HashMap<JobId, JobState>,
    /// The jobs whose `Prepare` was passed on, oldest first (at most [`PREPARED_KEPT`]).
    prepared: VecDeque<JobId>,
    /// The records of the last jobs released here, for `teesfs learn`.
    pub(super) released: Released,
    trust: Arc<Trust>,
    revoked: Arc<HashSet<manifest::IndexId>>,
    pub(super) clock_skew_ms: Option<i64>,
    metrics_addr: Option<std::net::SocketAddr>,
    /// The counts of the jobs released so far.
    retired: Totals,
    pub(super) serial: u64,
    /// For background work to report back.
    pub(super) me: mpsc::UnboundedSender<Input>,
    view: watch::Sender<View>,
    /// Set once the daemon stops: told when every job is torn down.
    stopping: Option<oneshot::Sender<()>>,
    /// Holds the mounted jobs' FUSE connections across restarts (`--keep-jobs`).
    pub(super) keeper: Option<Arc<crate::keeper::Keeper>>,
}

/// What the task is made of, besides its own state.
pub(crate) struct Parts {
    pub cfg: Arc<DaemonConfig>,
    pub peers: Arc<Peers>,
    pub store: Arc<NodeStore>,
    pub copies: Option<Arc<Copies>>,
    pub metrics: Arc<Metrics>,
    pub trust: Trust,
    pub revoked: HashSet<manifest::IndexId>,
    pub keeper: Option<Arc<crate::keeper::Keeper>>,
}

impl Task {
    /// A task with no jobs, publishing to `view`, reporting to itself through `me`.
    pub(crate) fn new(
        p: Parts,
        me: mpsc::UnboundedSender<Input>,
        view: watch::Sender<View>,
    ) -> Self {
        Self {
            cfg: p.cfg,
            peers: p.peers,
            store: p.store,
            copies: p.copies,
            metrics: p.metrics,
            jobs: HashMap::new(),
            prepared: VecDeque::new(),
            released: Released::default(),
            trust: Arc::new(p.trust),
            revoked: Arc::new(p.revoked),
            clock_skew_ms: None,
            metrics_addr: None,
            retired: Totals::default(),
            serial: 0,
            me,
            view,
            stopping: None,
            keeper: p.keeper,
        }
    }

    /// Runs until the daemon stops and every job is torn down.
    pub(crate) async fn run(mut self, mut inputs: mpsc::UnboundedReceiver<Input>) {
        while let Some(input) = inputs.recv().await {
            self.handle(input);
            self.publish();
            if self.stopping.is_some() && self.jobs.is_empty() {
                self.peers.close();
                let _ = std::fs::remove_file(&self.cfg.control);
                // Closed before `done`: once `stop` returns, nothing more is taken in.
                inputs.close();
                if let Some(done) = self.stopping.take() {
                    let _ = done.send(());
                }
                return;
            }
        }
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Start {
                from,
                job,
                start,
                routed,
            } => {
                tracing::debug!(%job, peer = %from, "start received");
                self.on_start(from, job, start, vec![routed]);
            }
            Input::Prepare { from, job, prepare } => self.prepare(&from, job, prepare),
            Input::Control {
                uid,
                request,
                reply,
            } => self.control(uid, request, reply),
            Input::AskRecord { from, job, reply } => self.ask_record(from, job, reply),
            Input::Reload {
                trust,
                revoked,
                done,
            } => {
                self.reload(trust, revoked);
                let _ = done.send(());
            }
            Input::Admitted {
                job,
                serial,
                outcome,
            } => self.admitted(job, serial, *outcome),
            Input::Mounted {
                job,
                serial,
                mounted,
            } => self.mounted(job, serial, mounted),
            Input::News { job, serial, news } => self.news(job, serial, news),
            Input::RecordKept {
                job,
                serial,
                record,
            } => self.record_kept(job, serial, record),
            Input::TornDown { job, serial } => self.torn_down(job, serial),
            Input::Unreachable { host } => self.unreachable(host),
            Input::Stray { job, from, msg } => self.stray(job, from, msg),
            Input::MetricsAt(addr) => self.metrics_addr = Some(addr),
            Input::Shutdown { done } => self.shutdown(done),
            Input::Adopt { job, adoption } => self.adopt(job, *adoption),
        }
    }

    /// Publishes the view: every running job, and the node's figures.
    pub(super) fn publish(&self) {
        let jobs = (self.jobs.iter())
            .filter_map(|(id, s)| s.live().map(|l| (*id, Arc::new(JobSeen::of(l)))))
            .collect();
        self.view.send_replace(View {
            jobs: Arc::new(jobs),
            clock_skew_ms: self.clock_skew_ms,
            metrics_addr: self.metrics_addr,
            retired: self.retired,
        });
    }

    /// A `Start` (and the streams waiting for it to be routed), by the job's state.
    pub(super) fn on_start(
        &mut self,
        from: String,
        job: JobId,
        start: Box<Start>,
        routed: Vec<Routed>,
    ) {
        if self.stopping.is_some() {
            return; // dropping `routed` lets the streams go on
        }
        let root = start.ancestors.last().map(|n| n.addr.clone());
        let next = NextStart {
            from,
            start,
            routed,
        };
        match on_start(seen(self.jobs.get(&job)), root.as_deref()) {
            OnStart::Admit { prepared } => self.admit(job, next, root, prepared),
            OnStart::Routed => {}
            OnStart::Join => match self.jobs.get_mut(&job) {
                Some(JobState::Starting(s)) => match &mut s.next {
                    Some(n) => n.routed.extend(next.routed),
                    None => s.routed.extend(next.routed),
                },
                Some(JobState::Releasing(r)) => {
                    if let Some(n) = &mut r.next {
                        n.routed.extend(next.routed);
                    }
                }
                _ => {}
            },
            OnStart::Queue => match self.jobs.get_mut(&job) {
                Some(JobState::Starting(s)) => s.next = Some(next),
                Some(JobState::Releasing(r)) => r.next = Some(next),
                _ => {}
            },
            OnStart::Replace => {
                if let Some(live) = self.jobs.get(&job).and_then(JobState::live) {
                    tracing::warn!(
                        %job,
                        old_root = live.root.as_deref().unwrap_or("?"),
                        new_root = root.as_deref().unwrap_or("?"),
                        "job pushed again by another push (a requeued Slurm job keeps its id): releasing the old one and starting the new one"
                    );
                }
                self.release(job, true, None, Some(next));
            }
        }
    }

    /// Admits a `Start` on the blocking pool; the job is `Starting` meanwhile.
    fn admit(&mut self, job: JobId, next: NextStart, root: Option<String>, prepared: bool) {
        self.serial += 1;
        let serial = self.serial;
        let owner = next.start.owner;
        let early = self.pass_on_early(job, &next.from, &next.start, prepared);
        super::launch::admit_in_background(
            self.me.clone(),
            (job, serial),
            (self.cfg.host.clone(), next.from, next.start),
            (self.trust.clone(), self.revoked.clone()),
        );
        let starting = Starting {
            serial,
            root,
            owner,
            prepared,
            routed: next.routed,
            stops: Vec::new(),
            next: None,
            early,
            inbox: Default::default(),
        };
        self.jobs
            .insert(job, JobState::Starting(Box::new(starting)));
    }

    /// A `Start` is admitted (or refused): the job is launched, unless a stop came
    /// meanwhile; then the streams waiting for it go on, and a queued `Start` is taken.
    fn admitted(&mut self, job: JobId, serial: u64, outcome: super::launch::Outcome) {
        use super::launch::Outcome;
        match self.jobs.get(&job) {
            Some(JobState::Starting(s)) if s.serial == serial => {}
            _ => return, // a stale report: that run of the job is gone
        }
        let Some(JobState::Starting(s)) = self.jobs.remove(&job) else {
            return;
        };
        let s = *s;
        let live = if !s.stops.is_empty() || self.stopping.is_some() {
            None
        } else {
            match outcome {
                Outcome::Refused { from, parent, why } => {
                    self.refuse(job, &from, parent.as_ref(), &why);
                    None
                }
                Outcome::Probe { from, start } => self.launch_probe(job, serial, &from, *start),
                Outcome::Job(mut a) => {
                    a.early = s.early;
                    self.launch(job, serial, *a, (s.prepared || s.early.is_some(), None))
                }
            }
        };
        let core = live.as_ref().map(|l| l.core.clone());
        if let Some(core) = &core {
            // Before the job is in the view: what came meanwhile comes first.
            s.inbox.replay(core);
        }
        if let Some(live) = live {
            self.jobs.insert(job, JobState::Running(Box::new(live)));
        }
        // The job is in the view before its streams go on, and before its task starts
        // sending: a child that holds the layer already answers its `Start` at once, and
        // that answer must find the job here (messages that come before the start wait
        // in the job's queue).
        self.publish();
        if let Some(core) = core {
            core.start();
        }
        drop(s.routed);
        for stop in s.stops {
            let _ = stop.send(stopped(job));
        }
        if let Some(n) = s.next {
            self.on_start(n.from, job, n.start, n.routed);
        }
    }

    /// A job's mount is made (or failed).
    fn mounted(&mut self, job: JobId, serial: u64, mounted: Option<crate::fs::mount::Mounted>) {
        let state = match mounted {
            Some(m) => MountState::Mounted(Box::new(m)),
            None => MountState::Off,
        };
        match self.jobs.get_mut(&job) {
            Some(JobState::Running(l)) if l.serial == serial => l.mount = state,
            Some(JobState::Releasing(r)) if r.live.serial == serial => {
                r.live.mount = state;
                if r.step == Step::WaitingForMount {
                    self.tear_down(job);
                }
            }
            // A mount outlives its job only if its report came after the job's teardown,
            // which waits for it: never. Unmounted all the same, off this task.
            _ => {
                if let MountState::Mounted(m) = state {
                    tokio::task::spawn_blocking(move || drop(m));
                }
            }
        }
    }

    /// What a running job's follower said.
    fn news(&mut self, job: JobId, serial: u64, news: News) {
        let Some(JobState::Running(l)) = self.jobs.get_mut(&job) else {
            return;
        };
        if l.serial != serial {
            return;
        }
        match news {
            News::Phase(p, t) => l.phases[p.index()] = Some(t),
            News::EdgeFailed => l.failed_edges += 1,
            News::ProbeOver => self.release(job, false, None, None),
            // As `teesfs release` would: its record kept, then its mount gone.
            News::Released => self.release(job, true, None, None),
        }
    }

    /// `systemctl reload` (SIGHUP): trusts `trust` and refuses `revoked` from now on.
    /// Running jobs are untouched (one whose index is now revoked is named in a warning).
    fn reload(&mut self, trust: Trust, revoked: HashSet<manifest::IndexId>) {
        for (job, live) in self.jobs.iter().filter_map(|(j, s)| Some((j, s.live()?))) {
            if revoked.contains(&live.core.index_id) {
                tracing::warn!(%job, index = %live.core.index_id.short(), "a running job's index is revoked now; end it with `teesfs release`");
            }
        }
        tracing::info!(
            keys = trust.keys.len(),
            revoked_ids = revoked.len(),
            "reloaded the trusted keys, the revoked indexes and the credentials"
        );
        self.trust = Arc::new(trust);
        self.revoked = Arc::new(revoked);
    }

    /// Stops: every job is released (without keeping records), or, with a keeper, left
    /// mounted for the next daemon if it is mounted; the task ends once all are gone.
    fn shutdown(&mut self, done: oneshot::Sender<()>) {
        self.stopping = Some(done);
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            if self.hand_over(job) {
                continue;
            }
            match self.jobs.get_mut(&job) {
                Some(JobState::Prepared) => {
                    self.jobs.remove(&job);
                }
                Some(JobState::Running(_)) => self.release(job, false, None, None),
                Some(JobState::Releasing(r)) => r.next = None,
                // Its admission reports back, and is not launched then.
                Some(JobState::Starting(s)) => s.next = None,
                None => {}
            }
        }
    }

    /// Remembers a passed-on `Prepare` (the oldest forgotten beyond [`PREPARED_KEPT`]);
    /// `false` if the job is known already.
    pub(super) fn note_prepared(&mut self, job: JobId) -> bool {
        if self.jobs.contains_key(&job) {
            return false;
        }
        if self.prepared.len() >= PREPARED_KEPT
            && let Some(old) = self.prepared.pop_front()
            && matches!(self.jobs.get(&old), Some(JobState::Prepared))
        {
            self.jobs.remove(&old);
        }
        self.prepared.push_back(job);
        self.jobs.insert(job, JobState::Prepared);
        true
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
    pub(super) fn fresh_links<'h>(&self, hosts: impl Iterator<Item = &'h str>) {
        let pushing: Vec<&Live> = (self.jobs.values().filter_map(JobState::live))
            .filter(|l| !l.core.view().finished)
            .collect();
        for host in hosts {
            if !pushing.iter().any(|l| l.core.has_peer(host)) {
                self.peers.forget(host);
            }
        }
    }

    /// Starts releasing a running job: `keep_record` first keeps what it recorded, `stop`
    /// is answered once its mount is gone, `next` starts then.
    pub(super) fn release(
        &mut self,
        job: JobId,
        keep_record: bool,
        stop: Option<super::state::Reply>,
        next: Option<NextStart>,
    ) {
        let Some(JobState::Running(live)) = self.jobs.remove(&job) else {
            return;
        };
        let keep = keep_record && !live.probe && live.record.is_some();
        let r = Releasing {
            live: *live,
            step: Step::KeepingRecord,
            stops: stop.into_iter().collect(),
            next,
        };
        if keep {
            self.keep_record(job, &r.live);
        }
        self.jobs.insert(job, JobState::Releasing(Box::new(r)));
        if !keep {
            self.tear_down(job);
        }
    }

    /// Tears a releasing job down in the background once its mount is made: its relay
    /// closed, its mount gone, its mountpoint removed, its chunks unpinned.
    pub(super) fn tear_down(&mut self, job: JobId) {
        let Some(JobState::Releasing(r)) = self.jobs.get_mut(&job) else {
            return;
        };
        if matches!(r.live.mount, MountState::Mounting) {
            r.step = Step::WaitingForMount;
            return;
        }
        r.step = Step::TearingDown;
        let mounted = std::mem::replace(&mut r.live.mount, MountState::Off);
        let (core, pin, serial) = (r.live.core.clone(), r.live.pin.take(), r.live.serial);
        let mountpoint = r.live.mountpoint.clone();
        let me = self.me.clone();
        let kept = (self.keeper.clone()).map(|k| (k, self.cfg.state_dir.clone()));
        tokio::spawn(async move {
            core.close();
            // No later daemon may take it up.
            if let Some((k, dir)) = kept {
                let forget = move || super::kept::forget(&dir, &k, job);
                let _ = tokio::task::spawn_blocking(forget).await;
            }
            if let MountState::Mounted(m) = mounted {
                let _ = tokio::task::spawn_blocking(move || drop(m)).await;
            }
            if !mountpoint.as_os_str().is_empty() {
                let _ = tokio::fs::remove_dir(&mountpoint).await;
            }
            // Nothing reads the job's chunks any more: they may be evicted from now on.
            drop(pin);
            let _ = me.send(Input::TornDown { job, serial });
        });
    }

    /// A job is torn down: it leaves (its counts stay in the node's totals), its stops are
    /// answered, and the `Start` that replaces it runs.
    fn torn_down(&mut self, job: JobId, serial: u64) {
        match self.jobs.get(&job) {
            Some(JobState::Releasing(r)) if r.live.serial == serial => {}
            _ => return,
        }
        let Some(JobState::Releasing(r)) = self.jobs.remove(&job) else {
            return;
        };
        if !r.live.probe {
            self.retired.add(&JobSeen::of(&r.live).totals());
        }
        // The job leaves the view before its stops are answered.
        self.publish();
        for stop in r.stops {
            let _ = stop.send(stopped(job));
        }
        if let Some(n) = r.next {
            self.on_start(n.from, job, n.start, n.routed);
        }
    }
}

/// What [`on_start`] needs to know of a job's state.
fn seen(state: Option<&JobState>) -> Seen<'_> {
    fn root(n: &Option<NextStart>) -> Option<Option<&str>> {
        n.as_ref()
            .map(|n| n.start.ancestors.last().map(|a| a.addr.as_str()))
    }
    match state {
        None => Seen::Absent,
        Some(JobState::Prepared) => Seen::Prepared,
        Some(JobState::Starting(s)) => Seen::Starting {
            root: s.root.as_deref(),
            next: root(&s.next),
        },
        Some(JobState::Running(l)) => Seen::Running {
            root: l.root.as_deref(),
        },
        Some(JobState::Releasing(r)) => Seen::Releasing {
            next: root(&r.next),
        },
    }
}

/// The answer to a stop.
pub(super) fn stopped(job: JobId) -> String {
    serde_json::json!({ "stopped": job.to_string() }).to_string()
}

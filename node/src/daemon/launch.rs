//! Launching a job: its `Start` is admitted on the blocking pool (the index's signature is
//! checked and decoded there, and a shared store opened: CPU and I/O the daemon task must
//! not wait on), then the task plans it ([`super::plan`]) and launches it: the relay, the
//! job's task, the follower of its events and, in the background, its mount. A health
//! probe is a job without index or chunks, never mounted, released once its root finishes
//! it (or after ten deadlines).

use std::sync::Arc;
use std::time::Instant;

use manifest::{Index, SignedIndex};
use peertree::relay::{Event, JobId, Msg, NodeInfo, Relay, Schedule, Start};
use tokio::sync::mpsc;

use super::plan::{Site, plan};
use super::state::{Input, Live, MountState, News};
use super::task::Task;
use crate::Error;
use crate::admit::{Admitted, Policy, Trust};
use crate::fs::record::Recorder;
use crate::job::{JobCore, TimedEvent};
use crate::net::StreamKind;
use crate::peers::Peers;

/// What the admission of a `Start` gave.
pub(crate) enum Outcome {
    /// Refused: the parent hears why.
    Refused {
        from: String,
        parent: Option<NodeInfo>,
        why: String,
    },
    /// A health probe.
    Probe { from: String, start: Box<Start> },
    /// A job, its index verified (and its shared store open, in shared-storage mode).
    Job(Box<Admission>),
}

/// An admitted job, ready to launch.
pub(crate) struct Admission {
    pub from: String,
    pub start: Start,
    pub signed: SignedIndex,
    pub index: Index,
    pub schedule: Arc<Schedule>,
    pub shared: Option<seeder::DirStore>,
    /// When the children's `Start`s were passed on before admission ([`super::early`]).
    pub early: Option<Instant>,
}

/// Admits `start` from `from` by `trust` and `revoked` on the blocking pool, and tells the
/// task the outcome.
pub(super) fn admit_in_background(
    me: mpsc::UnboundedSender<Input>,
    (job, serial): (JobId, u64),
    (host, from, start): (String, String, Box<Start>),
    (trust, revoked): (
        Arc<Trust>,
        Arc<std::collections::HashSet<manifest::IndexId>>,
    ),
) {
    tokio::task::spawn_blocking(move || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let policy = Policy {
            trusted: &trust.keys,
            owners: &trust.owners,
            revoked: &revoked,
            now,
        };
        let outcome = admission(
            crate::admit::admit(&start, &host, &from, &policy),
            from,
            start,
        );
        let _ = me.send(Input::Admitted {
            job,
            serial,
            outcome: Box::new(outcome),
        });
    });
}

/// The outcome of [`crate::admit::admit`]; a shared store is opened here, locked against gc.
pub(super) fn admission(
    admitted: Result<Admitted, Error>,
    from: String,
    start: Box<Start>,
) -> Outcome {
    let refused = |why: String, start: &Start| Outcome::Refused {
        from: from.clone(),
        parent: start.ancestors.first().cloned(),
        why,
    };
    let (signed, index, schedule) = match admitted {
        Ok(Admitted::Probe) => return Outcome::Probe { from, start },
        Ok(Admitted::Job {
            signed,
            index,
            schedule,
        }) => (signed, index, schedule),
        Err(Error::Manifest(e)) => return refused(format!("index rejected: {e}"), &start),
        Err(e) => return refused(e.to_string(), &start),
    };
    let shared = match &start.shared_store {
        Some(path) => match seeder::DirStore::open_for_a_job(std::path::Path::new(path)) {
            Ok(s) => Some(s),
            Err(e) => return refused(format!("shared store unusable: {e}"), &start),
        },
        None => None,
    };
    Outcome::Job(Box::new(Admission {
        from,
        start: *start,
        signed,
        index,
        schedule,
        shared,
        early: None,
    }))
}

impl Task {
    /// Refuses a job: logged, and its parent hears why at once ([`Msg::Refused`]), so the
    /// push names this node and the reason instead of waiting for its deadline; the parent
    /// drops only its own children.
    pub(super) fn refuse(&self, job: JobId, from: &str, parent: Option<&NodeInfo>, why: &str) {
        tracing::error!(%job, parent = %from, "refusing job: {why}");
        if let Some(p) = parent {
            let msg = Msg::Refused {
                reason: why.to_string(),
            };
            let frame = crate::peers::frame(job, &msg);
            self.peers
                .send(&p.host, &p.addr, StreamKind::Control, frame);
        }
    }

    /// Launches an admitted job: planned, its chunks pinned, its relay and task started,
    /// its events followed and its mount begun, or, for a job an earlier daemon left
    /// mounted, its connection served (`adopt`: the connection and the kernel's `FUSE_INIT`
    /// parameters). `None`: refused (the parent was told).
    pub(super) fn launch(
        &mut self,
        job: JobId,
        serial: u64,
        a: Admission,
        (prepared, adopt): (bool, Option<super::mounting::LiveFuse>),
    ) -> Option<Live> {
        let span = tracing::info_span!("job", %job);
        let _g = span.enter();
        let parent = a.start.ancestors.first().cloned();
        let refuse = |t: &Task, why: String| t.refuse(job, &a.from, parent.as_ref(), &why);
        let shared = a.shared.is_some();
        let site = Site {
            host: &self.cfg.host,
            mount: self.cfg.mount,
            mount_root: &self.cfg.mount_root,
        };
        let plan = plan(
            job,
            &a.start,
            (&a.from, prepared, shared),
            &site,
            crate::push::unix_ms_now(),
            &Peers::handshakes_take_turns,
        );
        let pin = match (!shared).then(|| self.store.pin(&a.index)).transpose() {
            Ok(p) => p,
            Err(no_room) => {
                refuse(self, no_room.to_string());
                return None;
            }
        };
        let owner = a.start.owner;
        let how = super::mounting::How::of(adopt, self.keeper.is_some(), &a);
        let push = a.schedule.clone();
        let mut relay = match Relay::new_node(a.start, a.schedule, Instant::now()) {
            Ok(r) => r,
            Err(e) => {
                refuse(self, e.to_string());
                return None;
            }
        };
        if let Some(at) = a.early {
            relay.starts_sent_early(at);
        }
        self.fresh_links(plan.fresh.iter().map(String::as_str));
        if plan.clock_skew_ms.is_some() {
            self.clock_skew_ms = plan.clock_skew_ms;
        }
        if !shared {
            self.hold_stored(&mut relay, &a.index);
        }
        let index = Arc::new(a.index);
        let bytes: Arc<dyn seeder::ChunkStore> = match &a.shared {
            Some(s) => Arc::new(s.clone()),
            None => self.store.clone(),
        };
        let (core, events) = JobCore::new(
            relay,
            index.clone(),
            a.signed.id(),
            self.peers.clone(),
            bytes,
            &plan.known,
            self.cfg.knobs,
        );
        if let (Some(origin), None) = (&self.cfg.origin, &a.shared) {
            core.use_origin(origin.clone());
        }
        let record = plan.record.then(|| {
            let r = Recorder::default().counting(core.activity());
            // The daemon's applications are active: pushed chunks yield them its CPU.
            let r = match self.peers.bulk_gate() {
                Some(g) => r.counting(g.uses()),
                None => r,
            };
            Arc::new(r)
        });
        tracing::info!(index = %a.signed.id().short(), parent = %a.from, "job accepted");
        // Not started here: the task starts it once the job is in the view
        // ([`Task::admitted`]), so its children's first answers find it.
        if !shared {
            core.follow_losses(self.store.watch());
        }
        let mut live = Live::new(serial, core, owner, plan.root.clone());
        (live.record, live.pin) = (record, pin);
        if let Some(mp) = &plan.mountpoint {
            (live.mount, live.mountpoint) = (MountState::Mounting, mp.clone());
        }
        self.follow(job, serial, &live, events);
        self.mount_job(
            (job, serial),
            &live,
            (index, a.signed.id(), a.shared, push),
            plan,
            how,
        );
        Some(live)
    }

    /// Chunks kept from earlier jobs are not sent again: the relay holds them, and tells
    /// the parent so.
    fn hold_stored(&self, relay: &mut Relay, index: &Index) {
        let store = &self.store;
        relay.hold_existing(
            (0u32..)
                .zip(&index.chunks)
                .filter(|(_, c)| store.contains(&c.id))
                .map(|(p, _)| peertree::relay::ChunkNo(p)),
        );
    }

    /// A health probe: answered and forwarded to the children; released once the root
    /// finished it (or, if it never hears so, after ten deadlines; a rates probe's ten
    /// deadlines count from when its filler is all here).
    pub(super) fn launch_probe(
        &mut self,
        job: JobId,
        serial: u64,
        from: &str,
        start: Start,
    ) -> Option<Live> {
        let probe = match crate::rates_probe::ProbeJob::of_start(&start.index, self.cfg.knobs) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(parent = %from, %job, "refusing probe: {e}");
                return None;
            }
        };
        let mut known = start.subtree.clone();
        known.extend(start.ancestors.iter().cloned());
        let lifetime = std::time::Duration::from_millis(u64::from(start.timing.deadline_ms) * 10);
        // Its push's `Start` again (an ancestor's, after the parent failed) is the same probe.
        let root = start.ancestors.last().map(|n| n.addr.clone());
        let relay = match Relay::new_node(start, probe.schedule, Instant::now()) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(parent = %from, %job, "refusing probe: {e}");
                return None;
            }
        };
        let (core, mut events) = JobCore::new(
            relay,
            probe.index,
            probe.index_id,
            self.peers.clone(),
            probe.bytes,
            &known,
            probe.knobs,
        );
        tracing::debug!(%job, parent = %from, "health probe");
        let me = self.me.clone();
        let filler = probe.knobs.filler;
        tokio::spawn(async move {
            // A rates probe first takes its filler in, however long that takes (the
            // relay's own liveness ends it if the root is gone).
            let held = !filler
                || async {
                    while let Some((_, ev)) = events.recv().await {
                        match ev {
                            Event::LocalPhaseDone(peertree::relay::Phase::All) => return true,
                            Event::Finished | Event::RootGone(_) => return false,
                            _ => {}
                        }
                    }
                    false
                }
                .await;
            if held {
                let finished = async {
                    while let Some((_, ev)) = events.recv().await {
                        if ev == Event::Finished {
                            return;
                        }
                    }
                };
                let _ = tokio::time::timeout(lifetime, finished).await;
            }
            // `Finished` is already queued for the children (the relay's messages are
            // handed to the links before its events), and the links outlive the probe.
            let news = News::ProbeOver;
            let _ = me.send(Input::News { job, serial, news });
        });
        let mut live = Live::new(serial, core, None, root);
        live.probe = true;
        Some(live)
    }

    /// Follows a job's events until they end: logged, and what the task keeps (phases
    /// held, edges failed) told to it.
    fn follow(
        &self,
        job: JobId,
        serial: u64,
        live: &Live,
        events: mpsc::UnboundedReceiver<TimedEvent>,
    ) {
        let f = follow_events(
            (job, serial, self.me.clone()),
            live.core.clone(),
            live.record.clone(),
            live.started,
            events,
        );
        tokio::spawn(tracing::Instrument::instrument(
            f,
            tracing::info_span!("job", %job),
        ));
    }
}

/// Logs what happens to a job on this node (phases held, parents lost, children failed,
/// corrupt chunks) until its events end, and tells the task what it keeps.
async fn follow_events(
    (job, serial, me): (JobId, u64, mpsc::UnboundedSender<Input>),
    core: Arc<JobCore>,
    record: Option<Arc<Recorder>>,
    started: Instant,
    mut events: mpsc::UnboundedReceiver<TimedEvent>,
) {
    let tell = |news| {
        let _ = me.send(Input::News { job, serial, news });
    };
    while let Some((at, ev)) = events.recv().await {
        match ev {
            Event::LocalPhaseDone(p) => {
                let t = at.saturating_duration_since(started).as_secs_f64();
                if let (peertree::relay::Phase::All, Some(r)) = (p, &record) {
                    // The job has started by now or reads local data: opens from here on
                    // say nothing about what should come first.
                    r.close_window();
                }
                tracing::info!(phase = ?p, seconds = t, "holding phase");
                tell(News::Phase(p, t));
            }
            Event::ParentLost(p) => {
                tell(News::EdgeFailed);
                tracing::warn!(parent = %core.host_of(p), "parent lost; re-attaching")
            }
            Event::Reattached(p) => tracing::warn!(parent = %core.host_of(p), "re-attached"),
            Event::ChildFailed(c) => {
                tell(News::EdgeFailed);
                tracing::warn!(child = %core.host_of(c), "child failed")
            }
            Event::BadChunk { from, chunk } => {
                tracing::error!(from = %core.host_of(from), chunk = %chunk, "peer sent a corrupt chunk")
            }
            Event::RootGone(asks) => tracing::warn!(
                asks,
                "the push's root is gone (it never answered): no longer asking it; the job \
                 keeps serving what it holds, and reads of the rest fail until it is released"
            ),
            Event::Released => {
                tracing::warn!(
                    "the push's root released the job (the push failed before the job \
                     started; passed on to this node's children): releasing it here"
                );
                tell(News::Released);
            }
            _ => {}
        }
    }
}

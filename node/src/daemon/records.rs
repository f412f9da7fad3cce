//! What a job used while it started, kept past the job's end: releasing a job (the Slurm
//! epilog) unmounts it, but its record is what `teesfs learn` (the EpilogSlurmctld, which
//! runs after every node's epilog) merges into the layer's urgent set. So the daemon keeps
//! the records of its last few released jobs ([`Released`], bounded in jobs and bytes) and
//! answers for them as for running jobs: on the control socket (`record JOB`) and to a
//! login node that asks over the network ([`peertree::relay::Msg::AskRecord`]). A record
//! is resolved and encoded off the daemon task, on the blocking pool.

use std::collections::VecDeque;
use std::sync::Arc;

use peertree::relay::{JobId, Msg, Phase};

use super::state::{Input, JobState, Live, MountState, Step};
use super::task::Task;
use crate::control::{JobRecord, LayerPath, RecordAnswer};
use crate::fs::record::Recorder;
use crate::job::JobCore;
use crate::net::StreamKind;

/// Released jobs whose records are kept.
pub(crate) const RELEASED_KEPT: usize = 16;
/// Path bytes the kept records may hold together (a record alone may hold a million paths).
pub(crate) const RELEASED_BYTES: usize = 64 << 20;

/// The records of the last released jobs, newest last, within [`RELEASED_KEPT`] jobs and
/// [`RELEASED_BYTES`] of paths: the oldest go first.
#[derive(Debug, Default)]
pub struct Released {
    jobs: VecDeque<(JobId, Option<u32>, Arc<JobRecord>)>,
    bytes: usize,
}

fn path_bytes(r: &JobRecord) -> usize {
    r.files
        .iter()
        .chain(&r.absent)
        .map(|p| p.0.len() + 16)
        .sum()
}

impl Released {
    /// Keeps the record of `job` (owned by `owner`), in place of an older one of the same
    /// job; a record larger than the whole budget is not kept.
    pub fn keep(&mut self, job: JobId, owner: Option<u32>, record: Arc<JobRecord>) {
        if let Some(i) = self.jobs.iter().position(|(j, ..)| *j == job)
            && let Some((.., old)) = self.jobs.remove(i)
        {
            self.bytes -= path_bytes(&old);
        }
        let size = path_bytes(&record);
        if size > RELEASED_BYTES {
            tracing::warn!(%job, bytes = size, "the job's record is too large to keep after its release");
            return;
        }
        while self.jobs.len() >= RELEASED_KEPT || self.bytes + size > RELEASED_BYTES {
            match self.jobs.pop_front() {
                Some((.., old)) => self.bytes -= path_bytes(&old),
                None => break,
            }
        }
        self.bytes += size;
        self.jobs.push_back((job, owner, record));
    }

    /// The kept record of `job` and the job's owner.
    pub fn get(&self, job: JobId) -> Option<(Option<u32>, Arc<JobRecord>)> {
        self.jobs
            .iter()
            .rev()
            .find(|(j, ..)| *j == job)
            .map(|(_, o, r)| (*o, r.clone()))
    }
}

/// Where a job's record comes from: the running job's recorder, or the record kept at
/// its release.
pub(super) enum RecordSource {
    /// A running (or releasing) job's: resolved on the blocking pool when asked.
    Live {
        core: Arc<JobCore>,
        record: Option<Arc<Recorder>>,
        mounted: bool,
    },
    /// Kept at the job's release.
    Kept(Arc<JobRecord>),
}

impl RecordSource {
    /// The record, resolved off the task that asks (it can hold a million paths).
    pub(super) async fn resolve(self, host: String) -> Option<Arc<JobRecord>> {
        match self {
            RecordSource::Kept(r) => Some(r),
            RecordSource::Live {
                core,
                record,
                mounted,
            } => {
                let job = core.job;
                let resolved = tokio::task::spawn_blocking(move || {
                    job_record(&core, record.as_deref(), mounted, host)
                })
                .await;
                match resolved {
                    Ok(rec) => Some(Arc::new(rec)),
                    Err(e) => {
                        tracing::warn!(%job, error = %e, "resolving the job's record failed");
                        None
                    }
                }
            }
        }
    }
}

impl Task {
    /// The record of `job` and the job's owner: the running job's, else the one kept at
    /// its release. `None`: no such job here lately.
    pub(super) fn record_source(&self, job: JobId) -> Option<(Option<u32>, RecordSource)> {
        match self.jobs.get(&job).and_then(JobState::live) {
            Some(l) if !l.probe => Some((
                l.owner,
                RecordSource::Live {
                    core: l.core.clone(),
                    record: l.record.clone(),
                    mounted: matches!(l.mount, MountState::Mounted(_)),
                },
            )),
            _ => (self.released.get(job)).map(|(owner, r)| (owner, RecordSource::Kept(r))),
        }
    }

    /// Keeps the record of a job being released (before its mount goes), resolved on the
    /// blocking pool; the task hears of it with [`Input::RecordKept`], whatever happens.
    pub(super) fn keep_record(&self, job: JobId, live: &Live) {
        let source = RecordSource::Live {
            core: live.core.clone(),
            record: live.record.clone(),
            mounted: false,
        };
        let (host, me, serial) = (self.cfg.host.clone(), self.me.clone(), live.serial);
        tokio::spawn(async move {
            let record = source.resolve(host).await.map(|r| {
                let mut rec = Arc::unwrap_or_clone(r);
                // Kept as it is once the job is gone from this node.
                rec.released = true;
                rec.mounted = false;
                tracing::debug!(%job, files = rec.files.len(), "record kept after the release");
                rec
            });
            let _ = me.send(Input::RecordKept {
                job,
                serial,
                record,
            });
        });
    }

    /// A releasing job's record is resolved: kept while the job still answers for itself,
    /// so whoever asks for it (`teesfs learn` beside the epilogs) finds it in one place or
    /// the other, never in neither; then the job is torn down.
    pub(super) fn record_kept(&mut self, job: JobId, serial: u64, record: Option<JobRecord>) {
        let owner = match self.jobs.get(&job) {
            Some(JobState::Releasing(r))
                if r.live.serial == serial && r.step == Step::KeepingRecord =>
            {
                r.live.owner
            }
            _ => return,
        };
        match record {
            Some(rec) => self.released.keep(job, owner, Arc::new(rec)),
            None => tracing::warn!(%job, "the job's record could not be kept"),
        }
        self.tear_down(job);
    }

    /// Answers a [`Msg::AskRecord`] from `from_host`: its record of `job` (or why there is
    /// none) to `reply`. Any peer with a cluster certificate may ask, as any may push a job
    /// here; the record names only layer paths.
    pub(super) fn ask_record(&self, from_host: String, job: JobId, reply: String) {
        let source = self.record_source(job).map(|(_, s)| s);
        let (host, peers) = (self.cfg.host.clone(), self.peers.clone());
        tokio::spawn(async move {
            let record = match source {
                Some(s) => s.resolve(host.clone()).await,
                None => None,
            };
            let answer = match record {
                Some(rec) => RecordAnswer::Record(Box::new((*rec).clone())),
                None => RecordAnswer::Missing {
                    host,
                    error: format!("no job {job} on this node, running or released lately"),
                },
            };
            let json = match tokio::task::spawn_blocking(move || serde_json::to_vec(&answer)).await
            {
                Ok(Ok(j)) => j,
                Ok(Err(e)) => return tracing::warn!(%job, error = %e, "cannot encode a record"),
                Err(e) => return tracing::warn!(%job, error = %e, "cannot encode a record"),
            };
            tracing::info!(%job, asker = %from_host, bytes = json.len(), "record sent");
            let frame = crate::peers::frame(job, &Msg::Record { json });
            peers.send(&from_host, &reply, StreamKind::Control, frame);
        });
    }
}

/// One job's record as `record JOB` answers it. Resolving a large record's paths takes a
/// while: call it off the tasks that carry the network.
pub(super) fn job_record(
    core: &JobCore,
    record: Option<&Recorder>,
    mounted: bool,
    host: String,
) -> JobRecord {
    let rec = record.map(|r| r.recording(&core.index)).unwrap_or_default();
    let paths = |v: Vec<Vec<u8>>| v.into_iter().map(LayerPath).collect();
    JobRecord {
        job: core.job.to_string(),
        host,
        index: core.index_id.to_hex(),
        recording: record.is_some(),
        mounted,
        whole_layer: core.holds(Phase::All),
        files: paths(rec.opened),
        file_bytes: rec.opened_bytes,
        absent: paths(rec.absent),
        dropped: rec.dropped,
        released: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(job: u64, paths: usize, len: usize) -> Arc<JobRecord> {
        Arc::new(JobRecord {
            job: JobId(job).to_string(),
            host: "n01".into(),
            index: "ab".into(),
            recording: true,
            mounted: false,
            whole_layer: true,
            files: (0..paths).map(|_| LayerPath(vec![b'x'; len])).collect(),
            file_bytes: 0,
            absent: Vec::new(),
            dropped: 0,
            released: true,
        })
    }

    #[test]
    fn the_last_released_jobs_are_kept_within_their_count_and_bytes() {
        let mut r = Released::default();
        for j in 0..(RELEASED_KEPT as u64 + 3) {
            r.keep(JobId(j), Some(1000), rec(j, 2, 10));
        }
        assert_eq!(r.jobs.len(), RELEASED_KEPT);
        assert!(r.get(JobId(0)).is_none(), "the oldest went first");
        let (owner, last) = r.get(JobId(RELEASED_KEPT as u64 + 2)).expect("newest");
        assert_eq!((owner, last.files.len()), (Some(1000), 2));
        // The same job again replaces its record.
        r.keep(JobId(5), None, rec(5, 7, 10));
        assert_eq!(r.jobs.len(), RELEASED_KEPT);
        assert_eq!(r.get(JobId(5)).expect("kept").1.files.len(), 7);
        // A large record pushes the old ones out; one larger than the budget is not kept.
        let big = RELEASED_BYTES / (1 << 16);
        r.keep(JobId(100), None, rec(100, big / 2, (1 << 16) - 16));
        r.keep(JobId(101), None, rec(101, big / 2 + 1, (1 << 16) - 16));
        assert!(r.get(JobId(100)).is_none() && r.get(JobId(101)).is_some());
        assert!(r.bytes <= RELEASED_BYTES);
        r.keep(JobId(102), None, rec(102, big + 1, (1 << 16) - 16));
        assert!(r.get(JobId(102)).is_none());
        assert!(
            r.get(JobId(101)).is_some(),
            "a refused record evicts nothing"
        );
    }
}

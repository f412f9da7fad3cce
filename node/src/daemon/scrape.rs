//! What a metrics scrape reads from the daemon ([`crate::metrics`]): the store, the
//! links and the jobs, and the counts of the jobs that left. This module only reads the
//! daemon's state; what the endpoint tells and to whom is decided in
//! [`crate::metrics::endpoint`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Daemon, NodeJob, lock};
use crate::metrics::endpoint::{EndpointConfig, SampleFn, serve};
use crate::metrics::{JobSample, Sample, Totals};

impl NodeJob {
    /// The job's traffic counts, as the metrics show them.
    fn totals(&self) -> Totals {
        Totals::of(
            &self.core.counters(),
            self.failed_edges.load(Ordering::Relaxed),
        )
    }
}

impl Daemon {
    /// `job` left the job table: its counts stay in the node's totals. Call it with the
    /// table locked, so that a scrape never sees the job in neither place (a node-wide
    /// counter that falls reads as a restart).
    pub(super) fn retire(&self, job: &NodeJob) {
        if !job.probe {
            self.metrics.retire(&job.totals());
        }
    }

    /// The daemon as a metrics scrape sees it: the store, the links, every job but health
    /// probes, and the counts of the jobs released. Walks each job's chunk list: call it
    /// off the network's tasks.
    pub(crate) fn metrics_sample(&self) -> Sample {
        let (jobs, mut totals) = {
            let table = lock(&self.jobs);
            let jobs: Vec<Arc<NodeJob>> = table.values().filter(|j| !j.probe).cloned().collect();
            (jobs, self.metrics.retired())
        };
        let jobs: Vec<JobSample> = jobs
            .iter()
            .map(|j| {
                let (mut chunks, mut bytes) = (0u64, 0u64);
                for c in &j.core.index.chunks {
                    if self.store.contains(&c.id) {
                        chunks += 1;
                        bytes += u64::from(c.stored_len);
                    }
                }
                let phases = *lock(&j.phases);
                JobSample {
                    // Decimal, as Slurm shows a job id (`--job-id $SLURM_JOB_ID`).
                    job: j.core.job.0.to_string(),
                    store_bytes: bytes,
                    store_chunks: chunks,
                    totals: j.totals(),
                    urgent_s: phases[0],
                    all_s: phases[1],
                    read_waits: j.read_waits.clone(),
                }
            })
            .collect();
        for j in &jobs {
            totals.add(&j.totals);
        }
        Sample {
            store_bytes: self.store.bytes(),
            store_chunks: self.store.len() as u64,
            store_budget: self.cfg.store_budget,
            store_pinned: self.store.pinned_bytes(),
            store_cached: self.store.cached_bytes(),
            peer_links: self.peers.link_count() as u64,
            refused: self.metrics.refused(),
            totals,
            read_waits: Some(self.metrics.read_waits()),
            renders: 0,
            jobs,
        }
    }

    /// Serves `GET /metrics` on `listener` (`teesfs daemon --metrics`) for the daemon's
    /// life, telling what `cfg` allows to whom it allows.
    pub fn serve_metrics(&self, listener: tokio::net::TcpListener, cfg: EndpointConfig) {
        *lock(&self.metrics_addr) = listener.local_addr().ok();
        let me = self.me.clone();
        let sample: SampleFn = Arc::new(move || me.upgrade().map(|d| d.metrics_sample()));
        self.rt.spawn(serve(listener, sample, cfg));
    }
}

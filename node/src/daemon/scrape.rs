//! What a metrics scrape reads from the daemon ([`crate::metrics`]): the store, the
//! links, the jobs in the daemon task's view, and the counts of the jobs that left (in the
//! same view, so a scrape never sees a job in neither place: a node-wide counter that
//! falls reads as a restart). This module only reads; what the endpoint tells and to whom
//! is decided in [`crate::metrics::endpoint`].

use std::sync::Arc;

use super::Shared;
use crate::metrics::endpoint::{EndpointConfig, SampleFn, serve};
use crate::metrics::{JobSample, Sample};

impl Shared {
    /// The daemon as a metrics scrape sees it: the store, the links, every job but health
    /// probes, and the counts of the jobs released. Walks each job's chunk list: call it
    /// off the network's tasks.
    pub(crate) fn metrics_sample(&self) -> Sample {
        let view = self.view.borrow().clone();
        let mut totals = view.retired;
        let jobs: Vec<JobSample> = (view.jobs.values())
            .filter(|j| !j.probe)
            .map(|j| {
                let (mut chunks, mut bytes) = (0u64, 0u64);
                for c in &j.core.index.chunks {
                    if self.store.contains(&c.id) {
                        chunks += 1;
                        bytes += u64::from(c.stored_len);
                    }
                }
                JobSample {
                    // Decimal, as Slurm shows a job id (`--job-id $SLURM_JOB_ID`).
                    job: j.core.job.0.to_string(),
                    store_bytes: bytes,
                    store_chunks: chunks,
                    totals: j.totals(),
                    urgent_s: j.phases[0],
                    all_s: j.phases[1],
                    read_waits: j.read_waits.clone(),
                }
            })
            .collect();
        for j in &jobs {
            totals.add(&j.totals);
        }
        let gate = self.peers.bulk_gate();
        let (cpu_quota, bulk_yielded_s) = crate::bulk_gate::BulkGate::figures(gate.as_deref());
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
            cpu_quota,
            bulk_yielded_s,
            jobs,
        }
    }

    /// Serves `GET /metrics` on `listener` for the daemon's life, telling what `cfg`
    /// allows to whom it allows.
    pub(super) fn serve_metrics(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        cfg: EndpointConfig,
    ) {
        if let Ok(addr) = listener.local_addr() {
            let _ = self.inputs.send(super::state::Input::MetricsAt(addr));
        }
        let me = Arc::downgrade(self);
        let sample: SampleFn = Arc::new(move || me.upgrade().map(|d| d.metrics_sample()));
        tokio::spawn(serve(listener, sample, cfg));
    }
}

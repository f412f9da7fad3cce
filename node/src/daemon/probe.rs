//! Health probes at a node: a job without index or chunks, answered and forwarded down
//! the tree, never mounted, and dropped once the root finishes it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use peertree::relay::{Event, JobId, Relay, Schedule, Start};

use super::{Daemon, NodeJob, lock};
use crate::job::JobCore;

impl Daemon {
    /// A health probe: answer, forward to the children, and drop the job once the root
    /// finished it (or, if it never hears so, after ten deadlines).
    pub(super) fn start_probe(&self, from_host: &str, job: JobId, start: Start) {
        let schedule = Arc::new(Schedule::new(Vec::new(), 0, Vec::new()).expect("empty"));
        let mut known = start.subtree.clone();
        known.extend(start.ancestors.iter().cloned());
        let lifetime = std::time::Duration::from_millis(u64::from(start.timing.deadline_ms) * 10);
        let relay = match Relay::new_node(start, schedule, Instant::now()) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(parent = %from_host, %job, "refusing probe: {e}");
                return;
            }
        };
        let (index, index_id) = crate::health::empty_index();
        let (core, mut events) = JobCore::new(
            relay,
            index,
            index_id,
            self.peers.clone(),
            Arc::new(crate::health::NoChunks),
            &known,
            crate::job::JobKnobs::default(),
        );
        let nj = Arc::new(NodeJob {
            core: core.clone(),
            mounted: Mutex::new(None),
            mountpoint: PathBuf::new(),
            started: Instant::now(),
            phases: Mutex::new([None, None]),
            owner: None,
            probe: true,
            record: None,
            root: None,
            failed_edges: Default::default(),
            read_waits: crate::metrics::read_wait_histogram(),
            pin: None,
        });
        lock(&self.jobs).insert(job, nj);
        tracing::debug!(%job, parent = %from_host, "health probe");
        core.start();
        let me = self.me.clone();
        self.rt.spawn(async move {
            let finished = async {
                while let Some((_, ev)) = events.recv().await {
                    if ev == Event::Finished {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(lifetime, finished).await;
            // `Finished` is already queued for the children (the relay's messages are
            // handed to the links before its events), and the links outlive the probe.
            core.close();
            if let Some(d) = me.upgrade() {
                lock(&d.jobs).remove(&job);
            }
        });
    }
}

//! Low-priority work for the rest of the layer. A node verifies and stores the chunks of the
//! hysteretic set on a few worker threads under `SCHED_IDLE`: they run only when the node's
//! CPUs have nothing else to do, so the job's own processes starting up (and the urgent set,
//! demand answers and heartbeats, handled on the runtime's normal threads) come first. The
//! queue is bounded; when it is full the work is done at once by the caller instead, so
//! memory stays bounded and the push still completes on a node that is never idle.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::mpsc;

/// One piece of bulk work.
pub type Work = Box<dyn FnOnce() + Send>;

/// Work queued at the most (about this many chunks wait in memory).
const QUEUE: usize = 64;

/// The process's bulk workers.
pub struct BulkWorkers {
    queue: mpsc::Sender<Work>,
    idle: bool,
}

impl BulkWorkers {
    /// The process's workers, started on first use.
    pub fn get() -> &'static BulkWorkers {
        static WORKERS: OnceLock<BulkWorkers> = OnceLock::new();
        WORKERS.get_or_init(BulkWorkers::start)
    }

    fn start() -> BulkWorkers {
        let (queue, rx) = mpsc::channel::<Work>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .max(1);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for i in 0..threads {
            let rx = rx.clone();
            let ready = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("teesfs-bulk-{i}"))
                .spawn(move || {
                    let _ = ready.send(lower_priority());
                    // The starter counts answers until every sender is gone.
                    drop(ready);
                    loop {
                        let work = match rx.lock() {
                            Ok(mut rx) => rx.blocking_recv(),
                            Err(_) => return,
                        };
                        match work {
                            Some(work) => work(),
                            None => return,
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a bulk worker; bulk work runs inline");
            }
        }
        drop(ready_tx);
        // Idle only if every worker that started got SCHED_IDLE.
        let idle = ready_rx.iter().all(|ok| ok);
        if !idle {
            tracing::warn!("bulk workers run at normal priority (SCHED_IDLE refused)");
        }
        BulkWorkers { queue, idle }
    }

    /// Runs `work` on a worker, or at once on this thread when the queue is full or no worker
    /// runs.
    pub fn run(&self, work: Work) {
        if let Err(e) = self.queue.try_send(work) {
            (e.into_inner())();
        }
    }

    /// Whether the workers run under `SCHED_IDLE`.
    pub fn idle(&self) -> bool {
        self.idle
    }
}

/// Puts this thread under `SCHED_IDLE`; whether that worked.
fn lower_priority() -> bool {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_an_idle_priority_thread() {
        let workers = BulkWorkers::get();
        assert!(workers.idle(), "SCHED_IDLE needs no privilege on Linux");
        let (tx, rx) = std::sync::mpsc::channel();
        workers.run(Box::new(move || {
            let name = std::thread::current().name().map(str::to_string);
            let policy = thread_priority::thread_schedule_policy().ok();
            let _ = tx.send((name, policy));
        }));
        let (name, policy) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the work ran");
        assert!(name.is_some_and(|n| n.starts_with("teesfs-bulk-")));
        assert_eq!(
            policy,
            Some(thread_priority::ThreadSchedulePolicy::Normal(
                thread_priority::NormalThreadSchedulePolicy::Idle
            ))
        );
    }
}

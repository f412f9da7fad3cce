//! The daemon's control socket: accepts local clients (their uid from the kernel), bounds
//! them ([`crate::control::Admission`], owned by the accept loop), reads one request per
//! line and answers with one JSON line. `status` and `job` are answered from the daemon
//! task's view; `record` and `stop` are the task's to answer ([`Input::Control`]), a
//! record resolved and encoded on the blocking pool (it can hold a million paths), a stop
//! once the job's mount is gone. What a request means and who may make it is decided in
//! [`crate::control`]; this module only moves lines and asks.

use std::sync::Arc;
use std::time::Duration;

use peertree::relay::JobId;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::Shared;
use super::state::{Input, JobState, Reply};
use super::task::Task;
use crate::control::{Admission, ControlError, JobOwner, MAX_LINE, Request, authorize};

/// How long a control connection may sit without sending a request line.
const CONTROL_IDLE: Duration = Duration::from_secs(10);

/// An error as a control answer.
fn error(e: &dyn std::fmt::Display) -> String {
    serde_json::json!({ "error": e.to_string() }).to_string()
}

/// Serves the control socket until the daemon stops (never returns without one).
pub(super) async fn control_loop(shared: Arc<Shared>, listener: Option<tokio::net::UnixListener>) {
    let Some(listener) = listener else {
        return std::future::pending().await;
    };
    // Out of file descriptors or memory, accept fails at once: back off instead of
    // spinning, and warn now and then rather than every time.
    let mut backoff = crate::accept::AcceptBackoff::default();
    let mut admission = Admission::default();
    let (leaving, mut left) = mpsc::unbounded_channel();
    loop {
        let stream = tokio::select! {
            accepted = crate::accept::accept_with_backoff("control socket", &mut backoff, || {
                listener.accept()
            }) => accepted.0,
            Some(uid) = left.recv() => {
                admission.leave(uid);
                continue;
            }
        };
        let uid = match stream.peer_cred() {
            Ok(cred) => cred.uid(),
            Err(e) => {
                tracing::warn!(error = %e, "control client without credentials; dropped");
                continue;
            }
        };
        let Some(ticket) = admission.enter(uid, &leaving) else {
            tracing::debug!(uid, "control connection refused: this user holds its share");
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            control_client(&shared, stream, uid).await;
            drop(ticket);
        });
    }
}

async fn control_client(shared: &Shared, stream: tokio::net::UnixStream, uid: u32) {
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = tokio::time::timeout(
            CONTROL_IDLE,
            (&mut reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf),
        )
        .await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(_)) => {}
        }
        if buf.last() != Some(&b'\n') && buf.len() > MAX_LINE {
            let reply = error(&ControlError::TooLong);
            let _ = w.write_all(format!("{reply}\n").as_bytes()).await;
            return;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            let reply = error(&ControlError::NotText);
            let _ = w.write_all(format!("{reply}\n").as_bytes()).await;
            return;
        };
        let reply = match Request::parse(line) {
            Err(e) => error(&e),
            Ok(req) => answer(shared, uid, req).await,
        };
        if w.write_all(reply.as_bytes()).await.is_err() || w.write_all(b"\n").await.is_err() {
            return;
        }
    }
}

/// The answer to one request of `uid`.
async fn answer(shared: &Shared, uid: u32, req: Request) -> String {
    let refused = |e: ControlError| {
        tracing::warn!(uid, request = ?req, "control request refused");
        error(&e)
    };
    match req {
        Request::Status => match authorize(uid, req, JobOwner::Unknown) {
            Err(e) => refused(e),
            Ok(()) => serde_json::to_string(&shared.status_of(uid)).unwrap_or_else(|e| error(&e)),
        },
        Request::Job(id) => {
            let job = shared.view.borrow().jobs.get(&id).cloned();
            let owner = job
                .as_ref()
                .map_or(JobOwner::Unknown, |j| JobOwner::Owned(j.owner));
            match (authorize(uid, req, owner), job) {
                (Err(e), _) => refused(e),
                (Ok(()), Some(j)) => {
                    serde_json::to_string(&super::job_status(&j)).unwrap_or_else(|e| error(&e))
                }
                (Ok(()), None) => error(&"no such job"),
            }
        }
        Request::Record(_) | Request::Stop(_) => {
            let (reply, answer) = oneshot::channel();
            let asked = Input::Control {
                uid,
                request: req,
                reply,
            };
            if shared.inputs.send(asked).is_err() {
                return error(&"the daemon is stopping");
            }
            answer
                .await
                .unwrap_or_else(|_| error(&"the daemon is stopping"))
        }
    }
}

impl Task {
    /// A `record` or `stop` request of `uid`, authorized by the job's owner.
    pub(super) fn control(&mut self, uid: u32, req: Request, reply: Reply) {
        let Some(job) = req.job() else {
            let _ = reply.send(error(&"not a request for the daemon task"));
            return;
        };
        let owner = match (req, self.jobs.get(&job)) {
            (_, Some(JobState::Running(l))) => JobOwner::Owned(l.owner),
            (_, Some(JobState::Releasing(r))) => JobOwner::Owned(r.live.owner),
            (Request::Stop(_), Some(JobState::Starting(s))) => JobOwner::Owned(s.owner),
            // A released job's record is still asked for (`record JOB`).
            (Request::Record(_), _) => {
                (self.released.get(job)).map_or(JobOwner::Unknown, |(o, _)| JobOwner::Owned(o))
            }
            _ => JobOwner::Unknown,
        };
        if let Err(e) = authorize(uid, req, owner) {
            tracing::warn!(uid, request = ?req, "control request refused");
            let _ = reply.send(error(&e));
            return;
        }
        match req {
            Request::Stop(_) => {
                tracing::info!(uid, %job, "job stopped on request");
                self.stop(job, reply);
            }
            _ => self.answer_record(job, reply),
        }
    }

    /// Ends a job on this node (`stop`/`release`, e.g. from the Slurm epilog): keeps its
    /// record, stops relaying it, unmounts it and removes its mountpoint, then answers.
    /// Chunks stay in the store.
    fn stop(&mut self, job: JobId, reply: Reply) {
        match self.jobs.get_mut(&job) {
            Some(JobState::Running(_)) => self.release(job, true, Some(reply), None),
            Some(JobState::Releasing(r)) => {
                // Released on request: a push queued to replace it does not start.
                r.next = None;
                r.stops.push(reply);
            }
            // Not launched once admitted: answered then.
            Some(JobState::Starting(s)) => {
                s.next = None;
                s.stops.push(reply);
            }
            Some(JobState::Prepared) | None => {
                let _ = reply.send(error(&"no such job"));
            }
        }
    }

    /// Answers `record JOB`: resolved and encoded off the task.
    fn answer_record(&self, job: JobId, reply: Reply) {
        let Some((_, source)) = self.record_source(job) else {
            let _ = reply.send(error(&"no such job"));
            return;
        };
        let host = self.cfg.host.clone();
        tokio::spawn(async move {
            let line = match source.resolve(host).await {
                Some(rec) => {
                    let encoded =
                        tokio::task::spawn_blocking(move || serde_json::to_string(&*rec)).await;
                    match encoded {
                        Ok(Ok(line)) => line,
                        Ok(Err(e)) => error(&e),
                        Err(e) => error(&e),
                    }
                }
                None => error(&"no such job"),
            };
            let _ = reply.send(line);
        });
    }
}

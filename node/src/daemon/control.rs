//! The daemon's control socket server: accepts local clients (their uid from the kernel),
//! bounds them ([`crate::control::Admission`]), reads one request per line and
//! answers with one JSON line (a job's record, of a running job or one released lately, is
//! resolved and encoded on a blocking thread: it can hold a million paths). What a request means and who may make it is decided in
//! [`crate::control`]; this module only moves lines.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{Daemon, job_status, lock};

/// How long a control connection may sit without sending a request line.
const CONTROL_IDLE: Duration = Duration::from_secs(10);

impl Daemon {
    /// Serves the control socket until the daemon stops (never returns without one).
    pub(super) async fn control_loop(self: Arc<Self>, listener: Option<tokio::net::UnixListener>) {
        let Some(listener) = listener else {
            return std::future::pending().await;
        };
        // Out of file descriptors or memory, accept fails at once: back off instead of
        // spinning, and warn now and then rather than every time.
        let mut backoff = crate::accept::AcceptBackoff::default();
        loop {
            let (stream, _) =
                crate::accept::accept_with_backoff("control socket", &mut backoff, || {
                    listener.accept()
                })
                .await;
            let uid = match stream.peer_cred() {
                Ok(cred) => cred.uid(),
                Err(e) => {
                    tracing::warn!(error = %e, "control client without credentials; dropped");
                    continue;
                }
            };
            let Some(ticket) = crate::control::Admission::enter(&self.admission, uid) else {
                tracing::debug!(uid, "control connection refused: this user holds its share");
                continue;
            };
            let this = self.clone();
            tokio::spawn(async move {
                this.control_client(stream, uid).await;
                drop(ticket);
            });
        }
    }

    async fn control_client(self: Arc<Self>, stream: tokio::net::UnixStream, uid: u32) {
        use crate::control::{ControlError, JobOwner, MAX_LINE, Request, authorize};
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
            let error = |e: &dyn std::fmt::Display| {
                serde_json::json!({ "error": e.to_string() }).to_string()
            };
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
                Ok(req) => {
                    let job = req.job().and_then(|j| lock(&self.jobs).get(&j).cloned());
                    // A released job's record is still asked for (`record JOB`).
                    let released = match (req, &job) {
                        (Request::Record(id), None) => lock(&self.released).get(id),
                        _ => None,
                    };
                    let owner = match (&job, &released) {
                        (Some(j), _) => JobOwner::Owned(j.owner),
                        (None, Some((o, _))) => JobOwner::Owned(*o),
                        (None, None) => JobOwner::Unknown,
                    };
                    match (authorize(uid, req, owner), req, job) {
                        (Err(e), ..) => {
                            tracing::warn!(uid, request = ?req, "control request refused");
                            error(&e)
                        }
                        (Ok(()), Request::Status, _) => serde_json::to_string(&self.status_of(uid))
                            .unwrap_or_else(|e| error(&e)),
                        (Ok(()), Request::Job(_), Some(j)) => {
                            serde_json::to_string(&job_status(&j)).unwrap_or_else(|e| error(&e))
                        }
                        (Ok(()), Request::Record(id), _) => match self.record_of(id).await {
                            Some((_, rec)) => {
                                let line = tokio::task::spawn_blocking(move || {
                                    serde_json::to_string(&*rec)
                                })
                                .await;
                                match line {
                                    Ok(Ok(line)) => line,
                                    Ok(Err(e)) => error(&e),
                                    Err(e) => error(&e),
                                }
                            }
                            None => error(&"no such job"),
                        },
                        (Ok(()), Request::Stop(id), Some(_)) => {
                            tracing::info!(uid, job = %id, "job stopped on request");
                            self.stop_job(id).await;
                            serde_json::json!({ "stopped": id.to_string() }).to_string()
                        }
                        (Ok(()), _, None) => error(&"no such job"),
                    }
                }
            };
            if w.write_all(reply.as_bytes()).await.is_err() || w.write_all(b"\n").await.is_err() {
                return;
            }
        }
    }
}

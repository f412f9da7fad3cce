//! The daemon's control protocol and who may use it: one request per line on a Unix socket,
//! one JSON reply per line.
//!
//! Requests: `status` (the daemon and every job), `status <job id>` (one job), `stop <job id>`
//! or `release <job id>` (leave the job on this node: unmount it and stop relaying it). The socket is open to every
//! local user; the daemon learns the caller's uid from the kernel (`SO_PEERCRED`) and
//! [`authorize`] decides: root may do anything, another user only per-job requests about jobs
//! it owns. A job's owner is the uid that started it; until the job's start message carries it,
//! jobs have no owner and only root may touch them.
//!
//! Parsing and the decision are pure; the daemon does the I/O.

use peertree::relay::JobId;

/// A parsed control request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The daemon and all its jobs.
    Status,
    /// One job.
    Job(JobId),
    /// Leave one job on this node.
    Stop(JobId),
}

impl Request {
    /// Parses one request line.
    pub fn parse(line: &str) -> Result<Request, String> {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let job = words.next();
        if let Some(extra) = words.next() {
            return Err(format!("unexpected {extra:?} after the job id"));
        }
        let has_job = job.is_some();
        let job = |what: &str| -> Result<JobId, String> {
            let text = job.ok_or_else(|| format!("`{what}` needs a job id"))?;
            u64::from_str_radix(text, 16)
                .map(JobId)
                .map_err(|_| format!("{text:?} is not a job id (16 hex digits)"))
        };
        match verb {
            "status" if !has_job => Ok(Request::Status),
            "status" => job("status").map(Request::Job),
            // `release` is what the Slurm epilog's `teesfs release` sends.
            "stop" | "release" => job(verb).map(Request::Stop),
            "" => Err("empty request; try `status`".into()),
            other => Err(format!(
                "unknown command {other:?}; try `status`, `status JOB` or `stop JOB`"
            )),
        }
    }

    /// The job the request is about, if one.
    pub fn job(self) -> Option<JobId> {
        match self {
            Request::Status => None,
            Request::Job(j) | Request::Stop(j) => Some(j),
        }
    }
}

/// What the daemon knows about a job named in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOwner {
    /// No such job on this node.
    Unknown,
    /// The job exists; its owner's uid, if known.
    Owned(Option<u32>),
}

/// Whether the local user `uid` may make `request`; `owner` describes the job it names. The
/// refusal is the text sent back. A non-root caller asking about a job it does not own is told
/// the same as for a job that does not exist, so job ids of other users cannot be probed.
pub fn authorize(uid: u32, request: Request, owner: JobOwner) -> Result<(), String> {
    if uid == 0 {
        return match (request.job(), owner) {
            (Some(job), JobOwner::Unknown) => Err(format!("no job {job} on this node")),
            _ => Ok(()),
        };
    }
    match (request.job(), owner) {
        (None, _) => Err(format!(
            "permission denied: only root may list every job (uid {uid}); ask about your own job \
             with `status JOB`"
        )),
        (Some(_), JobOwner::Owned(Some(o))) if o == uid => Ok(()),
        (Some(job), _) => Err(format!(
            "no job {job} of uid {uid} on this node (permission denied for other users' jobs)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const J: JobId = JobId(0xabc);

    #[test]
    fn requests_parse_and_bad_ones_are_named() {
        assert_eq!(Request::parse("status"), Ok(Request::Status));
        assert_eq!(
            Request::parse(" status 0000000000000abc "),
            Ok(Request::Job(J))
        );
        assert_eq!(Request::parse("stop abc"), Ok(Request::Stop(J)));
        assert_eq!(Request::parse("release abc"), Ok(Request::Stop(J)));
        for (bad, says) in [
            ("", "empty"),
            ("stop", "needs a job id"),
            ("status xyz", "not a job id"),
            ("status 1 2", "unexpected"),
            ("mount 1", "unknown command"),
        ] {
            let err = Request::parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn root_may_do_anything_to_existing_jobs() {
        for req in [Request::Status, Request::Job(J), Request::Stop(J)] {
            for owner in [None, Some(1000)] {
                assert_eq!(authorize(0, req, JobOwner::Owned(owner)), Ok(()));
            }
        }
        assert!(authorize(0, Request::Stop(J), JobOwner::Unknown).is_err());
    }

    #[test]
    fn other_users_reach_only_their_own_jobs() {
        let me = 1000;
        assert!(authorize(me, Request::Status, JobOwner::Unknown).is_err());
        for req in [Request::Job(J), Request::Stop(J)] {
            assert_eq!(authorize(me, req, JobOwner::Owned(Some(me))), Ok(()));
            let theirs = authorize(me, req, JobOwner::Owned(Some(1001))).expect_err("other's");
            let ownerless = authorize(me, req, JobOwner::Owned(None)).expect_err("no owner");
            let missing = authorize(me, req, JobOwner::Unknown).expect_err("missing");
            // Indistinguishable, so other users' job ids cannot be probed.
            assert_eq!(theirs, missing);
            assert_eq!(ownerless, missing);
        }
    }
}

//! The daemon's control protocol and who may use it: one request per line on a Unix socket,
//! one JSON reply per line.
//!
//! Requests: `status` (the daemon and every job), `status <job id>` (one job), `stop <job id>`
//! or `release <job id>` (leave the job on this node: unmount it and stop relaying it),
//! `record <job id>` (the files the job used while it started, as a [`JobRecord`]; also of
//! a job released lately). Job ids
//! on the wire are 16 hex digits (`JobId::hex`, whatever the release). The socket is open to every local
//! user; the daemon learns the caller's uid from the kernel (`SO_PEERCRED`) and [`authorize`]
//! decides: root may do anything, another user only per-job requests about jobs it owns,
//! and its `status` lists only those jobs ([`sees`]). A job's owner is the uid the push named
//! (`push --owner`, the Slurm prolog's `$SLURM_JOB_UID`), carried by the job's start message;
//! a job without one is root's alone.
//!
//! Parsing and the decision are pure; the daemon does the I/O.

use std::collections::HashMap;

use peertree::relay::JobId;

/// The longest request line read; a longer one is refused unread.
pub(crate) const MAX_LINE: usize = 4096;
/// Control connections one non-root user may hold at once.
pub(crate) const MAX_PER_UID: usize = 8;
/// Control connections all non-root users may hold at once.
pub(crate) const MAX_USERS: usize = 64;
/// Control connections kept for root whatever other users do, so `teesfs status` and the
/// Slurm epilog's release always get through.
pub(crate) const MAX_ROOT: usize = 16;

/// Why a control request was refused. The text is sent back, and never repeats what the
/// caller sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// An empty line.
    #[error("empty request; try `status`")]
    Empty,
    /// A verb the daemon does not know.
    #[error("unknown command; try `status`, `status JOB`, `stop JOB` or `record JOB`")]
    UnknownCommand,
    /// A per-job verb without a job id.
    #[error("`{0}` needs a job id")]
    NeedsJob(&'static str),
    /// A job id that is not 16 hex digits.
    #[error("not a job id (16 hex digits)")]
    BadJobId,
    /// Words after the job id.
    #[error("unexpected words after the job id")]
    TooManyWords,
    /// A line longer than [`MAX_LINE`].
    #[error("request longer than {MAX_LINE} bytes; refused")]
    TooLong,
    /// A request line that is not UTF-8.
    #[error("request is not text")]
    NotText,
    /// Root named a job this node does not run.
    #[error("no job {0} on this node")]
    NoJob(JobId),
    /// A user named a job that is not theirs, or that does not exist (the same answer).
    #[error("no job {job} of uid {uid} on this node (permission denied for other users' jobs)")]
    NotYours {
        /// The job named.
        job: JobId,
        /// The caller.
        uid: u32,
    },
}

/// A parsed control request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The daemon and all its jobs.
    Status,
    /// One job.
    Job(JobId),
    /// Leave one job on this node.
    Stop(JobId),
    /// What one job used while it started ([`JobRecord`]).
    Record(JobId),
}

impl Request {
    /// Parses one request line.
    pub fn parse(line: &str) -> Result<Request, ControlError> {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let job = words.next();
        if words.next().is_some() {
            return Err(ControlError::TooManyWords);
        }
        let has_job = job.is_some();
        let job = |what: &'static str| -> Result<JobId, ControlError> {
            let text = job.ok_or(ControlError::NeedsJob(what))?;
            u64::from_str_radix(text, 16)
                .map(JobId)
                .map_err(|_| ControlError::BadJobId)
        };
        match verb {
            "status" if !has_job => Ok(Request::Status),
            "status" => job("status").map(Request::Job),
            // `release` is what the Slurm epilog's `teesfs release` sends.
            "stop" => job("stop").map(Request::Stop),
            "release" => job("release").map(Request::Stop),
            "record" => job("record").map(Request::Record),
            "" => Err(ControlError::Empty),
            _ => Err(ControlError::UnknownCommand),
        }
    }

    /// The job the request is about, if one.
    pub fn job(self) -> Option<JobId> {
        match self {
            Request::Status => None,
            Request::Job(j) | Request::Stop(j) | Request::Record(j) => Some(j),
        }
    }
}

/// The request line (without its newline), as [`Request::parse`] reads it.
impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Status => write!(f, "status"),
            Request::Job(j) => write!(f, "status {}", j.hex()),
            Request::Stop(j) => write!(f, "stop {}", j.hex()),
            Request::Record(j) => write!(f, "record {}", j.hex()),
        }
    }
}

/// The answer to `record JOB`: the files a job used on this node while it started, in order
/// of first use, for the next publish's urgent set (`teesfs record --from-job`).
///
/// Kept are the files opened through the job's mount until the node held the whole layer,
/// and any file a read of which had to wait for a chunk, whenever that happened (see
/// [`crate::fs::record`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    /// The job as `JobId` shows it (a Slurm job's number in decimal).
    pub job: String,
    /// This node.
    pub host: String,
    /// The index the job mounts (hex).
    pub index: String,
    /// Whether this node records the job: false for a relay-only daemon and for a job read
    /// from shared storage (nothing is pushed, so nothing waits).
    pub recording: bool,
    /// Whether the job's layer is mounted here yet.
    pub mounted: bool,
    /// Whether this node holds the whole layer (from then on only reads that wait add files).
    pub whole_layer: bool,
    /// The files, in order of first use.
    pub files: Vec<LayerPath>,
    /// Their total size.
    pub file_bytes: u64,
    /// Names the job looked up that the layer does not have, in order.
    pub absent: Vec<LayerPath>,
    /// Accesses left out because the record was full
    /// ([`crate::fs::record::MAX_RECORDED`]).
    pub dropped: u64,
    /// Whether the job was released on this node: this is its record as it was then (the
    /// daemon keeps those of its last few released jobs for `teesfs learn`).
    #[serde(default)]
    pub released: bool,
}

/// The answer to [`peertree::relay::Msg::AskRecord`] (`teesfs learn` asking a node over
/// the network): the node's record of the job, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum RecordAnswer {
    /// The record.
    Record(Box<JobRecord>),
    /// No record: the node does not run the job and has not released it lately.
    Missing {
        /// The node.
        host: String,
        /// Why, for the operator.
        error: String,
    },
}

/// A path in the layer, relative to its root. In JSON a string when it is UTF-8, else an
/// array of its bytes, so no name is mangled on its way to an urgent list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "PathText", into = "PathText")]
pub struct LayerPath(pub Vec<u8>);

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum PathText {
    Text(String),
    Bytes(Vec<u8>),
}

impl From<PathText> for LayerPath {
    fn from(p: PathText) -> Self {
        match p {
            PathText::Text(s) => LayerPath(s.into_bytes()),
            PathText::Bytes(b) => LayerPath(b),
        }
    }
}

impl From<LayerPath> for PathText {
    fn from(p: LayerPath) -> Self {
        match String::from_utf8(p.0) {
            Ok(s) => PathText::Text(s),
            Err(e) => PathText::Bytes(e.into_bytes()),
        }
    }
}

/// The version of [`Status`] and [`JobStatus`]: raised when a field changes meaning or goes
/// away; fields are only ever added within one version.
pub const STATUS_VERSION: u32 = 1;

/// The daemon's state, the answer to `status` on the control socket and what
/// `teesfs status --format json` prints: the daemon and the jobs the caller may see.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// Host name.
    pub host: String,
    /// Listening address.
    pub listen: String,
    /// Bytes in the chunk store.
    pub store_bytes: u64,
    /// Chunks in the chunk store.
    pub store_chunks: usize,
    /// The store's budget.
    pub store_budget: u64,
    /// What the running jobs pin: their layers' chunks, kept from eviction (held or still
    /// to come; absent from daemons before pinning).
    #[serde(default)]
    pub store_pinned: u64,
    /// Bytes held that no running job pins (kept from earlier jobs, evicted first).
    #[serde(default)]
    pub store_cached: u64,
    /// Of the chunks in the store, the raw ones kept where a passthrough copy made ahead
    /// wrote them (linked, not written twice); absent from daemons before they were.
    #[serde(default)]
    pub store_placed: usize,
    /// This node's wall clock minus the login node's, in milliseconds, as measured when the
    /// last job arrived (the job's `Start` carries the root's clock; its transit time is
    /// included, so a few milliseconds to a second are no skew). `null` before any job.
    #[serde(default)]
    pub clock_skew_ms: Option<i64>,
    /// Where the daemon serves Prometheus metrics (`daemon --metrics`), if it does.
    #[serde(default)]
    pub metrics: Option<String>,
    /// The CPU quota of the daemon's cgroup in cores, `null` for none
    /// ([`crate::bulk_gate`]).
    #[serde(default)]
    pub cpu_quota_cores: Option<f64>,
    /// Seconds pushed chunks waited so far so that applications on the mounts got the
    /// daemon's CPU (under a quota only).
    #[serde(default)]
    pub bulk_yielded_s: f64,
    /// Jobs.
    pub jobs: Vec<JobStatus>,
}

/// One job in [`Status`], and the answer to `status JOB`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobStatus {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// Job id as `JobId` shows it: a Slurm job's number in decimal, else 16 hex digits.
    pub job: String,
    /// Index id.
    pub index: String,
    /// Parent host (empty while re-attaching).
    pub parent: String,
    /// Children hosts.
    pub children: Vec<String>,
    /// Chunks held / in the layer.
    pub have: usize,
    /// Chunks in the layer.
    pub chunks: usize,
    /// Seconds after the job arrived when this node held the urgent set.
    pub urgent_s: Option<f64>,
    /// Seconds after the job arrived when this node held everything.
    pub all_s: Option<f64>,
    /// Where the layer is mounted.
    pub mountpoint: String,
    /// Whether the root declared the push finished.
    pub finished: bool,
    /// The uid that owns the job (may query and stop it besides root), if known.
    pub owner: Option<u32>,
    /// Traffic counters.
    pub counters: crate::job::JobCounters,
    /// The container image's config, when the job's signed index is an image (`teesfs run
    /// --image` and the Slurm plugin's image jobs follow it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageStatus>,
}

/// The image config of a job's index, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ImageStatus {
    /// `Env`: `NAME=value`, in the config's order.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
    /// `User`.
    pub user: Option<String>,
}

impl From<&manifest::ImageConfig> for ImageStatus {
    fn from(c: &manifest::ImageConfig) -> Self {
        Self {
            env: c.env.clone(),
            entrypoint: c.entrypoint.clone(),
            cmd: c.cmd.clone(),
            working_dir: c.working_dir.clone(),
            user: c.user.clone(),
        }
    }
}

/// What the daemon knows about a job named in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobOwner {
    /// No such job on this node.
    Unknown,
    /// The job exists; its owner's uid, if known.
    Owned(Option<u32>),
}

/// Whether the local user `uid` may make `request`; `owner` describes the job it names. The
/// refusal is the text sent back. A non-root caller asking about a job it does not own is told
/// the same as for a job that does not exist, so job ids of other users cannot be probed.
pub(crate) fn authorize(uid: u32, request: Request, owner: JobOwner) -> Result<(), ControlError> {
    if uid == 0 {
        return match (request.job(), owner) {
            (Some(job), JobOwner::Unknown) => Err(ControlError::NoJob(job)),
            _ => Ok(()),
        };
    }
    match (request.job(), owner) {
        // Answered with the caller's own jobs only (see [`sees`]).
        (None, _) => Ok(()),
        (Some(_), JobOwner::Owned(Some(o))) if o == uid => Ok(()),
        (Some(job), _) => Err(ControlError::NotYours { job, uid }),
    }
}

/// Whether a `status` of the local user `uid` lists a job owned by `owner`: root sees every
/// job, another user the jobs it owns.
pub fn sees(uid: u32, owner: Option<u32>) -> bool {
    uid == 0 || owner == Some(uid)
}

/// Who holds control connections: a user gets at most [`MAX_PER_UID`], all users together
/// [`MAX_USERS`], and root has [`MAX_ROOT`] of its own, so no local user can take the
/// control socket (or the daemon's file descriptors) from root or from other users.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    per_uid: HashMap<u32, usize>,
    users: usize,
    root: usize,
}

/// One admitted connection; leaving is dropping it, which tells the accept loop that
/// owns the [`Admission`].
#[derive(Debug)]
pub(crate) struct Ticket {
    left: tokio::sync::mpsc::UnboundedSender<u32>,
    uid: u32,
}

impl Admission {
    /// Admits a connection of `uid`, or `None` when its share is used up. The ticket tells
    /// `left` when the connection ends: [`Admission::leave`] it then.
    pub fn enter(
        &mut self,
        uid: u32,
        left: &tokio::sync::mpsc::UnboundedSender<u32>,
    ) -> Option<Ticket> {
        if uid == 0 {
            if self.root >= MAX_ROOT {
                return None;
            }
            self.root += 1;
        } else {
            let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
            if mine >= MAX_PER_UID || self.users >= MAX_USERS {
                return None;
            }
            self.users += 1;
            self.per_uid.insert(uid, mine + 1);
        }
        Some(Ticket {
            left: left.clone(),
            uid,
        })
    }

    /// A connection of `uid` ended (its ticket was dropped).
    pub fn leave(&mut self, uid: u32) {
        if uid == 0 {
            self.root = self.root.saturating_sub(1);
            return;
        }
        self.users = self.users.saturating_sub(1);
        if let Some(n) = self.per_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.per_uid.remove(&uid);
            }
        }
    }

    /// Connections held by `uid` now.
    #[cfg(test)]
    pub fn held(&self, uid: u32) -> usize {
        if uid == 0 {
            self.root
        } else {
            self.per_uid.get(&uid).copied().unwrap_or(0)
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = self.left.send(self.uid);
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
        assert_eq!(Request::parse("record abc"), Ok(Request::Record(J)));
        for (bad, says) in [
            ("", "empty"),
            ("stop", "needs a job id"),
            ("status xyz", "not a job id"),
            ("status 1 2", "unexpected"),
            ("release", "`release` needs a job id"),
            ("record", "`record` needs a job id"),
            ("mount 1", "unknown command"),
        ] {
            let err = Request::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn every_request_reads_back_from_its_line() {
        for req in [
            Request::Status,
            Request::Job(J),
            Request::Stop(J),
            Request::Record(J),
        ] {
            assert_eq!(Request::parse(&req.to_string()), Ok(req));
        }
    }

    #[test]
    fn record_paths_survive_json_whatever_their_bytes() {
        let rec = JobRecord {
            job: J.to_string(),
            host: "n01".into(),
            index: "ab".into(),
            recording: true,
            mounted: true,
            whole_layer: false,
            files: vec![
                LayerPath(b"usr/lib/libc.so.6".to_vec()),
                LayerPath(b"opt/\xff\xfe-latin1".to_vec()),
            ],
            file_bytes: 12,
            absent: vec![LayerPath("opt/ü".as_bytes().to_vec())],
            dropped: 0,
            released: false,
        };
        let json = serde_json::to_string(&rec).expect("serialize");
        assert!(json.contains(r#""usr/lib/libc.so.6""#), "{json}");
        assert!(json.contains(r#""opt/ü""#), "{json}");
        let back: JobRecord = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, rec);
    }

    #[test]
    fn root_may_do_anything_to_existing_jobs() {
        for req in [
            Request::Status,
            Request::Job(J),
            Request::Stop(J),
            Request::Record(J),
        ] {
            for owner in [None, Some(1000)] {
                assert_eq!(authorize(0, req, JobOwner::Owned(owner)), Ok(()));
            }
        }
        assert!(authorize(0, Request::Stop(J), JobOwner::Unknown).is_err());
    }

    #[test]
    fn other_users_reach_only_their_own_jobs() {
        let me = 1000;
        // `status` is answered, with the caller's own jobs only.
        assert_eq!(authorize(me, Request::Status, JobOwner::Unknown), Ok(()));
        assert!(sees(me, Some(me)));
        assert!(!sees(me, Some(1001)));
        assert!(!sees(me, None), "an ownerless job is root's");
        assert!(sees(0, None) && sees(0, Some(me)));
        for req in [Request::Job(J), Request::Stop(J), Request::Record(J)] {
            assert_eq!(authorize(me, req, JobOwner::Owned(Some(me))), Ok(()));
            let theirs = authorize(me, req, JobOwner::Owned(Some(1001))).expect_err("other's");
            let ownerless = authorize(me, req, JobOwner::Owned(None)).expect_err("no owner");
            let missing = authorize(me, req, JobOwner::Unknown).expect_err("missing");
            // Indistinguishable, so other users' job ids cannot be probed.
            assert_eq!(theirs, missing);
            assert_eq!(ownerless, missing);
        }
    }

    #[test]
    fn control_errors_do_not_echo_the_request() {
        for bad in ["SECRET", "status SECRET", "status 1 SECRET", "stop SECRET"] {
            let err = Request::parse(bad).expect_err(bad).to_string();
            assert!(!err.contains("SECRET"), "{bad:?} echoed: {err}");
        }
    }

    #[test]
    fn control_connections_are_capped_per_user_and_for_all_users_with_roots_share_kept() {
        let (left, mut gone) = tokio::sync::mpsc::unbounded_channel();
        let mut a = Admission::default();
        let mine: Vec<Ticket> = (0..MAX_PER_UID)
            .map(|_| a.enter(1000, &left).expect("within the share"))
            .collect();
        assert!(a.enter(1000, &left).is_none(), "a user's share is capped");
        let mut others = Vec::new();
        for uid in 2000.. {
            match a.enter(uid, &left) {
                Some(t) => others.push(t),
                None => break,
            }
        }
        assert_eq!(
            mine.len() + others.len(),
            MAX_USERS,
            "users together are capped"
        );
        let root: Vec<Ticket> = (0..MAX_ROOT)
            .map(|_| a.enter(0, &left).expect("root's share is kept"))
            .collect();
        assert!(a.enter(0, &left).is_none());
        let mut leave = |a: &mut Admission| {
            while let Ok(uid) = gone.try_recv() {
                a.leave(uid);
            }
        };
        drop(mine);
        leave(&mut a);
        assert_eq!(a.held(1000), 0);
        assert!(a.enter(1000, &left).is_some(), "leaving frees the share");
        leave(&mut a);
        drop(root);
        leave(&mut a);
        assert_eq!(a.held(0), 0);
    }
}

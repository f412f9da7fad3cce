//! Jobs that outlive their daemon (`--keep-jobs`, [`crate::keeper`]): every mounted job
//! has a record in `<state-dir>/kept/<job>.job` from its mount to its release. A daemon
//! that starts takes up every job whose record and FUSE connection it gets back, checked
//! and admitted again (`take_up`), and runs it as a launched job whose mount is served on
//! the connection it had; any other record or connection is dropped and its mount
//! detached as a stale one, the log saying why.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use peertree::relay::{JobId, Msg, Start};

use super::launch::{Admission, Outcome};
use super::state::{JobState, MountState};
use super::task::Task;
use crate::Error;
use crate::keeper::Keeper;
use keeper::fuse::InitParams;

/// The first line of a record.
const MAGIC: &str = "teesfs kept job 1";

/// What a restarted daemon needs to take a job up again: the header's fields, and the
/// `Start` its parent sent (the signed index inside).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Record {
    pub job: JobId,
    /// The host the job's `Start` came from.
    pub from: String,
    pub mountpoint: PathBuf,
    pub init: InitParams,
    #[serde(skip)]
    pub start: Option<Start>,
}

impl Record {
    /// The record's bytes: the small fields, then the encoded `Start`.
    pub fn encode(&self) -> Vec<u8> {
        let start = (self.start.clone()).map(|s| Msg::Start(Box::new(s)).encode());
        keeper::record::encode(MAGIC, self, &start.unwrap_or_default())
    }

    /// A record from its bytes, every part checked against the others.
    pub fn decode(bytes: &[u8]) -> Result<Record, Error> {
        let (mut r, body) = keeper::record::decode::<Record>(MAGIC, bytes)?;
        match Msg::decode(body) {
            Ok(Msg::Start(s)) if s.job == r.job => r.start = Some(*s),
            Ok(_) => return Err(Error::KeptRecord("its Start is for another job".into())),
            Err(e) => return Err(Error::KeptRecord(format!("its Start is unreadable: {e}"))),
        }
        Ok(r)
    }
}

/// Where the records are.
pub(crate) fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("kept")
}

/// The record of `job`, and its key at the keeper.
pub(crate) fn path(state_dir: &Path, job: JobId) -> PathBuf {
    dir(state_dir).join(format!("{job}.job"))
}

/// Writes `record` atomically, in a private directory.
pub(crate) fn write(state_dir: &Path, record: &Record) -> std::io::Result<()> {
    keeper::record::write(&path(state_dir, record.job), &record.encode())
}

/// Removes the record of `job` and has the keeper drop its connection: the job is gone,
/// and a daemon that starts later must not take it up.
pub(crate) fn forget(state_dir: &Path, keeper: &Keeper, job: JobId) {
    let _ = std::fs::remove_file(path(state_dir, job));
    if let Err(e) = keeper.forget(&job.to_string()) {
        tracing::warn!(%job, error = %e, "the keeper could not be told the job ended");
    }
}

/// A job to take up: its record, admitted again, and its live FUSE connection.
pub(crate) struct Adoption {
    pub admission: Admission,
    pub fuse: OwnedFd,
    pub init: InitParams,
    pub mountpoint: PathBuf,
}

/// What the node needs to check a record: its paths and what it trusts.
pub(crate) struct Checks<'a> {
    pub state_dir: &'a Path,
    pub mount_root: &'a Path,
    pub host: &'a str,
    pub policy: crate::admit::Policy<'a>,
}

/// Every job this node can take up from its state directory and its keeper; every other
/// record and connection is dropped, and the log says why. The mounts of the jobs returned
/// must be spared by the stale-mount cleaning.
pub(crate) fn take_up(keeper: &Keeper, c: &Checks<'_>) -> Vec<(JobId, Adoption)> {
    let mut held = match keeper.held() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot get the jobs' FUSE connections back from the keeper: their mounts are detached");
            Vec::new()
        }
    };
    let mut out = Vec::new();
    let files = std::fs::read_dir(dir(c.state_dir)).into_iter().flatten();
    for f in files.flatten() {
        let p = f.path();
        if p.extension().is_none_or(|e| e != "job") {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        let name = p.file_stem().map(|s| s.to_string_lossy().into_owned());
        let fuse = (held.iter().position(|(k, _)| Some(k) == name.as_ref()))
            .map(|i| held.swap_remove(i).1);
        match take_up_one(&p, fuse, c) {
            Ok((job, a)) => out.push((job, a)),
            Err(why) => {
                tracing::error!(record = %p.display(), "{why}: not taken up; its mount is detached");
                let _ = std::fs::remove_file(&p);
                if let Some(key) = name {
                    let _ = keeper.forget(&key);
                }
            }
        }
    }
    for (key, _) in held {
        tracing::warn!(
            key,
            "the keeper held a FUSE connection without a record: dropped"
        );
        let _ = keeper.forget(&key);
    }
    out
}

/// One record, checked, with its connection; why not.
fn take_up_one(
    p: &Path,
    fuse: Option<OwnedFd>,
    c: &Checks<'_>,
) -> Result<(JobId, Adoption), NotKept> {
    let bytes = std::fs::read(p)
        .map_err(|e| NotKept(format!("the kept job's record is unreadable: {e}")))?;
    let r = Record::decode(&bytes)
        .map_err(|e| NotKept(format!("the kept job's record is bad: {e}")))?;
    let job = r.job;
    if p.file_stem()
        .is_none_or(|s| s.to_string_lossy() != job.to_string())
        || r.mountpoint != c.mount_root.join(job.to_string())
    {
        return Err(NotKept(format!(
            "the kept job {job}'s record names another job or mountpoint ({})",
            r.mountpoint.display()
        )));
    }
    let fuse = fuse.ok_or_else(|| {
        NotKept(format!(
            "job {job}'s FUSE connection is gone (the keeper restarted, or the mount ended)"
        ))
    })?;
    if !is_fuse_mount(&r.mountpoint) {
        return Err(NotKept(format!("job {job}'s mount is gone")));
    }
    let admission = readmit(r.clone(), c).map_err(|why| NotKept(format!("job {job}: {why}")))?;
    tracing::info!(%job, mountpoint = %r.mountpoint.display(), "taking up a job an earlier daemon left mounted");
    Ok((
        job,
        Adoption {
            admission,
            fuse,
            init: r.init,
            mountpoint: r.mountpoint,
        },
    ))
}

/// The record's `Start` admitted again, as from its parent: the index's signature and
/// expiry checked with what the node trusts now.
fn readmit(r: Record, c: &Checks<'_>) -> Result<Admission, NotKept> {
    let start = r.start.ok_or_else(|| NotKept("no Start".into()))?;
    let admitted = crate::admit::admit(&start, c.host, &r.from, &c.policy);
    match super::launch::admission(admitted, r.from, Box::new(start)) {
        Outcome::Job(mut a) => {
            // The root's clock then says nothing of this node's clock now.
            a.start.root_clock_ms = None;
            Ok(*a)
        }
        Outcome::Refused { why, .. } => Err(NotKept(format!("refused now: {why}"))),
        Outcome::Probe { .. } => Err(NotKept("a probe is never kept".into())),
    }
}

/// Why a kept job is not taken up (logged; its mount is then detached).
#[derive(Debug)]
struct NotKept(String);

impl std::fmt::Display for NotKept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a FUSE file system is mounted at `mp`: told from the mount table and the
/// canonical parent, never by looking into the mount (nobody serves it yet, and a `stat`
/// of it could wait for ever).
fn is_fuse_mount(mp: &Path) -> bool {
    let (Some(parent), Some(name)) = (mp.parent(), mp.file_name()) else {
        return false;
    };
    let Ok(mp) = std::fs::canonicalize(parent).map(|p| p.join(name)) else {
        return false;
    };
    crate::sys::mountinfo::read(None).is_ok_and(|ms| {
        ms.iter()
            .any(|m| m.fs_type.starts_with("fuse") && m.mount_point == mp)
    })
}

/// With `--keep-jobs`: the keeper (started if none runs) and the jobs this daemon takes up;
/// without: no keeper, and records left by an earlier run are dropped.
pub(crate) fn start_keeping(
    cfg: &super::DaemonConfig,
    trust: &crate::admit::Trust,
    revoked: &std::collections::HashSet<manifest::IndexId>,
) -> (Option<Arc<Keeper>>, Vec<(JobId, Adoption)>) {
    let Some(program) = &cfg.keeper else {
        let _ = std::fs::remove_dir_all(dir(&cfg.state_dir));
        return (None, Vec::new());
    };
    let keeper = match Keeper::open(&cfg.state_dir, program) {
        Ok(k) => Arc::new(k),
        Err(e) => {
            tracing::error!(error = %e, "no keeper of the jobs' FUSE connections: jobs end with this daemon, and those an earlier one left are detached");
            return (None, Vec::new());
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let checks = Checks {
        state_dir: &cfg.state_dir,
        mount_root: &cfg.mount_root,
        host: &cfg.host,
        policy: crate::admit::Policy {
            trusted: &trust.keys,
            owners: &trust.owners,
            revoked,
            now,
        },
    };
    let jobs = if cfg.mount {
        take_up(&keeper, &checks)
    } else {
        Vec::new()
    };
    (Some(keeper), jobs)
}

impl Task {
    /// Takes up a job an earlier daemon left mounted: launched as if admitted again, its
    /// mount served on its connection. If it cannot be, its mount is detached.
    pub(super) fn adopt(&mut self, job: JobId, a: Adoption) {
        let span = tracing::info_span!("job", %job);
        let _g = span.enter();
        self.serial += 1;
        let serial = self.serial;
        let Adoption {
            admission,
            fuse,
            init,
            mountpoint,
        } = a;
        match self.launch(job, serial, admission, (false, Some((fuse, init)))) {
            Some(live) => {
                let core = live.core.clone();
                self.jobs.insert(job, JobState::Running(Box::new(live)));
                self.publish();
                core.start();
            }
            None => {
                tracing::error!(mountpoint = %mountpoint.display(), "the job cannot be taken up: its mount is detached");
                let kept = (self.keeper.clone()).map(|k| (k, self.cfg.state_dir.clone()));
                tokio::task::spawn_blocking(move || {
                    let _ = nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH);
                    let _ = std::fs::remove_dir(&mountpoint);
                    if let Some((k, dir)) = kept {
                        forget(&dir, &k, job);
                    }
                });
            }
        }
    }

    /// The daemon stops with a keeper: a mounted job is left mounted for the next daemon
    /// (its record and connection stay), and leaves this one. Whether it was.
    pub(super) fn hand_over(&mut self, job: JobId) -> bool {
        let mounted = matches!(
            self.jobs.get(&job),
            Some(JobState::Running(l)) if matches!(l.mount, MountState::Mounted(_))
        );
        if self.keeper.is_none() || !mounted {
            return false;
        }
        if let Some(JobState::Running(mut live)) = self.jobs.remove(&job) {
            if let MountState::Mounted(m) = std::mem::replace(&mut live.mount, MountState::Off) {
                m.leave();
            }
            tracing::info!(%job, "left to the next daemon");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        let start = Start {
            job: JobId(42),
            index: vec![7; 1000],
            order: Vec::new(),
            urgent: 0,
            subtree: Vec::new(),
            ancestors: Vec::new(),
            timing: Default::default(),
            shared_store: None,
            probe: false,
            owner: Some(1000),
            kin: Vec::new(),
            root_clock_ms: None,
        };
        Record {
            job: JobId(42),
            from: "n01".into(),
            mountpoint: "/run/teesfs/jobs/42".into(),
            init: InitParams {
                major: 7,
                minor: 45,
                flags: 1 << 33,
            },
            start: Some(start),
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = record();
        let back = Record::decode(&r.encode()).expect("decodes");
        assert_eq!((back.job, back.from.as_str()), (JobId(42), "n01"));
        assert_eq!(back.mountpoint, r.mountpoint);
        assert_eq!(back.init, r.init);
        let (start, was) = (back.start.expect("start"), r.start.expect("start"));
        assert_eq!((start.index, start.owner), (was.index, Some(1000)));
    }

    #[test]
    fn a_changed_or_cut_record_is_refused() {
        let bad = |b: &[u8]| {
            Record::decode(b)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let bytes = record().encode();
        let mut flipped = bytes.clone();
        let last = flipped.len() - 10;
        flipped[last] ^= 1;
        assert!(
            bad(&flipped).contains("does not match"),
            "{}",
            bad(&flipped)
        );
        assert!(bad(&bytes[..bytes.len() - 1]).contains("does not match"));
        assert!(bad(&bytes[1..]).contains("not a teesfs kept job"));
        // A header that names another job than its Start.
        let mut other = record();
        other.job = JobId(43);
        assert!(bad(&other.encode()).contains("another job"));
    }
}

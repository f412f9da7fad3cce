//! The per-job files the Slurm prolog leaves beside `prefetch --report` (`job-<id>.log`,
//! `job-<id>.json`, `job-<id>.html`): the job's own are made readable by the job's owner
//! (a POSIX ACL entry, the prolog running as the Slurm user), and after each push the files
//! of jobs beyond the site's `[reports] keep` newest, or older than `[reports] max_age`, are
//! removed. The job just pushed is always kept. Only names of that exact shape are
//! touched, never a link's target, and a problem is a warning: the push's own outcome
//! stands.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use manifest::site::ReportsSection;

/// The job a per-job file belongs to: `job-<id>.log|json|html` gives `<id>`.
fn job_of(name: &str) -> Option<&str> {
    let stem = name
        .strip_suffix(".log")
        .or_else(|| name.strip_suffix(".json"))
        .or_else(|| name.strip_suffix(".html"))?;
    let id = stem.strip_prefix("job-")?;
    (!id.is_empty() && id.len() <= 20 && id.chars().all(|c| c.is_ascii_alphanumeric()))
        .then_some(id)
}

/// The job a per-job report belongs to, and the directory it is in.
fn job_and_dir(report: &Path) -> Option<(&str, &Path)> {
    let job = report
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(job_of)?;
    let dir = match report.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some((job, dir))
}

/// Which of `files` (name, last modified) to remove: every file of a job that is not among
/// the `keep` most recently modified jobs or was last modified more than `max_age` before
/// `now`; never a file of job `current`. Pure.
pub fn to_remove(
    files: &[(String, SystemTime)],
    keep: usize,
    max_age: Duration,
    now: SystemTime,
    current: &str,
) -> Vec<String> {
    let mut jobs: BTreeMap<&str, SystemTime> = BTreeMap::new();
    for (name, mtime) in files {
        if let Some(job) = job_of(name) {
            let t = jobs.entry(job).or_insert(*mtime);
            *t = (*t).max(*mtime);
        }
    }
    let mut newest: Vec<(&str, SystemTime)> = jobs.into_iter().collect();
    newest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let kept_others = keep.saturating_sub(1);
    let mut others = 0;
    let mut gone = std::collections::HashSet::new();
    for (job, mtime) in newest {
        if job == current {
            continue;
        }
        let old = now.duration_since(mtime).is_ok_and(|age| age > max_age);
        if old || others >= kept_others {
            gone.insert(job);
        } else {
            others += 1;
        }
    }
    files
        .iter()
        .filter(|(name, _)| job_of(name).is_some_and(|j| gone.contains(j)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Removes the per-job files in the directory of `report` that [`to_remove`] names; the
/// job is the one `report` (`job-<id>.json`) belongs to. Best-effort: problems are warned
/// about on stderr.
pub fn prune_beside(report: &Path, rules: &ReportsSection) {
    let Some((current, dir)) = job_and_dir(report) else {
        return; // not a per-job report: nothing of this shape to rotate
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let files: Vec<(String, SystemTime)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            job_of(&name)?;
            let md = e.path().symlink_metadata().ok()?;
            (md.is_file() || md.is_symlink()).then_some((name, md.modified().ok()?))
        })
        .collect();
    let now = SystemTime::now();
    for name in to_remove(&files, rules.keep(), rules.max_age(), now, current) {
        let path = dir.join(&name);
        if let Err(e) = std::fs::remove_file(&path) {
            teesfs_node::errln!(
                "warning: could not remove the old job file {} ({e}); [reports] in teesfs.toml says how many are kept",
                path.display()
            );
        }
    }
}

/// Grants `owner` read access to this job's files beside `report` (`job-<id>.*`), with an
/// ACL entry each; says once what is wrong if the file system has no ACLs or the owner
/// cannot reach the directory.
pub fn share_with_owner(report: &Path, owner: u32) {
    use std::os::unix::fs::MetadataExt;
    let Some((job, dir)) = job_and_dir(report) else {
        return;
    };
    if std::fs::metadata(dir).is_ok_and(|md| md.mode() & 0o001 == 0) {
        teesfs_node::errln!(
            "warning: uid {owner} cannot reach {} to read its job's files: give others \
             search access (`chmod o+x`, not read: each file is shared by its own ACL)",
            dir.display()
        );
    }
    for ext in ["log", "json", "html"] {
        let path = dir.join(format!("job-{job}.{ext}"));
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let granted = posix_acl::PosixACL::read_acl(&path).and_then(|mut acl| {
            acl.set(posix_acl::Qualifier::User(owner), posix_acl::ACL_READ);
            acl.write_acl(&path)
        });
        if let Err(e) = granted {
            teesfs_node::errln!(
                "warning: could not let uid {owner} read {} ({e}); the file system needs ACLs \
                 (mount option acl) for job owners to read their job's files",
                path.display()
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn at(days_ago: u64, now: SystemTime) -> SystemTime {
        now - DAY * days_ago as u32
    }

    #[test]
    fn the_newest_jobs_are_kept_and_old_ones_go_whatever_the_count() {
        let now = SystemTime::UNIX_EPOCH + DAY * 1000;
        let mut files = Vec::new();
        for (job, age) in [("7", 0), ("6", 1), ("5", 2), ("4", 3), ("3", 40)] {
            for ext in ["log", "json", "html"] {
                files.push((format!("job-{job}.{ext}"), at(age, now)));
            }
        }
        files.push(("notes.txt".into(), at(400, now)));
        files.push(("job-.log".into(), at(400, now)));
        files.push(("job-9.txt".into(), at(400, now)));
        let mut gone = to_remove(&files, 3, 30 * DAY, now, "7");
        gone.sort();
        assert_eq!(
            gone,
            [
                "job-3.html",
                "job-3.json",
                "job-3.log",
                "job-4.html",
                "job-4.json",
                "job-4.log"
            ],
            "job 7 (this push), 6 and 5 are the newest 3; 3 is too old anyway"
        );
        // The job being pushed is kept even when it is the oldest.
        let gone = to_remove(&files, 1, DAY / 2, now, "3");
        assert!(!gone.iter().any(|n| n.starts_with("job-3.")), "{gone:?}");
        assert!(gone.iter().any(|n| n.starts_with("job-7.")), "{gone:?}");
        // Nothing of another shape is ever named.
        let gone = to_remove(&files, 1, DAY / 2, now, "none");
        assert!(gone.iter().all(|n| job_of(n).is_some()), "{gone:?}");
    }

    /// Issue 30 item 2: the job's owner may read its files (an ACL entry for its uid),
    /// other jobs' files are left alone.
    #[test]
    fn the_jobs_own_files_get_an_acl_entry_for_its_owner() {
        let t = tempfile::tempdir().expect("tmp");
        for name in ["job-7.log", "job-7.json", "job-8.log"] {
            std::fs::write(t.path().join(name), "x").expect("write");
        }
        share_with_owner(&t.path().join("job-7.json"), 4242);
        let read = |name: &str| {
            posix_acl::PosixACL::read_acl(t.path().join(name))
                .expect("acl")
                .get(posix_acl::Qualifier::User(4242))
        };
        assert_eq!(read("job-7.log"), Some(posix_acl::ACL_READ));
        assert_eq!(read("job-7.json"), Some(posix_acl::ACL_READ));
        assert_eq!(read("job-8.log"), None, "another job's file");
    }

    #[test]
    fn the_files_beyond_the_count_are_removed_beside_the_report() {
        let t = tempfile::tempdir().expect("tmp");
        for job in 1..=5 {
            for ext in ["log", "json"] {
                std::fs::write(t.path().join(format!("job-{job}.{ext}")), "x").expect("write");
            }
        }
        std::fs::write(t.path().join("other.json"), "x").expect("write");
        let rules = ReportsSection {
            keep: Some(2),
            max_age: None,
        };
        prune_beside(&t.path().join("job-3.json"), &rules);
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .expect("dir")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        left.sort();
        // Same age: job 3 (this push) and one other by name order stay.
        assert_eq!(left.len(), 5, "{left:?}");
        assert!(left.contains(&"other.json".to_string()), "{left:?}");
        assert!(left.contains(&"job-3.log".to_string()), "{left:?}");
    }
}

//! Store hygiene on the login node: remove old indexes, then every chunk no kept index
//! references (`teesfs gc`).
//!
//! Which indexes go is decided by a pure function ([`indexes_to_remove`]) of their ages,
//! tags and the [`Policy`]. The sweep ([`collect`]) holds the store's lock exclusive
//! ([`crate::lock`]) so no publish is between its chunks and its index, and, for
//! publishers the lock cannot reach (a filesystem without flock), never deletes a chunk
//! written within the grace period. It deletes only `indexes/<id>.idx`, tags and learned
//! lists (`learned/<id>.list`, [`crate::learned`]) of the indexes it deletes, and
//! `chunks/<xx>/<id>` entries whose names are ids; it never follows
//! a symlink (one planted there is removed as a link) and never leaves the store.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use manifest::{ChunkId, IndexId, Limits, SignedIndex};

use crate::store::io;
use crate::tags::TagName;
use crate::{DirStore, Error};

/// What gc keeps. An index is removed only if no rule keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Keep the N most recently published indexes.
    pub keep_newest: Option<usize>,
    /// Keep indexes published less than this long ago.
    pub older_than: Option<Duration>,
    /// Keep every tagged index.
    pub keep_tagged: bool,
    /// Never delete a chunk modified less than this long ago.
    pub grace: Duration,
}

/// What [`indexes_to_remove`] knows of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexAge {
    /// The index.
    pub id: IndexId,
    /// When it was last published.
    pub published: SystemTime,
    /// Whether a tag names it.
    pub tagged: bool,
}

/// The indexes `policy` does not keep, newest first. Ties in age are broken by id, so the
/// choice does not depend on the order given.
pub fn indexes_to_remove(indexes: &[IndexAge], policy: &Policy, now: SystemTime) -> Vec<IndexId> {
    let mut by_age: Vec<&IndexAge> = indexes.iter().collect();
    by_age.sort_by(|a, b| b.published.cmp(&a.published).then(b.id.cmp(&a.id)));
    let keep_newest = policy.keep_newest.unwrap_or(0);
    by_age
        .into_iter()
        .enumerate()
        .filter(|(rank, i)| {
            let newest = *rank < keep_newest;
            let young = policy
                .older_than
                .is_some_and(|d| now.duration_since(i.published).map_or(true, |age| age < d));
            !(newest || young || (policy.keep_tagged && i.tagged))
        })
        .map(|(_, i)| i.id)
        .collect()
}

/// Whether an unreferenced chunk last modified at `modified` may be deleted: not when it
/// is younger than the grace period (or from the future), as a publish that does not hold
/// the lock may be about to reference it.
pub fn chunk_past_grace(modified: SystemTime, grace: Duration, now: SystemTime) -> bool {
    now.duration_since(modified).is_ok_and(|age| age >= grace)
}

/// An index gc removed (or would remove, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedIndex {
    /// The index.
    pub id: IndexId,
    /// The tags that named it (removed with it).
    pub tags: Vec<TagName>,
    /// Size of its file.
    pub bytes: u64,
    /// Size of its learned urgent list (removed with it), 0 without one.
    pub learned_bytes: u64,
    /// When it was last published.
    pub published: SystemTime,
}

/// What a gc did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Whether nothing was deleted.
    pub dry_run: bool,
    /// Whether the store's lock was held (false on a filesystem without flock: the grace
    /// period was the only guard).
    pub locked: bool,
    /// Indexes kept, by id.
    pub kept_indexes: Vec<IndexId>,
    /// Indexes removed, newest first.
    pub removed_indexes: Vec<RemovedIndex>,
    /// Chunks kept because a kept index references them.
    pub kept_chunks: u64,
    /// Their bytes.
    pub kept_chunk_bytes: u64,
    /// Chunks no kept index references, kept as younger than the grace period.
    pub young_chunks: u64,
    /// Their bytes.
    pub young_chunk_bytes: u64,
    /// Chunks removed.
    pub removed_chunks: u64,
    /// Their bytes.
    pub removed_chunk_bytes: u64,
    /// Temporary files a crashed publish or `learn` left (`.tmp*` beside chunks, indexes,
    /// tags and learned lists), removed once older than the grace period, and learned
    /// lists of indexes no longer in the store.
    pub removed_temp_files: u64,
    /// Their bytes.
    pub removed_temp_bytes: u64,
}

impl Report {
    /// Bytes freed: removed chunks, index files and leftover temporary files.
    pub fn freed_bytes(&self) -> u64 {
        self.removed_chunk_bytes
            + self.removed_temp_bytes
            + self
                .removed_indexes
                .iter()
                .map(|i| i.bytes + i.learned_bytes)
                .sum::<u64>()
    }
}

/// Removes what `policy` does not keep from `store` (nothing if `dry_run`): first the
/// indexes, then every chunk no kept index references and older than the grace period.
/// Fails without deleting anything if another process holds the store's lock or a kept
/// index cannot be read.
pub fn collect(
    store: &DirStore,
    policy: &Policy,
    dry_run: bool,
    now: SystemTime,
) -> Result<Report, Error> {
    let lock = store.try_lock_exclusive()?;
    let mut tags: BTreeMap<IndexId, Vec<TagName>> = BTreeMap::new();
    for (name, id) in store.tags()? {
        tags.entry(id).or_default().push(name);
    }
    let mut ages = Vec::new();
    for id in store.list_indexes()? {
        ages.push(IndexAge {
            id,
            published: store.index_published(&id)?,
            tagged: tags.contains_key(&id),
        });
    }
    let remove: HashSet<IndexId> = indexes_to_remove(&ages, policy, now).into_iter().collect();

    // Everything the kept indexes need, read before anything is deleted.
    let mut referenced: HashSet<ChunkId> = HashSet::new();
    let mut report = Report {
        dry_run,
        locked: lock.is_held(),
        ..Report::default()
    };
    for a in ages.iter().filter(|a| !remove.contains(&a.id)) {
        let unreadable = |reason: String| Error::UnreadableIndex {
            id: a.id.to_hex(),
            store: store.root().to_path_buf(),
            reason,
        };
        let bytes = store.get_index(&a.id)?;
        let index = SignedIndex::from_bytes(bytes, &Limits::default())
            .and_then(|s| s.decode(&Limits::default()))
            .map_err(|e| unreadable(e.to_string()))?;
        referenced.extend(index.chunks.iter().map(|c| c.id));
        report.kept_indexes.push(a.id);
    }

    let mut removed: Vec<&IndexAge> = ages.iter().filter(|a| remove.contains(&a.id)).collect();
    removed.sort_by(|a, b| b.published.cmp(&a.published).then(b.id.cmp(&a.id)));
    for a in removed {
        let path = store.index_path(&a.id);
        let bytes = std::fs::symlink_metadata(&path).map_err(io(&path))?.len();
        let names = tags.remove(&a.id).unwrap_or_default();
        if !dry_run {
            for t in &names {
                store.remove_tag(t)?;
            }
        }
        // The learned list first: an index without its list is usable, a list whose
        // index is gone is not.
        let learned_bytes = crate::learned::remove_learned(store, &a.id, dry_run)?.unwrap_or(0);
        if !dry_run {
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
        report.removed_indexes.push(RemovedIndex {
            id: a.id,
            tags: names,
            bytes,
            learned_bytes,
            published: a.published,
        });
    }

    let (chunk_files, temp_files) = scan(store)?;
    for chunk in chunk_files {
        if referenced.contains(&chunk.id) {
            report.kept_chunks += 1;
            report.kept_chunk_bytes += chunk.bytes;
        } else if !chunk_past_grace(chunk.modified, policy.grace, now) {
            report.young_chunks += 1;
            report.young_chunk_bytes += chunk.bytes;
        } else {
            if !dry_run {
                std::fs::remove_file(&chunk.path).map_err(io(&chunk.path))?;
            }
            report.removed_chunks += 1;
            report.removed_chunk_bytes += chunk.bytes;
        }
    }
    // Learned lists whose index is gone (removed by hand, or by a gc while `learn` wrote),
    // and what a crashed `learn` left.
    let kept: HashSet<IndexId> = report.kept_indexes.iter().copied().collect();
    let stray_learned = crate::learned::strays(store, &kept)?;
    for stray in stray_learned {
        if !stray.temporary || chunk_past_grace(stray.modified, policy.grace, now) {
            if !dry_run {
                std::fs::remove_file(&stray.path).map_err(io(&stray.path))?;
            }
            report.removed_temp_files += 1;
            report.removed_temp_bytes += stray.bytes;
        }
    }
    for tmp in temp_files {
        if chunk_past_grace(tmp.modified, policy.grace, now) {
            if !dry_run {
                std::fs::remove_file(&tmp.path).map_err(io(&tmp.path))?;
            }
            report.removed_temp_files += 1;
            report.removed_temp_bytes += tmp.bytes;
        }
    }
    drop(lock);
    Ok(report)
}

/// A leftover temporary file.
struct TempFile {
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

/// A chunk object found in the store.
struct ChunkFile {
    id: ChunkId,
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

/// The store's chunk objects and leftover temporary files, in one pass over its
/// directories.
///
/// Chunks: every `chunks/<xx>/<id>` entry whose directory is a real one named by two hex
/// digits and whose name is an id starting with them: regular files and (planted)
/// symlinks, never followed. Temporary files: the regular files named `.tmp*` (what an
/// atomic write makes before it renames) directly in `indexes/`, `indexes/tags/` and those
/// chunk directories. Other names and anything deeper are not gc's.
fn scan(store: &DirStore) -> Result<(Vec<ChunkFile>, Vec<TempFile>), Error> {
    let root = store.root();
    let mut chunks = Vec::new();
    let mut temps = Vec::new();
    for dir in [root.join("indexes"), root.join("indexes").join("tags")] {
        match std::fs::symlink_metadata(&dir) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&dir)(e)),
        }
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            temp_file(&item, &mut temps)?;
        }
    }
    let top = root.join("chunks");
    let rd = match std::fs::read_dir(&top) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((chunks, temps)),
        Err(e) => return Err(io(&top)(e)),
    };
    for sub in rd {
        let sub = sub.map_err(io(&top))?;
        let Some(prefix) = sub.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let is_dir = sub.file_type().map_err(io(&sub.path()))?.is_dir();
        if !is_dir || prefix.len() != 2 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let dir = sub.path();
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            if temp_file(&item, &mut temps)? {
                continue;
            }
            let name = item.file_name();
            let Some(id) = name
                .to_str()
                .filter(|n| n.starts_with(&prefix))
                .and_then(|n| n.parse::<ChunkId>().ok())
            else {
                continue;
            };
            let path = item.path();
            let md = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            if !(md.is_file() || md.file_type().is_symlink()) {
                continue;
            }
            chunks.push(ChunkFile {
                id,
                bytes: md.len(),
                modified: md.modified().map_err(io(&path))?,
                path,
            });
        }
    }
    Ok((chunks, temps))
}

/// Adds `item` to `temps` if it is a `.tmp*` regular file; says whether its name is one.
fn temp_file(item: &std::fs::DirEntry, temps: &mut Vec<TempFile>) -> Result<bool, Error> {
    if !item
        .file_name()
        .to_str()
        .is_some_and(|n| n.starts_with(".tmp"))
    {
        return Ok(false);
    }
    let path = item.path();
    let md = std::fs::symlink_metadata(&path).map_err(io(&path))?;
    if md.is_file() {
        temps.push(TempFile {
            bytes: md.len(),
            modified: md.modified().map_err(io(&path))?,
            path,
        });
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(hours_ago: u64, now: SystemTime) -> SystemTime {
        now - HOUR * hours_ago as u32
    }

    fn policy() -> Policy {
        Policy {
            keep_newest: None,
            older_than: None,
            keep_tagged: true,
            grace: HOUR,
        }
    }

    /// Indexes 1..=5 published 1..=5 hours ago; 4 is tagged.
    fn five(now: SystemTime) -> Vec<IndexAge> {
        (1..=5u8)
            .rev()
            .map(|n| IndexAge {
                id: IndexId([n; 32]),
                published: at(u64::from(n), now),
                tagged: n == 4,
            })
            .collect()
    }

    fn ids(v: &[u8]) -> Vec<IndexId> {
        v.iter().map(|&n| IndexId([n; 32])).collect()
    }

    #[test]
    fn keep_n_keeps_the_newest_and_every_tagged_one() {
        let now = SystemTime::now();
        let p = Policy {
            keep_newest: Some(2),
            ..policy()
        };
        assert_eq!(indexes_to_remove(&five(now), &p, now), ids(&[3, 5]));
        let p = Policy {
            keep_tagged: false,
            ..p
        };
        assert_eq!(indexes_to_remove(&five(now), &p, now), ids(&[3, 4, 5]));
        let p = Policy {
            keep_newest: Some(10),
            ..p
        };
        assert!(indexes_to_remove(&five(now), &p, now).is_empty());
    }

    #[test]
    fn older_than_keeps_the_young_and_combines_with_keep_n() {
        let now = SystemTime::now();
        let p = Policy {
            older_than: Some(HOUR * 3),
            ..policy()
        };
        // 3 h old is not younger than 3 h: it goes.
        assert_eq!(indexes_to_remove(&five(now), &p, now), ids(&[3, 5]));
        let p = Policy {
            keep_newest: Some(3),
            ..p
        };
        assert_eq!(indexes_to_remove(&five(now), &p, now), ids(&[5]));
        // An index from the future (clock skew on a shared filesystem) is young.
        let mut v = five(now);
        v[0].published = now + HOUR;
        let p = Policy {
            keep_newest: None,
            ..p
        };
        assert_eq!(indexes_to_remove(&v, &p, now), ids(&[3]));
    }

    #[test]
    fn keep_zero_without_tags_removes_everything_and_ties_break_by_id() {
        let now = SystemTime::now();
        let same: Vec<IndexAge> = [3u8, 1, 2]
            .iter()
            .map(|&n| IndexAge {
                id: IndexId([n; 32]),
                published: now,
                tagged: false,
            })
            .collect();
        let p = Policy {
            keep_newest: Some(1),
            ..policy()
        };
        assert_eq!(indexes_to_remove(&same, &p, now), ids(&[2, 1]));
        let p = Policy {
            keep_newest: Some(0),
            ..p
        };
        assert_eq!(indexes_to_remove(&same, &p, now), ids(&[3, 2, 1]));
    }

    #[test]
    fn a_chunk_is_past_grace_only_when_old_enough_and_not_from_the_future() {
        let now = SystemTime::now();
        assert!(chunk_past_grace(at(2, now), HOUR, now));
        assert!(chunk_past_grace(at(1, now), HOUR, now));
        assert!(!chunk_past_grace(now - HOUR / 2, HOUR, now));
        assert!(!chunk_past_grace(now + HOUR, HOUR, now));
        assert!(chunk_past_grace(now, Duration::ZERO, now));
    }
}

//! Store hygiene on the login node: remove old indexes, then every chunk no kept index
//! references (`teesfs gc`).
//!
//! Which indexes go is decided by a pure function ([`indexes_to_remove`]) of their ages,
//! tags and the [`Policy`]. The sweep ([`collect`]) holds the store's lock exclusive
//! ([`crate::lock`]) so no publish is between its chunks and its index, and, for
//! publishers the lock cannot reach (a filesystem without locks), never deletes a chunk
//! written within the grace period. It deletes only `indexes/<id>.idx`, tags and learned
//! lists (`learned/<id>.list`, [`crate::learned`]) of the indexes it deletes, and
//! `chunks/<xx>/<id>` entries whose names are ids; it never follows
//! a symlink (one planted there is removed as a link) and never leaves the store: it works
//! through descriptors of the store's own directories ([`crate::dirs`]) and refuses a store
//! whose top-level entries are links or someone else's.
//!
//! A tag file that cannot be read (damaged, or not a regular file) does not stop gc: it is
//! reported ([`Report::unreadable_tags`]) and, as it may name any index, every index counts
//! as tagged while it is there, so gc removes none that a tag keeps (only unreferenced
//! chunks and leftovers go).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use manifest::{ChunkId, IndexId, Limits, SignedIndex};

use crate::dirs::{Dir, StoreDirs};
use crate::tags::{MAX_TAG_FILE, TagName};
use crate::{DirStore, Error, layout};

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
    /// Whether the store's lock was held (false on a filesystem without locks: the grace
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
    /// Tag files that could not be read as tags. While there is one, every index counts as
    /// tagged (with [`Policy::keep_tagged`], gc removes no index): it may name any of them.
    pub unreadable_tags: Vec<UnreadableTag>,
}

/// A file in `indexes/tags/` with a tag's name that does not hold an index id (damaged,
/// or a directory, link or FIFO in its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableTag {
    /// The file.
    pub path: std::path::PathBuf,
    /// What is wrong with it.
    pub reason: String,
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
/// Fails without deleting anything if another process holds the store's lock, a kept
/// index cannot be read, or the store's own directories are links or someone else's
/// ([`crate::dirs`]: everything is read and deleted relative to those directories).
pub fn collect(
    store: &DirStore,
    policy: &Policy,
    dry_run: bool,
    now: SystemTime,
) -> Result<Report, Error> {
    let dirs = StoreDirs::open(store.root())?;
    let lock = store.try_lock_exclusive()?;
    let (mut tags, unreadable_tags) = read_tags(&dirs)?;
    // A tag that cannot be read may name any index: while one is there, every index counts
    // as tagged, so that gc keeps all of them rather than one that tag protects.
    let ages = read_ages(&dirs, &tags, !unreadable_tags.is_empty())?;
    let remove: HashSet<IndexId> = indexes_to_remove(&ages, policy, now).into_iter().collect();

    // Everything the kept indexes need, read before anything is deleted.
    let mut referenced: HashSet<ChunkId> = HashSet::new();
    let mut report = Report {
        dry_run,
        locked: lock.is_held(),
        unreadable_tags,
        ..Report::default()
    };
    for a in ages.iter().filter(|a| !remove.contains(&a.id)) {
        let unreadable = |reason: String| Error::UnreadableIndex {
            id: a.id,
            store: store.root().to_path_buf(),
            reason,
        };
        let bytes = dirs
            .indexes
            .read(
                &layout::index_file_name(&a.id),
                Limits::default().max_signed_bytes,
            )
            .map_err(|e| unreadable(e.to_string()))?;
        let index = SignedIndex::from_bytes(bytes, &Limits::default())
            .and_then(|s| s.decode(&Limits::default()))
            .map_err(|e| unreadable(e.to_string()))?;
        referenced.extend(index.chunks.iter().map(|c| c.id));
        report.kept_indexes.push(a.id);
    }

    let mut removed: Vec<&IndexAge> = ages.iter().filter(|a| remove.contains(&a.id)).collect();
    removed.sort_by(|a, b| b.published.cmp(&a.published).then(b.id.cmp(&a.id)));
    for a in removed {
        let name = layout::index_file_name(&a.id);
        let bytes = dirs.indexes.stat(&name)?.map_or(0, |m| m.bytes);
        let names = tags.remove(&a.id).unwrap_or_default();
        if !dry_run && let Some(t) = &dirs.tags {
            for n in &names {
                t.remove(n.as_str())?;
            }
        }
        // The learned list first: an index without its list is usable, a list whose
        // index is gone is not.
        let learned_bytes = remove_learned(&dirs, &a.id, dry_run)?;
        if !dry_run {
            dirs.indexes.remove(&name)?;
        }
        report.removed_indexes.push(RemovedIndex {
            id: a.id,
            tags: names,
            bytes,
            learned_bytes,
            published: a.published,
        });
    }
    sweep(&dirs, &referenced, policy, dry_run, now, &mut report)?;
    drop(lock);
    Ok(report)
}

/// Removes the chunks no kept index references and the leftover temporary files, both
/// past the grace period, counting what it keeps and removes.
fn sweep(
    dirs: &StoreDirs,
    referenced: &HashSet<ChunkId>,
    policy: &Policy,
    dry_run: bool,
    now: SystemTime,
    report: &mut Report,
) -> Result<(), Error> {
    let Found {
        subdirs,
        chunks: chunk_files,
        temps: temp_files,
    } = scan(dirs)?;
    for chunk in chunk_files {
        if referenced.contains(&chunk.id) {
            report.kept_chunks += 1;
            report.kept_chunk_bytes += chunk.bytes;
        } else if !chunk_past_grace(chunk.modified, policy.grace, now) {
            report.young_chunks += 1;
            report.young_chunk_bytes += chunk.bytes;
        } else {
            if !dry_run {
                subdirs[chunk.dir].remove(&chunk.name)?;
            }
            report.removed_chunks += 1;
            report.removed_chunk_bytes += chunk.bytes;
        }
    }
    // Learned lists whose index is gone (removed by hand, or by a gc while `learn` wrote),
    // and what a crashed `learn` left.
    if let Some(learned) = &dirs.learned {
        let kept: HashSet<IndexId> = report.kept_indexes.iter().copied().collect();
        for name in learned.names()? {
            let temporary = layout::is_own_temp(&name);
            let orphan = layout::parse_learned_name(&name).is_some_and(|id| !kept.contains(&id));
            let Some(md) = learned.stat(&name)? else {
                continue;
            };
            if !(temporary || orphan) || md.is_dir() {
                continue;
            }
            if !temporary || chunk_past_grace(md.modified, policy.grace, now) {
                if !dry_run {
                    learned.remove(&name)?;
                }
                report.removed_temp_files += 1;
                report.removed_temp_bytes += md.bytes;
            }
        }
    }
    for tmp in temp_files {
        if chunk_past_grace(tmp.modified, policy.grace, now) {
            if !dry_run {
                let dir = match tmp.dir {
                    Where::Indexes => &dirs.indexes,
                    Where::Tags => dirs.tags.as_ref().expect("temp files come from it"),
                    Where::Chunks(i) => &subdirs[i],
                };
                dir.remove(&tmp.name)?;
            }
            report.removed_temp_files += 1;
            report.removed_temp_bytes += tmp.bytes;
        }
    }
    Ok(())
}

/// Removes the learned list of `id` through the store's `learned/` (unless `dry_run`);
/// its size, 0 without one.
fn remove_learned(dirs: &StoreDirs, id: &IndexId, dry_run: bool) -> Result<u64, Error> {
    let Some(dir) = &dirs.learned else {
        return Ok(0);
    };
    let name = layout::learned_file_name(id);
    let Some(md) = dir.stat(&name)? else {
        return Ok(0);
    };
    if md.is_dir() {
        return Err(Error::BadLearnedList {
            path: dir.path_of(&name),
            reason: "is a directory; remove it by hand".into(),
        });
    }
    if !dry_run {
        dir.remove(&name)?;
    }
    Ok(md.bytes)
}

/// The tags of a store by the index each names.
type TagsById = BTreeMap<IndexId, Vec<TagName>>;

/// Every tag, by the index it names, read through the store's `indexes/tags/`; and the
/// tag files that cannot be read as tags (damaged, or not a regular file), by path with
/// why, which the caller must assume may name any index.
fn read_tags(dirs: &StoreDirs) -> Result<(TagsById, Vec<UnreadableTag>), Error> {
    let mut tags: BTreeMap<IndexId, Vec<TagName>> = BTreeMap::new();
    let mut bad = Vec::new();
    let Some(dir) = &dirs.tags else {
        return Ok((tags, bad));
    };
    for n in dir.names()? {
        let Ok(name) = n.parse::<TagName>() else {
            continue;
        };
        let id = match dir.read(&n, MAX_TAG_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes)
                .trim()
                .parse::<IndexId>()
                .map_err(|e| e.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => Err(e.to_string()),
        };
        match id {
            Ok(id) => tags.entry(id).or_default().push(name),
            Err(reason) => {
                tracing::warn!(path = %dir.path_of(&n).display(), %reason, "unreadable tag file");
                bad.push(UnreadableTag {
                    path: dir.path_of(&n),
                    reason,
                });
            }
        }
    }
    for names in tags.values_mut() {
        names.sort();
    }
    Ok((tags, bad))
}

/// The store's indexes with their publication times (their files' modification times).
fn read_ages(
    dirs: &StoreDirs,
    tags: &BTreeMap<IndexId, Vec<TagName>>,
    any_may_be_tagged: bool,
) -> Result<Vec<IndexAge>, Error> {
    let mut ages = Vec::new();
    for n in dirs.indexes.names()? {
        let Some(id) = layout::parse_index_name(&n) else {
            continue;
        };
        let Some(meta) = dirs.indexes.stat(&n)? else {
            continue;
        };
        ages.push(IndexAge {
            id,
            published: meta.modified,
            tagged: any_may_be_tagged || tags.contains_key(&id),
        });
    }
    ages.sort_by_key(|a| a.id);
    Ok(ages)
}

/// Which directory a temporary file is in.
#[derive(Debug, Clone, Copy)]
enum Where {
    Indexes,
    Tags,
    /// The chunk directory at this position of [`scan`]'s list.
    Chunks(usize),
}

/// A leftover temporary file.
struct TempFile {
    dir: Where,
    name: String,
    bytes: u64,
    modified: SystemTime,
}

/// A chunk object found in the store.
struct ChunkFile {
    id: ChunkId,
    /// Its directory's position in [`scan`]'s list.
    dir: usize,
    name: String,
    bytes: u64,
    modified: SystemTime,
}

/// What [`scan`] found.
struct Found {
    /// The chunk directories, opened.
    subdirs: Vec<Dir>,
    chunks: Vec<ChunkFile>,
    temps: Vec<TempFile>,
}

/// The store's chunk directories, chunk objects and leftover temporary files, in one pass
/// over its directories.
///
/// Chunks: every `chunks/<xx>/<id>` entry whose directory is a real one named by two hex
/// digits and whose name is an id starting with them: regular files and (planted)
/// symlinks, never followed. Temporary files: the regular files named `.tmp*` (what an
/// atomic write makes before it renames) directly in `indexes/`, `indexes/tags/` and those
/// chunk directories. Other names and anything deeper are not gc's.
fn scan(dirs: &StoreDirs) -> Result<Found, Error> {
    let mut temps = Vec::new();
    temp_files(&dirs.indexes, Where::Indexes, &mut temps)?;
    if let Some(t) = &dirs.tags {
        temp_files(t, Where::Tags, &mut temps)?;
    }
    let (mut subdirs, mut chunks) = (Vec::new(), Vec::new());
    let Some(top) = &dirs.chunks else {
        return Ok(Found {
            subdirs,
            chunks,
            temps,
        });
    };
    for prefix in top.names()? {
        if !layout::is_shard(&prefix) {
            continue;
        }
        // A link or file where a chunk directory belongs is not gc's.
        let dir = match top.sub(&prefix) {
            Ok(d) => d,
            Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => continue,
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => {
                return Err(Error::Io {
                    path: top.path_of(&prefix),
                    source: e.into(),
                });
            }
        };
        let at = subdirs.len();
        temp_files(&dir, Where::Chunks(at), &mut temps)?;
        for name in dir.names()? {
            let Some(id) = layout::parse_chunk_name(&prefix, &name) else {
                continue;
            };
            let Some(md) = dir.stat(&name)? else { continue };
            if !(md.is_file() || md.is_symlink()) {
                continue;
            }
            chunks.push(ChunkFile {
                id,
                dir: at,
                name,
                bytes: md.bytes,
                modified: md.modified,
            });
        }
        subdirs.push(dir);
    }
    Ok(Found {
        subdirs,
        chunks,
        temps,
    })
}

/// Adds the `.tmp*` regular files directly in `dir` to `temps`.
fn temp_files(dir: &Dir, at: Where, temps: &mut Vec<TempFile>) -> Result<(), Error> {
    for name in dir.names()? {
        if !layout::is_temp(&name) {
            continue;
        }
        if let Some(md) = dir.stat(&name)?
            && md.is_file()
        {
            temps.push(TempFile {
                dir: at,
                name,
                bytes: md.bytes,
                modified: md.modified,
            });
        }
    }
    Ok(())
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

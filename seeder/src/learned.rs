//! The urgent set the layer's jobs taught: the files the nodes of a job used while it started
//! (each node's record, see `teesfs record --from-job`), merged into one list in first-use
//! order across nodes and kept in the store beside the index, at
//! `learned/<index id>.list`. The next push of the same index pushes those files first, as a
//! hint: every chunk is still verified where it arrives, so a wrong or stale list costs time,
//! never correctness.
//!
//! Here: the urgent list format `teesfs record` and `teesfs learn` write ([`UrgentList`]),
//! the merge of many nodes' records ([`merge`], pure), and the learned file's reading,
//! atomic writing and removal. Nothing here talks to the network or follows a symlink in
//! the store.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use manifest::IndexId;

use crate::files::{Symlinks, read_limited};
use crate::store::DirStore;
use crate::{Error, layout};

/// The largest learned list read back (a million long paths fit several times).
pub const MAX_LEARNED_BYTES: u64 = 256 << 20;

/// What one node recorded of a job: the files it used in order of first use, and the names
/// it looked up that the layer does not have.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeRecord {
    /// The node.
    pub host: String,
    /// Layer paths in order of first use on this node.
    pub files: Vec<Vec<u8>>,
    /// Names looked up that exist nowhere, in order.
    pub absent: Vec<Vec<u8>>,
}

/// Many nodes' records made one ([`merge`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Merged {
    /// Every file any node used, in first-use order across nodes.
    pub files: Vec<Vec<u8>>,
    /// Every name any node looked up that exists nowhere, in the same order.
    pub absent: Vec<Vec<u8>>,
}

/// Merges the records of a job's nodes into one first-use order: a path ranks by the
/// earliest position at which any node used it (what one node needed third is needed
/// early wherever it is needed), ties by how many nodes used it (more first), then by name,
/// so the result does not depend on the order the records came in. Every path of every
/// record is kept, once.
pub fn merge(records: &[NodeRecord]) -> Merged {
    Merged {
        files: merge_lists(records.iter().map(|r| r.files.as_slice())),
        absent: merge_lists(records.iter().map(|r| r.absent.as_slice())),
    }
}

fn merge_lists<'a>(lists: impl Iterator<Item = &'a [Vec<u8>]>) -> Vec<Vec<u8>> {
    // Per path: its earliest position and the nodes that used it.
    let mut rank: HashMap<&'a [u8], (usize, usize)> = HashMap::new();
    for list in lists {
        let mut mine: HashMap<&[u8], ()> = HashMap::with_capacity(list.len());
        for (pos, p) in list.iter().enumerate() {
            if mine.insert(p.as_slice(), ()).is_some() {
                continue;
            }
            let r = rank.entry(p.as_slice()).or_insert((pos, 0));
            r.0 = r.0.min(pos);
            r.1 += 1;
        }
    }
    let mut ranked: Vec<(&[u8], (usize, usize))> = rank.into_iter().collect();
    ranked.sort_by(|(pa, (a, na)), (pb, (b, nb))| a.cmp(b).then(nb.cmp(na)).then(pa.cmp(pb)));
    ranked.into_iter().map(|(p, _)| p.to_vec()).collect()
}

/// An urgent list as `teesfs record` and `teesfs learn` write it and `teesfs publish
/// --urgent-list` reads it: `#` header lines, one layer path per line in the order of
/// first use, then `!` lines: names looked up that exist nowhere.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UrgentList {
    /// Comment lines (without their `# `).
    pub header: Vec<String>,
    /// Layer paths in order.
    pub files: Vec<Vec<u8>>,
    /// Names that exist nowhere.
    pub absent: Vec<Vec<u8>>,
}

impl UrgentList {
    /// The list's bytes, and how many names it had to leave out (a name with a newline
    /// cannot be a line).
    pub fn render(&self) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        for h in &self.header {
            for line in h.lines() {
                out.extend_from_slice(b"# ");
                out.extend_from_slice(line.as_bytes());
                out.push(b'\n');
            }
        }
        let mut left_out = 0;
        let lines = self.files.iter().map(|p| (&b""[..], p));
        for (prefix, p) in lines.chain(self.absent.iter().map(|p| (&b"!"[..], p))) {
            if p.contains(&b'\n') || p.is_empty() {
                left_out += 1;
                continue;
            }
            out.extend_from_slice(prefix);
            out.extend_from_slice(p);
            out.push(b'\n');
        }
        (out, left_out)
    }

    /// Reads a list: blank lines are skipped, `#` lines are the header, `!` lines the names
    /// that exist nowhere, every other line a path.
    pub fn parse(text: &[u8]) -> UrgentList {
        let mut list = UrgentList::default();
        for l in text.split(|&b| b == b'\n') {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            if l.trim_ascii().is_empty() {
                continue;
            }
            if let Some(h) = l.strip_prefix(b"#") {
                let h = h.strip_prefix(b" ").unwrap_or(h);
                list.header.push(String::from_utf8_lossy(h).into_owned());
            } else if let Some(a) = l.strip_prefix(b"!") {
                list.absent.push(a.to_vec());
            } else {
                list.files.push(l.to_vec());
            }
        }
        list
    }
}

/// The first header line of the learned list of `id`: read back, it tells a list from a
/// file put in its place by mistake.
pub fn learned_header(id: &IndexId) -> String {
    format!("teesfs learned urgent list of index {}", id.to_hex())
}

/// Where the learned list of `id` lives in `store`.
pub fn learned_path(store: &DirStore, id: &IndexId) -> PathBuf {
    layout::learned_path(store.root(), id)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::BadLearnedList {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes `list` as the learned list of `id`, atomically (a reader sees the old list or the
/// new one), its first header line [`learned_header`]. Returns the file and how many names
/// were left out (see [`UrgentList::render`]). A symlink in the store's `learned/` place is
/// refused, never followed.
pub fn write_learned(
    store: &DirStore,
    id: &IndexId,
    list: &UrgentList,
) -> Result<(PathBuf, usize), Error> {
    let mut header = vec![learned_header(id)];
    header.extend(list.header.iter().cloned());
    let (bytes, left_out) = UrgentList {
        header,
        ..list.clone()
    }
    .render();
    let path = learned_path(store, id);
    write_in_learned(store, &path, &id.to_hex(), &bytes)?;
    Ok((path, left_out))
}

/// Writes `bytes` to `path` in the store's `learned/` (made if missing; a symlink there is
/// refused, never followed) atomically, readable by everyone who may enter the store: a
/// reader sees the old file or the new one. `tag` names the temporary file.
pub(crate) fn write_in_learned(
    store: &DirStore,
    path: &Path,
    tag: &str,
    bytes: &[u8],
) -> Result<(), Error> {
    let dir = layout::learned_dir(store.root());
    match std::fs::symlink_metadata(&dir) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return Err(bad(
                &dir,
                "is not a directory (a symlink is never followed)",
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir(&dir) {
            Ok(()) => crate::shared::make_dirs(store.root(), &dir).map_err(io(&dir))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&dir)(e)),
        },
        Err(e) => return Err(io(&dir)(e)),
    }
    let tmp = dir.join(format!(
        "{}{tag}-{}",
        layout::OWN_TEMP_PREFIX,
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    Ok(())
}

/// The learned list of `id`, `None` when there is none. A list that is not a regular file
/// (a symlink is not followed), is too large, or does not start with `id`'s
/// [`learned_header`] is [`Error::BadLearnedList`].
pub fn read_learned(store: &DirStore, id: &IndexId) -> Result<Option<UrgentList>, Error> {
    let path = learned_path(store, id);
    let bytes = match read_limited(&path, MAX_LEARNED_BYTES, Symlinks::Refuse) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(bad(&path, e.to_string()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(bad(&path, format!("larger than {MAX_LEARNED_BYTES} bytes")));
        }
        Err(e) => return Err(io(&path)(e)),
    };
    if bytes.contains(&0) {
        return Err(bad(&path, "holds a NUL byte: not an urgent list"));
    }
    let list = UrgentList::parse(&bytes);
    if list.header.first() != Some(&learned_header(id)) {
        return Err(bad(
            &path,
            format!("does not start with `# {}`", learned_header(id)),
        ));
    }
    Ok(Some(list))
}

/// Removes the learned list of `id` (a symlink in its place is removed as a link, never
/// followed). Returns its size if there was one.
pub fn remove_learned(store: &DirStore, id: &IndexId, dry_run: bool) -> Result<Option<u64>, Error> {
    let path = learned_path(store, id);
    let md = match std::fs::symlink_metadata(&path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    if md.is_dir() {
        return Err(bad(&path, "is a directory; remove it by hand"));
    }
    if !dry_run {
        std::fs::remove_file(&path).map_err(io(&path))?;
    }
    Ok(Some(md.len()))
}

/// A file in the store's `learned/` that no index needs ([`strays`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stray {
    /// The file (or symlink, removed as a link).
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// When it was last modified.
    pub modified: std::time::SystemTime,
    /// A temporary file of a write that did not finish (`.tmp-*`), which only gc's grace
    /// period tells from one being written now.
    pub temporary: bool,
}

/// What in the store's `learned/` belongs to none of `indexes`: lists of indexes no longer
/// there, and temporary files. Directories and other names are left alone; symlinks are
/// reported as themselves, never followed.
pub fn strays(
    store: &DirStore,
    indexes: &std::collections::HashSet<IndexId>,
) -> Result<Vec<Stray>, Error> {
    let dir = layout::learned_dir(store.root());
    match std::fs::symlink_metadata(&dir) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir)(e)),
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
        let entry = entry.map_err(io(&dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let temporary = layout::is_own_temp(&name);
        let orphan = layout::parse_learned_name(&name).is_some_and(|id| !indexes.contains(&id));
        if !(temporary || orphan) {
            continue;
        }
        let path = entry.path();
        let md = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if md.is_dir() {
            continue;
        }
        out.push(Stray {
            path,
            bytes: md.len(),
            modified: md.modified().unwrap_or(std::time::UNIX_EPOCH),
            temporary,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: &str, files: &[&str], absent: &[&str]) -> NodeRecord {
        let v = |l: &[&str]| l.iter().map(|p| p.as_bytes().to_vec()).collect();
        NodeRecord {
            host: host.into(),
            files: v(files),
            absent: v(absent),
        }
    }

    fn names(v: &[Vec<u8>]) -> Vec<String> {
        v.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    #[test]
    fn merge_ranks_by_earliest_use_then_by_nodes_that_used_it() {
        let m = merge(&[
            rec(
                "n1",
                &["bin/app", "lib/a.so", "lib/b.so", "data/x"],
                &["lib/none.so"],
            ),
            rec(
                "n2",
                &["bin/app", "lib/b.so", "lib/a.so", "etc/only-n2"],
                &[],
            ),
            rec("n3", &["lib/c.so", "bin/app"], &["lib/none.so", "etc/gone"]),
        ]);
        // bin/app and lib/c.so are both first somewhere; bin/app was used by three nodes.
        // a.so and b.so are both second somewhere and used by two nodes: by name.
        assert_eq!(
            names(&m.files),
            [
                "bin/app",
                "lib/c.so",
                "lib/a.so",
                "lib/b.so",
                "data/x",
                "etc/only-n2"
            ]
        );
        assert_eq!(names(&m.absent), ["lib/none.so", "etc/gone"]);
    }

    #[test]
    fn merge_does_not_depend_on_the_order_of_records_and_keeps_each_path_once() {
        let a = rec("n1", &["x", "y", "x", "z"], &["q"]);
        let b = rec("n2", &["z", "w"], &["q"]);
        let one = merge(&[a.clone(), b.clone()]);
        assert_eq!(one, merge(&[b, a]));
        assert_eq!(names(&one.files), ["z", "x", "w", "y"]);
        assert_eq!(names(&one.absent), ["q"]);
        assert_eq!(merge(&[]), Merged::default());
        let alone = rec("n1", &["c", "a", "b"], &[]);
        assert_eq!(merge(std::slice::from_ref(&alone)).files, alone.files);
    }

    #[test]
    fn a_list_renders_and_parses_back_and_names_with_newlines_are_left_out() {
        let list = UrgentList {
            header: vec!["made by a test".into(), "two\nlines".into()],
            files: vec![b"bin/app".to_vec(), b"odd\nname".to_vec(), vec![0xff, b'x']],
            absent: vec![b"lib/none.so".to_vec()],
        };
        let (bytes, left_out) = list.render();
        assert_eq!(left_out, 1);
        let back = UrgentList::parse(&bytes);
        assert_eq!(back.header, ["made by a test", "two", "lines"]);
        assert_eq!(back.files, [b"bin/app".to_vec(), vec![0xff, b'x']]);
        assert_eq!(back.absent, [b"lib/none.so".to_vec()]);
        let crlf = UrgentList::parse(b"# h\r\n\r\na\r\n!b\r\n");
        assert_eq!(crlf.files, [b"a".to_vec()]);
        assert_eq!(crlf.absent, [b"b".to_vec()]);
    }

    fn store() -> (tempfile::TempDir, DirStore) {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(&t.path().join("store")).expect("store");
        (t, s)
    }

    #[test]
    fn the_learned_list_is_written_atomically_read_back_and_removed() {
        let (_t, s) = store();
        let id = IndexId([7; 32]);
        assert_eq!(read_learned(&s, &id).expect("none yet"), None);
        let list = UrgentList {
            header: vec!["3 files from 2 nodes".into()],
            files: vec![b"b".to_vec(), b"a".to_vec()],
            absent: vec![b"gone".to_vec()],
        };
        let (path, left_out) = write_learned(&s, &id, &list).expect("write");
        assert_eq!(left_out, 0);
        assert_eq!(
            path,
            s.root()
                .join("learned")
                .join(format!("{}.list", id.to_hex()))
        );
        let back = read_learned(&s, &id).expect("read").expect("some");
        assert_eq!(
            back.header,
            [learned_header(&id), "3 files from 2 nodes".into()]
        );
        assert_eq!((back.files, back.absent), (list.files.clone(), list.absent));
        let leftovers: Vec<_> = std::fs::read_dir(s.root().join("learned"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
        // Another index's list put in its place is refused, and so is garbage.
        let other = IndexId([8; 32]);
        std::fs::copy(&path, learned_path(&s, &other)).expect("copy");
        let e = read_learned(&s, &other).expect_err("wrong index");
        assert!(e.to_string().contains("does not start with"), "{e}");
        std::fs::write(learned_path(&s, &other), b"\0\x01garbage").expect("write");
        let e = read_learned(&s, &other).expect_err("garbage");
        assert!(e.to_string().contains("NUL"), "{e}");
        assert!(remove_learned(&s, &id, true).expect("dry run").is_some());
        assert!(path.exists(), "a dry run removes nothing");
        assert!(remove_learned(&s, &id, false).expect("remove").is_some());
        assert!(!path.exists());
        assert_eq!(remove_learned(&s, &id, false).expect("again"), None);
    }

    #[test]
    fn strays_are_lists_of_indexes_gone_and_temporary_files() {
        let (_t, s) = store();
        let (kept, gone) = (IndexId([1; 32]), IndexId([2; 32]));
        assert_eq!(strays(&s, &Default::default()).expect("no dir"), []);
        write_learned(&s, &kept, &UrgentList::default()).expect("write");
        write_learned(&s, &gone, &UrgentList::default()).expect("write");
        let dir = s.root().join("learned");
        std::fs::write(dir.join(".tmp-x-1"), b"half").expect("tmp");
        std::fs::write(dir.join("README"), b"mine").expect("other");
        std::fs::create_dir(dir.join(format!("{}.list", IndexId([3; 32]).to_hex()))).expect("d");
        let found = strays(&s, &[kept].into_iter().collect()).expect("strays");
        let names: Vec<(String, bool)> = found
            .iter()
            .map(|st| {
                let n = st.path.file_name().expect("name").to_string_lossy();
                (n.into_owned(), st.temporary)
            })
            .collect();
        assert_eq!(
            names,
            [
                (".tmp-x-1".to_string(), true),
                (format!("{}.list", gone.to_hex()), false)
            ]
        );
    }

    #[test]
    fn symlinks_in_the_store_are_never_followed() {
        let (t, s) = store();
        let id = IndexId([9; 32]);
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        std::fs::create_dir(s.root().join("learned")).expect("dir");
        std::os::unix::fs::symlink(&victim, learned_path(&s, &id)).expect("link");
        let e = read_learned(&s, &id).expect_err("a symlink");
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(remove_learned(&s, &id, false).expect("remove").is_some());
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        // A planted link is replaced by the list, not written through.
        std::os::unix::fs::symlink(&victim, learned_path(&s, &id)).expect("link");
        write_learned(&s, &id, &UrgentList::default()).expect("write");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        // A learned/ directory that is a symlink is refused.
        let (t2, s2) = store();
        let elsewhere = t2.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, s2.root().join("learned")).expect("link");
        let e = write_learned(&s2, &id, &UrgentList::default()).expect_err("linked dir");
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).expect("dir").count(), 0);
    }
}

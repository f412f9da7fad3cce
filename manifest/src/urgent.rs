//! The urgent order: which chunks a push sends first. Pure policy over an [`Index`]: the
//! files the layer's last jobs were seen to use (a learned hint, see [`push_order_hinted`]),
//! the urgent entries recorded at publish time, then the job's extra urgent paths, then the
//! rest, each chunk once. No I/O, no clock.

use std::collections::HashMap;

use crate::index::{EntryIdx, EntryKind, FileData, Index};

/// The push order of an index: chunks of the urgent entries first, in the order of the
/// index's urgent list (the recorded access order or the dependency analysis's load order),
/// then chunks of entries `extra_urgent` marks (e.g. `manifest.toml` globs) in entry order,
/// then the rest. A chunk is placed once, at its first use. Returns the order (chunk-table
/// positions) and how many of its leading chunks are urgent.
pub fn push_order(index: &Index, extra_urgent: &dyn Fn(&[u8]) -> bool) -> (Vec<u32>, usize) {
    push_order_hinted(index, &[], extra_urgent)
}

/// [`push_order`] with `hint` (entries in the order the layer's earlier jobs first used them,
/// e.g. from [`entries_named`]) urgent and ahead of everything else: what the nodes were
/// seen to read while they started is the best guess of what the next job reads first,
/// better than a list made before any job ran. The index's own urgent list and
/// `extra_urgent` follow, still urgent. A hint only orders chunks (every chunk is still
/// verified where it arrives), so a wrong one costs time, never correctness.
pub fn push_order_hinted(
    index: &Index,
    hint: &[EntryIdx],
    extra_urgent: &dyn Fn(&[u8]) -> bool,
) -> (Vec<u32>, usize) {
    let n = index.chunks.len();
    let mut placed = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut add = |e: EntryIdx, order: &mut Vec<u32>| {
        if let EntryKind::File {
            data: FileData::Chunks(slots),
            ..
        } = &index.entry(index.resolve(e)).kind
        {
            for s in slots.iter() {
                if let Some(c) = s.chunk_index()
                    && !placed[c]
                {
                    placed[c] = true;
                    order.push(c as u32);
                }
            }
        }
    };
    for &e in hint.iter().filter(|e| e.get() < index.entries.len()) {
        add(e, &mut order);
    }
    for &e in &index.urgent {
        add(e, &mut order);
    }
    for i in 0..index.entries.len() {
        let idx = EntryIdx(i as u32);
        if extra_urgent(&index.path_of(idx)) {
            add(idx, &mut order);
        }
    }
    let urgent = order.len();
    for i in 0..index.entries.len() {
        add(EntryIdx(i as u32), &mut order);
    }
    (order, urgent)
}

/// The entries that `paths` (layer paths relative to its root, `/`-separated, as an urgent
/// list holds them) name, in order and each once, and how many paths name nothing in
/// `index` (a file the layer no longer has, `..`, a path through a symlink). Hard links
/// and symlinks are named as themselves; [`push_order_hinted`] pushes what they point at
/// only for hard links, as for any urgent entry.
pub fn entries_named(index: &Index, paths: &[Vec<u8>]) -> (Vec<EntryIdx>, usize) {
    let mut children: HashMap<(u32, &[u8]), u32> = HashMap::with_capacity(index.entries.len());
    for (i, e) in index.entries.iter().enumerate().skip(1) {
        children
            .entry((e.parent.0, &e.name[..]))
            .or_insert(i as u32);
    }
    let mut seen = vec![false; index.entries.len()];
    let (mut found, mut missing) = (Vec::new(), 0);
    for path in paths {
        let mut cur = Some(0u32);
        for name in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            cur = cur.filter(|&c| matches!(index.entries[c as usize].kind, EntryKind::Dir));
            cur = cur.and_then(|c| children.get(&(c, name)).copied());
        }
        match cur {
            Some(e) if e != 0 => {
                if !std::mem::replace(&mut seen[e as usize], true) {
                    found.push(EntryIdx(e));
                }
            }
            _ => missing += 1,
        }
    }
    (found, missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkId;
    use crate::build::{BuildOptions, ChunkSink, NoProgress, build, set_urgent_paths};

    /// Chunks go nowhere; only the index matters here.
    struct Discard;

    impl ChunkSink for Discard {
        fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<crate::StoredForm> {
            None
        }
        fn put(&self, _id: &ChunkId, _stored: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Three files of one chunk each, `b` recorded urgent.
    fn index() -> Index {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, byte) in [("a", 1u8), ("b", 2), ("c", 3)] {
            std::fs::write(dir.path().join(name), vec![byte; 5000]).expect("write");
        }
        let (mut index, _) =
            build(dir.path(), &BuildOptions::default(), &Discard, &NoProgress).expect("build");
        set_urgent_paths(&mut index, &["b"]).expect("urgent");
        index
    }

    #[test]
    fn recorded_urgent_first_then_extra_then_the_rest_each_chunk_once() {
        let index = index();
        let n = index.chunks.len();
        let (order, urgent) = push_order(&index, &|_| false);
        assert_eq!(urgent, 1);
        assert_eq!(order.len(), n);
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), n, "each chunk once: {order:?}");
        let (order2, urgent2) = push_order(&index, &|p: &[u8]| p == b"c");
        assert_eq!(urgent2, 2);
        assert_eq!(order2[0], order[0], "the recorded urgent file stays first");
    }

    #[test]
    fn a_learned_hint_goes_first_and_is_urgent_and_unknown_names_are_counted() {
        let index = index();
        let paths: Vec<Vec<u8>> = ["c", "./a", "c", "gone", "a/x", "../b"]
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let (hint, missing) = entries_named(&index, &paths);
        let names: Vec<Vec<u8>> = hint.iter().map(|&e| index.path_of(e)).collect();
        assert_eq!(names, [b"c".to_vec(), b"a".to_vec()]);
        assert_eq!(missing, 3, "gone, a/x (a is a file) and ../b");
        let (plain, _) = push_order(&index, &|_| false);
        let (order, urgent) = push_order_hinted(&index, &hint, &|_| false);
        assert_eq!(urgent, 3, "c, a, then the recorded b");
        let chunk_of = |name: &[u8]| {
            let (e, _) = entries_named(&index, &[name.to_vec()]);
            let (o, _) = push_order_hinted(&index, &e, &|_| false);
            o[0]
        };
        assert_eq!(order[..3], [chunk_of(b"c"), chunk_of(b"a"), plain[0]]);
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), index.chunks.len(), "each chunk once");
        let out_of_range = [EntryIdx(999)];
        assert_eq!(
            push_order_hinted(&index, &out_of_range, &|_| false).0,
            plain
        );
    }
}

//! The urgent order: which chunks a push sends first. Pure policy over an [`Index`]: the
//! urgent entries recorded at publish time, then the job's extra urgent paths, then the
//! rest, each chunk once. No I/O, no clock.

use crate::index::{EntryIdx, EntryKind, FileData, Index};

/// The push order of an index: chunks of the urgent entries first, in the order of the
/// index's urgent list (the recorded access order or the dependency analysis's load order),
/// then chunks of entries `extra_urgent` marks (e.g. `manifest.toml` globs) in entry order,
/// then the rest. A chunk is placed once, at its first use. Returns the order (chunk-table
/// positions) and how many of its leading chunks are urgent.
pub fn push_order(index: &Index, extra_urgent: &dyn Fn(&[u8]) -> bool) -> (Vec<u32>, usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkId;
    use crate::build::{BuildOptions, ChunkSink, NoProgress, build, set_urgent_paths};

    /// Chunks go nowhere; only the index matters here.
    struct Discard;

    impl ChunkSink for Discard {
        fn stored_len(&self, _id: &ChunkId, _plain_len: u32) -> Option<u32> {
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
}

//! Copies made ahead, without a mount: a layer built in memory, its chunks handed over
//! one by one as if they arrived.

use super::*;
use crate::fs::copies::verify_copy;
use manifest::build::{BuildOptions, ChunkSink, NoProgress, build};
use manifest::{ChunkId, Index};

/// Discards the stored bytes: the tests hand over plain bytes themselves.
struct Nowhere;

impl ChunkSink for Nowhere {
    fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<manifest::StoredForm> {
        None
    }
    fn put(&self, _id: &ChunkId, _stored: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

const CS: usize = 64 << 10;

/// A layer of `files` (name, content) in chunks of 64 KiB.
fn layer(files: &[(&str, Vec<u8>)]) -> Index {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content).expect("write");
    }
    let opts = BuildOptions {
        chunk_size: CS as u32,
        ..BuildOptions::default()
    };
    build(dir.path(), &opts, &Nowhere, &NoProgress)
        .expect("build")
        .0
}

/// `len` bytes that repeat nowhere (so no two chunks are equal unless made so).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The plain bytes of chunk number `ci` of `index`, found in `files`.
fn plain_of(index: &Index, files: &[(&str, Vec<u8>)], ci: usize) -> Vec<u8> {
    let id = index.chunks[ci].id;
    files
        .iter()
        .flat_map(|(_, c)| c.chunks(CS))
        .find(|piece| ChunkId::of(piece) == id)
        .expect("every chunk comes from a file")
        .to_vec()
}

/// The file entry named `name` and its copy's name and chunk ids.
fn copy_of(index: &Index, name: &str) -> (String, u64, Vec<Option<ChunkId>>) {
    let e = index
        .entries
        .iter()
        .find(|e| &*e.name == name.as_bytes())
        .expect("entry");
    let EntryKind::File {
        size,
        data: FileData::Chunks(slots),
    } = &e.kind
    else {
        panic!("{name} is not a chunked file");
    };
    let pieces: Vec<_> = slots
        .iter()
        .map(|s| s.chunk_index().map(|ci| index.chunks[ci].id))
        .collect();
    (copy_name(*size, &pieces), *size, pieces)
}

/// A push that streams every chunk of `index`, with no urgent set.
fn streamed(index: &Index) -> Schedule {
    let n = index.chunks.len();
    Schedule::new((0..n as u32).map(ChunkNo).collect(), 0, vec![1; n]).expect("schedule")
}

/// A push whose urgent set is the chunks of the files named `urgent`, then the rest.
fn urgent_first(index: &Index, urgent: &[&str]) -> Schedule {
    let first: Vec<ChunkId> = urgent
        .iter()
        .flat_map(|f| copy_of(index, f).2)
        .flatten()
        .collect();
    let (mut order, rest): (Vec<ChunkNo>, Vec<ChunkNo>) = (0..index.chunks.len() as u32)
        .map(ChunkNo)
        .partition(|c| first.contains(&index.chunks[c.index()].id));
    let n = order.len();
    order.extend(rest);
    Schedule::new(order, n, vec![1; index.chunks.len()]).expect("schedule")
}

fn copies(budget: u64) -> (tempfile::TempDir, Arc<Copies>) {
    let t = tempfile::tempdir().expect("tempdir");
    let c = Copies::open(&t.path().join("files"), budget).expect("copies");
    (t, c)
}

#[test]
fn a_file_is_a_verified_copy_once_its_last_chunk_arrives_in_any_order() {
    let files = [
        ("big", pattern(3 * CS + 100, 1)),
        ("small", pattern(1000, 2)),
    ];
    let index = layer(&files);
    let (_t, copies) = copies(1 << 30);
    let ahead = Ahead::plan(
        &index,
        &streamed(&index),
        64 << 10,
        copies.clone(),
        CopyUser(7),
    );
    let (name, size, pieces) = copy_of(&index, "big");
    let order: Vec<usize> = (0..index.chunks.len()).rev().collect();
    let mut made = Vec::new();
    for (n, &ci) in order.iter().enumerate() {
        assert!(made.is_empty(), "made after {n} of {} chunks", order.len());
        made = ahead
            .arrived(ChunkNo(ci as u32), &plain_of(&index, &files, ci))
            .made;
    }
    assert_eq!(
        made,
        vec![name.clone()],
        "the big file only: the small one is under the minimum"
    );
    let (_lease, path) = copies.lease(&name, CopyUser(7)).expect("recorded");
    verify_copy(&path, size, CS as u64, &pieces).expect("the copy holds the file's bytes");
    assert_eq!(std::fs::read(&path).expect("read"), files[0].1);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies.bytes(), size);
}

#[test]
fn a_chunk_shared_by_files_and_repeated_in_one_fills_every_place_once() {
    let block = pattern(CS, 9);
    let twice = [block.clone(), block.clone(), pattern(CS, 3)].concat();
    let files = [
        ("a", twice),
        ("b", [block.clone(), pattern(10, 4)].concat()),
    ];
    let index = layer(&files);
    let (_t, copies) = copies(1 << 30);
    let ahead = Ahead::plan(&index, &streamed(&index), 1, copies.clone(), CopyUser(1));
    let mut made = Vec::new();
    for ci in 0..index.chunks.len() {
        let plain = plain_of(&index, &files, ci);
        made.extend(ahead.arrived(ChunkNo(ci as u32), &plain).made);
        assert!(
            ahead.arrived(ChunkNo(ci as u32), &plain).made.is_empty(),
            "a chunk seen before is ignored"
        );
    }
    made.sort();
    let mut want = vec![copy_of(&index, "a").0, copy_of(&index, "b").0];
    want.sort();
    assert_eq!(made, want);
    for (name, content) in &files {
        let (copy, _, _) = copy_of(&index, name);
        let (_lease, path) = copies.lease(&copy, CopyUser(1)).expect("recorded");
        assert_eq!(&std::fs::read(&path).expect("read"), content, "{name}");
    }
}

#[test]
fn copies_made_ahead_never_evict_and_give_back_their_room_when_left_unfinished() {
    let files = [("one", pattern(2 * CS, 5)), ("two", pattern(2 * CS, 6))];
    let index = layer(&files);
    // Room for one file only.
    let (t, copies) = copies(2 * CS as u64 + 10);
    let ahead = Ahead::plan(&index, &streamed(&index), 1, copies.clone(), CopyUser(2));
    let one = copy_of(&index, "one").0;
    let first: Vec<usize> = (0..index.chunks.len())
        .filter(|&ci| {
            copy_of(&index, "one")
                .2
                .contains(&Some(index.chunks[ci].id))
        })
        .collect();
    // "one" is begun with its first chunk, then "two" finds no room and is not made.
    ahead.arrived(
        ChunkNo(first[0] as u32),
        &plain_of(&index, &files, first[0]),
    );
    for ci in (0..index.chunks.len()).filter(|ci| !first.contains(ci)) {
        assert!(
            ahead
                .arrived(ChunkNo(ci as u32), &plain_of(&index, &files, ci))
                .made
                .is_empty()
        );
    }
    assert!(
        !copies.reserve(CS as u64),
        "room is held for the unfinished copy"
    );
    drop(ahead);
    assert!(copies.reserve(2 * CS as u64), "its room came back");
    assert!(!copies.contains(&one));
    let left = std::fs::read_dir(t.path().join("files"))
        .expect("list")
        .count();
    assert_eq!(left, 0, "the unfinished copy's file is gone");
}

#[test]
fn a_copy_that_exists_already_is_not_made_again() {
    let files = [("f", pattern(CS + 1, 8))];
    let index = layer(&files);
    let (_t, copies) = copies(1 << 30);
    let first = Ahead::plan(&index, &streamed(&index), 1, copies.clone(), CopyUser(1));
    let second = Ahead::plan(&index, &streamed(&index), 1, copies.clone(), CopyUser(2));
    let n = index.chunks.len();
    for ci in 0..n {
        let plain = plain_of(&index, &files, ci);
        assert_eq!(
            first.arrived(ChunkNo(ci as u32), &plain).made.len(),
            usize::from(ci == n - 1)
        );
    }
    // A later mount of the same file (another job of the same layer) finds its copy.
    for ci in 0..n {
        let plain = plain_of(&index, &files, ci);
        assert!(second.arrived(ChunkNo(ci as u32), &plain).made.is_empty());
    }
    assert_eq!(copies.len(), 1);
    assert!(copies.reserve(1 << 29), "no room is left held");
}

/// Every chunk of `index` handed over, in table order; the copies it completed.
fn arrive_all(ahead: &Ahead, index: &Index, files: &[(&str, Vec<u8>)]) -> Vec<String> {
    let mut made = Vec::new();
    for ci in 0..index.chunks.len() {
        made.extend(
            ahead
                .arrived(ChunkNo(ci as u32), &plain_of(index, files, ci))
                .made,
        );
    }
    made
}

#[test]
fn only_the_files_of_the_pushs_urgent_set_are_made_ahead_whatever_the_index_lists() {
    let files = [
        ("start.so", pattern(CS + 9, 1)),
        ("later.so", pattern(CS + 9, 2)),
        ("listed.so", pattern(CS + 9, 3)),
    ];
    let mut index = layer(&files);
    let (_t, copies) = copies(1 << 30);
    // Globs given to the push over an index without a list: only their files.
    let push = urgent_first(&index, &["start.so"]);
    let ahead = Ahead::plan(&index, &push, 1, copies.clone(), CopyUser(3));
    assert_eq!(
        arrive_all(&ahead, &index, &files),
        vec![copy_of(&index, "start.so").0]
    );
    assert_eq!(copies.len(), 1, "the other files wait for their first open");
    // The push's set counts, not the index's list (an index listing another file).
    let listed = index
        .entries
        .iter()
        .position(|e| &*e.name == b"listed.so")
        .expect("entry");
    index.set_urgent([EntryIdx(listed as u32)]);
    let push = urgent_first(&index, &["later.so"]);
    let ahead = Ahead::plan(&index, &push, 1, copies.clone(), CopyUser(4));
    assert_eq!(
        arrive_all(&ahead, &index, &files),
        vec![copy_of(&index, "later.so").0]
    );
}

#[test]
fn a_push_that_streams_nothing_copies_nothing_ahead() {
    let files = [("a.so", pattern(2 * CS, 1))];
    let index = layer(&files);
    let (_t, copies) = copies(1 << 30);
    let demand_only = Schedule::new(Vec::new(), 0, vec![1; index.chunks.len()]).expect("schedule");
    let ahead = Ahead::plan(&index, &demand_only, 1, copies.clone(), CopyUser(5));
    assert!(arrive_all(&ahead, &index, &files).is_empty());
    assert_eq!(copies.len(), 0, "made at its first open instead");
}

/// A raw chunk written into a copy of raw chunks only is handed back as a place the store
/// may keep it in: the copy's open file, at the chunk's offset, holding its plain bytes. A
/// file with a compressed chunk offers none (the copy's bytes are not the stored ones).
#[test]
fn a_raw_chunk_written_into_a_copy_of_raw_chunks_is_offered_as_its_place() {
    let mut mixed = pattern(CS, 4);
    mixed.extend(vec![7u8; CS]);
    let files = [("raw", pattern(2 * CS + 10, 3)), ("mixed", mixed)];
    let index = layer(&files);
    let raw = |name: &str| {
        copy_of(&index, name).2.iter().flatten().all(|id| {
            let c = index.chunks.iter().find(|c| c.id == *id).expect("chunk");
            c.stored_len == c.plain_len + 1
        })
    };
    assert!(raw("raw") && !raw("mixed"), "the layer is as meant");
    let (_t, copies) = copies(1 << 30);
    let ahead = Ahead::plan(&index, &streamed(&index), 1, copies, CopyUser(1));
    let (_, _, raw_pieces) = copy_of(&index, "raw");
    let (_, _, mixed_pieces) = copy_of(&index, "mixed");
    for ci in 0..index.chunks.len() {
        let id = index.chunks[ci].id;
        let plain = plain_of(&index, &files, ci);
        let got = ahead.arrived(ChunkNo(ci as u32), &plain);
        if let Some(pos) = raw_pieces.iter().position(|p| *p == Some(id)) {
            let p = got.placed.expect("a raw file's chunk has a place");
            assert_eq!(p.at, (pos * CS) as u64);
            let mut back = vec![0u8; plain.len()];
            p.file.read_exact_at(&mut back, p.at).expect("read");
            assert!(back == plain, "the place holds the chunk's bytes");
        } else {
            assert!(mixed_pieces.contains(&Some(id)));
            assert!(got.placed.is_none(), "a mixed file's chunk has no place");
        }
    }
}

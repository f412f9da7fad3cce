//! The node store's budget, memory of recent chunks, pins and losses.

use super::*;
use manifest::{encode_chunk, verify_chunk};

/// A checked chunk of `len` incompressible bytes made from `seed`.
pub(super) fn chunk(seed: u8, len: usize) -> CheckedChunk {
    let mut plain = vec![0u8; len];
    blake3::Hasher::new()
        .update(&[seed])
        .finalize_xof()
        .fill(&mut plain);
    let id = ChunkId::of(&plain);
    verify_chunk(encode_chunk(&plain, 1).into(), &id, len as u32)
        .expect("valid")
        .0
}

fn store(budget: u64, recent: u64) -> (tempfile::TempDir, NodeStore) {
    let t = tempfile::tempdir().expect("tempdir");
    let s = NodeStore::open(&t.path().join("store"), budget, recent).expect("store");
    (t, s)
}

#[test]
fn recent_chunks_stay_within_their_budget_and_older_ones_come_from_their_files() {
    let (_t, s) = store(1 << 30, 3 * 1001);
    let chunks: Vec<CheckedChunk> = (0..5).map(|i| chunk(i, 1000)).collect();
    for c in &chunks {
        s.put_checked(c).expect("put");
        assert!(s.recent_bytes() <= 3 * 1001, "{}", s.recent_bytes());
    }
    assert_eq!(s.recent_bytes(), 3 * 1001, "the last three");
    assert_eq!(s.len(), 5, "all of them in files");
    for c in &chunks[..2] {
        assert!(s.get_cached(c.id()).is_none());
        match s.get(c.id()) {
            Some(StoredChunk::Unchecked(b)) => assert_eq!(b, c.stored()),
            other => panic!("an older chunk from its file: {other:?}"),
        }
    }
    for c in &chunks[2..] {
        match s.get_cached(c.id()) {
            Some(StoredChunk::Checked(m)) => assert_eq!(m.stored(), c.stored()),
            other => panic!("a recent chunk from memory: {other:?}"),
        }
    }
    // A chunk larger than the whole budget is not kept in memory at all.
    let big = chunk(9, 4000);
    s.put_checked(&big).expect("put");
    assert!(s.get_cached(big.id()).is_none());
    assert_eq!(s.recent_bytes(), 3 * 1001);
}

fn sizes(chunks: &[CheckedChunk]) -> Vec<(ChunkId, u64)> {
    chunks
        .iter()
        .map(|c| (*c.id(), c.stored().len() as u64))
        .collect()
}

/// Issue 32 item 1: a running job's chunks are never evicted; chunks kept from
/// earlier jobs go first, and a released job's chunks go before those of older
/// unpinned use.
#[test]
fn pinned_chunks_are_never_evicted_and_released_ones_go_first() {
    let (_t, s) = store(4 * 1001, 0);
    let s = Arc::new(s);
    let mut lost = s.watch();
    let job: Vec<CheckedChunk> = (0..2).map(|i| chunk(i, 1000)).collect();
    let old: Vec<CheckedChunk> = (10..12).map(|i| chunk(i, 1000)).collect();
    for c in &old {
        s.put_checked(c).expect("put");
    }
    let pin = s.pin_chunks(sizes(&job)).expect("fits");
    assert_eq!(s.pinned_bytes(), 2 * 1001);
    for c in &job {
        s.put_checked(c).expect("put");
    }
    // Over the budget with new unpinned chunks: only unpinned ones are evicted.
    for i in 20..24 {
        s.put_checked(&chunk(i, 1000)).expect("put");
    }
    assert!(s.bytes() <= 4 * 1001, "{}", s.bytes());
    for c in &job {
        assert!(s.contains(c.id()), "a pinned chunk was evicted");
    }
    let mut gone = Vec::new();
    while let Ok(id) = lost.try_recv() {
        gone.push(id);
    }
    assert!(!gone.iter().any(|id| job.iter().any(|c| c.id() == id)));
    assert!(
        gone.contains(old[0].id()) && gone.contains(old[1].id()),
        "oldest first"
    );
    assert_eq!(
        s.cached_bytes(),
        2 * 1001,
        "two of the newest unpinned ones"
    );
    // Released: the job's chunks are the first to go, before newer unpinned ones.
    pin.release();
    assert_eq!(s.pinned_bytes(), 0);
    s.put_checked(&chunk(30, 1000)).expect("put");
    assert!(
        !s.contains(job[0].id()) || !s.contains(job[1].id()),
        "a released chunk went first"
    );
    assert!(s.bytes() <= 4 * 1001);
}

/// A layer that does not fit beside what running jobs pin is refused with the sizes;
/// chunks two jobs share count once.
#[test]
fn a_layer_that_does_not_fit_beside_the_pinned_ones_is_refused_with_its_sizes() {
    let (_t, s) = store(3 * 1001, 0);
    let s = Arc::new(s);
    let a: Vec<CheckedChunk> = (0..2).map(|i| chunk(i, 1000)).collect();
    let _pa = s.pin_chunks(sizes(&a)).expect("fits");
    // The same chunks again (a second job of the same layer) add nothing.
    let pa2 = s.pin_chunks(sizes(&a)).expect("shared chunks count once");
    assert_eq!(s.pinned_bytes(), 2 * 1001);
    let b: Vec<CheckedChunk> = (5..7).map(|i| chunk(i, 1000)).collect();
    let no = s.pin_chunks(sizes(&b)).err().expect("does not fit");
    assert_eq!(
        no,
        NoRoom {
            layer: 2 * 1001,
            more: 2 * 1001,
            pinned: 2 * 1001,
            budget: 3 * 1001
        }
    );
    let text = no.to_string();
    assert!(
        text.contains("--store-budget") && text.contains("to at least 3.9 KiB"),
        "{text}"
    );
    // One of the two jobs of layer a ends: its chunks stay pinned by the other.
    drop(pa2);
    assert_eq!(s.pinned_bytes(), 2 * 1001);
    assert!(s.pin_chunks(sizes(&b)).is_err());
}

/// A chunk the store evicts and announces must not be served from memory afterwards:
/// the relay fetches it again on that announcement, and a child told it was sent
/// would otherwise get bytes the store no longer accounts for.
#[test]
fn an_evicted_chunk_is_announced_and_no_longer_served_from_memory() {
    let (_t, s) = store(2 * 1001, 1 << 20);
    let mut lost = s.watch();
    let a = chunk(1, 1000);
    s.put_checked(&a).expect("put");
    s.put_checked(&chunk(2, 1000)).expect("put");
    assert!(lost.try_recv().is_err(), "within budget");
    s.put_checked(&chunk(3, 1000)).expect("put");
    assert_eq!(lost.try_recv().ok(), Some(*a.id()));
    assert!(s.get_cached(a.id()).is_none());
    assert!(s.get(a.id()).is_none());
    assert!(!s.contains(a.id()));
    assert_eq!(
        s.recent_bytes(),
        2 * 1001,
        "the evicted chunk left memory too"
    );
    assert_eq!(s.bytes(), 2 * 1001);
}

/// Bytes read back from a file are never handed out as checked: a file changed behind
/// the store's back is caught by whoever verifies them.
#[test]
fn a_chunk_file_changed_behind_the_stores_back_is_handed_out_unchecked() {
    let (t, s) = store(1 << 30, 0);
    let c = chunk(4, 1000);
    s.put_checked(&c).expect("put");
    let path = DirStore::create(&t.path().join("store"))
        .expect("store")
        .chunk_path(c.id());
    let mut bad = c.stored().to_vec();
    bad[500] ^= 1;
    std::fs::write(&path, &bad).expect("tamper");
    match s.get(c.id()) {
        Some(StoredChunk::Unchecked(b)) => {
            assert!(
                verify_chunk(b, c.id(), 1000).is_err(),
                "refused by a reader"
            );
        }
        other => panic!("unchecked bytes from the file: {other:?}"),
    }
    // A missing file is a lost chunk, announced.
    let mut lost = s.watch();
    std::fs::remove_file(&path).expect("rm");
    assert!(s.get(c.id()).is_none());
    assert_eq!(lost.try_recv().ok(), Some(*c.id()));
}

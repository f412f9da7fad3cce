//! The store keeping raw chunks at their place in a copy's file ([`crate::placed`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::Bytes;

use super::tests::chunk;
use super::*;

/// A copy's file at `path` holding the plain bytes of `chunks` one after another, as a copy
/// made ahead writes them, and each one's offset.
fn copy_of(path: &Path, chunks: &[&CheckedChunk]) -> (File, Vec<u64>) {
    let f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .expect("copy");
    let mut at = 0u64;
    let mut places = Vec::new();
    for c in chunks {
        let plain = &c.stored()[1..];
        f.write_all_at(plain, at).expect("write");
        places.push(at);
        at += plain.len() as u64;
    }
    (f, places)
}

/// How many links the store at `root` holds for placed chunks.
fn links(root: &Path) -> usize {
    std::fs::read_dir(crate::placed::dir(root))
        .expect("placed dir")
        .count()
}

/// The stored bytes `s` hands out for `c` (from its place or its file: the stores in these
/// tests keep nothing in memory), checked against its id.
fn read_back(s: &NodeStore, c: &CheckedChunk) -> Bytes {
    let b = s.get(c.id()).expect("held").bytes().clone();
    let len = c.stored().len() as u32 - 1;
    assert!(
        manifest::verify_chunk(b.clone(), c.id(), len).is_ok(),
        "wrong bytes"
    );
    b
}

#[test]
fn a_placed_chunk_is_read_from_its_copy_and_taken_up_again_after_a_restart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("store");
    let s = NodeStore::open(&root, 1 << 20, 0).expect("open");
    let (a, b) = (chunk(1, 5000), chunk(2, 3000));
    let copy = tmp.path().join("copy");
    let (f, at) = copy_of(&copy, &[&a, &b]);
    s.put_placed(&a, &f, at[0]).expect("put a");
    s.put_placed(&b, &f, at[1]).expect("put b");
    assert!(!s.dir.chunk_path(a.id()).exists(), "no second write of a");
    assert!(!s.dir.chunk_path(b.id()).exists(), "no second write of b");
    assert_eq!((s.placed(), s.bytes()), (2, 5001 + 3001));
    // The copy goes (evicted, or its mount released): the store keeps the bytes.
    drop(f);
    std::fs::remove_file(&copy).expect("rm copy");
    assert_eq!(read_back(&s, &a), a.stored());
    drop(s);
    let again = NodeStore::open(&root, 1 << 20, 0).expect("reopen");
    assert!(again.contains(a.id()) && again.contains(b.id()));
    assert_eq!((again.placed(), again.bytes()), (2, 5001 + 3001));
    assert_eq!(read_back(&again, &b), b.stored());
}

#[test]
fn a_compressed_chunk_or_a_copy_without_a_name_is_written_to_a_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = NodeStore::open(&tmp.path().join("store"), 1 << 20, 0).expect("open");
    let plain = vec![7u8; 4000];
    let id = ChunkId::of(&plain);
    let (zstd, _) =
        manifest::verify_chunk(manifest::encode_chunk(&plain, 1).into(), &id, 4000).expect("valid");
    assert!(zstd.compressed());
    let raw = chunk(3, 2000);
    let copy = tmp.path().join("copy");
    let (f, _) = copy_of(&copy, &[&raw]);
    s.put_placed(&zstd, &f, 0).expect("put zstd");
    std::fs::remove_file(&copy).expect("the copy loses its name");
    s.put_placed(&raw, &f, 0).expect("put raw");
    assert_eq!(s.placed(), 0);
    for c in [&zstd, &raw] {
        assert!(s.dir.chunk_path(c.id()).exists(), "a file of its own");
    }
    assert_eq!(read_back(&s, &raw), raw.stored());
}

#[test]
fn a_packs_bytes_stay_charged_until_its_last_chunk_goes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = NodeStore::open(&tmp.path().join("store"), 9000, 0).expect("open");
    let mut gone = s.watch();
    let (a, b, c) = (chunk(4, 5000), chunk(5, 3000), chunk(6, 2000));
    let (f, at) = copy_of(&tmp.path().join("copy"), &[&a, &b]);
    s.put_placed(&a, &f, at[0]).expect("put a");
    s.put_placed(&b, &f, at[1]).expect("put b");
    drop(f);
    // Over the budget: a goes first, which frees nothing while b links the file, so b goes
    // too; c, the newest, stays.
    s.put_checked(&c).expect("put c");
    assert_eq!(s.bytes(), 2001);
    assert_eq!(s.placed(), 0);
    assert!(!s.contains(a.id()) && !s.contains(b.id()) && s.contains(c.id()));
    let mut announced = vec![gone.try_recv().expect("a"), gone.try_recv().expect("b")];
    announced.sort();
    let mut want = vec![*a.id(), *b.id()];
    want.sort();
    assert_eq!(announced, want);
    assert_eq!(
        links(&tmp.path().join("store")),
        0,
        "their links are removed"
    );
}

/// A copy changed behind the store's back (root can) changes the chunks placed in it: such
/// a chunk is never handed out, but dropped and announced, to be fetched again.
#[test]
fn a_place_changed_behind_the_stores_back_is_dropped_not_served() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("store");
    let s = NodeStore::open(&root, 1 << 20, 0).expect("open");
    let mut gone = s.watch();
    let a = chunk(7, 4096);
    let copy = tmp.path().join("copy");
    let (f, at) = copy_of(&copy, &[&a]);
    s.put_placed(&a, &f, at[0]).expect("put");
    f.write_all_at(&[a.stored()[1] ^ 1], 0)
        .expect("flip a byte");
    assert!(s.get(a.id()).is_none(), "a changed place is not served");
    assert!(!s.contains(a.id()));
    assert_eq!(gone.try_recv().ok(), Some(*a.id()), "its loss is announced");
    assert_eq!(links(&root), 0, "its link is removed");
}

/// A raw chunk that came before its copy was being made is written to a file of its own;
/// once the copy holds it, the store keeps it there and removes the file. A compressed
/// chunk keeps its file.
#[test]
fn a_chunk_held_before_its_copy_moves_into_the_copy() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = NodeStore::open(&tmp.path().join("store"), 1 << 20, 0).expect("open");
    let a = chunk(8, 6000);
    s.put_checked(&a).expect("put");
    let (f, at) = copy_of(&tmp.path().join("copy"), &[&a]);
    s.keep_placed(a.id(), 6000, &f, at[0]);
    assert!(
        !s.dir.chunk_path(a.id()).exists(),
        "its own file is removed"
    );
    assert_eq!((s.placed(), s.bytes()), (1, 6001));
    assert_eq!(read_back(&s, &a), a.stored());
    // Told again (a second copy of the same bytes): nothing changes.
    s.keep_placed(a.id(), 6000, &f, at[0]);
    assert_eq!(s.placed(), 1);
    let plain = vec![3u8; 5000];
    let id = ChunkId::of(&plain);
    let (z, _) =
        manifest::verify_chunk(manifest::encode_chunk(&plain, 1).into(), &id, 5000).expect("valid");
    s.put_checked(&z).expect("put");
    let (g, _) = copy_of(&tmp.path().join("copy2"), &[]);
    g.write_all_at(&plain, 0).expect("plain bytes");
    s.keep_placed(&id, 5000, &g, 0);
    assert!(
        s.dir.chunk_path(&id).exists(),
        "a compressed chunk keeps its file"
    );
    assert_eq!(s.placed(), 1);
}

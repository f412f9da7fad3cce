//! The index decoder never allocates from a count or length the bytes do not back: bodies
//! announcing huge tables, names or chunk lists are refused with an error naming the field, and
//! the largest allocation made while refusing them is measured by a counting allocator.

#![allow(unsafe_code)] // The counting allocator below.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use manifest::{Error, Index, Limits, SecretKey, SignedIndex};

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static SERIAL: Mutex<()> = Mutex::new(());

struct Counting;

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A body header: magic, version, chunk size 4096.
fn header() -> Vec<u8> {
    let mut b = b"TEESIDX\x01".to_vec();
    varint(4096, &mut b);
    b
}

fn refused(what: &str, body: &[u8]) -> (Error, usize) {
    LARGEST.store(0, Ordering::Relaxed);
    let result = Index::decode_body(body, &Limits::default());
    let largest = LARGEST.load(Ordering::Relaxed);
    match result {
        Ok(_) => panic!("{what}: decoded"),
        Err(e) => (e, largest),
    }
}

#[test]
fn announced_counts_and_lengths_beyond_the_bytes_present_allocate_nothing_large() {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();

    // A chunk count within the limit but far beyond the bytes that follow.
    let mut b = header();
    varint(200 << 20, &mut b);
    cases.push(("chunk table", b, "chunk table"));
    // A chunk count over the limit.
    let mut b = header();
    varint(1 << 40, &mut b);
    cases.push(("chunk count", b, "chunk count"));
    // No chunks, an entry count within the limit but unbacked.
    let mut b = header();
    varint(0, &mut b);
    varint(60 << 20, &mut b);
    cases.push(("entry table", b, "entry table"));
    // An entry count over the limit.
    let mut b = header();
    varint(0, &mut b);
    varint(1 << 40, &mut b);
    cases.push(("entry count", b, "entry count"));
    // A root, then an entry whose name claims 2^40 bytes.
    let mut b = header();
    varint(0, &mut b);
    varint(2, &mut b);
    b.extend([0; 9]); // root: parent, name, kind, flags, 5 metadata fields
    varint(0, &mut b); // parent
    varint(1 << 40, &mut b); // name length
    b.extend(b"abc");
    cases.push(("name length", b, "name"));
    // A root, then a 2^49-byte file whose chunk list would need 2^37 slots.
    let mut b = header();
    varint(0, &mut b);
    varint(2, &mut b);
    b.extend([0; 9]);
    b.extend([0, 1, b'f', 1, 0, 0, 0, 0, 0, 0]); // parent, name "f", file, flags, meta
    varint(1 << 49, &mut b);
    b.push(1); // chunk list
    b.extend([0; 8]);
    cases.push(("chunk list", b, "chunk list"));

    for (what, body, names) in cases {
        let (err, largest) = refused(what, &body);
        assert!(
            err.to_string().contains(names),
            "{what}: the error should name {names:?}: {err}"
        );
        assert!(
            largest <= 64 << 10,
            "{what}: refusing {} bytes allocated {largest} bytes at once",
            body.len()
        );
    }
}

#[test]
fn a_decompression_bomb_is_cut_off_at_the_body_limit() {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A valid signed envelope around 64 MiB of zeros (compresses to a few KiB).
    let key = SecretKey::generate().expect("randomness");
    let root = Index::decode_body(
        &{
            let mut b = header();
            varint(0, &mut b);
            varint(1, &mut b);
            b.extend([0; 9]);
            b
        },
        &Limits::default(),
    )
    .expect("a root-only body");
    let signed = SignedIndex::sign(&root, &key, 3);
    let mut bytes = signed.as_bytes()[..104].to_vec();
    bytes.extend(zstd::bulk::compress(&vec![0u8; 64 << 20], 3).expect("compress"));
    let bomb = SignedIndex::from_bytes(bytes, &Limits::default()).expect("envelope shape");
    let limits = Limits {
        max_body_bytes: 1 << 20,
        ..Limits::default()
    };
    LARGEST.store(0, Ordering::Relaxed);
    let err = bomb.decode(&limits).expect_err("bomb decoded");
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(err.to_string().contains("decompressed index size"), "{err}");
    assert!(
        largest <= 4 << 20,
        "the bomb allocated {largest} bytes at once"
    );
    // And the signature does not cover the swapped body, so a node never gets this far.
    assert!(bomb.verify(&[key.public()]).is_err());
}

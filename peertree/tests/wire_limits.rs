//! Wire decoding never allocates from a length a peer announced but did not send: messages
//! claiming huge sequences, strings or byte strings are refused, and the largest allocation made
//! while refusing them is measured by a counting allocator.

#![allow(unsafe_code)] // The counting allocator below.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use peertree::Error;
use peertree::relay::{MAX_MESSAGE, Msg};

/// Largest single allocation since the last reset.
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// Tests share the counter; one at a time.
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

/// Decodes `bytes`, expecting a refusal; returns the largest allocation made meanwhile.
fn refused_with_largest_allocation(what: &str, bytes: &[u8]) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    let result = Msg::decode(bytes);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(result.is_err(), "{what}: decoded {result:?}");
    largest
}

#[test]
fn announced_lengths_beyond_the_bytes_present_allocate_nothing_large() {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let huge = 1u64 << 60;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();

    // Msg::Chunk { chunk: 1, demand: false, data: <huge> }
    let mut b = vec![1, 1, 0];
    varint(huge, &mut b);
    cases.push(("chunk data", b));
    // Msg::Attach { have: <huge count of u64> }
    let mut b = vec![5];
    varint(huge, &mut b);
    b.extend([0xff; 16]);
    cases.push(("attach bitset", b));
    // Msg::Start { job: 1, index: [], order: <huge count> }
    let mut b = vec![0, 1, 0];
    varint(huge, &mut b);
    b.extend([1, 2, 3]);
    cases.push(("start order", b));
    // Msg::Start { .., order: [], urgent: 0, subtree: [NodeInfo { id: 1, host: <huge> }] }
    let mut b = vec![0, 1, 0, 0, 0, 1, 1];
    varint(huge, &mut b);
    b.extend(b"cn0001");
    cases.push(("node host name", b));
    // Msg::Report { done: <huge count> }
    let mut b = vec![3];
    varint(huge, &mut b);
    cases.push(("report facts", b));

    for (what, bytes) in cases {
        let largest = refused_with_largest_allocation(what, &bytes);
        assert!(
            largest <= 2 << 20,
            "{what}: refusing {} bytes allocated {largest} bytes at once",
            bytes.len()
        );
    }
}

#[test]
fn a_message_over_the_limit_is_refused_before_decoding() {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let big = vec![6u8; MAX_MESSAGE + 1]; // Msg::Adopted followed by junk
    assert_eq!(Msg::decode(&big), Err(Error::WireTooLarge(MAX_MESSAGE + 1)));
}

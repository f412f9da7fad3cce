//! Fuzz target: see `teesfs_fuzz::checks::wire`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| teesfs_fuzz::checks::wire(data));

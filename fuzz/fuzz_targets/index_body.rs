//! Fuzz target: see `teesfs_fuzz::checks::index_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| teesfs_fuzz::checks::index_body(data));

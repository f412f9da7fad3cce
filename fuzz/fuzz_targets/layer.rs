//! Fuzz target: see `teesfs_fuzz::layer_check::layer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| teesfs_fuzz::layer_check::layer(data));

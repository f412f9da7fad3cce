//! Fuzz target: see `teesfs_fuzz::report_check::report`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| teesfs_fuzz::report_check::report(data));

//! Fuzz harness support: the checks each target runs (shared with the corpus replay test in
//! `teesfs/tests/it/fuzz_corpus.rs`, which includes `checks.rs` by path).

pub mod checks;

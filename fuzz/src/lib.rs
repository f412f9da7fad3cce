//! Fuzz harness support: the checks each target runs (shared with the corpus replay test in
//! `peertree/tests/fuzz_corpus.rs`, which includes `checks.rs` by path).

pub mod checks;

//! Fuzz harness support: the checks each target runs (shared with the corpus replay test in
//! `peertree/tests/fuzz_corpus.rs`, which includes `checks.rs` by path; the push report's
//! check is apart, in `report_check.rs`, replayed by `pushreport/tests/fuzz_corpus.rs`; the
//! image layer's is in `layer_check.rs`).

pub mod checks;
pub mod layer_check;
pub mod report_check;

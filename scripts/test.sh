#!/usr/bin/env bash
# The whole teesfs test suite: formatting, lints, unit, property and integration tests
# (real FUSE mounts; run as root so they do not skip).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# cargo-deb and cargo-generate-rpm, for the package test (once per machine: ~5 min).
bash scripts/package-tools.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --features lab --locked -- -D warnings
# The shipped binary, without the lab (what scripts/package.sh builds).
cargo clippy -p teesfs --no-default-features --locked -- -D warnings
# The SPANK plugin's .so, which the Slurm and package tests load (cargo test builds only its rlib).
cargo build -p teesfs-spank --locked
# With the lab (the `teesfs` package's feature): the lab's tests, the binary's `lab` and `sim`
# commands and fault injection (tests/it/house_rules.rs fails without it).
cargo test --workspace --features lab --locked
bash scripts/fuzz.sh

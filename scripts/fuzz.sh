#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a bounded time, starting from the
# committed corpus (fuzz/corpus/<target>/seed-*) and the crash regressions
# (fuzz/regressions/<target>/). New inputs go to a scratch directory, never into the repository.
#
# cargo-fuzz needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept
# them. Cost on the 2-core CI machine: installing cargo-fuzz ~2 min (once), building the targets
# ~4-10 min, running them TEESFS_FUZZ_SECONDS (default 20) each.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${TEESFS_FUZZ_SECONDS:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O -a
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo fuzz list); do
    mkdir -p "$scratch/$target" "regressions/$target"
    echo "fuzzing $target for ${secs}s"
    cargo fuzz run -O -a "$target" "$scratch/$target" "corpus/$target" "regressions/$target" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
        grep -v -e '^#' -e '^"' -e '^INFO' | tail -n 20
done

#!/usr/bin/env bash
# Launch under real Slurm in the reference lab (4 x 8 nodes), as root: the time from
# `sbatch` to the application having run on all 32 nodes, with `--teesfs=manifest.toml`
# (the SPANK plugin and the prolog's push) against the same job copying the layer with
# `sbcast` (a tarball, untarred on every node). Both in one run; prints the ratio
# (BENCHMARKS.md). It is the measuring part of the lab's Slurm test.
#
#   bash scripts/bench-slurm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build -p teesfs-spank --locked
CI=true cargo test -p teesfs --features lab --test it --locked -- \
    lab_slurm::sbatch_teesfs_starts_every_task_inside_the_layer_on_all_32_nodes \
    --exact --nocapture 2>&1 | grep -E '^BENCH|test result|panicked'

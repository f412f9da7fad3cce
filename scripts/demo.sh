#!/usr/bin/env bash
# The README's main job: the lab demo. Builds an emulated 4 x 8 cluster on this machine
# (network namespaces, shaped links, a real teesfs daemon and FUSE mount per node),
# publishes a real Python application with dependencies from PyPI, pushes its urgent set,
# starts the application on every node, and prints a report (also written as HTML/SVG).
# Needs root; installs the Debian packages it needs; removes everything it made at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
TEESFS_NEED_PIP=1 bash scripts/deps.sh
cargo build --release --locked -p teesfs --features lab
exec target/release/teesfs lab demo "$@"

#!/usr/bin/env bash
# Installs the packagers scripts/package.sh uses, pinned, only if missing: cargo-deb and
# cargo-generate-rpm (from crates.io, into ~/.cargo/bin). Cost on the 2-core machine, once,
# measured with other builds running: cargo-deb 95 s (71 s CPU), cargo-generate-rpm 199 s
# (220 s CPU; it builds an OpenPGP stack for signing).
set -euo pipefail
deb_version=3.8.0
rpm_version=0.21.1
if ! cargo deb --version 2>/dev/null | grep -q " $deb_version\$"; then
    echo "installing cargo-deb $deb_version ..."
    cargo install --quiet --locked --version "$deb_version" cargo-deb
fi
if ! cargo generate-rpm --version 2>/dev/null | grep -q " $rpm_version\$"; then
    echo "installing cargo-generate-rpm $rpm_version ..."
    cargo install --quiet --locked --version "$rpm_version" cargo-generate-rpm
fi

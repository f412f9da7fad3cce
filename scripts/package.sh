#!/usr/bin/env bash
# Builds the teesfs Debian package: the binary, the systemd unit, the Slurm scripts, the
# default config in /etc/teesfs/, man pages and shell completions generated from the CLI.
#
#   bash scripts/package.sh                      # release build -> target/debian/teesfs_<v>_<arch>.deb
#   bash scripts/package.sh --binary PATH --plugin SO --out DIR   # package existing builds
#   bash scripts/package.sh ... --compression none     # skip xz (tests: debug binaries are big)
#
# Install with `apt-get install ./teesfs_<v>_<arch>.deb` (or dpkg -i); then edit
# /etc/teesfs/daemon.env and `systemctl enable --now teesfs-daemon`.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
plugin=""
out="target/debian"
compression=xz
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --plugin) plugin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --compression) compression=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    # Without the lab (feature `lab`): compute nodes get the product only.
    cargo build --release --locked -p teesfs --no-default-features
    binary=target/release/teesfs
fi
if [ -z "$plugin" ]; then
    # The SPANK plugin, built against this machine's libslurm-dev headers.
    bash scripts/deps.sh
    cargo build --release --locked -p teesfs-spank
    plugin=target/release/libteesfs_spank.so
fi
[ -x "$binary" ] || { echo "package.sh: $binary is not an executable" >&2; exit 1; }
[ -f "$plugin" ] || { echo "package.sh: $plugin (the SPANK plugin, --plugin) is missing" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "package.sh: needs dpkg-deb (Debian's dpkg)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
mkdir -p "$out"
stage=$(mktemp -d "${TMPDIR:-/tmp}/teesfs-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT

install -D -m 0755 "$binary" "$stage/usr/bin/teesfs"
install -D -m 0644 packaging/systemd/teesfs-daemon.service "$stage/lib/systemd/system/teesfs-daemon.service"
install -D -m 0644 packaging/etc/daemon.env "$stage/etc/teesfs/daemon.env"
install -D -m 0644 packaging/etc/teesfs.toml "$stage/etc/teesfs/teesfs.toml"
install -d -m 0755 "$stage/etc/teesfs/teesfs.d"
install -d -m 0755 "$stage/etc/teesfs/cluster" "$stage/etc/teesfs/trusted"
install -D -m 0755 packaging/slurm/prolog-slurmctld.sh "$stage/usr/share/teesfs/slurm/prolog-slurmctld.sh"
install -D -m 0755 packaging/slurm/epilog.sh "$stage/usr/share/teesfs/slurm/epilog.sh"
install -D -m 0755 packaging/slurm/epilog-slurmctld.sh "$stage/usr/share/teesfs/slurm/epilog-slurmctld.sh"
install -D -m 0644 packaging/slurm/plugstack.conf "$stage/usr/share/teesfs/slurm/plugstack.conf"
install -D -m 0644 "$plugin" "$stage/usr/lib/teesfs/teesfs_spank.so"
install -D -m 0644 docs/slurm.md "$stage/usr/share/doc/teesfs/slurm.md"
install -D -m 0644 README.md "$stage/usr/share/doc/teesfs/README.md"

gen="$stage/gen"
"$binary" generate-docs --man "$gen/man" --completions "$gen/completions"
install -d "$stage/usr/share/man/man1"
for page in "$gen"/man/*.1; do
    gzip -9n -c "$page" > "$stage/usr/share/man/man1/$(basename "$page").gz"
done
install -d "$stage/usr/share/man/man5"
for page in packaging/man/*.5; do
    gzip -9n -c "$page" > "$stage/usr/share/man/man5/$(basename "$page").gz"
done
install -D -m 0644 "$gen/completions/teesfs.bash" "$stage/usr/share/bash-completion/completions/teesfs"
install -D -m 0644 "$gen/completions/_teesfs" "$stage/usr/share/zsh/vendor-completions/_teesfs"
install -D -m 0644 "$gen/completions/teesfs.fish" "$stage/usr/share/fish/vendor_completions.d/teesfs.fish"
rm -rf "$gen"

install -d "$stage/DEBIAN"
printf '%s\n' /etc/teesfs/daemon.env /etc/teesfs/teesfs.toml > "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: teesfs
Version: $version
Architecture: $arch
Maintainer: teesfs developers <teesfs@example.invalid>
Installed-Size: $size
Depends: libc6, iproute2
Recommends: fuse3
Suggests: slurm-client, slurmd
Section: admin
Priority: optional
Homepage: https://example.invalid/teesfs
Description: topology-aware lazy-fetch filesystem for fast HPC job launch
 teesfs gets a user's software layer from an HPC login node onto thousands of
 compute nodes fast enough that the job starts within seconds: the layer is
 published as content-addressed chunks with a signed index, pushed down a
 topology-aware tree over QUIC (urgent set first), and mounted read-only with
 FUSE on every node, where reads of data not yet arrived wait for it.
CONTROL
# Maintainer scripts. An upgrade leaves a running daemon running (it keeps the old binary
# until its next restart, so jobs keep their mounts); only removal stops it. The Slurm
# prolog runs as the Slurm user and logs to /var/log/teesfs. ($TEESFS_TEST_SYSTEMD stands
# for /run/systemd/system in the package test.)
cat > "$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    install -d -m 0750 /var/log/teesfs
    if getent passwd slurm >/dev/null 2>&1; then
        chown slurm:slurm /var/log/teesfs 2>/dev/null \
            || echo "teesfs: could not give /var/log/teesfs to the slurm user; the Slurm prolog logs there" >&2
    fi
    if [ -d "${TEESFS_TEST_SYSTEMD:-/run/systemd/system}" ]; then
        systemctl daemon-reload >/dev/null 2>&1 || true
        if [ -z "$2" ]; then
            echo "teesfs: edit /etc/teesfs/daemon.env, then: systemctl enable --now teesfs-daemon"
        elif systemctl is-active --quiet teesfs-daemon.service; then
            echo "teesfs: the running daemon keeps its jobs; restart it between jobs to use the new version (systemctl restart teesfs-daemon)"
        fi
    fi
fi
POSTINST
cat > "$stage/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d "${TEESFS_TEST_SYSTEMD:-/run/systemd/system}" ]; then
    systemctl stop teesfs-daemon.service >/dev/null 2>&1 || true
fi
PRERM
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm"

deb="$out/teesfs_${version}_${arch}.deb"
dpkg-deb --root-owner-group "-Z$compression" -b "$stage" "$deb" >/dev/null
echo "$deb"

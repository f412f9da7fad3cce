#!/usr/bin/env bash
# The cost of one FUSE round trip on this machine: 20,000 isatty() calls on one file open
# through a `teesfs mount` (each is a FUSE_IOCTL the mount answers with ENOTTY), against the
# same calls on tmpfs. Prints the wall time per call and the mount's CPU per request.
#
# Usage: sudo bash scripts/bench-fuse-rtt.sh        (TEESFS_BIN=path CALLS=20000)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TEESFS_BIN:-$PWD/target/release/teesfs}
calls=${CALLS:-20000}
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts)"; exit 1; }
[ -x "$bin" ] || cargo build --release --locked -p teesfs
work=$(mktemp -d /dev/shm/teesfs-rtt.XXXXXX)
mp=""
cleanup() {
    set +e
    [ -n "$mp" ] && kill -TERM "$mp" 2>/dev/null && wait "$mp" 2>/dev/null
    mountpoint -q "$work/mnt" && umount -l "$work/mnt"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
export TEESFS_CONFIG="$work/config"
mkdir -p "$work/layer" "$work/mnt"
echo hello >"$work/layer/f"
"$bin" keygen >/dev/null
id=$("$bin" publish "$work/layer" --store "$work/store" --quiet --format json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])')
"$bin" mount "$work/mnt" --store "$work/store" --index "$id" \
    --materialize-dir "$work/files" >"$work/log" 2>&1 &
mp=$!
until grep -q mounted "$work/log" 2>/dev/null; do
    kill -0 "$mp" 2>/dev/null || { cat "$work/log"; exit 1; }
    sleep 0.05
done
for p in "$work/layer/f" "$work/mnt/f"; do
    python3 - "$p" "$mp" "$calls" <<'PY'
import os, sys, time
path, pid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
fd = os.open(path, os.O_RDONLY)
c0, t0 = cpu(), time.perf_counter()
for _ in range(n):
    os.isatty(fd)
dt, dc = time.perf_counter() - t0, cpu() - c0
where = "mount" if "/mnt/" in path else "tmpfs"
print(f"{where}: {dt / n * 1e6:.1f} us per isatty(); the mount's CPU {dc / n * 1e6:.1f} us per call")
PY
done

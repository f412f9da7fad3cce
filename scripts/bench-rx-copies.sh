#!/usr/bin/env bash
# The receiving daemon's CPU for a 256 MiB flat push on loopback, with the passthrough copies
# made as chunks arrive (the default) and without them (`--copies-budget 0`), alternating
# (issue 33). The layer has no urgent set, so by default every file of 64 KiB or more is
# copied as its chunks arrive. Prints the daemon's CPU seconds and its state directory's size
# per run. Run as root (FUSE); everything lives under /dev/shm and is removed on exit.
# Environment: BIN (a built `teesfs`, default target/release/teesfs), RUNS (default 4).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/teesfs}
RUNS=${RUNS:-4}
work=$(mktemp -d /dev/shm/teesfs-rx-copies.XXXXXX)
cleanup() {
    set +e
    kill $(jobs -p) 2>/dev/null
    wait 2>/dev/null
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$work"
}
trap cleanup EXIT
export TEESFS_CONFIG="$work/config"
"$BIN" keygen --out "$work/pub.key" >/dev/null
"$BIN" keygen --cluster "$work/cluster" --nodes 'login,n01' >/dev/null
mkdir "$work/big"
for i in $(seq 0 255); do head -c 1048576 /dev/urandom >"$work/big/f$i"; done
id=$("$BIN" publish "$work/big" --store "$work/store" --key "$work/pub.key" --chunk-size 1MiB \
    --quiet --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["index"])')
tck=$(getconf CLK_TCK)
cpu_of() { awk -v t="$tck" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
for r in $(seq "$RUNS"); do
    for args in "" "--copies-budget 0"; do
        d="$work/r$r${args:+-nocopies}"
        mkdir -p "$d"
        # shellcheck disable=SC2086
        TEESFS_LOG=teesfs=warn "$BIN" daemon --host n01 --listen 127.0.0.1:0 \
            --identity "$work/cluster" --state-dir "$d/state" --mount-root "$d/jobs" \
            --control "$d/sock" --trust "$work/pub.pub" $args >"$d/out" 2>"$d/log" &
        pid=$!
        st=""
        for _ in $(seq 100); do
            st=$("$BIN" status --format json --control "$d/sock" 2>/dev/null) && break
            sleep 0.1
        done
        echo "n01 $(python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"])' <<<"$st")" >"$d/hosts"
        c0=$(cpu_of "$pid")
        "$BIN" push --quiet --store "$work/store" --nodes n01 --group-size 1 \
            --identity "$work/cluster" --hosts "$d/hosts" --listen 127.0.0.1:0 \
            --trust "$work/pub.pub" --index "$id" --strategy flat --wait all >/dev/null
        c1=$(cpu_of "$pid")
        printf 'run %s, copies %-20s daemon %.2f CPU-s, state directory %s MiB\n' "$r" \
            "${args:-as chunks arrive}:" "$(echo "$c1 - $c0" | bc -l)" "$(du -sm "$d/state" | cut -f1)"
        kill "$pid"
        wait "$pid" || true
    done
done

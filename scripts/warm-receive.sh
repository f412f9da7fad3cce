#!/usr/bin/env bash
# What a receiving daemon spends on its first push against the next ones (issue 33): one
# `teesfs daemon` on loopback receives LAYERS (directories, each published as its own
# layer) one after the other by `teesfs push --strategy flat --wait all`, each job released
# after it, as a Slurm epilog does. Prints per push the daemon's CPU-s, its minor page
# faults and its RSS. A fresh daemon's first push touches fresh memory (its stream
# windows, frames, the recent chunks); the next ones, within seconds, reuse it.
# Run as root (FUSE mounts). BIN: a release build (default target/release/teesfs);
# DAEMON_ARGS: more daemon options, split on spaces; SETTLE: seconds the daemon idles
# between pushes (default 0), as a node between jobs. Example:
#   for d in a b c; do mkdir -p /dev/shm/w$d; for i in $(seq 0 127); do
#     head -c 1M /dev/urandom > /dev/shm/w$d/f$i; done; done
#   LAYERS="/dev/shm/wa /dev/shm/wb /dev/shm/wc" bash scripts/warm-receive.sh
set -euo pipefail
BIN=${BIN:-target/release/teesfs}
LAYERS=${LAYERS:?set LAYERS to two or more layer directories, separated by spaces}
for l in $LAYERS; do [ -d "$l" ] || { echo "warm-receive: no layer directory $l" >&2; exit 1; }; done
work=$(mktemp -d /dev/shm/teesfs-warm.XXXXXX)
dp=""
cleanup() {
    set +e
    [ -n "$dp" ] && kill -TERM "$dp" 2>/dev/null && wait "$dp" 2>/dev/null
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export TEESFS_CONFIG="$work/config"
"$BIN" keygen --out "$work/pub.key" >/dev/null
"$BIN" keygen --cluster "$work/cluster" --nodes "login,n01" >/dev/null
idx=()
for l in $LAYERS; do
    idx+=("$("$BIN" publish "$l" --store "$work/store" --key "$work/pub.key" --quiet --format json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])')")
done
mkdir -p "$work/n01"
# shellcheck disable=SC2086 # DAEMON_ARGS is split on spaces on purpose
TEESFS_LOG=teesfs=warn "$BIN" daemon --host n01 --listen 127.0.0.1:0 --identity "$work/cluster" \
    --state-dir "$work/n01/state" --mount-root "$work/n01/jobs" --control "$work/n01/sock" \
    --trust "$work/pub.pub" ${DAEMON_ARGS:-} >"$work/n01/out" 2>"$work/n01/log" &
dp=$!
st=""
for _ in $(seq 300); do st=$("$BIN" status --format json --control "$work/n01/sock" 2>/dev/null) && break; sleep 0.1; done
[ -n "$st" ] || { echo "the daemon did not start:" >&2; cat "$work/n01/log" >&2; exit 1; }
echo "n01 $(python3 -c 'import json, sys; print(json.load(sys.stdin)["listen"])' <<<"$st")" >"$work/hosts"
cpu() { awk '{print ($14 + $15) / 100}' "/proc/$dp/stat"; }
faults() { awk '{print $10}' "/proc/$dp/stat"; }
n=0
for i in "${idx[@]}"; do
    n=$((n + 1))
    c0=$(cpu) f0=$(faults)
    "$BIN" push --quiet --store "$work/store" --index "$i" --nodes n01 --group-size 1 \
        --identity "$work/cluster" --hosts "$work/hosts" --listen 127.0.0.1:0 \
        --trust "$work/pub.pub" --wait all --no-learned-rates --strategy flat \
        >/dev/null 2>"$work/push.log" || { cat "$work/push.log" >&2; exit 1; }
    c1=$(cpu) f1=$(faults)
    rss=$(awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$dp/status")
    echo "push $n (${i:0:12}): daemon $(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}') CPU-s, $((f1 - f0)) minor faults, RSS $rss MiB"
    for j in $("$BIN" status --format json --control "$work/n01/sock" |
        python3 -c 'import json, sys; print(" ".join(j["job"] for j in json.load(sys.stdin).get("jobs", [])))'); do
        "$BIN" release --job "$j" --control "$work/n01/sock" >/dev/null
    done
    [ "$n" -lt "${#idx[@]}" ] && sleep "${SETTLE:-0}"
done

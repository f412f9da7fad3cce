#!/usr/bin/env bash
# Where a receiving daemon's CPU goes on a real layer (issue 33): `teesfs daemon`s on
# loopback receive LAYER by `teesfs push --wait all` (no urgent set, so copies are made
# ahead of every file). n01 runs under `perf record -g` (PERF_NODE=K: the K-th daemon,
# nK, instead); with CHILDREN=N n01 is a proxy that relays to N members (n02...), as a
# group's proxy does. Prints the push's wall time and each daemon's CPU-s, and leaves
# OUT/perf.data for `perf report --children`.
# Run as root. LAYER defaults to scripts/realistic-layer.sh's output in /var/tmp/rl (the
# demo's small chunks: LAYER=/var/tmp/teesfs-lab-demo/layer); BIN to a release build;
# PERF=0 measures without perf; URGENT_LIST=FILE publishes the layer with that urgent set
# (`publish --urgent-list`), so copies are made ahead of its files only; PUBLISH_ARGS: more
# options for `publish`, split on spaces (`--chunk-size 64KiB`). DAEMON_ARGS: more
# options for every daemon, split on spaces (`--rate-limit 9500KB` paces each child's
# stream as the lab's 76 Mbit/s links do, `--workers 1`).
# LAYER may name several directories (separated by spaces): each is published as a layer of
# its own and pushed in turn into the same daemons, each job released after it as a Slurm
# epilog does, with SETTLE seconds (default 0) of idling between, as a node between jobs.
# Per push it prints the CPU-s and n01's minor page faults and RSS: a fresh daemon's first
# push touches fresh memory (windows, frames, recent chunks), the next ones reuse it. E.g.
#   for d in a b c; do mkdir -p /dev/shm/w$d; for i in $(seq 0 127); do
#     head -c 1M /dev/urandom > /dev/shm/w$d/f$i; done; done
#   PERF=0 LAYER="/dev/shm/wa /dev/shm/wb /dev/shm/wc" bash scripts/profile-receive.sh
set -euo pipefail
BIN=${BIN:-target/release/teesfs}
LAYER=${LAYER:-/var/tmp/rl/layer}
OUT=${OUT:-/var/tmp/teesfs-profile-receive}
CHILDREN=${CHILDREN:-0}
PERF=${PERF:-1}
for l in $LAYER; do
    [ -d "$l" ] || { echo "profile-receive: no layer at $l (run scripts/realistic-layer.sh /var/tmp/rl, or set LAYER)" >&2; exit 1; }
done
case "$CHILDREN" in '' | *[!0-9]*) echo "profile-receive: CHILDREN=$CHILDREN is not a count of nodes (0-98)" >&2; exit 1 ;; esac
[ "$CHILDREN" -le 98 ] || { echo "profile-receive: CHILDREN=$CHILDREN: at most 98" >&2; exit 1; }
PERF_NODE=${PERF_NODE:-1}
case "$PERF_NODE" in '' | *[!0-9]*) echo "profile-receive: PERF_NODE=$PERF_NODE is not a daemon's number (1 for n01)" >&2; exit 1 ;; esac
[ "$PERF_NODE" -ge 1 ] && [ "$PERF_NODE" -le $((CHILDREN + 1)) ] ||
    { echo "profile-receive: PERF_NODE=$PERF_NODE: there are daemons n01..n$(printf '%02d' $((CHILDREN + 1))) (set CHILDREN)" >&2; exit 1; }
mkdir -p "$OUT"
work=$(mktemp -d /dev/shm/teesfs-prof.XXXXXX)
pids=()
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export TEESFS_CONFIG="$work/config"
n=$((CHILDREN + 1))
last=$(printf 'n%02d' "$n")
"$BIN" keygen --out "$work/pub.key" >/dev/null
"$BIN" keygen --cluster "$work/cluster" --nodes "login,n[01-$(printf '%02d' "$n")]" >/dev/null
idx=()
for l in $LAYER; do
    idx+=("$("$BIN" publish "$l" --store "$work/store" --key "$work/pub.key" --quiet --format json \
        ${URGENT_LIST:+--urgent-list "$URGENT_LIST"} ${PUBLISH_ARGS:-} 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])')")
done
: >"$work/hosts"
for i in $(seq "$n"); do
    h=$(printf 'n%02d' "$i")
    mkdir -p "$work/$h"
    TEESFS_LOG=teesfs=warn "$BIN" daemon --host "$h" --listen 127.0.0.1:0 --identity "$work/cluster" \
        --state-dir "$work/$h/state" --mount-root "$work/$h/jobs" --control "$work/$h/sock" \
        --trust "$work/pub.pub" ${DAEMON_ARGS:-} >"$work/$h/out" 2>"$work/$h/log" &
    pids+=("$!")
    st=""
    for _ in $(seq 300); do st=$("$BIN" status --format json --control "$work/$h/sock" 2>/dev/null) && break; sleep 0.1; done
    [ -n "$st" ] || { echo "daemon $h did not start:" >&2; cat "$work/$h/log" >&2; exit 1; }
    echo "$h $(python3 -c 'import json, sys; print(json.load(sys.stdin)["listen"])' <<<"$st")" >>"$work/hosts"
done
cpu_of() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }
faults_of() { awk '{print $10}' "/proc/$1/stat"; }
ppid=""
if [ "$PERF" = 1 ]; then
    perf record -F 2000 -g -p "${pids[$((PERF_NODE - 1))]}" -o "$OUT/perf.data" 2>/dev/null &
    ppid=$!
    sleep 0.5
fi
k=0
for i in "${idx[@]}"; do
    k=$((k + 1))
    label=""
    [ "${#idx[@]}" -gt 1 ] && label=" $k of ${#idx[@]} (${i:0:12})"
    before=()
    for p in "${pids[@]}"; do before+=("$(cpu_of "$p")"); done
    f0=$(faults_of "${pids[0]}")
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$BIN" push --quiet --store "$work/store" --index "$i" \
        --nodes "n[01-$(printf '%02d' "$n")]" --group-size "$n" --identity "$work/cluster" --hosts "$work/hosts" \
        --listen 127.0.0.1:0 --trust "$work/pub.pub" --wait all --no-learned-rates >/dev/null 2>&1
    read -r wall user sys <"$work/time"
    echo "push$label to n01..$last: wall $wall s, the root's CPU $(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}') s"
    for j in "${!pids[@]}"; do
        h=$(printf 'n%02d' $((j + 1)))
        role=member
        [ "$j" = 0 ] && role=$([ "$CHILDREN" = 0 ] && echo receiver || echo "proxy of $CHILDREN")
        echo "$h ($role): $(awk -v a="${before[$j]}" -v b="$(cpu_of "${pids[$j]}")" 'BEGIN {printf "%.2f", b - a}') CPU-s"
    done
    echo "n01: $(($(faults_of "${pids[0]}") - f0)) minor faults, RSS $(awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/${pids[0]}/status") MiB"
    [ "$k" -lt "${#idx[@]}" ] || break
    # Each job released, as a Slurm epilog does, before the next.
    for j in "${!pids[@]}"; do
        sock="$work/$(printf 'n%02d' $((j + 1)))/sock"
        for job in $("$BIN" status --format json --control "$sock" |
            python3 -c 'import json, sys; print(" ".join(j["job"] for j in json.load(sys.stdin).get("jobs", [])))'); do
            "$BIN" release --job "$job" --control "$sock" >/dev/null
        done
    done
    sleep "${SETTLE:-0}"
done
if [ -n "$ppid" ]; then kill -INT "$ppid"; wait "$ppid" || true; fi
if [ "$PERF" = 1 ]; then echo "profile of $(printf 'n%02d' "$PERF_NODE"): perf report -i $OUT/perf.data --children --sort symbol"; fi

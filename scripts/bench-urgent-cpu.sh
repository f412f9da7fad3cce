#!/usr/bin/env bash
# CPU of the urgent set's pass (issue 28, the default's CPU goal): `teesfs push --wait all` of
# a layer to 4 loopback daemons (one proxy and its 3 children), with the urgent set first (the
# default) and without one (copy-first's push), alternating, REPS times each; prints the root's
# and the daemons' CPU-s of every push and the medians. No application runs: this isolates the
# push's own cost of an urgent pass from what applications starting during it add.
# Run as root. LAYER and URGENT (a `teesfs record` list) default to the lab demo's
# (`teesfs lab demo` builds them in /var/tmp/teesfs-lab-demo); BIN to a release build.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPS=${REPS:-7}
LAYER=${LAYER:-/var/tmp/teesfs-lab-demo/layer}
URGENT=${URGENT:-/var/tmp/teesfs-lab-demo/urgent.txt}
if [ -z "${BIN:-}" ]; then
    cargo build --release --locked -p teesfs --bin teesfs
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/teesfs"
fi
[ -d "$LAYER" ] && [ -f "$URGENT" ] || { echo "bench-urgent-cpu: no $LAYER or $URGENT (run teesfs lab demo once, or set LAYER and URGENT)" >&2; exit 1; }
work=$(mktemp -d /dev/shm/teesfs-bench-urgent-cpu.XXXXXX)
pids=()
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
cleanup() { set +e; stop; grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
export TEESFS_CONFIG="$work/config"
"$BIN" keygen --out "$work/pub.key" >/dev/null
"$BIN" keygen --cluster "$work/cluster" --nodes 'login,n[01-04]' >/dev/null
idx=$("$BIN" publish "$LAYER" --store "$work/store" --key "$work/pub.key" --quiet --format json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])')
globs=()
while read -r l; do
    case "$l" in '' | '#'* | '!'*) continue ;; esac
    globs+=(--urgent "$(printf '%s' "${l#/}" | sed 's/[][*?]/[&]/g')")
done <"$URGENT"
cpu_of() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }
one() { # MODE REP
    local run="$work/$1-$2" st
    mkdir -p "$run"
    : >"$run/hosts"
    for i in 1 2 3 4; do
        local h="n0$i"
        mkdir -p "$run/$h"
        TEESFS_LOG=teesfs=warn "$BIN" daemon --host "$h" --listen 127.0.0.1:0 --identity "$work/cluster" \
            --state-dir "$run/$h/state" --mount-root "$run/$h/jobs" --control "$run/$h/sock" \
            --trust "$work/pub.pub" >"$run/$h/out" 2>"$run/$h/log" &
        pids+=("$!")
        st=""
        for _ in $(seq 300); do st=$("$BIN" status --format json --control "$run/$h/sock" 2>/dev/null) && break; sleep 0.1; done
        [ -n "$st" ] || { echo "daemon $h did not start:" >&2; cat "$run/$h/log" >&2; exit 1; }
        echo "$h $(python3 -c 'import json, sys; print(json.load(sys.stdin)["listen"])' <<<"$st")" >>"$run/hosts"
    done
    local extra=()
    [ "$1" = urgent ] && extra=("${globs[@]}")
    /usr/bin/time -f "%U %S" -o "$run/time" "$BIN" push --quiet --store "$work/store" --index "$idx" \
        --nodes 'n[01-04]' --group-size 4 --identity "$work/cluster" --hosts "$run/hosts" \
        --listen 127.0.0.1:0 --trust "$work/pub.pub" --wait all --no-learned "${extra[@]}" >/dev/null 2>&1
    local d=0
    for p in "${pids[@]}"; do d=$(awk -v a="$d" -v b="$(cpu_of "$p")" 'BEGIN {print a + b}'); done
    echo "$1 $(awk '{print $1 + $2}' "$run/time") $d"
    stop
}
echo "mode root_cpu_s daemons_cpu_s"
for r in $(seq "$REPS"); do one plain "$r"; one urgent "$r"; done | tee "$work/all"
python3 - "$work/all" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {m: (st.median(float(r[1]) for r in rows if r[0] == m), st.median(float(r[2]) for r in rows if r[0] == m)) for m in ("plain", "urgent")}
for m, (root, d) in med.items():
    print(f"{m:>6}: median root {root:.2f} CPU-s, daemons {d:.2f} CPU-s, together {root + d:.2f}")
p, u = (sum(med[m]) for m in ("plain", "urgent"))
print(f"urgent pass / plain push: {u / p:.2f}x CPU")
PY

#!/usr/bin/env bash
# The urgent set's arrival on a fragmented allocation against the same number of nodes in
# whole groups, in the scale-model lab (issue 28 item 7): 4 groups of 14; `n[01-52]` against
# `n[01-28,30-41,44-55]` (groups 3 and 4 without their proxy). Alternates the two, RUNS
# times each (default 3), and prints each run's urgent and whole-layer times and the median
# ratio. Run as root. Environment: BIN (a release teesfs), RUNS, OUT (report directory);
# another shape with LAB_GROUPS, GROUP_SIZE, WHOLE and FRAG (the two hostlists), for example
# LAB_GROUPS=2 GROUP_SIZE=26 WHOLE='n[01-48]' FRAG='n[01-26,28-49]' (22 orphans in one group);
# URGENT_FILES (default 5) files of URGENT_SIZE bytes (default 250000) make the urgent set;
# or LAYER (a layer directory) with URGENT_LIST (a file of its urgent paths, one a line, as
# `teesfs record` writes) instead of the generated one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
    cargo build --release --locked -p teesfs --features lab
    BIN=$PWD/target/release/teesfs
fi
RUNS=${RUNS:-3}
LAB_GROUPS=${LAB_GROUPS:-4}
GROUP_SIZE=${GROUP_SIZE:-14}
WHOLE=${WHOLE:-'n[01-52]'}
FRAG=${FRAG:-'n[01-28,30-41,44-55]'}
out=${OUT:-$(mktemp -d /var/tmp/teesfs-fragmented.XXXXXX)}
mkdir -p "$out"
urgent=()
if [ -n "${LAYER:-}" ]; then
    layer=$LAYER
    [ -f "${URGENT_LIST:-}" ] || { echo "LAYER needs URGENT_LIST, a file of urgent paths" >&2; exit 2; }
    while IFS= read -r path; do [ -n "$path" ] && urgent+=(--urgent "$path"); done <"$URGENT_LIST"
else
    layer=$(mktemp -d /dev/shm/teesfs-frag-layer.XXXXXX)
    trap 'rm -rf "$layer"' EXIT
    mkdir -p "$layer/urgent" "$layer/bulk"
    for i in $(seq 1 "${URGENT_FILES:-5}"); do head -c "${URGENT_SIZE:-250000}" /dev/urandom >"$layer/urgent/u$i"; done
    for i in $(seq 1 8); do head -c 1048576 /dev/urandom >"$layer/bulk/b$i"; done
    urgent=(--urgent 'urgent/*')
fi
for r in $(seq 1 "$RUNS"); do
    for kind in whole frag; do
        if [ "$kind" = whole ]; then nodes=$WHOLE; else nodes=$FRAG; fi
        TMPDIR=/dev/shm "$BIN" lab up --groups "$LAB_GROUPS" --group-size "$GROUP_SIZE" --layer "$layer" \
            "${urgent[@]}" --exit --nodes "$nodes" --report "$out/$kind$r.json" \
            >"$out/$kind$r.log" 2>&1 || { cat "$out/$kind$r.log" >&2; exit 1; }
    done
done
python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def get(kind, r):
    v = json.load(open(f"{out}/{kind}{r}.json"))
    return v["urgent_complete_s"], v["all_complete_s"], len(v["failures"])
ratios = []
for r in range(1, runs + 1):
    w, f = get("whole", r), get("frag", r)
    ratios.append(f[0] / w[0])
    print(f"run {r}: urgent whole {w[0]:.2f} s, fragmented {f[0]:.2f} s ({f[0]/w[0]:.2f}x); "
          f"layer {w[1]:.2f} / {f[1]:.2f} s; failures {w[2]} / {f[2]}")
print(f"median fragmented / whole: {statistics.median(ratios):.2f}x (reports in {out})")
PY

#!/usr/bin/env bash
# Urgent first, end to end (issue 15): the time until every lab node holds the urgent set
# when the rest of the layer streams behind it, against the same urgent files pushed alone,
# in the same run. The layer is this machine's Python standard library; the urgent set is
# the files an application importing a dozen standard modules loads. Node stores on tmpfs
# (TMPDIR=/dev/shm), as on diskless nodes. Prints one line per run and the median ratio.
#
# Environment: RUNS (repetitions, default 3), BIN (a built teesfs binary; default: build
# the release binary). Run as root (the lab uses namespaces, tc and FUSE).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "bench-urgent: run as root (the lab needs namespaces, tc and FUSE)" >&2
    exit 1
fi
bash scripts/deps.sh
if [ -z "${BIN:-}" ]; then
    cargo build --release --locked -p teesfs --features lab
    BIN="$PWD/target/release/teesfs"
fi
runs="${RUNS:-3}"
work="$(mktemp -d /var/tmp/teesfs-bench-urgent.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The layer and its urgent set: what `import json, email.parser, ...` loads from the stdlib.
python3 - "$work" <<'EOF'
import os, shutil, sys, sysconfig
import json, email.parser, argparse, http.client, asyncio, decimal, logging, unittest
import xml.dom.minidom, sqlite3, csv, typing, dataclasses
work = sys.argv[1]
base = sysconfig.get_paths()["stdlib"].rstrip("/") + "/"
shutil.copytree(base, f"{work}/full", symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "site-packages", "dist-packages"))
used = sorted({m.__file__ for m in list(sys.modules.values())
               if getattr(m, "__file__", None) and m.__file__.startswith(base)})
rel = [f[len(base):] for f in used if os.path.exists(f"{work}/full/" + f[len(base):])]
with open(f"{work}/urgent.txt", "w") as out:
    out.write("\n".join(rel) + "\n")
for r in rel:
    os.makedirs(os.path.dirname(f"{work}/urgent/{r}"), exist_ok=True)
    shutil.copy2(f"{work}/full/{r}", f"{work}/urgent/{r}")
print(f"layer {base}: {len(rel)} urgent files", file=sys.stderr)
EOF

globs=()
while read -r f; do globs+=(--urgent "$f"); done <"$work/urgent.txt"
export TMPDIR=/dev/shm
ratios=()
for i in $(seq "$runs"); do
    "$BIN" lab up --layer "$work/urgent" --exit --report "$work/alone.json" >/dev/null 2>&1
    "$BIN" lab up --layer "$work/full" --exit "${globs[@]}" --report "$work/behind.json" >/dev/null 2>&1
    alone=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["all_complete_s"])' "$work/alone.json")
    behind=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["urgent_complete_s"])' "$work/behind.json")
    ratio=$(python3 -c "print(f'{$behind / $alone:.2f}')")
    ratios+=("$ratio")
    echo "run $i: urgent set alone ${alone} s, with the rest of the layer behind it ${behind} s: ${ratio}x"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
echo "median ratio (urgent behind the rest / alone): ${median}x (goal: at most 1.2x)"

#!/usr/bin/env bash
# How long the applications' FUSE requests waited, by kind and by 30 s of the run, from the
# kernel's own tracepoints (fuse_request_send / fuse_request_end, Linux 6.x): what a
# `lab launch` method's applications waited for, beside what the report says.
#
#   sudo GROUP=32 bash scripts/fuse-waits.sh OUTDIR -- teesfs lab launch --methods ... ...
#
# Every mount that answers a request while COMMAND runs is counted. Mounts are taken in the
# order their FUSE_INIT was seen and summed GROUP at a time (a lab's nodes mount once per
# method, so GROUP=32 splits a 32-node `lab launch` by method). The raw trace stays in
# OUTDIR/fuse-trace.txt; the summary goes to stdout and OUTDIR/fuse-waits.txt.
set -euo pipefail

usage() {
    echo "usage: sudo GROUP=N bash $0 OUTDIR -- COMMAND [ARGS...]" >&2
    exit 2
}
[ $# -ge 3 ] && [ "$2" = "--" ] || usage
out=$1
shift 2
[ "$(id -u)" = 0 ] || { echo "needs root (the kernel's tracing)" >&2; exit 1; }
T=/sys/kernel/tracing
[ -d "$T/events" ] || mount -t tracefs nodev "$T"
[ -d "$T/events/fuse" ] || { echo "this kernel has no FUSE tracepoints ($T/events/fuse)" >&2; exit 1; }
mkdir -p "$out"
trace="$out/fuse-trace.txt"

stop() {
    echo 0 > "$T/tracing_on" || true
    echo 0 > "$T/events/fuse/enable" || true
    [ -n "${reader:-}" ] && kill "$reader" 2>/dev/null || true
}
trap stop EXIT
echo 0 > "$T/tracing_on"
echo > "$T/trace"
echo 65536 > "$T/buffer_size_kb"
echo 1 > "$T/events/fuse/fuse_request_send/enable"
echo 1 > "$T/events/fuse/fuse_request_end/enable"
echo 1 > "$T/tracing_on"
cat "$T/trace_pipe" > "$trace" &
reader=$!
status=0
"$@" || status=$?
sleep 1
stop
trap - EXIT

GROUP=${GROUP:-0} python3 - "$trace" <<'EOF' | tee "$out/fuse-waits.txt"
import collections, os, re, sys

send = re.compile(r'\s(\d+\.\d+): fuse_request_send: connection (\d+) req (\d+) opcode \d+ \((\w+)\)')
end = re.compile(r'\s(\d+\.\d+): fuse_request_end: connection (\d+) req (\d+)')
pending, gen, first, rows = {}, {}, {}, []
for line in open(sys.argv[1], errors='replace'):
    m = send.search(line)
    if m:
        t, c, r, op = float(m[1]), m[2], m[3], m[4]
        # A connection number is reused by a later mount: FUSE_INIT starts a new one.
        if op == 'FUSE_INIT' or c not in gen:
            gen[c] = gen.get(c, -1) + 1
            first[(c, gen[c])] = t
        pending[(c, r)] = (t, op, gen[c])
        continue
    m = end.search(line)
    if m:
        s = pending.pop((m[2], m[3]), None)
        if s:
            rows.append(((m[2], s[2]), s[0], float(m[1]) - s[0], s[1]))
mounts = sorted(first, key=first.get)
size = int(os.environ['GROUP']) or len(mounts) or 1
groups = [mounts[i:i + size] for i in range(0, len(mounts), size)]
print(f"{len(rows)} requests on {len(mounts)} mounts, {len(groups)} group(s) of {size}")
for gi, g in enumerate(groups):
    members, n = set(g), len(g)
    t0 = min(first[k] for k in g)
    ops = collections.defaultdict(lambda: [0, 0.0])
    reads = collections.defaultdict(lambda: [0, 0.0])
    other = collections.defaultdict(lambda: [0, 0.0])
    for k, ts, lat, op in rows:
        if k not in members:
            continue
        ops[op][0] += 1
        ops[op][1] += lat
        b = (reads if op == 'FUSE_READ' else other)[int((ts - t0) // 30) * 30]
        b[0] += 1
        b[1] += lat
    print(f"group {gi + 1} ({n} mounts), per mount:")
    for op, (c, s) in sorted(ops.items(), key=lambda x: -x[1][1])[:8]:
        print(f"  {op:18s} {c / n:7.0f} requests  waited {s / n:7.2f} s  mean {1000 * s / max(c, 1):7.2f} ms")
    for b in sorted(set(reads) | set(other)):
        r, o = reads[b], other[b]
        print(f"  {b:4d}-{b + 30:<4d} s: reads {r[0] / n:5.0f} waited {r[1] / n:6.2f} s;"
              f" other {o[0] / n:5.0f} waited {o[1] / n:6.2f} s (mean {1000 * o[1] / max(o[0], 1):.1f} ms)")
EOF
exit "$status"

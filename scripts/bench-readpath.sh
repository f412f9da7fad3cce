#!/usr/bin/env bash
# The mount's read path against plain tmpfs directories (issue 28 item 2): a scientific
# Python application (scripts/realistic-layer.sh) started N times at once from local data,
# through teesfs mounts and from a plain copy of the layer on tmpfs, in alternating rounds.
#
# "Local data" is what a node has once the whole layer arrived: the chunks in a store on
# tmpfs, a fresh mount (no page cache, no passthrough copies, an empty chunk cache). Each
# mount round therefore mounts afresh, starts the N applications at once, and unmounts.
#
#   MODE=mounts (default)  N `teesfs mount`s of one store, one application each: N nodes,
#                          each with its own mount process, on this machine's shared cores;
#   MODE=daemons           N `teesfs daemon`s on loopback, the nodes: each round starts
#                          them with empty stores, pushes the whole layer to them as a job
#                          (`push --wait all`, not timed), then starts one application per
#                          node on the job's mount, as `lab launch`'s copy-first does, and
#                          stops the daemons; KEEP=1 keeps the daemons and their stores
#                          from round to round (later rounds find the layer stored: a
#                          second job of the same layer);
#   MODE=shared            one mount, N applications reading through it at once.
#   PLAIN=separate         (default) each plain application reads its own copy of the
#                          layer, as each node of a cluster has its own; PLAIN=shared: one
#                          copy read by all N (their pages and CPU caches shared, which no
#                          two nodes of a cluster share); PLAIN_DIR=dir puts the separate
#                          copies there instead of on tmpfs (16 copies of the realistic
#                          layer and 16 nodes' stores do not fit in 24 GiB of tmpfs);
#   OVERLAY=1              each application runs chrooted in an overlay of its layer over
#                          "/", as a job does (`teesfs run`, the SPANK plugin); the plain
#                          runs then use the same overlay over the plain copy.
#
# Reported: the median wall time until every application has started (mount and plain)
# and its ratio, and the CPU seconds of the applications (user, sys) and of the mounts'
# processes, with the ratio of all CPU seconds through the mounts to the applications'
# from the plain copy: on a machine shared with other work, the CPU ratio is the steadier
# figure. With WARM=1 each mount round starts the applications a second time on the same
# mounts (page cache and copies warm). With COUNT=1 one more mount round counts the
# kernel's FUSE requests by opcode (perf and the fuse:fuse_request_send tracepoint, these
# mounts only).
#
# Usage: sudo scripts/bench-readpath.sh     (NODES=16 ROUNDS=5 MODE=mounts PLAIN=separate OVERLAY=0 WARM=0 COUNT=0 KEEP=0)
#        NODES=1 sudo -E scripts/bench-readpath.sh
#        MOUNT_ARGS="--passthrough never"   (extra `teesfs mount` or `teesfs daemon` arguments)
#        TEESFS_BIN=path LAYER_OUT=dir      (binary; where the layer is built, reused)
# Needs root (FUSE passthrough, mounts, chroot), python3 with pip and PyPI for the layer.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${NODES:-16}
rounds=${ROUNDS:-5}
mode=${MODE:-mounts}
overlay=${OVERLAY:-0}
count=${COUNT:-0}
warm=${WARM:-0}
keep=${KEEP:-0}
plain=${PLAIN:-separate}
bin=${TEESFS_BIN:-$PWD/target/release/teesfs}
layer_out=${LAYER_OUT:-/tmp/teesfs-realistic}
py=$(${PYTHON:-python3} -c 'import sys; print(sys.executable)')
read -ra extra_args <<<"${MOUNT_ARGS:-}"
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts, passthrough, overlays)"; exit 1; }
[ -x "$bin" ] || cargo build --release --locked -p teesfs
bash scripts/realistic-layer.sh "$layer_out" >/dev/null

work=$(mktemp -d /dev/shm/teesfs-readpath.XXXXXX)
servers=()   # the mount processes, or the daemons
cleanup() {
    set +e
    for m in "$work"/ov/*/m; do mountpoint -q "$m" && umount -l "$m"; done
    for p in "${servers[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${servers[@]}"; do wait "$p" 2>/dev/null; done
    for m in "$work"/mnt/* "$work"/nodes/*/jobs/*; do mountpoint -q "$m" && umount -l "$m"; done
    rm -rf "$work"
    [ -z "${plain_dir:-}" ] || [ "$plain_dir" = "$work" ] || rm -rf "$plain_dir"
}
trap cleanup EXIT INT TERM
export TEESFS_CONFIG="$work/config"
"$bin" keygen >/dev/null
id=$("$bin" publish "$layer_out/layer" --store "$work/store" --quiet --format json |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["index"])')
cp -a "$layer_out/layer" "$work/plain"
case $plain in
    separate)
        plain_dir=${PLAIN_DIR:-$work}
        [ "$plain_dir" = "$work" ] || plain_dir=$(mktemp -d "$plain_dir/teesfs-readpath-plain.XXXXXX")
        mv "$work/plain" "$plain_dir/plain-1"
        for i in $(seq 2 "$nodes"); do cp -a "$layer_out/layer" "$plain_dir/plain-$i"; done ;;
    shared) ;;
    *) echo "PLAIN=$plain: use separate or shared"; exit 2 ;;
esac
export PYTHONDONTWRITEBYTECODE=1
nmounts=$([ "$mode" = shared ] && echo 1 || echo "$nodes")
roots=()     # each application's layer in the current round
job=0

# CPU seconds (utime + stime) of a process so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

# Waits until `file` has a line starting with `what`, while process `pid` lives.
wait_line() {
    until grep -q "^$3" "$2" 2>/dev/null; do
        kill -0 "$1" 2>/dev/null || { cat "$2"; exit 1; }
        sleep 0.05
    done
}

start_daemons() {
    local i host dir
    [ -d "$work/cluster" ] ||
        "$bin" keygen --cluster "$work/cluster" --nodes "login,n[01-$(printf %02d "$nodes")]" >/dev/null
    servers=()
    rm -rf "$work/nodes"
    : >"$work/hosts"
    for i in $(seq "$nodes"); do
        host=n$(printf %02d "$i"); dir="$work/nodes/$host"
        mkdir -p "$dir"
        "$bin" daemon --host "$host" --listen 127.0.0.1:0 --identity "$work/cluster" \
            --state-dir "$dir/state" --mount-root "$dir/jobs" --control "$dir/sock" \
            --trust "$TEESFS_CONFIG/publisher.pub" "${extra_args[@]}" >"$dir/out" 2>"$dir/log" &
        servers+=($!)
        wait_line "$!" "$dir/out" "listening on "
        echo "$host $(awk '/^listening on /{print $3; exit}' "$dir/out")" >>"$work/hosts"
    done
}

# Makes the N layers of a mount round: fresh mounts, or the layer pushed as a new job.
up() {
    local i dir mp
    roots=()
    if [ "$mode" = daemons ]; then
        [ "$keep" = 1 ] && [ ${#servers[@]} -gt 0 ] || start_daemons
        job=$((job + 1))
        "$bin" push --quiet --store "$work/store" --index "$id" \
            --nodes "n[01-$(printf %02d "$nodes")]" --group-size 4 --identity "$work/cluster" \
            --hosts "$work/hosts" --listen 127.0.0.1:0 --job "$job" >"$work/push.log" 2>&1 ||
            { cat "$work/push.log"; exit 1; }
        for i in $(seq "$nodes"); do
            dir="$work/nodes/n$(printf %02d "$i")"
            mp="$dir/jobs/$job"
            until mountpoint -q "$mp"; do sleep 0.05; done
            roots+=("$mp")
        done
        return
    fi
    servers=()
    rm -rf "$work/mnt" "$work/files" && mkdir -p "$work/mnt" "$work/files"
    for i in $(seq "$nmounts"); do
        mkdir -p "$work/mnt/$i"
        rm -f "$work/mount-$i.log"
        "$bin" mount "$work/mnt/$i" --store "$work/store" --index "$id" \
            --materialize-dir "$work/files/$i" "${extra_args[@]}" >"$work/mount-$i.log" 2>&1 &
        servers+=($!)
    done
    for i in $(seq "$nmounts"); do
        wait_line "${servers[$((i - 1))]}" "$work/mount-$i.log" mounted
    done
    for i in $(seq "$nodes"); do roots+=("$work/mnt/$([ "$mode" = shared ] && echo 1 || echo "$i")"); done
}

down() {
    local i p
    if [ "$mode" = daemons ]; then
        for i in $(seq "$nodes"); do
            "$bin" release --job "$job" --control "$work/nodes/n$(printf %02d "$i")/sock" >/dev/null
        done
        [ "$keep" = 1 ] && return
        for p in "${servers[@]}"; do kill -TERM "$p"; done
        for p in "${servers[@]}"; do wait "$p" || true; done
        servers=()
        return
    fi
    for p in "${servers[@]}"; do kill -TERM "$p"; done
    for p in "${servers[@]}"; do wait "$p" || true; done
    servers=()
}

# With OVERLAY=1, mounts application i's overlay of `roots[i]` over "/".
overlays() {
    local i o
    [ "$overlay" = 1 ] || return 0
    for i in $(seq "$nodes"); do
        o="$work/ov/$i"
        rm -rf "$o" && mkdir -p "$o/up" "$o/work" "$o/m"
        mount -t overlay overlay -o "lowerdir=${roots[$((i - 1))]}:/,upperdir=$o/up,workdir=$o/work" "$o/m"
    done
}

no_overlays() {
    local m
    [ "$overlay" = 1 ] || return 0
    for m in "$work"/ov/*/m; do umount "$m"; done
}

# Starts the N applications at once on `roots`; prints "wall app_user app_sys" (seconds;
# the CPU summed over the applications).
run_apps() {
    local t0 t1 i apids=()
    overlays
    rm -f "$work"/time-*
    t0=$(date +%s.%N)
    for i in $(seq "$nodes"); do
        if [ "$overlay" = 1 ]; then
            /usr/bin/time -f '%U %S' -o "$work/time-$i" chroot "$work/ov/$i/m" \
                env PYTHONPATH=/opt/sciapp "$py" -m sciapp >"$work/app-$i.log" 2>&1 &
        else
            PYTHONPATH="${roots[$((i - 1))]}/opt/sciapp" /usr/bin/time -f '%U %S' \
                -o "$work/time-$i" "$py" -m sciapp >"$work/app-$i.log" 2>&1 &
        fi
        apids+=($!)
    done
    wait "${apids[@]}" || true
    t1=$(date +%s.%N)
    no_overlays
    for i in $(seq "$nodes"); do
        grep -q 'sciapp ok' "$work/app-$i.log" || { echo "application $i failed:"; cat "$work/app-$i.log"; exit 1; }
    done
    printf '%.2f %s\n' "$(echo "$t1 - $t0" | bc)" "$(cat "$work"/time-* | awk '{u += $1; s += $2} END {print u, s}')"
}

plain_round() {
    local i
    roots=()
    for i in $(seq "$nodes"); do
        if [ "$plain" = separate ]; then roots+=("$plain_dir/plain-$i"); else roots+=("$work/plain"); fi
    done
    run_apps
}

# CPU seconds of the mounts' processes (or the daemons) so far.
servers_cpu() {
    local p sum=0
    for p in "${servers[@]}"; do sum=$(echo "$sum + $(cpu_of "$p")" | bc); done
    echo "$sum"
}

# Fresh mounts, the applications through them (and again, warm, with WARM=1); prints
# "wall app_user app_sys mounts_cpu" per start, the cold one first.
mount_round() {
    local before out after
    up
    before=$(servers_cpu)
    out=$(run_apps)
    after=$(servers_cpu)
    echo "$out $(echo "$after - $before" | bc)"
    if [ "$warm" = 1 ]; then
        out=$(run_apps)
        echo "$out $(echo "$(servers_cpu) - $after" | bc)"
    fi
    down
}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { cut -d' ' -f"$2" "$work/$1.txt" | median; }

# The medians of one kind of start against the plain starts.
summary() {
    local kind=$1 w u s d pw pu ps
    w=$(col "$kind" 1); u=$(col "$kind" 2); s=$(col "$kind" 3); d=$(col "$kind" 4)
    pw=$(col plain 1); pu=$(col plain 2); ps=$(col plain 3)
    echo "$kind: wall $w s against $pw s plain: $(echo "scale=2; $w / $pw" | bc)x; CPU (applications + mounts) $(echo "$u + $s + $d" | bc) s against $(echo "$pu + $ps" | bc) s plain: $(echo "scale=2; ($u + $s + $d) / ($pu + $ps)" | bc)x (applications user $u s, sys $s s against $pu s, $ps s; mounts $d s)"
}

echo "read path: $nodes application(s), mode $mode ($nmounts mount(s)), plain copies $plain, overlay $overlay, $rounds rounds, $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "layer: $(du -sh "$layer_out/layer" | cut -f1), $(find "$layer_out/layer" -type f | wc -l) files; binary $bin ${MOUNT_ARGS:-}"
: >"$work/plain.txt"; : >"$work/cold.txt"; : >"$work/warm.txt"
for r in $(seq "$rounds"); do
    # Alternate which goes first, so drift on a shared machine hits both alike. Rounds run
    # in this shell (not in $(...)), so the servers' pids stay known to the cleanup.
    if [ $((r % 2)) = 1 ]; then
        plain_round >"$work/p.out"; mount_round >"$work/m.out"
    else
        mount_round >"$work/m.out"; plain_round >"$work/p.out"
    fi
    echo "$(cat "$work/p.out") 0" >>"$work/plain.txt"
    sed -n 1p "$work/m.out" >>"$work/cold.txt"
    [ "$warm" = 1 ] && sed -n 2p "$work/m.out" >>"$work/warm.txt"
    line="round $r (wall, applications user and sys, mounts CPU): plain $(cat "$work/p.out"); cold $(sed -n 1p "$work/m.out")"
    [ "$warm" = 1 ] && line="$line; warm $(sed -n 2p "$work/m.out")"
    echo "$line"
done
summary cold
[ "$warm" = 1 ] && summary warm

if [ "$count" = 1 ]; then
    up
    devs=$(for r in "${roots[@]}"; do stat -c '%Hd %Ld' "$r"; done | sort -u | awk '{print $1 * 1048576 + $2}' | paste -sd,)
    perf record -q -e fuse:fuse_request_send -a -o "$work/perf.data" -- sleep 1000 &
    perf_pid=$!
    sleep 1
    run_apps >/dev/null
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    down
    echo "FUSE requests by opcode ($nodes applications, these mounts only):"
    perf script -i "$work/perf.data" -F trace 2>/dev/null | awk -v devs="$devs" '
        BEGIN { n = split(devs, d, ","); for (i = 1; i <= n; i++) ours[d[i]] = 1 }
        { for (i = 1; i <= NF; i++) { if ($i == "connection") c = $(i + 1); if ($i == "opcode") op = $(i + 2) }
          if (c in ours) { gsub(/[()]/, "", op); k[op]++; t++ } }
        END { for (o in k) printf "  %-20s %8d\n", o, k[o]; printf "  %-20s %8d\n", "total", t }' | sort -k2 -n -r
fi

#!/usr/bin/env bash
# Distribution benchmarks for issue 4, every figure beside its baseline from the same run:
#   1. push throughput on loopback: `teesfs push --wait all` of PUSH_MIB MiB of incompressible
#      data to one daemon (flat) and down a 2-hop chain, against a raw quinn stream of the same
#      bytes between two processes (teesfs/examples/quic_raw.rs: same transport, same TLS,
#      same windows, no relay), and against the floor for any verified, stored transfer: the
#      same raw stream whose server hashes every frame with BLAKE3 and writes it to a file of
#      its own on /dev/shm while it reads the next, one frame at work as in the daemon
#      (`quic_raw server ... STORE`);
#      It also measures the CPU of a proxy that receives the push and forwards it to 7
#      children (one group of 8 daemons, `--strategy topo`) beside one of its leaves;
#      and how the receiving daemon scales with cores: the same flat push with the daemon
#      alone limited to 1 core and then to 2 (`taskset`; the root and quic_raw may use any
#      core in both runs, so the sender has the same headroom), runs alternating;
#   2. cold read latency of a missing chunk at tree depth 1, 2, 3 (a chain
#      login -> n01 -> n02 -> n03) against the model (d+1) x (round trip + chunk time), with
#      the round trip from `quic_raw ping` and the chunk time from benchmark 1's raw rate.
#      The push is rate-limited to 1 KiB/s, so after the urgent file and one dummy chunk the
#      root sleeps: every other file reaches a node only by demand, and every read is cold.
# Run as root (FUSE mounts). Everything lives under one temporary directory on /dev/shm
# (nodes are diskless); daemons, the background push and mounts are stopped and removed on
# exit, also on failure or Ctrl-C.
#
# Environment: RUNS (push repetitions, default 3), PUSH_MIB (default 256), READS (cold reads
# per depth and file size, default 9), RATE (root cap for the cut-through check, default
# 64MiB), SCALE_RUNS (pairs of 1-core/2-core pushes, default 3), PARTS (which parts to run,
# default "push scale cut cold"; cold needs push), BIN and RAW (built `teesfs` and `quic_raw`; default:
# build them in release mode), DAEMON_ARGS (more options for every daemon, split on spaces; for
# example `--copies-budget 0` to measure the receiving daemon without the copies it makes ahead).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "bench-dist: run as root (FUSE mounts)" >&2
    exit 1
fi
RUNS=${RUNS:-3}
PUSH_MIB=${PUSH_MIB:-256}
READS=${READS:-9}
SCALE_RUNS=${SCALE_RUNS:-3}
PARTS=${PARTS:-push scale cut cold}
read -ra daemon_args <<<"${DAEMON_ARGS:-}"
part() { [[ " $PARTS " == *" $1 "* ]]; }
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${BIN:-}" ] || [ -z "${RAW:-}" ]; then
    cargo build --release --locked -p teesfs --bin teesfs --example quic_raw
fi
BIN=${BIN:-$target/release/teesfs}
RAW=${RAW:-$target/release/examples/quic_raw}

work=$(mktemp -d /dev/shm/teesfs-bench-dist.XXXXXX)
daemon_pids=()
other_pids=()
cleanup() {
    set +e
    for p in "${other_pids[@]}" "${daemon_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${other_pids[@]}" "${daemon_pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    # Mounts a killed daemon left behind.
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export TEESFS_CONFIG="$work/config"

"$BIN" keygen --out "$work/pub.key" >/dev/null
"$BIN" keygen --cluster "$work/cluster" --nodes 'login,n[01-08]' >/dev/null
"$RAW" keygen "$work/rawcreds"

# Median of numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# Median of the arguments.
med() { printf '%s\n' "$@" | median; }

# Starts daemons n01..n$1 with fresh state under $work/run$2; writes $work/run$2/hosts.
start_daemons() {
    local n=$1 run="$work/run$2"
    mkdir -p "$run"
    : >"$run/hosts"
    for i in $(seq 1 "$n"); do
        local host
        host=$(printf 'n%02d' "$i")
        mkdir -p "$run/$host"
        # DAEMON_CPUS: the cores the daemons may run on (taskset's list), else any.
        TEESFS_LOG=teesfs=warn ${DAEMON_CPUS:+taskset -c "$DAEMON_CPUS"} "$BIN" daemon --host "$host" --listen 127.0.0.1:0 \
            --identity "$work/cluster" --state-dir "$run/$host/state" \
            --mount-root "$run/$host/jobs" --control "$run/$host/sock" \
            --trust "$work/pub.pub" "${daemon_args[@]}" >"$run/$host/out" 2>"$run/$host/log" &
        daemon_pids+=("$!")
        # Ready once it answers on its control socket; its bound address is in the answer.
        local st="" addr=""
        for _ in $(seq 300); do
            st=$("$BIN" status --format json --control "$run/$host/sock" 2>/dev/null) && break
            sleep 0.1
        done
        [ -n "$st" ] && addr=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["listen"])' <<<"$st")
        [ -n "$addr" ] || { echo "daemon $host did not start:" >&2; cat "$run/$host/log" >&2; exit 1; }
        echo "$host $addr" >>"$run/hosts"
    done
}

# Stops every daemon started so far (they unmount their jobs on SIGTERM).
stop_daemons() {
    for p in "${daemon_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${daemon_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    daemon_pids=()
}

status() { "$BIN" status --format json --control "$work/run$1/$2/sock"; }

# Every push plans without the link rates the pushes before it taught the store: with them
# it would be paced at what those measured, and a later push could never go faster.
push() { # run nodes extra...
    local run="$work/run$1" nodes=$2
    shift 2
    "$BIN" push --quiet --store "$work/store" --nodes "$nodes" --group-size "${GROUP:-1}" \
        --no-learned-rates \
        --identity "$work/cluster" --hosts "$run/hosts" --listen 127.0.0.1:0 \
        --trust "$work/pub.pub" "$@"
}

publish() {
    # 1 MiB chunks whatever the layer size: the cold-read model counts one chunk per 1 MiB file.
    "$BIN" publish "$1" --store "$work/store" --key "$work/pub.key" --chunk-size 1MiB --quiet --format json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["index"])'
}

json() { python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "== building layers" >&2
mkdir -p "$work/big"
for i in $(seq 0 $((PUSH_MIB - 1))); do
    head -c 1048576 /dev/urandom >"$work/big/f$(printf %05d "$i")"
done
big_id=$(publish "$work/big")

# The cold-read layer: a tiny urgent file, a dummy chunk (the only one the rate-limited root
# sends after it), then 1 MiB and 4 KiB files that arrive only by demand. 4 KiB is above the
# 2 KiB inline limit, so each is a chunk of its own.
cold="$work/cold"
mkdir -p "$cold/app" "$cold/mib" "$cold/kib"
head -c 1100 /dev/urandom >"$cold/app/main"
head -c 3000 /dev/urandom >>"$cold/app/main"
head -c 1048576 /dev/urandom >"$cold/a_dummy"
for i in $(seq 0 $((3 * READS - 1))); do
    head -c 1048576 /dev/urandom >"$cold/mib/f$(printf %03d "$i")"
    head -c 4096 /dev/urandom >"$cold/kib/t$(printf %03d "$i")"
done
cold_id=$(publish "$cold")

raw=() stored=() flat=() chain=()
# CPU seconds per run: raw client and server, the hashing and the store writes alone
# (`quic_raw work`), and the flat push's root and daemon.
cpu_client=() cpu_server=() cpu_hash=() cpu_store=() cpu_root=() cpu_daemon=()
cpu_proxy=() cpu_leaf=() fan=()
scale1=() scale2=() scpu1=() scpu2=()
clk_tck=$(getconf CLK_TCK)
cpu_of() { awk -v t="$clk_tck" '{printf "%.3f", ($14 + $15) / t}' "/proc/$1/stat"; }
# One quic_raw transfer of PUSH_MIB MiB; writes its MiB/s to the file $1, and the client's
# and the server's CPU seconds to $1.client and $1.server. With a second argument, the
# server hashes and stores every frame in that directory. (Not run in a subshell, so the
# cleanup trap knows the server's pid.)
raw_run() {
    local out=$1
    shift
    # Emptied first: the server's redirect truncates it only once the server's process runs,
    # and the wait below must not read the last server's address.
    : >"$work/raw-server.out"
    "$RAW" server "$work/rawcreds" 127.0.0.1:0 "$@" >"$work/raw-server.out" &
    other_pids+=("$!")
    for _ in $(seq 100); do grep -q listening "$work/raw-server.out" && break; sleep 0.05; done
    local addr
    addr=$(awk '/^listening on/ {print $3}' "$work/raw-server.out")
    "$RAW" client "$work/rawcreds" "$addr" "${PUSH_MIB}MiB" >"$work/raw-client.out"
    wait "${other_pids[-1]}"
    unset 'other_pids[-1]'
    awk '/^sent/ {print $(NF-1)}' "$work/raw-client.out" >"$out"
    awk '/^cpu-seconds/ {print $2}' "$work/raw-client.out" >"$out.client"
    awk '/^cpu-seconds/ {print $2}' "$work/raw-server.out" >"$out.server"
}
part push && echo "== 1. push throughput, $PUSH_MIB MiB, $RUNS runs" >&2
for r in $(seq "$RUNS"); do
    part push || break
    raw_run "$work/rate"
    raw+=("$(cat "$work/rate")")
    cpu_client+=("$(cat "$work/rate.client")")
    cpu_server+=("$(cat "$work/rate.server")")
    rm -rf "$work/rawstore" && mkdir -p "$work/rawstore"
    raw_run "$work/rate" "$work/rawstore"
    stored+=("$(cat "$work/rate")")
    rm -rf "$work/rawstore" && mkdir -p "$work/rawstore"
    "$RAW" work "$work/rawstore" "${PUSH_MIB}MiB" >"$work/work.out"
    cpu_hash+=("$(awk '/^hash-seconds/ {print $2}' "$work/work.out")")
    cpu_store+=("$(awk '/^store-seconds/ {print $2}' "$work/work.out")")
    rm -rf "$work/rawstore"

    start_daemons 1 "flat$r"
    d0=$(cpu_of "${daemon_pids[0]}")
    # The root's CPU: bash's `time` of the push (its stderr still reaches the terminal).
    { TIMEFORMAT='%3U %3S'; time push "flat$r" n01 --index "$big_id" --strategy flat --wait all \
        --report "$work/flat$r.json" >/dev/null 2>&3; } 3>&2 2>"$work/root-time"
    d1=$(cpu_of "${daemon_pids[0]}")
    cpu_root+=("$(awk '{print $1 + $2}' "$work/root-time")")
    cpu_daemon+=("$(echo "$d1 - $d0" | bc -l)")
    flat+=("$(json "$work/flat$r.json" "$PUSH_MIB / v['all_complete_s']")")
    stop_daemons

    start_daemons 2 "chain$r"
    push "chain$r" 'n[01-02]' --index "$big_id" --strategy hostlist --width 1 --wait all \
        --report "$work/chain$r.json" >/dev/null
    chain+=("$(json "$work/chain$r.json" "$PUSH_MIB / v['all_complete_s']")")
    stop_daemons

    # A proxy forwarding to its group: n01 receives from the root and sends to n02..n08.
    start_daemons 8 "fan$r"
    p0=$(cpu_of "${daemon_pids[0]}") l0=$(cpu_of "${daemon_pids[1]}")
    # (Without learned rates, see push: with them the planner makes the group a chain
    # instead of one proxy feeding 7 children.)
    GROUP=8 push "fan$r" 'n[01-08]' --index "$big_id" --strategy topo --wait all \
        --report "$work/fan$r.json" >/dev/null
    cpu_proxy+=("$(echo "$(cpu_of "${daemon_pids[0]}") - $p0" | bc -l)")
    cpu_leaf+=("$(echo "$(cpu_of "${daemon_pids[1]}") - $l0" | bc -l)")
    fan+=("$(json "$work/fan$r.json" "$PUSH_MIB / v['all_complete_s']")")
    stop_daemons
    echo "run $r: raw ${raw[-1]} MiB/s, raw hashed and stored ${stored[-1]} MiB/s, push flat ${flat[-1]} MiB/s, 2-hop chain ${chain[-1]} MiB/s, group of 8 ${fan[-1]} MiB/s" >&2
done
# One flat push to a daemon on the cores $1 (taskset's list); appends its MiB/s and the
# daemon's CPU seconds to the arrays named $2 and $3.
scaled_push() {
    local -n rates=$2 cpus=$3
    DAEMON_CPUS=$1 start_daemons 1 "scale$1.$4"
    local c0
    c0=$(cpu_of "${daemon_pids[0]}")
    push "scale$1.$4" n01 --index "$big_id" --strategy flat --wait all \
        --report "$work/scale.json" >/dev/null
    cpus+=("$(echo "$(cpu_of "${daemon_pids[0]}") - $c0" | bc -l)")
    rates+=("$(json "$work/scale.json" "$PUSH_MIB / v['all_complete_s']")")
    stop_daemons
}
if part scale; then
    echo "== 1b. the receiving daemon on 1 core, then on 2, $SCALE_RUNS pairs" >&2
    for r in $(seq "$SCALE_RUNS"); do
        scaled_push 0 scale1 scpu1 "$r"
        scaled_push 0,1 scale2 scpu2 "$r"
        echo "pair $r: daemon on 1 core ${scale1[-1]} MiB/s, on 2 cores ${scale2[-1]} MiB/s" >&2
    done
fi

if part push; then
raw_med=$(med "${raw[@]}")
stored_med=$(med "${stored[@]}")
flat_med=$(med "${flat[@]}")
chain_med=$(med "${chain[@]}")
# Ratios within each run (raw and teesfs measured seconds apart), then their median.
flat_ratio=$(for i in "${!raw[@]}"; do echo "${flat[$i]} / ${raw[$i]}" | bc -l; done | median)
chain_ratio=$(for i in "${!raw[@]}"; do echo "${chain[$i]} / ${raw[$i]}" | bc -l; done | median)
stored_ratio=$(for i in "${!raw[@]}"; do echo "${stored[$i]} / ${raw[$i]}" | bc -l; done | median)
flat_floor=$(for i in "${!raw[@]}"; do echo "${flat[$i]} / ${stored[$i]}" | bc -l; done | median)
# The most any verified, stored push can reach against raw on this machine, per run: both
# ends share the machine's cores, so a push takes at least (sender's CPU + receiver's CPU)
# / cores. The sender needs at least the lesser of the raw client's and the root's CPU; the
# receiver at least the raw server's plus hashing and storing alone (`quic_raw work`, with
# the frame in cache). Raw itself does not keep both cores busy, so this is generous.
cores=$(nproc)
ceiling=() t_min=()
for i in "${!raw[@]}"; do
    sender=$(echo "${cpu_client[$i]} ${cpu_root[$i]}" | awk '{print ($1 < $2 ? $1 : $2)}')
    t=$(echo "($sender + ${cpu_server[$i]} + ${cpu_hash[$i]} + ${cpu_store[$i]}) / $cores" | bc -l)
    t_min+=("$t")
    ceiling+=("$(echo "($PUSH_MIB / ${raw[$i]}) / $t" | bc -l)")
done
ceiling_med=$(med "${ceiling[@]}")
fi

# Cut-through with links, not the CPU, as the bottleneck: on this loopback all processes share
# the same cores, so an unlimited chain does twice the CPU work of a flat push. With the root
# capped at RATE per child, a chain that forwards each chunk as soon as it holds it finishes
# about one chunk later than the flat push; store-and-forward of the layer would take 2x.
RATE=${RATE:-64MiB}
rflat=() rchain=()
part cut && echo "== cut-through: root capped at $RATE/s, 2 runs" >&2
for r in 1 2; do
    part cut || break
    start_daemons 1 "rflat$r"
    push "rflat$r" n01 --index "$big_id" --strategy flat --wait all --rate-limit "$RATE" \
        --report "$work/rflat$r.json" >/dev/null
    rflat+=("$(json "$work/rflat$r.json" "v['all_complete_s']")")
    stop_daemons
    start_daemons 2 "rchain$r"
    push "rchain$r" 'n[01-02]' --index "$big_id" --strategy hostlist --width 1 --wait all \
        --rate-limit "$RATE" --report "$work/rchain$r.json" >/dev/null
    rchain+=("$(json "$work/rchain$r.json" "v['all_complete_s']")")
    stop_daemons
done

if part cold; then
echo "== round trip (quic_raw ping)" >&2
"$RAW" server "$work/rawcreds" 127.0.0.1:0 >"$work/raw-server.out" &
other_pids+=("$!")
for _ in $(seq 100); do grep -q listening "$work/raw-server.out" && break; sleep 0.05; done
addr=$(awk '/^listening on/ {print $3}' "$work/raw-server.out")
ping_out=$("$RAW" ping "$work/rawcreds" "$addr" 1000)
wait "${other_pids[-1]}"
unset 'other_pids[-1]'
rtt_us=$(sed -E 's/.*median ([0-9.]+) us.*/\1/' <<<"$ping_out")

echo "== 2. cold reads at depth 1, 2, 3" >&2
start_daemons 3 cold
"$BIN" plan --nodes 'n[01-03]' --group-size 1 --strategy hostlist --width 1 >"$work/plan.txt" 2>&1 || true
push cold 'n[01-03]' --index "$cold_id" --strategy hostlist --width 1 --urgent 'app/*' \
    --wait urgent --rate-limit 1KiB --report "$work/cold.json" >"$work/cold-push.out" 2>&1
bg=$(sed -nE 's/.*background \(pid ([0-9]+).*/\1/p' "$work/cold-push.out")
[ -n "$bg" ] && other_pids+=("$bg")
# Wait until the dummy chunk (sent 1100+3000 B / 1 KiB/s after the urgent one) is on n03,
# so nothing but demand traffic moves while we read.
for _ in $(seq 300); do
    [ "$(status cold n03 | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["have"])')" -ge 2 ] && break
    sleep 0.1
done
sleep 0.5
mnt() { status cold "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["mountpoint"])'; }
cat >"$work/read.py" <<'EOF'
import sys, time
# Arguments LABEL=PATH. Cold-reads each file (open + read to the end), 0.3 s apart so the
# background forwarding of the previous chunk to the node's children has finished; prints
# "LABEL milliseconds" per file.
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    print(label, f"{(time.perf_counter() - t) * 1e3:.3f}")
    time.sleep(0.3)
EOF
declare -A mib kib mibmin kibmin mnts
# Each depth reads its own files, so a chunk that a read pulled through an ancestor is never
# read there again. Depths take turns (3, 2, 1, 3, 2, 1, ...) so a burst of load from
# elsewhere on the machine hits every depth alike.
for d in 1 2 3; do mnts[$d]=$(mnt "$(printf 'n%02d' "$d")"); done
args=()
for k in $(seq 0 $((READS - 1))); do
    for d in 3 2 1; do
        i=$(printf %03d $(((3 - d) * READS + k)))
        args+=("m$d=${mnts[$d]}/mib/f$i" "k$d=${mnts[$d]}/kib/t$i")
    done
done
python3 "$work/read.py" "${args[@]}" >"$work/reads.txt"
for d in 1 2 3; do
    awk -v l="m$d" '$1 == l {print $2}' "$work/reads.txt" >"$work/mib$d.txt"
    awk -v l="k$d" '$1 == l {print $2}' "$work/reads.txt" >"$work/kib$d.txt"
    mib[$d]=$(median <"$work/mib$d.txt")
    kib[$d]=$(median <"$work/kib$d.txt")
    mibmin[$d]=$(sort -g "$work/mib$d.txt" | head -1)
    kibmin[$d]=$(sort -g "$work/kib$d.txt" | head -1)
done
demand_in=$(for n in n01 n02 n03; do
    status cold "$n" | python3 -c '
import json, sys
print(json.load(sys.stdin)["jobs"][0]["counters"]["wants_sent"], end=" ")'
done)
stop_daemons
fi

if part push; then
echo
echo "Push throughput on loopback, $PUSH_MIB MiB incompressible, $RUNS runs"
printf '| %-28s | %12s | %16s |\n' "" "median MiB/s" "÷ raw (per run)"
printf '|%s|%s|%s|\n' "------------------------------" "-------------:" "-----------------:"
printf '| %-28s | %12.0f | %16.2f |\n' "raw quinn stream (quic_raw)" "$raw_med" 1
printf '| %-28s | %12.0f | %16.2f |\n' "raw, hashed and stored" "$stored_med" "$stored_ratio"
printf '| %-28s | %12.0f | %16.2f |\n' "teesfs push, 1 node (flat)" "$flat_med" "$flat_ratio"
printf '| %-28s | %12.0f | %16.2f |\n' "teesfs push, 2-hop chain" "$chain_med" "$chain_ratio"
echo "runs (MiB/s): raw ${raw[*]}; hashed and stored ${stored[*]}; flat ${flat[*]}; chain ${chain[*]}"
printf 'flat push ÷ raw hashed and stored (median of per-run ratios): %.2f\n' "$flat_floor"
echo
echo "CPU seconds per $PUSH_MIB MiB (medians of $RUNS runs; $cores cores shared by both ends)"
printf '| %-44s | %8s | %10s |\n' "" "CPU-s" "CPU-s/GiB"
printf '|%s|%s|%s|\n' "----------------------------------------------" "---------:" "-----------:"
cpu_row() { # label, median CPU-s per PUSH_MIB
    printf '| %-44s | %8.3f | %10.3f |\n' "$1" "$2" "$(echo "$2 * 1024 / $PUSH_MIB" | bc -l)"
}
cpu_row "raw client (sends)" "$(med "${cpu_client[@]}")"
cpu_row "raw server (receives)" "$(med "${cpu_server[@]}")"
cpu_row "BLAKE3 alone (quic_raw work)" "$(med "${cpu_hash[@]}")"
cpu_row "writing 1 MiB files to tmpfs alone" "$(med "${cpu_store[@]}")"
cpu_row "push root (teesfs push, flat)" "$(med "${cpu_root[@]}")"
cpu_row "receiving daemon (flat)" "$(med "${cpu_daemon[@]}")"
cpu_row "proxy: receives, forwards to 7 children" "$(med "${cpu_proxy[@]}")"
cpu_row "one of that proxy's leaves" "$(med "${cpu_leaf[@]}")"
echo "runs (CPU-s): raw server ${cpu_server[*]}; push root ${cpu_root[*]}; receiving daemon ${cpu_daemon[*]}; proxy ${cpu_proxy[*]}"
printf 'receiving daemon ÷ raw server (median of per-run ratios): %.2f\n' \
    "$(for i in "${!cpu_daemon[@]}"; do echo "${cpu_daemon[$i]} / ${cpu_server[$i]}" | bc -l; done | median)"
printf 'proxy ÷ receiving daemon (median of per-run ratios): %.2f; group of 8 took %s MiB/s per node (runs: %s)\n' \
    "$(for i in "${!cpu_proxy[@]}"; do echo "${cpu_proxy[$i]} / ${cpu_daemon[$i]}" | bc -l; done | median)" \
    "$(med "${fan[@]}")" "${fan[*]}"
printf 'Ceiling for any verified, stored push here: at least %.3f s per %s MiB, so at most %.2fx raw\n' \
    "$(med "${t_min[@]}")" "$PUSH_MIB" "$ceiling_med"
echo "  (per run: ${ceiling[*]})"
fi
if part scale; then
    echo
    echo "The receiving daemon alone on 1 core, then on 2 (taskset; the root on any core), flat push of $PUSH_MIB MiB, $SCALE_RUNS pairs"
    printf '| %-10s | %12s | %22s | %24s |\n' "daemon on" "median MiB/s" "daemon CPU-s per 256 MiB" "daemon cores in use (CPU-s ÷ s)"
    printf '|%s|%s|%s|%s|\n' "------------" "-------------:" "------------------------:" "--------------------------:"
    for k in 1 2; do
        local_rates="scale$k[@]" local_cpus="scpu$k[@]"
        rates=("${!local_rates}") cpus=("${!local_cpus}")
        printf '| %-10s | %12.0f | %22.3f | %24.2f |\n' "$k core(s)" "$(med "${rates[@]}")" \
            "$(echo "$(med "${cpus[@]}") * 256 / $PUSH_MIB" | bc -l)" \
            "$(for i in "${!rates[@]}"; do echo "${cpus[$i]} * ${rates[$i]} / $PUSH_MIB" | bc -l; done | median)"
    done
    printf '2 cores ÷ 1 core (median of per-pair ratios): %.2f (runs, MiB/s: 1 core %s; 2 cores %s)\n' \
        "$(for i in "${!scale1[@]}"; do echo "${scale2[$i]} / ${scale1[$i]}" | bc -l; done | median)" \
        "${scale1[*]}" "${scale2[*]}"
fi
if part cut; then
printf 'Cut-through, root capped at %s/s: flat %s s, 2-hop chain %s s (all_complete_s per run)\n' \
    "$RATE" "${rflat[*]}" "${rchain[*]}"
printf 'chain ÷ flat (medians): %.2f\n' "$(echo "$(med "${rchain[@]}") / $(med "${rflat[@]}")" | bc -l)"
fi
part cold || exit 0
echo
chunk_ms=$(echo "1000 / $raw_med" | bc -l)
rtt_ms=$(echo "$rtt_us / 1000" | bc -l)
printf 'Cold reads, %s files per depth and size, depths interleaved (ms); round trip %.3f ms (quic_raw ping median),\n' "$READS" "$rtt_ms"
printf 'chunk time %.3f ms (1 MiB at the median raw rate); model (d+1) x (round trip + chunk time)\n' "$chunk_ms"
printf '| %5s | %10s | %8s | %8s | %14s | %10s | %8s | %10s |\n' depth "1 MiB med" "min" model "med ÷ model" "4 KiB med" "min" "(d+1)·rtt"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "------:" "-----------:" "---------:" "---------:" "---------------:" "-----------:" "---------:" "-----------:"
for d in 1 2 3; do
    model=$(echo "($d + 1) * ($rtt_ms + $chunk_ms)" | bc -l)
    tmodel=$(echo "($d + 1) * $rtt_ms" | bc -l)
    printf '| %5s | %10.2f | %8.2f | %8.2f | %14.2f | %10.2f | %8.2f | %10.2f |\n' "$d" "${mib[$d]}" "${mibmin[$d]}" \
        "$model" "$(echo "${mib[$d]} / $model" | bc -l)" "${kib[$d]}" "${kibmin[$d]}" "$tmodel"
done
for d in 1 2 3; do echo "depth $d: 1 MiB $(paste -sd' ' "$work/mib$d.txt"); 4 KiB $(paste -sd' ' "$work/kib$d.txt")"; done
echo "demand requests sent by n01 n02 n03: $demand_in"
echo "plan:"
sed 's/^/  /' "$work/plan.txt"

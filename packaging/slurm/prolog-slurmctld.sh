#!/bin/sh
# teesfs PrologSlurmctld: push a job's layer to its nodes when Slurm allocates them, and let
# the job start as soon as every node holds the urgent set (the rest keeps streaming).
#
# slurm.conf:   PrologSlurmctld=/usr/share/teesfs/slurm/prolog-slurmctld.sh
# A job asks for its layer with the SPANK plugin's option (plugstack.conf names
# teesfs_spank.so):   sbatch --teesfs=/path/to/manifest.toml ...   (or #SBATCH --teesfs=...,
# or TEESFS_SPEC=/path/to/manifest.toml in the submitting environment). The plugin reads the
# spec as the user at submit and hands its absolute path to this script as SPANK_TEESFS_SPEC
# and its content as SPANK_TEESFS_SPEC_TEXT. Sites without the plugin can use the job's
# comment instead:   sbatch --comment=teesfs:/path/to/manifest.toml ...
# Jobs that ask for neither are left alone.
#
# With a seeder ([seeder] host in /etc/teesfs/teesfs.toml, or TEESFS_SEEDER in slurm.env),
# the job is handed to `teesfs seeder` on the login or data-mover node, which pushes it and
# keeps its log and report; this host then needs only the binary, munge and the site file,
# and relays the seeder's output. Without one, this host pushes itself: the spec must be
# readable by SlurmUser, and the login node's credentials too (see docs/slurm.md). Either way
# the layer must be signed by a publisher key the nodes trust.
# Nodes mount the layer at /run/teesfs/jobs/<SLURM_JOB_ID>, owned by the
# job's user ($SLURM_JOB_UID): with the plugin every task starts inside it; without, tasks
# run `srun teesfs run -- CMD`. A failed push fails the prolog, so the job does not start on
# nodes without its software. One bad node must not cost the job its start: when the push
# failed because of some of its nodes (no daemon, TLS, no answer, a node refusing the job),
# this script drains them (`scontrol update State=DRAIN`, the reason naming teesfs and the
# failed edge), writes what happened into the job's AdminComment and exits 1, and Slurm
# requeues the batch job onto healthy nodes, as slurm.conf(5) describes PrologSlurmctld
# (interactive jobs, and jobs submitted with --no-requeue, are cancelled instead). The
# SPANK plugin prints that AdminComment into the job's stderr when it starts again. An
# interactive job (srun, salloc) is cancelled and never starts: its srun or salloc, still
# waiting for the allocation, gets the same summary with `scontrol notify` and prints it. When the
# root or the job is at fault (the store, a layer every node refuses), nothing is drained.
# Slurm runs no Epilog for a start that failed here: with --drain-list the failed push has
# released the job on every node it reached before it returns, so no mount is left.
# Beside the log the push writes
# its report, job-<id>.json, and the same drawn as a page, job-<id>.html (the tree, arrival
# times, failed edges in red; `teesfs report` draws it again from the JSON).
set -u
[ -r /etc/teesfs/slurm.env ] && . /etc/teesfs/slurm.env
# slurm.env may name the seeder (TEESFS_SEEDER=host[:port]) instead of [seeder] host.
if [ -n "${TEESFS_SEEDER:-}" ]; then export TEESFS_SEEDER; fi
TEESFS=${TEESFS:-teesfs}
SCONTROL=${SCONTROL:-scontrol}
LOGDIR=${TEESFS_SLURM_LOGDIR:-/var/log/teesfs}

# Drains the nodes a failed push names in $1 (a host, a tab and a reason a line) and says
# so in the job's AdminComment. The only Slurm commands this script calls, and only when a
# start failed: slurm.conf(5) has PrologSlurmctld drain a node it cannot make available.
drain_bad_nodes() {
    [ -s "$1" ] || return 0
    tab=$(printf '\t')
    nodes=""
    why=""
    while IFS="$tab" read -r node reason; do
        [ -n "$node" ] || continue
        if "$SCONTROL" update NodeName="$node" State=DRAIN Reason="$reason" >&2; then
            echo "teesfs: drained $node: $reason" >&2
        else
            echo "teesfs: could not drain $node ($reason); drain it by hand" >&2
        fi
        nodes="$nodes${nodes:+,}$node"
        why="$why${why:+; }${reason#teesfs: }"
    done <"$1"
    if interactive; then
        notify_user "teesfs: the start of this job failed on $nodes ($why); Slurm drained $nodes and cancels this interactive job: run it again and it gets other nodes"
    fi
    "$SCONTROL" update JobId="$SLURM_JOB_ID" AdminComment="teesfs: a start of this job failed on $nodes ($why); Slurm drained $nodes and requeued the job" >&2 ||
        echo "teesfs: could not set job $SLURM_JOB_ID's AdminComment" >&2
}

# Whether the job is an interactive one (srun or salloc waiting for its allocation), which
# Slurm cancels when this script fails instead of requeueing it.
interactive() {
    "$SCONTROL" show job "$SLURM_JOB_ID" -o 2>/dev/null | grep -q ' BatchFlag=0 '
}

# Sends $1 to the srun or salloc waiting for the allocation, which prints it on its own
# stderr (slurmctld delivers `scontrol notify` to an interactive job's srun or salloc).
notify_user() {
    "$SCONTROL" notify "$SLURM_JOB_ID" "$1" >&2 ||
        echo "teesfs: could not tell job $SLURM_JOB_ID's srun or salloc why it failed" >&2
}

# When nothing was drained (the root or the job is at fault), tells an interactive job's
# user the push's last error line from $1 (its log).
tell_failure() {
    [ -s "$2" ] && return 0
    interactive || return 0
    last=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)
    notify_user "teesfs: pushing this job's layer failed (no node is at fault, so none was drained): ${last:-see job-$SLURM_JOB_ID.log}"
}

# slurmctld gives the prolog the plugin's variable and the job's comment.
spec=${SPANK_TEESFS_SPEC:-}
if [ -z "$spec" ]; then
    case "${SLURM_JOB_COMMENT:-}" in
        teesfs:*) spec=${SLURM_JOB_COMMENT#teesfs:} ;;
        *) exit 0 ;;
    esac
fi

if "$TEESFS" handoff --configured >/dev/null 2>&1; then
    mkdir -p -m 0711 "$LOGDIR" 2>/dev/null
    log="$LOGDIR/job-$SLURM_JOB_ID.log"
    [ -w "$LOGDIR" ] || log=/dev/null
    drains=$(mktemp "${TMPDIR:-/tmp}/teesfs-drain.XXXXXX") || drains=/dev/null
    if "$TEESFS" handoff --job "$SLURM_JOB_ID" --nodes "$SLURM_JOB_NODELIST" \
        --uid "${SLURM_JOB_UID:-0}" --spec "$spec" --drain-list "$drains" >"$log" 2>&1; then
        rm -f "$drains"
        exit 0
    fi
    echo "teesfs: the seeder's push of $spec to $SLURM_JOB_NODELIST failed; its log is job-$SLURM_JOB_ID.log on the seeder (each error and its fix: /usr/share/doc/teesfs/troubleshooting.md)" >&2
    [ "$log" = /dev/null ] || cat "$log" >&2
    drain_bad_nodes "$drains"
    tell_failure "$log" "$drains"
    [ "$drains" = /dev/null ] || rm -f "$drains"
    exit 1
fi

# Others may enter but not list the directory: each job's files are shared with the job's
# owner alone (an ACL entry that prefetch --owner adds).
mkdir -p -m 0711 "$LOGDIR" 2>/dev/null
umask 027
log="$LOGDIR/job-$SLURM_JOB_ID.log"
owner=""
[ -n "${SLURM_JOB_UID:-}" ] && owner="--owner $SLURM_JOB_UID"
drains="$LOGDIR/job-$SLURM_JOB_ID.drain"
# shellcheck disable=SC2086 # $owner is empty or two words
if "$TEESFS" prefetch "$spec" --nodes "$SLURM_JOB_NODELIST" --job-id "$SLURM_JOB_ID" $owner \
    --quiet --report "$LOGDIR/job-$SLURM_JOB_ID.json" \
    --report-html "$LOGDIR/job-$SLURM_JOB_ID.html" --drain-list "$drains" >>"$log" 2>&1; then
    rm -f "$drains"
    exit 0
fi
echo "teesfs: pushing $spec to $SLURM_JOB_NODELIST failed; see $log (each error and its fix: /usr/share/doc/teesfs/troubleshooting.md)" >&2
cat "$log" >&2
drain_bad_nodes "$drains"
tell_failure "$log" "$drains"
rm -f "$drains"
exit 1

#!/bin/sh
# teesfs EpilogSlurmctld: when a job that asked for a layer ends, learn its urgent set. Every
# node's daemon recorded what the job used while it started and kept that record when the
# node's Epilog released the job; `teesfs learn` asks every node for it over the network,
# merges the records in first-use order across nodes and keeps the list beside the index in
# the store (STORE/learned/<index id>.list). The next job of the same layer (the prolog's
# `teesfs prefetch`) pushes those files first, with no republish and nothing given by hand.
#
# slurm.conf:   EpilogSlurmctld=/usr/share/teesfs/slurm/epilog-slurmctld.sh
# Runs as SlurmUser on the controller, like the prolog. With a seeder ([seeder] host in
# teesfs.toml, or TEESFS_SEEDER in slurm.env) the seeder learns, as the prolog's push did;
# without, that user must be able to read the login node's credentials and to write
# STORE/learned/ (see docs/slurm.md). Jobs that asked
# for no layer are left alone. Never fails: a learned list is only a hint, and a node that
# is down or holds no record is named in the log and skipped.
set -u
[ -r /etc/teesfs/slurm.env ] && . /etc/teesfs/slurm.env
# slurm.env may name the seeder (TEESFS_SEEDER=host[:port]) instead of [seeder] host.
if [ -n "${TEESFS_SEEDER:-}" ]; then export TEESFS_SEEDER; fi
TEESFS=${TEESFS:-teesfs}
LOGDIR=${TEESFS_SLURM_LOGDIR:-/var/log/teesfs}

# The same spec the prolog pushed (the plugin's variable, else the job's comment).
spec=${SPANK_TEESFS_SPEC:-}
if [ -z "$spec" ]; then
    case "${SLURM_JOB_COMMENT:-}" in
        teesfs:*) spec=${SLURM_JOB_COMMENT#teesfs:} ;;
        *) exit 0 ;;
    esac
fi

mkdir -p "$LOGDIR" 2>/dev/null
log="$LOGDIR/job-$SLURM_JOB_ID.learn.log"
if "$TEESFS" handoff --configured >/dev/null 2>&1; then
    if ! "$TEESFS" handoff --kind learn --job "$SLURM_JOB_ID" --nodes "$SLURM_JOB_NODELIST" \
        --uid "${SLURM_JOB_UID:-0}" --spec "$spec" >"$log" 2>&1; then
        echo "teesfs: learning the urgent set of job $SLURM_JOB_ID failed; see $log" >&2
    fi
    exit 0
fi
# --store comes from the site configuration (/etc/teesfs/teesfs.toml) when the spec names
# none.
if ! "$TEESFS" learn --spec "$spec" --nodes "$SLURM_JOB_NODELIST" --job "$SLURM_JOB_ID" \
    >"$log" 2>&1; then
    echo "teesfs: learning the urgent set of job $SLURM_JOB_ID failed; see $log" >&2
fi
exit 0

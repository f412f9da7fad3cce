#!/bin/sh
# teesfs PrologSlurmctld: push a job's layer to its nodes when Slurm allocates them, and let
# the job start as soon as every node holds the urgent set (the rest keeps streaming).
#
# slurm.conf:   PrologSlurmctld=/usr/share/teesfs/slurm/prolog-slurmctld.sh
# A job asks for it with its comment:   sbatch --comment=teesfs:/path/to/manifest.toml ...
# Jobs without such a comment are left alone. The spec (manifest.toml) must be readable by
# SlurmUser, name a layer signed by a publisher key in /etc/teesfs/trusted, and the login
# node's credentials must be in /etc/teesfs/cluster (or the spec's [network] identity).
# Nodes mount the layer at /run/teesfs/jobs/<SLURM_JOB_ID as 16 hex digits>, where
# `srun teesfs run -- CMD` finds it; the job's user ($SLURM_JOB_UID) owns it there: only
# they (and root) can enter the mount, query or release it. A failed push fails the prolog, so Slurm requeues or
# cancels the job rather than start it on nodes without its software.
set -u
[ -r /etc/teesfs/slurm.env ] && . /etc/teesfs/slurm.env
TEESFS=${TEESFS:-teesfs}
LOGDIR=${TEESFS_SLURM_LOGDIR:-/var/log/teesfs}

# slurmctld gives the prolog the job's comment; no Slurm command is called from here (a
# prolog that calls back into slurmctld can stall it).
comment=${SLURM_JOB_COMMENT:-}
case "$comment" in
    teesfs:*) spec=${comment#teesfs:} ;;
    *) exit 0 ;;
esac

mkdir -p "$LOGDIR" 2>/dev/null
log="$LOGDIR/job-$SLURM_JOB_ID.log"
owner=""
[ -n "${SLURM_JOB_UID:-}" ] && owner="--owner $SLURM_JOB_UID"
# shellcheck disable=SC2086 # $owner is empty or two words
if "$TEESFS" prefetch "$spec" --nodes "$SLURM_JOB_NODELIST" --job-id "$SLURM_JOB_ID" $owner \
    --quiet --report "$LOGDIR/job-$SLURM_JOB_ID.json" >"$log" 2>&1; then
    exit 0
fi
echo "teesfs: pushing $spec to $SLURM_JOB_NODELIST failed; see $log" >&2
cat "$log" >&2
exit 1

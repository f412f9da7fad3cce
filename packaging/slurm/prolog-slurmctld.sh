#!/bin/sh
# teesfs PrologSlurmctld: push a job's layer to its nodes when Slurm allocates them, and let
# the job start as soon as every node holds the urgent set (the rest keeps streaming).
#
# slurm.conf:   PrologSlurmctld=/usr/share/teesfs/slurm/prolog-slurmctld.sh
# A job asks for its layer with the SPANK plugin's option (plugstack.conf names
# teesfs_spank.so):   sbatch --teesfs=/path/to/manifest.toml ...   (or #SBATCH --teesfs=...,
# or TEESFS_SPEC=/path/to/manifest.toml in the submitting environment). The plugin hands the
# spec's absolute path to this script as SPANK_TEESFS_SPEC. Sites without the plugin can use
# the job's comment instead:   sbatch --comment=teesfs:/path/to/manifest.toml ...
# Jobs that ask for neither are left alone. The spec must be readable by SlurmUser, name a
# layer signed by a publisher key in /etc/teesfs/trusted, and the login node's credentials
# must be readable by SlurmUser (see docs/slurm.md).
# Nodes mount the layer at /run/teesfs/jobs/<SLURM_JOB_ID>, owned by the
# job's user ($SLURM_JOB_UID): with the plugin every task starts inside it; without, tasks
# run `srun teesfs run -- CMD`. A failed push fails the prolog, so Slurm requeues or cancels
# the job rather than start it on nodes without its software. Beside the log the push writes
# its report, job-<id>.json, and the same drawn as a page, job-<id>.html (the tree, arrival
# times, failed edges in red; `teesfs report` draws it again from the JSON).
set -u
[ -r /etc/teesfs/slurm.env ] && . /etc/teesfs/slurm.env
TEESFS=${TEESFS:-teesfs}
LOGDIR=${TEESFS_SLURM_LOGDIR:-/var/log/teesfs}

# slurmctld gives the prolog the plugin's variable and the job's comment; no Slurm command
# is called from here (a prolog that calls back into slurmctld can stall it).
spec=${SPANK_TEESFS_SPEC:-}
if [ -z "$spec" ]; then
    case "${SLURM_JOB_COMMENT:-}" in
        teesfs:*) spec=${SLURM_JOB_COMMENT#teesfs:} ;;
        *) exit 0 ;;
    esac
fi

# Others may enter but not list the directory: each job's files are shared with the job's
# owner alone (an ACL entry that prefetch --owner adds).
mkdir -p -m 0711 "$LOGDIR" 2>/dev/null
umask 027
log="$LOGDIR/job-$SLURM_JOB_ID.log"
owner=""
[ -n "${SLURM_JOB_UID:-}" ] && owner="--owner $SLURM_JOB_UID"
# shellcheck disable=SC2086 # $owner is empty or two words
if "$TEESFS" prefetch "$spec" --nodes "$SLURM_JOB_NODELIST" --job-id "$SLURM_JOB_ID" $owner \
    --quiet --report "$LOGDIR/job-$SLURM_JOB_ID.json" \
    --report-html "$LOGDIR/job-$SLURM_JOB_ID.html" >"$log" 2>&1; then
    exit 0
fi
echo "teesfs: pushing $spec to $SLURM_JOB_NODELIST failed; see $log (each error and its fix: /usr/share/doc/teesfs/troubleshooting.md)" >&2
cat "$log" >&2
exit 1

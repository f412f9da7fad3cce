#!/bin/sh
# teesfs Epilog (runs on every compute node of a job when it ends): unmount the job's layer
# and stop relaying it. Chunks stay in the node's store for the next job using them.
#
# slurm.conf:   Epilog=/usr/share/teesfs/slurm/epilog.sh
# Never fails: a failing epilog would drain the node, and jobs that did not use teesfs
# have nothing to release.
[ -r /etc/teesfs/slurm.env ] && . /etc/teesfs/slurm.env
TEESFS=${TEESFS:-teesfs}
CONTROL=${TEESFS_CONTROL:-/run/teesfs/daemon.sock}
[ -S "$CONTROL" ] || exit 0
"$TEESFS" release --control "$CONTROL" >/dev/null 2>&1 || true
exit 0

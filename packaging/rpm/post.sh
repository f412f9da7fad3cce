# teesfs's %post. $1 is 1 on a first install, 2 or more on an upgrade. An upgrade leaves a
# running daemon running (jobs keep their mounts); only removal stops it (%preun).
# ($TEESFS_TEST_SYSTEMD stands for /run/systemd/system in the package test.)
install -d -m 0755 /etc/teesfs/teesfs.d /etc/teesfs/cluster /etc/teesfs/trusted
# The Slurm prolog's logs: others may enter, not list (each job's files carry an ACL entry
# for the job's owner, docs/slurm.md); an upgrade corrects the 0750 of earlier packages.
install -d -m 0711 /var/log/teesfs
if getent passwd slurm >/dev/null 2>&1; then
    chown slurm:slurm /var/log/teesfs 2>/dev/null \
        || echo "teesfs: could not give /var/log/teesfs to the slurm user; the Slurm prolog logs there" >&2
fi
if [ -d "${TEESFS_TEST_SYSTEMD:-/run/systemd/system}" ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -eq 1 ]; then
        echo "teesfs: edit /etc/teesfs/daemon.env, then: systemctl enable --now teesfs-daemon"
    elif systemctl is-active --quiet teesfs-daemon.service; then
        echo "teesfs: the running daemon keeps its jobs; restart it between jobs to use the new version (systemctl restart teesfs-daemon)"
    fi
fi
exit 0

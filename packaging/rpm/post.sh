# teesfs's %post. $1 is 1 on a first install, 2 or more on an upgrade. An upgrade leaves a
# running daemon running (jobs keep their mounts); only removal stops it (%preun).
install -d -m 0755 /etc/teesfs/teesfs.d /etc/teesfs/cluster /etc/teesfs/trusted
install -d -m 0750 /var/log/teesfs
if getent passwd slurm >/dev/null 2>&1; then
    chown slurm:slurm /var/log/teesfs 2>/dev/null \
        || echo "teesfs: could not give /var/log/teesfs to the slurm user; the Slurm prolog logs there" >&2
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -eq 1 ]; then
        echo "teesfs: edit /etc/teesfs/daemon.env, then: systemctl enable --now teesfs-daemon"
    elif systemctl is-active --quiet teesfs-daemon.service; then
        echo "teesfs: the running daemon keeps its jobs; restart it between jobs to use the new version (systemctl restart teesfs-daemon)"
    fi
fi
exit 0

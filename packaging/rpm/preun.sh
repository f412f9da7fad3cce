# teesfs's %preun. $1 is 0 on removal, 1 or more on an upgrade: only removal stops the daemon.
if [ "$1" -eq 0 ] && [ -d "${TEESFS_TEST_SYSTEMD:-/run/systemd/system}" ]; then
    systemctl stop teesfs-daemon.service teesfs-seeder.service >/dev/null 2>&1 || :
fi
exit 0

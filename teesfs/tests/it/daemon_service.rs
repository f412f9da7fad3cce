//! Issue 14, item 6: the daemon as a systemd service: readiness (`Type=notify`) once it
//! listens, and logs without terminal colour codes when stderr is not a terminal. A real
//! daemon and a real notify socket.

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::Duration;

use crate::cluster::{Cluster, daemon_command};
use crate::util::can_mount;

#[test]
fn the_daemon_tells_systemd_it_is_ready_and_logs_without_colour_codes() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let dir = c.ws.path().join("notify");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut child = daemon_command(&c.ws, &c.creds, "n01", &dir)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("TEESFS_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("daemon.log")).expect("log"))
        .spawn()
        .expect("daemon");
    let mut buf = [0u8; 256];
    let got = sock.recv(&mut buf);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = child.wait().expect("wait");
    // A SIGTERM right after readiness is handled (jobs unmounted), not fatal.
    assert!(status.success(), "the daemon died of the SIGTERM: {status}");
    let n = got.expect("the daemon sent its readiness");
    let msg = String::from_utf8_lossy(&buf[..n]);
    assert!(msg.contains("READY=1"), "{msg}");
    let log = std::fs::read_to_string(dir.join("daemon.log")).expect("log");
    assert!(log.contains(" INFO "), "the daemon logged: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

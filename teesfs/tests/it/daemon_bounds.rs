//! Issue 13, items 5 and 7: no local user can take a node daemon down through its control
//! socket, and one state directory has one daemon. Real daemons, real sockets, and an
//! unprivileged user (`nobody`) where the attack is another user's.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, daemon_command};
use crate::util::can_mount;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

fn reply_to(sock: &std::path::Path, request: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request).expect("send");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("reply");
    line
}

/// 400 MiB without a newline took the daemon from 21 MB to 1.6 GB. A request line is
/// capped now: the daemon reads 4 KiB, answers that the request is too long and hangs up,
/// and errors never repeat what was sent.
#[test]
fn a_control_line_without_newline_is_cut_off_and_memory_stays_bounded() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let pid = c.pid(0).expect("running");
    let sock = c.nodes[0].control();
    let before = rss_kib(pid);
    let mut s = UnixStream::connect(&sock).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let junk = vec![b'x'; 1 << 20];
    let mut sent = 0usize;
    for _ in 0..64 {
        match s.write(&junk) {
            Ok(n) => sent += n,
            Err(_) => break, // the daemon hung up: what should happen
        }
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(
        reply.contains("longer than 4096 bytes"),
        "after {sent} bytes: {reply:?}"
    );
    assert!(!reply.contains("xxxx"), "the request is echoed: {reply:?}");
    let after = rss_kib(pid);
    println!("daemon RSS {before} KiB before, {after} KiB after {sent} bytes without a newline");
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let secret = reply_to(&sock, b"status 1 SECRET-TOKEN\n");
    assert!(
        secret.contains("error") && !secret.contains("SECRET"),
        "{secret}"
    );
    // The daemon still answers root.
    assert_eq!(c.status(0)["jobs"].as_array().map(Vec::len), Some(0));
}

/// About 20,000 idle connections from an unprivileged user exhausted the daemon's file
/// descriptors, and then root's `status` hung. Now a user holds at most 8 connections, and
/// root keeps a share of its own.
#[test]
fn idle_control_connections_are_capped_per_user_and_root_status_still_answers() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    std::fs::set_permissions(c.ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sock = c.nodes[0].control();
    // nobody opens 200 connections and holds them; it reports how many stayed open (a
    // refused one is closed at once by the daemon).
    let script = r#"
import socket, sys, time
held = []
for _ in range(200):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
time.sleep(0.5)
open_ = 0
for s in held:
    s.settimeout(0.05)
    try:
        if s.recv(1) == b"":
            continue
    except socket.timeout:
        pass
    open_ += 1
print(open_, flush=True)
sys.stdin.read()
"#;
    let mut attacker = Command::new("python3")
        .args(["-c", script])
        .arg(&sock)
        .uid(65534)
        .gid(65534)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 as nobody");
    let mut line = String::new();
    BufReader::new(attacker.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("count");
    let held: usize = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    assert_eq!(held, 8, "connections nobody may hold at once");
    // While they are held, root's status answers at once.
    let t0 = Instant::now();
    let st = c.status(0);
    assert!(st["host"].is_string(), "{st}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    drop(attacker.stdin.take());
    let _ = attacker.kill();
    let _ = attacker.wait();
}

use std::os::unix::process::CommandExt;

/// A second daemon on the same state directory detached the first one's mounts, answered
/// on its socket and deleted it on exit. Now it exits at once, naming the first's pid, and
/// the first keeps working.
#[test]
fn a_second_daemon_on_the_same_state_directory_exits_naming_the_first() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let first = c.pid(0).expect("running");
    let dir = &c.nodes[0].dir;
    let other_sock = dir.join("second.sock");
    // The same state directory, its own control socket (a later --control wins).
    let out = daemon_command(&c.ws, &c.creds, "n01", dir)
        .arg("--control")
        .arg(&other_sock)
        .output()
        .expect("second daemon");
    assert!(!out.status.success(), "a second daemon started");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("pid {first}")) && err.contains("--state-dir"),
        "{err}"
    );
    assert!(!other_sock.exists(), "the second daemon opened a socket");
    assert!(
        c.nodes[0].control().exists(),
        "the first daemon's socket is gone"
    );
    assert!(c.status(0)["host"].is_string(), "the first daemon answers");
}

//! Output is best-effort (issue 29 item 1): a full log file system (`/dev/full`), a closed
//! pipe (`| head -1`) or an unwritable report path never panics a command and never fails
//! a push that delivered its layer.

use std::os::fd::OwnedFd;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, daemon_command};
use crate::util::{assert_same_tree, can_mount, make_tree, teesfs_bin};

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

/// The write end of a pipe whose read end is already closed: every write gets EPIPE, as
/// under `| head -1` once head has its line.
fn closed_pipe() -> Stdio {
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    drop(r);
    Stdio::from(w)
}

/// Runs `cmd` and returns its exit code, failing the test if it runs longer than `secs`
/// (a logger that panics on a worker thread used to leave a push hanging).
fn code_within(cmd: &mut Command, secs: u64) -> Option<i32> {
    let mut child = Stop(cmd.spawn().expect("spawn"));
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.0.try_wait().expect("wait") {
            return s.code();
        }
        assert!(Instant::now() < deadline, "{cmd:?} hung for {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_full_log_never_fails_a_delivered_push() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 20, 0);
    let id = c.ws.publish(&src);
    let nowhere = c.ws.path().join("no-such-dir");
    for (wait, job) in [("all", "7"), ("urgent", "9")] {
        let code = code_within(
            c.push_cmd(&id, 2, &["--wait", wait, "--job-id", job])
                .arg("--report")
                .arg(nowhere.join("push.json"))
                .arg("--report-html")
                .arg(nowhere.join("push.html"))
                .env("TEESFS_LOG", "teesfs=debug")
                .stdout(dev_full())
                .stderr(dev_full()),
            60,
        );
        assert_eq!(code, Some(0), "--wait {wait}: delivered, so it succeeds");
        for i in 0..2 {
            assert_same_tree(&src, &c.mount_of(i));
        }
    }
    // Only the report path failing: the push says so on stderr and still succeeds.
    let out = c
        .push_cmd(&id, 2, &["--wait", "all", "--job-id", "8"])
        .arg("--report")
        .arg(nowhere.join("push.json"))
        .output()
        .expect("run push");
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("was not written") && err.contains("push.json"),
        "{err}"
    );
}

#[test]
fn a_closed_stdout_never_panics_push_status_or_report() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 10, 0);
    let id = c.ws.publish(&src);
    let report = c.ws.path().join("push.json");
    let out = c
        .push_cmd(&id, 2, &["--wait", "all"])
        .arg("--report")
        .arg(&report)
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run push");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(report.is_file(), "the report is still written");

    let run = |args: &[&str], stdout: Stdio, stderr: Stdio| -> Option<i32> {
        code_within(
            Command::new(teesfs_bin())
                .args(args)
                .env("TEESFS_CONFIG", c.ws.path().join("config"))
                .env("TEESFS_LOG", "trace")
                .stdout(stdout)
                .stderr(stderr),
            60,
        )
    };
    let sock = c.nodes[0].control();
    let sock = sock.to_str().expect("utf8");
    let rep = report.to_str().expect("utf8");
    let store = c.ws.store();
    let store = store.to_str().expect("utf8");
    for (what, args) in [
        ("status | head -1", vec!["status", "--control", sock]),
        ("report -o - | head", vec!["report", rep, "-o", "-"]),
        ("inspect, logging", vec!["inspect", "--store", store]),
    ] {
        assert_eq!(
            run(&args, closed_pipe(), Stdio::inherit()),
            Some(0),
            "{what}"
        );
        assert_eq!(
            run(&args, dev_full(), dev_full()),
            Some(0),
            "{what} > /dev/full"
        );
    }
}

/// Stops the daemon it holds, also when the test fails.
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_daemon_whose_stdout_and_stderr_are_full_starts_and_answers() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let dir = c.ws.path().join("full");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut d = Stop(
        daemon_command(&c.ws, &c.creds, "n01", &dir)
            .env("TEESFS_LOG", "teesfs=debug")
            .stdout(dev_full())
            .stderr(dev_full())
            .spawn()
            .expect("spawn daemon"),
    );
    let sock = dir.join("sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            d.0.try_wait().expect("wait").is_none(),
            "the daemon exited at start"
        );
        let out =
            c.ws.teesfs(&["status", "--control", sock.to_str().expect("utf8")]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "never answered: {}", text(&out));
        std::thread::sleep(Duration::from_millis(50));
    }
}

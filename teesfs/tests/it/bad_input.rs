//! Issue 13, items 6 and 8: files named by users are read with bounds and never quoted,
//! hostlists are bounded by bytes, and small CLI defects. The real `teesfs` binary; every
//! run is bounded in time, so a hang fails the test instead of stalling the suite.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Workspace, teesfs_bin};

/// Runs `teesfs args`, killing it after `limit` (then the test fails).
fn run_within(args: &[&str], limit: Duration) -> Output {
    let t0 = Instant::now();
    let mut child = Command::new(teesfs_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run teesfs");
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("teesfs {args:?} still ran after {limit:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fifo(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    p.to_str().expect("utf8").to_owned()
}

/// A spec, topology or hosts path set to /dev/zero drove the process to gigabytes; a FIFO
/// hung it for ever. Both are refused at once, naming the file and what it is.
#[test]
fn a_spec_topology_or_hosts_path_to_dev_zero_or_a_fifo_is_refused_without_reading_it() {
    let ws = Workspace::new();
    let pipe = fifo(ws.path(), "pipe");
    let limit = Duration::from_secs(10);
    for (args, says) in [
        (vec!["prefetch", "/dev/zero"], "character device"),
        (vec!["prefetch", pipe.as_str()], "FIFO"),
        (
            vec!["plan", "--nodes", "n[1-4]", "--topology", pipe.as_str()],
            "FIFO",
        ),
        (
            vec!["plan", "--nodes", "n[1-4]", "--topology", "/dev/zero"],
            "character device",
        ),
        (
            vec![
                "health",
                "--nodes",
                "n1",
                "--group-size",
                "1",
                "--hosts",
                &pipe,
                "--login",
                "a",
            ],
            "FIFO",
        ),
    ] {
        let out = run_within(&args, limit);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(says) && err.contains("not a regular file"),
            "{args:?}: {err}"
        );
    }
}

/// `hosts = "/etc/shadow"` printed that file's first line into the error and the job log.
/// Errors name the file and line, never their text.
#[test]
fn a_hosts_file_the_user_cannot_read_is_not_quoted_in_errors() {
    let ws = Workspace::new();
    let shadowish = ws.path().join("shadow");
    std::fs::write(&shadowish, "root:SECRET-HASH:19000:0:99999:7:::\n").expect("write");
    let out = run_within(
        &[
            "health",
            "--nodes",
            "n1",
            "--group-size",
            "1",
            "--hosts",
            shadowish.to_str().expect("utf8"),
            "--login",
            "a",
        ],
        Duration::from_secs(10),
    );
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("shadow:1"), "names the file and line: {err}");
    assert!(!err.contains("SECRET"), "quotes the file: {err}");
    // The same for a manifest that is not TOML and a key file of the wrong kind.
    let spec = ws.path().join("spec.toml");
    std::fs::write(&spec, "root:SECRET-HASH:19000\n").expect("write");
    let out = run_within(
        &["prefetch", spec.to_str().expect("utf8")],
        Duration::from_secs(10),
    );
    assert!(!stderr(&out).contains("SECRET"), "{}", stderr(&out));
    let key = ws.path().join("bad.pub");
    std::fs::write(&key, "SECRET-WORD and more\n").expect("write");
    let out = run_within(
        &[
            "verify",
            "--store",
            ws.store().to_str().expect("utf8"),
            "--trust",
            key.to_str().expect("utf8"),
        ],
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(!stderr(&out).contains("SECRET"), "{}", stderr(&out));
}

/// `[nodes] cluster = "<3,000 chars>[1-4000000]"` needed 12 GB even with `--nodes`. The
/// expansion is bounded by bytes and refused before anything is allocated.
#[test]
fn a_huge_cluster_hostlist_is_refused_before_allocating() {
    let cluster = format!("{}[1-4000000]", "n".repeat(3000));
    let out = run_within(
        &[
            "plan",
            "--nodes",
            "n1",
            "--cluster",
            &cluster,
            "--group-size",
            "8",
        ],
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("MiB of host names"),
        "{}",
        stderr(&out)
    );
}

/// `keygen --valid-days 4294967295` panicked (date overflow) and `--valid-days 0` made
/// certificates that were never valid.
#[test]
fn keygen_refuses_valid_days_that_overflow_or_are_zero() {
    let ws = Workspace::new();
    let dir = ws.path().join("cluster");
    for days in ["4294967295", "0"] {
        let out = run_within(
            &[
                "keygen",
                "--cluster",
                dir.to_str().expect("utf8"),
                "--nodes",
                "n1",
                "--valid-days",
                days,
            ],
            Duration::from_secs(20),
        );
        assert_eq!(out.status.code(), Some(2), "{days}: {out:?}");
        assert!(stderr(&out).contains("--valid-days"), "{}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"));
        assert!(!dir.join("n1.crt").exists(), "{days}: nothing is written");
    }
    let out = run_within(
        &[
            "keygen",
            "--cluster",
            dir.to_str().expect("utf8"),
            "--nodes",
            "n1",
            "--valid-days",
            "365",
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{out:?}");
}

/// Errors printed their text twice (an error that says its cause, then the cause again).
#[test]
fn errors_print_their_text_once() {
    let ws = Workspace::new();
    let missing = ws.path().join("no-store");
    let out = run_within(
        &[
            "mount",
            ws.path().to_str().expect("utf8"),
            "--store",
            missing.to_str().expect("utf8"),
            "--index",
            "abcd",
        ],
        Duration::from_secs(10),
    );
    let err = stderr(&out);
    assert!(!out.status.success());
    assert_eq!(err.matches("not a teesfs store").count(), 1, "{err}");
}

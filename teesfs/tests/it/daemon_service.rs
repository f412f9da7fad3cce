//! Issue 14, item 6: the daemon as a systemd service: readiness (`Type=notify`) once it
//! listens, and logs without terminal colour codes when stderr is not a terminal. A real
//! daemon and a real notify socket.

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::Duration;

use crate::cluster::{Cluster, QUICK_GIVE_UP, daemon_command};
use crate::util::{can_mount, make_tree};

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

/// `systemctl reload` (SIGHUP) makes the daemon trust a new publisher key and enforce a new
/// CRL, without unmounting the job it runs.
#[test]
fn sighup_reloads_trusted_keys_and_the_crl_without_touching_running_jobs() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let pid = nix::unistd::Pid::from_raw(c.pid(0).expect("running") as i32);
    let log = c.nodes[0].dir.join("daemon.log");
    let reloads = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("reloaded the trusted keys")
            .count()
    };
    let hup_and_wait = |before: usize| {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while reloads() == before {
            assert!(std::time::Instant::now() < deadline, "no reload logged");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let push = |index: &str, job: &str| {
        c.push_cmd(index, 1, &[&QUICK_GIVE_UP[..], &["--job-id", job]].concat())
            .output()
            .expect("push")
    };
    let layer_a = c.ws.path().join("a");
    make_tree(&layer_a, 5, 0);
    let a = c.ws.publish(&layer_a);
    assert!(push(&a, "1").status.success(), "the first job");
    let mp = c.mount_of(0);

    // A layer signed by a second key is refused until the daemon trusts that key.
    let key_b = c.ws.path().join("b.key");
    assert!(
        c.ws.teesfs(&["keygen", "--out", key_b.to_str().expect("utf8")])
            .status
            .success()
    );
    let layer_b = c.ws.path().join("b");
    make_tree(&layer_b, 3, 0);
    let out = c.ws.teesfs(&[
        "publish",
        layer_b.to_str().expect("utf8"),
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--key",
        key_b.to_str().expect("utf8"),
        "--quiet",
    ]);
    assert!(out.status.success(), "{out:?}");
    let b = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("index ").map(|s| s.trim().to_string()))
        .expect("index id");
    // The daemon and the push both read the workspace's publisher.pub (--trust).
    let push_b = |job: &str| {
        c.push_cmd(&b, 1, &[&QUICK_GIVE_UP[..], &["--job-id", job]].concat())
            .output()
            .expect("push")
    };
    assert!(!push_b("2").status.success(), "a key nobody trusts");
    // The --trust file now holds the second key. The daemon read the first at start, so
    // only a working reload lets this push through.
    std::fs::copy(c.ws.path().join("b.pub"), c.ws.pubkey()).expect("replace trusted key");
    hup_and_wait(0);
    let out = push_b("3");
    assert!(out.status.success(), "trusted after the reload: {out:?}");
    assert!(crate::util::is_mounted(&mp), "the first job stays mounted");

    // Revoke the login node's certificate and reload: new pushes are refused.
    let out = c.ws.teesfs(&[
        "keygen",
        "--cluster",
        c.creds.to_str().expect("utf8"),
        "--revoke",
        "login",
    ]);
    assert!(out.status.success(), "{out:?}");
    hup_and_wait(1);
    assert!(
        !push_b("4").status.success(),
        "a revoked root is refused after the reload"
    );
    assert!(crate::util::is_mounted(&mp), "the first job stays mounted");
}

/// Issue 17 item 4: signed indexes don't live for ever. An index published with
/// `--expires-in` is pushed while valid and refused by `push` (naming the expiry) once it
/// is past; an index id listed in the daemons' `--revoked` file is refused by every node,
/// and taken again once the id is removed and the daemons reloaded (SIGHUP).
#[test]
fn expired_and_revoked_indexes_are_refused() {
    if !can_mount() {
        return;
    }
    let revoked_dir = tempfile::tempdir().expect("tempdir");
    let revoked = revoked_dir.path().join("revoked");
    std::fs::write(&revoked, "# revoked index ids\n").expect("write");
    let arg = revoked.to_str().expect("utf8").to_string();
    let c = Cluster::start(2, |_| vec!["--revoked".to_string(), arg.clone()]);
    let push = |index: &str, job: &str| {
        c.push_cmd(index, 2, &[&QUICK_GIVE_UP[..], &["--job-id", job]].concat())
            .output()
            .expect("push")
    };

    // Expiry: valid now, refused by the root once past.
    let layer = c.ws.path().join("short-lived");
    make_tree(&layer, 3, 0);
    let (short, stdout) = c.ws.publish_with(&layer, &["--expires-in", "3s"]);
    assert!(stdout.contains("valid until"), "{stdout}");
    let out = push(&short, "11");
    assert!(out.status.success(), "valid for 3 s: {out:?}");
    std::thread::sleep(Duration::from_secs(4));
    let out = push(&short, "12");
    assert!(!out.status.success(), "expired");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expired at"), "{err}");
    // `inspect` still opens it, and says so.
    let out = c.ws.teesfs(&[
        "inspect",
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--index",
        &short,
        "--trust",
        c.ws.pubkey().to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("EXPIRED at")),
        "{text}"
    );

    // Revocation on the nodes: refused until the id leaves the list and they reload.
    let other = c.ws.path().join("other");
    make_tree(&other, 4, 0);
    let id = c.ws.publish(&other);
    std::fs::write(
        &revoked,
        format!("# revoked index ids\n{id}  # leaked layer\n"),
    )
    .expect("write");
    let hup_all = |needle: &str, before: &[usize]| {
        for i in 0..2 {
            let pid = nix::unistd::Pid::from_raw(c.pid(i).expect("running") as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for (i, b) in before.iter().enumerate() {
            let log = c.nodes[i].dir.join("daemon.log");
            while std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches(needle)
                .count()
                == *b
            {
                assert!(std::time::Instant::now() < deadline, "no reload logged");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    hup_all("reloaded the trusted keys", &[0, 0]);
    let started = std::time::Instant::now();
    let out = push(&id, "13");
    assert!(!out.status.success(), "revoked on the nodes");
    // The push names the node and its reason, at once (the nodes say so; the deadline is
    // not waited for).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("REFUSED by n0") && stdout.contains("is revoked on this node"),
        "{stdout}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let log = std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).unwrap_or_default();
    assert!(log.contains("is revoked on this node"), "{log}");
    std::fs::write(&revoked, "# nothing revoked\n").expect("write");
    hup_all("reloaded the trusted keys", &[1, 1]);
    let out = push(&id, "14");
    assert!(out.status.success(), "no longer revoked: {out:?}");
}

/// Issue 30 item 4: a publisher key bound to a user (`--trusted-users DIR/<uid>/*.pub`, read
/// again on SIGHUP) signs only that user's jobs: a push for another owner is refused by the
/// node, and the push prints the node's reason.
#[test]
fn a_key_bound_to_a_user_signs_only_that_users_jobs_and_the_push_says_why() {
    if !can_mount() {
        return;
    }
    let users = tempfile::Builder::new()
        .prefix("teesfs-it-users-")
        .tempdir()
        .expect("users dir");
    let dir = users.path().display().to_string();
    let c = Cluster::start(1, |_| vec!["--trusted-users".into(), dir.clone()]);
    let layer = c.ws.path().join("layer");
    make_tree(&layer, 3, 0);
    let id = c.ws.publish(&layer);
    let push = |owner: &str, job: &str| {
        c.push_cmd(
            &id,
            1,
            &[&QUICK_GIVE_UP[..], &["--owner", owner, "--job-id", job]].concat(),
        )
        .output()
        .expect("push")
    };
    // A site key (only --trust): any owner.
    assert!(
        push("4243", "21").status.success(),
        "a site key signs for anyone"
    );
    // The same key bound to uid 4242, and the daemon reloaded.
    std::fs::create_dir(users.path().join("4242")).expect("uid dir");
    std::fs::copy(c.ws.pubkey(), users.path().join("4242/alice.pub")).expect("bind");
    let log = c.nodes[0].dir.join("daemon.log");
    let reloads = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("reloaded the trusted keys")
            .count()
    };
    let pid = nix::unistd::Pid::from_raw(c.pid(0).expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while reloads() == 0 {
        assert!(std::time::Instant::now() < deadline, "no reload logged");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(push("4242", "22").status.success(), "alice's own job");
    let out = push("4243", "23");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "another user's job: {said}");
    assert!(
        said.contains("trusts only for jobs of uid 4242") && said.contains("uid 4243"),
        "the push names the node's reason: {said}"
    );
}

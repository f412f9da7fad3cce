//! Distribution over real QUIC between real daemons with real FUSE mounts (issue 4).

use std::time::{Duration, Instant};

use crate::cluster::{Cluster, QUICK_GIVE_UP};
use crate::util::{assert_same_tree, can_mount, make_tree, noise};

fn push_ok(c: &Cluster, index: &str, group: usize, extra: &[&str]) -> serde_json::Value {
    let report = c.ws.path().join(format!("report-{}.json", extra.len()));
    let out = c
        .push_cmd(index, group, extra)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("run push");
    assert!(
        out.status.success(),
        "push failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(report).expect("report")).expect("report JSON")
}

#[test]
fn sixteen_daemons_in_four_groups_get_an_exact_copy() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(16, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 300, 0);
    let id = c.ws.publish(&src);
    let report = push_ok(&c, &id, 4, &["--width", "4"]);
    assert_eq!(report["nodes"], 16);
    assert!(report["all_complete_s"].as_f64().is_some());
    assert_eq!(report["failures"].as_array().expect("list").len(), 0);
    // Each of the 4 groups received the layer over its uplink exactly once.
    let total = report["total_bytes"].as_u64().expect("bytes");
    for u in report["uplinks"].as_array().expect("uplinks") {
        assert_eq!(u["in_bytes"].as_u64(), Some(total), "{u}");
    }
    for i in 0..16 {
        assert_same_tree(&src, &c.mount_of(i));
        assert_eq!(c.status(i)["jobs"][0]["counters"]["duplicates"], 0);
    }
}

/// Waits for `f` or panics.
fn wait_for(what: &str, secs: u64, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_read_of_a_missing_file_waits_for_it_while_other_reads_proceed() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(4, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(src.join("app")).expect("mkdir");
    std::fs::write(
        src.join("app/start.sh"),
        "#!/bin/sh\necho started\n".repeat(200),
    )
    .expect("write");
    // 12 MiB of hysteretic data ahead of the file the leaf will read.
    let big = noise(12 << 20, 1);
    std::fs::write(src.join("data-a.bin"), &big).expect("write");
    let late: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    std::fs::write(src.join("data-z.bin"), &late).expect("write");
    let id = c.ws.publish(&src);
    // A slow root (1 MiB/s per link) so the hysteretic set takes a while.
    let mut push = c
        .push_cmd(
            &id,
            2,
            &["--width", "2", "--urgent", "app/*", "--rate-limit", "1MiB"],
        )
        .spawn()
        .expect("push");
    let leaf = 3;
    let mp = c.mount_of(leaf);
    // The urgent file arrives quickly and reads fine.
    wait_for("the urgent set", 30, || {
        c.status(leaf)["jobs"][0]["urgent_s"].as_f64().is_some()
    });
    let have_before = c.status(leaf)["jobs"][0]["have"].as_u64().expect("have");
    let chunks = c.status(leaf)["jobs"][0]["chunks"]
        .as_u64()
        .expect("chunks");
    assert!(have_before < chunks, "the push must still be running");
    // The late file is not there yet: reading it blocks until demand fetches it, and
    // meanwhile reads of arrived files on the same mount complete.
    let mp2 = mp.clone();
    let reader = std::thread::spawn(move || std::fs::read(mp2.join("data-z.bin")));
    for _ in 0..20 {
        let s = std::fs::read_to_string(mp.join("app/start.sh")).expect("urgent file");
        assert!(s.starts_with("#!/bin/sh"));
    }
    let got = reader
        .join()
        .expect("reader thread")
        .expect("read late file");
    assert!(got == late, "late file read back wrong bytes");
    let st = c.status(leaf);
    assert!(
        st["jobs"][0]["counters"]["wants_sent"]
            .as_u64()
            .expect("wants")
            >= 1,
        "the late file came by demand: {st}"
    );
    assert!(
        st["jobs"][0]["all_s"].is_null(),
        "the read finished before the push delivered everything"
    );
    let status = push.wait().expect("push finishes");
    assert!(status.success());
    assert_same_tree(&src, &mp);
}

#[test]
fn a_lying_peer_is_caught_and_no_wrong_byte_reaches_a_mount() {
    if !can_mount() {
        return;
    }
    // n01 is the first group's proxy (the root's child) and corrupts everything it sends.
    let c = Cluster::start(6, |i| {
        if i == 0 {
            vec!["--fault".into(), "corrupt-forward".into()]
        } else {
            vec![]
        }
    });
    let src = c.ws.path().join("layer");
    make_tree(&src, 50, 0);
    let id = c.ws.publish(&src);
    let out = c
        .push_cmd(
            &id,
            3,
            &["--width", "3", "--deadline", "2s", "--heartbeat", "200ms"],
        )
        .arg("--report")
        .arg(c.ws.path().join("liar.json"))
        .output()
        .expect("push");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(c.ws.path().join("liar.json")).expect("report"))
            .expect("JSON");
    let liars: Vec<_> = report["failures"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|f| f["kind"] == "liar")
        .collect();
    assert!(!liars.is_empty(), "the liar is reported: {report}");
    assert!(liars.iter().all(|f| f["parent"] == "n01"), "{liars:?}");
    assert!(!out.status.success(), "a push with a liar exits non-zero");
    for i in 0..6 {
        assert_same_tree(&src, &c.mount_of(i));
    }
    let refused: u64 = (1..6)
        .map(|i| {
            c.status(i)["jobs"][0]["counters"]["bad_chunks"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert!(refused > 0, "children refused the liar's chunks");
}

#[test]
fn a_killed_proxy_is_reported_and_the_survivors_complete() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(8, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    let big = noise(10 << 20, 2);
    std::fs::write(src.join("big.bin"), &big).expect("write");
    std::fs::write(src.join("small.txt"), b"small").expect("write");
    let id = c.ws.publish(&src);
    let report = c.ws.path().join("kill.json");
    let mut push = c
        .push_cmd(
            &id,
            4,
            &[
                "--width",
                "4",
                "--rate-limit",
                "4MiB",
                "--deadline",
                "1s",
                "--heartbeat",
                "200ms",
            ],
        )
        .arg("--report")
        .arg(&report)
        .spawn()
        .expect("push");
    // n05 is the second group's proxy; kill it once the job has reached it.
    let proxy = 4;
    wait_for("the job to reach the proxy", 30, || {
        c.status(proxy)["jobs"][0]["have"].as_u64().unwrap_or(0) >= 1
    });
    c.kill(proxy);
    let status = push.wait().expect("push exits");
    assert!(!status.success(), "a push with a failure exits non-zero");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    assert!(report["all_complete_s"].as_f64().is_some(), "{report}");
    let failed: Vec<_> = report["failures"]
        .as_array()
        .expect("list")
        .iter()
        .collect();
    assert!(
        failed.iter().any(|f| f["kind"] == "failed"
            && f["child"] == "n05"
            && f["reason"]
                .as_str()
                .is_some_and(|r| r.contains("stopped answering its parent"))),
        "the failed edge names n05 and why: {failed:?}"
    );
    for i in (0..8).filter(|&i| c.alive(i)) {
        assert_same_tree(&src, &c.mount_of(i));
    }
}

/// Issue 30 item 2: a push to two nodes, one without a daemon, names the node, the edge
/// and why (the root's own connection error), in the text and in the JSON report.
#[test]
fn a_node_without_a_daemon_is_named_with_the_reason_the_root_saw() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    let id = c.ws.publish(&src);
    c.kill(1);
    let report = c.ws.path().join("report.json");
    let out = c
        .push_cmd(&id, 1, &QUICK_GIVE_UP)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("push");
    assert!(
        !out.status.success(),
        "a push with a dead node exits non-zero"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("FAILED (") && l.contains("-> n02"))
        .unwrap_or_else(|| panic!("no failed edge to n02 in {text}"));
    assert!(line.contains("never answered"), "{line}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    let f = report["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .find(|f| f["child"] == "n02")
        .unwrap_or_else(|| panic!("n02 in {report}"));
    let why = f["reason"].as_str().expect("a reason");
    assert!(
        why.contains("never answered") && why.contains("teesfs-daemon running"),
        "what a node that never answered means: {why}"
    );
    assert!(
        text.contains("on the 1 of 2 nodes reached"),
        "the summary says how many nodes it counts: {text}"
    );
    assert_same_tree(&src, &c.mount_of(0));
}

#[test]
fn concurrent_demands_for_one_chunk_make_one_request_per_edge() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(9, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    let big = noise(16 << 20, 3);
    std::fs::write(src.join("a-big.bin"), &big).expect("write");
    let one: Vec<u8> = (0..500_000u32).map(|i| (i % 239) as u8).collect();
    std::fs::write(src.join("z-one-chunk.bin"), &one).expect("write");
    let id = c.ws.publish_mib_chunks(&src);
    let mut push = c
        .push_cmd(&id, 3, &["--width", "3", "--rate-limit", "512KiB"])
        .spawn()
        .expect("push");
    let mounts: Vec<_> = (0..9).map(|i| c.mount_of(i)).collect();
    // Every node reads the same single-chunk file at once.
    let readers: Vec<_> = mounts
        .iter()
        .cloned()
        .map(|mp| std::thread::spawn(move || std::fs::read(mp.join("z-one-chunk.bin"))))
        .collect();
    for r in readers {
        assert!(r.join().expect("thread").expect("read") == one);
    }
    for i in 0..9 {
        let st = c.status(i);
        let wants = st["jobs"][0]["counters"]["wants_sent"]
            .as_u64()
            .expect("wants");
        assert!(
            wants <= 1,
            "{} asked its parent {wants} times",
            c.nodes[i].host
        );
    }
    let _ = push.kill();
    let _ = push.wait();
}

fn prefetch(c: &Cluster, extra_nodes: &str, extra_network: &str) -> std::process::Output {
    prefetch_cmd(c, extra_nodes, extra_network)
        .output()
        .expect("run prefetch")
}

/// `teesfs prefetch` of a job spec for the cluster's only index, to be run.
fn prefetch_cmd(c: &Cluster, extra_nodes: &str, extra_network: &str) -> std::process::Command {
    let store = c.ws.store();
    let id =
        c.ws.teesfs(&["inspect", "--store", store.to_str().expect("utf8")])
            .stdout;
    let id = String::from_utf8_lossy(&id)
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .expect("an index")
        .to_string();
    let spec = format!(
        "[layer]\nstore = {store:?}\nindex = {:?}\n\n[launch]\nurgent = [\"app/*\"]\n\n\
         [nodes]\nlist = \"n[01-{:02}]\"\ngroup_size = 2\nwidth = 3\n{extra_nodes}\n\n\
         [network]\nidentity = {:?}\nhosts = {:?}\nwait = \"all\"\n{extra_network}\n",
        &id[..10],
        c.nodes.len(),
        c.creds,
        c.hosts_file(),
    );
    let path = c.ws.path().join("manifest.toml");
    std::fs::write(&path, spec).expect("spec");
    let mut cmd = std::process::Command::new(crate::util::teesfs_bin());
    cmd.args(["prefetch", "--quiet", "--listen", "127.0.0.1:0", "--trust"])
        .arg(c.ws.pubkey())
        .arg(&path);
    cmd
}

#[test]
fn prefetch_runs_the_job_spec() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(4, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 20, 0);
    c.ws.publish(&src);
    // As the Slurm prolog runs it: a report per job in a log directory that holds the files
    // of four earlier jobs, and a site that keeps three jobs' files (issue 30 item 9).
    let logs = c.ws.path().join("logs");
    std::fs::create_dir(&logs).expect("logs");
    let now = std::time::SystemTime::now();
    for job in 1..=4u64 {
        for ext in ["log", "json", "html"] {
            let f = std::fs::File::create(logs.join(format!("job-{job}.{ext}"))).expect("file");
            let age = Duration::from_secs(3600 * (5 - job));
            f.set_modified(now - age).expect("mtime");
        }
    }
    std::fs::write(logs.join("notes.txt"), "not a job's").expect("notes");
    let site = c.ws.path().join("site.toml");
    std::fs::write(&site, "[reports]\nkeep = 3\n").expect("site");
    let out = prefetch_cmd(&c, "strategy = \"topo\"", "")
        .args(["--job-id", "5", "--report"])
        .arg(logs.join("job-5.json"))
        .env("TEESFS_SITE_CONFIG", &site)
        .output()
        .expect("prefetch");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..4 {
        assert_same_tree(&src, &c.mount_of(i));
    }
    let mut left: Vec<String> = std::fs::read_dir(&logs)
        .expect("logs")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "job-3.html",
            "job-3.json",
            "job-3.log",
            "job-4.html",
            "job-4.json",
            "job-4.log",
            "job-5.json",
            "notes.txt"
        ],
        "the newest three jobs' files stay, this one's included"
    );
}

#[test]
fn shared_storage_mode_mounts_straight_from_the_store() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(3, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 20, 0);
    c.ws.publish(&src);
    let shared = format!("shared_store = {:?}", c.ws.store());
    // `auto` below the threshold picks shared storage.
    let out = prefetch(&c, "strategy = \"auto\"\nthreshold = 512", &shared);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..3 {
        assert_same_tree(&src, &c.mount_of(i));
        let st = c.status(i);
        assert_eq!(
            st["jobs"][0]["counters"]["chunks_in"], 0,
            "no chunk travelled the tree: {st}"
        );
    }
}

#[test]
fn wait_urgent_returns_early_and_the_rest_keeps_streaming() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(4, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(src.join("app")).expect("mkdir");
    std::fs::write(src.join("app/run.py"), "print('hello')\n".repeat(300)).expect("write");
    std::fs::write(src.join("data.bin"), noise(6 << 20, 9)).expect("write");
    let id = c.ws.publish(&src);
    let out = c
        .push_cmd(
            &id,
            2,
            &[
                "--width",
                "2",
                "--urgent",
                "app/*",
                "--wait",
                "urgent",
                "--rate-limit",
                "2MiB",
            ],
        )
        .output()
        .expect("push");
    // The note on the background copy goes to stderr (stdout is the report, or its JSON).
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("keeps streaming in the background"),
        "{stderr}"
    );
    let pid: i32 = stderr
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|p| p.trim().parse().ok())
        .expect("background pid");
    // The urgent set is everywhere, the whole layer not yet.
    let incomplete = (0..4)
        .filter(|&i| c.status(i)["jobs"][0]["all_s"].is_null())
        .count();
    assert!(incomplete > 0, "the push should still be streaming");
    for i in 0..4 {
        let run = std::fs::read_to_string(c.mount_of(i).join("app/run.py")).expect("urgent file");
        assert!(run.starts_with("print"));
    }
    wait_for("the whole layer everywhere", 60, || {
        (0..4).all(|i| c.status(i)["jobs"][0]["all_s"].as_f64().is_some())
    });
    for i in 0..4 {
        assert_same_tree(&src, &c.mount_of(i));
    }
    let log = stderr
        .split(", log ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(std::path::PathBuf::from)
        .expect("background log path");
    wait_for("the background push to exit", 30, || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
    });
    assert!(
        !log.exists(),
        "a completed background push removes its log {}",
        log.display()
    );
}

#[test]
fn a_restarted_daemon_leaves_no_stale_mount() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    let id = c.ws.publish(&src);
    push_ok(&c, &id, 2, &["--width", "2"]);
    let mp = c.mount_of(1);
    c.kill(1);
    assert!(
        crate::util::is_mounted(&mp),
        "a crashed daemon leaves its mount"
    );
    let err = std::fs::read_dir(&mp).expect_err("dead mount");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN));
    c.restart(1);
    assert!(
        !crate::util::is_mounted(&mp),
        "the restarted daemon detached the stale mount"
    );
    assert_eq!(c.status(1)["jobs"].as_array().map(Vec::len), Some(0));
}

/// Issue 17 item 1: a slow store is not a dead node. Every chunk file write takes 20 ms
/// longer (a fragmented disk; 200 small files cost each node 4 s of writes), each daemon
/// has a single worker thread, and the liveness deadline is 1 s. Store writes run on the
/// blocking pool, never on the tasks that carry heartbeats, so no live node is reported
/// failed and every node gets the layer.
#[test]
fn a_slow_store_is_not_a_dead_node() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(4, |_| {
        ["--workers", "1", "--fault", "slow-store=20ms"]
            .map(String::from)
            .to_vec()
    });
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("layer dir");
    for i in 0..200u32 {
        // 6 KiB each: above the inline limit, so each is a chunk the store writes.
        let body: Vec<u8> = (0..6144u32)
            .map(|b| (b.wrapping_mul(i + 7) >> 3) as u8)
            .collect();
        std::fs::write(src.join(format!("f{i:03}")), body).expect("write");
    }
    let id = c.ws.publish(&src);
    let started = Instant::now();
    let report = push_ok(
        &c,
        &id,
        4,
        &[
            "--width",
            "2",
            "--deadline",
            "1s",
            "--heartbeat",
            "200ms",
            "--timeout",
            "60s",
        ],
    );
    assert_eq!(
        report["failures"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert!(report["all_complete_s"].as_f64().is_some(), "{report}");
    // The fault was in force: 200 writes of 20 ms on each node, as many at once as a
    // daemon verifies a stream's chunks (one per core, 2 to 8: `peers::chunks_at_work`).
    let at_once = std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(2, 8) as u32;
    assert!(
        started.elapsed() >= Duration::from_millis(20) * 200 / at_once * 3 / 4,
        "{:?} with {at_once} writes at once",
        started.elapsed()
    );
    for i in 0..4 {
        assert_same_tree(&src, &c.mount_of(i));
    }
}

/// Issue 17: a daemon killed and started again at the same address (systemd bringing it
/// back, a rebooted node) is reached by the next push at once. Its parent talked to the
/// old process over a connection that the new one does not know; kept, it swallowed the
/// job's first messages until QUIC's idle timeout (60 s), and the push failed blaming the
/// network.
#[test]
fn a_daemon_restarted_in_place_gets_the_next_push_at_once() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(3, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    let id = c.ws.publish(&src);
    // One group: n01 feeds n02 and n03, so n01 keeps connections to both.
    push_ok(&c, &id, 3, &[]);
    c.restart_in_place(1);
    let started = Instant::now();
    let report = push_ok(&c, &id, 3, &["--deadline", "3s", "--timeout", "20s"]);
    assert_eq!(
        report["failures"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert!(report["all_complete_s"].as_f64().is_some(), "{report}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the push took {:?}",
        started.elapsed()
    );
    assert_same_tree(&src, &c.mount_of(1));
}

/// Issue 17: a job pushed again under the same id by another push (a requeued Slurm job
/// keeps `SLURM_JOB_ID`) replaces the old job on every node, instead of being ignored
/// until the push gave up blaming the network.
#[test]
fn a_job_pushed_again_under_its_id_replaces_the_old_one() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(3, |_| vec![]);
    let first = c.ws.path().join("first");
    make_tree(&first, 5, 0);
    let first_id = c.ws.publish(&first);
    let second = c.ws.path().join("second");
    make_tree(&second, 9, 0);
    std::fs::write(second.join("requeued"), b"second run").expect("write");
    let second_id = c.ws.publish(&second);
    let job = ["--job-id", "4242"];
    push_ok(&c, &first_id, 3, &job);
    assert_same_tree(&first, &c.mount_of(2));
    let started = Instant::now();
    let report = push_ok(&c, &second_id, 3, &["--job-id", "4242", "--deadline", "3s"]);
    assert_eq!(
        report["failures"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for i in 0..3 {
        let jobs = c.status(i)["jobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(jobs.len(), 1, "one job on n0{}: {jobs:?}", i + 1);
        assert_same_tree(&second, &c.mount_of(i));
    }
}

#[test]
fn a_root_with_another_clusters_certificate_is_refused() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    let id = c.ws.publish(&src);
    // Same host names, different CA.
    let other = c.ws.path().join("other-cluster");
    let out = c.ws.teesfs(&[
        "keygen",
        "--cluster",
        other.to_str().expect("utf8"),
        "--nodes",
        "login,n[01-02]",
    ]);
    assert!(out.status.success());
    let out = c
        .push_cmd(&id, 2, &QUICK_GIVE_UP)
        .arg("--identity")
        .arg(&other)
        .output()
        .expect("push");
    assert!(!out.status.success(), "a foreign root must not get through");
    for i in 0..2 {
        let st = c.status(i);
        assert_eq!(
            st["jobs"].as_array().map(Vec::len),
            Some(0),
            "{} accepted a job from a foreign root: {st}",
            c.nodes[i].host
        );
    }
    let log = std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).expect("log");
    assert!(
        log.contains("UnknownIssuer") || log.contains("refused"),
        "{log}"
    );
}

/// Issue 33: a node verifies and stores several of a stream's chunks at once (one per core,
/// at least 2), each handed to its relay through its place in the stream's order (the order
/// itself: `node::reorder` and `node::peers` tests). Down a chain n01 -> n02 -> n03 of
/// 256 KiB chunks, each verified on the blocking pool beside the next: the honest nodes
/// take every chunk once and ask for none (a place never released would leave the relay
/// without the chunk: the push stalls and the chunk is asked for); n02 corrupts what it
/// forwards, and n03 refuses those chunks and still gets an exact copy.
#[test]
fn chunks_verified_in_parallel_arrive_once_each_and_corrupt_ones_are_refused() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(3, |i| {
        if i == 1 {
            vec!["--fault".into(), "corrupt-forward".into()]
        } else {
            vec![]
        }
    });
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("layer dir");
    for i in 0..12u64 {
        std::fs::write(src.join(format!("f{i:02}")), noise(1 << 20, i + 1)).expect("write");
    }
    let (id, _) = c.ws.publish_with(&src, &["--chunk-size", "256KiB"]);
    let out = c
        .push_cmd(
            &id,
            1,
            &[
                "--strategy",
                "hostlist",
                "--width",
                "1",
                "--deadline",
                "2s",
                "--heartbeat",
                "200ms",
            ],
        )
        .output()
        .expect("push");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for i in 0..3 {
        assert_same_tree(&src, &c.mount_of(i));
    }
    for i in 0..2 {
        let counters = &c.status(i)["jobs"][0]["counters"];
        assert_eq!(
            counters["chunks_in"],
            48,
            "n0{}: {counters}\n{stderr}",
            i + 1
        );
        assert_eq!(counters["duplicates"], 0, "n0{}: {counters}", i + 1);
        assert_eq!(counters["bad_chunks"], 0, "n0{}: {counters}", i + 1);
        assert_eq!(counters["wants_sent"], 0, "n0{}: {counters}", i + 1);
    }
    let n03 = &c.status(2)["jobs"][0]["counters"];
    assert!(
        n03["bad_chunks"].as_u64() > Some(0),
        "n03 refused nothing: {n03}"
    );
}

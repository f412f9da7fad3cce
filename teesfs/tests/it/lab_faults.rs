//! Failures in the middle of a push, end to end in the lab (namespaces, shaped links, real
//! daemons, real FUSE mounts): a leaf crashes, a proxy crashes, a group's uplink goes down,
//! a proxy is stopped (alive but silent). Each time every reachable node completes with a
//! byte-exact mount, the report names the failed edge, and once the node is back (restarted
//! daemon, link up, SIGCONT) a new push reaches every node; a restarted daemon carries no
//! stale mount.
//!
//! Lab: 2 groups of 4 (`n01` proxies `n02`-`n04`, `n05` proxies `n06`-`n08`), an 8 MiB
//! layer, the root capped at 2 MiB/s per child so the push is still in flight when the
//! fault hits, a 1 s liveness deadline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lab::fault::PushEnd;
use lab::{Lab, LabOptions, LabSpec, PushOptions};

use crate::lab::{can_lab, random_layer};
use crate::util::teesfs_bin;

struct Scene {
    lab: Lab,
    layer: PathBuf,
    index: String,
    _tmp: tempfile::TempDir,
}

fn scene() -> Scene {
    scene_with(8)
}

/// [`scene`] with a layer of `mib` MiB.
fn scene_with(mib: usize) -> Scene {
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = random_layer(tmp.path(), mib);
    let spec = LabSpec {
        groups: 2,
        group_size: 4,
        ..LabSpec::default()
    };
    let mut opts = LabOptions::new(teesfs_bin());
    opts.keep_work = std::env::var_os("TEESFS_LAB_KEEP").is_some();
    // The daemons' log filter, for timelines across nodes (as for `teesfs lab up`).
    if let Ok(log) = std::env::var("TEESFS_DAEMON_LOG") {
        opts.log = log;
    }
    let lab = Lab::up(&spec, &opts).expect("lab up");
    if opts.keep_work {
        eprintln!("lab work directory (kept): {}", lab.work().display());
    }
    let index = lab.publish(&layer).expect("publish");
    Scene {
        lab,
        layer,
        index,
        _tmp: tmp,
    }
}

/// A push slow enough to be hit mid-flight, with quick failure detection.
fn slow_push(index: &str) -> PushOptions {
    slow_push_with(index, "1s")
}

/// [`slow_push`] with a liveness deadline of `deadline`.
fn slow_push_with(index: &str, deadline: &str) -> PushOptions {
    let mut o = PushOptions::new(index);
    o.timeout = Duration::from_secs(60);
    o.extra = [
        "--rate-limit",
        "2MiB",
        "--deadline",
        deadline,
        "--heartbeat",
        "200ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o
}

/// Waits until `host` holds part of the layer, but not all of it.
fn wait_mid_push(lab: &Lab, host: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = lab.status(host).expect("status");
        if let Some(job) = st.jobs.first()
            && job.have >= 1
        {
            let (have, chunks) = (job.have, job.chunks);
            assert!(
                have < chunks,
                "{host} already holds the layer: the push is too fast to fault mid-flight"
            );
            return;
        }
        assert!(Instant::now() < deadline, "the push never reached {host}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(kind, parent, child)` of every failure in the report.
fn failures(end: &PushEnd) -> Vec<(String, String, String)> {
    let mut f: Vec<_> = end
        .report
        .failures
        .iter()
        .map(|f| (f.kind.to_string(), f.parent.clone(), f.child.clone()))
        .collect();
    f.sort();
    f
}

fn edge(kind: &str, parent: &str, child: &str) -> (String, String, String) {
    (kind.into(), parent.into(), child.into())
}

/// `host`'s parent in the push's plan, from its report: where its failed edge starts. By
/// default the login node feeds one group's proxy and the second group's proxy hangs below
/// a member of the first (`n01 -> n02 -> n05`); a site's `login_copies` puts it below the
/// login node. The edge named must be the planned one either way.
fn planned_parent(end: &PushEnd, host: &str) -> String {
    let r = &end.report;
    let n = r.per_node.iter().find(|n| n.host == host);
    n.unwrap_or_else(|| panic!("{host} is not in the report: {r:?}"))
        .parent
        .clone()
}

/// The failed push: non-zero exit, the whole layer on every node but `lost`, byte-exact.
fn assert_survivors_complete(s: &Scene, end: &PushEnd, lost: &[&str]) {
    assert!(!end.success, "a push with failures exits non-zero");
    let r = &end.report;
    assert!(
        r.all_complete_s.is_some(),
        "every reachable node completes: {r:?}"
    );
    for n in &r.per_node {
        if lost.contains(&n.host.as_str()) {
            continue;
        }
        assert!(n.all_s.is_some(), "{} completed: {r:?}", n.host);
        assert_layer(s, &n.host, &r.job);
    }
}

/// `host`'s mount of `job` equals the layer, byte for byte (read inside that node).
fn assert_layer(s: &Scene, host: &str, job: &str) {
    let mp = s.lab.mountpoint(host, job);
    let out = s
        .lab
        .command_on(host, "diff")
        .expect("command on node")
        .args(["-r", "--no-dereference"])
        .arg(&s.layer)
        .arg(&mp)
        .output()
        .expect("diff");
    assert!(
        out.status.success(),
        "{host}: mount of job {job} differs from the layer: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// After recovery: a fresh push reaches every node, each with an exact copy.
fn assert_push_reaches_everyone(s: &Scene) -> String {
    let mut o = PushOptions::new(&s.index);
    o.timeout = Duration::from_secs(60);
    o.extra = vec!["--deadline".into(), "2s".into()];
    let run = s.lab.push(&o).expect("push after recovery succeeds");
    let r = &run.report;
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    for n in &r.per_node {
        assert!(n.all_s.is_some(), "{} completed: {r:?}", n.host);
        assert_layer(s, &n.host, &r.job);
    }
    r.job.clone()
}

/// A restarted daemon: no job, and no FUSE mount of the lab in its namespace.
fn assert_no_stale_mount(s: &Scene, host: &str) {
    let st = s.lab.status(host).expect("status");
    assert!(st.jobs.is_empty(), "{st:?}");
    let work = std::fs::canonicalize(s.lab.work()).expect("work dir");
    let ours: Vec<PathBuf> = s
        .lab
        .fuse_mounts(host)
        .expect("mounts")
        .into_iter()
        .filter(|m| m.starts_with(&work))
        .collect();
    assert!(ours.is_empty(), "{host} carries stale mounts: {ours:?}");
    let jobs = s.lab.work().join(host).join("jobs");
    let left: Vec<_> = std::fs::read_dir(&jobs)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{host} left mountpoints behind: {left:?}");
}

fn only_mount_is(s: &Scene, host: &str, job: &str) {
    let work = std::fs::canonicalize(s.lab.work()).expect("work dir");
    let ours: Vec<PathBuf> = s
        .lab
        .fuse_mounts(host)
        .expect("mounts")
        .into_iter()
        .filter(|m| m.starts_with(&work))
        .collect();
    let want = std::fs::canonicalize(s.lab.work())
        .expect("work")
        .join(host)
        .join("jobs")
        .join(job);
    assert_eq!(ours, vec![want], "{host} mounts only the new job");
}

fn lab_down(s: Scene) {
    let Scene { lab, .. } = s;
    lab.down().expect("lab down");
}

#[test]
fn lab_a_leaf_crashing_mid_push_is_reported_and_can_be_pushed_to_again() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene();
    let push = s.lab.push_background(&slow_push(&s.index)).expect("push");
    wait_mid_push(&s.lab, "n03");
    s.lab.kill_daemon("n03").expect("kill n03");
    let end = push.wait(Duration::from_secs(60)).expect("push ends");
    assert_eq!(failures(&end), vec![edge("failed", "n01", "n03")]);
    assert_survivors_complete(&s, &end, &["n03"]);

    s.lab.restart_daemon("n03").expect("restart n03");
    assert_no_stale_mount(&s, "n03");
    let job = assert_push_reaches_everyone(&s);
    only_mount_is(&s, "n03", &job);
    lab_down(s);
}

#[test]
fn lab_a_proxy_crashing_mid_push_is_reported_its_group_completes_and_it_comes_back() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene();
    let push = s.lab.push_background(&slow_push(&s.index)).expect("push");
    wait_mid_push(&s.lab, "n05");
    s.lab.kill_daemon("n05").expect("kill n05");
    let end = push.wait(Duration::from_secs(60)).expect("push ends");
    let parent = planned_parent(&end, "n05");
    assert_eq!(failures(&end), vec![edge("failed", &parent, "n05")]);
    // n06-n08 lost their proxy and re-attached to its parent.
    assert_survivors_complete(&s, &end, &["n05"]);

    s.lab.restart_daemon("n05").expect("restart n05");
    assert_no_stale_mount(&s, "n05");
    let job = assert_push_reaches_everyone(&s);
    only_mount_is(&s, "n05", &job);
    lab_down(s);
}

#[test]
fn lab_a_group_cut_off_mid_push_is_reported_edge_by_edge_and_reached_after_link_up() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene();
    let push = s.lab.push_background(&slow_push(&s.index)).expect("push");
    wait_mid_push(&s.lab, "n05");
    s.lab.link_down("n05", "eth0").expect("link down");
    let end = push.wait(Duration::from_secs(60)).expect("push ends");
    assert_eq!(
        failures(&end),
        vec![
            edge("failed", &planned_parent(&end, "n05"), "n05"),
            edge("unreachable", "n05", "n06"),
            edge("unreachable", "n05", "n07"),
            edge("unreachable", "n05", "n08"),
        ]
    );
    assert_survivors_complete(&s, &end, &["n05", "n06", "n07", "n08"]);

    s.lab.link_up("n05", "eth0").expect("link up");
    assert_push_reaches_everyone(&s);
    lab_down(s);
}

#[test]
fn lab_a_stopped_proxy_is_reported_its_group_completes_and_it_resumes() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene();
    // n05 is the second group's proxy: its eth0 is the group's only way in.
    let uplink = || s.lab.net().counters("n05", "eth0").expect("counters").rx;
    let before = uplink();
    // An orphan asks its deputy twice, a deadline each, before it goes across the uplink
    // itself. In one loaded CI run (debug daemons on 0.064 cores, other tests beside
    // them) with a 1 s deadline, n07 was fed from the login node (`login -> n07`), so its
    // deputy's answer had not come within the two asks, and the group took the layer in
    // twice; why is not isolated (the first connection between two siblings is the
    // suspect). 2 s gives the deputy twice the time; the assertion on the bytes stands.
    let push = s
        .lab
        .push_background(&slow_push_with(&s.index, "2s"))
        .expect("push");
    wait_mid_push(&s.lab, "n05");
    let at_stop = uplink();
    s.lab.pause_daemon("n05").expect("SIGSTOP n05");
    let end = push.wait(Duration::from_secs(60));
    let after = uplink();
    s.lab.resume_daemon("n05").expect("SIGCONT n05");
    let end = end.expect("push ends");
    let parent = planned_parent(&end, "n05");
    assert_eq!(failures(&end), vec![edge("failed", &parent, "n05")]);
    assert_survivors_complete(&s, &end, &["n05"]);
    // Issue 17: n06-n08 hang below each other and only the first re-attaches across the
    // uplink, so the group takes in the rest of the layer once (each of them fetching it
    // across the uplink took 2.2x the minimum).
    let total = end.report.total_bytes;
    let since_stop = after - at_stop;
    // Who sent what to whom: an orphan fed from across the uplink shows as `login -> n0x`.
    let edges: Vec<String> = end
        .report
        .edges
        .iter()
        .map(|e| format!("{} -> {}: {}", e.parent, e.child, e.bytes))
        .collect();
    eprintln!(
        "the group's uplink took {since_stop} bytes after its proxy stopped, {} before; layer \
         {total}; edges {edges:?}",
        at_stop - before
    );
    assert!(
        since_stop as f64 <= 1.3 * total as f64,
        "the group's uplink took {since_stop} bytes after its proxy stopped, for a layer of \
         {total} ({} before); edges {edges:?}",
        at_stop - before
    );

    assert_push_reaches_everyone(&s);
    lab_down(s);
}

/// `teesfs health` from the login node's namespace: exit status and JSON report.
fn health(s: &Scene, deadline: &str) -> (bool, serde_json::Value) {
    let login = s.lab.layout().node("login").expect("login").clone();
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", login.netns))
        .arg(teesfs_bin())
        .args([
            "health",
            "--format",
            "json",
            "--nodes",
            &s.lab.layout().hostlist(),
        ])
        .args(["--group-size", &s.lab.layout().spec.group_size.to_string()])
        .arg("--identity")
        .arg(s.lab.work().join("cluster"))
        .arg("--hosts")
        .arg(s.lab.work().join("hosts"))
        .args([
            "--listen",
            &format!("{}:{}", login.addr(), lab::cluster::ROOT_PORT),
        ])
        .args(["--deadline", deadline])
        .output()
        .expect("teesfs health");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "health printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), json)
}

#[test]
fn lab_health_names_a_cut_off_group_and_sees_it_again_after_link_up() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene();
    let (ok, r) = health(&s, "5s");
    assert!(ok, "{r:#}");
    assert_eq!(r["answered"].as_u64(), Some(8));
    assert_eq!(r["edges"].as_array().map(Vec::len), Some(8), "{r:#}");
    eprintln!(
        "lab health, all up: {:.3} s, rtt per edge {}",
        r["elapsed_s"].as_f64().unwrap_or_default(),
        r["rtt_ms"]
    );

    s.lab.link_down("n05", "eth0").expect("link down");
    let (ok, r) = health(&s, "5s");
    assert!(!ok, "a cut-off group fails the health check: {r:#}");
    assert_eq!(r["answered"].as_u64(), Some(4));
    assert_eq!(r["unreachable"], "n[05-08]");
    let failures = r["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 1, "{r:#}");
    assert_eq!(
        (
            &failures[0]["parent"],
            &failures[0]["child"],
            &failures[0]["unreachable"]
        ),
        (&"login".into(), &"n05".into(), &"n[05-08]".into())
    );
    let (elapsed, deadline) = (r["elapsed_s"].as_f64(), r["deadline_s"].as_f64());
    assert!(
        elapsed.zip(deadline).is_some_and(|(e, d)| e <= d + 1.0),
        "report after the deadline: {r:#}"
    );
    eprintln!(
        "lab health, group cut off: reported after {:.3} s (deadline {} s)",
        r["elapsed_s"].as_f64().unwrap_or_default(),
        r["deadline_s"]
    );

    s.lab.link_up("n05", "eth0").expect("link up");
    let (ok, r) = health(&s, "5s");
    assert!(ok, "{r:#}");
    lab_down(s);
}

/// A relay takes in no faster than it passes on (`teesfs_node` `job/intake.rs`): a member
/// whose only child (the next group's proxy, by default) is stopped stops reading its
/// parent's stream a few MiB later (its lead bound and the child's stream window), while
/// the rest of the tree completes; once the child is continued, every node completes and
/// nothing failed. Without the bound the member took the whole layer in with its siblings.
#[test]
fn lab_a_relay_whose_only_child_is_stopped_takes_in_no_more_than_a_window_ahead() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let s = scene_with(48);
    let lab = &s.lab;
    // A deadline longer than the stop: the child is slow, not dead.
    let mut o = PushOptions::new(&s.index);
    o.timeout = Duration::from_secs(120);
    o.extra = vec!["--deadline".into(), "60s".into()];
    let push = lab.push_background(&o).expect("push");
    wait_mid_push(lab, "n05");
    let status = |h: &str| lab.status(h).expect("status").jobs.first().cloned();
    let parent = status("n05").expect("n05's job").parent;
    assert_ne!(
        parent, "login",
        "by default the login node feeds one proxy, n01"
    );
    lab.pause_daemon("n05").expect("SIGSTOP n05");
    // Every node outside the stopped subtree and its parent completes.
    let others: Vec<String> = ["n01", "n02", "n03", "n04"]
        .into_iter()
        .filter(|h| *h != parent)
        .map(String::from)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !others
        .iter()
        .all(|h| status(h).is_some_and(|j| j.have == j.chunks))
    {
        assert!(Instant::now() < deadline, "{others:?} never completed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = status(&parent).expect("parent's job");
    lab.resume_daemon("n05").expect("SIGCONT n05");
    eprintln!(
        "{parent} held {} of {} chunks when {others:?} had all",
        held.have, held.chunks
    );
    assert!(
        held.have * 4 <= held.chunks * 3,
        "{parent}, whose only child was stopped, took in {} of {} chunks",
        held.have,
        held.chunks
    );
    let end = push.wait(Duration::from_secs(120)).expect("push ends");
    assert!(end.success, "{:?}", end.report.failures);
    assert!(end.report.per_node.iter().all(|n| n.all_s.is_some()));
    lab_down(s);
}

//! The launch benchmark's methods on a small lab: every method (urgent-first, copy-first,
//! demand-only, shared storage, sbcast+untar with real Slurm) starts the application on
//! every node from its own copy of the layer, on nodes that held nothing before; a push
//! that streams nothing moves only what the application reads, and one that streams the
//! whole layer moves all of it. The layer is also made a container image (an OCI layout
//! by `umoci`, a squashfs by `mksquashfs`), which the image methods start: a pull from a
//! real registry on the storage node, sbcast+unsquashfs, and squashfuse over HTTP.

use std::time::Duration;

use lab::launch::{Launch, Method};
use lab::{Lab, LabOptions, LabSpec};

use crate::lab::{can_lab, random_layer};
use crate::util::teesfs_bin;

#[test]
fn lab_launch_starts_the_app_on_every_node_by_every_method() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    lab::slurm::available().expect("Slurm for the sbcast+untar method (CI installs it)");
    let tmp = tempfile::tempdir().expect("tempdir");
    // 6 MiB nobody reads at start, and a small application that reads one file.
    let layer = random_layer(tmp.path(), 6);
    std::fs::create_dir_all(layer.join("app")).expect("app dir");
    std::fs::write(layer.join("app/start.txt"), b"started\n").expect("app file");
    let spec = LabSpec {
        groups: 2,
        group_size: 3,
        ..LabSpec::default()
    };
    // As `lab launch` builds it: each node's applications under a quota of their own.
    let mut opts = LabOptions::new(teesfs_bin());
    opts.app_quota = lab::scale::AppQuota::Own;
    let lab = Lab::up(&spec, &opts).expect("lab up");
    let l = Launch {
        layer: layer.clone(),
        index: lab.publish(&layer).expect("publish"),
        urgent: vec!["app/*".into()],
        app: lab::demo::shell_app("grep -q started \"$TEESFS_MOUNT/app/start.txt\""),
        probe: "app/start.txt".into(),
        bulk_after: std::time::Duration::from_secs(30),
        bulk_quiet: std::time::Duration::from_secs(2),
        image: Some(image_of(&layer, tmp.path())),
    };
    let t = std::time::Instant::now();
    // urgent-learned first, with no run to learn from, fails; the run goes on with every
    // method after it, and the report keeps the failure with its reason.
    let methods: Vec<Method> = std::iter::once(Method::Learned)
        .chain(Method::ALL)
        .collect();
    let rep = lab::launch::run(&lab, &l, &methods, |t| eprintln!("{t:?}"));
    eprintln!("{}", lab::launch::table(&rep));
    assert!(t.elapsed() < Duration::from_secs(300));
    assert!(rep.stopped.is_none(), "{:?}", rep.stopped);
    assert_eq!(rep.failures.len(), 1, "{:?}", rep.failures);
    assert_eq!(rep.failures[0].method, Method::Learned);
    assert!(
        rep.failures[0]
            .reason
            .contains("learns from an urgent-first or demand-only run"),
        "{:?}",
        rep.failures[0]
    );
    assert!(lab::launch::table(&rep).contains("urgent-learned      FAILED"));
    assert_eq!(rep.outcomes.len(), Method::ALL.len());
    for o in &rep.outcomes {
        assert_eq!((o.ok, o.nodes), (6, 6), "{}: {o:?}", o.method.name());
        assert!(o.app_s > 0.0, "{o:?}");
        let last = o.last.as_deref().expect("the node that finished last");
        assert!(
            lab.layout().compute().any(|n| n.host == last),
            "{}: last {last} is not a compute node",
            o.method.name()
        );
        // The lab runs the scale model: each method's time held by the quotas is measured,
        // and the CPU moved from the method learned from to urgent-learned leaves both
        // positive.
        let held = o
            .throttled_s
            .expect("throttling measured under the scale model");
        assert!(held.is_finite() && held >= 0.0, "{o:?}");
        assert!(o.cpu_s > 0.0, "{o:?}");
    }
    assert!(lab::launch::table(&rep).contains("throttled"));
    let by = |m: Method| {
        rep.outcomes
            .iter()
            .find(|o| o.method == m)
            .expect("every method ran")
    };
    let whole = 6u64 << 20;
    // Streaming the whole layer sends it into both groups; nothing streamed sends only the
    // small file the application read (plus headers).
    assert!(by(Method::UrgentFirst).uplink_in_bytes >= 2 * whole);
    assert!(by(Method::CopyFirst).uplink_in_bytes >= 2 * whole);
    assert!(
        by(Method::DemandOnly).uplink_in_bytes < whole / 4,
        "demand-only moved {} bytes",
        by(Method::DemandOnly).uplink_in_bytes
    );
    assert!(by(Method::UrgentFirst).urgent_s.is_some());
    // Each teesfs method's job counters, summed over the 6 nodes: the default received the
    // whole layer on every node, as copy-first did; with nothing streamed, no chunk moved
    // (the one file the application reads is small enough to live in the index).
    let traffic = |m: Method| by(m).traffic.unwrap_or_else(|| panic!("{m:?}: traffic"));
    let pushed = traffic(Method::UrgentFirst);
    assert_eq!(pushed.nodes, 6, "{pushed:?}");
    assert!(pushed.chunks_in >= 6 * 6, "6 MiB on 6 nodes: {pushed:?}");
    let copied = traffic(Method::CopyFirst);
    assert!(copied.nodes == 6 && copied.chunks_in >= 6 * 6, "{copied:?}");
    let demand = traffic(Method::DemandOnly);
    assert_eq!((demand.nodes, demand.chunks_in), (6, 0), "{demand:?}");
    assert_eq!(by(Method::Sbcast).traffic, None);
    // The second launch, given no urgent globs, pushed first what the nodes read in the
    // first (learned at its end, as the Slurm EpilogSlurmctld does): the one file the
    // application read. A node records what it opens only until it holds the whole layer,
    // so a node whose application started after the rest streamed in (its CPU share is
    // small) has nothing to tell: most nodes, not every one, must have recorded it.
    let learned = &by(Method::Learned).detail;
    let from: usize = learned
        .strip_prefix("1 files learned from ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("learned one file: {learned}"));
    assert!(
        from >= 4 && learned.ends_with("in urgent-first, 1 pushed first with nothing given"),
        "{:?}",
        by(Method::Learned)
    );
    assert!(rep.local_s.is_some(), "copy-first measured the local start");
    // Every node pulled the whole image from the registry on the storage node; squashfuse
    // read only what the application read (and the squashfs's tables) from there.
    let nodes = 6;
    assert!(
        by(Method::RegistryPull).source_out_bytes >= nodes * whole,
        "{:?}",
        by(Method::RegistryPull)
    );
    let lazy = by(Method::Squashfuse).source_out_bytes;
    assert!(
        lazy > 0 && lazy < nodes * whole / 2,
        "squashfuse sent {lazy} bytes"
    );
    assert!(by(Method::SbcastUnsquash).uplink_in_bytes >= whole);
    let table = lab::launch::table(&rep);
    assert!(table.contains("10x sooner than registry-pull"), "{table}");
    assert!(
        table.contains("at most 1/8 of squashfuse's egress"),
        "{table}"
    );
    let run = rep.urgent_first.as_ref().expect("urgent-first run kept");
    assert!(run.push.report.streamed_bytes >= whole);
    lab.down().expect("lab down");
}

/// `mib` MiB of random files nobody reads at start, and `app/start.txt`, the one file the
/// tests' application reads.
fn app_layer(dir: &std::path::Path, mib: usize) -> std::path::PathBuf {
    let layer = random_layer(dir, mib);
    std::fs::create_dir_all(layer.join("app")).expect("app dir");
    std::fs::write(layer.join("app/start.txt"), b"started\n").expect("app file");
    layer
}

/// A launch of `layer`, published in `lab`, whose application reads `app/start.txt` (the
/// urgent set) from the node's copy; the rest is held for at most 30 s.
fn start_launch(lab: &Lab, layer: &std::path::Path) -> Launch {
    Launch {
        layer: layer.to_path_buf(),
        index: lab.publish(layer).expect("publish"),
        urgent: vec!["app/*".into()],
        app: lab::demo::shell_app("grep -q started \"$TEESFS_MOUNT/app/start.txt\""),
        probe: "app/start.txt".into(),
        bulk_after: Duration::from_secs(30),
        bulk_quiet: Duration::from_secs(2),
        image: None,
    }
}

/// The layer as a container image: an OCI layout (tag `t`, by `umoci`) and a squashfs.
fn image_of(layer: &std::path::Path, tmp: &std::path::Path) -> lab::image::ImageFiles {
    let oci = tmp.join("oci");
    let bundle = tmp.join("bundle");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("{} (scripts/deps.sh installs it): {e}", args[0]));
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    let s = |p: &std::path::Path| p.display().to_string();
    run(&["umoci", "init", "--layout", &s(&oci)]);
    run(&["umoci", "new", "--image", &format!("{}:t", s(&oci))]);
    run(&[
        "umoci",
        "unpack",
        "--image",
        &format!("{}:t", s(&oci)),
        &s(&bundle),
    ]);
    run(&[
        "cp",
        "-a",
        &format!("{}/.", s(layer)),
        &s(&bundle.join("rootfs")),
    ]);
    run(&[
        "umoci",
        "repack",
        "--image",
        &format!("{}:t", s(&oci)),
        &s(&bundle),
    ]);
    let squashfs = tmp.join("image.sqfs");
    run(&[
        "mksquashfs",
        &s(layer),
        &s(&squashfs),
        "-quiet",
        "-no-progress",
    ]);
    lab::image::ImageFiles {
        oci,
        tag: "t".into(),
        squashfs,
    }
}

/// The status JSON of a lab node's daemon.
fn lab_status(lab: &Lab, host: &str) -> serde_json::Value {
    let out = std::process::Command::new(teesfs_bin())
        .args(["status", "--json", "--control"])
        .arg(lab.work().join(host).join("sock"))
        .output()
        .expect("teesfs status");
    assert!(out.status.success(), "status of {host}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// A 4-hop chain of capped links: the urgent set reaches its end long before the bulk;
/// and a read there of the file last in push order, while the hysteretic set streams down
/// the chain, is fetched on demand through every hop (each node on the path asks its
/// parent) and arrives long before the bulk queued ahead of it would have brought it, with
/// the right bytes.
#[test]
fn a_demand_read_overtakes_the_bulk_queued_at_every_hop_of_a_chain() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = app_layer(tmp.path(), 40);
    let late: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(layer.join("zz-late.bin"), &late).expect("late file");
    let spec = LabSpec {
        groups: 1,
        group_size: 4,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let index = lab.publish(&layer).expect("publish");
    let mut o = lab::PushOptions::new(&index);
    o.strategy = "hostlist".into();
    o.extra = vec!["--width".into(), "1".into()];
    o.urgent = vec!["app/*".into()];
    o.timeout = Duration::from_secs(120);
    let chain: Vec<String> = lab.layout().compute().map(|n| n.host.clone()).collect();
    let leaf = chain.last().expect("a leaf").clone();
    std::thread::scope(|s| {
        let pusher = s.spawn(|| lab.push(&o));
        // The urgent file is on the leaf: the application could start.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let job = loop {
            let st = lab_status(&lab, &leaf);
            if st["jobs"][0]["urgent_s"].as_f64().is_some() {
                break st["jobs"][0]["job"].as_str().expect("job id").to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no urgent set on {leaf}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let st = lab_status(&lab, &leaf);
        let (have, chunks) = (
            st["jobs"][0]["have"].as_u64().expect("have"),
            st["jobs"][0]["chunks"].as_u64().expect("chunks"),
        );
        assert!(
            have * 2 < chunks,
            "the bulk must be far from done: {have}/{chunks}"
        );
        let t = std::time::Instant::now();
        let mp = lab.mountpoint(&leaf, &job);
        let out = lab
            .command_on(&leaf, "cat")
            .expect("command on the leaf")
            .arg(mp.join("zz-late.bin"))
            .output()
            .expect("cat");
        let read_s = t.elapsed().as_secs_f64();
        assert!(out.status.success(), "read on {leaf}: {out:?}");
        assert!(out.stdout == late, "the late file read back wrong bytes");
        let push = pusher.join().expect("push thread").expect("push");
        let leaf_all = push
            .report
            .per_node
            .iter()
            .find(|n| n.host == leaf)
            .and_then(|n| n.all_s)
            .expect("the leaf completed");
        let urgent = push.report.urgent_complete_s.expect("urgent everywhere");
        eprintln!(
            "demand read {read_s:.3} s; the leaf's whole layer {leaf_all:.2} s, urgent {urgent:.2} s"
        );
        // Urgent first at every hop: the chain's last node held the urgent set long before
        // the bulk ahead of it, which only happens if every hop sent it first.
        assert!(
            urgent < 0.2 * leaf_all,
            "the urgent set ({urgent:.2} s) came with the bulk ({leaf_all:.2} s)"
        );
        assert!(
            read_s < 0.3 * (leaf_all - urgent),
            "the demand read ({read_s:.2} s) waited behind the bulk ({:.2} s)",
            leaf_all - urgent
        );
        for h in &chain {
            let st = lab_status(&lab, h);
            let wants = st["jobs"][0]["counters"]["wants_sent"]
                .as_u64()
                .expect("wants");
            assert!(
                wants >= 1,
                "{h} did not fetch the late file on demand: {st}"
            );
        }
    });
    lab.down().expect("lab down");
}

/// `lab launch --rounds 2` on a small lab: each round runs both methods on fresh nodes, the
/// second in the other order; each method's start is the median of its rounds (of two, their
/// mean), with every round's start and each node's start kept; the table says it.
#[test]
fn a_launch_in_rounds_alternates_the_order_and_reports_medians() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = app_layer(tmp.path(), 2);
    let spec = LabSpec {
        groups: 1,
        group_size: 2,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let l = start_launch(&lab, &layer);
    let methods = [Method::UrgentFirst, Method::DemandOnly];
    let mut turns = Vec::new();
    let rep = lab::launch::rounds::run_rounds(&lab, &l, &methods, 2, |r, t| {
        if let lab::launch::Turn::Done(o) = t {
            turns.push((r, o.method));
        }
    });
    lab.down().expect("lab down");
    assert!(rep.stopped.is_none() && rep.failures.is_empty(), "{rep:?}");
    assert_eq!(
        turns,
        vec![
            (1, Method::UrgentFirst),
            (1, Method::DemandOnly),
            (2, Method::DemandOnly),
            (2, Method::UrgentFirst)
        ]
    );
    assert_eq!(rep.outcomes.len(), 2);
    for o in &rep.outcomes {
        assert_eq!(o.rounds.len(), 2, "{o:?}");
        let mean = (o.rounds[0] + o.rounds[1]) / 2.0;
        assert!((o.app_s - mean).abs() < 1e-9, "{o:?}");
        assert_eq!(o.node_starts.len(), 2, "{o:?}");
        let last = o.node_starts.iter().map(|n| n.1).fold(0.0, f64::max);
        assert!(o.rounds.contains(&last), "a round's own nodes: {o:?}");
        assert!(o.detail.starts_with("median of 2 rounds"), "{}", o.detail);
    }
    let table = lab::launch::table(&rep);
    assert!(table.contains("median over up to 2 rounds"), "{table}");
    assert!(
        rep.urgent_first.is_some(),
        "a round's urgent-first run for the picture"
    );
}

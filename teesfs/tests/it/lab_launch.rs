//! The launch benchmark's methods on a small lab: every method (urgent-first, copy-first,
//! demand-only, shared storage, sbcast+untar with real Slurm) starts the application on
//! every node from its own copy of the layer, on nodes that held nothing before; a push
//! that streams nothing moves only what the application reads, and one that streams the
//! whole layer moves all of it.

use std::time::Duration;

use lab::launch::{Launch, Method};
use lab::{Lab, LabOptions, LabSpec, Rates};

use crate::lab::{can_lab, random_layer};
use crate::util::teesfs_bin;

#[test]
fn lab_launch_starts_the_app_on_every_node_by_every_method() {
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
        rates: Rates::default(),
    };
    let mut lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let l = Launch {
        layer: layer.clone(),
        index: lab.publish(&layer).expect("publish"),
        urgent: vec!["app/*".into()],
        app: lab::demo::shell_app("grep -q started \"$TEESFS_MOUNT/app/start.txt\""),
        probe: "app/start.txt".into(),
    };
    let t = std::time::Instant::now();
    let rep = lab::launch::run(&mut lab, &l, &Method::ALL, |o| eprintln!("{o:?}")).expect("launch");
    eprintln!("{}", lab::launch::table(&rep));
    assert!(t.elapsed() < Duration::from_secs(300));
    assert_eq!(rep.outcomes.len(), Method::ALL.len());
    for o in &rep.outcomes {
        assert_eq!((o.ok, o.nodes), (6, 6), "{}: {o:?}", o.method.name());
        assert!(o.app_s > 0.0, "{o:?}");
    }
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
    assert!(rep.local_s.is_some(), "copy-first measured the local start");
    let run = rep.urgent_first.as_ref().expect("urgent-first run kept");
    assert!(run.push.report.streamed_bytes >= whole);
    lab.down().expect("lab down");
}

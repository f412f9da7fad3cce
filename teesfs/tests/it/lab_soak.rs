//! The soak in its short form (issue 17 item 5): jobs through one lab in sequence and
//! several at a time, a daemon restarted between jobs and a proxy killed during a push,
//! every job pushed, read on a node and released everywhere; afterwards the daemons'
//! memory, descriptors, threads, stores, jobs, mounts and namespaces are back to their
//! baseline within [`lab::soak::SoakReport::leaks`]'s margins. The full form is
//! `teesfs lab soak --jobs 100 --parallel 4` (BENCHMARKS.md).

use lab::soak::{SoakSpec, make_layers, run};
use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::teesfs_bin;

#[test]
fn a_short_soak_leaves_nothing_behind() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let spec = LabSpec {
        groups: 2,
        group_size: 4,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let dir = lab.work().join("soak-layers");
    let layers = make_layers(&dir, 5, 1 << 20).expect("layers");
    let indexes: Vec<String> = layers
        .iter()
        .map(|l| lab.publish(l).expect("publish"))
        .collect();
    let soak = SoakSpec {
        jobs: 12,
        parallel: 3,
        restart: "n02".into(),
        kill_proxy: "n05".into(),
        settle: std::time::Duration::from_secs(35),
    };
    let rep = run(&lab, &indexes[..4], &indexes[4], "payload.bin", &soak).expect("soak");
    eprintln!("{}", serde_json::to_string_pretty(&rep).expect("json"));
    assert_eq!(rep.job_s.len(), 12);
    assert_eq!(rep.complete + rep.with_failures, 12);
    assert!(
        rep.with_failures <= 1,
        "only the push whose proxy was killed may fail"
    );
    assert_eq!(rep.after.jobs, 0, "every job released");
    assert_eq!(rep.after.fuse_mounts, 0, "every mount gone");
    let leaks = rep.leaks(8);
    assert!(leaks.is_empty(), "left behind: {leaks:#?}");
    lab.down().expect("lab down");
}

/// Issue 29: with any other FUSE mount on the machine (a developer's sshfs, here a
/// `teesfs mount` outside the lab), the host's mounts propagate into the lab daemons'
/// namespaces and the soak counted them as the nodes' ("every mount gone: left 16"). The
/// stray mount is in each daemon's table, and no node counts it.
#[test]
fn a_fuse_mount_elsewhere_on_the_host_is_not_counted_as_a_lab_nodes() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let ws = crate::util::Workspace::new();
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(&layer).expect("mkdir");
    std::fs::write(layer.join("f"), b"stray").expect("write");
    let id = ws.publish(&layer);
    let stray = ws.mount(&id, "stray-mnt", &[]);
    let spec = LabSpec {
        groups: 1,
        group_size: 2,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    for node in lab.layout().compute() {
        let pid = lab.daemon_pid(&node.host).expect("daemon pid");
        let table = teesfs_node::sys::mountinfo::read(Some(pid)).expect("mountinfo");
        assert!(
            table.iter().any(|m| m.mount_point == stray.mountpoint),
            "the stray mount should be in {}'s table: the test would prove nothing",
            node.host
        );
        let own = lab.fuse_mounts(&node.host).expect("mounts");
        assert!(own.is_empty(), "{} counts {own:?}", node.host);
    }
    lab.down().expect("lab down");
    drop(stray);
}

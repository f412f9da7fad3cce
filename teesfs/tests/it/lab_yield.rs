//! Under the scale model a daemon finds its CPU quota, and a push's bulk stream yields that
//! quota to an application using the node's mount (`teesfs_node::bulk_gate`), and to
//! nothing else: a node whose mount nobody uses takes the push at full speed.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use lab::cluster::PushOptions;
use lab::scale::AppQuota;

use crate::lab::can_lab;

/// A node's CPU here: a debug daemon taking thousands of small chunks needs all of it.
const NODE_CPU: f64 = 0.05;

/// An application process on a node, killed when dropped.
struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A layer of `n` small files of random bytes (one chunk each).
fn small_files(dir: &Path, n: usize) -> std::path::PathBuf {
    let layer = dir.join("layer");
    std::fs::create_dir_all(layer.join("files")).expect("layer dir");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        let data: Vec<u8> = (0..8 << 10)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        std::fs::write(layer.join(format!("files/f{i:05}")), data).expect("file");
    }
    layer
}

#[test]
fn lab_daemons_yield_pushed_chunks_to_applications_on_their_mounts_only() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = small_files(tmp.path(), 2000);
    let lab = crate::lab_model::model_lab(3, NODE_CPU, AppQuota::Own);
    for host in ["n01", "n02", "n03"] {
        let st = lab.status(host).expect("status");
        let q = st.cpu_quota_cores.expect("the daemon finds its quota");
        assert!((q - NODE_CPU).abs() < 1e-3, "{host}: quota {q} cores");
    }
    let index = lab.publish(&layer).expect("publish");

    // n02's application opens whatever its mounts hold, again and again, until stopped.
    let jobs = lab.work().join("n02").join("jobs");
    let stop = tmp.path().join("stop");
    let script = format!(
        "while [ ! -e '{stop}' ]; do for d in '{jobs}'/*/files; do cat \"$d\"/f000* >/dev/null 2>&1; done; sleep 0.05; done",
        stop = stop.display(),
        jobs = jobs.display()
    );
    let app = App(lab
        .app_command("n02", "sh")
        .expect("app command")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .expect("application"));
    let mut o = PushOptions::new(&index);
    o.timeout = Duration::from_secs(240);
    let run = lab.push(&o).expect("push");
    std::fs::write(&stop, b"").expect("stop file");
    drop(app);
    let r = &run.report;
    assert!(r.failures.is_empty(), "failures: {:?}", r.failures);
    assert!(r.per_node.iter().all(|n| n.all_s.is_some()), "{r:?}");

    let yielded = |host: &str| lab.status(host).expect("status").bulk_yielded_s;
    let (n01, n02, n03) = (yielded("n01"), yielded("n02"), yielded("n03"));
    eprintln!("bulk yielded: n01 {n01:.2} s, n02 {n02:.2} s (application), n03 {n03:.2} s");
    assert!(
        n02 > 0.2,
        "n02's application was active all along, yet its push yielded {n02:.3} s"
    );
    assert_eq!(n01, 0.0, "n01 has no application");
    assert_eq!(n03, 0.0, "n03 has no application");

    // Yielding loses nothing: n02's mount holds the layer exactly.
    let mp = lab.mountpoint("n02", &r.job);
    let out = lab
        .command_on("n02", "diff")
        .expect("command on n02")
        .arg("-r")
        .arg(&layer)
        .arg(&mp)
        .output()
        .expect("diff");
    assert!(out.status.success(), "diff on n02: {out:?}");
    lab.down().expect("lab down");
}

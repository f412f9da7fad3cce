//! `teesfs record --from-job`: a daemon records what a job reads through its mount while the
//! layer is still arriving (opens, and reads that wait for a chunk), and hands it back as an
//! urgent list in read order; what is read after the whole layer arrived is not in it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{can_mount, noise, teesfs_bin};

/// The job id the push uses, as Slurm's $SLURM_JOB_ID would be.
const JOB: &str = "4242";

fn record(c: &Cluster, job: &str, list: &Path) -> Output {
    Command::new(teesfs_bin())
        .args(["record", "--from-job", job, "--control"])
        .arg(c.nodes[0].control())
        .arg("-o")
        .arg(list)
        .env_remove("SLURM_JOB_ID")
        .output()
        .expect("teesfs record")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The file lines and the `!` lines of an urgent list.
fn entries(list: &Path) -> (Vec<String>, Vec<String>) {
    let listed = std::fs::read_to_string(list).expect("list");
    let files = listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('!'))
        .map(str::to_string)
        .collect();
    let absent = listed
        .lines()
        .filter_map(|l| l.strip_prefix('!'))
        .map(str::to_string)
        .collect();
    (files, absent)
}

/// Three small files (urgent), one read late, and 6 MiB of data that streams at 1 MiB/s
/// behind the urgent set, so the job reads while it is on its way.
fn make_layer(layer: &Path) {
    std::fs::create_dir_all(layer.join("app")).expect("mkdir");
    std::fs::create_dir_all(layer.join("data")).expect("mkdir");
    for f in ["a", "b", "c"] {
        std::fs::write(layer.join(format!("app/{f}.txt")), f.repeat(100)).expect("write");
    }
    std::fs::write(layer.join("late.txt"), "late\n").expect("write");
    std::fs::write(layer.join("data/big.bin"), noise(6 << 20, 7)).expect("write");
}

/// What the job does while it starts: reads two files, probes for a name the layer lacks,
/// and reads the end of a file whose data has not arrived (the read waits for it).
fn start_up(mnt: &Path) {
    std::fs::read(mnt.join("app/b.txt")).expect("read b");
    std::fs::read(mnt.join("app/a.txt")).expect("read a");
    assert!(!mnt.join("app/libnothere.so").exists());
    let mut f = std::fs::File::open(mnt.join("data/big.bin")).expect("open");
    f.seek(SeekFrom::End(-100)).expect("seek");
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).expect("read the tail");
    assert_eq!(tail, noise(6 << 20, 7)[(6 << 20) - 100..]);
}

/// `teesfs publish LAYER --urgent-list LIST`.
fn publish_with(c: &Cluster, layer: &Path, list: &Path) -> Output {
    c.ws.teesfs(&[
        "publish",
        layer.to_str().expect("utf8"),
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--key",
        c.ws.key().to_str().expect("utf8"),
        "--quiet",
        "--urgent-list",
        list.to_str().expect("utf8"),
    ])
}

/// Waits until node 0 holds the whole layer of its job.
fn wait_for_the_whole_layer(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.status(0)["jobs"][0]["all_s"].is_null() {
        assert!(Instant::now() < deadline, "the layer never arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn record_from_job_lists_what_the_job_read_before_the_layer_arrived_in_read_order() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| Vec::new());
    let layer = c.ws.path().join("layer");
    make_layer(&layer);
    let id = c.ws.publish(&layer);
    let list = c.ws.path().join("urgent.list");

    let mut push = c
        .push_cmd(
            &id,
            1,
            &["--job-id", JOB, "--urgent", "app/*", "--rate-limit", "1MiB"],
        )
        .spawn()
        .expect("push");
    let mnt = c.mount_of(0);

    let out = record(&c, JOB, &list);
    assert!(
        !out.status.success(),
        "an empty record was written: {out:?}"
    );
    assert!(
        text(&out.stderr).contains("nothing recorded yet for job 4242 on n01"),
        "{out:?}"
    );

    start_up(&mnt);

    let out = record(&c, JOB, &list);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains("does not hold the whole layer yet"),
        "the layer had arrived before the reads, so this tests nothing: {out:?}"
    );
    let expected = ["app/b.txt", "app/a.txt", "data/big.bin"];
    let (files, absent) = entries(&list);
    assert_eq!(files, expected);
    assert_eq!(absent, ["app/libnothere.so"]);

    // Once the whole layer is here, what the job opens is no longer of its start.
    wait_for_the_whole_layer(&c);
    assert!(push.wait().expect("push").success());
    std::fs::read(mnt.join("late.txt")).expect("read late");
    std::fs::read(mnt.join("app/c.txt")).expect("read c");
    assert!(!mnt.join("app/late-probe").exists());

    // Named by its 16 hex digits as earlier releases showed it: the same job, shown as its
    // Slurm number (issue 30 item 9).
    let out = record(&c, "0000000000001092", &list);
    assert!(out.status.success(), "{out:?}");
    assert!(
        !text(&out.stdout).contains("does not hold the whole layer yet"),
        "{out:?}"
    );
    let (files, absent) = entries(&list);
    assert_eq!(
        files, expected,
        "read after the layer arrived, yet recorded"
    );
    assert_eq!(absent, ["app/libnothere.so"]);
    let listed = std::fs::read_to_string(&list).expect("list");
    let header = listed.lines().next().expect("header");
    assert!(
        header.starts_with("# teesfs record learned from job 4242 on n01: 3 files"),
        "{header}"
    );

    // The next publish takes it as its urgent set.
    let out = publish_with(&c, &layer, &list);
    assert!(out.status.success(), "{out:?}");

    let out = record(&c, "999", &list);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains("no job 999 on this node"),
        "{out:?}"
    );
}

#[test]
fn record_from_job_says_when_no_daemon_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(teesfs_bin())
        .args(["record", "--from-job", "--control"])
        .arg(dir.path().join("no.sock"))
        .env("SLURM_JOB_ID", "17")
        .output()
        .expect("teesfs record");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("record of job 17") && err.contains("no daemon answers at"),
        "{err}"
    );
    let out = Command::new(teesfs_bin())
        .args(["record", "--from-job"])
        .env_remove("SLURM_JOB_ID")
        .output()
        .expect("teesfs record");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("which job?"), "{out:?}");
}

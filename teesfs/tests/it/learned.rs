//! The urgent set learns by itself (issue 28): the nodes of a job record what it reads while
//! the layer arrives and keep those records after the job is released; `teesfs learn` asks
//! them over QUIC, merges the records in first-use order across nodes and keeps the list
//! beside the index; the next push of that index, given no urgent list at all, pushes the
//! learned files first. A dead node is named and skipped; an unusable list never fails a
//! push; gc removes the list with its index.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::cluster::Cluster;
use crate::util::{can_mount, noise, teesfs_bin};

/// The first job, as `push --job` names it.
pub(crate) const JOB: &str = "4242";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Three one-chunk files, a small one stored in the index, and 6 MiB that streams at 1 MiB/s
/// behind them, so the job reads while the layer is on its way.
fn make_layer(layer: &Path) {
    std::fs::create_dir_all(layer.join("app")).expect("mkdir");
    std::fs::create_dir_all(layer.join("data")).expect("mkdir");
    for (i, f) in ["a", "b", "c"].iter().enumerate() {
        std::fs::write(layer.join(format!("app/{f}.bin")), noise(8 << 10, i as u64)).expect("w");
    }
    std::fs::write(layer.join("late.txt"), "late\n").expect("write");
    std::fs::write(layer.join("data/big.bin"), noise(6 << 20, 7)).expect("write");
}

/// Reads the last bytes of a file whose data has not arrived yet (the read waits for them).
fn read_tail(path: &Path) {
    let mut f = std::fs::File::open(path).expect("open");
    f.seek(SeekFrom::End(-100)).expect("seek");
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).expect("read the tail");
    assert_eq!(tail.len(), 100);
}

/// `teesfs push` of `index` to `nodes` (a hostlist of the cluster's nodes) with `extra`,
/// printing its report as JSON.
pub(crate) fn push_to(c: &Cluster, index: &str, nodes: &str, extra: &[&str]) -> Output {
    Command::new(teesfs_bin())
        .args(["push", "--quiet", "--format", "json", "--store"])
        .arg(c.ws.store())
        .args(["--index", index, "--nodes", nodes, "--group-size", "3"])
        .arg("--identity")
        .arg(&c.creds)
        .arg("--hosts")
        .arg(c.hosts_file())
        .args(["--listen", "127.0.0.1:0", "--trust"])
        .arg(c.ws.pubkey())
        .args(extra)
        .env("TEESFS_CONFIG", c.ws.path().join("config"))
        .output()
        .expect("teesfs push")
}

pub(crate) fn report(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "push failed: {out:?}");
    serde_json::from_slice(&out.stdout).expect("push report JSON")
}

pub(crate) fn learn(c: &Cluster, nodes: &str, extra: &[&str]) -> Output {
    Command::new(teesfs_bin())
        .args(["learn", "--job", JOB, "--nodes", nodes, "--store"])
        .arg(c.ws.store())
        .arg("--identity")
        .arg(&c.creds)
        .arg("--hosts")
        .arg(c.hosts_file())
        .args(["--listen", "127.0.0.1:0", "--timeout", "20s"])
        .args(extra)
        .env("TEESFS_CONFIG", c.ws.path().join("config"))
        .env_remove("SLURM_JOB_ID")
        .output()
        .expect("teesfs learn")
}

pub(crate) fn release(c: &Cluster, i: usize) {
    let out = Command::new(teesfs_bin())
        .args(["release", "--job", JOB, "--control"])
        .arg(c.nodes[i].control())
        .output()
        .expect("teesfs release");
    assert!(
        out.status.success(),
        "release on {}: {out:?}",
        c.nodes[i].host
    );
}

/// The store's only learned list.
pub(crate) fn learned_file(c: &Cluster) -> PathBuf {
    let dir = c.ws.store().join("learned");
    let lists: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the store has learned/")
        .map(|e| e.expect("entry").path())
        // Beside the lists: the link rates the pushes measured (issue 33).
        .filter(|p| p.extension().is_some_and(|e| e == "list"))
        .collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    lists.into_iter().next().expect("one")
}

/// The file lines and the `!` lines of an urgent list.
pub(crate) fn entries(list: &Path) -> (Vec<String>, Vec<String>) {
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

#[test]
fn learned_records_of_every_node_are_merged_and_the_next_push_sends_them_first() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(3, |_| Vec::new());
    let layer = c.ws.path().join("layer");
    make_layer(&layer);
    let id = c.ws.publish_mib_chunks(&layer);

    // The first job: no urgent list anywhere, so nothing is urgent.
    let push = c
        .push_cmd(
            &id,
            3,
            &["--job", JOB, "--rate-limit", "1MiB", "--format", "json"],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("push");
    // Two nodes start the job's application, each its own way, while the layer arrives.
    let (m1, m2) = (c.mount_of(0), c.mount_of(1));
    std::fs::read(m1.join("app/b.bin")).expect("read b");
    assert!(!m1.join("app/libnothere.so").exists());
    read_tail(&m1.join("data/big.bin"));
    std::fs::read(m2.join("app/c.bin")).expect("read c");
    std::fs::read(m2.join("app/b.bin")).expect("read b");
    let first = report(&push.wait_with_output().expect("push"));
    assert_eq!(first["urgent_chunks"], 0, "{first}");
    assert_eq!(first["learned_files"], 0, "{first}");

    // The Slurm epilog releases the job on every node; a node then dies.
    for i in 0..3 {
        release(&c, i);
        assert_eq!(c.status(i)["jobs"].as_array().map(Vec::len), Some(0));
    }
    c.kill(2);

    // The EpilogSlurmctld learns: the dead node is named and skipped.
    let copy = c.ws.path().join("merged.list");
    let out = learn(&c, "n[01-03]", &["-o", copy.to_str().expect("utf8")]);
    assert!(out.status.success(), "{out:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("learned 3 files and 1 names that exist nowhere from 2 of 3 nodes of job"),
        "{stdout}"
    );
    assert!(stderr.contains("skipped n03: unreachable"), "{stderr}");
    let list = learned_file(&c);
    assert!(
        list.ends_with(format!("learned/{id}.list")),
        "{}",
        list.display()
    );
    // b.bin is first on n01 and used by both nodes; c.bin first on n02 only; big.bin second.
    let (files, absent) = entries(&list);
    assert_eq!(files, ["app/b.bin", "app/c.bin", "data/big.bin"]);
    assert_eq!(absent, ["app/libnothere.so"]);
    assert_eq!(entries(&copy), (files, absent));
    let listed = std::fs::read_to_string(&list).expect("list");
    assert!(
        listed.contains("learned from job 4242:") && listed.contains("skipped 1 node"),
        "{listed}"
    );

    let out = c.ws.teesfs(&[
        "inspect",
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--index",
        &id,
        "--trust",
        c.ws.pubkey().to_str().expect("utf8"),
    ]);
    assert!(
        text(&out.stdout).contains("learned urgent list: 3 files the next push sends first"),
        "{out:?}"
    );

    // The next push of the index, given nothing: the learned files are its urgent set
    // (one chunk each for the small ones, six for big.bin), sent first.
    let next = push_to(&c, &id, "n[01-02]", &["--job", "4243"]);
    let rep = report(&next);
    assert_eq!(rep["learned_files"], 3, "{rep}");
    assert_eq!(rep["urgent_chunks"], 8, "{rep}");
    assert!(
        text(&next.stderr).contains("pushing first the 3 files earlier jobs of this index used"),
        "{next:?}"
    );
    let opted_out = report(&push_to(
        &c,
        &id,
        "n[01-02]",
        &["--job", "4244", "--no-learned"],
    ));
    assert_eq!(opted_out["urgent_chunks"], 0, "{opted_out}");

    // A garbled list is warned about and ignored; the push goes on.
    std::fs::write(&list, b"\0garbage").expect("garble");
    let garbled = push_to(&c, &id, "n[01-02]", &["--job", "4245"]);
    let rep = report(&garbled);
    assert_eq!(rep["learned_files"], 0, "{rep}");
    assert!(text(&garbled.stderr).contains("is unusable"), "{garbled:?}");

    assert_gc_removes_lists(&c, &list);
}

/// gc removes the learned list with its index, and a list whose index is gone, a symlink
/// planted as one removed as a link, never followed.
fn assert_gc_removes_lists(c: &Cluster, list: &Path) {
    let orphan = list.with_file_name(format!("{}.list", "ab".repeat(32)));
    std::fs::write(
        &orphan,
        b"# teesfs learned urgent list of an index long gone\n",
    )
    .expect("w");
    let victim = c.ws.path().join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    let planted = list.with_file_name(format!("{}.list", "cd".repeat(32)));
    std::os::unix::fs::symlink(&victim, &planted).expect("symlink");
    let out = c.ws.teesfs(&[
        "gc",
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--keep",
        "0",
        "--no-keep-tag",
        "--grace",
        "0s",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("learned urgent list"), "{out:?}");
    assert!(!list.exists(), "the learned list outlived its index");
    assert!(!orphan.exists() && planted.symlink_metadata().is_err());
    assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
}

#[test]
fn learn_fails_naming_every_node_when_none_has_a_record() {
    let c = Cluster::start(1, |_| Vec::new());
    let layer = c.ws.path().join("layer");
    make_layer(&layer);
    c.ws.publish_mib_chunks(&layer);
    let out = learn(&c, "n01", &[]);
    assert!(!out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("skipped n01: no job 4242 on this node"),
        "{err}"
    );
    assert!(
        err.contains("nothing learned from job 4242: none of its 1 node(s)"),
        "{err}"
    );
    assert!(!c.ws.store().join("learned").exists());
}

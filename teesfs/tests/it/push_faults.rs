//! Issue 29, item 8 and two of its Low items: a push whose root store lacks a chunk, or
//! holds a damaged one, fails at once naming the chunk, the index and the store; a node
//! whose store cannot keep chunks is named in the push's failure; a storage-mode push
//! checks the store's chunks before it reports the layer complete; a node whose push root
//! is gone stops asking it. Real daemons, real QUIC, real FUSE mounts on loopback.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{can_mount, noise};

/// Runs `cmd`, failing the test if it has not exited within `bound`; returns its output
/// and how long it took.
fn run_within(mut cmd: Command, bound: Duration) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    let output = Output {
        status,
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
    };
    (output, took)
}

/// Publishes a layer of 3 MiB of noise in 1 MiB chunks; its index id and chunk files.
fn noise_layer(c: &Cluster) -> (String, Vec<PathBuf>) {
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("data.bin"), noise(3 << 20, 29)).expect("write");
    let id = c.ws.publish_mib_chunks(&src);
    let mut files = Vec::new();
    for shard in std::fs::read_dir(c.ws.store().join("chunks"))
        .expect("chunks")
        .flatten()
    {
        files.extend(
            std::fs::read_dir(shard.path())
                .expect("shard")
                .flatten()
                .map(|f| f.path()),
        );
    }
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    (id, files)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The push's JSON report.
fn report(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("the report")).expect("JSON")
}

/// A push whose store `damage` spoiled: it must fail within seconds (not at its 30-minute
/// timeout), naming the chunk, the index and the store, the root and not the nodes.
fn push_over_a_spoiled_store(damage: impl Fn(&Path)) -> (String, String, serde_json::Value) {
    let c = Cluster::start(2, |_| vec![]);
    let (id, chunks) = noise_layer(&c);
    damage(&chunks[1]);
    let json = c.ws.path().join("push.json");
    let (out, took) = run_within(
        c.push_cmd(&id, 2, &["--report", json.to_str().expect("utf8")]),
        Duration::from_secs(25),
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {all}");
    let chunk = chunks[1]
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_string();
    for part in [
        chunk.as_str(),
        &id,
        c.ws.store().to_str().expect("utf8"),
        "teesfs verify --store",
        "not at fault",
    ] {
        assert!(all.contains(part), "{part:?} is not named: {all}");
    }
    let rep = report(&json);
    let kinds: Vec<&str> = rep["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["store"], "only the root's store is at fault: {rep}");
    (all, chunk, rep)
}

/// A chunk the index lists was gone from the root's store (a gc, a hand): the nodes called
/// the root a liar and the push waited out its timeout.
#[test]
fn a_push_whose_root_store_lacks_a_chunk_fails_at_once_naming_it() {
    if !can_mount() {
        return;
    }
    let (all, _, _) = push_over_a_spoiled_store(|p| std::fs::remove_file(p).expect("rm"));
    assert!(
        all.contains("is missing") && all.contains("teesfs gc") && all.contains("Publish"),
        "told apart from damage, with what to do: {all}"
    );
}

/// A damaged chunk in the root's store went out as it lay; the nodes refused it and
/// called the root a liar, and the push waited out its timeout.
#[test]
fn a_damaged_chunk_in_the_root_store_is_named_as_damaged() {
    if !can_mount() {
        return;
    }
    let (all, _, _) = push_over_a_spoiled_store(|p| {
        let mut bytes = std::fs::read(p).expect("read");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(p, bytes).expect("damage");
    });
    assert!(
        all.contains("damaged on disk") && !all.contains("is missing"),
        "{all}"
    );
}

/// Damage the root's marks cannot see (the disk's, or a write that put the file's time
/// back): the publisher marked the chunk file checked, so the root sends it without
/// hashing it; the node refuses it, and the root then checks its whole store, names the
/// chunk as damaged and fails the push, as if it had hashed the chunk first.
#[test]
fn damage_that_keeps_a_chunk_files_mark_is_named_once_a_node_refuses_it() {
    if !can_mount() {
        return;
    }
    let (all, _, rep) = push_over_a_spoiled_store(|p| {
        let mark = xattr::get(p, seeder::mark::MARK_XATTR).expect("getxattr");
        assert!(mark.is_some(), "the publisher marked {}", p.display());
        let modified = std::fs::metadata(p).expect("md").modified().expect("mtime");
        let mut bytes = std::fs::read(p).expect("read");
        let mid = bytes.len() / 3;
        bytes[mid] ^= 0x40;
        std::fs::write(p, bytes).expect("damage");
        let f = std::fs::File::options().write(true).open(p).expect("open");
        f.set_times(std::fs::FileTimes::new().set_modified(modified))
            .expect("put the time back");
    });
    assert!(
        all.contains("damaged on disk") && all.contains("refused a chunk the root sent"),
        "the root sent it, then named it: {all}"
    );
    let liars = rep["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter(|f| f["kind"] == "liar")
        .count();
    assert_eq!(
        liars, 0,
        "the store is named, not the root as a liar: {rep}"
    );
}

/// A tmpfs of one page mounted over a directory: writing a chunk there fails with ENOSPC.
/// Detached on drop.
struct FullDisk(PathBuf);

impl FullDisk {
    fn over(dir: &Path) -> Self {
        nix::mount::mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=4k"),
        )
        .expect("mount a tiny tmpfs");
        Self(dir.to_path_buf())
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A node whose state directory was full dropped every chunk and said nothing: its
/// subtree waited and the push ran to its timeout. It leaves the tree now, named with the
/// reason in the push's failure, and the node below it gets the layer through another.
#[test]
fn a_node_whose_store_is_full_is_named_in_the_push_failure() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(3, |_| vec![]);
    let (id, _) = noise_layer(&c);
    let _full = FullDisk::over(&c.nodes[1].dir.join("state/store/chunks"));
    let json = c.ws.path().join("push.json");
    // A chain: login -> n01 -> n02 -> n03.
    let (out, took) = run_within(
        c.push_cmd(
            &id,
            3,
            &[
                "--strategy",
                "hostlist",
                "--width",
                "1",
                "--deadline",
                "1s",
                "--heartbeat",
                "200ms",
                "--report",
                json.to_str().expect("utf8"),
            ],
        ),
        Duration::from_secs(25),
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(15), "took {took:?}: {all}");
    let rep = report(&json);
    let failures = rep["failures"].as_array().expect("failures");
    let n02 = failures
        .iter()
        .find(|f| f["child"] == "n02")
        .unwrap_or_else(|| panic!("n02 is not named: {rep}"));
    let why = n02["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("No space left on device") && why.contains("state/store/chunks"),
        "{why}"
    );
    assert!(
        all.contains("n02") && all.contains("No space left"),
        "{all}"
    );
    let n03 = rep["per_node"]
        .as_array()
        .expect("per_node")
        .iter()
        .find(|n| n["host"] == "n03")
        .expect("n03");
    assert!(
        n03["all_s"].is_number(),
        "n03 got the layer around n02: {rep}"
    );
}

/// A storage-mode push reported the whole layer complete although a chunk in the store
/// was damaged: the nodes read the store themselves and nothing checked it. The root
/// checks it now and names the bad chunk.
#[test]
fn a_storage_mode_push_names_bad_chunks_instead_of_reporting_the_layer_complete() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let (id, chunks) = noise_layer(&c);
    let mut bytes = std::fs::read(&chunks[2]).expect("read");
    bytes[10] ^= 1;
    std::fs::write(&chunks[2], bytes).expect("damage");
    let store = c.ws.store();
    let json = c.ws.path().join("push.json");
    let (out, _) = run_within(
        c.push_cmd(
            &id,
            2,
            &[
                "--strategy",
                "storage",
                "--shared-store",
                store.to_str().expect("utf8"),
                "--report",
                json.to_str().expect("utf8"),
            ],
        ),
        Duration::from_secs(25),
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let chunk = chunks[2]
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    assert!(
        all.contains(chunk) && all.contains("damaged on disk"),
        "{all}"
    );
    let rep = report(&json);
    assert!(rep["all_complete_s"].is_null(), "not complete: {rep}");
}

/// Kills and reaps its process, also when the test fails.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many times the daemon of node `i` logged that its push's root is gone.
fn gone_lines(c: &Cluster, i: usize) -> usize {
    std::fs::read_to_string(c.nodes[i].dir.join("daemon.log"))
        .unwrap_or_default()
        .matches("the push's root is gone")
        .count()
}

/// A node whose push root had gone asked it to adopt it every few seconds until the job
/// was released. It asks a bounded number of times now, with back-off, says so once, and
/// keeps serving what the job already holds.
#[test]
fn a_node_whose_push_root_is_gone_stops_asking_it_and_keeps_its_data() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    let data = noise(1 << 20, 7);
    std::fs::write(src.join("data.bin"), &data).expect("write");
    let id = c.ws.publish(&src);
    // The root keeps serving demand; nothing is streamed.
    let push = Reap(
        c.push_cmd(
            &id,
            1,
            &[
                "--stream",
                "none",
                "--serve",
                "10m",
                "--wait",
                "all",
                "--deadline",
                "500ms",
                "--heartbeat",
                "100ms",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("push"),
    );
    let mp = c.mount_of(0);
    assert_eq!(std::fs::read(mp.join("data.bin")).expect("read"), data);
    drop(push);
    // Asked at 0.5 s, then 1, 2 and 4 s later, and given up 8 s after that.
    let t0 = Instant::now();
    while gone_lines(&c, 0) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "the node never gave up on its gone root; see {}",
            c.nodes[0].dir.join("daemon.log").display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t0.elapsed() > Duration::from_secs(5), "with back-off");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(gone_lines(&c, 0), 1, "said once");
    assert_eq!(
        std::fs::read(mp.join("data.bin")).expect("read after"),
        data,
        "what the job holds is still served"
    );
}

/// A chunk the store lacks, demanded by a node while the root serves the layer on demand
/// (`--stream none --serve`): the read fails, the rest is still served, and the push fails
/// at its end naming the chunk instead of exiting 0.
#[test]
fn a_demanded_chunk_the_root_store_lacks_is_named_when_the_push_ends() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec!["--read-timeout".into(), "2s".into()]);
    let (id, chunks) = noise_layer(&c);
    std::fs::remove_file(&chunks[0]).expect("rm");
    let cmd = c.push_cmd(&id, 1, &["--stream", "none", "--serve", "6s"]);
    let push = std::thread::spawn(move || run_within(cmd, Duration::from_secs(25)));
    let mp = c.mount_of(0);
    let file = std::fs::File::open(mp.join("data.bin")).expect("open");
    let want = noise(3 << 20, 29);
    let mut failed = 0;
    for mib in 0..3 {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 1 << 20];
        match file.read_exact_at(&mut buf, mib << 20) {
            Ok(()) => assert!(buf == want[(mib as usize) << 20..][..1 << 20], "MiB {mib}"),
            Err(_) => failed += 1,
        }
    }
    assert_eq!(failed, 1, "the chunk that is gone, and only it, fails");
    let (out, _) = push.join().expect("push");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let chunk = chunks[0]
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    assert!(all.contains(chunk) && all.contains("is missing"), "{all}");
}

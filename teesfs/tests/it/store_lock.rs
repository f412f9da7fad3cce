//! The store's lock (issue 29 items 3 and 5): a reader of a store cannot stall a publish,
//! a publish that waits for a gc says whom it waits for and gives up in time, and gc
//! refuses, naming the holder, while a push or a mount still reads the store.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{Workspace, assert_same_tree, can_mount, make_tree, noise};

/// Kills and reaps its process, also when the test fails.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn layer(ws: &Workspace, name: &str, seed: u64) -> std::path::PathBuf {
    let dir = ws.path().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("own.bin"), noise(300_000, seed)).expect("write");
    dir
}

fn publish(ws: &Workspace, layer: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "publish",
        layer.to_str().expect("utf8"),
        "--quiet",
        "--store",
    ];
    let (store, key) = (ws.store(), ws.key());
    args.extend([
        store.to_str().expect("utf8"),
        "--key",
        key.to_str().expect("utf8"),
    ]);
    args.extend(extra);
    ws.teesfs(&args)
}

fn chunk_count(store: &Path) -> usize {
    walkdir::WalkDir::new(store.join("chunks"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .count()
}

fn gc_all(ws: &Workspace) -> std::process::Output {
    let store = ws.store();
    ws.teesfs(&[
        "gc",
        "--store",
        store.to_str().expect("utf8"),
        "--keep",
        "0",
        "--no-keep-tag",
        "--grace",
        "0s",
    ])
}

#[test]
fn a_reader_of_the_store_cannot_block_a_publish() {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs root (setpriv); CI runs as root"
        );
        eprintln!("SKIP: needs root to act as nobody");
        return;
    }
    let ws = Workspace::new();
    assert!(publish(&ws, &layer(&ws, "v1", 1), &[]).status.success());
    // The store is readable by everyone, as a site store is.
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let lock = ws.store().join(".lock");
    // `nobody` takes `flock -x` on the lock through the read-only descriptor anyone gets.
    let mut holder = Reap(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "flock",
                "-x",
            ])
            .arg(&lock)
            .args(["-c", "echo held; exec sleep 60"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv flock"),
    );
    let mut line = String::new();
    BufReader::new(holder.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(
        line.trim(),
        "held",
        "nobody holds flock -x on {}",
        lock.display()
    );

    // Root's publish goes ahead (it hung, silently, for as long as nobody held on).
    let (store, key, v2) = (ws.store(), ws.key(), layer(&ws, "v2", 2));
    let mut publish = Reap(
        Command::new(crate::util::teesfs_bin())
            .arg("publish")
            .arg(&v2)
            .arg("--quiet")
            .arg("--store")
            .arg(&store)
            .arg("--key")
            .arg(&key)
            .env("TEESFS_CONFIG", ws.path().join("config"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("publish"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = publish.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "publish stalled behind nobody's flock -x on {}",
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut publish.0.stderr.take().expect("piped"), &mut err)
        .expect("stderr");
    assert!(status.success(), "{err}");
    assert!(!err.contains("waiting"), "{err}");
}

#[test]
fn a_publish_waiting_for_gc_names_it_and_gives_up_in_time() {
    let ws = Workspace::new();
    assert!(publish(&ws, &layer(&ws, "v1", 1), &[]).status.success());
    // This test process takes the lock exclusive, as a gc does.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.store().join(".lock"))
        .expect("open .lock");
    let whole = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_SETLK(&whole)).expect("lock");
    let t = Instant::now();
    let out = publish(&ws, &layer(&ws, "v2", 2), &["--lock-wait", "1s"]);
    assert!(!out.status.success(), "a gc holds the store");
    assert!(t.elapsed() < Duration::from_secs(10), "gave up in time");
    let err = String::from_utf8_lossy(&out.stderr);
    let me = format!("pid {}", std::process::id());
    assert!(
        err.contains("waiting") && err.contains(&me),
        "says whom it waits for: {err}"
    );
    assert!(
        err.contains("gave up") && err.contains("--lock-wait"),
        "{err}"
    );
    drop(file);
    assert!(
        publish(&ws, &layer(&ws, "v2", 2), &["--lock-wait", "1s"])
            .status
            .success()
    );
}

#[test]
fn gc_refuses_while_a_mount_reads_the_store_and_its_chunks_stay() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let src = ws.path().join("layer");
    make_tree(&src, 20, 0);
    let id = ws.publish(&src);
    let before = chunk_count(&ws.store());
    let mut m = ws.mount(&id, "mnt", &[]);
    let out = gc_all(&ws);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "{err}");
    assert!(
        err.contains("teesfs") && err.contains("shared"),
        "names the holder: {err}"
    );
    assert_eq!(chunk_count(&ws.store()), before);
    assert_same_tree(&src, &m.mountpoint);
    assert!(m.stop_with(nix::sys::signal::Signal::SIGTERM));
    assert!(gc_all(&ws).status.success(), "free once the mount is gone");
    assert_eq!(chunk_count(&ws.store()), 0);
}

#[test]
fn gc_refuses_while_a_push_root_serves_the_store_and_the_push_completes() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 20, 0);
    std::fs::write(src.join("noise.bin"), noise(3 << 20, 5)).expect("write");
    let id = c.ws.publish(&src);
    let before = chunk_count(&c.ws.store());
    // 3 MiB of noise at 1 MiB/s: the push runs for seconds.
    let mut push = Reap(
        c.push_cmd(&id, 2, &["--wait", "all", "--rate-limit", "1MiB"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("push"),
    );
    let mut lines = BufReader::new(push.0.stderr.take().expect("piped")).lines();
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("pushing index"));
    assert!(started, "the push started");
    std::thread::spawn(move || for _ in lines {});
    let out = gc_all(&c.ws);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "{err}");
    assert!(
        err.contains(&format!("pid {}", push.0.id())),
        "names the push: {err}"
    );
    assert_eq!(chunk_count(&c.ws.store()), before, "chunks intact");
    let status = push.0.wait().expect("wait");
    assert!(status.success(), "the push completes");
    for i in 0..2 {
        assert_same_tree(&src, &c.mount_of(i));
    }
}

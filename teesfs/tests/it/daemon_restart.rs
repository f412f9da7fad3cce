//! Issue 32 item 3: a daemon restart never breaks a running job. A daemon killed with
//! SIGKILL (a crash under `Restart=on-failure`) used to leave its job's processes with
//! "Transport endpoint is not connected", and the next daemon detached the mount: the
//! job's files were gone. With `--keep-jobs` a keeper process holds each job's FUSE
//! connection, the next daemon takes the job up from its record and serves the same mount,
//! and reads in flight meanwhile complete. Real daemons, real FUSE, real SIGKILLs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{can_mount, is_mounted, noise};

const KEEP: [&str; 1] = ["--keep-jobs"];

/// Ends node 0's keeper on drop (it holds the mounts' connections; a test that fails must
/// not leave a mount nobody serves), then the cluster detaches what is left.
struct KeeperGuard(PathBuf);

impl KeeperGuard {
    fn of(c: &Cluster) -> Self {
        Self(c.nodes[0].dir.join("state"))
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.0.join("keeper.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    fn kill(&self) {
        if let Some(pid) = self.pid() {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            // Gone once it is no longer a live process (it is not our child: no reaping).
            let deadline = Instant::now() + Duration::from_secs(10);
            while nix::sys::signal::kill(pid, None).is_ok()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z"))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// How many FUSE connections the keeper holds now; `None` without a live keeper.
    fn fuse_fds(&self) -> Option<usize> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid()?)).ok()?;
        Some(
            fds.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == Path::new("/dev/fuse")))
                .count(),
        )
    }

    /// How many FUSE connections the keeper holds now.
    fn held(&self) -> usize {
        self.fuse_fds().expect("the keeper runs")
    }

    /// Whether a live keeper holds a FUSE connection.
    fn holds_any(&self) -> bool {
        self.fuse_fds().is_some_and(|n| n > 0)
    }
}

impl Drop for KeeperGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three files of 1.05 MiB of noise (several chunks each).
fn layer(c: &Cluster) -> (PathBuf, Vec<(&'static str, Vec<u8>)>) {
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    let files = vec![
        ("a.bin", noise(1_100_000, 31)),
        ("b.bin", noise(1_100_000, 32)),
        ("c.bin", noise(1_100_000, 33)),
    ];
    for (name, data) in &files {
        std::fs::write(src.join(name), data).expect("write");
    }
    (src, files)
}

fn push(c: &Cluster, id: &str, job: &str) {
    let out = (c.push_cmd(id, 1, &["--width", "1", "--wait", "all", "--job", job]))
        .output()
        .expect("push");
    assert!(out.status.success(), "push: {out:?}");
}

/// Waits until node 0 keeps job `job`: its record written, which the daemon does just
/// after the mount appears, and then its connection handed to `keeper` (a kill before
/// either loses the job, as with no keeper). Each caller's job is the only one mounted.
fn wait_kept(c: &Cluster, keeper: &KeeperGuard, job: &str) {
    let record = c.nodes[0].dir.join(format!("state/kept/{job}.job"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(record.exists() && keeper.holds_any()) {
        assert!(
            Instant::now() < deadline,
            "job {job} was never kept: {}",
            daemon_log(c)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn daemon_log(c: &Cluster) -> String {
    std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).unwrap_or_default()
}

fn release(c: &Cluster, job: &str) {
    let control = c.nodes[0].control();
    let out = c.ws.teesfs(&[
        "release",
        "--job",
        job,
        "--control",
        control.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "release: {out:?}");
}

/// What a reader saw.
#[derive(Default)]
struct Seen {
    reads: u64,
    failures: Vec<String>,
    longest: Duration,
}

/// A process reading one file of the mount in a loop (`sha256sum`, the file opened anew
/// each time, so each open reaches the daemon), each read's hash and duration written to
/// a file. A process of its own, as a job's are: a thread of this test would share its
/// memory map with the daemons it starts, and a read waiting on the mount then holds up
/// their start.
struct Reader {
    child: std::process::Child,
    out: PathBuf,
    stop: PathBuf,
}

impl Reader {
    fn start(dir: &Path, file: &Path) -> Self {
        let (out, stop) = (dir.join("reads"), dir.join("stop"));
        let script = format!(
            "while [ ! -e '{stop}' ]; do s=$(date +%s%N); h=$(sha256sum < '{file}' 2>&1) || h=\"ERR $h\"; \
             e=$(date +%s%N); echo \"$((e - s)) $h\"; done > '{out}'",
            stop = stop.display(),
            file = file.display(),
            out = out.display()
        );
        let child = std::process::Command::new("bash")
            .args(["-c", &script])
            .spawn()
            .expect("start the reader");
        Self { child, out, stop }
    }

    fn reads(&self) -> u64 {
        std::fs::read_to_string(&self.out).map_or(0, |s| s.lines().count() as u64)
    }

    /// Waits until the reader has read `n` times in all.
    fn wait_for(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.reads() < n {
            assert!(
                Instant::now() < deadline,
                "the reader is stuck at {} reads",
                self.reads()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the reader; what it saw against the file's right hash `want`.
    fn stop(mut self, want: &str) -> Seen {
        std::fs::write(&self.stop, "").expect("stop the reader");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().expect("reader").is_none() {
            assert!(Instant::now() < deadline, "the reader hung");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut seen = Seen::default();
        for line in std::fs::read_to_string(&self.out).expect("reads").lines() {
            let (ns, rest) = line.split_once(' ').unwrap_or((line, ""));
            seen.reads += 1;
            let took = Duration::from_nanos(ns.parse().unwrap_or(0));
            seen.longest = seen.longest.max(took);
            if !rest.starts_with(want) {
                seen.failures.push(rest.to_string());
            }
        }
        seen
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The hex SHA-256 of `data`, as `sha256sum` prints it.
fn sha256(data: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            std::io::Write::write_all(&mut c.stdin.take().expect("stdin"), data)?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The acceptance test: a process reads a file of a mounted job in a loop while its
/// daemon is SIGKILLed and started again on the same state directory. It sees only the
/// right bytes and no error; the new daemon shows the job, and releasing it unmounts it
/// and frees its connection at the keeper.
#[test]
fn a_reader_sees_only_right_bytes_while_the_daemon_is_killed_and_restarted() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(1, |_| KEEP.map(String::from).to_vec());
    let keeper = KeeperGuard::of(&c);
    let (src, files) = layer(&c);
    let id = c.ws.publish(&src);
    push(&c, &id, "301");
    let mp = c.mount_of(0);
    wait_kept(&c, &keeper, "301");
    let deadline = Instant::now() + Duration::from_secs(30);
    while keeper.held() != 1 {
        assert!(
            Instant::now() < deadline,
            "the keeper never held the job's connection"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let reader = Reader::start(c.ws.path(), &mp.join("a.bin"));
    reader.wait_for(20);
    c.kill(0);
    let before = reader.reads();
    c.restart_in_place_with(0, &KEEP);
    reader.wait_for(before + 20);
    // And once more, after another kind of restart: a stop (SIGTERM), as an upgrade or
    // `systemctl restart` does.
    c.stop(0);
    let before = reader.reads();
    c.restart_in_place_with(0, &KEEP);
    reader.wait_for(before + 20);
    let seen = reader.stop(&sha256(&files[0].1));
    eprintln!(
        "{} reads across two restarts, the longest took {:?}",
        seen.reads, seen.longest
    );
    assert!(
        seen.failures.is_empty(),
        "the reader saw {} failures in {} reads: {:?}",
        seen.failures.len(),
        seen.reads,
        &seen.failures[..seen.failures.len().min(5)]
    );
    let log = daemon_log(&c);
    assert!(log.contains("taking up a job"), "{log}");
    let st = c.status(0);
    assert_eq!(st["jobs"][0]["job"], "301", "{st}");
    for (name, data) in &files {
        assert!(
            std::fs::read(mp.join(name)).expect("read") == *data,
            "{name}"
        );
    }
    release(&c, "301");
    assert!(!is_mounted(&mp), "released: unmounted");
    assert_eq!(
        keeper.held(),
        0,
        "released: the keeper dropped its connection"
    );
    let kept = c.nodes[0].dir.join("state/kept/301.job");
    assert!(!kept.exists(), "released: its record is gone");
}

/// A read the daemon has taken and not answered when it is killed completes with the
/// right bytes once the next daemon is up: the kernel resends it, and the new daemon gets
/// the chunk (lost from the node) from the origin store. The daemon killed is one that
/// took the job up itself, on a slow disk (`--fault slow-store`): the chunk it read from
/// the origin is still being written when it dies, the read waiting for it.
#[test]
fn a_read_in_flight_when_the_daemon_is_killed_completes_after_the_restart() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = dir.path().join("origin");
    let args: Vec<String> = [
        "--keep-jobs",
        "--no-passthrough",
        "--recent",
        "0",
        "--origin",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([origin.display().to_string()])
    .collect();
    let mut c = Cluster::start(1, |_| args.clone());
    let keeper = KeeperGuard::of(&c);
    let (src, files) = layer(&c);
    let id = c.ws.publish(&src);
    std::os::unix::fs::symlink(c.ws.store(), &origin).expect("link the origin");
    push(&c, &id, "302");
    let mp = c.mount_of(0);
    wait_kept(&c, &keeper, "302");
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let slow: Vec<&str> = argv
        .iter()
        .copied()
        .chain(["--fault", "slow-store=60s"])
        .collect();
    c.restart_in_place_with(0, &slow);
    // The node loses the layer's chunks.
    let chunks = c.nodes[0].dir.join("state/store/chunks");
    std::fs::remove_dir_all(&chunks).expect("lose the chunks");
    std::fs::create_dir_all(&chunks).expect("mkdir");
    // A process of its own (see [`Reader`]) copies the file out.
    let copy = c.ws.path().join("a.copy");
    let mut cat = std::process::Command::new("cp")
        .arg(mp.join("a.bin"))
        .arg(&copy)
        .spawn()
        .expect("cp");
    // The read reaches the daemon, which finds the chunk gone and reads the origin's copy.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon_log(&c).contains("a stored chunk cannot be read") {
        assert!(
            Instant::now() < deadline,
            "the read never reached the daemon"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        cat.try_wait().expect("cp").is_none(),
        "the read must still wait (on the slow store) when the daemon is killed"
    );
    c.restart_in_place_with(0, &argv);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = cat.try_wait().expect("cp") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the read in flight at the kill never completed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "the read in flight at the kill failed: {}",
        daemon_log(&c)
    );
    let bytes = std::fs::read(&copy).expect("the copy");
    assert!(bytes == files[0].1, "the read in flight got wrong bytes");
    let log = daemon_log(&c);
    assert!(log.contains("from the origin store"), "{log}");
    release(&c, "302");
    assert!(!is_mounted(&mp));
}

/// What cannot be taken up is detached as before, and the log says why: a record whose
/// connection is gone (the keeper died too), a record changed behind the daemon's back,
/// and a job whose index the node refuses now (revoked while the daemon was down). No
/// read of such a mount returns bytes.
#[test]
fn a_job_that_cannot_be_taken_up_is_detached_and_the_log_says_why() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(1, |_| KEEP.map(String::from).to_vec());
    let keeper = KeeperGuard::of(&c);
    let (src, _) = layer(&c);
    let id = c.ws.publish(&src);
    let detached = |c: &mut Cluster, extra: &[&str], why: &str, mp: &Path| {
        c.restart_in_place_with(0, extra);
        let log = daemon_log(c);
        assert!(
            log.contains(why) && log.contains("not taken up"),
            "{why}: {log}"
        );
        assert!(!is_mounted(mp), "{why}: still mounted");
        assert!(std::fs::read(mp.join("a.bin")).is_err(), "{why}: served");
        let st = c.status(0);
        assert_eq!(st["jobs"].as_array().map(Vec::len), Some(0), "{st}");
    };
    // The keeper dies with the daemon.
    push(&c, &id, "303");
    let mp = c.mount_of(0);
    wait_kept(&c, &keeper, "303");
    c.kill(0);
    keeper.kill();
    detached(&mut c, &KEEP, "FUSE connection is gone", &mp);
    // The record is changed.
    push(&c, &id, "304");
    let mp = c.mount_of(0);
    wait_kept(&c, &keeper, "304");
    c.kill(0);
    let record = c.nodes[0].dir.join("state/kept/304.job");
    let mut bytes = std::fs::read(&record).expect("the job's record");
    let at = bytes.len() - 100;
    bytes[at] ^= 0x40;
    std::fs::write(&record, bytes).expect("tamper");
    detached(&mut c, &KEEP, "does not match", &mp);
    assert_eq!(
        keeper.held(),
        0,
        "the keeper dropped the bad record's connection"
    );
    // The index is revoked while the daemon is down.
    push(&c, &id, "305");
    let mp = c.mount_of(0);
    wait_kept(&c, &keeper, "305");
    c.kill(0);
    let revoked = c.ws.path().join("revoked");
    std::fs::write(&revoked, format!("{id}\n")).expect("revoke");
    let revoked = revoked.display().to_string();
    detached(
        &mut c,
        &["--keep-jobs", "--revoked", &revoked],
        "refused now",
        &mp,
    );
}

//! Shared helpers: the teesfs binary, mount guards, tree generation and tree comparison.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the built `teesfs` binary.
pub fn teesfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_teesfs")
}

/// The SPANK plugin, built beside the `teesfs` binary (`cargo build -p teesfs-spank`;
/// scripts/test.sh builds it before the tests).
pub fn spank_plugin() -> std::path::PathBuf {
    let so = std::path::Path::new(teesfs_bin())
        .parent()
        .expect("target dir")
        .join("libteesfs_spank.so");
    assert!(
        so.is_file(),
        "{} is missing: run `cargo build -p teesfs-spank` (scripts/test.sh does)",
        so.display()
    );
    so
}

/// Whether FUSE mounts can be made here; prints why not when they cannot. Under CI
/// (`CI` set) a test that cannot run fails instead: CI runs as root with /dev/fuse.
pub fn can_mount() -> bool {
    let Some(why) = teesfs_node::fs::mount::why_cannot_mount() else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "cannot run under CI: {why}"
    );
    eprintln!("SKIP: {why}");
    false
}

/// A test workspace: a temp dir with a publisher key and a store.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        let ws = Self {
            dir: tempfile::Builder::new()
                .prefix("teesfs-it-")
                .tempdir()
                .expect("tempdir"),
        };
        let out = ws.teesfs(&["keygen", "--out", ws.key().to_str().expect("utf8")]);
        assert!(out.status.success(), "keygen failed: {out:?}");
        ws
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn key(&self) -> PathBuf {
        self.path().join("publisher.key")
    }

    pub fn pubkey(&self) -> PathBuf {
        self.path().join("publisher.pub")
    }

    pub fn store(&self) -> PathBuf {
        self.path().join("store")
    }

    /// The file of signed index `id` (the only signer's).
    pub fn index_file(&self, id: &str) -> PathBuf {
        let dir = self.store().join("indexes");
        std::fs::read_dir(&dir)
            .expect("indexes")
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(id) && n.ends_with(".idx"))
            })
            .unwrap_or_else(|| panic!("no index file for {id} in {}", dir.display()))
    }

    pub fn teesfs(&self, args: &[&str]) -> std::process::Output {
        Command::new(teesfs_bin())
            .args(args)
            .env("TEESFS_CONFIG", self.path().join("config"))
            .output()
            .expect("run teesfs")
    }

    /// Publishes `layer`; returns the index id.
    pub fn publish(&self, layer: &Path) -> String {
        self.publish_with(layer, &[]).0
    }

    /// Publishes `layer` in 1 MiB chunks whatever its size (`--chunk-size auto` would cut a
    /// small layer finer), for tests that place data by chunk; returns the index id.
    pub fn publish_mib_chunks(&self, layer: &Path) -> String {
        self.publish_with(layer, &["--chunk-size", "1MiB"]).0
    }

    /// `teesfs publish SOURCE.. --store --key --quiet EXTRA..` into this workspace's store,
    /// whatever its outcome.
    pub fn publish_output(&self, source: &[&str], extra: &[&str]) -> std::process::Output {
        let (store, key) = (self.store(), self.key());
        let mut args = vec!["publish"];
        args.extend_from_slice(source);
        args.extend([
            "--store",
            store.to_str().expect("utf8"),
            "--key",
            key.to_str().expect("utf8"),
            "--quiet",
        ]);
        args.extend_from_slice(extra);
        self.teesfs(&args)
    }

    /// Publishes `layer` with `extra` arguments; returns the index id and what `publish`
    /// printed.
    pub fn publish_with(&self, layer: &Path, extra: &[&str]) -> (String, String) {
        let out = self.publish_output(&[layer.to_str().expect("utf8")], extra);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "publish failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = stdout
            .lines()
            .find_map(|l| l.strip_prefix("index "))
            .expect("publish prints the index id")
            .trim()
            .to_string();
        (id, stdout)
    }

    /// Mounts an index with `teesfs mount` (extra args appended).
    pub fn mount(&self, id: &str, name: &str, extra: &[&str]) -> MountGuard {
        let mp = self.path().join(name);
        std::fs::create_dir_all(&mp).expect("mountpoint");
        let mut args: Vec<String> = [
            "mount",
            mp.to_str().expect("utf8"),
            "--store",
            self.store().to_str().expect("utf8"),
            "--index",
            id,
            "--trust",
            self.pubkey().to_str().expect("utf8"),
            "--materialize-dir",
            self.path()
                .join(format!("{name}-files"))
                .to_str()
                .expect("utf8"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        MountGuard::spawn(&args, mp)
    }
}

/// A running `teesfs mount`; dropping it unmounts (SIGTERM, then force).
pub struct MountGuard {
    child: Option<Child>,
    pub mountpoint: PathBuf,
    pub banner: String,
}

impl MountGuard {
    fn spawn(args: &[String], mountpoint: PathBuf) -> Self {
        Self::spawn_env(args, mountpoint, &[])
    }

    /// `teesfs mount` with `args` and the environment variables `env` set.
    pub fn spawn_env(args: &[String], mountpoint: PathBuf, env: &[(&str, &Path)]) -> Self {
        let mut child = Command::new(teesfs_bin())
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn teesfs mount");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(l)) = lines.next() {
                let _ = tx.send(l);
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let mut guard = Self {
            child: Some(child),
            mountpoint,
            banner: String::new(),
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.starts_with("mounted") => guard.banner = l,
            other => panic!("teesfs mount did not come up: {other:?}"),
        }
        guard
    }

    /// Sends `sig` and waits for a clean exit; returns whether it exited successfully.
    pub fn stop_with(&mut self, sig: nix::sys::signal::Signal) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `path` is a mountpoint right now.
pub fn is_mounted(path: &Path) -> bool {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(canon.to_str().expect("utf8")))
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_with(nix::sys::signal::Signal::SIGTERM);
        }
        if is_mounted(&self.mountpoint) {
            let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Builds a tree with every entry kind: nested dirs, empty/small/large files, a sparse
/// multi-GiB file, symlinks (relative, absolute, dangling), hard links, odd names and
/// modes, and `n_small` small files.
pub fn make_tree(root: &Path, n_small: usize, sparse_gib: u64) {
    use std::fs;
    fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    fs::create_dir_all(root.join("empty-dir")).expect("mkdir");
    fs::write(root.join("empty"), b"").expect("write");
    fs::write(root.join("a/small.txt"), b"hello teesfs\n").expect("write");
    let big: Vec<u8> = (0..(3u32 << 20) + 12345)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(root.join("a/b/big.bin"), &big).expect("write");
    fs::write(root.join("a/b/big-copy.bin"), &big).expect("write");
    let text = "teesfs compresses text well\n".repeat(100_000);
    fs::write(root.join("a/b/c/text.txt"), text).expect("write");
    // Odd names.
    for name in [
        "with space",
        "new\nline",
        "-leading-dash",
        "ünïcödé-名前",
        "tab\there",
        "'quote\"",
    ] {
        fs::write(root.join(name), name.as_bytes()).expect("write");
    }
    // Symlinks.
    std::os::unix::fs::symlink("a/small.txt", root.join("rel-link")).expect("symlink");
    std::os::unix::fs::symlink("/etc/hostname", root.join("abs-link")).expect("symlink");
    std::os::unix::fs::symlink("does/not/exist", root.join("dangling")).expect("symlink");
    std::os::unix::fs::symlink("b", root.join("a/dir-link")).expect("symlink");
    // Hard links.
    fs::hard_link(root.join("a/b/big.bin"), root.join("hard-big")).expect("link");
    fs::hard_link(root.join("a/small.txt"), root.join("a/b/hard-small")).expect("link");
    // Modes.
    fs::write(root.join("exec.sh"), b"#!/bin/sh\necho hi\n").expect("write");
    fs::set_permissions(root.join("exec.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::write(root.join("setuid"), b"nope").expect("write");
    fs::set_permissions(root.join("setuid"), fs::Permissions::from_mode(0o4711)).expect("chmod");
    fs::write(root.join("private"), b"secret").expect("write");
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o600)).expect("chmod");
    nix::unistd::chown(
        &root.join("private"),
        Some(nix::unistd::Uid::from_raw(1234)),
        Some(nix::unistd::Gid::from_raw(5678)),
    )
    .ok();
    // Sparse multi-GiB file with data in the middle and at the end.
    if sparse_gib > 0 {
        let f = fs::File::create(root.join("sparse.img")).expect("create");
        let len = sparse_gib << 30;
        f.set_len(len).expect("set_len");
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"middle of nowhere", (len / 2) + 7)
            .expect("write");
        f.write_all_at(b"the end", len - 7).expect("write");
    }
    // Many small files.
    for i in 0..n_small {
        let dir = root.join(format!("many/d{:03}", i % 100));
        if i < 100 {
            fs::create_dir_all(&dir).expect("mkdir");
        }
        fs::write(
            dir.join(format!("f{i:05}")),
            format!("file {i}\n").repeat(i % 7),
        )
        .expect("write");
    }
}

/// `diff -r` plus a metadata walk comparing mode, size, mtime, owner, symlink target and
/// link count of every entry.
pub fn assert_same_tree(src: &Path, mnt: &Path) {
    let out = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(src)
        .arg(mnt)
        .output()
        .expect("run diff");
    assert!(
        out.status.success(),
        "diff -r found differences:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut count = 0usize;
    for item in walkdir::WalkDir::new(src).sort_by_file_name() {
        let item = item.expect("walk");
        let rel = item.path().strip_prefix(src).expect("prefix");
        let other = mnt.join(rel);
        let a = std::fs::symlink_metadata(item.path()).expect("stat src");
        let b = std::fs::symlink_metadata(&other)
            .unwrap_or_else(|e| panic!("stat {}: {e}", other.display()));
        let what = rel.display();
        assert_eq!(a.mode(), b.mode(), "mode of {what}");
        assert_eq!(a.uid(), b.uid(), "uid of {what}");
        assert_eq!(a.gid(), b.gid(), "gid of {what}");
        assert_eq!(a.mtime(), b.mtime(), "mtime of {what}");
        assert_eq!(a.mtime_nsec(), b.mtime_nsec(), "mtime_nsec of {what}");
        if !a.is_dir() {
            assert_eq!(a.size(), b.size(), "size of {what}");
        }
        if !a.is_dir() || a.nlink() > 1 {
            assert_eq!(a.nlink(), b.nlink(), "nlink of {what}");
        }
        if a.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(item.path()).expect("readlink"),
                std::fs::read_link(&other).expect("readlink"),
                "symlink target of {what}"
            );
        }
        if a.nlink() > 1 && !a.is_dir() {
            // Hard links keep sharing one inode inside the mount.
            assert!(b.ino() > 0);
        }
        count += 1;
    }
    assert!(count > 0, "compared nothing");
}

/// `len` bytes that neither compress nor repeat (xorshift), different per `seed`.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Fails the test instead of hanging it on `fut`.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

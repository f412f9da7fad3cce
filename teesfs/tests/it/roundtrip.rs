//! Publish, mount, compare: a generated tree with every entry kind and a real tree.

use std::path::Path;

use crate::util::{Workspace, assert_same_tree, can_mount, is_mounted, make_tree};

fn roundtrip(src: &Path, extra: &[&str]) {
    let ws = Workspace::new();
    let id = ws.publish(src);
    let guard = ws.mount(&id, "mnt", extra);
    assert_same_tree(src, &guard.mountpoint);
    let mp = guard.mountpoint.clone();
    drop(guard);
    assert!(!is_mounted(&mp), "mount left behind");
}

#[test]
fn generated_tree_round_trips_through_the_daemon_path() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 10_000, 5);
    roundtrip(&src, &["--passthrough", "never"]);
}

#[test]
fn generated_tree_round_trips_with_passthrough() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 200, 1);
    let ws = Workspace::new();
    let id = ws.publish(&src);
    let guard = ws.mount(&id, "mnt", &["--passthrough-min", "1KiB"]);
    assert!(guard.banner.contains("passthrough on"), "{}", guard.banner);
    assert_same_tree(&src, &guard.mountpoint);
    // Passthrough files were materialised from verified chunks, in the mount's own
    // private directory, which goes with the mount.
    let dirs: Vec<_> = std::fs::read_dir(ws.path().join("mnt-files"))
        .expect("materialise dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "one private directory per mount: {dirs:?}");
    let files = std::fs::read_dir(&dirs[0]).expect("copies").count();
    assert!(files >= 2, "expected materialised files, found {files}");
    drop(guard);
    assert!(
        !dirs[0].exists(),
        "the mount's copies go with it: {:?}",
        std::fs::read_dir(&dirs[0]).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
}

#[test]
fn a_real_tree_round_trips() {
    if !can_mount() {
        return;
    }
    let debian = Path::new("/usr/lib/python3.11");
    let src = if debian.is_dir() {
        debian.to_path_buf()
    } else {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
            ])
            .output()
            .expect("python3");
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    roundtrip(&src, &[]);
}

#[test]
fn sigint_and_sigterm_unmount_cleanly() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 10, 0);
    let ws = Workspace::new();
    let id = ws.publish(&src);
    for (name, sig) in [
        ("a", nix::sys::signal::Signal::SIGINT),
        ("b", nix::sys::signal::Signal::SIGTERM),
    ] {
        let mut guard = ws.mount(&id, name, &[]);
        assert!(is_mounted(&guard.mountpoint));
        assert!(guard.stop_with(sig), "teesfs mount exits 0 on {sig}");
        assert!(!is_mounted(&guard.mountpoint), "still mounted after {sig}");
    }
}

#[test]
fn mounted_layer_is_read_only_and_nosuid() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 0, 0);
    let ws = Workspace::new();
    let id = ws.publish(&src);
    let guard = ws.mount(&id, "mnt", &[]);
    let err = std::fs::write(guard.mountpoint.join("new"), b"x").expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let err = std::fs::OpenOptions::new()
        .write(true)
        .open(guard.mountpoint.join("a/small.txt"))
        .expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let opts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = opts
        .lines()
        .find(|l| l.contains(guard.mountpoint.to_str().expect("utf8")))
        .expect("mounted");
    for flag in ["ro", "nosuid", "nodev"] {
        assert!(
            line.split(' ')
                .nth(5)
                .expect("options")
                .split(',')
                .any(|o| o == flag),
            "{flag} missing: {line}"
        );
    }
}

/// `teesfs mount` refuses a place that cannot take the layer and says what to do: a regular
/// file, a live mount, and the dead mount a killed `teesfs mount` leaves (`umount -l`, not
/// `modprobe fuse`), also when the kernel still caches its root.
#[test]
fn mount_refuses_a_file_a_live_mount_and_a_dead_one_saying_what_to_do() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(&layer).expect("layer");
    std::fs::write(layer.join("f"), b"x").expect("file");
    let id = ws.publish(&layer);
    let (store, key) = (ws.store(), ws.pubkey());
    let try_mount = |mp: &Path| {
        let out = ws.teesfs(&[
            "mount",
            mp.to_str().expect("utf8"),
            "--store",
            store.to_str().expect("utf8"),
            "--index",
            &id,
            "--trust",
            key.to_str().expect("utf8"),
        ]);
        assert!(!out.status.success(), "mounted over {}", mp.display());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let file = ws.path().join("a-file");
    std::fs::write(&file, b"").expect("file");
    assert!(try_mount(&file).contains("is not a directory"));

    let mut live = ws.mount(&id, "live", &[]);
    let err = try_mount(&live.mountpoint);
    assert!(err.contains("already has a mount"), "{err}");

    live.stop_with(nix::sys::signal::Signal::SIGKILL);
    assert!(
        is_mounted(&live.mountpoint),
        "a killed mount leaves its mount"
    );
    let err = try_mount(&live.mountpoint);
    assert!(err.contains("umount -l"), "{err}");
    assert!(!err.contains("modprobe"), "{err}");
    // The guard detaches the dead mount.
}

/// Issue 29: a sparse file in a mount reported its full size as blocks in use (`du` said
/// 64 MiB for a file holding 1 MiB). Its blocks are its data; a dense file's are its size.
#[test]
fn a_sparse_file_in_a_mount_reports_only_its_data_as_blocks() {
    use std::os::unix::fs::MetadataExt;
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    let sparse = std::fs::File::create(src.join("sparse.img")).expect("create");
    std::os::unix::fs::FileExt::write_all_at(&sparse, &data, 0).expect("write");
    sparse.set_len(64 << 20).expect("extend with a hole");
    drop(sparse);
    std::fs::write(src.join("dense.bin"), &data).expect("write");
    let ws = Workspace::new();
    let id = ws.publish_mib_chunks(&src);
    let guard = ws.mount(&id, "mnt", &[]);
    let md = std::fs::metadata(guard.mountpoint.join("sparse.img")).expect("stat");
    assert_eq!(md.len(), 64 << 20);
    assert_eq!(md.blocks() * 512, 1 << 20, "blocks of the sparse file");
    let md = std::fs::metadata(guard.mountpoint.join("dense.bin")).expect("stat");
    assert_eq!(md.blocks() * 512, 1 << 20, "blocks of the dense file");
}

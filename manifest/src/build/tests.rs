//! The builder's tests: chunk sizing, files changed while read, symlinked roots, and
//! extended attributes refused or kept.

use super::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A sink that keeps chunks in memory.
#[derive(Default)]
struct Mem(Mutex<HashMap<ChunkId, Vec<u8>>>);

impl ChunkSink for Mem {
    fn stored_form(&self, id: &ChunkId, _plain_len: u32) -> Option<StoredForm> {
        let m = self.0.lock().expect("lock");
        m.get(id).map(|b| StoredForm::of(b))
    }
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.0.lock().expect("lock").insert(*id, stored.to_vec());
        Ok(())
    }
}

/// Appends to `file` the first time any content is read: a file written in place while
/// it is being published.
struct WriteOnce {
    file: PathBuf,
    done: AtomicBool,
}

impl BuildProgress for WriteOnce {
    fn advance(&self, _bytes: u64) {
        if !self.done.swap(true, Ordering::SeqCst) {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.file)
                .expect("open");
            f.write_all(&[1u8; 4096]).expect("append");
        }
    }
}

fn opts() -> BuildOptions {
    BuildOptions {
        chunk_size: 64 << 10,
        ..BuildOptions::default()
    }
}

fn noise(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| blake3::hash(&i.to_le_bytes()).as_bytes()[0])
        .collect()
}

#[test]
fn the_adaptive_chunk_size_cuts_a_layer_into_64_chunks_within_256_kib_and_the_maximum() {
    const MIB: u64 = 1 << 20;
    let max = 1 << 20;
    for (layer, want) in [
        (0, 256 << 10),
        (3 * MIB, 256 << 10),
        (16 * MIB, 256 << 10),
        (32 * MIB, 512 << 10),
        (63 * MIB, 512 << 10),
        (64 * MIB, 1 << 20),
        (5 << 30, 1 << 20),
    ] {
        assert_eq!(chunk_size_for(layer, max), want, "layer of {layer} bytes");
    }
    // A maximum below the floor is the chunk size; a larger one is reached.
    assert_eq!(chunk_size_for(64 * MIB, 64 << 10), 64 << 10);
    assert_eq!(chunk_size_for(1 << 32, 64 << 20), 64 << 20);
    for layer in [1, 1000, 17 * MIB + 3, 1 << 40] {
        let cs = chunk_size_for(layer, 4 << 20);
        assert!(cs.is_power_of_two() && (MIN_ADAPTIVE_CHUNK..=4 << 20).contains(&cs));
    }
}

/// With `adaptive_chunks` the walk's total picks the chunk size, every file is cut by
/// it, and the index says so (readers find chunks by it).
#[test]
fn an_adaptive_build_cuts_every_file_by_the_size_the_layer_chose() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::write(t.path().join("a.bin"), noise(3 << 20)).expect("write");
    std::fs::write(t.path().join("b.bin"), noise(700_000)).expect("write");
    std::fs::write(t.path().join("small"), b"inline").expect("write");
    let adaptive = BuildOptions {
        chunk_size: 1 << 20,
        adaptive_chunks: true,
        ..BuildOptions::default()
    };
    let (index, report) = build(t.path(), &adaptive, &Mem::default(), &NoProgress).expect("build");
    assert_eq!(index.chunk_size, MIN_ADAPTIVE_CHUNK);
    // 12 chunks of a.bin, 3 of b.bin (700,000 bytes: 2 x 256 KiB and the rest).
    assert_eq!(report.chunk_refs, 12 + 3);
    assert!(
        index
            .chunks
            .iter()
            .all(|c| c.plain_len <= MIN_ADAPTIVE_CHUNK)
    );
    let fixed = BuildOptions {
        chunk_size: 1 << 20,
        ..BuildOptions::default()
    };
    let (index, report) = build(t.path(), &fixed, &Mem::default(), &NoProgress).expect("build");
    assert_eq!(index.chunk_size, 1 << 20);
    assert_eq!(report.chunk_refs, 3 + 1);
}

#[test]
fn a_file_changed_while_it_is_read_is_an_error_naming_it() {
    let t = tempfile::tempdir().expect("tempdir");
    let file = t.path().join("busy.bin");
    std::fs::write(&file, noise(300_000)).expect("write");
    let progress = WriteOnce {
        file: file.clone(),
        done: AtomicBool::new(false),
    };
    match build(t.path(), &opts(), &Mem::default(), &progress) {
        Err(Error::FileChanged { path }) => assert_eq!(path, file),
        other => panic!("a torn read was not noticed: {other:?}"),
    }
    // Unchanged since, it builds.
    build(t.path(), &opts(), &Mem::default(), &NoProgress).expect("build");
}

#[test]
fn a_file_deleted_while_the_layer_is_read_is_a_change_not_an_io_error() {
    let t = tempfile::tempdir().expect("tempdir");
    let file = t.path().join("gone.bin");
    std::fs::write(&file, noise(100_000)).expect("write");
    struct Remove(PathBuf);
    impl BuildProgress for Remove {
        fn total(&self, _bytes: u64) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    match build(t.path(), &opts(), &Mem::default(), &Remove(file.clone())) {
        Err(Error::FileChanged { path }) => assert_eq!(path, file),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_layer_path_that_is_a_symlink_to_a_directory_builds_the_directory() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("layer");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/f.txt"), b"hello").expect("write");
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink");
    let (via_link, _) = build(&link, &opts(), &Mem::default(), &NoProgress).expect("build");
    let (direct, _) = build(&dir, &opts(), &Mem::default(), &NoProgress).expect("build");
    assert!(matches!(via_link.entries[0].kind, EntryKind::Dir));
    assert_eq!(via_link.entries.len(), 3, "root, sub, sub/f.txt");
    assert_eq!(via_link, direct);
}

/// Sets an attribute, or says why this file system or user cannot (CI runs as root on
/// a file system with ACLs and capabilities; elsewhere the test skips).
fn try_set(path: &Path, name: &str, value: &[u8]) -> bool {
    match xattr::set(path, name, value) {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot set {name} under CI: {e}"
            );
            eprintln!("SKIP: cannot set {name} here: {e}");
            false
        }
    }
}

fn refused_attribute(root: &Path) -> (PathBuf, String) {
    match build(root, &opts(), &Mem::default(), &NoProgress) {
        Err(Error::Xattr { path, name }) => (path, name),
        other => panic!("an attribute the index cannot keep was dropped: {other:?}"),
    }
}

/// An ACL that denied someone was dropped silently: the published file was open to
/// them through its group bits.
#[test]
fn a_file_with_an_acl_is_refused_naming_the_file_and_the_acl() {
    let t = tempfile::tempdir().expect("tempdir");
    let f = t.path().join("private.txt");
    std::fs::write(&f, b"secret").expect("write");
    // user::rw- user:nobody:--- group::r-- mask::r-- other::---
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 0, 65534),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    if !try_set(&f, "system.posix_acl_access", &acl) {
        return;
    }
    let (path, name) = refused_attribute(t.path());
    assert_eq!((path, name.as_str()), (f, "system.posix_acl_access"));
    let o = BuildOptions {
        ignore_xattrs: true,
        ..opts()
    };
    build(t.path(), &o, &Mem::default(), &NoProgress).expect("dropped when asked");
}

#[test]
fn a_file_capability_is_refused_naming_the_file() {
    let t = tempfile::tempdir().expect("tempdir");
    let f = t.path().join("ping");
    std::fs::write(&f, b"#!/bin/sh\n").expect("write");
    // vfs_cap_data revision 2, effective, permitted = CAP_NET_RAW.
    let mut cap = (0x0200_0000u32 | 1).to_le_bytes().to_vec();
    for word in [1u32 << 13, 0, 0, 0] {
        cap.extend(word.to_le_bytes());
    }
    if !try_set(&f, "security.capability", &cap) {
        return;
    }
    let (path, name) = refused_attribute(t.path());
    assert_eq!((path, name.as_str()), (f, "security.capability"));
}

#[test]
fn overlay_marks_are_not_refused() {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("opaque");
    std::fs::create_dir(&d).expect("mkdir");
    if !try_set(&d, "user.overlay.opaque", b"y") {
        return;
    }
    let (index, report) = build(t.path(), &opts(), &Mem::default(), &NoProgress).expect("build");
    assert_eq!(report.opaque_dirs, 1);
    assert!(index.entries[1].flags.opaque());
}

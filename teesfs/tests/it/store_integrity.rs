//! Issue 13, items 3, 4 and 8: the login node's store and publishing trust content, not
//! names: damaged or planted chunks are replaced, an index is kept per signer, a file
//! written during a publish is never signed half old, and odd layers publish or are
//! refused clearly. The real `teesfs` binary against real directories.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::util::{Workspace, noise};

fn chunk_files(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(store.join("chunks"))
        .expect("chunks")
        .flatten()
    {
        for f in std::fs::read_dir(shard.path()).expect("shard").flatten() {
            out.push(f.path());
        }
    }
    out.sort();
    out
}

fn verify(ws: &Workspace, id: &str, trust: &Path) -> Output {
    ws.teesfs(&[
        "verify",
        "--store",
        ws.store().to_str().expect("utf8"),
        "--index",
        id,
        "--trust",
        trust.to_str().expect("utf8"),
        "--quiet",
    ])
}

fn publish_out(ws: &Workspace, layer: &Path, key: &Path, extra: &[&str]) -> Output {
    let store = ws.store();
    let mut args = vec![
        "publish",
        layer.to_str().expect("utf8"),
        "--store",
        store.to_str().expect("utf8"),
        "--key",
        key.to_str().expect("utf8"),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    ws.teesfs(&args)
}

fn layer_with(ws: &Workspace, files: &[(&str, Vec<u8>)]) -> PathBuf {
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(&layer).expect("mkdir");
    for (name, data) in files {
        std::fs::write(layer.join(name), data).expect("write");
    }
    layer
}

/// A 0-byte or truncated chunk in the store made publish sign an index no node could
/// open, exit 0, and never repair it. Publishing again now replaces the bad objects, and
/// the index verifies.
#[test]
fn publish_replaces_truncated_and_empty_chunks_in_the_store() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("a.bin", noise(3 << 20, 5))]);
    let id = ws.publish_mib_chunks(&layer);
    let chunks = chunk_files(&ws.store());
    assert_eq!(chunks.len(), 3);
    std::fs::write(&chunks[0], b"").expect("empty it");
    let full = std::fs::read(&chunks[1]).expect("read");
    std::fs::write(&chunks[1], &full[..full.len() / 2]).expect("truncate it");
    assert!(!verify(&ws, &id, &ws.pubkey()).status.success());
    let again = ws.publish_mib_chunks(&layer);
    assert_eq!(again, id, "same layer, same index");
    let out = verify(&ws, &id, &ws.pubkey());
    assert!(
        out.status.success(),
        "the republish repaired the store: {out:?}"
    );
}

/// Anyone who can write the shared store could plant a chunk under a predictable id; a
/// publish of a layer holding that content must not adopt the planted bytes.
#[test]
fn a_planted_chunk_is_replaced_not_adopted_by_publish() {
    let ws = Workspace::new();
    let data = noise(1 << 20, 9);
    let id = manifest::ChunkId::of(&data);
    let hex = id.to_hex();
    let planted = ws.store().join("chunks").join(&hex[..2]).join(&hex);
    std::fs::create_dir_all(planted.parent().expect("parent")).expect("mkdir");
    // Valid zstd of other bytes: decodes, but not to this id.
    let lie = manifest::encode_chunk(&noise(1 << 20, 10), 1);
    std::fs::write(&planted, &lie).expect("plant");
    let layer = layer_with(&ws, &[("x.bin", data)]);
    let index = ws.publish_mib_chunks(&layer);
    let out = verify(&ws, &index, &ws.pubkey());
    assert!(out.status.success(), "the index verifies: {out:?}");
    assert_ne!(std::fs::read(&planted).expect("chunk"), lie);
}

/// The same layer published with a second key kept the first key's index, so nodes
/// trusting only the second key refused it. An index id names content and signer now: the
/// second publish prints its own id, and that id means the second key's envelope to every
/// command that resolves it, whatever else the resolver trusts.
#[test]
fn same_layer_with_a_second_key_is_trusted_by_its_nodes() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("f.bin", noise(100_000, 1))]);
    let first = ws.publish(&layer);
    let key2 = ws.path().join("second.key");
    let out = ws.teesfs(&["keygen", "--out", key2.to_str().expect("utf8")]);
    assert!(out.status.success(), "{out:?}");
    let pub2 = ws.path().join("second.pub");
    let out = publish_out(&ws, &layer, &key2, &[]);
    assert!(out.status.success(), "{out:?}");
    let second = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("index ").map(|s| s.trim().to_string()))
        .expect("index line");
    assert_ne!(first, second, "one index per signer");
    let out = verify(&ws, &second[..12], &pub2);
    assert!(
        out.status.success(),
        "nodes trusting only the second key: {out:?}"
    );
    let out = verify(&ws, &first[..12], &ws.pubkey());
    assert!(
        out.status.success(),
        "nodes trusting only the first key: {out:?}"
    );
    let out = verify(&ws, &first[..12], &pub2);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("not among the trusted"),
        "the first key's envelope is not passed off to the second key's nodes: {out:?}"
    );
    // Republishing with the first key does not displace the second key's index.
    assert_eq!(ws.publish(&layer), first);
    assert!(verify(&ws, &second, &pub2).status.success());
}

/// A file overwritten in place while it was published went out half old, half new with
/// exit 0. A file that keeps changing now fails the publish, naming it.
#[test]
fn a_file_written_during_publish_fails_it_naming_the_file() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("busy.bin", noise(64 << 20, 2))]);
    let busy = layer.join("busy.bin");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let busy = busy.clone();
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&busy)
                .expect("open");
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all_at(&[i as u8; 4096], (i * 7919 * 4096) % (60 << 20))
                    .expect("write");
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let out = publish_out(&ws, &layer, &ws.key(), &[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(!out.status.success(), "a torn publish exited 0: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("busy.bin") && err.contains("changing"),
        "the error names the file: {err}"
    );
    assert!(
        std::fs::read_dir(ws.store().join("indexes"))
            .expect("indexes")
            .next()
            .is_none(),
        "no index was signed"
    );
}

/// A layer path that is a symlink to a directory panicked (index out of bounds).
#[test]
fn a_layer_given_as_a_symlink_to_a_directory_publishes_its_target() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("f.txt", b"hello".to_vec())]);
    let link = ws.path().join("link");
    std::os::unix::fs::symlink(&layer, &link).expect("symlink");
    let a = ws.publish(&link);
    let b = ws.publish(&layer);
    assert_eq!(a, b, "the link publishes what it points at");
}

/// ACLs and extended attributes were dropped silently, widening access where an ACL
/// denied someone. They are refused now, naming the file and attribute, unless the
/// publisher says to drop them.
#[test]
fn a_file_with_an_extended_attribute_is_refused_unless_dropped_explicitly() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("secret.txt", b"not for everyone".to_vec())]);
    let f = layer.join("secret.txt");
    if let Err(e) = xattr::set(&f, "user.teesfs-test", b"1") {
        // tmpfs without user xattrs; CI's /tmp supports them.
        assert!(std::env::var_os("CI").is_none(), "cannot set an xattr: {e}");
        eprintln!("SKIP: no user xattrs here: {e}");
        return;
    }
    let out = publish_out(&ws, &layer, &ws.key(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("secret.txt")
            && err.contains("user.teesfs-test")
            && err.contains("--ignore-xattrs"),
        "{err}"
    );
    let out = publish_out(&ws, &layer, &ws.key(), &["--ignore-xattrs"]);
    assert!(out.status.success(), "{out:?}");
}

/// A chunk symlinked to /dev/zero drove `verify` to 2 GB; a FIFO hung it for ever.
#[test]
fn a_chunk_that_is_a_symlink_or_a_fifo_fails_verify_at_once() {
    let ws = Workspace::new();
    let layer = layer_with(&ws, &[("a.bin", noise(2 << 20, 4))]);
    let id = ws.publish(&layer);
    let chunks = chunk_files(&ws.store());
    std::fs::remove_file(&chunks[0]).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", &chunks[0]).expect("symlink");
    std::fs::remove_file(&chunks[1]).expect("rm");
    nix::unistd::mkfifo(&chunks[1], nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(crate::util::teesfs_bin())
        .args(["verify", "--quiet", "--store"])
        .arg(ws.store())
        .args(["--index", &id, "--trust"])
        .arg(ws.pubkey())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("verify");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("verify hung on a FIFO chunk");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let out = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("symlink") && text.contains("FIFO"), "{text}");
}

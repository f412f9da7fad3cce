//! Corrupt chunks give EIO (never wrong bytes); tampered or untrusted indexes are refused.

use std::os::unix::fs::FileExt;
use std::path::Path;

use manifest::{EntryKind, FileData, Limits, PublicKey, SecretKey, SignedIndex};
use seeder::DirStore;

use crate::util::{Workspace, can_mount, make_tree};

fn open_index(ws: &Workspace, id: &str) -> manifest::Index {
    let store = DirStore::open(&ws.store()).expect("store");
    let id = store.resolve_index(id).expect("id");
    let key = PublicKey::from_file_text(&std::fs::read_to_string(ws.pubkey()).expect("pub"))
        .expect("key");
    SignedIndex::open(
        store.get_index(&id).expect("index"),
        Some(id),
        &[key],
        &Limits::default(),
    )
    .expect("valid")
    .1
}

fn flip_chunk_of(ws: &Workspace, id: &str, name: &[u8], slot: usize) {
    let index = open_index(ws, id);
    let entry = index
        .entries
        .iter()
        .find(|e| &e.name[..] == name)
        .expect("entry");
    let EntryKind::File {
        data: FileData::Chunks(slots),
        ..
    } = &entry.kind
    else {
        panic!("chunked file");
    };
    let chunk = index.chunks[slots[slot].chunk_index().expect("data")].id;
    let store = DirStore::open(&ws.store()).expect("store");
    let path = store.chunk_path(&chunk);
    let mut bytes = std::fs::read(&path).expect("chunk");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&path, bytes).expect("rewrite chunk");
}

fn check_corrupt_region(extra: &[&str]) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 0, 0);
    let ws = Workspace::new();
    let id = ws.publish_mib_chunks(&src);
    flip_chunk_of(&ws, &id, b"big.bin", 1);

    let out = ws.teesfs(&[
        "verify",
        "--store",
        ws.store().to_str().expect("utf8"),
        "--trust",
        ws.pubkey().to_str().expect("utf8"),
        "-q",
    ]);
    assert!(!out.status.success(), "verify must fail on a corrupt chunk");
    assert!(String::from_utf8_lossy(&out.stdout).contains("corrupt"));

    let guard = ws.mount(&id, "mnt", extra);
    let want = std::fs::read(src.join("a/b/big.bin")).expect("source");
    let f = std::fs::File::open(guard.mountpoint.join("a/b/big.bin")).expect("open");
    let mib = 1usize << 20;
    let mut buf = vec![0u8; 4096];
    // The corrupt chunk: EIO, at its start, middle and end.
    for off in [mib, mib + mib / 2, 2 * mib - 4096] {
        let err = f
            .read_exact_at(&mut buf, off as u64)
            .expect_err("corrupt region");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "offset {off}");
    }
    // Everything else reads correctly.
    for off in [0, mib - 4096, 2 * mib, 3 * mib] {
        let n = f.read_at(&mut buf, off as u64).expect("good region");
        assert!(n > 0);
        assert_eq!(&buf[..n], &want[off..off + n], "offset {off}");
    }
    // Other files are unaffected.
    assert_eq!(
        std::fs::read(guard.mountpoint.join("a/small.txt")).expect("read"),
        b"hello teesfs\n"
    );
}

#[test]
fn flipped_byte_gives_eio_there_and_correct_data_elsewhere() {
    if !can_mount() {
        return;
    }
    check_corrupt_region(&["--passthrough", "never"]);
}

#[test]
fn flipped_byte_is_caught_before_passthrough_materialises_the_file() {
    if !can_mount() {
        return;
    }
    check_corrupt_region(&["--passthrough-min", "1KiB"]);
}

fn mount_error(ws: &Workspace, id: &str, trust: &Path) -> String {
    let mp = ws.path().join("refused");
    std::fs::create_dir_all(&mp).expect("mkdir");
    let out = ws.teesfs(&[
        "mount",
        mp.to_str().expect("utf8"),
        "--store",
        ws.store().to_str().expect("utf8"),
        "--index",
        id,
        "--trust",
        trust.to_str().expect("utf8"),
    ]);
    assert!(!out.status.success(), "mount must be refused");
    assert!(!crate::util::is_mounted(&mp));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tampered_index_and_wrong_key_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("layer");
    make_tree(&src, 0, 0);
    let ws = Workspace::new();
    let id = ws.publish_mib_chunks(&src);

    let other = ws.path().join("other.key");
    assert!(
        ws.teesfs(&["keygen", "--out", other.to_str().expect("utf8")])
            .status
            .success()
    );
    let err = mount_error(&ws, &id, &ws.path().join("other.pub"));
    assert!(err.contains("not among the trusted keys"), "{err}");

    let path = ws.index_file(&id);
    let mut bytes = std::fs::read(&path).expect("index");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&path, bytes).expect("write");
    let err = mount_error(&ws, &id, &ws.pubkey());
    assert!(err.contains("id mismatch"), "{err}");
}

#[test]
fn crafted_index_with_bad_names_is_refused() {
    let ws = Workspace::new();
    let key =
        SecretKey::from_file_text(&std::fs::read_to_string(ws.key()).expect("key")).expect("key");
    let store = DirStore::create(&ws.store()).expect("store");
    for bad in [&b"a/b"[..], b"..", b".", b"", b"nul\0"] {
        let mut index = manifest::Index {
            chunk_size: 1 << 20,
            chunks: vec![],
            entries: vec![manifest::Entry {
                parent: manifest::EntryIdx(0),
                name: Box::default(),
                meta: manifest::Meta::default(),
                flags: manifest::EntryFlags::default(),
                kind: EntryKind::Dir,
            }],
            urgent: vec![],
            image: None,
        };
        let mut e = index.entries[0].clone();
        e.name = bad.into();
        index.entries.push(e);
        let signed = SignedIndex::sign(&index, &key, 3);
        let id = store.put_index(&signed).expect("store index").to_hex();
        let err = mount_error(&ws, &id, &ws.pubkey());
        assert!(err.contains("invalid name"), "{bad:?}: {err}");
    }
}

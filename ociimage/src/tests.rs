//! Layer reading against hand-made tar streams: whiteouts, opaque directories and hard
//! links applied; hostile entries refused by name with nothing written outside.

use std::io::Write;
use std::path::Path;

use crate::{Error, ReadLimits, apply_layer_for_fuzzing, layer, tree};

/// A tar entry: path bytes written raw into the header (so `..` and `/` get through).
enum E<'a> {
    File(&'a [u8], &'a [u8]),
    Dir(&'a [u8]),
    Symlink(&'a [u8], &'a [u8]),
    Hardlink(&'a [u8], &'a [u8]),
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (path, kind, data, link): (&[u8], _, &[u8], Option<&[u8]>) = match *e {
            E::File(p, d) => (p, tar::EntryType::Regular, d, None),
            E::Dir(p) => (p, tar::EntryType::Directory, b"", None),
            E::Symlink(p, t) => (p, tar::EntryType::Symlink, b"", Some(t)),
            E::Hardlink(p, t) => (p, tar::EntryType::Link, b"", Some(t)),
        };
        let gnu = h.as_gnu_mut().expect("gnu header");
        gnu.name[..path.len()].copy_from_slice(path);
        if let Some(t) = link {
            gnu.linkname[..t.len()].copy_from_slice(t);
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner().expect("tar")
}

fn small() -> ReadLimits {
    ReadLimits {
        max_entries: 1000,
        max_file_size: 1 << 30,
        max_total_bytes: 1 << 30,
        max_ratio: 100,
        ratio_floor: 1 << 20,
    }
}

/// Applies `layers` in turn to a staging dir under `dir`.
fn apply_all(dir: &Path, layers: &[Vec<u8>]) -> Result<tree::Tree, Error> {
    let staging = dir.join("staging");
    std::fs::create_dir_all(&staging).expect("mkdir");
    let mut t = tree::Tree::new(&staging)?;
    let mut totals = layer::Totals::default();
    let mode = layer::LayerMode { whiteouts: true };
    for (i, l) in layers.iter().enumerate() {
        let name = format!("layer{i}");
        layer::apply(&mut t, Box::new(&l[..]), &name, mode, small(), &mut totals)?;
    }
    Ok(t)
}

#[test]
fn whiteouts_opaque_dirs_and_hard_links_are_applied() {
    let tmp = tempfile::tempdir().expect("tmp");
    let lower = tar_of(&[
        E::Dir(b"./"),
        E::File(b"./gone", b"g"),
        E::File(b"keep", b"k"),
        E::Dir(b"opq/"),
        E::File(b"opq/old", b"o"),
        E::Dir(b"opq/sub"),
        E::File(b"opq/sub/deep", b"d"),
        E::File(b"a/b/implicit", b"i"),
        E::Hardlink(b"keep2", b"keep"),
    ]);
    let upper = tar_of(&[
        E::File(b".wh.gone", b""),
        E::File(b"opq/new", b"n"),
        E::File(b"opq/.wh..wh..opq", b""),
        E::File(b"a/.wh.b", b""),
    ]);
    let t = apply_all(tmp.path(), &[lower, upper]).expect("applied");
    let s = tmp.path().join("staging");
    assert!(!s.join("gone").exists());
    assert!(!s.join("opq/old").exists() && !s.join("opq/sub").exists());
    assert_eq!(std::fs::read(s.join("opq/new")).expect("new"), b"n");
    assert!(!s.join("a/b").exists() && s.join("a").is_dir());
    use std::os::unix::fs::MetadataExt;
    let (k1, k2) = (s.join("keep"), s.join("keep2"));
    let ino = |p: &Path| std::fs::metadata(p).expect("stat").ino();
    assert_eq!(ino(&k1), ino(&k2), "hard link kept as one inode");
    let keys: Vec<String> = t
        .meta
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(keys, ["", "a", "keep", "keep2", "opq", "opq/new"]);
}

/// A canary directory beside the staging dir: after each hostile layer it must be empty.
fn refused(entries: &[E<'_>], named: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let canary = tmp.path().join("canary");
    std::fs::create_dir(&canary).expect("canary");
    let layer = tar_of(entries);
    let err = match apply_all(tmp.path(), &[layer]) {
        Ok(_) => panic!("a hostile layer was applied ({named})"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(msg.contains(named), "the error names {named:?}: {msg}");
    assert_eq!(std::fs::read_dir(&canary).expect("ls").count(), 0, "{msg}");
    let mut top: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    top.sort();
    assert_eq!(top, ["canary", "staging"], "{msg}");
}

#[test]
fn hostile_entries_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let canary = tmp.path().join("canary");
    let abs = canary.to_str().expect("utf8").as_bytes().to_vec();
    refused(&[E::File(b"../canary/evil", b"x")], "../canary/evil");
    refused(
        &[E::File(b"a/../../canary/evil", b"x")],
        "a/../../canary/evil",
    );
    refused(
        &[E::File(&[b"/".as_slice(), &abs, b"/evil"].concat(), b"x")],
        "/evil",
    );
    refused(
        &[E::Symlink(b"x", &abs), E::File(b"x/evil", b"x")],
        "x/evil",
    );
    refused(&[E::Symlink(b"x", b"../canary"), E::Dir(b"x/d")], "x/d");
    refused(
        &[E::Symlink(b"x", b"/tmp"), E::Hardlink(b"x/h", b"etc")],
        "x/h",
    );
    refused(&[E::Hardlink(b"h", b"/etc/passwd")], "h");
    refused(&[E::Hardlink(b"h", b"../canary/f")], "h");
    refused(&[E::Hardlink(b"h", b"missing")], "h");
    refused(&[E::Dir(b"d"), E::Hardlink(b"h", b"d")], "h");
    // A whiteout through a symlink removes nothing outside either.
    std::fs::create_dir_all(&canary).expect("mkdir");
    std::fs::write(canary.join("keep"), b"k").expect("write");
    let layer = tar_of(&[E::Symlink(b"x", &abs), E::File(b"x/.wh.keep", b"")]);
    assert!(apply_all(tmp.path(), &[layer]).is_err());
    assert!(canary.join("keep").exists());
}

#[test]
fn a_gzip_bomb_is_refused_while_it_inflates() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut h = tar::Header::new_gnu();
    h.set_path("bomb").expect("path");
    h.set_size(64 << 20);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(h.as_bytes()).expect("gz");
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).expect("gz");
    }
    let bomb = gz.finish().expect("gz");
    let err = match apply_all(tmp.path(), &[bomb]) {
        Ok(_) => panic!("the bomb was applied"),
        Err(e) => e,
    };
    assert!(
        matches!(err, Error::Bomb { ref entry, .. } if entry == "bomb"),
        "{err}"
    );
    // The same bytes within the limits (a generous ratio) unpack.
    let staging = tmp.path().join("again");
    std::fs::create_dir(&staging).expect("mkdir");
    let mut ok = small();
    ok.max_ratio = 10_000;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar_of(&[E::File(b"f", b"hello")]))
        .expect("gz");
    let fine = gz.finish().expect("gz");
    assert_eq!(
        apply_layer_for_fuzzing(&fine, &staging, ok).expect("fine"),
        2
    );
}

#[test]
fn entry_and_byte_limits_hold() {
    let tmp = tempfile::tempdir().expect("tmp");
    let many: Vec<Vec<u8>> = (0..20).map(|i| format!("f{i}").into_bytes()).collect();
    let entries: Vec<E<'_>> = many.iter().map(|n| E::File(n, b"x")).collect();
    let staging = tmp.path().join("s");
    std::fs::create_dir(&staging).expect("mkdir");
    let limits = ReadLimits {
        max_entries: 10,
        ..small()
    };
    let err = apply_layer_for_fuzzing(&tar_of(&entries), &staging, limits).expect_err("too many");
    assert!(
        matches!(
            err,
            Error::TooLarge {
                what: "entries",
                ..
            }
        ),
        "{err}"
    );
    let staging = tmp.path().join("t");
    std::fs::create_dir(&staging).expect("mkdir");
    let limits = ReadLimits {
        max_total_bytes: 5,
        ..small()
    };
    let err = apply_layer_for_fuzzing(&tar_of(&entries), &staging, limits).expect_err("too big");
    assert!(
        matches!(err, Error::TooLarge { ref entry, .. } if entry == "f5"),
        "{err}"
    );
}

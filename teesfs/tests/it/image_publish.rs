//! `teesfs publish --image` (issue 34 item 1): an OCI image built here with umoci (three
//! layers: owners, odd modes, setuid, symlink, hard link, whiteouts, an opaque directory)
//! publishes exactly the tree `umoci unpack` gives; its docker-archive and oci-archive
//! publish the same index; a squashfs and a SIF wrapper of it the same tree; hostile
//! layers are refused by name without writing outside; a second version stores few chunks.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use manifest::{EntryKind, FileData, Index, Limits, PublicKey, SignedIndex};
use seeder::DirStore;

use crate::util::{Workspace, can_mount, noise};

/// Whether the image tools and root are here; under CI a test that cannot run fails.
pub(crate) fn can_build_images() -> bool {
    let missing: Vec<&str> = ["umoci", "skopeo", "mksquashfs", "sqfs2tar", "python3"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    let why = if !missing.is_empty() {
        format!(
            "missing {} (scripts/deps.sh installs them)",
            missing.join(", ")
        )
    } else if !nix::unistd::Uid::effective().is_root() {
        "umoci unpack keeps the image's owners only as root".to_string()
    } else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "cannot run under CI: {why}"
    );
    eprintln!("SKIP: {why}");
    false
}

fn sh(script: &str, dir: &Path) {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the image `oci:t` in `dir` (and returns the layout): layer 1 every kind of entry,
/// layer 2 deletions (umoci writes `.wh.` whiteouts), layer 3 an opaque directory (a tar
/// made here, added verbatim). `ref/rootfs` is umoci's unpack of it.
fn build_image(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("noise"), noise(3 << 20, 7)).expect("noise");
    sh(
        r#"
umoci init --layout oci && umoci new --image oci:t
umoci unpack --image oci:t b >/dev/null; R=b/rootfs
mkdir -p $R/etc $R/usr/bin $R/opq/sub $R/gone $R/data $R/secret
echo hello >$R/etc/hello; chown 1234:567 $R/etc/hello; chmod 0640 $R/etc/hello
cp noise $R/data/big; chown 4242:4243 $R/data/big
printf '#!/bin/sh\necho hi\n' >$R/usr/bin/tool; chmod 4755 $R/usr/bin/tool
ln $R/usr/bin/tool $R/usr/bin/tool-again
ln -s ../etc/hello $R/usr/hello-link; ln -s /etc/absent $R/dangling
echo x >$R/secret/x; chmod 0400 $R/secret/x; chmod 0751 $R/secret; chown 99:99 $R/secret
echo a >$R/opq/a; echo s >$R/opq/sub/s; echo g >$R/gone/g; echo w >$R/etc/wh
umoci repack --image oci:t b; rm -rf b
umoci unpack --image oci:t b >/dev/null; R=b/rootfs
rm -rf $R/gone $R/etc/wh; echo up >$R/etc/up
umoci repack --image oci:t b; rm -rf b
mkdir -p l3/opq; : >l3/opq/.wh..wh..opq; echo n >l3/opq/n
tar -C l3 --owner=0 --group=0 -cf l3.tar opq
umoci raw add-layer --image oci:t l3.tar
umoci config --image oci:t --config.entrypoint /usr/bin/tool --config.cmd arg1 \
  --config.env FOO=bar --config.workingdir /etc --config.user 1234:567 --config.label a=b
umoci unpack --image oci:t ref >/dev/null
"#,
        dir,
    );
    dir.join("oci")
}

fn publish_image(ws: &Workspace, source: &Path, extra: &[&str]) -> (String, std::process::Output) {
    let out = ws.publish_output(&["--image", source.to_str().expect("utf8")], extra);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("index "))
        .unwrap_or("")
        .trim()
        .to_string();
    (id, out)
}

fn published(ws: &Workspace, source: &Path) -> String {
    let (id, out) = publish_image(ws, source, &[]);
    assert!(
        out.status.success(),
        "publish --image {}: {out:?}",
        source.display()
    );
    id
}

fn open_index(ws: &Workspace, id: &str) -> Index {
    let store = DirStore::open(&ws.store()).expect("store");
    let id = store.resolve_index(id).expect("id");
    let key = PublicKey::from_file_text(&std::fs::read_to_string(ws.pubkey()).expect("pub"))
        .expect("key");
    let signed = store.get_index(&id).expect("index");
    SignedIndex::open(signed, Some(id), &[key], &Limits::default())
        .expect("valid")
        .1
}

/// Every entry of a tree on disk as one line: kind, mode, owner, size, content or target.
fn describe_disk(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for item in walkdir::WalkDir::new(root).sort_by_file_name() {
        let item = item.expect("walk");
        let rel = item
            .path()
            .strip_prefix(root)
            .expect("prefix")
            .display()
            .to_string();
        let md = std::fs::symlink_metadata(item.path()).expect("stat");
        let what = if md.is_dir() {
            "dir".to_string()
        } else if md.file_type().is_symlink() {
            let t = std::fs::read_link(item.path()).expect("readlink");
            format!("link {}", t.display())
        } else {
            let bytes = std::fs::read(item.path()).expect("read");
            format!(
                "file {} {} nlink {}",
                bytes.len(),
                blake3::hash(&bytes),
                md.nlink()
            )
        };
        let mode = if md.file_type().is_symlink() {
            0o777
        } else {
            md.mode() & 0o7777
        };
        out.insert(rel, format!("{what} {mode:o} {}:{}", md.uid(), md.gid()));
    }
    out
}

#[test]
fn an_oci_layout_publishes_the_tree_umoci_unpacks() {
    if !can_build_images() || !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = build_image(tmp.path());
    let ws = Workspace::new();
    let id = published(&ws, &layout);
    let guard = ws.mount(&id, "mnt", &[]);
    let want = describe_disk(&tmp.path().join("ref/rootfs"));
    let got = describe_disk(&guard.mountpoint);
    for gone in ["gone", "gone/g", "etc/wh", "opq/a", "opq/sub", "opq/sub/s"] {
        assert!(!got.contains_key(gone), "{gone} survived its whiteout");
    }
    assert!(got.contains_key("opq/n") && got.contains_key("etc/up"));
    assert_eq!(got, want, "the published tree differs from umoci unpack's");
    assert!(got["usr/bin/tool"].contains(" 4755 ") && got["etc/hello"].contains("1234:567"));
    drop(guard);
    let image = open_index(&ws, &id)
        .image
        .expect("the index keeps the image config");
    assert_eq!(image.entrypoint, ["/usr/bin/tool"]);
    assert_eq!(image.cmd, ["arg1"]);
    assert!(
        image.env.contains(&"FOO=bar".to_string()),
        "{:?}",
        image.env
    );
    assert_eq!(image.working_dir.as_deref(), Some("/etc"));
    assert_eq!(image.user.as_deref(), Some("1234:567"));
    assert_eq!(image.labels.get("a").map(String::as_str), Some("b"));
}

/// Every entry of an index as one line (chunk ids, not table positions).
fn describe_index(index: &Index) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, e) in index.entries.iter().enumerate() {
        let idx = manifest::EntryIdx(i as u32);
        let path = String::from_utf8_lossy(&index.path_of(idx)).into_owned();
        let what = match &e.kind {
            EntryKind::Dir => "dir".to_string(),
            EntryKind::Symlink { target } => format!("link {}", String::from_utf8_lossy(target)),
            EntryKind::Hardlink { target } => format!("hardlink {}", target.0),
            EntryKind::File {
                size,
                data: FileData::Inline(b),
            } => format!("file {size} {}", blake3::hash(b)),
            EntryKind::File {
                size,
                data: FileData::Chunks(slots),
            } => {
                let ids: Vec<String> = slots
                    .iter()
                    .map(|s| {
                        s.chunk_index()
                            .map_or("hole".into(), |c| index.chunks[c].id.to_string())
                    })
                    .collect();
                format!("file {size} {}", ids.join(","))
            }
        };
        let m = e.meta;
        out.insert(path, format!("{what} {:o} {}:{}", m.mode, m.uid, m.gid));
    }
    out
}

#[test]
fn archives_squashfs_and_sif_of_one_image_publish_the_same_tree() {
    if !can_build_images() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = build_image(tmp.path());
    sh(
        "skopeo copy -q oci:oci:t docker-archive:d.tar:t:latest
         skopeo copy -q oci:oci:t oci-archive:o.tar:t
         mksquashfs ref/rootfs r.sqfs -noappend -quiet >/dev/null",
        tmp.path(),
    );
    let ws = Workspace::new();
    let id = published(&ws, &layout);
    for archive in ["d.tar", "o.tar"] {
        assert_eq!(published(&ws, &tmp.path().join(archive)), id, "{archive}");
    }
    let sqfs = tmp.path().join("r.sqfs");
    let sif = tmp.path().join("r.sif");
    write_sif(&sqfs, &sif);
    let want = describe_index(&open_index(&ws, &id));
    for other in [&sqfs, &sif] {
        let other_id = published(&ws, other);
        let index = open_index(&ws, &other_id);
        assert_eq!(describe_index(&index), want, "{}", other.display());
        // A squashfs carries no config: its index differs by that (and mtimes) alone.
        assert!(index.image.is_none());
    }
}

/// A minimal SIF file (as sylabs/sif lays it out): a 128-byte global header, one
/// partition descriptor (585 bytes: squashfs, primary system) and the squashfs at 4096.
fn write_sif(sqfs: &Path, out: &Path) {
    let data = std::fs::read(sqfs).expect("squashfs");
    let mut b = vec![0u8; 4096];
    b[..31].copy_from_slice(b"#!/usr/bin/env run-singularity\n");
    b[32..42].copy_from_slice(b"SIF_MAGIC\0");
    b[42..45].copy_from_slice(b"01\0");
    b[88..96].copy_from_slice(&1i64.to_le_bytes()); // descriptors in all
    b[96..104].copy_from_slice(&128i64.to_le_bytes()); // where they start
    b[104..112].copy_from_slice(&585i64.to_le_bytes());
    b[112..120].copy_from_slice(&4096i64.to_le_bytes());
    b[120..128].copy_from_slice(&(data.len() as i64).to_le_bytes());
    let d = 128;
    b[d..d + 4].copy_from_slice(&0x4004i32.to_le_bytes()); // a partition
    b[d + 4] = 1; // in use
    b[d + 5..d + 9].copy_from_slice(&1u32.to_le_bytes());
    b[d + 17..d + 25].copy_from_slice(&4096i64.to_le_bytes());
    b[d + 25..d + 33].copy_from_slice(&(data.len() as i64).to_le_bytes());
    b[d + 201..d + 205].copy_from_slice(&1i32.to_le_bytes()); // squashfs
    b[d + 205..d + 209].copy_from_slice(&2i32.to_le_bytes()); // primary system
    b.extend_from_slice(&data);
    std::fs::write(out, b).expect("sif");
}

/// Python that writes an OCI layout (argv 1) of one layer, gzip if argv 2 is 1, whose
/// members argv 3 adds to the open tarfile `t` (with `add(name, kind, data, link)`).
const LAYOUT_PY: &str = r#"
import gzip, hashlib, io, json, os, sys, tarfile
out, gz, layer_py = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
os.makedirs(out + "/blobs/sha256")
def blob(data):
    d = hashlib.sha256(data).hexdigest()
    open(out + "/blobs/sha256/" + d, "wb").write(data)
    return {"digest": "sha256:" + d, "size": len(data)}
raw = io.BytesIO()
t = tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT)
def add(name, kind=tarfile.REGTYPE, data=b"", link=""):
    i = tarfile.TarInfo(name); i.type = kind; i.size = len(data); i.linkname = link
    t.addfile(i, io.BytesIO(data))
exec(layer_py)
layer = raw.getvalue()
if gz:
    z = io.BytesIO()
    with gzip.GzipFile(fileobj=z, mode="wb", compresslevel=9) as g:
        g.write(layer)
        for _ in range(200):
            g.write(bytes(1 << 20))
    layer = z.getvalue()
cfg = blob(json.dumps({"architecture": "amd64", "os": "linux",
    "rootfs": {"type": "layers", "diff_ids": []}}).encode())
l = blob(layer)
kind = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gz else "")
m = blob(json.dumps({"schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": dict(cfg, mediaType="application/vnd.oci.image.config.v1+json"),
    "layers": [dict(l, mediaType=kind)]}).encode())
open(out + "/oci-layout", "w").write('{"imageLayoutVersion": "1.0.0"}')
open(out + "/index.json", "w").write(json.dumps({"schemaVersion": 2,
    "manifests": [dict(m, mediaType="application/vnd.oci.image.manifest.v1+json")]}))
"#;

#[test]
fn hostile_images_are_refused_by_entry_and_write_nothing_outside() {
    if !can_build_images() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let canary = tmp.path().join("canary");
    std::fs::create_dir(&canary).expect("canary");
    let c = canary.display();
    // A header saying 200 MiB follow, then 200 MiB of zeros gzipped to ~200 KiB.
    let bomb =
        "i = tarfile.TarInfo('bomb'); i.size = 200 << 20; raw.write(i.tobuf(tarfile.GNU_FORMAT))";
    let cases: Vec<(String, &str, bool)> = vec![
        ("add('../evil', data=b'x')".into(), "../evil", false),
        (format!("add('{c}/evil', data=b'x')"), "/evil", false),
        (
            format!("add('x', tarfile.SYMTYPE, link='{c}'); add('x/evil', data=b'x')"),
            "x/evil",
            false,
        ),
        (
            "add('x', tarfile.SYMTYPE, link='/tmp'); add('x/evil', data=b'x')".into(),
            "x/evil",
            false,
        ),
        (
            "add('h', tarfile.LNKTYPE, link='/etc/passwd')".into(),
            "entry \"h\"",
            false,
        ),
        (bomb.into(), "bomb", true),
    ];
    let ws = Workspace::new();
    for (i, (layer_py, named, gz)) in cases.iter().enumerate() {
        let layout = tmp.path().join(format!("hostile{i}"));
        let gz = if *gz { "1" } else { "0" };
        let out = Command::new("python3")
            .args([
                "-c",
                LAYOUT_PY,
                layout.to_str().expect("utf8"),
                gz,
                layer_py,
            ])
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (id, out) = publish_image(&ws, &layout, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && id.is_empty(),
            "case {i} was published: {stderr}"
        );
        assert!(
            stderr.contains(named),
            "case {i}: the error names {named}: {stderr}"
        );
        assert_eq!(
            std::fs::read_dir(&canary).expect("ls").count(),
            0,
            "case {i}: {stderr}"
        );
        assert!(!Path::new("/tmp/evil").exists(), "case {i}");
        let staging = ws.store().join("staging");
        let left = std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "case {i}: the staging directory was not removed");
    }
}

#[test]
fn a_second_version_of_an_image_stores_few_new_chunks_and_a_tag_picks_it() {
    if !can_build_images() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = build_image(tmp.path());
    let ws = Workspace::new();
    let (_, out) = publish_image(&ws, &layout, &["--format", "json"]);
    assert!(out.status.success(), "{out:?}");
    // The second version under a tag of its own: the layout now holds two images.
    sh(
        "umoci unpack --image oci:t v2 >/dev/null
         head -c 300000 /dev/urandom >v2/rootfs/etc/new-in-v2
         umoci repack --image oci:t2 v2",
        tmp.path(),
    );
    let (_, out) = publish_image(&ws, &layout, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("DIR:TAG") && err.contains("t, t2"),
        "two images and no tag: {err}"
    );
    let tagged = |tag: &str| PathBuf::from(format!("{}:{tag}", layout.display()));
    let (_, out) = publish_image(&ws, &tagged("nope"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no tag \"nope\"") && err.contains("t, t2"),
        "an unknown tag: {err}"
    );
    let (_, out) = publish_image(&ws, &tagged("t2"), &["--format", "json"]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let new = doc["new_chunks"].as_u64().expect("new_chunks");
    let unique = doc["unique_chunks"].as_u64().expect("unique_chunks");
    // The 3 MiB file's chunks are shared; only the new 300 KB file's are new.
    assert!(
        unique >= 10 && new <= 2,
        "new {new} of {unique} unique chunks: {doc}"
    );
    let v2 = describe_index(&open_index(&ws, doc["index"].as_str().expect("index")));
    assert!(v2.contains_key("etc/new-in-v2"), "{v2:?}");
    let v1 = describe_index(&open_index(&ws, &published(&ws, &tagged("t"))));
    assert!(
        !v1.contains_key("etc/new-in-v2"),
        "tag t is the first version"
    );
}

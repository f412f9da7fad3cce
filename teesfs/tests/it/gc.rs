//! Store hygiene (issue 19 item 5): `publish --tag`, `--index TAG`, the `inspect` listing
//! and `teesfs gc`, run as the binary against a real store.

use std::collections::HashSet;
use std::path::Path;
use std::process::Output;

use manifest::{ChunkId, Limits, SignedIndex};
use teesfs_node::output::{GcDoc, IndexList, PublishDoc, VERSION};

use crate::util::{Workspace, noise};

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json<T: serde::de::DeserializeOwned>(out: &Output, what: &str) -> T {
    let text = ok(out, what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"))
}

/// A layer with one file of its own (`seed`) and one shared with every other layer.
fn layer(ws: &Workspace, name: &str, seed: u64) -> std::path::PathBuf {
    let dir = ws.path().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("own.bin"), noise(600_000, seed)).expect("write");
    std::fs::write(dir.join("shared.bin"), noise(300_000, 99)).expect("write");
    dir
}

fn publish(ws: &Workspace, layer: &Path, tag: &str) -> PublishDoc {
    let (store, key) = (ws.store(), ws.key());
    json(
        &ws.teesfs(&[
            "publish",
            layer.to_str().expect("utf8"),
            "--store",
            store.to_str().expect("utf8"),
            "--key",
            key.to_str().expect("utf8"),
            "--chunk-size",
            "64KiB",
            "--quiet",
            "--tag",
            tag,
            "--format",
            "json",
        ]),
        "publish",
    )
}

/// The chunks an index references, read from the store.
fn chunks_of(store: &Path, id: &str) -> HashSet<ChunkId> {
    let bytes = std::fs::read(store.join("indexes").join(format!("{id}.idx"))).expect("index");
    let signed = SignedIndex::from_bytes(bytes, &Limits::default()).expect("envelope");
    let index = signed.decode(&Limits::default()).expect("decodes");
    index.chunks.iter().map(|c| c.id).collect()
}

fn chunk_path(store: &Path, id: &ChunkId) -> std::path::PathBuf {
    let hex = id.to_hex();
    store.join("chunks").join(&hex[..2]).join(hex)
}

fn count_chunks(store: &Path) -> usize {
    walkdir::WalkDir::new(store.join("chunks"))
        .into_iter()
        .flatten()
        .filter(|e| !e.file_type().is_dir())
        .count()
}

/// The listing of the store `s` shows both indexes (`v1`, a day older, tagged `v1`; `v2`
/// tagged `stable`), with their tags, dates and sizes, newest first.
fn assert_lists_both(ws: &Workspace, s: &str, v1: &str, v2: &str) {
    let list: IndexList = json(
        &ws.teesfs(&["inspect", "--store", s, "--format", "json"]),
        "inspect",
    );
    assert_eq!(list.version, VERSION);
    let row = |id: &str| {
        list.indexes
            .iter()
            .find(|i| i.id == id)
            .unwrap_or_else(|| panic!("{id} listed"))
    };
    assert_eq!(row(v1).tags, ["v1"]);
    assert_eq!(row(v2).tags, ["stable"]);
    assert_eq!(row(v2).files, 2);
    assert_eq!(row(v2).file_bytes, 900_000);
    assert!(row(v2).published >= row(v1).published + 86_000);
    let table = ok(&ws.teesfs(&["inspect", "--store", s]), "inspect");
    let first = table.lines().nth(1).expect("a row");
    assert!(
        first.starts_with(&v2[..16]) && first.contains("stable"),
        "newest first:\n{table}"
    );
    assert!(table.contains("878.9 KiB"), "human sizes:\n{table}");
}

#[test]
fn gc_keep_1_removes_the_old_layers_own_chunks_and_the_kept_one_still_verifies() {
    let ws = Workspace::new();
    let store = ws.store();
    let s = store.to_str().expect("utf8");
    let trust = ws.pubkey();
    let trust = trust.to_str().expect("utf8");
    let v1 = publish(&ws, &layer(&ws, "v1", 1), "v1");
    // Published a day ago (gc and the listing go by the index file's time).
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    std::fs::File::options()
        .write(true)
        .open(ws.index_file(&v1.index))
        .and_then(|f| f.set_modified(day_ago))
        .expect("age v1");
    let v2 = publish(&ws, &layer(&ws, "v2", 2), "stable");
    assert_eq!(v2.tag.as_deref(), Some("stable"));
    let (old, new) = (chunks_of(&store, &v1.index), chunks_of(&store, &v2.index));
    let only_old: Vec<ChunkId> = old.difference(&new).copied().collect();
    assert!(!only_old.is_empty() && old.intersection(&new).count() > 0);

    assert_lists_both(&ws, s, &v1.index, &v2.index);

    // Every tagged index is kept by default: nothing to do.
    let none: GcDoc = json(
        &ws.teesfs(&[
            "gc", "--store", s, "--keep", "1", "--grace", "0s", "--format", "json",
        ]),
        "gc",
    );
    assert!(
        none.removed_indexes.is_empty() && none.removed_chunks == 0,
        "{none:?}"
    );

    let dry: GcDoc = json(
        &ws.teesfs(&[
            "gc",
            "--store",
            s,
            "--keep",
            "1",
            "--no-keep-tag",
            "--grace",
            "0s",
            "--dry-run",
            "--format",
            "json",
        ]),
        "gc --dry-run",
    );
    assert!(dry.dry_run);
    assert_eq!(dry.removed_chunks, only_old.len() as u64);
    assert!(
        chunk_path(&store, &only_old[0]).exists(),
        "a dry run deletes nothing"
    );

    let out = ws.teesfs(&[
        "gc",
        "--store",
        s,
        "--keep",
        "1",
        "--no-keep-tag",
        "--grace",
        "0s",
    ]);
    let text = ok(&out, "gc");
    assert!(text.contains("removed 1 index(es)"), "{text}");
    assert!(text.contains("freed"), "{text}");
    for c in &only_old {
        assert!(!chunk_path(&store, c).exists(), "{} is gone", c.to_hex());
    }
    for c in &new {
        assert!(chunk_path(&store, c).exists(), "{} is kept", c.to_hex());
    }
    assert_eq!(count_chunks(&store), new.len());
    ok(
        &ws.teesfs(&[
            "verify", "--store", s, "--index", "stable", "--trust", trust,
        ]),
        "verify the kept index by its tag",
    );
    // The removed index's tag went with it; the error says what --index takes.
    let out = ws.teesfs(&["verify", "--store", s, "--index", "v1", "--trust", trust]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no index v1") && err.contains("at least 4 hex characters"),
        "{err}"
    );
    let out = ws.teesfs(&["verify", "--store", s, "--index", "ab", "--trust", trust]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at least 4 hex characters of the id, or a tag"),
        "{err}"
    );
}

#[test]
fn a_bad_tag_name_is_refused_before_anything_is_published() {
    let ws = Workspace::new();
    let dir = layer(&ws, "l", 3);
    for bad in ["cafe", "a/b", ".x"] {
        let out = ws.teesfs(&[
            "publish",
            dir.to_str().expect("utf8"),
            "--store",
            ws.store().to_str().expect("utf8"),
            "--key",
            ws.key().to_str().expect("utf8"),
            "--tag",
            bad,
        ]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("A-Z a-z 0-9 . _ -"), "{bad}: {err}");
    }
    assert!(!ws.store().exists(), "nothing published");
}

/// A publish in progress has written chunks no index references yet: gc must not take them.
#[test]
fn gc_leaves_a_running_publishs_chunks_alone() {
    let ws = Workspace::new();
    let store = ws.store();
    let s = store.to_str().expect("utf8");
    publish(&ws, &layer(&ws, "v1", 1), "v1");
    let before = count_chunks(&store);

    // A publish holding the lock: gc refuses at once and deletes nothing.
    let st = seeder::DirStore::open(&store).expect("store");
    let held = st.lock_shared().expect("lock");
    assert!(held.is_held(), "the test store's filesystem has locks");
    let out = ws.teesfs(&[
        "gc",
        "--store",
        s,
        "--keep",
        "0",
        "--no-keep-tag",
        "--grace",
        "0s",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy") && err.contains(".lock"), "{err}");
    assert_eq!(count_chunks(&store), before);
    drop(held);

    // Without the lock (a publisher it cannot reach), the grace period keeps fresh chunks.
    let fresh = manifest::encode_chunk(&noise(70_000, 7), 1);
    let fresh_id = ChunkId::of(&noise(70_000, 7));
    let fresh_path = chunk_path(&store, &fresh_id);
    std::fs::create_dir_all(fresh_path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&fresh_path, fresh).expect("write");
    // A temporary file (a publish's write in flight, or a crashed one's leftover) goes only
    // past the grace period; gc never touches a planted symlink's target or a symlinked
    // chunk directory's contents.
    let tmp = fresh_path.with_file_name(".tmpABC");
    std::fs::write(&tmp, b"half").expect("tmp");
    let outside = ws.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let victim_id = ChunkId::of(b"victim");
    std::fs::write(outside.join(victim_id.to_hex()), b"keep").expect("victim");
    let planted = chunk_path(&store, &victim_id);
    std::fs::create_dir_all(planted.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(outside.join(victim_id.to_hex()), &planted).expect("ln");
    let hex = ChunkId::of(b"dir").to_hex();
    std::fs::write(outside.join(&hex), b"keep").expect("victim");
    let linked_dir = store.join("chunks").join(&hex[..2]);
    if !linked_dir.exists() {
        std::os::unix::fs::symlink(&outside, &linked_dir).expect("ln dir");
    }

    let doc: GcDoc = json(
        &ws.teesfs(&[
            "gc",
            "--store",
            s,
            "--keep",
            "0",
            "--no-keep-tag",
            "--format",
            "json",
        ]),
        "gc",
    );
    assert!(doc.locked);
    assert_eq!(doc.removed_indexes.len(), 1, "{doc:?}");
    assert!(fresh_path.exists(), "a chunk younger than --grace survives");
    assert!(doc.young_chunks >= 1, "{doc:?}");
    assert!(
        tmp.exists(),
        "a temporary file younger than --grace survives"
    );
    assert_eq!(doc.removed_temp_files, 0, "{doc:?}");

    let doc: GcDoc = json(
        &ws.teesfs(&[
            "gc", "--store", s, "--keep", "0", "--grace", "0s", "--format", "json",
        ]),
        "gc",
    );
    assert!(!fresh_path.exists(), "past the grace period it goes");
    assert!(doc.removed_chunks >= 1);
    assert!(
        !tmp.exists(),
        "past the grace period a leftover temporary file goes"
    );
    assert_eq!(
        (doc.removed_temp_files, doc.removed_temp_bytes),
        (1, 4),
        "{doc:?}"
    );
    assert!(
        std::fs::symlink_metadata(&planted).is_err(),
        "the planted link is removed"
    );
    assert_eq!(
        std::fs::read(outside.join(victim_id.to_hex())).expect("victim"),
        b"keep"
    );
    assert_eq!(std::fs::read(outside.join(&hex)).expect("victim"), b"keep");
}

/// Issue 29 item 2: someone who can write a store's directory replaced its `chunks/` and
/// `indexes/` with links to another store. gc refuses the store, naming the link, and the
/// other store keeps every index and chunk; a top-level directory that belongs to another
/// user is refused as well.
#[test]
fn gc_refuses_symlinked_chunks_and_indexes_and_leaves_the_other_store_alone() {
    use std::os::unix::fs::symlink;
    let ws = Workspace::new();
    let victim = ws.store();
    for (name, seed) in [("v1", 1), ("v2", 2), ("v3", 3)] {
        publish(&ws, &layer(&ws, name, seed), name);
    }
    let before = (
        count_chunks(&victim),
        ws.teesfs(&["inspect", "--store", victim.to_str().expect("utf8")])
            .stdout,
    );
    let theirs = ws.path().join("theirs");
    std::fs::create_dir_all(&theirs).expect("mkdir");
    for sub in ["chunks", "indexes"] {
        symlink(victim.join(sub), theirs.join(sub)).expect("ln -s");
    }
    let gc = |store: &Path| {
        ws.teesfs(&[
            "gc",
            "--store",
            store.to_str().expect("utf8"),
            "--keep",
            "1",
            "--no-keep-tag",
            "--grace",
            "0s",
        ])
    };
    let out = gc(&theirs);
    assert!(!out.status.success(), "gc must refuse: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("symbolic link") && err.contains("theirs"),
        "names the store and the link: {err}"
    );
    let after = (
        count_chunks(&victim),
        ws.teesfs(&["inspect", "--store", victim.to_str().expect("utf8")])
            .stdout,
    );
    assert_eq!(before, after, "the other store is untouched");
    assert!(before.0 > 0);

    // A real directory, but someone else's.
    let foreign = ws.path().join("foreign");
    std::fs::create_dir_all(foreign.join("indexes")).expect("mkdir");
    std::fs::create_dir_all(foreign.join("chunks")).expect("mkdir");
    let root = nix::unistd::geteuid().is_root();
    assert!(
        root || std::env::var_os("CI").is_none(),
        "the foreign-owner case needs root (CI runs as root)"
    );
    if root {
        nix::unistd::chown(
            &foreign.join("chunks"),
            Some(nix::unistd::Uid::from_raw(65534)),
            None,
        )
        .expect("chown");
        let out = gc(&foreign);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("uid 65534"), "{err}");
    }
}

/// Issue 29: one bad tag file made `inspect` and `gc` fail for the whole store. Now both
/// name the file and go on; gc, not knowing which index the bad tag names, keeps every
/// index (and the chunks they need), and removes only what no index references.
#[test]
fn one_bad_tag_file_is_named_and_skipped_and_gc_keeps_every_index_it_might_protect() {
    let ws = Workspace::new();
    let store = ws.store();
    let s = store.to_str().expect("utf8");
    let v1 = publish(&ws, &layer(&ws, "v1", 1), "v1");
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    std::fs::File::options()
        .write(true)
        .open(ws.index_file(&v1.index))
        .and_then(|f| f.set_modified(day_ago))
        .expect("age v1");
    let v2 = publish(&ws, &layer(&ws, "v2", 2), "stable");
    let tags = store.join("indexes").join("tags");
    // The tag of v1, damaged: gc cannot tell it names v1.
    std::fs::write(tags.join("v1"), b"not an id\n").expect("damage the tag");
    std::fs::create_dir(tags.join("odd")).expect("a directory as a tag");
    // A chunk no index references, old: the only thing gc may remove.
    let orphan = ChunkId::of(b"orphan");
    let orphan_path = chunk_path(&store, &orphan);
    std::fs::create_dir_all(orphan_path.parent().expect("dir")).expect("mkdir");
    std::fs::write(&orphan_path, b"x").expect("orphan");
    std::fs::File::options()
        .write(true)
        .open(&orphan_path)
        .and_then(|f| f.set_modified(day_ago))
        .expect("age orphan");

    let out = ws.teesfs(&["inspect", "--store", s, "--format", "json"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let list: IndexList = json(&out, "inspect with a bad tag");
    assert_eq!(list.indexes.len(), 2, "both indexes listed");
    assert!(
        err.contains("indexes/tags/v1") && err.contains("indexes/tags/odd"),
        "{err}"
    );
    assert!(err.contains("remove the file"), "says what to do: {err}");

    let out = ws.teesfs(&["gc", "--store", s, "--keep", "1", "--grace", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = ok(&out, "gc with a bad tag");
    assert!(
        err.contains("indexes/tags/v1") && err.contains("removed no index a tag keeps"),
        "{err}"
    );
    assert!(
        text.contains("removed 0 index(es) and 1 chunk(s)"),
        "{text}"
    );
    assert!(ws.index_file(&v1.index).exists() && ws.index_file(&v2.index).exists());
    assert!(!orphan_path.exists(), "the unreferenced chunk went");
    for id in chunks_of(&store, &v1.index) {
        assert!(chunk_path(&store, &id).exists(), "a chunk of v1 went");
    }
    let doc: GcDoc = json(
        &ws.teesfs(&["gc", "--store", s, "--keep", "1", "--format", "json"]),
        "gc json",
    );
    assert_eq!(doc.unreadable_tags.len(), 2, "{:?}", doc.unreadable_tags);

    // Once the bad tags are gone, --keep 1 removes v1 again.
    std::fs::remove_file(tags.join("v1")).expect("rm");
    std::fs::remove_dir(tags.join("odd")).expect("rmdir");
    let text = ok(
        &ws.teesfs(&["gc", "--store", s, "--keep", "1", "--grace", "0s"]),
        "gc",
    );
    assert!(text.contains("removed 1 index(es)"), "{text}");
}

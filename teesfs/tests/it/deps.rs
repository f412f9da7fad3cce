//! Publishing with an urgent list: the signed index records the ordered list and the push
//! order follows it. (The dependency analysis itself is tested in `seeder/tests/deps.rs`.)

use crate::util::Workspace;

/// `teesfs publish --urgent-list` records the list in order in the signed index and the
/// push order sends those files first, in that order; `--urgent-exec` adds the closure;
/// an unknown path is refused by name.
#[test]
fn publish_records_the_ordered_list_and_push_order_follows_it() {
    let ws = Workspace::new();
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(layer.join("bin")).expect("mkdir");
    for (name, byte) in [("a", 1u8), ("b", 2), ("c", 3)] {
        std::fs::write(layer.join(name), vec![byte; 200_000]).expect("write");
    }
    std::fs::copy("/bin/true", layer.join("bin/tool")).expect("copy");
    let list = ws.path().join("urgent.txt");
    std::fs::write(&list, "# recorded\nc\n!absent.so\n\na\n").expect("write");
    let (store_dir, key) = (ws.store(), ws.key());
    let publish = |extra: &[&str]| {
        let mut args = vec![
            "publish",
            layer.to_str().expect("utf8"),
            "--store",
            store_dir.to_str().expect("utf8"),
            "--key",
            key.to_str().expect("utf8"),
            "--quiet",
        ];
        args.extend_from_slice(extra);
        ws.teesfs(&args)
    };
    let out = publish(&[
        "--urgent-list",
        list.to_str().expect("utf8"),
        "--urgent-exec",
        "/bin/tool",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    // Issue 30 item 8: the layer's top-level bin/ would hide a merged-/usr host's /bin
    // link for a job run in it over /; publish says so (and still publishes).
    if std::fs::symlink_metadata("/bin").is_ok_and(|m| m.is_symlink()) {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("has a top-level bin/") && err.contains("opt/APP"),
            "{err}"
        );
    }
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("index "))
        .expect("id")
        .trim();
    let store = seeder::DirStore::open(&ws.store()).expect("store");
    let bytes = store.get_index(&id.parse().expect("id")).expect("index");
    let index = manifest::SignedIndex::from_bytes(bytes, &manifest::Limits::default())
        .expect("envelope")
        .decode(&manifest::Limits::default())
        .expect("decodes");
    let urgent: Vec<String> = index
        .urgent
        .iter()
        .map(|&e| String::from_utf8_lossy(&index.path_of(e)).into_owned())
        .collect();
    assert_eq!(urgent, ["c", "a", "bin/tool"]);
    let (order, n) = manifest::push_order(&index, &|p: &[u8]| p == b"b");
    let chunk_of = |name: &str| {
        let e = index
            .entries
            .iter()
            .position(|e| &e.name[..] == name.as_bytes())
            .expect("entry");
        match &index.entries[e].kind {
            manifest::EntryKind::File {
                data: manifest::FileData::Chunks(s),
                ..
            } => s[0].chunk_index().expect("not a hole") as u32,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(order[..3], [chunk_of("c"), chunk_of("a"), chunk_of("tool")]);
    assert_eq!(order[3], chunk_of("b"), "then the extra globs");
    assert_eq!(n, 4);

    std::fs::write(&list, "c\nnot/here\n").expect("write");
    let out = publish(&["--urgent-list", list.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not/here"), "{err}");
    let out = publish(&["--urgent-exec", "no-such-command-xyz"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no-such-command-xyz"),
        "{err}"
    );
}

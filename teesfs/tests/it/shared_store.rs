//! Issue 30 item 4: one store, many users. A store whose root is group-writable and setgid
//! takes publishes, tag moves and gc from every member of its group; a personal store
//! refuses another user with a message that says how to share it. Real processes under
//! other uids (the test runs as root, like CI).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::util::{Workspace, teesfs_bin};

/// The group of the store and its two publishers (no passwd entries needed).
const GROUP: u32 = 47_100;
const ALICE: u32 = 47_101;
const BOB: u32 = 47_102;

fn as_user(uid: u32, home: &Path, args: &[&str]) -> Output {
    Command::new(teesfs_bin())
        .args(args)
        .env("HOME", home)
        .env("TEESFS_CONFIG", home.join("config"))
        .current_dir(home)
        .uid(uid)
        .gid(GROUP)
        .output()
        .expect("run teesfs")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A user's home with a publisher key and a layer of `files`.
fn user(ws: &Workspace, uid: u32, files: &[(&str, u8)]) -> std::path::PathBuf {
    let home = ws.path().join(format!("home-{uid}"));
    let layer = home.join("layer/opt/app");
    std::fs::create_dir_all(&layer).expect("layer");
    for (name, byte) in files {
        std::fs::write(layer.join(name), vec![*byte; 300_000]).expect("file");
    }
    for e in walkdir::WalkDir::new(&home) {
        let p = e.expect("walk").into_path();
        nix::unistd::chown(&p, Some(uid.into()), Some(GROUP.into())).expect("chown");
    }
    let key = home.join("publisher.key");
    ok(
        &as_user(
            uid,
            &home,
            &["keygen", "--out", key.to_str().expect("utf-8")],
        ),
        "keygen",
    );
    home
}

fn publish(uid: u32, home: &Path, store: &Path, tag: &str) -> Output {
    let layer = home.join("layer");
    let key = home.join("publisher.key");
    as_user(
        uid,
        home,
        &[
            "publish",
            layer.to_str().expect("utf-8"),
            "--store",
            store.to_str().expect("utf-8"),
            "--key",
            key.to_str().expect("utf-8"),
            "--chunk-size",
            "64KiB",
            "--tag",
            tag,
            "--quiet",
        ],
    )
}

#[test]
fn two_users_of_a_group_publish_move_a_tag_and_gc_in_one_shared_store() {
    assert!(
        nix::unistd::geteuid().is_root() || std::env::var_os("CI").is_none(),
        "CI runs as root: this test publishes as other users"
    );
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: needs root to run teesfs as other users");
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let store = ws.path().join("shared");
    std::fs::create_dir(&store).expect("store");
    nix::unistd::chown(&store, None, Some(GROUP.into())).expect("chgrp");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o2775)).expect("chmod");
    let alice = user(&ws, ALICE, &[("a", 1), ("b", 2)]);
    let bob = user(&ws, BOB, &[("b", 2), ("c", 3)]);

    ok(&publish(ALICE, &alice, &store, "app"), "alice publishes");
    // Bob adds chunks into directories Alice made, and moves her tag.
    ok(
        &publish(BOB, &bob, &store, "app"),
        "bob publishes into alice's directories",
    );
    for e in walkdir::WalkDir::new(&store).min_depth(1) {
        let e = e.expect("walk");
        let md = e.metadata().expect("md");
        if md.is_dir() {
            assert_eq!(md.mode() & 0o7777, 0o2775, "{}", e.path().display());
            assert_eq!(md.gid(), GROUP, "{}", e.path().display());
        }
    }
    let lock = std::fs::metadata(store.join(".lock")).expect("lock file");
    assert_eq!(lock.mode() & 0o060, 0o060, "the lock is the group's");
    let listed = ok(
        &as_user(
            ALICE,
            &alice,
            &["inspect", "--store", store.to_str().expect("utf-8")],
        ),
        "inspect",
    );
    assert_eq!(
        listed.lines().filter(|l| l.contains(" app ")).count(),
        1,
        "{listed}"
    );
    // Alice collects what only her old index used, although Bob made some directories.
    let out = as_user(
        ALICE,
        &alice,
        &[
            "gc",
            "--store",
            store.to_str().expect("utf-8"),
            "--keep",
            "1",
            "--grace",
            "0s",
        ],
    );
    ok(&out, "alice's gc");
    let trust = bob.join("publisher.pub");
    let verified = ok(
        &as_user(
            BOB,
            &bob,
            &[
                "verify",
                "--store",
                store.to_str().expect("utf-8"),
                "--trust",
                trust.to_str().expect("utf-8"),
            ],
        ),
        "the store is whole after gc",
    );
    assert_eq!(
        verified.matches(": OK").count(),
        1,
        "gc kept bob's index: {verified}"
    );

    // A personal store (the first publisher's umask): another user is told how to share.
    let own = ws.path().join("own");
    std::fs::create_dir(&own).expect("own");
    nix::unistd::chown(&own, Some(ALICE.into()), Some(GROUP.into())).expect("chown");
    ok(&publish(ALICE, &alice, &own, "mine"), "alice's own store");
    let out = publish(BOB, &bob, &own, "his");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "bob wrote into alice's personal store"
    );
    assert!(
        err.contains("chmod 2775"),
        "says how to share the store: {err}"
    );
}

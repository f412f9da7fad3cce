//! What the tests here share: whether FUSE mounts can be made.

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

//! What the tests here share: whether FUSE mounts can be made.

/// Whether FUSE mounts can be made here; prints why not when they cannot. Under CI
/// (`CI` set) a test that cannot run fails instead: CI runs as root with /dev/fuse.
pub fn can_mount() -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        "needs root to mount FUSE without fusermount (CI runs as root)"
    } else if !std::path::Path::new("/dev/fuse").exists() {
        "this kernel has no /dev/fuse"
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

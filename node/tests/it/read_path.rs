//! The read path of a mount whose chunks are all on the node (issue 28 item 2): what a
//! program's start costs in requests to the daemon and in work per chunk, counted by the
//! mount's own counters. Each test would fail if its fix broke: a flush per close, reads of
//! local chunks handed to another thread, a second open that reads chunks again, missing
//! names asked for twice, a copy for passthrough made through per-chunk tasks.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use manifest::build::NoProgress;
use manifest::{BuildOptions, ChunkInfo, IndexId};
use peertree::relay::ChunkNo;
use seeder::DirStore;
use teesfs_node::fs::copies::Copies;
use teesfs_node::fs::fuse::PassthroughConfig;
use teesfs_node::fs::mount::{MountConfig, Mounted, mount};
use teesfs_node::source::{ChunkFuture, ChunkSource, Fetched, StoreSource};

use crate::util::can_mount;

/// A local store that counts how chunks are asked for: on the reader's thread
/// ([`ChunkSource::fetch_local`]) or as a fetch to wait for.
struct CountingSource {
    store: Arc<DirStore>,
    table: Vec<ChunkInfo>,
    inner: StoreSource,
    local: AtomicUsize,
    fetches: AtomicUsize,
    /// What [`ChunkSource::is_local`] answers (which decides passthrough).
    held: AtomicBool,
}

impl ChunkSource for CountingSource {
    fn fetch(&self, at: ChunkNo) -> ChunkFuture {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        self.inner.fetch(at)
    }

    fn is_local(&self, _at: ChunkNo) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    fn fetch_local(&self, at: ChunkNo) -> Option<Result<Fetched, teesfs_node::Error>> {
        self.local.fetch_add(1, Ordering::SeqCst);
        Some(
            self.store
                .get_chunk(&self.table[at.index()].id)
                .map(|b| Fetched::Stored(b.into()))
                .map_err(Into::into),
        )
    }
}

/// A published layer and its mount; unmounted on drop (before the temp dir goes).
struct Fixture {
    mounted: Option<Mounted>,
    source: Arc<CountingSource>,
    mp: PathBuf,
    layer: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        drop(self.mounted.take());
    }
}

impl Fixture {
    fn mounted(&self) -> &Mounted {
        self.mounted.as_ref().expect("mounted until drop")
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.mp.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    fn same(&self, rel: &str) {
        let want = std::fs::read(self.layer.join(rel)).expect("layer file");
        assert!(self.read(rel) == want, "{rel} read back wrong bytes");
    }
}

/// Twenty small files, one of four 64 KiB chunks and a sub-directory, in 64 KiB chunks;
/// mounted with passthrough if `passthrough`.
fn fixture(passthrough: bool) -> Fixture {
    fixture_with(passthrough, |_| {})
}

/// [`fixture`], with `prepare` run on the layer before it is published.
fn fixture_with(passthrough: bool, prepare: impl FnOnce(&std::path::Path)) -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = tmp.path().join("layer");
    std::fs::create_dir_all(layer.join("pkg/__pycache__")).expect("mkdir");
    for i in 0..20 {
        let body: Vec<u8> = (0..5000 + i * 100).map(|b| (b * 7 + i) as u8).collect();
        std::fs::write(layer.join(format!("pkg/__pycache__/m{i}.pyc")), body).expect("write");
    }
    let big: Vec<u8> = (0..4 * 65536u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(layer.join("pkg/big.so"), big).expect("write");
    prepare(&layer);
    let store = DirStore::create(&tmp.path().join("store")).expect("store");
    let opts = BuildOptions {
        chunk_size: 65536,
        ..BuildOptions::default()
    };
    let (index, _) = manifest::build(&layer, &opts, &store, &NoProgress).expect("build");
    let source = Arc::new(CountingSource {
        store: Arc::new(DirStore::open(&tmp.path().join("store")).expect("store")),
        table: index.chunks.clone(),
        inner: StoreSource::new(store, &index),
        local: AtomicUsize::new(0),
        fetches: AtomicUsize::new(0),
        held: AtomicBool::new(true),
    });
    let passthrough = passthrough.then(|| PassthroughConfig {
        copies: Copies::open(&tmp.path().join("copies"), 1 << 30).expect("copies"),
        min_size: 64 << 10,
    });
    let mp = tmp.path().join("mnt");
    std::fs::create_dir_all(&mp).expect("mountpoint");
    let cfg = MountConfig {
        passthrough,
        ..MountConfig::default()
    };
    let mounted =
        mount(index, IndexId::of(b"read path"), source.clone(), &mp, &cfg).expect("mount");
    Fixture {
        mounted: Some(mounted),
        source,
        mp,
        layer,
        _tmp: tmp,
    }
}

fn small(i: usize) -> String {
    format!("pkg/__pycache__/m{i}.pyc")
}

#[test]
fn a_close_costs_one_flush_per_mount_not_one_per_close() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    for i in 0..20 {
        f.same(&small(i));
    }
    let c = f.mounted().counters();
    assert_eq!(c.open, 20, "{c:?}");
    assert_eq!(
        c.flush, 1,
        "the first flush is answered ENOSYS and the kernel sends no more: {c:?}"
    );
}

#[test]
fn reads_of_local_chunks_are_answered_on_the_fuse_thread() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    for i in 0..20 {
        f.same(&small(i));
    }
    f.same("pkg/big.so");
    let c = f.mounted().counters();
    assert_eq!(
        c.read_slow, 0,
        "no read of a local chunk goes to a task: {c:?}"
    );
    assert!(c.read_now >= 1, "big.so is read through the daemon: {c:?}");
    assert_eq!(
        f.source.fetches.load(Ordering::SeqCst),
        0,
        "no chunk was fetched the waiting way"
    );
    assert_eq!(
        f.source.local.load(Ordering::SeqCst),
        24,
        "each chunk read once, on the reader's thread (20 small files, 4 chunks)"
    );
    let d = f.mounted().data().stats();
    assert_eq!((d.local, d.decoded), (24, 24), "{d:?}");
}

#[test]
fn small_files_are_in_the_page_cache_when_their_open_returns() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    for i in 0..20 {
        f.same(&small(i));
    }
    let c = f.mounted().counters();
    assert_eq!(c.prefilled, 20, "{c:?}");
    assert_eq!(
        c.reads(),
        0,
        "reading a small file costs no request after its open: {c:?}"
    );
}

#[test]
fn a_second_open_of_a_file_is_served_by_the_page_cache() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    for i in 0..20 {
        f.same(&small(i));
    }
    f.same("pkg/big.so");
    let first = f.mounted().counters();
    let chunks = f.mounted().data().stats().fetches;
    for i in 0..20 {
        f.same(&small(i));
    }
    f.same("pkg/big.so");
    let again = f.mounted().counters();
    assert_eq!(
        again.reads(),
        first.reads(),
        "second opens read nothing from the daemon: {again:?}"
    );
    assert_eq!(again.read_bytes, first.read_bytes);
    assert_eq!(again.prefilled, first.prefilled, "nor put in again");
    assert_eq!(
        f.mounted().data().stats().fetches,
        chunks,
        "and decode no chunk again"
    );
}

#[test]
fn names_are_looked_up_once_whether_they_exist_or_not() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    let missing = f.mp.join("pkg/__init__.cpython-311-x86_64-linux-gnu.so");
    let present = f.mp.join("pkg/__pycache__/m3.pyc");
    for _ in 0..10 {
        assert!(std::fs::symlink_metadata(&missing).is_err());
        assert!(std::fs::symlink_metadata(&present).is_ok());
    }
    let c = f.mounted().counters();
    assert_eq!(
        c.lookup_absent, 1,
        "a missing name is answered once and cached by the kernel: {c:?}"
    );
    assert_eq!(c.lookup, 3, "pkg, __pycache__ and m3.pyc, each once: {c:?}");
}

#[test]
fn a_passthrough_copy_of_local_chunks_is_made_once_without_a_fetch_per_chunk() {
    if !can_mount() {
        return;
    }
    let f = fixture(true);
    assert!(
        f.mounted().passthrough_active(),
        "the kernel accepts FUSE passthrough (Linux 6.9 or later, as root)"
    );
    f.same("pkg/big.so");
    f.same("pkg/big.so");
    let c = f.mounted().counters();
    assert_eq!(c.open_passthrough, 2, "{c:?}");
    assert_eq!(c.reads(), 0, "the kernel reads the copy itself: {c:?}");
    assert_eq!(
        f.source.fetches.load(Ordering::SeqCst),
        0,
        "local chunks are decoded into the copy directly, not fetched one task each"
    );
    assert_eq!(
        f.source.local.load(Ordering::SeqCst),
        4,
        "the copy is made once, from its four chunks"
    );
}

/// A library mapped by one program while its chunks were arriving stays open served by
/// the daemon; the kernel keeps an inode's open files in one I/O mode, so a second program
/// opening it once every chunk is here must be served the same way, not passed through
/// (which the kernel refuses with EIO: a Slurm image job's second `cat` failed to load
/// libc), and the first open after the last close may pass through again.
#[test]
fn a_file_held_open_before_its_chunks_were_local_is_opened_the_same_way_again() {
    if !can_mount() {
        return;
    }
    let f = fixture(true);
    assert!(
        f.mounted().passthrough_active(),
        "FUSE passthrough (Linux 6.9+, root)"
    );
    f.source.held.store(false, Ordering::SeqCst);
    let first = std::fs::File::open(f.mp.join("pkg/big.so")).expect("first open");
    f.source.held.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        f.same("pkg/big.so");
    }
    let c = f.mounted().counters();
    assert_eq!((c.open, c.open_passthrough), (3, 0), "{c:?}");
    drop(first);
    f.same("pkg/big.so");
    let c = f.mounted().counters();
    assert_eq!(
        c.open_passthrough, 1,
        "passed through once none is open: {c:?}"
    );
}

#[test]
fn a_layer_without_extended_attributes_is_asked_for_them_once() {
    if !can_mount() {
        return;
    }
    let f = fixture(false);
    for i in 0..10 {
        let got = xattr::get(f.mp.join(small(i)), "trusted.overlay.metacopy");
        assert!(matches!(got, Ok(None) | Err(_)), "{got:?}");
        let _ = xattr::list(f.mp.join("pkg"));
    }
    let c = f.mounted().counters();
    assert_eq!(
        c.xattr, 2,
        "one getxattr and one listxattr: ENOSYS, and the kernel answers the rest: {c:?}"
    );
}

#[test]
fn an_opaque_directory_keeps_its_mark() {
    if !can_mount() {
        return;
    }
    let mut marked = Ok(());
    let f = fixture_with(false, |layer| {
        marked = xattr::set(layer.join("pkg"), "user.overlay.opaque", b"y");
    });
    if let Err(e) = marked {
        assert!(std::env::var_os("CI").is_none(), "cannot set an xattr: {e}");
        eprintln!("SKIP: no user xattrs here: {e}");
        return;
    }
    for _ in 0..3 {
        let got = xattr::get(f.mp.join("pkg"), "user.overlay.opaque").expect("getxattr");
        assert_eq!(
            got.as_deref(),
            Some(&b"y"[..]),
            "overlayfs must see the mark"
        );
    }
    let none = xattr::get(f.mp.join(small(0)), "user.overlay.opaque").expect("getxattr");
    assert_eq!(none, None);
}

#[test]
fn concurrent_first_opens_of_small_files_read_the_right_bytes() {
    if !can_mount() {
        return;
    }
    let f = Arc::new(fixture(false));
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..8 {
        let (f, tx) = (f.clone(), tx.clone());
        std::thread::spawn(move || {
            for k in 0..20 {
                f.same(&small((k + t * 3) % 20));
            }
            let _ = tx.send(t);
        });
    }
    for _ in 0..8 {
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("every reader finishes: an open never waits on a read of its own file");
    }
    let c = f.mounted().counters();
    assert_eq!(c.prefilled, 20, "each file put in once: {c:?}");
}

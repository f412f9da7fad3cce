//! A read waiting on a slow chunk source must not hold up other requests, and concurrent
//! readers of one missing chunk share a single fetch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use manifest::build::NoProgress;
use manifest::{BuildOptions, EntryKind, FileData, IndexId};
use peertree::relay::ChunkNo;
use seeder::DirStore;
use teesfs_node::fs::mount::{MountConfig, mount};
use teesfs_node::source::{ChunkFuture, ChunkSource, StoreSource};
use tokio::sync::Semaphore;

use crate::util::can_mount;

/// Holds back fetches of one chunk until released; counts fetches per chunk.
struct GatedSource {
    inner: StoreSource,
    gated: ChunkNo,
    gate: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    fetches: Arc<std::sync::Mutex<HashMap<ChunkNo, usize>>>,
}

impl ChunkSource for GatedSource {
    fn fetch(&self, at: ChunkNo) -> ChunkFuture {
        *self
            .fetches
            .lock()
            .expect("not poisoned")
            .entry(at)
            .or_default() += 1;
        let inner = self.inner.fetch(at);
        if at != self.gated {
            return inner;
        }
        let gate = self.gate.clone();
        let waiting = self.waiting.clone();
        Box::pin(async move {
            waiting.fetch_add(1, Ordering::SeqCst);
            let _permit = gate.acquire().await.expect("gate open");
            inner.await
        })
    }

    fn is_local(&self, _at: ChunkNo) -> bool {
        false
    }
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_slow_chunk_does_not_block_other_reads_and_is_fetched_once() {
    if !can_mount() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = tmp.path().join("layer");
    std::fs::create_dir_all(layer.join("other")).expect("mkdir");
    let slow: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    std::fs::write(layer.join("slow.bin"), &slow).expect("write");
    for i in 0..20 {
        std::fs::write(
            layer.join(format!("other/f{i}")),
            format!("{i}").repeat(5000 + i),
        )
        .expect("write");
    }
    let store = DirStore::create(&tmp.path().join("store")).expect("store");
    let (index, _) =
        manifest::build(&layer, &BuildOptions::default(), &store, &NoProgress).expect("build");
    let slow_entry = index
        .entries
        .iter()
        .find(|e| &e.name[..] == b"slow.bin")
        .expect("slow.bin");
    let EntryKind::File {
        data: FileData::Chunks(slots),
        ..
    } = &slow_entry.kind
    else {
        panic!("slow.bin is chunked");
    };
    let gated = ChunkNo::at(slots[0].chunk_index().expect("not a hole")).expect("a chunk number");

    let gate = Arc::new(Semaphore::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let fetches = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let source = GatedSource {
        inner: StoreSource::new(store, &index),
        gated,
        gate: gate.clone(),
        waiting: waiting.clone(),
        fetches: fetches.clone(),
    };
    let mp = tmp.path().join("mnt");
    std::fs::create_dir_all(&mp).expect("mountpoint");
    let mounted = mount(
        index,
        IndexId::of(b"test"),
        Arc::new(source),
        &mp,
        &MountConfig::default(),
    )
    .expect("mount");

    // Four readers of the slow file: all block on the one gated chunk.
    let (done_tx, done_rx) = mpsc::channel();
    for _ in 0..4 {
        let path = mp.join("slow.bin");
        let tx = done_tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(path));
        });
    }
    wait_until("the slow fetch to start", || {
        waiting.load(Ordering::SeqCst) >= 1
    });

    // Meanwhile other requests complete: listings, stats and reads of other files.
    let names: Vec<_> = std::fs::read_dir(mp.join("other"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 20);
    for i in 0..20 {
        let got = std::fs::read(mp.join(format!("other/f{i}"))).expect("read other file");
        assert_eq!(got, format!("{i}").repeat(5000 + i).into_bytes());
    }
    assert!(
        done_rx.try_recv().is_err(),
        "the slow read finished before its chunk was released"
    );

    gate.add_permits(1000);
    for _ in 0..4 {
        let got = done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("slow reader finishes once released")
            .expect("read succeeds");
        assert!(got == slow, "slow.bin read back wrong bytes");
    }
    let n = fetches.lock().expect("not poisoned")[&gated];
    assert_eq!(
        n, 1,
        "one fetch for the shared missing chunk, not one per reader"
    );
    drop(mounted);
}

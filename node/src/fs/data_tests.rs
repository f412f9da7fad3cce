//! The single flight and the read bound, without a mount: a source that counts its
//! fetches and answers when the test lets it.

use super::*;
use manifest::build::{BuildOptions, ChunkSink, NoProgress, build};
use manifest::{ChunkId, ChunkInfo};

/// Chunks kept in memory by the build.
#[derive(Default)]
struct Mem(Mutex<HashMap<ChunkId, Vec<u8>>>);

impl ChunkSink for Mem {
    fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<manifest::StoredForm> {
        None
    }
    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        lock(&self.0).insert(*id, stored.to_vec());
        Ok(())
    }
}

/// How the test source answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The stored bytes, once the gate opens.
    Honest,
    /// The stored bytes with one byte flipped: a lying peer.
    Corrupt,
    /// Never.
    Silent,
    /// Plain bytes it verified itself, as a node hands over a chunk that just arrived.
    Verified,
    /// The stored bytes, at once on the reader's thread (a local store); fetches wait
    /// for the gate like `Honest`.
    Local,
}

struct Source {
    table: Vec<ChunkInfo>,
    chunks: HashMap<ChunkId, Vec<u8>>,
    fetches: std::sync::atomic::AtomicUsize,
    locals: std::sync::atomic::AtomicUsize,
    gate: tokio::sync::watch::Receiver<bool>,
    mode: Mutex<Mode>,
}

impl ChunkSource for Source {
    fn fetch(&self, at: ChunkNo) -> crate::source::ChunkFuture {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let chunk = self.table[at.index()];
        let mut bytes = self.chunks.get(&chunk.id).cloned().unwrap_or_default();
        let mode = *lock(&self.mode);
        if mode == Mode::Corrupt
            && let Some(b) = bytes.last_mut()
        {
            *b ^= 0x5a;
        }
        let mut gate = self.gate.clone();
        let verified = (mode == Mode::Verified)
            .then(|| manifest::verify_chunk(bytes.clone().into(), &chunk.id, chunk.plain_len));
        Box::pin(async move {
            if mode == Mode::Silent {
                std::future::pending::<()>().await;
            }
            let _ = gate.wait_for(|open| *open).await;
            Ok(match verified {
                Some(v) => Fetched::Verified(v?.1),
                None => Fetched::Stored(bytes.into()),
            })
        })
    }
    fn is_local(&self, _at: ChunkNo) -> bool {
        *lock(&self.mode) == Mode::Local
    }

    fn fetch_local(&self, at: ChunkNo) -> Option<Result<Fetched, crate::Error>> {
        let chunk = self.table[at.index()];
        (*lock(&self.mode) == Mode::Local).then(|| {
            self.locals.fetch_add(1, Ordering::SeqCst);
            Ok(Fetched::Stored(
                self.chunks
                    .get(&chunk.id)
                    .cloned()
                    .unwrap_or_default()
                    .into(),
            ))
        })
    }
}

/// A one-file layer of three 64 KiB chunks; the data, its source, and the gate.
fn setup(mode: Mode) -> (Arc<Data>, Arc<Source>, tokio::sync::watch::Sender<bool>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let content: Vec<u8> = (0..3 * 65536u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.path().join("f"), &content).expect("write");
    let sink = Mem::default();
    let opts = BuildOptions {
        chunk_size: 65536,
        ..BuildOptions::default()
    };
    let (index, _) = build(dir.path(), &opts, &sink, &NoProgress).expect("build");
    assert_eq!(index.chunks.len(), 3);
    let (open, gate) = tokio::sync::watch::channel(false);
    let source = Arc::new(Source {
        table: index.chunks.clone(),
        chunks: sink.0.into_inner().expect("sink"),
        fetches: Default::default(),
        locals: Default::default(),
        gate,
        mode: Mutex::new(mode),
    });
    let data = Data::new(Arc::new(Tree::new(index)), source.clone(), 1 << 20)
        .with_read_timeout(Duration::from_millis(300))
        .with_failure_memory(Duration::from_millis(300));
    (Arc::new(data), source, open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_of_a_chunk_share_one_fetch() {
    let (data, source, open) = setup(Mode::Honest);
    let readers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(data.clone().chunk(ChunkNo(1))))
        .collect();
    // Every reader is waiting on the one fetch before it is answered.
    while lock(&data.inflight).is_empty() {
        tokio::task::yield_now().await;
    }
    open.send_replace(true);
    let mut got = Vec::new();
    for r in readers {
        got.push(r.await.expect("reader").expect("chunk"));
    }
    assert_eq!(
        source.fetches.load(Ordering::SeqCst),
        1,
        "one fetch for eight readers"
    );
    assert!(got.iter().all(|c| c[..] == got[0][..]));
    assert_eq!(got[0].len(), 65536);
    // Cached now: no further fetch.
    data.clone().chunk(ChunkNo(1)).await.expect("cached");
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
    assert!(lock(&data.inflight).is_empty(), "the flight is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_must_wait_only_for_chunks_neither_cached_nor_local() {
    let (data, _source, open) = setup(Mode::Honest);
    let file = EntryIdx(1);
    assert!(data.must_wait(file, 0, 100), "nothing is here yet");
    open.send_replace(true);
    data.clone().chunk(ChunkNo(0)).await.expect("chunk");
    assert!(!data.must_wait(file, 0, 100), "cached");
    assert!(
        data.must_wait(file, 65536 - 10, 20),
        "straddles into chunk 1"
    );
    assert!(
        !data.must_wait(file, 4 * 65536, 100),
        "past the end: nothing to wait for"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_chunk_is_refused_not_cached_and_fetched_again() {
    let (data, source, open) = setup(Mode::Corrupt);
    open.send_replace(true);
    let err = data.clone().chunk(ChunkNo(0)).await.expect_err("corrupt");
    assert!(matches!(err, FsError::Corrupt(_)), "{err}");
    assert_eq!(data.stats().corrupt, 1);
    *lock(&source.mode) = Mode::Honest;
    let chunk = data.clone().chunk(ChunkNo(0)).await.expect("honest now");
    assert_eq!(chunk.len(), 65536);
    assert_eq!(
        source.fetches.load(Ordering::SeqCst),
        2,
        "the bad bytes were not kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_verified_by_its_source_is_not_decoded_again() {
    let (data, _source, open) = setup(Mode::Verified);
    open.send_replace(true);
    let a = data
        .clone()
        .chunk(ChunkNo(0))
        .await
        .expect("verified by the source");
    assert_eq!(data.stats().decoded, 0, "checked once, by the source");
    let (stored, _, open) = setup(Mode::Honest);
    open.send_replace(true);
    let b = stored
        .clone()
        .chunk(ChunkNo(0))
        .await
        .expect("stored bytes");
    assert_eq!(
        stored.stats().decoded,
        1,
        "stored bytes are checked by the reader"
    );
    assert_eq!(a[..], b[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_never_comes_fails_within_the_read_bound() {
    let (data, _source, _open) = setup(Mode::Silent);
    let t0 = std::time::Instant::now();
    let err = data
        .clone()
        .chunk(ChunkNo(2))
        .await
        .expect_err("never answered");
    assert!(matches!(err, FsError::TimedOut { .. }), "{err}");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(
        lock(&data.inflight).is_empty(),
        "a failed flight is not left behind"
    );
}

/// Issue 29 item 9: after a fetch timed out, reads of that chunk fail at once for a while
/// (the kernel's retry of a failed read, a reader going on through the file) instead of
/// each waiting the bound again; then the chunk is fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_could_not_be_had_fails_again_at_once_for_a_while() {
    let (data, source, _open) = setup(Mode::Silent);
    data.clone()
        .chunk(ChunkNo(2))
        .await
        .expect_err("never answered");
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
    let t0 = std::time::Instant::now();
    for _ in 0..3 {
        let err = data
            .clone()
            .chunk(ChunkNo(2))
            .await
            .expect_err("still not to be had");
        assert!(matches!(err, FsError::TimedOut { .. }), "{err}");
    }
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1, "no new fetch");
    // Remembered for the failure memory (300 ms here): then fetched again.
    tokio::time::sleep(Duration::from_millis(350)).await;
    data.clone()
        .chunk(ChunkNo(2))
        .await
        .expect_err("never answered");
    assert_eq!(source.fetches.load(Ordering::SeqCst), 2, "fetched again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_chunks_are_read_now_once_each() {
    let (data, source, _gate) = setup(Mode::Local);
    let file = EntryIdx(1);
    let whole = data.read_now(file, 0, 65536).expect("local").expect("read");
    assert_eq!(whole.len(), 65536);
    let part = data
        .read_now(file, 65536 + 100, 200)
        .expect("local")
        .expect("read");
    assert_eq!(part.len(), 200);
    let rest = data
        .read_now(file, 65536 + 300, 100)
        .expect("cached")
        .expect("read");
    assert_eq!(rest.len(), 100);
    assert!(data.cached(ChunkNo(0)).is_some() && data.cached(ChunkNo(1)).is_some());
    assert_eq!(
        source.locals.load(Ordering::SeqCst),
        2,
        "each chunk read once"
    );
    assert_eq!(
        source.fetches.load(Ordering::SeqCst),
        0,
        "nothing waited for"
    );
    assert_eq!(data.stats().local, 2);
    assert!(lock(&data.inflight).is_empty(), "no flight left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_now_leaves_a_chunk_in_flight_to_its_owner() {
    let (data, source, open) = setup(Mode::Local);
    let file = EntryIdx(1);
    let owner = tokio::spawn(data.clone().chunk(ChunkNo(2)));
    while lock(&data.inflight).is_empty() {
        tokio::task::yield_now().await;
    }
    assert!(
        data.read_now(file, 2 * 65536, 10).is_none(),
        "another reader owns the flight: this read joins it the slow way"
    );
    open.send_replace(true);
    owner.await.expect("owner").expect("chunk");
    let r = data.read_now(file, 2 * 65536, 10).expect("cached now");
    assert_eq!(r.expect("read").len(), 10);
    assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(
        source.locals.load(Ordering::SeqCst),
        0,
        "decoded once, by the owner"
    );
}

#[test]
fn a_source_without_local_chunks_sends_reads_the_slow_way() {
    let (data, _source, _gate) = setup(Mode::Honest);
    assert!(data.read_now(EntryIdx(1), 0, 100).is_none());
    assert!(
        lock(&data.inflight).len() == 1,
        "the flight stays unclaimed for the slow read to take"
    );
}

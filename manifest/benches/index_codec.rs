//! Index encode and load at 1,000,000 entries.
//!
//! Two synthetic layers with the same shape (5% directories, 5% symlinks, 1% hard links,
//! the rest regular files of one to a few 1 MiB chunks, every chunk id unique; siblings in
//! name order, as the builder writes them):
//! - `meta`: no inline files, so the index is metadata and chunk ids only;
//! - `inline`: like the Python standard library, where a fifth of the files are at most
//!   2 KiB (mean ~900 bytes of text) and live inside the index.
//!
//! `sign` is what `publish` does (encode, zstd-3, hash, sign); `open` is what `mount` does
//! (check the id, verify the signature, decompress, decode and validate). Sizes per entry
//! are printed before the timings.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use manifest::{
    ChunkId, ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Limits, Meta,
    SecretKey, SignedIndex, Slot,
};

const ENTRIES: u32 = 1_000_000;
const CHUNK: u32 = 1 << 20;

/// A small deterministic generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "def", "self", "return", "import", "from", "class", "if", "else", "for", "in", "None", "True",
    "False", "value", "name", "path", "os", "sys", "len", "raise", "Error", "args", "kwargs",
    "data", "result", "(", ")", ":", "=", ",", "\n    ", "\n",
];

fn text(rng: &mut Rng, len: usize) -> Box<[u8]> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
        out.push(b' ');
    }
    out.truncate(len);
    out.into()
}

/// Random chunk ids for a file of `size` bytes, appended to `chunks`; the file's slots.
fn file_chunks(rng: &mut Rng, chunks: &mut Vec<ChunkInfo>, size: u64) -> Vec<Slot> {
    let n = size.div_ceil(u64::from(CHUNK));
    (0..n)
        .map(|pos| {
            let plain_len = (size - pos * u64::from(CHUNK)).min(u64::from(CHUNK)) as u32;
            let mut id = [0u8; 32];
            for w in id.chunks_mut(8) {
                w.copy_from_slice(&rng.next().to_le_bytes());
            }
            chunks.push(ChunkInfo {
                id: ChunkId(id),
                plain_len,
                stored_len: plain_len / 3 + 1,
                stored_hash: None,
            });
            Slot::chunk((chunks.len() - 1) as u32)
        })
        .collect()
}

fn layer(inline_share: u64) -> Index {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut chunks: Vec<ChunkInfo> = Vec::new();
    let mut entries: Vec<Entry> = Vec::with_capacity(ENTRIES as usize);
    let mut dirs: Vec<u32> = vec![0];
    let mut files: Vec<u32> = Vec::new();
    let meta = |rng: &mut Rng, mode| Meta {
        mode,
        uid: 1000,
        gid: 1000,
        mtime: 1_700_000_000 + rng.below(50_000_000) as i64,
        mtime_nsec: rng.below(1_000_000_000) as u32,
    };
    entries.push(Entry {
        parent: EntryIdx::ROOT,
        name: Box::default(),
        meta: meta(&mut rng, 0o755),
        flags: EntryFlags::default(),
        kind: EntryKind::Dir,
    });
    for i in 1..ENTRIES {
        // Recent directories are likelier parents, as in a depth-first walk.
        let back = (rng.below(64) + 1).min(dirs.len() as u64) as usize;
        let parent = dirs[dirs.len() - back];
        let roll = rng.below(100);
        let (name, mode, kind) = if roll < 5 {
            dirs.push(i);
            (format!("n{i:07}_pkg"), 0o755, EntryKind::Dir)
        } else if roll < 10 {
            let target = format!("../lib/libfoo.so.{}", rng.below(100)).into_bytes();
            (
                format!("n{i:07}_lib.so"),
                0o777,
                EntryKind::Symlink {
                    target: target.into(),
                },
            )
        } else if roll < 11 && !files.is_empty() {
            let target = files[rng.below(files.len() as u64) as usize];
            (
                format!("n{i:07}_link"),
                0,
                EntryKind::Hardlink {
                    target: EntryIdx(target),
                },
            )
        } else if rng.below(100) < inline_share {
            files.push(i);
            let len = 100 + rng.below(1700) as usize;
            (
                format!("n{i:07}_mod.py"),
                0o644,
                EntryKind::File {
                    size: len as u64,
                    data: FileData::Inline(text(&mut rng, len)),
                },
            )
        } else {
            files.push(i);
            let size = match rng.below(10) {
                0 => u64::from(CHUNK) * (1 + rng.below(3)) + rng.below(u64::from(CHUNK)),
                _ => 4096 + rng.below(u64::from(CHUNK) - 4096),
            };
            let slots = file_chunks(&mut rng, &mut chunks, size);
            (
                format!("n{i:07}_data.bin"),
                0o644,
                EntryKind::File {
                    size,
                    data: FileData::Chunks(slots.into()),
                },
            )
        };
        let meta = match kind {
            EntryKind::Hardlink { target } => entries[target.get()].meta,
            _ => meta(&mut rng, mode),
        };
        entries.push(Entry {
            parent: EntryIdx(parent),
            name: name.into_bytes().into(),
            meta,
            flags: EntryFlags::default(),
            kind,
        });
    }
    Index {
        chunk_size: CHUNK,
        chunks,
        entries,
        urgent: Vec::new(),
        image: None,
    }
}

/// Length of the decompressed body, read from the zstd frame header in the envelope.
fn body_len(signed: &SignedIndex) -> u64 {
    let bytes = signed.as_bytes();
    let frame = bytes
        .windows(4)
        .position(|w| w == [0x28, 0xb5, 0x2f, 0xfd])
        .expect("the envelope holds a zstd frame");
    zstd::zstd_safe::get_frame_content_size(&bytes[frame..])
        .ok()
        .flatten()
        .unwrap_or(0)
}

fn bench(c: &mut Criterion) {
    let key = SecretKey::generate().expect("the OS has randomness");
    let trusted = [key.public()];
    let limits = Limits::default();
    for (label, inline_share) in [("meta", 0), ("inline", 20)] {
        let index = layer(inline_share);
        let signed = SignedIndex::sign(&index, &key, 3);
        let id = signed.id();
        let n = index.entries.len() as f64;
        println!(
            "index_1m/{label}: {} entries, {} chunks; body {:.1} B/entry, signed {:.1} B/entry ({:.1} MiB)",
            index.entries.len(),
            index.chunks.len(),
            body_len(&signed) as f64 / n,
            signed.as_bytes().len() as f64 / n,
            signed.as_bytes().len() as f64 / f64::from(1 << 20),
        );
        let mut g = c.benchmark_group(format!("index_1m/{label}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(5));
        g.bench_function("sign", |b| {
            b.iter(|| SignedIndex::sign(black_box(&index), &key, 3))
        });
        // The envelope bytes are copied (as a file read would produce them) and the index
        // dropped outside the timed part: neither is loading.
        g.bench_function("open", |b| {
            b.iter_batched(
                || signed.as_bytes().to_vec(),
                |bytes| {
                    SignedIndex::open(black_box(bytes), Some(id), &trusted, &limits)
                        .expect("valid index")
                },
                BatchSize::LargeInput,
            )
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! CPU per chunk on a relay node's data path, without a network: the work a daemon does for
//! one chunk that arrives from its parent, is kept, is forwarded to two children and is
//! read once through the mount. Run it under callgrind to count instructions:
//!
//! ```text
//! cargo build --release -p teesfs-node --example chunk_path
//! valgrind --tool=callgrind --toggle-collect='chunk_path::per_chunk*' \
//!     target/release/examples/chunk_path raw 16
//! ```
//!
//! The first argument is the kind of chunk (`raw`: incompressible, stored as is; `zstd`:
//! text-like, stored compressed), the second how many distinct 1 MiB chunks go through,
//! the third the store's memory for recent chunks in bytes (default 32 MiB; 0 makes every
//! send and read go to the chunk's file, as a chunk that left that memory does).
//! Setup (making and encoding the chunks) is outside `per_chunk`, so only the path counts.

use std::hint::black_box;

use bytes::Bytes;
use manifest::{ChunkId, encode_chunk, verify_chunk};
use peertree::relay::{ChunkNo, JobId, Msg, Routed};
use seeder::{ChunkStore, StoredChunk};
use teesfs_node::peers::{chunk_head, frame, unframe};
use teesfs_node::store::NodeStore;

const CHUNK: usize = 1 << 20;

fn plain(kind: &str, n: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK);
    if kind == "raw" {
        let mut xof = blake3::Hasher::new()
            .update(&n.to_le_bytes())
            .finalize_xof();
        out.resize(CHUNK, 0);
        xof.fill(&mut out);
    } else {
        let mut i = 0u32;
        while out.len() < CHUNK {
            let h = blake3::hash(&[n.to_le_bytes(), i.to_le_bytes()].concat());
            let line = format!(
                "line {i} of chunk {n}: value {}\n",
                &h.to_hex()[..(i % 24) as usize]
            );
            out.extend_from_slice(line.as_bytes());
            i += 1;
        }
        out.truncate(CHUNK);
    }
    out
}

#[inline(never)]
fn per_chunk(store: &NodeStore, job: JobId, id: ChunkId, frame_bytes: Vec<u8>) {
    // The stream reader: the frame as `FrameReceiver::recv` hands it over.
    let (job_in, msg) = unframe(Bytes::from(frame_bytes)).expect("a chunk frame");
    let Routed::Chunk { chunk, data, .. } = msg else {
        panic!("not a chunk")
    };
    // `JobCore::on_chunk` (on the blocking pool): verified, then kept; the plain bytes go
    // to the waiting readers, of which there are none here.
    let (checked, plain) = verify_chunk(data, &id, CHUNK as u32).expect("valid");
    store.put_checked(&checked).expect("stored");
    drop((checked, plain));
    // Two pumps: `JobCore::chunk_bytes` and the frame's head (the bytes are shared).
    for _ in 0..2 {
        let data = match ChunkStore::get_cached(store, &id)
            .or_else(|| ChunkStore::get(store, &id))
            .expect("held")
        {
            StoredChunk::Checked(c) => c.stored().clone(),
            StoredChunk::Unchecked(b) => b,
        };
        let head = chunk_head(job_in, chunk, false, data.len());
        black_box((head, data));
    }
    // A read through the mount: `JobCore::want` then `Data::fetch_verified`.
    let plain = match ChunkStore::get_cached(store, &id)
        .or_else(|| ChunkStore::get(store, &id))
        .expect("held")
    {
        StoredChunk::Checked(c) => c.plain().expect("decodes").into_bytes(),
        StoredChunk::Unchecked(b) => verify_chunk(b, &id, CHUNK as u32)
            .expect("valid")
            .1
            .into_bytes(),
    };
    black_box(plain);
    let _ = job;
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map_or("raw", String::as_str).to_owned();
    let n: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    let recent: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32 << 20);
    let store = NodeStore::open(&dir.path().join("store"), 1 << 40, recent).expect("store");
    let job = JobId(7);
    let chunks: Vec<(ChunkId, Vec<u8>)> = (0..n)
        .map(|i| {
            let p = plain(&kind, i);
            let stored = encode_chunk(&p, 1);
            let msg = Msg::Chunk {
                chunk: ChunkNo(i),
                demand: false,
                data: stored,
            };
            (ChunkId::of(&p), frame(job, &msg))
        })
        .collect();
    eprintln!(
        "{n} {kind} chunks, {} stored bytes each on average",
        chunks.iter().map(|c| c.1.len()).sum::<usize>() / n.max(1) as usize
    );
    for (id, f) in chunks {
        per_chunk(&store, job, id, f);
    }
}

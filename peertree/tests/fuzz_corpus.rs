//! The fuzz corpus as an ordinary test: the committed seeds are exactly what
//! [`seeds`] generates (valid encodings of every index entry kind and every wire message), and
//! every file under `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` passes the same
//! checks the libFuzzer targets run (`fuzz/src/checks.rs`, included here by path), so a crash
//! the fuzzer once found stays fixed even where cargo-fuzz is not installed.
//!
//! Regenerate the seeds after a format change with
//! `TEESFS_WRITE_FUZZ_SEEDS=1 cargo test -p peertree --test fuzz_corpus`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use manifest::{
    ChunkId, ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Meta, SecretKey,
    SignedIndex, Slot,
};
use peertree::NodeId;
use peertree::relay::{ChunkNo, JobId, Msg, NodeInfo, Phase, Prepare, Report, Start, Timing};

#[path = "../../fuzz/src/checks.rs"]
#[allow(dead_code, missing_docs)]
mod checks;

/// What a fuzz target checks about one input.
type Check = fn(&[u8]);

/// The fuzz targets, each with its check.
const TARGETS: [(&str, Check); 4] = [
    ("index_body", checks::index_body),
    ("signed_index", checks::signed_index),
    ("wire", checks::wire),
    ("chunk", checks::chunk),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn entry(parent: u32, name: &str, kind: EntryKind, urgent: bool) -> Entry {
    Entry {
        parent: EntryIdx(parent),
        name: name.as_bytes().into(),
        meta: Meta {
            mode: if matches!(kind, EntryKind::Dir) {
                0o755
            } else {
                0o4755
            },
            uid: 0,
            gid: 0,
            mtime: 1_700_000_000,
            mtime_nsec: 5,
        },
        flags: EntryFlags(if urgent { EntryFlags::URGENT } else { 0 }),
        kind,
    }
}

/// Small valid indexes: every entry kind, holes, a shared chunk, and siblings out of name
/// order (which takes the decoder's slower duplicate-name path).
fn indexes() -> Vec<(&'static str, Index)> {
    let cs = 4096u32;
    let a = vec![1u8; cs as usize];
    let b = b"tail".to_vec();
    let chunks = vec![
        ChunkInfo {
            id: ChunkId::of(&a),
            plain_len: cs,
            stored_len: 20,
            // A compressed chunk's stored hash: the corpus holds version 4 indexes.
            stored_hash: Some(manifest::StoredHash::of(b"a, compressed")),
        },
        ChunkInfo {
            id: ChunkId::of(&b),
            plain_len: 4,
            stored_len: 5,
            stored_hash: None,
        },
    ];
    let file = |slots: Vec<Slot>, size| EntryKind::File {
        size,
        data: FileData::Chunks(slots.into()),
    };
    let kinds = Index {
        chunk_size: cs,
        chunks: chunks.clone(),
        entries: vec![
            entry(0, "", EntryKind::Dir, true),
            entry(0, "bin", EntryKind::Dir, true),
            entry(
                1,
                "app",
                file(
                    vec![Slot::chunk(0), Slot::HOLE, Slot::chunk(1)],
                    2 * u64::from(cs) + 4,
                ),
                true,
            ),
            entry(
                1,
                "small",
                EntryKind::File {
                    size: 3,
                    data: FileData::Inline((*b"abc").into()),
                },
                false,
            ),
            entry(
                0,
                "link",
                EntryKind::Symlink {
                    target: (*b"bin/app").into(),
                },
                false,
            ),
            entry(
                1,
                "same",
                EntryKind::Hardlink {
                    target: EntryIdx(2),
                },
                false,
            ),
            entry(0, "empty", file(vec![], 0), false),
        ],
        urgent: vec![EntryIdx(2), EntryIdx(0), EntryIdx(1)],
        image: None,
    };
    let unsorted = Index {
        chunk_size: cs,
        chunks,
        entries: vec![
            entry(0, "", EntryKind::Dir, false),
            entry(0, "z", EntryKind::Dir, false),
            entry(0, "a", file(vec![Slot::chunk(0)], u64::from(cs)), false),
            entry(1, "y", EntryKind::Dir, false),
            entry(1, "b", file(vec![Slot::chunk(0)], u64::from(cs)), false),
        ],
        urgent: vec![],
        image: None,
    };
    let root_only = Index {
        chunk_size: 1 << 20,
        chunks: vec![],
        entries: vec![entry(0, "", EntryKind::Dir, false)],
        urgent: vec![],
        image: None,
    };
    vec![
        ("kinds", kinds),
        ("unsorted", unsorted),
        ("root-only", root_only),
    ]
}

fn messages(signed: &[u8]) -> Vec<(&'static str, Msg)> {
    let node = |id, parent| NodeInfo {
        id: NodeId(id),
        host: format!("cn{id:04}"),
        addr: format!("10.0.0.{id}:7878"),
        parent: NodeId(parent),
        group: Some(0),
        rate: Some(100_000_000),
    };
    vec![
        (
            "start",
            Msg::Start(Box::new(Start {
                job: JobId(0x1234_5678_9abc),
                index: signed.to_vec(),
                order: vec![ChunkNo(1), ChunkNo(0)],
                urgent: 1,
                subtree: vec![node(1, 0), node(2, 1)],
                ancestors: vec![node(0, 0)],
                timing: Timing::default(),
                shared_store: Some("/shared/store".into()),
                probe: false,
                owner: Some(1000),
                kin: vec![node(1, 0), node(3, 0)],
                root_clock_ms: Some(1_780_000_000_000),
            })),
        ),
        (
            "chunk",
            Msg::Chunk {
                chunk: ChunkNo(1),
                demand: true,
                data: manifest::encode_chunk(b"tail", 1),
            },
        ),
        ("want", Msg::Want { chunk: ChunkNo(7) }),
        (
            "report",
            Msg::Report(Report {
                done: vec![(NodeId(2), Phase::Urgent), (NodeId(2), Phase::All)],
                failed: vec![(NodeId(1), NodeId(3))],
                liars: vec![(NodeId(0), NodeId(1))],
                attached: vec![(NodeId(0), NodeId(2))],
                edge_bytes: vec![(NodeId(0), NodeId(1), 1 << 30)],
                edge_rtt: vec![(NodeId(0), NodeId(1), 1500)],
                activity: 3,
                refused: vec![(NodeId(4), "index expired".into())],
            }),
        ),
        ("ping", Msg::Ping),
        (
            "attach",
            Msg::Attach {
                have: vec![u64::MAX, 0b1011],
            },
        ),
        ("adopted", Msg::Adopted),
        (
            "refused",
            Msg::Refused {
                reason: "index revoked on this node".into(),
            },
        ),
        ("finished", Msg::Finished),
        (
            "prepare",
            Msg::Prepare(Prepare {
                subtree: vec![node(1, 0), node(2, 1), node(3, 2)],
            }),
        ),
    ]
}

/// Every seed, by target and file name (`seed-*`). Deterministic: the signing key is fixed.
fn seeds() -> BTreeMap<(&'static str, String), Vec<u8>> {
    let key = SecretKey::from_file_text(&format!("teesfs-publisher-secret-v1 {}", "07".repeat(32)))
        .expect("fixed key");
    let mut out = BTreeMap::new();
    let mut first_signed = Vec::new();
    for (name, index) in indexes() {
        out.insert(("index_body", format!("seed-{name}")), index.encode_body());
        let signed = SignedIndex::sign(&index, &key, 3).as_bytes().to_vec();
        if first_signed.is_empty() {
            first_signed = signed.clone();
        }
        out.insert(("signed_index", format!("seed-{name}")), signed);
    }
    for (name, msg) in messages(&first_signed) {
        out.insert(("wire", format!("seed-{name}")), msg.encode());
    }
    let mut compressible = 4096u32.to_le_bytes().to_vec();
    compressible.extend(manifest::encode_chunk(&[9u8; 4096], 1));
    out.insert(("chunk", "seed-zstd".into()), compressible);
    let mut raw = 4u32.to_le_bytes().to_vec();
    raw.extend(manifest::encode_chunk(b"tail", 1));
    out.insert(("chunk", "seed-raw".into()), raw);
    out
}

#[test]
fn committed_fuzz_seeds_are_the_generated_valid_encodings() {
    let write = std::env::var_os("TEESFS_WRITE_FUZZ_SEEDS").is_some();
    let limits = checks::limits();
    for ((target, name), bytes) in seeds() {
        match target {
            "index_body" => {
                Index::decode_body(&bytes, &limits).expect("index seed decodes");
            }
            "signed_index" => {
                let signed = SignedIndex::from_bytes(bytes.clone(), &limits).expect("envelope");
                signed
                    .verify(&[signed.publisher().expect("key")])
                    .expect("signature");
                signed.decode(&limits).expect("signed seed decodes");
            }
            "wire" => {
                Msg::decode(&bytes).expect("wire seed decodes");
            }
            _ => {}
        }
        let path = fuzz_dir().join("corpus").join(target).join(&name);
        if write {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
            std::fs::write(&path, &bytes).expect("write seed");
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; regenerate with TEESFS_WRITE_FUZZ_SEEDS=1",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} is stale; regenerate with TEESFS_WRITE_FUZZ_SEEDS=1",
            path.display()
        );
    }
}

#[test]
fn every_corpus_and_regression_input_passes_the_fuzz_checks() {
    let mut ran = 0;
    for (target, check) in TARGETS {
        for dir in ["corpus", "regressions"] {
            let Ok(files) = std::fs::read_dir(fuzz_dir().join(dir).join(target)) else {
                continue;
            };
            for file in files {
                let path = file.expect("dir entry").path();
                let bytes = std::fs::read(&path).expect("read input");
                let result = std::panic::catch_unwind(|| check(&bytes));
                assert!(
                    result.is_ok(),
                    "{target} check panicked on {}",
                    path.display()
                );
                ran += 1;
            }
        }
    }
    assert!(ran >= 15, "only {ran} corpus inputs found under fuzz/");
}

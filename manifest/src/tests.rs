//! Codec and signature tests: round trips and every way a crafted index must be refused.

use crate::*;

fn meta() -> Meta {
    Meta {
        mode: 0o755,
        uid: 1000,
        gid: 100,
        mtime: -5,
        mtime_nsec: 42,
    }
}

fn entry(parent: u32, name: &[u8], kind: EntryKind) -> Entry {
    Entry {
        parent: EntryIdx(parent),
        name: name.into(),
        meta: meta(),
        flags: EntryFlags::default(),
        kind,
    }
}

fn sample() -> Index {
    let big = 5u64 << 30;
    let cs = 1u32 << 20;
    let n = big.div_ceil(u64::from(cs));
    let mut slots = vec![Slot::HOLE; n as usize];
    slots[3] = Slot::chunk(0);
    let mut index = Index {
        chunk_size: cs,
        chunks: vec![ChunkInfo {
            id: ChunkId::of(b"x"),
            plain_len: cs,
            stored_len: 100,
            stored_hash: None,
        }],
        entries: vec![
            entry(0, b"", EntryKind::Dir),
            entry(0, b"dir", EntryKind::Dir),
            entry(
                1,
                "ünï code\nname".as_bytes(),
                EntryKind::File {
                    size: 3,
                    data: FileData::Inline((*b"abc").into()),
                },
            ),
            entry(
                0,
                b"sparse",
                EntryKind::File {
                    size: big,
                    data: FileData::Chunks(slots.into()),
                },
            ),
            entry(
                0,
                b"link",
                EntryKind::Symlink {
                    target: (*b"../nowhere").into(),
                },
            ),
            entry(
                1,
                b"-hard",
                EntryKind::Hardlink {
                    target: EntryIdx(2),
                },
            ),
            entry(
                0,
                b"empty",
                EntryKind::File {
                    size: 0,
                    data: FileData::Chunks(Box::default()),
                },
            ),
        ],
        urgent: vec![],
        image: None,
    };
    // Not in entry order: the list keeps the order the files are needed in.
    index.set_urgent([EntryIdx(6), EntryIdx(2), EntryIdx(4)]);
    index
}

fn sign_and_open(index: &Index) -> Result<Index, Error> {
    let key = SecretKey::generate().expect("randomness");
    let signed = SignedIndex::sign(index, &key, 3);
    SignedIndex::open(
        signed.as_bytes().to_vec(),
        Some(signed.id()),
        &[key.public()],
        &Limits::default(),
    )
    .map(|(_, i)| i)
}

#[test]
fn round_trip_keeps_every_entry_kind() {
    let index = sample();
    let back = sign_and_open(&index).expect("valid index");
    assert_eq!(back, index);
    assert_eq!(back.path_of(EntryIdx(5)), b"dir/-hard");
    assert_eq!(back.urgent, [EntryIdx(6), EntryIdx(2), EntryIdx(4)]);
    let flagged: Vec<usize> = (0..back.entries.len())
        .filter(|&i| back.entries[i].flags.urgent())
        .collect();
    assert_eq!(flagged, [2, 4, 6]);
}

#[test]
fn urgent_list_out_of_range_or_repeated_is_refused() {
    let mut index = sample();
    index.urgent.push(EntryIdx(99));
    match refused(index) {
        Error::BadUrgentList {
            position: 3,
            entry: 99,
            reason,
        } => assert!(reason.contains("7 entries"), "{reason}"),
        other => panic!("expected a bad urgent list, got {other}"),
    }
    let mut index = sample();
    index.urgent.push(EntryIdx(2));
    match refused(index) {
        Error::BadUrgentList {
            position: 3,
            entry: 2,
            reason,
        } => assert!(reason.contains("twice"), "{reason}"),
        other => panic!("expected a bad urgent list, got {other}"),
    }
    // Longer than the entry table (and than the limit allows).
    let mut index = sample();
    index.urgent = (0..8).map(|_| EntryIdx(2)).collect();
    assert!(
        matches!(
            refused(index),
            Error::LimitExceeded {
                what: "urgent list length",
                ..
            }
        ),
        "the count is bounded by the entry count"
    );
}

#[test]
fn urgent_list_and_flags_must_agree() {
    let mut index = sample();
    index.urgent.push(EntryIdx(3));
    assert!(matches!(
        refused(index),
        Error::BadUrgentList {
            position: 3,
            entry: 3,
            ..
        }
    ));
    let mut index = sample();
    index.entries[3].flags.0 |= EntryFlags::URGENT;
    assert!(matches!(refused(index), Error::BadEntry { entry: 3, .. }));
}

#[test]
fn version_1_bodies_decode_with_the_flagged_entries_as_the_list() {
    let index = sample();
    let mut body = crate::codec::encode(&index);
    // Version 2 appends the list: a count and one byte per (small) entry position.
    body.truncate(body.len() - 1 - index.urgent.len());
    body[7] = 1;
    let back = crate::codec::decode(&body, &Limits::default()).expect("version 1 decodes");
    assert_eq!(back.urgent, [EntryIdx(2), EntryIdx(4), EntryIdx(6)]);
    assert_eq!(back.entries, index.entries);
    body[7] = 5;
    assert!(matches!(
        crate::codec::decode(&body, &Limits::default()),
        Err(Error::UnsupportedVersion { version: 5, .. })
    ));
}

/// Stored hashes round-trip in version 4, with or without an image; an index without them
/// keeps the older version's bytes, so its id does not change and older nodes read it.
#[test]
fn stored_hashes_round_trip_in_version_4_and_indexes_without_them_keep_their_bytes() {
    let plain = sample();
    let before = crate::codec::encode(&plain);
    assert_eq!(before[7], 2, "no image, no stored hash");
    let mut hashed = plain.clone();
    hashed.chunks[0].stored_hash = Some(crate::StoredHash::of(b"stored form"));
    hashed.chunks.push(ChunkInfo {
        id: ChunkId::of(b"raw"),
        plain_len: 10,
        stored_len: 11,
        stored_hash: None,
    });
    let body = crate::codec::encode(&hashed);
    assert_eq!(body[7], 4);
    let back = crate::codec::decode(&body, &Limits::default()).expect("decodes");
    assert_eq!(back.chunks, hashed.chunks);
    assert_eq!(back.entries, hashed.entries);
    assert_eq!(back.image, None);
    // A presence byte other than 0 or 1 is refused, naming the chunk.
    let at = body
        .windows(32)
        .position(|w| w == crate::StoredHash::of(b"stored form").0)
        .expect("hash written")
        - 1;
    let mut bad = body.clone();
    bad[at] = 2;
    assert!(matches!(
        crate::codec::decode(&bad, &Limits::default()),
        Err(Error::BadChunkTable { chunk: 0, .. })
    ));
    let mut cut = hashed.clone();
    for c in &mut cut.chunks {
        c.stored_hash = None;
    }
    cut.chunks.pop();
    assert_eq!(
        crate::codec::encode(&cut),
        before,
        "the same bytes as before"
    );
}

#[test]
fn urgent_paths_resolve_in_order_and_unknown_ones_are_named() {
    let mut index = sample();
    crate::set_urgent_paths(
        &mut index,
        &["sparse", "/dir/-hard", "./empty", "sparse", "link"],
    )
    .expect("all exist");
    assert_eq!(
        index.urgent,
        [EntryIdx(3), EntryIdx(5), EntryIdx(6), EntryIdx(4)]
    );
    assert!(!index.entries[2].flags.urgent(), "the old list is replaced");
    assert_eq!(sign_and_open(&index).expect("valid"), index);
    for (bad, says) in [
        ("dir/nope", "no entry dir/nope"),
        ("link/x", "link is a symlink"),
        ("sparse/x", "sparse is not a directory"),
        ("dir/../sparse", "`..`"),
        ("/", "root"),
    ] {
        let err = crate::set_urgent_paths(&mut sample(), &[bad]).expect_err(bad);
        let msg = err.to_string();
        assert!(msg.contains(bad) && msg.contains(says), "{bad}: {msg}");
    }
}

#[test]
fn tampered_index_is_refused() {
    let key = SecretKey::generate().expect("randomness");
    let signed = SignedIndex::sign(&sample(), &key, 3);
    let mut bytes = signed.as_bytes().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    let err = SignedIndex::open(bytes.clone(), None, &[key.public()], &Limits::default())
        .expect_err("tampered");
    assert!(matches!(err, Error::BadSignature { .. }), "{err}");
    let err = SignedIndex::open(
        bytes,
        Some(signed.id()),
        &[key.public()],
        &Limits::default(),
    )
    .expect_err("tampered");
    assert!(matches!(err, Error::IdMismatch { .. }), "{err}");
}

#[test]
fn wrong_key_is_refused() {
    let key = SecretKey::generate().expect("randomness");
    let other = SecretKey::generate().expect("randomness");
    let signed = SignedIndex::sign(&sample(), &key, 3);
    let err = SignedIndex::open(
        signed.as_bytes().to_vec(),
        None,
        &[other.public()],
        &Limits::default(),
    )
    .expect_err("untrusted");
    assert!(matches!(err, Error::UntrustedKey { .. }), "{err}");
}

#[test]
fn key_files_round_trip_and_kinds_are_not_confused() {
    let key = SecretKey::generate().expect("randomness");
    let text = key.to_file_text();
    let back = SecretKey::from_file_text(&text).expect("parses");
    assert_eq!(back.public(), key.public());
    let pubtext = key.public().to_file_text();
    assert_eq!(
        PublicKey::from_file_text(&pubtext).expect("parses"),
        key.public()
    );
    assert!(PublicKey::from_file_text(&text).is_err());
    assert!(SecretKey::from_file_text(&pubtext).is_err());
}

fn refused(index: Index) -> Error {
    sign_and_open(&index).expect_err("crafted index must be refused")
}

#[test]
fn bad_names_are_refused() {
    for name in [
        &b""[..],
        b".",
        b"..",
        b"a/b",
        b"nul\0byte",
        &[b'x'; 256][..],
    ] {
        let mut index = sample();
        index.entries[1].name = name.into();
        let err = refused(index);
        assert!(
            matches!(err, Error::BadName { entry: 1, .. }),
            "{name:?}: {err}"
        );
    }
}

#[test]
fn duplicate_names_are_refused() {
    let mut index = sample();
    index.entries[4].name = (*b"sparse").into();
    assert!(matches!(
        refused(index),
        Error::DuplicateName { entry: 4, .. }
    ));
}

#[test]
fn dangling_parent_is_refused() {
    let mut index = sample();
    index.entries[2].parent = EntryIdx(99);
    assert!(matches!(
        refused(index),
        Error::DanglingParent {
            entry: 2,
            parent: 99
        }
    ));
}

#[test]
fn cycles_and_forward_parents_are_refused() {
    let mut index = sample();
    index.entries[1].parent = EntryIdx(1);
    assert!(matches!(
        refused(index),
        Error::Cycle {
            entry: 1,
            parent: 1
        }
    ));
    let mut index = sample();
    index.entries[1].parent = EntryIdx(5);
    assert!(matches!(refused(index), Error::Cycle { .. }));
}

#[test]
fn parent_must_be_a_directory() {
    let mut index = sample();
    index.entries[4].parent = EntryIdx(3);
    assert!(matches!(
        refused(index),
        Error::ParentNotDirectory {
            entry: 4,
            parent: 3
        }
    ));
}

#[test]
fn hardlink_must_name_an_earlier_file() {
    let mut index = sample();
    index.entries[5].kind = EntryKind::Hardlink {
        target: EntryIdx(1),
    };
    assert!(matches!(
        refused(index),
        Error::BadHardlink { entry: 5, .. }
    ));
}

#[test]
fn size_and_chunk_list_must_agree() {
    let mut index = sample();
    if let EntryKind::File { size, .. } = &mut index.entries[2].kind {
        *size = 4;
    }
    assert!(matches!(refused(index), Error::BadEntry { entry: 2, .. }));
}

#[test]
fn limits_are_enforced() {
    let key = SecretKey::generate().expect("randomness");
    let signed = SignedIndex::sign(&sample(), &key, 3);
    let tight = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let err = signed.decode(&tight).expect_err("too many entries");
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                what: "entry count",
                ..
            }
        ),
        "{err}"
    );
    let tiny = Limits {
        max_body_bytes: 10,
        ..Limits::default()
    };
    assert!(matches!(
        signed.decode(&tiny),
        Err(Error::LimitExceeded { .. })
    ));
}

#[test]
fn garbage_never_panics() {
    let key = SecretKey::generate().expect("randomness");
    let good = SignedIndex::sign(&sample(), &key, 3).as_bytes().to_vec();
    // Every truncation and a sweep of single-byte flips: each must be an error or the
    // original index, never a panic.
    for n in 0..good.len() {
        let _ = SignedIndex::open(
            good[..n].to_vec(),
            None,
            &[key.public()],
            &Limits::default(),
        );
    }
    let body = crate::codec::encode(&sample());
    for i in 0..body.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = body.clone();
            b[i] ^= bit;
            let _ = crate::codec::decode(&b, &Limits::default());
        }
    }
}

#[test]
fn the_mean_stored_chunk_is_over_the_unique_chunks() {
    let mut index = sample();
    let one = index.chunks[0].stored_len;
    assert_eq!(index.mean_stored_chunk(), Some(u64::from(one)));
    index.chunks.push(ChunkInfo {
        id: ChunkId::of(b"another"),
        plain_len: 100,
        stored_len: one + 1000,
        stored_hash: None,
    });
    assert_eq!(index.mean_stored_chunk(), Some(u64::from(one) + 500));
    index.chunks.clear();
    assert_eq!(index.mean_stored_chunk(), None);
}

//! What every fuzz target asserts about one input, as plain functions so that the same checks
//! run under libFuzzer (`fuzz/fuzz_targets/*`) and as an ordinary test over the committed
//! corpus (`peertree/tests/fuzz_corpus.rs` includes this file by path).
//!
//! Each check must return for any input; a panic (including a failed assertion below) or an
//! allocation the input did not pay for is a bug in the decoder.

use manifest::{ChunkId, Index, Limits, SignedIndex};
use peertree::relay::Msg;

/// Limits for decoding in the harness: the defaults, with the decompressed size capped so a
/// zstd bomb is refused within libFuzzer's memory limit.
pub fn limits() -> Limits {
    Limits {
        max_body_bytes: 64 << 20,
        ..Limits::default()
    }
}

/// An uncompressed index body: decodes or is refused; what decodes re-encodes to an index
/// that decodes to the same value.
pub fn index_body(data: &[u8]) {
    let limits = limits();
    if let Ok(index) = Index::decode_body(data, &limits) {
        let again = Index::decode_body(&index.encode_body(), &limits)
            .expect("a decoded index re-encodes to a valid body");
        assert_eq!(again, index, "re-encoding changed the index");
    }
}

/// A signed index envelope as it arrives from a peer or a store: shape check, signature
/// against the key it names (so the fuzzer can also reach the decode path), bounded
/// decompression and strict decode. A bad signature must never be accepted for bytes that
/// were not signed; this harness cannot sign, so it only checks that nothing panics and that
/// an envelope naming no trusted key is refused.
pub fn signed_index(data: &[u8]) {
    let limits = limits();
    let Ok(signed) = SignedIndex::from_bytes(data.to_vec(), &limits) else {
        return;
    };
    let _ = signed.id();
    if let Ok(key) = signed.publisher() {
        let _ = signed.verify(&[key]);
    }
    assert!(
        signed.verify(&[]).is_err(),
        "an envelope verified with no trusted key"
    );
    if let Ok(index) = signed.decode(&limits) {
        let again = Index::decode_body(&index.encode_body(), &limits)
            .expect("a decoded index re-encodes to a valid body");
        assert_eq!(again, index, "re-encoding changed the index");
    }
}

/// A relay wire message: decodes or is refused; what decodes round-trips.
pub fn wire(data: &[u8]) {
    if let Ok(msg) = Msg::decode(data) {
        let again = Msg::decode(&msg.encode()).expect("a decoded message re-encodes");
        assert_eq!(again, msg, "re-encoding changed the message");
    }
}

/// A stored chunk: the first four bytes (little-endian, modulo 1 MiB + 1) are the plain length
/// the index would claim, the rest the stored bytes. Decoding must refuse anything whose
/// content does not hash to the id, and encoding the rest must round-trip.
pub fn chunk(data: &[u8]) {
    let Some((head, stored)) = data.split_first_chunk::<4>() else {
        return;
    };
    let plain_len = u32::from_le_bytes(*head) % ((1 << 20) + 1);
    // An id no input hashes to in practice: every decode must fail.
    let nobody = ChunkId([0x5a; 32]);
    assert!(
        manifest::decode_chunk(stored, &nobody, plain_len).is_err(),
        "a chunk was accepted under an id it does not hash to"
    );
    // The id of the stored bytes read as raw: decoding may succeed only with those bytes.
    if let Some((_, payload)) = stored.split_first() {
        let id = ChunkId::of(payload);
        if let Ok(plain) = manifest::decode_chunk(stored, &id, plain_len) {
            assert_eq!(ChunkId::of(&plain), id);
        }
    }
    // An index vouching for these very stored bytes (by their stored hash) gets them past
    // the arrival check undecoded, but their plain bytes never come out under an id they
    // do not hash to, and decoding stays within the claimed length.
    let info = manifest::ChunkInfo {
        id: nobody,
        plain_len,
        stored_len: stored.len() as u32,
        stored_hash: Some(manifest::StoredHash::of(stored)),
    };
    if let Ok((checked, plain)) = manifest::check_chunk(stored.to_vec().into(), &info) {
        assert!(
            plain.is_none(),
            "only an undecoded check can pass under this id"
        );
        assert!(
            checked.plain().is_err(),
            "a chunk's plain bytes came out under an id they do not hash to"
        );
    }
    let encoded = manifest::encode_chunk(stored, 1);
    let plain = manifest::decode_chunk(&encoded, &ChunkId::of(stored), stored.len() as u32)
        .expect("an encoded chunk decodes");
    assert_eq!(plain, stored);
}

//! The stored form of a chunk: one codec byte (raw or zstd) followed by the payload.
//! Decoding always verifies the plain bytes against the chunk id, so a corrupt or forged
//! chunk can never be mistaken for data.

use crate::Error;
use crate::ids::ChunkId;

const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;

/// Encodes plain bytes for storage: zstd when it saves at least 1/32 of the size, raw
/// otherwise (already-compressed data costs nothing to decode).
pub fn encode_chunk(plain: &[u8], zstd_level: i32) -> Vec<u8> {
    if let Ok(compressed) = zstd::bulk::compress(plain, zstd_level)
        && compressed.len() + compressed.len() / 32 < plain.len()
    {
        let mut out = Vec::with_capacity(compressed.len() + 1);
        out.push(CODEC_ZSTD);
        out.extend_from_slice(&compressed);
        return out;
    }
    let mut out = Vec::with_capacity(plain.len() + 1);
    out.push(CODEC_RAW);
    out.extend_from_slice(plain);
    out
}

/// A chunk's plain bytes, decoded and checked against its id: only [`verify_chunk`] makes
/// one, so a value of this type is never unverified data.
#[derive(Debug, Clone)]
pub struct Verified(std::sync::Arc<[u8]>);

impl Verified {
    /// The plain bytes.
    pub fn bytes(&self) -> &std::sync::Arc<[u8]> {
        &self.0
    }

    /// The plain bytes, shared.
    pub fn into_bytes(self) -> std::sync::Arc<[u8]> {
        self.0
    }
}

/// [`decode_chunk`], keeping the plain bytes as [`Verified`].
pub fn verify_chunk(stored: &[u8], id: &ChunkId, plain_len: u32) -> Result<Verified, Error> {
    decode_chunk(stored, id, plain_len).map(|plain| Verified(plain.into()))
}

/// Decodes a stored chunk and checks it: length `plain_len` and blake3 equal to `id`.
pub fn decode_chunk(stored: &[u8], id: &ChunkId, plain_len: u32) -> Result<Vec<u8>, Error> {
    let corrupt = |reason: String| Error::CorruptChunk { id: *id, reason };
    let (&codec, payload) = stored
        .split_first()
        .ok_or_else(|| corrupt("empty".into()))?;
    let plain = match codec {
        CODEC_RAW => payload.to_vec(),
        CODEC_ZSTD => zstd::bulk::decompress(payload, plain_len as usize)
            .map_err(|e| corrupt(format!("zstd: {e}")))?,
        other => return Err(corrupt(format!("unknown codec byte {other}"))),
    };
    if plain.len() != plain_len as usize {
        return Err(corrupt(format!(
            "{} bytes where {plain_len} were expected",
            plain.len()
        )));
    }
    let actual = ChunkId::of(&plain);
    if actual != *id {
        return Err(corrupt(format!("content hashes to {}", actual.short())));
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressible_chunks_are_compressed_and_round_trip() {
        let plain = vec![7u8; 100_000];
        let stored = encode_chunk(&plain, 1);
        assert_eq!(stored[0], CODEC_ZSTD);
        assert!(stored.len() < 1000);
        let id = ChunkId::of(&plain);
        assert_eq!(
            decode_chunk(&stored, &id, plain.len() as u32).expect("valid"),
            plain
        );
    }

    #[test]
    fn incompressible_chunks_are_raw() {
        let plain: Vec<u8> = (0..50_000u32)
            .map(|i| blake3::hash(&i.to_le_bytes()).as_bytes()[0])
            .collect();
        let stored = encode_chunk(&plain, 1);
        assert_eq!(stored[0], CODEC_RAW);
        assert_eq!(stored.len(), plain.len() + 1);
    }

    #[test]
    fn a_flipped_byte_is_detected() {
        let plain = b"hello world, hello world, hello world".repeat(100);
        let mut stored = encode_chunk(&plain, 1);
        let id = ChunkId::of(&plain);
        let last = stored.len() - 1;
        stored[last] ^= 1;
        assert!(matches!(
            decode_chunk(&stored, &id, plain.len() as u32),
            Err(Error::CorruptChunk { .. })
        ));
    }
}

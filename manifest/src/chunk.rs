//! The stored form of a chunk: one codec byte (raw or zstd) followed by the payload.
//! Decoding always verifies the plain bytes against the chunk id, so a corrupt or forged
//! chunk can never be mistaken for data.

use bytes::Bytes;

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

/// A chunk's plain bytes, decoded and checked against its id: only this module makes one,
/// so a value of this type is never unverified data. A raw chunk's plain bytes are a slice
/// of the stored bytes it was checked from, not a copy.
#[derive(Debug, Clone)]
pub struct Verified(Bytes);

impl Verified {
    /// The plain bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The plain bytes, shared.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

/// A chunk's stored (encoded) bytes, checked to decode to its id: only this module makes
/// one. Keep these rather than [`Verified`] where the stored form is what is sent on (a
/// compressed chunk stays small), and get the plain bytes back with
/// [`CheckedChunk::plain`] without hashing them again.
#[derive(Debug, Clone)]
pub struct CheckedChunk {
    stored: Bytes,
    id: ChunkId,
    plain_len: u32,
}

impl CheckedChunk {
    /// The chunk's id, which the stored bytes decode to.
    pub fn id(&self) -> &ChunkId {
        &self.id
    }

    /// The stored bytes, shared.
    pub fn stored(&self) -> &Bytes {
        &self.stored
    }

    /// The plain bytes. Not hashed again: decoding is deterministic, and these very bytes
    /// decoded to the chunk's id when this value was made. A raw chunk costs nothing (a
    /// slice); a compressed one is decompressed again.
    pub fn plain(&self) -> Result<Verified, std::io::Error> {
        match self.stored.first() {
            Some(&CODEC_ZSTD) => {
                let mut plain = Vec::with_capacity(self.plain_len as usize);
                decompress(&self.stored[1..], &mut plain)?;
                Ok(Verified(plain.into()))
            }
            _ => Ok(Verified(self.stored.slice(1..))),
        }
    }
}

fn corrupt(id: &ChunkId, reason: String) -> Error {
    Error::CorruptChunk { id: *id, reason }
}

thread_local! {
    /// One zstd decompression context per thread, reused: making one per chunk costs more
    /// than decompressing a small chunk. `None` until first used or if zstd could not make
    /// one (then every use tries again and reports the error).
    static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a zstd payload into `out`'s spare capacity: more output than that is an
/// error, so the caller's capacity bounds what a crafted payload can make this allocate.
fn decompress(payload: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    DCTX.with(|cell| {
        let mut cell = cell.borrow_mut();
        let dctx = match cell.as_mut() {
            Some(d) => d,
            None => cell.insert(zstd::bulk::Decompressor::new()?),
        };
        dctx.decompress_to_buffer(payload, out).map(drop)
    })
}

/// Checks plain bytes against the chunk's length and id.
fn check_plain(plain: &[u8], id: &ChunkId, plain_len: u32) -> Result<(), Error> {
    if plain.len() != plain_len as usize {
        return Err(corrupt(
            id,
            format!("{} bytes where {plain_len} were expected", plain.len()),
        ));
    }
    let actual = ChunkId::of(plain);
    if actual != *id {
        return Err(corrupt(id, format!("content hashes to {}", actual.short())));
    }
    Ok(())
}

/// Splits stored bytes into their codec byte and payload, refusing unknown codecs.
fn split<'a>(stored: &'a [u8], id: &ChunkId) -> Result<(u8, &'a [u8]), Error> {
    let (&codec, payload) = stored
        .split_first()
        .ok_or_else(|| corrupt(id, "empty".into()))?;
    match codec {
        CODEC_RAW | CODEC_ZSTD => Ok((codec, payload)),
        other => Err(corrupt(id, format!("unknown codec byte {other}"))),
    }
}

/// Checks stored bytes against the chunk's id and length, keeping both forms: the stored
/// bytes as a [`CheckedChunk`] and the plain bytes as [`Verified`]. A raw chunk is hashed
/// where it lies, and both results are slices of `stored` (nothing is copied); a compressed
/// one is decompressed once, into a buffer of exactly `plain_len` bytes.
pub fn verify_chunk(
    stored: Bytes,
    id: &ChunkId,
    plain_len: u32,
) -> Result<(CheckedChunk, Verified), Error> {
    let (codec, payload) = split(&stored, id)?;
    let plain = if codec == CODEC_ZSTD {
        let mut plain = Vec::with_capacity(plain_len as usize);
        decompress(payload, &mut plain).map_err(|e| corrupt(id, format!("zstd: {e}")))?;
        check_plain(&plain, id, plain_len)?;
        Bytes::from(plain)
    } else {
        check_plain(payload, id, plain_len)?;
        stored.slice(1..)
    };
    Ok((
        CheckedChunk {
            stored,
            id: *id,
            plain_len,
        },
        Verified(plain),
    ))
}

/// Decodes a stored chunk and checks it: length `plain_len` and blake3 equal to `id`.
pub fn decode_chunk(stored: &[u8], id: &ChunkId, plain_len: u32) -> Result<Vec<u8>, Error> {
    let (codec, payload) = split(stored, id)?;
    let plain = if codec == CODEC_ZSTD {
        let mut plain = Vec::with_capacity(plain_len as usize);
        decompress(payload, &mut plain).map_err(|e| corrupt(id, format!("zstd: {e}")))?;
        plain
    } else {
        payload.to_vec()
    };
    check_plain(&plain, id, plain_len)?;
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

    fn incompressible(len: usize) -> Vec<u8> {
        let mut plain = vec![0u8; len];
        blake3::Hasher::new().finalize_xof().fill(&mut plain);
        plain
    }

    /// A raw chunk is checked where it lies: its plain bytes are the stored bytes past the
    /// codec byte, not a copy (two copies per chunk before).
    #[test]
    fn a_raw_chunk_is_verified_without_a_copy() {
        let plain = incompressible(70_000);
        let stored = Bytes::from(encode_chunk(&plain, 1));
        assert_eq!(stored[0], CODEC_RAW);
        let id = ChunkId::of(&plain);
        let (checked, verified) = verify_chunk(stored.clone(), &id, 70_000).expect("valid");
        assert_eq!(verified.bytes()[..], plain[..]);
        assert_eq!(verified.bytes().as_ptr(), stored[1..].as_ptr(), "a slice");
        assert_eq!(checked.stored().as_ptr(), stored.as_ptr());
        assert_eq!(checked.id(), &id);
        let again = checked.plain().expect("decodes");
        assert_eq!(again.bytes().as_ptr(), stored[1..].as_ptr(), "a slice");
    }

    #[test]
    fn a_checked_chunk_gives_back_the_plain_bytes_it_was_checked_for() {
        for plain in [b"teesfs ".repeat(20_000), incompressible(30_000)] {
            let id = ChunkId::of(&plain);
            let stored = Bytes::from(encode_chunk(&plain, 1));
            let (checked, verified) = verify_chunk(stored, &id, plain.len() as u32).expect("valid");
            assert_eq!(verified.bytes()[..], plain[..]);
            assert_eq!(checked.plain().expect("decodes").bytes()[..], plain[..]);
        }
    }

    /// Every way a stored chunk can be wrong is refused by the zero-copy path as by
    /// `decode_chunk`, with one decompression context reused across all of them.
    #[test]
    fn corrupt_chunks_are_refused_by_both_decoders() {
        let text = b"hello world, hello world, hello world".repeat(100);
        let noise = incompressible(5000);
        let mut cases: Vec<(Vec<u8>, ChunkId, u32)> = Vec::new();
        for plain in [&text[..], &noise[..]] {
            let id = ChunkId::of(plain);
            let len = plain.len() as u32;
            let good = encode_chunk(plain, 1);
            let mut flipped = good.clone();
            *flipped.last_mut().expect("bytes") ^= 1;
            cases.push((flipped, id, len));
            cases.push((good.clone(), id, len - 1));
            cases.push((good.clone(), id, len + 1));
            cases.push((good.clone(), ChunkId::of(b"other"), len));
            cases.push((good[..good.len() - 1].to_vec(), id, len));
            let mut codec = good;
            codec[0] = 7;
            cases.push((codec, id, len));
        }
        cases.push((Vec::new(), ChunkId::of(b""), 0));
        for (i, (stored, id, len)) in cases.into_iter().enumerate() {
            assert!(
                matches!(
                    decode_chunk(&stored, &id, len),
                    Err(Error::CorruptChunk { .. })
                ),
                "case {i}"
            );
            assert!(
                matches!(
                    verify_chunk(stored.into(), &id, len),
                    Err(Error::CorruptChunk { .. })
                ),
                "case {i}"
            );
        }
        // The context survives the failures.
        let id = ChunkId::of(&text);
        let stored = encode_chunk(&text, 1);
        assert_eq!(
            decode_chunk(&stored, &id, text.len() as u32).expect("valid"),
            text
        );
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

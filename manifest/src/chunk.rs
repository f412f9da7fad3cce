//! The stored form of a chunk: one codec byte (raw or zstd) followed by the payload.
//! Decoding always verifies the plain bytes against the chunk id, so a corrupt or forged
//! chunk can never be mistaken for data.
//!
//! A compressed chunk arriving at a node is checked against the blake3 of its stored form,
//! which the signed index names ([`check_chunk`]), without decompressing it: decoding to
//! verify was a third of a receiving daemon's CPU on a real layer, for chunks most of which
//! no application reads during the job. Its plain bytes are decoded, and checked against
//! the id too, when something reads them ([`CheckedChunk::plain`]).

use bytes::Bytes;

use crate::Error;
use crate::ids::{ChunkId, StoredHash};
use crate::index::ChunkInfo;

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

/// The stored form of a raw chunk of `plain_len` bytes, its plain bytes put in place by
/// `fill` (from wherever the caller keeps them): how a store that keeps a raw chunk's plain
/// bytes without their codec byte hands the chunk out. Unverified, like any stored bytes.
pub fn raw_stored(
    plain_len: usize,
    fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    let mut out = vec![0u8; plain_len + 1];
    out[0] = CODEC_RAW;
    fill(&mut out[1..])?;
    Ok(out)
}

/// Whether stored bytes are zstd-compressed (their codec byte).
fn is_zstd(stored: &[u8]) -> bool {
    stored.first() == Some(&CODEC_ZSTD)
}

/// A chunk's stored form as an index records it: its length, and for a compressed chunk
/// the blake3 of its bytes (see [`check_chunk`]; a raw chunk is checked where it lies, so
/// it needs none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredForm {
    /// The stored bytes' length, codec byte included.
    pub len: u32,
    /// The stored bytes' blake3, for a compressed chunk.
    pub hash: Option<StoredHash>,
}

impl StoredForm {
    /// The form of these stored bytes.
    pub fn of(stored: &[u8]) -> Self {
        let hash = is_zstd(stored).then(|| StoredHash::of(stored));
        Self {
            len: stored.len() as u32,
            hash,
        }
    }
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

/// A chunk's stored (encoded) bytes, checked to decode to its id, or to be the stored form
/// the signed index names for it: only this module makes one. Keep these rather than
/// [`Verified`] where the stored form is what is sent on (a compressed chunk stays small),
/// and get the plain bytes back with [`CheckedChunk::plain`].
#[derive(Debug, Clone)]
pub struct CheckedChunk {
    stored: Bytes,
    id: ChunkId,
    plain_len: u32,
    /// Checked by decoding (the plain bytes hashed to the id), not by the stored hash alone.
    decoded: bool,
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

    /// Whether the stored form is compressed (its plain bytes cost a decoding).
    pub fn compressed(&self) -> bool {
        is_zstd(&self.stored)
    }

    /// The plain bytes. A raw chunk costs nothing (a slice); a compressed one is
    /// decompressed. They are hashed against the id unless these very bytes decoded to it
    /// when this value was made (decoding is deterministic): a chunk checked by its stored
    /// hash alone trusts its publisher's index no further than its id.
    pub fn plain(&self) -> Result<Verified, std::io::Error> {
        match self.stored.first() {
            Some(&CODEC_ZSTD) => {
                let mut plain = Vec::with_capacity(self.plain_len as usize);
                decompress(&self.stored[1..], &mut plain)?;
                if !self.decoded {
                    check_plain(&plain, &self.id, self.plain_len)
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                }
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
            decoded: true,
        },
        Verified(plain),
    ))
}

/// Checks stored bytes that arrived for the chunk `info` names, decoding only where it
/// must:
/// - a compressed chunk whose stored bytes hash to the index's signed
///   [`ChunkInfo::stored_hash`] is taken as it is; its plain bytes are decoded (and checked
///   against the id) when [`CheckedChunk::plain`] asks for them;
/// - any other is checked as [`verify_chunk`] does: a raw chunk where it lies, a compressed
///   one by decoding it (an older index, or the same chunk compressed differently by
///   another index's publisher), and its plain bytes come back with it.
pub fn check_chunk(
    stored: Bytes,
    info: &ChunkInfo,
) -> Result<(CheckedChunk, Option<Verified>), Error> {
    if let Some(want) = &info.stored_hash
        && is_zstd(&stored)
        && StoredHash::of(&stored) == *want
    {
        let checked = CheckedChunk {
            stored,
            id: info.id,
            plain_len: info.plain_len,
            decoded: false,
        };
        return Ok((checked, None));
    }
    let (checked, plain) = verify_chunk(stored, &info.id, info.plain_len)?;
    Ok((checked, Some(plain)))
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

    #[test]
    fn a_raw_chunk_rebuilt_from_its_plain_bytes_is_its_stored_form() {
        let plain = incompressible(5000);
        let rebuilt = raw_stored(plain.len(), |out| {
            out.copy_from_slice(&plain);
            Ok(())
        })
        .expect("filled");
        assert_eq!(rebuilt, encode_chunk(&plain, 1));
        let failed = raw_stored(3, |_| Err(std::io::Error::other("short read")));
        assert!(failed.is_err());
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

    fn info_for(plain: &[u8], stored: &[u8]) -> ChunkInfo {
        let form = StoredForm::of(stored);
        ChunkInfo {
            id: ChunkId::of(plain),
            plain_len: plain.len() as u32,
            stored_len: form.len,
            stored_hash: form.hash,
        }
    }

    /// A compressed chunk the index names by its stored hash is checked without being
    /// decoded, and decoded (right) when its plain bytes are asked for; a raw chunk needs no
    /// stored hash and comes back with its plain bytes.
    #[test]
    fn a_compressed_chunk_is_checked_by_its_stored_hash_and_decoded_only_when_read() {
        let text = b"teesfs stored hash ".repeat(5000);
        let stored = Bytes::from(encode_chunk(&text, 1));
        let info = info_for(&text, &stored);
        assert!(info.stored_hash.is_some(), "a compressed chunk has one");
        let (checked, plain) = check_chunk(stored.clone(), &info).expect("valid");
        assert!(plain.is_none(), "not decoded to check it");
        assert_eq!(checked.plain().expect("decodes").bytes()[..], text[..]);

        let noise = incompressible(40_000);
        let raw = Bytes::from(encode_chunk(&noise, 1));
        let info = info_for(&noise, &raw);
        assert_eq!(info.stored_hash, None, "a raw chunk has none");
        let (_, plain) = check_chunk(raw, &info).expect("valid");
        assert_eq!(
            plain
                .expect("raw chunks are checked where they lie")
                .bytes()[..],
            noise[..]
        );
    }

    /// Stored bytes other than the ones the index names are decoded and checked against
    /// the id: the same chunk compressed by another publisher passes, a forged one fails.
    #[test]
    fn stored_bytes_the_index_does_not_name_are_decoded_and_checked() {
        let text = b"another level, another stored form ".repeat(3000);
        let info = info_for(&text, &encode_chunk(&text, 1));
        let other = Bytes::from(encode_chunk(&text, 19));
        assert_ne!(
            StoredForm::of(&other).hash,
            info.stored_hash,
            "a different form"
        );
        let (checked, plain) = check_chunk(other, &info).expect("the same chunk");
        assert_eq!(plain.expect("decoded to check it").bytes()[..], text[..]);
        assert_eq!(checked.plain().expect("decodes").bytes()[..], text[..]);

        let forged = Bytes::from(encode_chunk(&b"forged bytes ".repeat(3000), 1));
        assert!(matches!(
            check_chunk(forged, &info),
            Err(Error::CorruptChunk { .. })
        ));
    }

    /// An index whose stored hash names bytes that decode to something else (a broken or
    /// lying publisher) gets them past the arrival check, but never read: the plain bytes
    /// are hashed against the id when decoded.
    #[test]
    fn a_stored_hash_for_bytes_that_decode_to_other_data_never_gives_them_out() {
        let text = b"what the id names ".repeat(3000);
        let lie = encode_chunk(&b"what the id fakes ".repeat(3000), 1);
        let info = ChunkInfo {
            stored_hash: StoredForm::of(&lie).hash,
            ..info_for(&text, &encode_chunk(&text, 1))
        };
        let (checked, plain) = check_chunk(Bytes::from(lie), &info).expect("as the index says");
        assert!(plain.is_none());
        let err = checked.plain().expect_err("never the wrong bytes");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    }
}

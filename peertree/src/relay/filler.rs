//! The filler of a rates probe (`teesfs health --rates`): chunks of a known size that a
//! health probe carries down the tree so that every edge's rate is measured as a push's is
//! ([`Filler`]).
//!
//! A rates probe is a health probe ([`super::Start::probe`]) whose `index` is not empty but
//! this descriptor: a magic, a version and the filler's shape (chunk size and count), and
//! whose `order` is every filler chunk, the first one urgent. The wire format of `Start` is
//! unchanged: a plain probe has an empty `index` as before, and a node of a release before
//! rates probes refuses one ("a probe carries no index and no chunks") instead of taking
//! part in it half-way. The nodes treat the chunks as probe payload: they pass them on as
//! the relay says, and check their length only; nothing is verified as content, stored or
//! mounted (the daemon's business, not the relay's).
//!
//! Pure: the relay builds the schedule from it and checks a `Start` against it.

use super::{ChunkNo, Schedule};
use crate::error::{Error, Result};

/// The descriptor's first bytes: no signed index starts with them.
const MAGIC: &[u8; 8] = b"TSFILL\0\0";
/// The descriptor's version.
const VERSION: u8 = 1;
/// The largest filler chunk (stored bytes).
pub const MAX_FILLER_CHUNK: u32 = 16 << 20;
/// The most filler chunks a probe carries.
pub const MAX_FILLER_CHUNKS: u32 = 1 << 16;

/// The shape of a rates probe's filler: `chunks` chunks of `chunk_len` stored bytes each,
/// the first of them urgent (a push's per-edge rate counts from the urgent set on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filler {
    /// Stored bytes per chunk.
    pub chunk_len: u32,
    /// How many chunks every node receives.
    pub chunks: u32,
}

impl Filler {
    /// A filler of `chunks` chunks of `chunk_len` bytes, refused when either is 0 or past
    /// [`MAX_FILLER_CHUNK`] or [`MAX_FILLER_CHUNKS`], or when there are fewer than two
    /// chunks (a rate counts from the first chunk held to the last).
    pub fn new(chunk_len: u32, chunks: u32) -> Result<Self> {
        if !(1..=MAX_FILLER_CHUNK).contains(&chunk_len) {
            return Err(Error::InvalidStart("filler chunk size out of range"));
        }
        if !(2..=MAX_FILLER_CHUNKS).contains(&chunks) {
            return Err(Error::InvalidStart("filler chunk count out of range"));
        }
        Ok(Self { chunk_len, chunks })
    }

    /// Bytes every node receives.
    pub fn bytes(&self) -> u64 {
        u64::from(self.chunk_len) * u64::from(self.chunks)
    }

    /// The descriptor as it rides in a probe's `Start::index`.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.push(VERSION);
        v.extend_from_slice(&self.chunk_len.to_le_bytes());
        v.extend_from_slice(&self.chunks.to_le_bytes());
        v
    }

    /// The filler of a probe's `Start::index`: `None` for a plain probe (empty), an error
    /// for anything but a descriptor of this version with a shape [`Filler::new`] takes.
    pub fn decode(index: &[u8]) -> Result<Option<Self>> {
        if index.is_empty() {
            return Ok(None);
        }
        let bad = Error::InvalidStart("a probe's index is not a filler descriptor");
        let rest = index.strip_prefix(MAGIC.as_slice()).ok_or(bad.clone())?;
        let [version, rest @ ..] = rest else {
            return Err(bad);
        };
        if *version != VERSION {
            return Err(Error::InvalidStart("filler descriptor of another version"));
        }
        let word = |b: &[u8]| -> Option<u32> { Some(u32::from_le_bytes(b.try_into().ok()?)) };
        match (
            rest.len(),
            rest.get(..4).and_then(word),
            rest.get(4..).and_then(word),
        ) {
            (8, Some(len), Some(n)) => Self::new(len, n).map(Some),
            _ => Err(bad),
        }
    }

    /// The push order of the filler: every chunk in table order, the first urgent.
    pub fn schedule(&self) -> Schedule {
        Schedule::new(
            (0..self.chunks).map(ChunkNo).collect(),
            1,
            vec![self.chunk_len; self.chunks as usize],
        )
        .expect("every chunk once, one urgent")
    }
}

/// The schedule a probe's `Start` with `index` must come with: empty for a plain probe, the
/// filler's for a rates probe.
pub(super) fn probe_schedule(index: &[u8]) -> Result<Schedule> {
    Ok(match Filler::decode(index)? {
        Some(f) => f.schedule(),
        None => Schedule::new(Vec::new(), 0, Vec::new()).expect("empty"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filler_round_trips_and_anything_else_is_refused() {
        let f = Filler::new(1 << 20, 8).expect("valid");
        assert_eq!(f.bytes(), 8 << 20);
        assert_eq!(Filler::decode(&f.encode()).expect("decodes"), Some(f));
        assert_eq!(Filler::decode(&[]).expect("a plain probe"), None);
        let s = f.schedule();
        assert_eq!((s.len(), s.pushed(), s.urgent), (8, 8, 1));
        assert!(s.sizes.iter().all(|&l| l == 1 << 20));
        assert_eq!(
            probe_schedule(&[]).expect("plain"),
            Schedule::new(vec![], 0, vec![]).expect("empty")
        );

        let mut other = f.encode();
        other[8] = 2;
        assert!(Filler::decode(&other).is_err(), "another version");
        let mut long = f.encode();
        long.push(0);
        assert!(Filler::decode(&long).is_err(), "trailing bytes");
        assert!(Filler::decode(b"a signed index").is_err());
        for (len, n) in [
            (0, 8),
            (MAX_FILLER_CHUNK + 1, 8),
            (1024, 1),
            (1024, MAX_FILLER_CHUNKS + 1),
        ] {
            assert!(Filler::new(len, n).is_err(), "{len} x {n}");
            let mut raw = MAGIC.to_vec();
            raw.push(VERSION);
            raw.extend_from_slice(&len.to_le_bytes());
            raw.extend_from_slice(&n.to_le_bytes());
            assert!(Filler::decode(&raw).is_err(), "{len} x {n} on the wire");
        }
    }
}

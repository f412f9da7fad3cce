//! Content identities: [`ChunkId`], [`IndexId`] and [`StoredHash`], all blake3 digests.

use std::fmt;
use std::str::FromStr;

use crate::Error;

macro_rules! digest_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The blake3 digest of `bytes`.
            pub fn of(bytes: &[u8]) -> Self {
                Self(*blake3::hash(bytes).as_bytes())
            }

            /// Lower-case hex, 64 characters.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// The first 12 hex characters, for humans.
            pub fn short(&self) -> String {
                hex::encode(&self.0[..6])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.short())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                let mut out = [0u8; 32];
                hex::decode_to_slice(s.trim(), &mut out).map_err(|e| Error::BadHex {
                    what: $what,
                    reason: format!("{e} (expected 64 hex characters, got {:?})", s),
                })?;
                Ok(Self(out))
            }
        }
    };
}

digest_id!(
    /// Identity of a chunk: blake3 of its plain (uncompressed) bytes.
    ChunkId,
    "chunk id"
);
digest_id!(
    /// Identity of an index: blake3 of its publisher key and compressed body (content and
    /// signer; see [`crate::sign`]).
    IndexId,
    "index id"
);
digest_id!(
    /// blake3 of a chunk's stored (encoded) bytes, codec byte included: what a node checks a
    /// compressed chunk against on arrival, without decompressing it (index version 4).
    StoredHash,
    "stored hash"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ChunkId::of(b"hello");
        let parsed: ChunkId = id.to_hex().parse().expect("valid hex");
        assert_eq!(id, parsed);
    }

    #[test]
    fn bad_hex_is_a_clear_error() {
        let err = "xyz".parse::<IndexId>().expect_err("not hex");
        assert!(err.to_string().contains("index id"), "{err}");
    }
}

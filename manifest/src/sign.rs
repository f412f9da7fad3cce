//! Publisher keys and the signed index envelope.
//!
//! Envelope layout: magic `TEESSIG` + version, the publisher's ed25519 public key (32 bytes),
//! the signature (64 bytes), in version 2 the expiry (8 bytes, little-endian seconds since
//! the Unix epoch), then the zstd-compressed index body. The signature covers a domain tag,
//! the expiry and the blake3 of the compressed body, so a verified envelope pins every byte
//! of the index and when it stops being valid (as CVMFS's whitelists expire). Version 1
//! envelopes (no expiry) are still read and written when no expiry is asked for.
//!
//! The index id is the blake3 of the publisher key, the expiry (version 2) and the
//! compressed body: it names content **and** signer. The same layer signed with two keys has two ids (two files in a
//! store), so an id given to `mount` or `push` always means one envelope, the one its
//! publisher printed, and nodes that trust only that key accept it.

use std::io::Read;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use crate::Error;
use crate::codec;
use crate::ids::IndexId;
use crate::index::{Index, Limits};

const MAGIC: &[u8; 7] = b"TEESSIG";
const VERSION: u8 = 1;
/// The envelope with an expiry.
const VERSION_EXPIRING: u8 = 2;
const HEADER_LEN: usize = 8 + 32 + 64;
const EXPIRY_LEN: usize = 8;
const DOMAIN: &[u8] = b"teesfs-index-v1\0";
const DOMAIN_EXPIRING: &[u8] = b"teesfs-index-v2\0";
const SECRET_TAG: &str = "teesfs-publisher-secret-v1";
const PUBLIC_TAG: &str = "teesfs-publisher-v1";

/// A publisher's public key, used to verify indexes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl PublicKey {
    /// From the 32 raw bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self, Error> {
        VerifyingKey::from_bytes(bytes)
            .map(Self)
            .map_err(|e| Error::BadKey(format!("not an ed25519 public key: {e}")))
    }

    /// Lower-case hex of the raw key.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0.as_bytes())
    }

    /// The key file text: `teesfs-publisher-v1 <hex>`.
    pub fn to_file_text(&self) -> String {
        format!("{PUBLIC_TAG} {}\n", self.to_hex())
    }

    /// Parses key file text (or bare hex).
    pub fn from_file_text(text: &str) -> Result<Self, Error> {
        let hexpart = parse_tagged(text, PUBLIC_TAG)?;
        let mut raw = [0u8; 32];
        hex::decode_to_slice(hexpart, &mut raw)
            .map_err(|e| Error::BadKey(format!("public key is not 64 hex characters: {e}")))?;
        Self::from_bytes(&raw)
    }
}

/// A publisher's secret signing key.
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// A fresh key from the operating system's random generator.
    pub fn generate() -> Result<Self, Error> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| Error::Random(e.to_string()))?;
        Ok(Self(SigningKey::from_bytes(&seed)))
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The key file text: `teesfs-publisher-secret-v1 <hex seed>`.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_TAG} {}\n", hex::encode(self.0.to_bytes()))
    }

    /// Parses key file text.
    pub fn from_file_text(text: &str) -> Result<Self, Error> {
        let hexpart = parse_tagged(text, SECRET_TAG)?;
        let mut seed = [0u8; 32];
        hex::decode_to_slice(hexpart, &mut seed)
            .map_err(|e| Error::BadKey(format!("secret key is not 64 hex characters: {e}")))?;
        Ok(Self(SigningKey::from_bytes(&seed)))
    }
}

fn parse_tagged<'a>(text: &'a str, tag: &str) -> Result<&'a str, Error> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| Error::BadKey("the key file is empty".into()))?;
    match line.split_once(' ') {
        Some((t, rest)) if t == tag => Ok(rest.trim()),
        Some(_) => Err(Error::BadKey(format!(
            "expected a `{tag}` key, found something else (wrong kind of key file?)"
        ))),
        None if line.len() == 64 => Ok(line),
        None => Err(Error::BadKey(format!("expected `{tag} <hex>`"))),
    }
}

/// A signed, compressed index exactly as stored and sent.
#[derive(Clone)]
pub struct SignedIndex {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for SignedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIndex")
            .field("id", &self.id())
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl SignedIndex {
    /// Encodes, compresses and signs `index`; valid for ever.
    pub fn sign(index: &Index, key: &SecretKey, zstd_level: i32) -> Self {
        Self::sign_until(index, key, zstd_level, None)
    }

    /// Encodes, compresses and signs `index`, valid until `expires` (seconds since the Unix
    /// epoch) when given: nodes refuse it from then on.
    pub fn sign_until(
        index: &Index,
        key: &SecretKey,
        zstd_level: i32,
        expires: Option<u64>,
    ) -> Self {
        let body = codec::encode(index);
        let compressed = zstd::bulk::compress(&body, zstd_level)
            .expect("compressing an in-memory buffer cannot fail");
        let sig = key.0.sign(&signed_message(
            expires,
            blake3::hash(&compressed).as_bytes(),
        ));
        let mut bytes = Vec::with_capacity(HEADER_LEN + EXPIRY_LEN + compressed.len());
        bytes.extend_from_slice(MAGIC);
        bytes.push(if expires.is_some() {
            VERSION_EXPIRING
        } else {
            VERSION
        });
        bytes.extend_from_slice(key.public().0.as_bytes());
        bytes.extend_from_slice(&sig.to_bytes());
        if let Some(at) = expires {
            bytes.extend_from_slice(&at.to_le_bytes());
        }
        bytes.extend_from_slice(&compressed);
        Self { bytes }
    }

    /// Where the compressed body starts.
    fn body_start(&self) -> usize {
        if self.bytes[7] == VERSION_EXPIRING {
            HEADER_LEN + EXPIRY_LEN
        } else {
            HEADER_LEN
        }
    }

    fn body(&self) -> &[u8] {
        &self.bytes[self.body_start()..]
    }

    /// When the envelope stops being valid (seconds since the Unix epoch), if ever.
    pub fn expires(&self) -> Option<u64> {
        (self.bytes[7] == VERSION_EXPIRING).then(|| {
            let mut at = [0u8; EXPIRY_LEN];
            at.copy_from_slice(&self.bytes[HEADER_LEN..HEADER_LEN + EXPIRY_LEN]);
            u64::from_le_bytes(at)
        })
    }

    /// Refuses an envelope that expired at or before `now` (seconds since the Unix epoch).
    /// The expiry is only as trustworthy as the signature: check [`Self::verify`] too.
    pub fn check_expiry(&self, now: u64) -> Result<(), Error> {
        match self.expires() {
            Some(at) if at <= now => Err(Error::Expired {
                id: self.id(),
                at,
                now,
            }),
            _ => Ok(()),
        }
    }

    /// Wraps bytes read from a store or the network, checking only the envelope's shape.
    pub fn from_bytes(bytes: Vec<u8>, limits: &Limits) -> Result<Self, Error> {
        if bytes.len() as u64 > limits.max_signed_bytes {
            return Err(Error::LimitExceeded {
                what: "signed index size",
                value: bytes.len() as u64,
                limit: limits.max_signed_bytes,
            });
        }
        if bytes.len() < HEADER_LEN {
            return Err(Error::Truncated("signed index header"));
        }
        if &bytes[..7] != MAGIC {
            return Err(Error::BadMagic {
                what: "signed index",
            });
        }
        if bytes[7] != VERSION && bytes[7] != VERSION_EXPIRING {
            return Err(Error::UnsupportedVersion {
                what: "signed index",
                version: bytes[7],
            });
        }
        if bytes[7] == VERSION_EXPIRING && bytes.len() < HEADER_LEN + EXPIRY_LEN {
            return Err(Error::Truncated("signed index expiry"));
        }
        Ok(Self { bytes })
    }

    /// The raw envelope.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The index id: blake3 of the publisher key (as named in the envelope), the expiry
    /// if any and the compressed body, so one layer signed by two keys, or with two
    /// expiries, has two ids.
    pub fn id(&self) -> IndexId {
        let mut h = blake3::Hasher::new();
        h.update(&self.bytes[8..40]);
        if let Some(at) = self.expires() {
            h.update(&at.to_le_bytes());
        }
        h.update(self.body());
        IndexId(*h.finalize().as_bytes())
    }

    /// The id this envelope had before ids named the signer: blake3 of the compressed body.
    pub fn legacy_id(&self) -> IndexId {
        IndexId::of(self.body())
    }

    /// The publisher key named in the envelope (not yet trusted).
    pub fn publisher(&self) -> Result<PublicKey, Error> {
        let mut raw = [0u8; 32];
        raw.copy_from_slice(&self.bytes[8..40]);
        PublicKey::from_bytes(&raw)
    }

    /// Checks that the signing key is trusted and the signature covers these bytes.
    pub fn verify(&self, trusted: &[PublicKey]) -> Result<(), Error> {
        let key = self.publisher()?;
        let mut sig = [0u8; 64];
        sig.copy_from_slice(&self.bytes[40..104]);
        let sig = ed25519_dalek::Signature::from_bytes(&sig);
        key.0
            .verify_strict(
                &signed_message(self.expires(), blake3::hash(self.body()).as_bytes()),
                &sig,
            )
            .map_err(|_| Error::BadSignature { key: key.to_hex() })?;
        if !trusted.contains(&key) {
            return Err(Error::UntrustedKey { key: key.to_hex() });
        }
        Ok(())
    }

    /// Decompresses (bounded by `limits`) and decodes the body. Does not verify.
    pub fn decode(&self, limits: &Limits) -> Result<Index, Error> {
        let mut body = Vec::new();
        let decoder = zstd::stream::read::Decoder::new(self.body()).map_err(Error::Decompress)?;
        decoder
            .take(limits.max_body_bytes + 1)
            .read_to_end(&mut body)
            .map_err(Error::Decompress)?;
        if body.len() as u64 > limits.max_body_bytes {
            return Err(Error::LimitExceeded {
                what: "decompressed index size",
                value: body.len() as u64,
                limit: limits.max_body_bytes,
            });
        }
        codec::decode(&body, limits)
    }

    /// Everything a consumer needs in one call: envelope shape, expected id, trusted
    /// signature, strict decode.
    pub fn open(
        bytes: Vec<u8>,
        expected: Option<IndexId>,
        trusted: &[PublicKey],
        limits: &Limits,
    ) -> Result<(Self, Index), Error> {
        let signed = Self::from_bytes(bytes, limits)?;
        if let Some(expected) = expected {
            let actual = signed.id();
            // An id from before ids named the signer (the body's digest alone) still
            // names this content: stores published with older versions keep working. The
            // signature below is checked against the trusted keys either way.
            if actual != expected && expected != signed.legacy_id() {
                return Err(Error::IdMismatch { expected, actual });
            }
        }
        signed.verify(trusted)?;
        let index = signed.decode(limits)?;
        Ok((signed, index))
    }
}

/// What is signed: the domain tag (one per version), the expiry (version 2) and the blake3
/// of the compressed body. (The key is not in it: an ed25519 signature already verifies
/// only under its own key.)
fn signed_message(expires: Option<u64>, body_digest: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN_EXPIRING.len() + EXPIRY_LEN + 32);
    match expires {
        Some(at) => {
            m.extend_from_slice(DOMAIN_EXPIRING);
            m.extend_from_slice(&at.to_le_bytes());
        }
        None => m.extend_from_slice(DOMAIN),
    }
    m.extend_from_slice(body_digest);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> Index {
        use crate::index::{Entry, EntryFlags, EntryIdx, EntryKind, Meta};
        Index {
            chunk_size: 1 << 20,
            chunks: Vec::new(),
            entries: vec![Entry {
                parent: EntryIdx(0),
                name: Box::default(),
                meta: Meta {
                    mode: 0o755,
                    uid: 0,
                    gid: 0,
                    mtime: 0,
                    mtime_nsec: 0,
                },
                flags: EntryFlags::default(),
                kind: EntryKind::Dir,
            }],
            urgent: Vec::new(),
            image: None,
        }
    }

    /// The same layer published with a second key kept the first key's index (the id named
    /// the content only), so nodes trusting only the second key refused it.
    #[test]
    fn the_same_index_signed_by_two_keys_has_two_ids_each_opening_for_its_key_only() {
        let (k1, k2) = (
            SecretKey::generate().expect("key"),
            SecretKey::generate().expect("key"),
        );
        let limits = Limits::default();
        let s1 = SignedIndex::sign(&index(), &k1, 3);
        let s2 = SignedIndex::sign(&index(), &k2, 3);
        assert_ne!(s1.id(), s2.id(), "the id names the signer");
        assert_eq!(
            s1.id(),
            SignedIndex::sign(&index(), &k1, 3).id(),
            "same content, same key, same id"
        );
        let open = |s: &SignedIndex, trusted: &[PublicKey]| {
            SignedIndex::open(s.as_bytes().to_vec(), Some(s.id()), trusted, &limits)
        };
        open(&s2, &[k2.public()]).expect("the second key's nodes accept its envelope");
        open(&s1, &[k1.public()]).expect("the first key's nodes accept theirs");
        assert!(matches!(
            open(&s1, &[k2.public()]),
            Err(Error::UntrustedKey { .. })
        ));
        // The first key's envelope under the second key's id: refused, never swapped in.
        let swapped = SignedIndex::open(
            s1.as_bytes().to_vec(),
            Some(s2.id()),
            &[k1.public()],
            &limits,
        );
        assert!(matches!(swapped, Err(Error::IdMismatch { .. })));
    }

    #[test]
    fn a_key_swapped_into_an_envelope_fails_the_signature() {
        let (k1, k2) = (
            SecretKey::generate().expect("key"),
            SecretKey::generate().expect("key"),
        );
        let mut bytes = SignedIndex::sign(&index(), &k1, 3).as_bytes().to_vec();
        bytes[8..40].copy_from_slice(k2.public().0.as_bytes());
        let forged = SignedIndex::from_bytes(bytes, &Limits::default()).expect("shape");
        assert!(matches!(
            forged.verify(&[k2.public()]),
            Err(Error::BadSignature { .. })
        ));
    }

    #[test]
    fn an_id_from_before_ids_named_the_signer_still_opens_its_index() {
        let key = SecretKey::generate().expect("key");
        let signed = SignedIndex::sign(&index(), &key, 3);
        let legacy = signed.legacy_id();
        assert_ne!(legacy, signed.id());
        let limits = Limits::default();
        SignedIndex::open(
            signed.as_bytes().to_vec(),
            Some(legacy),
            &[key.public()],
            &limits,
        )
        .expect("an old store's id opens");
        let other = SecretKey::generate().expect("key");
        let e = SignedIndex::open(
            signed.as_bytes().to_vec(),
            Some(legacy),
            &[other.public()],
            &limits,
        )
        .expect_err("still only for trusted keys");
        assert!(matches!(e, Error::UntrustedKey { .. }), "{e}");
    }

    /// Issue 17: an index can carry an expiry. It is part of what is signed (changing it
    /// breaks the signature) and of the id; nodes refuse the envelope from then on;
    /// envelopes without one keep version 1, byte for byte.
    #[test]
    fn an_expiry_is_signed_checked_and_part_of_the_id() {
        let key = SecretKey::generate().expect("key");
        let trusted = [key.public()];
        let limits = Limits::default();
        let forever = SignedIndex::sign(&index(), &key, 3);
        assert_eq!(forever.as_bytes()[7], VERSION);
        assert_eq!(forever.expires(), None);
        forever.check_expiry(u64::MAX).expect("never expires");

        let until = SignedIndex::sign_until(&index(), &key, 3, Some(1_000));
        assert_eq!(until.expires(), Some(1_000));
        assert_ne!(until.id(), forever.id());
        let (opened, decoded) = SignedIndex::open(
            until.as_bytes().to_vec(),
            Some(until.id()),
            &trusted,
            &limits,
        )
        .expect("opens");
        assert_eq!(decoded, index());
        opened.check_expiry(999).expect("valid before");
        let e = opened.check_expiry(1_000).expect_err("expired").to_string();
        assert!(
            e.contains("expired at 1000") && e.contains("publish it again"),
            "{e}"
        );

        // Moving the expiry breaks the signature.
        let mut later = until.as_bytes().to_vec();
        later[HEADER_LEN..HEADER_LEN + EXPIRY_LEN].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = SignedIndex::open(later, None, &trusted, &limits).expect_err("tampered");
        assert!(matches!(e, Error::BadSignature { .. }), "{e}");
        // A version-2 envelope cut inside its expiry is refused as truncated.
        let short = until.as_bytes()[..HEADER_LEN + 3].to_vec();
        assert!(matches!(
            SignedIndex::from_bytes(short, &limits),
            Err(Error::Truncated(_))
        ));
    }
}

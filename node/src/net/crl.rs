//! The cluster's revocation list as it travels between nodes: what a received CRL says
//! ([`CrlFacts`], read only after its signature checks out against the cluster CA,
//! [`verify`]), whether it may replace the one a node holds ([`judge`], a pure decision),
//! and installing it in a node's identity directory ([`install`]).
//!
//! A CRL is signed by the cluster CA, so any node may pass it on: a node believes one that
//! the CA signed, that is newer than its own (a strictly greater CRL number) and whose next
//! update is not past. A forged, corrupt, older or expired list never replaces a good one.
//!
//! This module decides and writes files; it opens no sockets and reloads nothing. Sending
//! and receiving CRLs, and making the transport use a new one, is `node::crls`'s business.

use std::path::Path;

use rustls_pki_types::CertificateDer;

use super::NetError;
use super::pki::{CA_CERT, CRL, read_cert, read_crl, write_atomic};

/// Largest CRL accepted from a peer (a revoked certificate costs about 40 bytes, so this
/// is some 25,000 of them).
pub(crate) const MAX_CRL: usize = 1 << 20;

/// What a CRL says, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlFacts {
    /// Its CRL number (`None`: it has none; such a list cannot be ordered, see [`judge`]).
    pub number: Option<u64>,
    /// When it was issued, in seconds since the Unix epoch.
    pub this_update: i64,
    /// When its issuer promises a newer one, in seconds since the Unix epoch (`None`: never).
    pub next_update: Option<i64>,
    /// The serial numbers it revokes, as raw DER integer bytes.
    pub revoked: Vec<Vec<u8>>,
}

/// Whether a received CRL should replace the one a node holds ([`judge`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than the one held (or the node holds none): install it.
    Install,
    /// The same number as the one held: nothing to do.
    Same,
    /// Older than the one held: ignored.
    Older {
        /// The number held.
        held: u64,
    },
    /// Refused: it cannot be trusted to be current (no number, or past its next update).
    Refused(String),
}

/// Decides whether `offered` (signature already verified) replaces `held` at `now` (seconds
/// since the Unix epoch). A list without a CRL number cannot be ordered and is refused; a
/// held list without one (made by another tool) is replaced by any numbered list.
pub fn judge(held: Option<&CrlFacts>, offered: &CrlFacts, now: i64) -> Verdict {
    let Some(number) = offered.number else {
        return Verdict::Refused("it carries no CRL number, so it cannot be ordered".into());
    };
    if let Some(next) = offered.next_update.filter(|next| *next < now) {
        return Verdict::Refused(format!(
            "it is past its next update ({} s ago)",
            now.saturating_sub(next)
        ));
    }
    match held.and_then(|h| h.number) {
        Some(h) if h == number => Verdict::Same,
        Some(h) if h > number => Verdict::Older { held: h },
        _ => Verdict::Install,
    }
}

/// Reads a CRL (DER) without checking who signed it: for the node's own `crl.pem`, which
/// `tls` checked when it loaded it, and for `teesfs doctor`.
pub fn facts(der: &[u8]) -> Result<CrlFacts, NetError> {
    let (rest, crl) = x509_parser::parse_x509_crl(der)
        .map_err(|e| NetError::BadCrl(format!("not a revocation list: {e}")))?;
    if !rest.is_empty() {
        return Err(NetError::BadCrl(format!(
            "{} bytes after the revocation list",
            rest.len()
        )));
    }
    let number = match crl.crl_number() {
        None => None,
        Some(n) => Some(u64::try_from(n.clone()).map_err(|_| {
            NetError::BadCrl(format!("CRL number {n} is larger than teesfs orders"))
        })?),
    };
    Ok(CrlFacts {
        number,
        this_update: crl.last_update().timestamp(),
        next_update: crl.next_update().map(|t| t.timestamp()),
        revoked: crl
            .iter_revoked_certificates()
            .map(|r| r.raw_serial().to_vec())
            .collect(),
    })
}

/// Reads a CRL (DER) received from a peer, after checking that the cluster CA `ca` issued
/// and signed it. Errors say what is wrong with it (corrupt, another CA's, a bad signature).
pub fn verify(der: &[u8], ca: &CertificateDer<'_>) -> Result<CrlFacts, NetError> {
    let (_, ca) = x509_parser::parse_x509_certificate(ca)
        .map_err(|e| NetError::BadCrl(format!("the cluster CA is not a certificate: {e}")))?;
    let (_, crl) = x509_parser::parse_x509_crl(der)
        .map_err(|e| NetError::BadCrl(format!("not a revocation list: {e}")))?;
    if crl.issuer() != ca.subject() {
        return Err(NetError::BadCrl(format!(
            "issued by {}, not by this cluster's CA ({})",
            crl.issuer(),
            ca.subject()
        )));
    }
    crl.verify_signature(ca.public_key()).map_err(|e| {
        NetError::BadCrl(format!(
            "its signature does not check out against the cluster CA: {e}"
        ))
    })?;
    facts(der)
}

/// [`verify`] against the cluster CA of the identity directory `dir` (`dir/ca.crt`).
pub(crate) fn verify_in(dir: &Path, der: &[u8]) -> Result<CrlFacts, NetError> {
    verify(der, &read_cert(&dir.join(CA_CERT))?)
}

/// What the identity directory `dir`'s own `crl.pem` says (`None`: there is none).
pub fn held(dir: &Path) -> Result<Option<CrlFacts>, NetError> {
    let path = dir.join(CRL);
    if !path.exists() {
        return Ok(None);
    }
    facts(&read_crl(&path)?).map(Some)
}

/// The PEM form of a CRL, as `teesfs keygen --revoke` writes it (so every node's
/// `crl.pem` is the same bytes as the login node's).
pub fn pem(der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new("X509 CRL", der.to_vec()), config)
}

/// Writes `der` as `dir/crl.pem` (mode 0644) through an atomic rename: readers see the old
/// list or the new one, never half of either.
pub fn install(dir: &Path, der: &[u8]) -> Result<(), NetError> {
    write_atomic(&dir.join(CRL), pem(der).as_bytes(), 0o644, true)
}

#[cfg(test)]
#[path = "crl_tests.rs"]
mod tests;

//! Issuing cluster credentials: one CA per cluster, one certificate and key per host, the
//! revocation list, and the files they live in.
//!
//! A host's certificate carries its host name as the only subject alternative name and is
//! good for both TLS server and client authentication, because every node dials and is dialled.
//! The CA may sign end-entity certificates only (path length 0).
//!
//! A cluster directory holds `ca.crt` and `ca.key` ([`CA_CERT`], [`CA_KEY`]), `<host>.crt` and
//! `<host>.key` per host, and optionally `crl.pem` ([`CRL`]). Keys are written with mode 0600,
//! everything through an atomic rename, so a crash never leaves half a key behind. The readers
//! here are bounded (credentials are small) and are also what `tls` loads an identity with.
//!
//! Revocation: [`revoke`] adds hosts' certificate serials to a CRL signed by the cluster CA.
//! Enforcing it is not this module's business: `tls` reads the CRL and refuses listed peers,
//! and `crl` decides whether a CRL from a peer replaces a node's own.
//!
//! This module only writes and reads files: it builds no TLS configuration, judges no peer
//! and opens no sockets.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevocationReason,
    RevokedCertParams, SerialNumber,
};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, ServerName};

use super::NetError;

/// File name of the cluster CA certificate inside a cluster directory.
pub const CA_CERT: &str = "ca.crt";
/// File name of the cluster CA private key inside a cluster directory.
pub const CA_KEY: &str = "ca.key";
/// File name of the certificate revocation list inside a cluster directory (optional; written
/// by [`revoke`]).
pub const CRL: &str = "crl.pem";

/// Creates a cluster CA (`dir/ca.crt`, `dir/ca.key`) if absent, and a certificate and key for
/// each host signed by it (`dir/<host>.crt`, `dir/<host>.key`; SAN = host name).
///
/// Idempotent: an existing CA is reused and existing host certificate + key pairs are kept. A
/// host with only one of its two files gets a fresh pair (a lone key or certificate is useless),
/// and so does a host whose certificate `dir/crl.pem` revokes; a CA with only one of its two
/// files is an error, because replacing it would orphan every certificate it signed. Key files
/// are created with mode 0600, certificates 0644, each by an atomic rename. Returns the paths
/// written, CA first. Host certificates never expire; see [`make_cluster_valid_for`].
pub fn make_cluster(dir: &Path, hosts: &[String]) -> Result<Vec<PathBuf>, NetError> {
    make_cluster_valid_for(dir, hosts, None)
}

/// [`make_cluster`], with newly issued host certificates valid from an hour ago (clock skew)
/// for `valid_for` (`None`: no expiry). Peers refuse a certificate outside its validity.
pub fn make_cluster_valid_for(
    dir: &Path,
    hosts: &[String],
    valid_for: Option<std::time::Duration>,
) -> Result<Vec<PathBuf>, NetError> {
    for host in hosts {
        check_host(host)?;
    }
    let not_after = not_after(dir, valid_for)?;
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| io_err(dir, source))?;
    }
    let mut written = Vec::new();
    let issuer = cluster_ca(dir, &mut written)?;

    let revoked = revoked_serials(dir)?;
    for host in hosts {
        let cert_path = dir.join(format!("{host}.crt"));
        let key_path = dir.join(format!("{host}.key"));
        if cert_path.exists()
            && key_path.exists()
            && !revoked.contains(&serial_of(&read_cert(&cert_path)?, &cert_path)?)
        {
            continue;
        }
        let key = KeyPair::generate()?;
        let cert = host_params(host, not_after)?.signed_by(&key, &issuer)?;
        write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600, true)?;
        write_atomic(&cert_path, cert.pem().as_bytes(), 0o644, true)?;
        written.extend([cert_path, key_path]);
    }
    Ok(written)
}

/// What a host's certificate says: its name as CN and only SAN, server and client use, and
/// the validity (from an hour ago, for clock skew, to `not_after`; `None`: no expiry).
pub(super) fn host_params(
    host: &str,
    not_after: Option<time::OffsetDateTime>,
) -> Result<CertificateParams, NetError> {
    let mut params = CertificateParams::new(vec![host.to_owned()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, host);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    if let Some(not_after) = not_after {
        params.not_before = time::OffsetDateTime::now_utc() - time::Duration::HOUR;
        params.not_after = not_after;
    }
    Ok(params)
}

/// The end of a new host certificate's validity, `valid_for` from now. A validity that
/// overflows the calendar (it panicked) or is empty is refused before anything is written.
pub(super) fn not_after(
    dir: &Path,
    valid_for: Option<std::time::Duration>,
) -> Result<Option<time::OffsetDateTime>, NetError> {
    let Some(d) = valid_for else {
        return Ok(None);
    };
    let now = time::OffsetDateTime::now_utc();
    time::Duration::try_from(d)
        .ok()
        .and_then(|d| now.checked_add(d))
        .filter(|end| end.year() <= 9999 && d > std::time::Duration::ZERO)
        .map(Some)
        .ok_or_else(|| NetError::Credential {
            path: dir.to_path_buf(),
            reason: format!(
                "a validity of {} days is not a usable expiry (1 day to the year 9999)",
                d.as_secs() / 86_400
            ),
        })
}

/// The cluster CA in `dir`: loaded, or made (and its files added to `written`) when neither
/// of its files exists. One file without the other is an error that says what to do.
fn cluster_ca(
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<Issuer<'static, KeyPair>, NetError> {
    let ca_cert = dir.join(CA_CERT);
    let ca_key = dir.join(CA_KEY);
    match (ca_cert.exists(), ca_key.exists()) {
        (true, true) => load_issuer(dir),
        (false, false) => {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::default();
            // A per-cluster name makes "unknown issuer" errors name the other cluster's CA.
            let tag = blake3::hash(key.public_key_raw()).to_hex();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params.distinguished_name.push(
                DnType::CommonName,
                format!("teesfs cluster CA {}", &tag[..12]),
            );
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let cert = params.self_signed(&key)?;
            write_atomic(&ca_key, key.serialize_pem().as_bytes(), 0o600, false)?;
            write_atomic(&ca_cert, cert.pem().as_bytes(), 0o644, false)?;
            written.extend([ca_cert, ca_key]);
            Ok(Issuer::new(params, key))
        }
        (cert_exists, _) => {
            let (present, missing) = if cert_exists {
                (&ca_cert, &ca_key)
            } else {
                (&ca_key, &ca_cert)
            };
            Err(NetError::Credential {
                path: missing.clone(),
                reason: format!(
                    "missing while {} exists; restore it, or remove both to make a new cluster CA \
                     (which invalidates every certificate it signed)",
                    present.display()
                ),
            })
        }
    }
}

/// Revokes the current certificates of `hosts`: adds their serial numbers to the cluster's
/// revocation list `dir/crl.pem` (created if absent, signed by `dir/ca.key`; entries already
/// there are kept and the CRL number goes up by one). Returns the revoked serials in hex.
///
/// Peers refuse a revoked certificate once they have the new `crl.pem` (it is read by
/// [`Identity::load`](super::Identity::load)). The tree carries it: with the new `crl.pem`
/// in the login node's identity directory, every push hands it to the nodes, which install
/// it and pass it on (see [`super::crl`]); copying it to each node and reloading its daemon
/// works too. Running [`make_cluster`] for a revoked host afterwards issues it a fresh
/// certificate and key.
pub fn revoke(dir: &Path, hosts: &[String]) -> Result<Vec<String>, NetError> {
    let issuer = load_issuer(dir)?;
    let crl_path = dir.join(CRL);
    let now = time::OffsetDateTime::now_utc();
    let mut revoked = Vec::new();
    let mut crl_number = 1u64;
    if crl_path.exists() {
        let der = read_crl(&crl_path)?;
        let (_, crl) = x509_parser::parse_x509_crl(&der).map_err(|e| NetError::Credential {
            path: crl_path.clone(),
            reason: format!("not a revocation list: {e}"),
        })?;
        crl_number += crl
            .crl_number()
            .and_then(|n| u64::try_from(n.clone()).ok())
            .unwrap_or(0);
        for entry in crl.iter_revoked_certificates() {
            revoked.push(RevokedCertParams {
                serial_number: SerialNumber::from_slice(entry.raw_serial()),
                revocation_time: entry.revocation_date.to_datetime(),
                reason_code: Some(RevocationReason::KeyCompromise),
                invalidity_date: None,
            });
        }
    }
    let mut serials = Vec::new();
    for host in hosts {
        check_host(host)?;
        let path = dir.join(format!("{host}.crt"));
        let serial = serial_of(&read_cert(&path)?, &path)?;
        serials.push(hex::encode(&serial));
        if !revoked.iter().any(|r| r.serial_number.as_ref() == serial) {
            revoked.push(RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: now,
                reason_code: Some(RevocationReason::KeyCompromise),
                invalidity_date: None,
            });
        }
    }
    let params = CertificateRevocationListParams {
        this_update: now - time::Duration::HOUR,
        // TLS does not enforce the CRL's own expiry, and nodes pass on no list past its next
        // update: a far next update keeps revocation in force, for other tools reading it too.
        next_update: now + time::Duration::days(100 * 365),
        crl_number: SerialNumber::from(crl_number),
        issuing_distribution_point: None,
        revoked_certs: revoked,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&issuer)?;
    write_atomic(&crl_path, crl.pem()?.as_bytes(), 0o644, true)?;
    Ok(serials)
}

/// The cluster CA as an issuer, from `dir/ca.crt` and `dir/ca.key`.
pub(super) fn load_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, NetError> {
    let ca_cert = dir.join(CA_CERT);
    let ca_key = dir.join(CA_KEY);
    let key = KeyPair::from_pem(&read_string(&ca_key)?).map_err(|e| NetError::Credential {
        path: ca_key.clone(),
        reason: format!("not a PEM private key: {e}"),
    })?;
    Issuer::from_ca_cert_pem(&read_string(&ca_cert)?, key).map_err(|e| NetError::Credential {
        path: ca_cert.clone(),
        reason: format!("not a PEM CA certificate: {e}"),
    })
}

/// The serial numbers `dir/crl.pem` revokes (none without the file).
fn revoked_serials(dir: &Path) -> Result<Vec<Vec<u8>>, NetError> {
    let path = dir.join(CRL);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let der = read_crl(&path)?;
    let (_, crl) = x509_parser::parse_x509_crl(&der).map_err(|e| NetError::Credential {
        path: path.clone(),
        reason: format!("not a revocation list: {e}"),
    })?;
    Ok(crl
        .iter_revoked_certificates()
        .map(|r| r.raw_serial().to_vec())
        .collect())
}

/// What `teesfs doctor` shows of a certificate: the names it is for and when it expires.
#[derive(Debug, Clone)]
pub struct CertSummary {
    /// Its DNS subject alternative names.
    pub names: Vec<String>,
    /// The end of its validity, in seconds since the Unix epoch.
    pub not_after: i64,
}

/// Reads the certificate at `path` (PEM) for [`CertSummary`]. Whether it is valid is
/// [`Identity::load`](super::Identity::load)'s business.
pub fn cert_summary(path: &Path) -> Result<CertSummary, NetError> {
    let der = read_cert(path)?;
    let bad = |reason: String| NetError::Credential {
        path: path.to_owned(),
        reason,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| bad(format!("not an X.509 certificate: {e}")))?;
    let names = cert
        .subject_alternative_name()
        .map_err(|e| bad(format!("unreadable subject alternative names: {e}")))?
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(CertSummary {
        names,
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// A certificate's serial number as its raw DER integer bytes.
fn serial_of(der: &CertificateDer<'_>, path: &Path) -> Result<Vec<u8>, NetError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| NetError::Credential {
        path: path.to_owned(),
        reason: format!("not an X.509 certificate: {e}"),
    })?;
    Ok(cert.raw_serial().to_vec())
}

/// Accepts names that are valid TLS server names and safe as file-name stems.
pub(super) fn check_host(host: &str) -> Result<(), NetError> {
    let bad = || NetError::BadHost(host.to_owned());
    let chars_ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if host.is_empty()
        || host.len() > 253
        || !chars_ok
        || host.starts_with(['.', '-'])
        || host == "ca"
    {
        return Err(bad());
    }
    ServerName::try_from(host).map_err(|_| bad())?;
    Ok(())
}

/// Credentials (certificates, keys, the CRL) are small: a larger file, a FIFO or a device
/// is refused without being read.
const MAX_CREDENTIAL_FILE: u64 = 4 << 20;

pub(super) fn read(path: &Path) -> Result<Vec<u8>, NetError> {
    seeder::files::read_limited(path, MAX_CREDENTIAL_FILE, seeder::files::Symlinks::Follow)
        .map_err(|source| io_err(path, source))
}

pub(super) fn read_string(path: &Path) -> Result<String, NetError> {
    seeder::files::read_limited_to_string(
        path,
        MAX_CREDENTIAL_FILE,
        seeder::files::Symlinks::Follow,
    )
    .map_err(|source| io_err(path, source))
}

pub(super) fn read_cert(path: &Path) -> Result<CertificateDer<'static>, NetError> {
    CertificateDer::from_pem_slice(&read(path)?).map_err(|e| NetError::Credential {
        path: path.to_owned(),
        reason: format!("not a PEM certificate: {e}"),
    })
}

pub(super) fn read_crl(path: &Path) -> Result<CertificateRevocationListDer<'static>, NetError> {
    CertificateRevocationListDer::from_pem_slice(&read(path)?).map_err(|e| NetError::Credential {
        path: path.to_owned(),
        reason: format!("not a PEM revocation list: {e}"),
    })
}

fn io_err(path: &Path, source: std::io::Error) -> NetError {
    NetError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes through a private temporary file in the same directory and renames it into place,
/// so a crash never leaves a half-written key behind. Replaces an existing file only if
/// `replace`.
pub(super) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    replace: bool,
) -> Result<(), NetError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|source| io_err(dir, source))?;
    tmp.write_all(bytes)
        .and_then(|()| {
            tmp.as_file()
                .set_permissions(fs::Permissions::from_mode(mode))
        })
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|source| io_err(tmp.path(), source))?;
    let persisted = if replace {
        tmp.persist(path)
    } else {
        tmp.persist_noclobber(path)
    };
    persisted.map_err(|e| io_err(path, e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Identity;

    fn hosts(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn make_cluster_writes_ca_and_hosts_then_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = make_cluster(dir.path(), &hosts(&["a", "b"])).expect("make_cluster");
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["ca.crt", "ca.key", "a.crt", "a.key", "b.crt", "b.key"]
        );
        assert_eq!(mode(&dir.path().join("ca.key")), 0o600);
        assert_eq!(mode(&dir.path().join("a.key")), 0o600);
        assert_eq!(mode(&dir.path().join("a.crt")), 0o644);

        let before: Vec<_> = written.iter().map(|p| fs::read(p).expect("read")).collect();
        let again = make_cluster(dir.path(), &hosts(&["a", "b"])).expect("second run");
        assert!(again.is_empty(), "second run wrote {again:?}");
        let after: Vec<_> = written.iter().map(|p| fs::read(p).expect("read")).collect();
        assert_eq!(
            before, after,
            "existing credentials must be kept byte for byte"
        );

        for host in ["a", "b"] {
            let id = Identity::load(dir.path(), host).expect("load");
            assert_eq!(id.host, host);
        }
    }

    #[test]
    fn make_cluster_adds_hosts_under_the_existing_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        make_cluster(dir.path(), &hosts(&["a"])).expect("first");
        let ca = fs::read(dir.path().join("ca.crt")).expect("ca");
        let written = make_cluster(dir.path(), &hosts(&["a", "c"])).expect("second");
        assert_eq!(
            written,
            [dir.path().join("c.crt"), dir.path().join("c.key")]
        );
        assert_eq!(fs::read(dir.path().join("ca.crt")).expect("ca"), ca);
        // Loading checks the chain, so this proves c was signed by the same CA.
        Identity::load(dir.path(), "c").expect("c chains to the original CA");
    }

    #[test]
    fn make_cluster_replaces_a_lone_host_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        make_cluster(dir.path(), &hosts(&["a"])).expect("first");
        fs::remove_file(dir.path().join("a.crt")).expect("rm");
        let written = make_cluster(dir.path(), &hosts(&["a"])).expect("second");
        assert_eq!(written.len(), 2);
        Identity::load(dir.path(), "a").expect("fresh pair loads");
    }

    #[test]
    fn make_cluster_refuses_half_a_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        make_cluster(dir.path(), &hosts(&["a"])).expect("first");
        fs::remove_file(dir.path().join("ca.key")).expect("rm");
        let err = make_cluster(dir.path(), &hosts(&["b"])).expect_err("half a CA");
        assert!(err.to_string().contains("ca.key"), "{err}");
        assert!(!dir.path().join("b.crt").exists());
    }

    #[test]
    fn bad_host_names_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["", "../x", "a/b", "ca", ".hidden", "-x", "sp ace"] {
            let err = make_cluster(dir.path(), &hosts(&[bad])).expect_err(bad);
            assert!(matches!(err, NetError::BadHost(_)), "{bad}: {err}");
        }
        assert!(
            !dir.path().join("ca.crt").exists(),
            "nothing written for bad input"
        );
    }
}

//! Cluster credentials: one CA per cluster, one certificate per host, and the rustls
//! configurations built from them.
//!
//! A host's certificate carries its host name as the only subject alternative name and is
//! good for both TLS server and client authentication, because every node dials and is dialled.
//! The CA may sign end-entity certificates only (path length 0).
//!
//! Revocation: [`revoke`] adds hosts' certificate serials to a CRL signed by the cluster CA,
//! `crl.pem` in the cluster directory. [`Identity::load`] reads it when present and both
//! verifiers (as server and as client) refuse a peer whose certificate it lists; nodes read it
//! at start, so after revoking, copy `crl.pem` to every node's identity directory and restart
//! their daemons. Expired (or not yet valid) certificates are refused by the same verifiers.
//!
//! Everything uses the `ring` crypto provider explicitly; nothing here reads or installs a
//! process-wide default provider. This module touches files only in [`make_cluster`] and
//! [`Identity::load`]; it opens no sockets.

use std::fmt;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevocationReason,
    RevokedCertParams, SerialNumber,
};
use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};

use super::NetError;

/// The ALPN protocol both sides must speak; a peer speaking anything else is refused.
pub const ALPN: &[u8] = b"teesfs/1";

/// File name of the cluster CA certificate inside a cluster directory.
pub const CA_CERT: &str = "ca.crt";
/// File name of the cluster CA private key inside a cluster directory.
pub const CA_KEY: &str = "ca.key";
/// File name of the certificate revocation list inside a cluster directory (optional; written
/// by [`revoke`]).
pub const CRL: &str = "crl.pem";

/// A node's credentials: the cluster CA certificate, its own certificate (SAN = host name) and
/// key, ready as rustls configurations.
///
/// [`Identity::load`] checks that the certificate chains to the CA, names `host`, and matches
/// the key, so a misconfigured node fails at start-up, not at its first handshake.
#[derive(Clone)]
pub struct Identity {
    /// The host name this node's certificate carries.
    pub host: String,
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) client: Arc<ClientConfig>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configurations hold the private key; never print them.
        f.debug_struct("Identity")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Loads `dir/ca.crt`, `dir/<host>.crt` and `dir/<host>.key` (PEM) and checks them; with
    /// `dir/crl.pem` present, peers whose certificates it lists are refused (and so is this
    /// host, if its own certificate was revoked).
    pub fn load(dir: &Path, host: &str) -> Result<Identity, NetError> {
        check_host(host)?;
        let ca_path = dir.join(CA_CERT);
        let cert_path = dir.join(format!("{host}.crt"));
        let key_path = dir.join(format!("{host}.key"));
        let ca = read_cert(&ca_path)?;
        let cert = read_cert(&cert_path)?;
        let key =
            PrivateKeyDer::from_pem_slice(&read(&key_path)?).map_err(|e| NetError::Credential {
                path: key_path.clone(),
                reason: format!("not a PEM private key: {e}"),
            })?;

        let provider = provider();
        let mut roots = RootCertStore::empty();
        roots.add(ca).map_err(|e| NetError::Credential {
            path: ca_path.clone(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
        let roots = Arc::new(roots);
        let crl_path = dir.join(CRL);
        let crls = if crl_path.exists() {
            vec![read_crl(&crl_path)?]
        } else {
            Vec::new()
        };
        let verifier_err = |role: &str, e: rustls::server::VerifierBuilderError| match e {
            rustls::server::VerifierBuilderError::InvalidCrl(e) => NetError::Credential {
                path: crl_path.clone(),
                reason: format!("not a usable revocation list: {e:?}"),
            },
            e => NetError::Credential {
                path: ca_path.clone(),
                reason: format!("cannot verify {role} with this CA: {e}"),
            },
        };

        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .with_crls(crls.clone())
                .only_check_end_entity_revocation()
                .build()
                .map_err(|e| verifier_err("clients", e))?;
        let server_verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .with_crls(crls)
                .only_check_end_entity_revocation()
                .build()
                .map_err(|e| verifier_err("servers", e))?;

        // Check our own certificate the way peers will, to fail here with a clear message.
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| NetError::BadHost(host.to_owned()))?;
        let now = UnixTime::now();
        let bad_cert = |e: rustls::Error| NetError::Credential {
            path: cert_path.clone(),
            reason: format!(
                "not a valid certificate for {host} from {}: {e}",
                ca_path.display()
            ),
        };
        server_verifier
            .verify_server_cert(&cert, &[], &name, &[], now)
            .map_err(bad_cert)?;
        client_verifier
            .verify_client_cert(&cert, &[], now)
            .map_err(bad_cert)?;

        let key_mismatch = |e: rustls::Error| NetError::Credential {
            path: key_path.clone(),
            reason: format!("does not fit {}: {e}", cert_path.display()),
        };
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(vec![cert.clone()], key.clone_key())
            .map_err(key_mismatch)?;
        server.alpn_protocols = vec![ALPN.to_vec()];
        // No session resumption: a resumed session skips certificate verification, so a peer
        // whose certificate expired (or, before a restart, was revoked) could get back in with a
        // ticket from before. Connections live for a whole job; full handshakes cost nothing.
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(vec![cert], key)
            .map_err(key_mismatch)?;
        client.alpn_protocols = vec![ALPN.to_vec()];
        client.resumption = rustls::client::Resumption::disabled();

        Ok(Identity {
            host: host.to_owned(),
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

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
    // A validity that overflows the calendar (it panicked) or is empty is refused before
    // anything is written.
    let not_after = match valid_for {
        None => None,
        Some(d) => {
            let now = time::OffsetDateTime::now_utc();
            let end = time::Duration::try_from(d)
                .ok()
                .and_then(|d| now.checked_add(d))
                .filter(|end| end.year() <= 9999 && d > std::time::Duration::ZERO);
            match end {
                Some(end) => Some(end),
                None => {
                    return Err(NetError::Credential {
                        path: dir.to_path_buf(),
                        reason: format!(
                            "a validity of {} days is not a usable expiry (1 day to the year 9999)",
                            d.as_secs() / 86_400
                        ),
                    });
                }
            }
        }
    };
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| io_err(dir, source))?;
    }
    let mut written = Vec::new();
    let ca_cert = dir.join(CA_CERT);
    let ca_key = dir.join(CA_KEY);
    let issuer = match (ca_cert.exists(), ca_key.exists()) {
        (true, true) => load_issuer(dir)?,
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
            written.extend([ca_cert.clone(), ca_key.clone()]);
            Issuer::new(params, key)
        }
        (cert_exists, _) => {
            let (present, missing) = if cert_exists {
                (&ca_cert, &ca_key)
            } else {
                (&ca_key, &ca_cert)
            };
            return Err(NetError::Credential {
                path: missing.clone(),
                reason: format!(
                    "missing while {} exists; restore it, or remove both to make a new cluster CA \
                     (which invalidates every certificate it signed)",
                    present.display()
                ),
            });
        }
    };

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
        let mut params = CertificateParams::new(vec![host.clone()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, host.as_str());
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
        let cert = params.signed_by(&key, &issuer)?;
        write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600, true)?;
        write_atomic(&cert_path, cert.pem().as_bytes(), 0o644, true)?;
        written.extend([cert_path, key_path]);
    }
    Ok(written)
}

/// Revokes the current certificates of `hosts`: adds their serial numbers to the cluster's
/// revocation list `dir/crl.pem` (created if absent, signed by `dir/ca.key`; entries already
/// there are kept and the CRL number goes up by one). Returns the revoked serials in hex.
///
/// Peers refuse a revoked certificate once they have the new `crl.pem` and restarted (it is
/// read by [`Identity::load`]). Running [`make_cluster`] for a revoked host afterwards issues it
/// a fresh certificate and key.
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
        // Nodes do not enforce the CRL's own expiry; a far next update keeps it that way for
        // other tools reading it too.
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
fn load_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, NetError> {
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

/// A certificate's serial number as its raw DER integer bytes.
fn serial_of(der: &CertificateDer<'_>, path: &Path) -> Result<Vec<u8>, NetError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| NetError::Credential {
        path: path.to_owned(),
        reason: format!("not an X.509 certificate: {e}"),
    })?;
    Ok(cert.raw_serial().to_vec())
}

/// The one crypto provider the net layer uses.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts names that are valid TLS server names and safe as file-name stems.
fn check_host(host: &str) -> Result<(), NetError> {
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

/// The names a certificate is valid for: DNS names as written, IP addresses in their usual
/// text form. Used to report which host a verified peer is.
pub(crate) fn cert_names(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                4 => <[u8; 4]>::try_from(*ip)
                    .ok()
                    .map(|a| std::net::Ipv4Addr::from(a).to_string()),
                16 => <[u8; 16]>::try_from(*ip)
                    .ok()
                    .map(|a| std::net::Ipv6Addr::from(a).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Credentials (certificates, keys, the CRL) are small: a larger file, a FIFO or a device
/// is refused without being read.
const MAX_CREDENTIAL_FILE: u64 = 4 << 20;

fn read(path: &Path) -> Result<Vec<u8>, NetError> {
    seeder::files::read_limited(path, MAX_CREDENTIAL_FILE, seeder::files::Symlinks::Follow)
        .map_err(|source| io_err(path, source))
}

fn read_string(path: &Path) -> Result<String, NetError> {
    seeder::files::read_limited_to_string(
        path,
        MAX_CREDENTIAL_FILE,
        seeder::files::Symlinks::Follow,
    )
    .map_err(|source| io_err(path, source))
}

fn read_cert(path: &Path) -> Result<CertificateDer<'static>, NetError> {
    CertificateDer::from_pem_slice(&read(path)?).map_err(|e| NetError::Credential {
        path: path.to_owned(),
        reason: format!("not a PEM certificate: {e}"),
    })
}

fn read_crl(path: &Path) -> Result<CertificateRevocationListDer<'static>, NetError> {
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
fn write_atomic(path: &Path, bytes: &[u8], mode: u32, replace: bool) -> Result<(), NetError> {
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

    #[test]
    fn load_rejects_a_certificate_from_another_ca_or_for_another_host() {
        let one = tempfile::tempdir().expect("tempdir");
        let two = tempfile::tempdir().expect("tempdir");
        make_cluster(one.path(), &hosts(&["a", "b"])).expect("one");
        make_cluster(two.path(), &hosts(&["a"])).expect("two");
        fs::copy(two.path().join("a.crt"), one.path().join("a.crt")).expect("cp");
        fs::copy(two.path().join("a.key"), one.path().join("a.key")).expect("cp");
        let err = Identity::load(one.path(), "a").expect_err("foreign cert");
        assert!(
            err.to_string().contains("not a valid certificate for a"),
            "{err}"
        );

        fs::copy(one.path().join("b.crt"), one.path().join("x.crt")).expect("cp");
        fs::copy(one.path().join("b.key"), one.path().join("x.key")).expect("cp");
        let err = Identity::load(one.path(), "x").expect_err("cert for b loaded as x");
        assert!(
            err.to_string().contains("not a valid certificate for x"),
            "{err}"
        );

        make_cluster(one.path(), &hosts(&["y"])).expect("y");
        fs::copy(one.path().join("b.key"), one.path().join("y.key")).expect("cp");
        let err = Identity::load(one.path(), "y").expect_err("key of b with cert of y");
        assert!(err.to_string().contains("does not fit"), "{err}");
    }

    #[test]
    fn cert_names_reads_the_san() {
        let dir = tempfile::tempdir().expect("tempdir");
        make_cluster(dir.path(), &hosts(&["cn0001", "10.0.0.7"])).expect("make");
        let der = read_cert(&dir.path().join("cn0001.crt")).expect("cert");
        assert_eq!(cert_names(&der), ["cn0001"]);
        let der = read_cert(&dir.path().join("10.0.0.7.crt")).expect("cert");
        assert_eq!(cert_names(&der), ["10.0.0.7"]);
        Identity::load(dir.path(), "10.0.0.7").expect("IP host loads");
    }
}

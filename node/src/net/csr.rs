//! Certificates without moving private keys: a node makes its own key and a request for its
//! host name ([`make_request`]); an admin host that keeps the cluster CA signs the request
//! ([`sign_request`]), and only the certificate travels back. The CA key then never leaves
//! the admin host and a node's key never leaves the node.
//!
//! Signing trusts nothing in the request but its public key and its one host name: the
//! certificate is built as [`super::pki`] builds every host's (CN and SAN the host, server
//! and client use, the validity the signer chooses), whatever else the request asks for.

use std::path::{Path, PathBuf};

use rcgen::{CertificateSigningRequestParams, KeyPair, SanType};

use super::NetError;
use super::pki::{check_host, host_params, load_issuer, not_after, read_string, write_atomic};

/// Largest certificate request read (a request is about a kilobyte).
const MAX_REQUEST: u64 = 64 << 10;

/// Makes `dir/<host>.key` (mode 0600; an existing key is kept, so a request can be made
/// again for the same key) and the request `dir/<host>.csr` for it. Returns both paths.
pub fn make_request(dir: &Path, host: &str) -> Result<(PathBuf, PathBuf), NetError> {
    check_host(host)?;
    std::fs::create_dir_all(dir).map_err(|source| NetError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let key_path = dir.join(format!("{host}.key"));
    let key = if key_path.exists() {
        KeyPair::from_pem(&read_string(&key_path)?).map_err(|e| NetError::Credential {
            path: key_path.clone(),
            reason: format!("not a PEM private key: {e}; move it away to make a new one"),
        })?
    } else {
        let key = KeyPair::generate()?;
        write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600, false)?;
        key
    };
    // Only the name: the signer decides everything else (see [`sign_request`]).
    let mut params = rcgen::CertificateParams::new(vec![host.to_owned()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, host);
    let request = params.serialize_request(&key)?;
    let csr_path = dir.join(format!("{host}.csr"));
    write_atomic(&csr_path, request.pem()?.as_bytes(), 0o644, true)?;
    Ok((key_path, csr_path))
}

/// Signs the request at `csr` with the cluster CA in `ca_dir`: writes `<host>.crt` into
/// `out_dir`, valid for `valid_for` (`None`: no expiry). Returns the host and the path.
pub fn sign_request(
    ca_dir: &Path,
    csr: &Path,
    out_dir: &Path,
    valid_for: Option<std::time::Duration>,
) -> Result<(String, PathBuf), NetError> {
    let bad = |reason: String| NetError::Credential {
        path: csr.to_path_buf(),
        reason,
    };
    let size = std::fs::metadata(csr)
        .map_err(|source| NetError::Io {
            path: csr.to_path_buf(),
            source,
        })?
        .len();
    if size > MAX_REQUEST {
        return Err(bad(format!("is {size} bytes: not a certificate request")));
    }
    let request = CertificateSigningRequestParams::from_pem(&read_string(csr)?).map_err(|e| {
        bad(format!(
            "not a valid certificate request ({e}); make one on the node with `teesfs keygen \
             --request DIR --host NAME`"
        ))
    })?;
    let host = request_host(&request).map_err(|n| bad(n.to_string()))?;
    check_host(&host)?;
    let not_after = not_after(ca_dir, valid_for)?;
    let issuer = load_issuer(ca_dir)?;
    let cert = host_params(&host, not_after)?.signed_by(&request.public_key, &issuer)?;
    let path = out_dir.join(format!("{host}.crt"));
    write_atomic(&path, cert.pem().as_bytes(), 0o644, true)?;
    Ok((host, path))
}

/// The one host name a request asks for (its only DNS subject alternative name), or how
/// many names it asks for instead.
fn request_host(request: &CertificateSigningRequestParams) -> Result<String, NotOneHost> {
    let names: Vec<&SanType> = request.params.subject_alt_names.iter().collect();
    match names.as_slice() {
        [SanType::DnsName(name)] => Ok(name.as_str().to_owned()),
        _ => Err(NotOneHost(names.len())),
    }
}

/// A certificate request that does not name exactly one host (the count of its names).
struct NotOneHost(usize);

impl std::fmt::Display for NotOneHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => write!(f, "names no host (no subject alternative name)"),
            n => write!(
                f,
                "asks for {n} names; a node's request names exactly its own host"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_is_a_host_certificate_of_the_cluster_and_the_key_stays() {
        let t = tempfile::tempdir().expect("tmp");
        let (ca, node) = (t.path().join("ca"), t.path().join("node"));
        super::super::make_cluster(&ca, &[]).expect("ca");
        let (key, csr) = make_request(&node, "cn0007").expect("request");
        let key_before = std::fs::read(&key).expect("key");
        let day = std::time::Duration::from_secs(86_400);
        let (host, crt) = sign_request(&ca, &csr, &node, Some(30 * day)).expect("signed");
        assert_eq!(host, "cn0007");
        assert_eq!(crt, node.join("cn0007.crt"));
        // A node directory with the CA's certificate is a working identity.
        std::fs::copy(ca.join("ca.crt"), node.join("ca.crt")).expect("ca.crt");
        let summary = super::super::pki::cert_summary(&crt).expect("summary");
        assert!(summary.names.iter().any(|n| n == "cn0007"), "{summary:?}");
        let left = summary.not_after - time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((29 * 86_400..=31 * 86_400).contains(&left), "{left}");
        crate::net::Identity::load(&node, "cn0007").expect("the node's identity loads");
        // Asking again keeps the key.
        make_request(&node, "cn0007").expect("again");
        assert_eq!(std::fs::read(&key).expect("key"), key_before);
        // Not a request: named, and told how to make one.
        std::fs::write(t.path().join("junk.csr"), "junk").expect("junk");
        let e = sign_request(&ca, &t.path().join("junk.csr"), &node, None)
            .expect_err("junk")
            .to_string();
        assert!(e.contains("junk.csr") && e.contains("--request"), "{e}");
    }
}

//! Verifying cluster credentials: loading a node's [`Identity`] and building the rustls
//! server and client configurations that check every peer against the cluster CA, the host
//! name it was dialled as, the certificate's validity period and the cluster's revocation list.
//!
//! Both verifiers (as server and as client) refuse a certificate from another CA, one whose
//! validity does not cover the current time, and one that `crl.pem` lists. Nodes read the CRL
//! at start and with every reload, including a newer one a peer passed on (see
//! [`pki::revoke`](super::pki::revoke) and [`crl`](super::crl)); [`Identity::crl`] is the list
//! a node passes on in turn. The current time comes from the
//! configurations' clock, the system clock unless a test gives the identity another with
//! [`Identity::with_clock`]; [`Identity::load_at`] checks the node's own certificate at a given
//! time. Session resumption is off in both roles, so every connection is verified in full.
//!
//! Everything uses the `ring` crypto provider explicitly; nothing here reads or installs a
//! process-wide default provider. Issuing certificates, keys and CRLs is `pki`'s business, not
//! this module's; this module reads credential files only in [`Identity::load_at`] and opens
//! no sockets.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier as _;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::time_provider::TimeProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::NetError;
use super::pki::{check_host, read, read_cert, read_crl};
// Issuing moved to `pki`; these stay reachable at their old paths under `tls`.
#[doc(no_inline)]
pub use super::pki::{CA_CERT, CA_KEY, CRL, make_cluster, make_cluster_valid_for, revoke};

/// The ALPN protocol both sides must speak; a peer speaking anything else is refused.
pub const ALPN: &[u8] = b"teesfs/1";

/// A node's credentials: the cluster CA certificate, its own certificate (SAN = host name) and
/// key, ready as rustls configurations.
///
/// [`Identity::load`] checks that the certificate chains to the CA, names `host`, matches the
/// key and is valid now, so a misconfigured node fails at start-up, not at its first handshake.
#[derive(Clone)]
pub struct Identity {
    /// The host name this node's certificate carries.
    pub host: String,
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) client: Arc<ClientConfig>,
    /// The revocation list the verifiers use (DER), which the node passes on to its peers.
    pub(crate) crl: Option<bytes::Bytes>,
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
    /// Loads `dir/ca.crt`, `dir/<host>.crt` and `dir/<host>.key` (PEM) and checks them now;
    /// with `dir/crl.pem` present, peers whose certificates it lists are refused (and so is
    /// this host, if its own certificate was revoked). See [`Identity::load_at`].
    pub fn load(dir: &Path, host: &str) -> Result<Identity, NetError> {
        Identity::load_at(dir, host, UnixTime::now())
    }

    /// [`Identity::load`], checking this host's own certificate as peers would at time `now`
    /// (validity period included) instead of at the current time.
    ///
    /// Only that start-up check uses `now`: the configurations verify peers with the system
    /// clock at each handshake (or with [`Identity::with_clock`]'s).
    pub fn load_at(dir: &Path, host: &str, now: UnixTime) -> Result<Identity, NetError> {
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
        let crl = crls.first().map(|c| bytes::Bytes::copy_from_slice(c));
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
            crl,
        })
    }

    /// The revocation list (DER) this identity's verifiers refuse peers by, as read from
    /// `crl.pem` (`None`: there was none).
    pub fn crl(&self) -> Option<&[u8]> {
        self.crl.as_deref()
    }

    /// This identity with `clock` as the current time of both its configurations: what they
    /// check peers' certificate validity against at each handshake. For tests, which move a
    /// clock past a certificate's expiry instead of waiting for it; nodes use the system clock
    /// that [`Identity::load`] sets.
    ///
    /// Transports bound (or reloaded) with the returned identity use `clock`; those given the
    /// identity before keep the clock they had.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn TimeProvider>) -> Identity {
        let mut server = ServerConfig::clone(&self.server);
        server.time_provider = clock.clone();
        self.server = Arc::new(server);
        let mut client = ClientConfig::clone(&self.client);
        client.time_provider = clock;
        self.client = Arc::new(client);
        self
    }
}

/// The one crypto provider the net layer uses: *ring*'s, offering the TLS 1.3 suites in
/// [`suite_order`] for this CPU (the client's order decides).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        cipher_suites: suite_order(hardware_aes()),
        ..rustls::crypto::ring::default_provider()
    })
}

/// The TLS 1.3 suites in the order offered. With AES in hardware, AES-128-GCM first: it
/// protects every QUIC packet for less CPU than AES-256-GCM or ChaCha20-Poly1305
/// (BENCHMARKS.md, issue 33, `cargo bench -p teesfs-node --bench aead_cpu`). Without it,
/// ChaCha20-Poly1305 first, which software does faster than AES.
pub fn suite_order(hardware_aes: bool) -> Vec<rustls::SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite::{
        TLS13_AES_128_GCM_SHA256 as AES128, TLS13_AES_256_GCM_SHA384 as AES256,
        TLS13_CHACHA20_POLY1305_SHA256 as CHACHA,
    };
    if hardware_aes {
        vec![AES128, AES256, CHACHA]
    } else {
        vec![CHACHA, AES128, AES256]
    }
}

/// Whether this CPU does AES and the GCM multiply in hardware (AES-NI and PCLMULQDQ on
/// x86-64, the AES and PMULL extensions on aarch64).
pub fn hardware_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// A certificate's serial number (raw DER integer bytes; empty if it does not parse).
pub(crate) fn cert_serial(der: &CertificateDer<'_>) -> Vec<u8> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert.raw_serial().to_vec())
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use super::*;

    fn hosts(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// AES-128-GCM leads where the CPU does AES, ChaCha20-Poly1305 where it does not; every
    /// TLS 1.3 suite stays offered, so peers of either kind still agree; the provider
    /// offers this CPU's order.
    #[test]
    fn the_cheapest_suite_for_the_cpu_is_offered_first_and_every_suite_stays() {
        use rustls::CipherSuite::{
            TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
        };
        let names = |hw: bool| -> Vec<_> { suite_order(hw).iter().map(|s| s.suite()).collect() };
        assert_eq!(
            names(true),
            [
                TLS13_AES_128_GCM_SHA256,
                TLS13_AES_256_GCM_SHA384,
                TLS13_CHACHA20_POLY1305_SHA256
            ]
        );
        assert_eq!(names(false)[0], TLS13_CHACHA20_POLY1305_SHA256);
        assert_eq!(names(false).len(), 3);
        let offered: Vec<_> = provider().cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(offered, names(hardware_aes()));
    }

    /// A clock stopped at one instant.
    #[derive(Debug)]
    struct StoppedAt(UnixTime);

    impl TimeProvider for StoppedAt {
        fn current_time(&self) -> Option<UnixTime> {
            Some(self.0)
        }
    }

    /// The current time moved by `ahead` (negative: into the past), in whole seconds.
    fn now_plus(ahead: i64) -> UnixTime {
        let now = UnixTime::now().as_secs();
        UnixTime::since_unix_epoch(Duration::from_secs(now.saturating_add_signed(ahead)))
    }

    const HOUR: i64 = 3600;

    /// A cluster with `a` (no expiry) and `short` (valid from an hour ago for an hour more).
    fn cluster_with_short() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        make_cluster(dir.path(), &hosts(&["a"])).expect("a");
        make_cluster_valid_for(
            dir.path(),
            &hosts(&["short"]),
            Some(Duration::from_secs(3600)),
        )
        .expect("short");
        dir
    }

    /// Runs a TLS handshake from `client` to `server` (dialled as `name`) in memory and
    /// returns the first error with the side that raised it, `"client"` or `"server"`.
    fn handshake(
        client: &Identity,
        server: &Identity,
        name: &str,
    ) -> Result<(), (&'static str, rustls::Error)> {
        let name = ServerName::try_from(name.to_owned()).expect("server name");
        let mut c = rustls::ClientConnection::new(client.client.clone(), name)
            .map_err(|e| ("client", e))?;
        let mut s =
            rustls::ServerConnection::new(server.server.clone()).map_err(|e| ("server", e))?;
        // A TLS 1.3 handshake with client authentication takes two flights each way.
        for _ in 0..8 {
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).expect("client writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                s.read_tls(&mut rd).expect("server reads");
                s.process_new_packets().map_err(|e| ("server", e))?;
            }
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).expect("server writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).expect("client reads");
                c.process_new_packets().map_err(|e| ("client", e))?;
            }
        }
        panic!("handshake did not finish");
    }

    #[test]
    fn load_at_checks_the_validity_period_at_the_given_time() {
        let dir = cluster_with_short();
        Identity::load_at(dir.path(), "short", now_plus(HOUR / 2)).expect("within validity");
        let err = Identity::load_at(dir.path(), "short", now_plus(2 * HOUR))
            .expect_err("expired certificate loaded");
        assert!(err.to_string().contains("certificate expired"), "{err}");
        let err = Identity::load_at(dir.path(), "short", now_plus(-2 * HOUR))
            .expect_err("certificate loaded before it is valid");
        assert!(
            err.to_string().contains("certificate not valid yet"),
            "{err}"
        );
        // Without an expiry only the CA's own validity bounds it.
        Identity::load_at(dir.path(), "a", now_plus(100 * 24 * HOUR)).expect("no expiry");
    }

    #[test]
    fn the_injected_clock_decides_expiry_as_client_and_as_server() {
        let dir = cluster_with_short();
        let a = Identity::load(dir.path(), "a").expect("a");
        let short = Identity::load(dir.path(), "short").expect("short is valid now");
        handshake(&a, &short, "short").expect("short as server, now");
        handshake(&short, &a, "a").expect("short as client, now");

        // Only a's clock moves: the refusals below are a's verifiers reading it.
        let later = a
            .clone()
            .with_clock(Arc::new(StoppedAt(now_plus(2 * HOUR))));
        let (side, err) = handshake(&later, &short, "short").expect_err("expired server");
        assert_eq!(side, "client", "{err}");
        assert!(err.to_string().contains("certificate expired"), "{err}");
        let (side, err) = handshake(&short, &later, "a").expect_err("expired client");
        assert_eq!(side, "server", "{err}");
        assert!(err.to_string().contains("certificate expired"), "{err}");

        // A clock before short's validity began is refused the same way.
        let before = a.with_clock(Arc::new(StoppedAt(now_plus(-2 * HOUR))));
        let (side, err) = handshake(&before, &short, "short").expect_err("not yet valid");
        assert_eq!(side, "client", "{err}");
        assert!(err.to_string().contains("not valid yet"), "{err}");
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

//! `teesfs keygen`: create the publisher's ed25519 key pair.

use std::path::PathBuf;

use anyhow::{Context, bail};
use manifest::SecretKey;

use super::util;

/// Arguments of `teesfs keygen`.
///
/// Without `--cluster`: the publisher's ed25519 signing key pair.
/// With `--cluster DIR --nodes EXPR`: a cluster CA and one certificate per node (and the
/// login node), for the mutual TLS every peer connection requires. Copy `ca.crt`,
/// `<host>.crt` and `<host>.key` to each node's /etc/teesfs/cluster/; never copy `ca.key`.
/// With `--cluster DIR --revoke EXPR`: revoke those nodes' certificates (`DIR/crl.pem`; copy it
/// to every node and restart their daemons).
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Make cluster credentials in DIR instead of a publisher key (idempotent: the CA and
    /// existing node certificates are kept; revoked ones are replaced).
    #[arg(long, value_name = "DIR", requires = "cluster_action")]
    cluster: Option<PathBuf>,
    /// With --cluster: the nodes to certify, as a Slurm hostlist (e.g. 'login,cn[0001-0128]').
    #[arg(long, value_name = "EXPR", group = "cluster_action")]
    nodes: Option<String>,
    /// With --cluster: revoke the current certificates of these nodes (a Slurm hostlist) by
    /// adding them to the cluster's revocation list DIR/crl.pem, which every node must get.
    /// Peers refuse a revoked certificate in both directions. Re-run with --nodes to issue the
    /// nodes fresh certificates.
    #[arg(
        long,
        value_name = "EXPR",
        group = "cluster_action",
        requires = "cluster"
    )]
    revoke: Option<String>,
    /// With --cluster --nodes: new node certificates expire after this many days (default:
    /// never). Peers refuse expired certificates.
    #[arg(long, value_name = "DAYS", requires = "nodes",
          value_parser = clap::value_parser!(u32).range(1..=2_900_000))]
    valid_days: Option<u32>,
    /// Where to write the secret key (the public key goes beside it as `.pub`).
    /// Default: ~/.config/teesfs/publisher.key
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace an existing key (indexes signed with the old key will no longer be trusted
    /// by nodes that only trust the new one).
    #[arg(long)]
    force: bool,
}

/// Runs `teesfs keygen`.
pub fn run(args: KeygenArgs) -> anyhow::Result<()> {
    if let (Some(dir), Some(expr)) = (&args.cluster, &args.revoke) {
        let hosts = peertree::hostlist::expand(expr)
            .map_err(super::jobspec::explain)
            .context("reading --revoke")?;
        let serials = teesfs::net::revoke(dir, &hosts)
            .with_context(|| format!("revoking certificates in {}", dir.display()))?;
        for (host, serial) in hosts.iter().zip(&serials) {
            outln!("revoked {host} (serial {serial})");
        }
        outln!(
            "Copy {} to every node's identity directory and restart the daemons.",
            dir.join(teesfs::net::tls::CRL).display()
        );
        return Ok(());
    }
    if let Some(dir) = &args.cluster {
        let expr = args.nodes.as_deref().unwrap_or_default();
        let hosts = peertree::hostlist::expand(expr)
            .map_err(super::jobspec::explain)
            .context("reading --nodes")?;
        let valid_for = args
            .valid_days
            .map(|d| std::time::Duration::from_secs(u64::from(d) * 86_400));
        let written = teesfs::net::make_cluster_valid_for(dir, &hosts, valid_for)
            .with_context(|| format!("making cluster credentials in {}", dir.display()))?;
        outln!(
            "cluster CA and {} node certificate(s) in {} ({} file(s) written)",
            hosts.len(),
            dir.display(),
            written.len()
        );
        outln!(
            "Give each node ca.crt, <host>.crt and <host>.key; keep ca.key on the login node only."
        );
        return Ok(());
    }
    let secret_path = args.out.unwrap_or_else(util::default_key_path);
    let public_path = secret_path.with_extension("pub");
    if std::fs::symlink_metadata(&secret_path).is_ok() && !args.force {
        bail!(
            "{} already exists; pass --force to replace it",
            secret_path.display()
        );
    }
    if let Some(dir) = secret_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let key = SecretKey::generate()?;
    super::outfile::write_mode(&secret_path, key.to_file_text().as_bytes(), 0o600)?;
    super::outfile::write(&public_path, key.public().to_file_text().as_bytes())?;
    outln!("secret key: {} (keep it private)", secret_path.display());
    outln!("public key: {}", public_path.display());
    outln!("fingerprint: {}", key.public());
    outln!("Nodes must trust the public key: copy it to /etc/teesfs/trusted/ on them.");
    Ok(())
}

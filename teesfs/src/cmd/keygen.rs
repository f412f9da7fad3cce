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
/// With `--request DIR --host NAME` on a node and `--cluster DIR --sign NAME.csr` on the
/// admin host: the node's key never leaves it, only its certificate travels.
/// With `--cluster DIR --revoke EXPR`: revoke those nodes' certificates (`DIR/crl.pem`; copy it
/// to the login node's identity directory: every push hands it down the tree, and each node
/// installs it and passes it on).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  # on an admin host (not the login node): the CA, kept there
  teesfs keygen --cluster /root/teesfs-ca --nodes 'login1,cn[0001-1024]'
  # or let each node make its own key, and sign only its request
  teesfs keygen --request /etc/teesfs/cluster --host cn0001            # on cn0001
  teesfs keygen --cluster /root/teesfs-ca --sign cn0001.csr            # on the admin host
  # a publisher's signing key
  teesfs keygen --out ~/.config/teesfs/publisher.key

Node certificates expire after --valid-days (365 by default); `teesfs doctor` warns 30 days
ahead. Re-run --nodes or --sign to renew them.")]
pub struct KeygenArgs {
    /// Make cluster credentials in DIR instead of a publisher key (idempotent: the CA and
    /// existing node certificates are kept; revoked ones are replaced).
    #[arg(long, value_name = "DIR", requires = "cluster_action")]
    cluster: Option<PathBuf>,
    /// With --cluster: the nodes to certify, as a Slurm hostlist (e.g. 'login,cn[0001-0128]').
    #[arg(long, value_name = "EXPR", group = "cluster_action")]
    nodes: Option<String>,
    /// With --cluster: sign this certificate request (`NAME.csr`, made on the node by
    /// `--request`): writes `NAME.crt` beside it for the node's identity directory.
    #[arg(
        long,
        value_name = "FILE.csr",
        group = "cluster_action",
        requires = "cluster"
    )]
    sign: Option<PathBuf>,
    /// On a node: make its own key DIR/HOST.key (kept if it exists) and the request
    /// DIR/HOST.csr for the admin host to sign (`--cluster CA --sign HOST.csr`).
    #[arg(long, value_name = "DIR", requires = "host", conflicts_with_all = ["cluster", "out"])]
    request: Option<PathBuf>,
    /// With --request: this node's host name (default: the system's short host name).
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// With --cluster: revoke the current certificates of these nodes (a Slurm hostlist) by
    /// adding them to the cluster's revocation list DIR/crl.pem. Copy it to the login node's
    /// identity directory: the next push hands it to every node (each installs a newer list
    /// signed by the cluster CA and passes it on). Peers refuse a revoked certificate in both
    /// directions. Re-run with --nodes to issue the nodes fresh certificates.
    #[arg(
        long,
        value_name = "EXPR",
        group = "cluster_action",
        requires = "cluster"
    )]
    revoke: Option<String>,
    /// With --nodes or --sign: new node certificates expire after this many days. Peers
    /// refuse expired certificates; `teesfs doctor` warns 30 days ahead.
    #[arg(long, value_name = "DAYS", default_value_t = 365,
          value_parser = clap::value_parser!(u32).range(1..=2_900_000))]
    valid_days: u32,
    /// With --nodes or --sign: new node certificates never expire (only revocation ends
    /// them).
    #[arg(long, conflicts_with = "valid_days")]
    no_expiry: bool,
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
        let serials = teesfs_node::net::revoke(dir, &hosts)
            .with_context(|| format!("revoking certificates in {}", dir.display()))?;
        for (host, serial) in hosts.iter().zip(&serials) {
            outln!("revoked {host} (serial {serial})");
        }
        outln!(
            "Copy {} to the login node's identity directory: the next push (or `teesfs health`) \
             hands it to every node, which installs it and passes it on. Copying it to a node's \
             identity directory and `systemctl reload teesfs-daemon` works too.",
            dir.join(teesfs_node::net::tls::CRL).display()
        );
        return Ok(());
    }
    let valid_for = (!args.no_expiry)
        .then(|| std::time::Duration::from_secs(u64::from(args.valid_days) * 86_400));
    if let Some(dir) = &args.request {
        return request(dir, args.host.as_deref());
    }
    if let (Some(dir), Some(csr)) = (&args.cluster, &args.sign) {
        let out = csr.parent().filter(|p| !p.as_os_str().is_empty());
        let out = out.unwrap_or(std::path::Path::new("."));
        let (host, crt) =
            teesfs_node::net::sign_request(dir, csr, out, valid_for).with_context(|| {
                format!("signing {} with the CA in {}", csr.display(), dir.display())
            })?;
        outln!("signed {host}: {}", crt.display());
        outln!(
            "Give {host} this certificate and {} as its identity directory's {host}.crt and ca.crt.",
            dir.join(teesfs_node::net::tls::CA_CERT).display()
        );
        return Ok(());
    }
    if let Some(dir) = &args.cluster {
        let expr = args.nodes.as_deref().unwrap_or_default();
        let hosts = peertree::hostlist::expand(expr)
            .map_err(super::jobspec::explain)
            .context("reading --nodes")?;
        let written = teesfs_node::net::make_cluster_valid_for(dir, &hosts, valid_for)
            .with_context(|| format!("making cluster credentials in {}", dir.display()))?;
        outln!(
            "cluster CA and {} node certificate(s) in {} ({} file(s) written)",
            hosts.len(),
            dir.display(),
            written.len()
        );
        outln!(
            "Give each node ca.crt, <host>.crt and <host>.key; keep ca.key on this admin host \
             only (not on the login or compute nodes)."
        );
        return Ok(());
    }
    if args.sign.is_some() || args.host.is_some() {
        bail!("--sign needs --cluster DIR (the CA), and --host needs --request DIR");
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

/// `--request DIR [--host NAME]`: this node's own key and a request for the admin host.
fn request(dir: &std::path::Path, host: Option<&str>) -> anyhow::Result<()> {
    let host = match host {
        Some(h) => h.to_owned(),
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .and_then(|h| h.split('.').next().map(str::to_owned))
            .context("this system has no host name: pass --host NAME")?,
    };
    let (key, csr) = teesfs_node::net::make_request(dir, &host).with_context(|| {
        format!(
            "making a certificate request for {host} in {}",
            dir.display()
        )
    })?;
    outln!("key: {} (stays on this node)", key.display());
    outln!("request: {}", csr.display());
    outln!(
        "On the admin host: teesfs keygen --cluster CA_DIR --sign {host}.csr, then put the \
         {host}.crt and ca.crt it names into {}.",
        dir.display()
    );
    Ok(())
}

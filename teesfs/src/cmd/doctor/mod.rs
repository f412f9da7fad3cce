//! `teesfs doctor`: checks that this node can run teesfs jobs and says how to fix what it
//! cannot (like `cvmfs_config chksetup`). This module gathers the facts (files, sysctls,
//! the daemon's control socket, a bind of the peer port); [`checks`] judges them. Doctor
//! only looks: it changes nothing on the node.

pub mod checks;
pub mod login;
pub mod seeder;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use checks::{CertFacts, DaemonFacts, Facts, Found, Report, SlurmFacts};
use teesfs_node::net::pki;

use super::util;

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per check: OK / INFO / WARN / FAIL, its finding, and a `fix:` line.
    Text,
    /// The versioned report as JSON (`version`, `host`, `checks`, `failed`, `warned`).
    Json,
}

/// Which side of teesfs to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// A compute node: FUSE, namespaces, its certificate, the daemon, its store, Slurm.
    Node,
    /// The host that roots the trees (the login node, where the prolog's push runs): the
    /// site file, the store, its certificate, the CA key's place, topology and keys.
    Login,
    /// The host `teesfs seeder` runs on: the login side's checks, and its `[seeder]`
    /// settings, munge, its port, and its credentials and store readable by its user.
    Seeder,
}

/// Arguments of `teesfs doctor`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    teesfs doctor                         check this node with the site configuration\n  \
    teesfs doctor --format json | jq .    the same for scripts\n  \
    teesfs doctor --host cn0042 --identity /etc/teesfs/cluster\n  \
    teesfs doctor --role login            check the login node that roots the pushes\n  \
    teesfs doctor --role seeder --format json   check the host `teesfs seeder` runs on\n\n\
    Exit status: 0 when nothing FAILs (WARNs included), 1 when something would break a job.")]
pub struct DoctorArgs {
    /// This node's name as the cluster knows it. Default: the system host name.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Directory with the cluster credentials (ca.crt, <host>.crt, <host>.key, crl.pem).
    #[arg(long, value_name = "DIR", default_value = "/etc/teesfs/cluster")]
    identity: PathBuf,
    /// Trusted publisher public key (repeatable); default as `teesfs verify --help` says.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// The daemon's port for peers (UDP), checked when no daemon runs.
    #[arg(long, default_value_t = 7411)]
    port: u16,
    /// The daemon's state directory (its store's free space is checked).
    #[arg(long, value_name = "DIR", default_value = "/run/teesfs")]
    state_dir: PathBuf,
    /// The daemon's store budget.
    #[arg(long, default_value = "4GiB", value_parser = util::parse_size)]
    store_budget: u64,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/teesfs/daemon.sock")]
    control: PathBuf,
    /// The login node, for the clock check ([root] host in teesfs.toml).
    #[arg(long, value_name = "HOST")]
    login: Option<String>,
    /// Where slurm.conf and plugstack.conf live.
    #[arg(long, value_name = "DIR", default_value = "/etc/slurm")]
    slurm_dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Which side to check: `node` (default) or `login`.
    #[arg(long, value_enum, default_value_t = Role::Node)]
    role: Role,
    /// With --role login or seeder: the store (default: the site's [store] path).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// With --role seeder: the user the seeder runs as (the packaged unit: root).
    #[arg(long, value_name = "USER", default_value = "root")]
    seeder_user: String,
}

/// Runs `teesfs doctor`; the exit code is 1 when a check FAILs.
pub fn run(args: DoctorArgs) -> anyhow::Result<std::process::ExitCode> {
    let host = match &args.host {
        Some(h) => h.clone(),
        None => nix::unistd::gethostname()
            .map_err(|e| anyhow::anyhow!("reading the host name: {e}; pass --host"))?
            .to_string_lossy()
            .into_owned(),
    };
    let verdicts = match args.role {
        Role::Node => checks::evaluate(&gather(&args, host.clone())),
        Role::Login => login::evaluate(&gather_login(&args, host.clone())),
        Role::Seeder => seeder::evaluate(&gather_seeder(&args, host.clone())),
    };
    let report = Report::of(host, verdicts);
    match args.format {
        Format::Json => util::print_json(&report)?,
        Format::Text => {
            for c in &report.checks {
                outln!("{:<4}  {:<16} {}", c.level.word(), c.name, c.detail);
                if let Some(fix) = &c.fix {
                    outln!("{:<4}  {:<16} fix: {fix}", "", "");
                }
            }
            outln!(
                "{} check(s) failed, {} warned",
                report.failed,
                report.warned
            );
        }
    }
    Ok(if report.failed > 0 {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

fn gather(args: &DoctorArgs, host: String) -> Facts {
    let daemon = ask_daemon(&args.control);
    let port = format!("0.0.0.0:{}", args.port);
    let port_free = match &daemon {
        // The daemon holds the port: binding it would only say so.
        Found::Ok(_) => None,
        _ => bind_udp(args.port),
    };
    Facts {
        now: util::unix_now() as i64,
        dev_fuse: dev_fuse(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|r| r.trim().to_string()),
        userns_clone: read_number("/proc/sys/kernel/unprivileged_userns_clone"),
        max_user_namespaces: read_number("/proc/sys/user/max_user_namespaces"),
        cert: cert_facts(&args.identity, &host),
        uid: nix::unistd::geteuid().as_raw(),
        denied: denied(&args.identity, &host),
        crl: crl_facts(&args.identity),
        trust: trust_facts(&args.trust),
        daemon,
        port: (port, port_free),
        login: args.login.clone(),
        store: (
            args.state_dir.clone(),
            free_bytes(&args.state_dir),
            args.store_budget,
        ),
        slurm: slurm_facts(&args.slurm_dir),
        host,
    }
}

fn gather_login(args: &DoctorArgs, host: String) -> login::LoginFacts {
    let loaded = teesfs_node::site::load_lenient(&teesfs_node::site::main_path());
    let (store, topology) = match &loaded {
        Ok(l) => (
            args.store.clone().or_else(|| l.config.store.path.clone()),
            l.config.topology.file.is_some() || l.config.topology.cluster.is_some(),
        ),
        Err(_) => (args.store.clone(), false),
    };
    let site = loaded
        .map_err(|e| checks::Unreadable(e.to_string()))
        .map(|l| {
            let (invalid, unknown): (Vec<_>, Vec<_>) =
                l.problems.iter().partition(|p| p.is_invalid());
            let text = |v: Vec<&manifest::SiteProblem>| v.iter().map(|p| p.to_string()).collect();
            (l.read, text(invalid), text(unknown))
        });
    let ca_key = args.identity.join(pki::CA_KEY);
    login::LoginFacts {
        now: util::unix_now() as i64,
        site,
        store: login::store_facts(store.as_deref()),
        cert: cert_facts(&args.identity, &host),
        ca_key: ca_key.exists().then_some(ca_key),
        topology,
        trust: trust_facts(&args.trust),
    }
}

fn gather_seeder(args: &DoctorArgs, host: String) -> seeder::SeederFacts {
    let login = gather_login(args, host.clone());
    let conf = teesfs_node::site::load_lenient(&teesfs_node::site::main_path())
        .map(|l| l.config.seeder)
        .unwrap_or_default();
    seeder::gather(login, host, &conf, &args.identity, &args.seeder_user)
}

fn dev_fuse() -> Found<()> {
    let path = Path::new("/dev/fuse");
    if !path.exists() {
        return Found::Missing;
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => Found::Ok(()),
        Err(e) => Found::Bad(e.to_string()),
    }
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The credential files that exist (or may: a directory on the way cannot be searched)
/// but this uid may not read. Always empty for root, for whom a refusal is a real fault.
fn denied(identity: &Path, host: &str) -> Vec<PathBuf> {
    if nix::unistd::geteuid().is_root() {
        return Vec::new();
    }
    [
        format!("{host}.crt"),
        format!("{host}.key"),
        pki::CA_CERT.to_string(),
        pki::CRL.to_string(),
    ]
    .into_iter()
    .map(|f| identity.join(f))
    .filter(|p| {
        std::fs::File::open(p).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    })
    .collect()
}

/// Whether `path` is known not to exist (a directory on the way that cannot be searched
/// says nothing, and is left to [`denied`]).
fn missing(path: &Path) -> bool {
    std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

fn cert_facts(identity: &Path, host: &str) -> CertFacts {
    let path = identity.join(format!("{host}.crt"));
    let summary = if missing(&path) {
        Found::Missing
    } else {
        match pki::cert_summary(&path) {
            Ok(s) => Found::Ok((s.names, s.not_after)),
            Err(e) => Found::Bad(e.to_string()),
        }
    };
    // The daemon's own check: CA signature, host name, validity now, key fit, CRL.
    let unverified = teesfs_node::net::Identity::load(identity, host)
        .err()
        .map(|e| e.to_string());
    CertFacts {
        path,
        summary,
        unverified,
    }
}

fn crl_facts(identity: &Path) -> Found<teesfs_node::net::crl::CrlFacts> {
    let path = identity.join(pki::CRL);
    if missing(&path) {
        return Found::Missing;
    }
    match teesfs_node::net::crl::held(identity) {
        Ok(Some(facts)) => Found::Ok(facts),
        Ok(None) => Found::Missing,
        Err(e) => Found::Bad(e.to_string()),
    }
}

fn trust_facts(explicit: &[PathBuf]) -> Vec<(PathBuf, Option<String>)> {
    util::trust_files(explicit)
        .into_iter()
        .map(|f| {
            let problem = util::read_text(&f, "trusted key")
                .and_then(|t| manifest::PublicKey::from_file_text(&t).map_err(Into::into))
                .err()
                .map(|e| format!("{e:#}"));
            (f, problem)
        })
        .collect()
}

fn ask_daemon(control: &Path) -> Found<DaemonFacts> {
    if !control.exists() {
        return Found::Missing;
    }
    match query_daemon(control) {
        Ok(d) => Found::Ok(d),
        Err(e) => Found::Bad(format!("{e:#}")),
    }
}

fn query_daemon(control: &Path) -> anyhow::Result<DaemonFacts> {
    use teesfs_node::control::{Request, Status};
    let line = super::status::ask(control, &Request::Status.to_string())?;
    let a: Status = serde_json::from_str(&line)
        .map_err(|e| anyhow::anyhow!("unexpected answer from {}: {e}", control.display()))?;
    Ok(DaemonFacts {
        listen: a.listen,
        store_bytes: a.store_bytes,
        store_pinned: a.store_pinned,
        store_cached: a.store_cached,
        clock_skew_ms: a.clock_skew_ms,
    })
}

/// Why this node cannot bind UDP `port`, if it cannot.
fn bind_udp(port: u16) -> Option<String> {
    let addr = SocketAddr::from(([0, 0, 0, 0], port));
    std::net::UdpSocket::bind(addr).err().map(|e| e.to_string())
}

/// Bytes free to unprivileged writers under `dir`, or under its nearest existing parent
/// (the daemon creates the directory).
fn free_bytes(dir: &Path) -> Option<u64> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let s = nix::sys::statvfs::statvfs(existing).ok()?;
    Some((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}

/// Lines of `text` that are not comments.
fn live_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
}

fn slurm_facts(dir: &Path) -> SlurmFacts {
    let conf = std::fs::read_to_string(dir.join("slurm.conf")).ok();
    let mut plugstack: Vec<String> = std::fs::read_to_string(dir.join("plugstack.conf"))
        .into_iter()
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir.join("plugstack.conf.d")) {
        plugstack.extend(
            rd.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok()),
        );
    }
    let names = |key: &str| {
        conf.as_deref().is_some_and(|c| {
            live_lines(c).any(|l| {
                l.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case(key) && v.contains("teesfs")
                })
            })
        })
    };
    SlurmFacts {
        slurm_conf: conf.is_some(),
        plugin: plugstack
            .iter()
            .any(|t| live_lines(t).any(|l| l.contains("teesfs_spank.so"))),
        epilog: names("Epilog"),
        prolog: names("PrologSlurmctld") || names("Prolog"),
        learn: names("EpilogSlurmctld"),
        dir: dir.to_path_buf(),
    }
}

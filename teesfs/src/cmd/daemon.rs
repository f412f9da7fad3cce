//! `teesfs daemon`: run the node daemon in the foreground until SIGINT/SIGTERM. The flags
//! become a [`DaemonConfig`]; the service itself (signals, reloads, systemd) is
//! [`Daemon::run`].

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use teesfs_node::daemon::{Daemon, DaemonConfig, Ended, Signals};

use super::util;

/// Arguments of `teesfs daemon`.
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// This node's name as the cluster knows it (its certificate must carry it).
    /// Default: the system host name.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Address to listen on for peers.
    #[arg(long, default_value = "0.0.0.0:7411")]
    listen: SocketAddr,
    /// Directory with the cluster credentials: ca.crt, <host>.crt, <host>.key
    /// (made by `teesfs keygen --cluster`).
    #[arg(long, value_name = "DIR", default_value = "/etc/teesfs/cluster")]
    identity: PathBuf,
    /// Where chunks are kept; memory-backed by default (diskless nodes are the norm).
    #[arg(long, value_name = "DIR", default_value = "/run/teesfs")]
    state_dir: PathBuf,
    /// Jobs are mounted at <DIR>/<job id>.
    #[arg(long, value_name = "DIR", default_value = "/run/teesfs/jobs")]
    mount_root: PathBuf,
    /// Byte budget of the chunk store. A running job's chunks are never evicted: a job
    /// whose layer does not fit beside those of the node's other running jobs is refused
    /// at its start; beyond the budget, chunks kept from ended jobs are evicted, least
    /// recently used first.
    #[arg(long, default_value = "4GiB", value_parser = util::parse_size)]
    store_budget: u64,
    /// Memory for the stored bytes of the chunks that arrived last, kept to send them on to
    /// children and to answer reads and demands without reading the store back.
    #[arg(long, default_value = "32MiB", value_parser = util::parse_size)]
    recent: u64,
    /// Memory for decompressed chunks per mounted job.
    #[arg(long, default_value = "128MiB", value_parser = util::parse_size)]
    cache: u64,
    /// Never use FUSE passthrough (it is used by default when running as root).
    #[arg(long)]
    no_passthrough: bool,
    /// Bytes of passthrough copies (whole files under <state-dir>/files) kept at once;
    /// copies no process has open are evicted beyond it. The urgent set's files are
    /// copied as their chunks arrive, while this budget has free room, so a job's start
    /// decodes nothing; other files at their first open.
    #[arg(long, default_value = "1GiB", value_parser = util::parse_size)]
    copies_budget: u64,
    /// How long a read of a chunk that has not arrived waits before failing with EIO
    /// (and a log line). The tree re-fetches lost chunks and routes around dead parents
    /// well within it.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    read_timeout: std::time::Duration,
    /// The origin store: a store directory on a shared file system this node can read
    /// (the login node's store as the nodes mount it). A chunk of a running job that no
    /// node of its tree can give (lost here after the push ended, the parent dead) is read
    /// there, checked against its id, before a read of it fails with EIO. Default: the
    /// site's `[store] origin`, else `[store] shared`; none without them.
    #[arg(long, value_name = "DIR")]
    origin: Option<PathBuf>,
    /// Trusted publisher public key (repeatable); default as `teesfs verify --help` says.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// Publisher keys bound to users: DIR/<user name or uid>/*.pub sign only the jobs that
    /// user owns (`push --owner`, the Slurm prolog's $SLURM_JOB_UID); a job of anyone else
    /// is refused, naming the key. A key here is trusted too; one also among the site's keys
    /// is bound all the same. Read at start and on SIGHUP; a missing directory binds none.
    #[arg(long, value_name = "DIR", default_value = "/etc/teesfs/trusted/users")]
    trusted_users: PathBuf,
    /// Index ids this node refuses (revoked): one 64-hex-digit id per line, `#` comments.
    /// Read at start and on SIGHUP (`systemctl reload teesfs-daemon`); a missing default file
    /// means none. Revoke an index by adding its id and reloading every node's daemon.
    #[arg(long, value_name = "FILE", default_value = util::REVOKED_DEFAULT)]
    revoked: PathBuf,
    /// Control socket for `teesfs status`. Default: <state-dir>/daemon.sock
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP at http://ADDR/metrics (off by default): the
    /// store's bytes and chunks, links, jobs running, chunks received, forwarded, refused
    /// and corrupt, demand requests, failed edges and how long FUSE reads waited (a
    /// histogram), summed over every job since the daemon started. Any local user can
    /// connect to a loopback ADDR; see --metrics-allow. Port 0 picks a free port; the
    /// address bound is printed and logged. Example: --metrics 127.0.0.1:9464
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Only these peers may scrape --metrics (repeatable): an address or a network, e.g.
    /// 10.0.0.5 or 10.0.0.0/24. Others are answered 403 Forbidden. Default: any peer that
    /// reaches ADDR. Local users connect from the node's own addresses and loopback: leave
    /// those out to keep them out.
    #[arg(long, value_name = "NET", requires = "metrics")]
    metrics_allow: Vec<teesfs_node::metrics::endpoint::AllowedNet>,
    /// Also show each job's series in --metrics, labelled job="ID": its bytes and chunks
    /// in the store, its traffic, its urgent and whole-layer times and its read waits
    /// (they end when the job is released). Whoever may scrape sees every job, whoever
    /// owns it: give --metrics-allow the scraper's address on nodes users share.
    #[arg(long, requires = "metrics")]
    metrics_per_job: bool,
    /// Relay only: forward to children but do not mount.
    #[arg(long)]
    no_mount: bool,
    /// Running jobs outlive this daemon: a crash, an upgrade or a stop (SIGTERM) costs
    /// them a pause, not their files. A keeper process (`teesfs keep-fds`, started if none
    /// runs for the state directory) holds each mounted job's FUSE connection; the next
    /// daemon on the same state directory takes the jobs up from their records in
    /// <state-dir>/kept and serves their mounts, and reads waiting meanwhile complete.
    /// Only `teesfs release` ends a job then. The packaged systemd unit sets it.
    #[arg(long)]
    keep_jobs: bool,
    /// Threads that run the network, the relay and FUSE answers. Default: 2, which keep a
    /// node's pushes and reads apart; 1 where the daemon may use less than 2 cores (its
    /// cgroup's CPU quota, e.g. systemd's CPUQuota=, or its CPU affinity). There a second
    /// thread adds no CPU, only wake-ups from one thread to the other: a push into a daemon
    /// held to a twentieth of a core cost 7-17% more CPU with 2 (BENCHMARKS.md, "The lab's
    /// push on a slower machine").
    #[arg(long, env = "TEESFS_WORKERS", value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: Option<u16>,
    /// Cap on bulk bytes per second to each child (demand traffic is never capped).
    #[arg(long, value_name = "SIZE", value_parser = util::parse_size)]
    rate_limit: Option<u64>,
    /// Fault injection for the lab's tests only: `corrupt-forward` makes this daemon flip a
    /// byte in every chunk it sends, so its children must catch it; `slow-store=DURATION`
    /// makes every chunk file write take that much longer (a slow disk). Not in the shipped
    /// binary (feature `lab`).
    #[cfg(feature = "lab")]
    #[arg(long, hide = true, value_name = "FAULT")]
    fault: Option<String>,
}

/// Runs `teesfs daemon`.
pub fn run(args: DaemonArgs) -> anyhow::Result<()> {
    let host = match &args.host {
        Some(h) => h.clone(),
        None => nix::unistd::gethostname()
            .context("reading the host name; pass --host")?
            .to_string_lossy()
            .into_owned(),
    };
    let cfg = config(&args, &host)?;
    let workers = workers(args.workers, std::thread::available_parallelism().ok());
    tracing::info!(
        workers,
        "runtime threads for the network, the relay and FUSE answers"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("teesfs-daemon")
        .enable_all()
        .build()?;
    let ended = rt
        .block_on(Daemon::run(cfg, Signals::Process))
        .with_context(|| {
            format!(
                "running the daemon for {host} (are {}/ca.crt and {host}.crt there? \
                 teesfs keygen --cluster)",
                args.identity.display()
            )
        })?;
    if ended == Ended::HandedOver {
        // Nothing may unmount the jobs left to the keeper, nor fail a read they wait on.
        std::process::exit(0);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(())
}

/// The runtime's thread count: `asked` (`--workers`), else 2, or 1 where the daemon may
/// use less than 2 cores (`cores`: what the kernel lets this process run on, its cgroup's
/// quota included, as `std::thread::available_parallelism` reads it).
fn workers(asked: Option<u16>, cores: Option<std::num::NonZeroUsize>) -> usize {
    match asked {
        Some(n) => usize::from(n),
        None => cores.map_or(2, |c| c.get().clamp(1, 2)),
    }
}

/// The daemon's configuration from its flags: where it reads what it trusts, its metrics
/// endpoint, the lab's fault parsed.
fn config(args: &DaemonArgs, host: &str) -> anyhow::Result<DaemonConfig> {
    #[cfg(feature = "lab")]
    let fault = Fault::parse(args.fault.as_deref())?;
    let root = nix::unistd::geteuid().is_root();
    Ok(DaemonConfig {
        host: host.to_string(),
        listen: args.listen,
        identity_dir: args.identity.clone(),
        control: args
            .control
            .clone()
            .unwrap_or_else(|| args.state_dir.join("daemon.sock")),
        state_dir: args.state_dir.clone(),
        mount_root: args.mount_root.clone(),
        store_budget: args.store_budget,
        recent_bytes: args.recent,
        cache_bytes: args.cache,
        passthrough: root && !args.no_passthrough,
        copies_budget: args.copies_budget,
        read_timeout: args.read_timeout,
        trust: teesfs_node::daemon::trust::Sources {
            keys: args.trust.clone(),
            users: args.trusted_users.clone(),
            revoked: args.revoked.clone(),
        },
        mount: !args.no_mount,
        origin: args.origin.clone(),
        keeper: if args.keep_jobs {
            Some(std::env::current_exe().context("finding this program to start the keeper")?)
        } else {
            None
        },
        knobs: teesfs_node::job::JobKnobs {
            rate_limit: args.rate_limit,
            #[cfg(feature = "lab")]
            corrupt_outgoing: fault == Fault::CorruptForward,
            #[cfg(feature = "lab")]
            slow_store: match fault {
                Fault::SlowStore(d) => d,
                _ => std::time::Duration::ZERO,
            },
            filler: false,
        },
        metrics: args.metrics.map(|addr| {
            (
                addr,
                metrics_config(&args.metrics_allow, args.metrics_per_job),
            )
        }),
    })
}

/// What `--metrics-allow` and `--metrics-per-job` let the endpoint tell, and to whom; a
/// warning when every local user may read every job's series.
fn metrics_config(
    allow: &[teesfs_node::metrics::endpoint::AllowedNet],
    per_job: bool,
) -> teesfs_node::metrics::endpoint::EndpointConfig {
    use teesfs_node::metrics::Detail;
    let open_to_local_users = allow.is_empty() || allow.iter().any(|n| n.has_loopback());
    if per_job && open_to_local_users {
        tracing::warn!(
            "--metrics-per-job without a --metrics-allow that leaves loopback out: every local user can read every job's sizes, times and read waits; give --metrics-allow the scraper's address"
        );
    }
    teesfs_node::metrics::endpoint::EndpointConfig {
        allow: allow.to_vec(),
        detail: if per_job {
            Detail::PerJob
        } else {
            Detail::Node
        },
    }
}

/// `--fault`.
#[cfg(feature = "lab")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    CorruptForward,
    SlowStore(std::time::Duration),
}

#[cfg(feature = "lab")]
impl Fault {
    fn parse(s: Option<&str>) -> anyhow::Result<Fault> {
        Ok(match s {
            None => Fault::None,
            Some("corrupt-forward") => Fault::CorruptForward,
            Some(other) => match other.strip_prefix("slow-store=") {
                Some(d) => Fault::SlowStore(
                    humantime::parse_duration(d)
                        .with_context(|| format!("--fault slow-store={d}: use e.g. 20ms"))?,
                ),
                None => anyhow::bail!(
                    "unknown --fault {other:?} (known: corrupt-forward, slow-store=DURATION)"
                ),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    #[test]
    fn a_daemon_held_to_less_than_two_cores_runs_one_worker_unless_told() {
        let cores = |n| NonZeroUsize::new(n);
        assert_eq!(super::workers(None, cores(1)), 1, "a quota under 2 cores");
        assert_eq!(super::workers(None, cores(2)), 2);
        assert_eq!(super::workers(None, cores(64)), 2, "more cores: still 2");
        assert_eq!(super::workers(None, None), 2, "unknown: the default");
        assert_eq!(super::workers(Some(4), cores(1)), 4, "--workers wins");
        assert_eq!(super::workers(Some(1), cores(64)), 1);
    }
}

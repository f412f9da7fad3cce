//! `teesfs prefetch manifest.toml`: the push driven by the job spec.
//!
//! Reads the spec, fills in what it leaves open from the environment
//! (`$SLURM_JOB_NODELIST`) and defaults, and runs the same code as `teesfs push`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use manifest::JobSpec;

use super::jobspec::{JobArgs, RootArgs};
use super::push::{PushArgs, Wait};

/// Arguments of `teesfs prefetch`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs prefetch manifest.toml                 # inside an allocation: $SLURM_JOB_NODELIST
  teesfs prefetch manifest.toml --nodes 'cn[01-32]' --job 1234 --owner 4242
  # the Slurm prolog (slurmctld) does:
  teesfs prefetch \"$spec\" --nodes \"$SLURM_JOB_NODELIST\" --job \"$SLURM_JOB_ID\" \\
      --owner \"$SLURM_JOB_UID\"

The job spec's keys are described in manifest.toml(5); flags override it.")]
pub struct PrefetchArgs {
    /// The job spec, manifest.toml: [layer] store/index, [launch] urgent globs, [nodes]
    /// list/topology/group_size/strategy/width/threshold/login, [network]
    /// identity/hosts/port/wait/shared_store (see manifest.toml(5)).
    spec: PathBuf,
    /// Override the spec's node list.
    #[arg(long, value_name = "EXPR")]
    nodes: Option<String>,
    /// Trusted publisher key(s) (see `teesfs verify --help`).
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// Also write the push report as JSON to FILE (the document of --format json).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also write the push report as an HTML page (see `teesfs report --help`).
    #[arg(long, value_name = "FILE")]
    report_html: Option<PathBuf>,
    /// What to print on stdout: `text`, or `json`: the push report (see `teesfs push
    /// --help`; teesfs_node::report::PushReport). Progress and notes go to stderr.
    #[arg(long, value_enum, default_value_t = super::util::Format::Text)]
    format: super::util::Format,
    /// Where the root listens.
    #[arg(long, default_value = "0.0.0.0:0")]
    listen: std::net::SocketAddr,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Give up waiting for the nodes after this long (default: the site's `[push] timeout`,
    /// else 30m): the Slurm prolog, and so the job, waits at most this long. A bad chunk in
    /// the store or a node that cannot keep the job ends the push at once instead.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Ignore the layer's learned urgent list (see `teesfs push --help`).
    #[arg(long)]
    no_learned: bool,
    /// The job id: the Slurm job id in decimal (the Slurm prolog passes $SLURM_JOB_ID);
    /// see `teesfs push --help`. (--job-id is the old name.)
    #[arg(long = "job", visible_alias = "job-id", value_name = "ID")]
    job_id: Option<peertree::relay::JobId>,
    /// The user the job belongs to on the nodes (the Slurm prolog passes $SLURM_JOB_UID);
    /// see `teesfs push --help`.
    #[arg(long, value_name = "UID")]
    owner: Option<u32>,
    /// Relative paths in the spec start at DIR instead of the spec's own directory: `teesfs
    /// seeder` holds a copy of the spec's text, which the SPANK plugin read as the job's
    /// user at submit, so the copy's owner is not checked.
    #[arg(long, value_name = "DIR", hide = true)]
    base: Option<PathBuf>,
    /// When the push fails because of some of its nodes, write those to FILE with the
    /// reason to drain each with (see `teesfs push --help`); the Slurm prolog drains them.
    /// With it, a push that fails (or is stopped) before the job starts releases the job on
    /// every node it reaches: Slurm runs no Epilog for a start that failed in the prolog.
    #[arg(long, value_name = "FILE")]
    drain_list: Option<PathBuf>,
}

/// With `--owner`, the prolog pushes for that user, running as the Slurm user who can read
/// more than they can: the spec must be the job's user's own (or root's), and nobody else
/// may be able to change it.
fn check_spec_owner(spec: &std::path::Path, owner: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(spec).with_context(|| format!("the job spec {}", spec.display()))?;
    if md.uid() != owner && md.uid() != 0 {
        anyhow::bail!(
            "the job spec {} belongs to uid {}, not to the job's user (uid {owner}); a job may \
             only name its own manifest (or one root owns)",
            spec.display(),
            md.uid()
        );
    }
    if md.mode() & 0o002 != 0 {
        anyhow::bail!(
            "the job spec {} is writable by everyone; `chmod o-w` it",
            spec.display()
        );
    }
    Ok(())
}

/// Turns a spec into push arguments.
/// What the spec leaves out comes from the site configuration (`site`), then the built-in
/// defaults; an error names the key to set, in the spec or the site's teesfs.toml.
fn push_args(
    spec: &JobSpec,
    args: &PrefetchArgs,
    base: &std::path::Path,
    site: &manifest::SiteConfig,
) -> anyhow::Result<PushArgs> {
    let rel = |p: &PathBuf| {
        if p.is_relative() {
            base.join(p)
        } else {
            p.clone()
        }
    };
    let store = match (&spec.layer.store, &site.store.path) {
        (Some(s), _) => rel(s),
        (None, Some(s)) => s.clone(),
        (None, None) => anyhow::bail!(
            "no store: set [layer] store in the job spec, or [store] path in the site's teesfs.toml"
        ),
    };
    let wait = match spec.network.wait.as_deref() {
        Some("all") => Wait::All,
        _ => Wait::Urgent,
    };
    let net = &spec.network;
    Ok(PushArgs {
        store,
        index: spec.layer.index.clone(),
        job: job_args(spec, args, &rel, site)?,
        root: RootArgs {
            identity: net
                .identity
                .as_ref()
                .map(&rel)
                .or_else(|| site.network.identity.clone())
                .unwrap_or_else(|| PathBuf::from("/etc/teesfs/cluster")),
            hosts: net
                .hosts
                .as_ref()
                .map(&rel)
                .or_else(|| site.network.hosts.clone()),
            port: net.port.or(site.network.port).unwrap_or(7411),
            listen: args.listen,
            advertise: None,
        },
        wait,
        stream: super::push::Stream::All,
        serve: None,
        bulk_after: duration(&net.bulk_after)?,
        bulk_quiet: duration(&net.bulk_quiet)?.unwrap_or(super::push::DEFAULT_BULK_QUIET),
        report: args.report.clone(),
        report_html: args.report_html.clone(),
        format: args.format,
        urgent: spec.launch.urgent.clone(),
        no_learned: args.no_learned,
        heartbeat: Duration::from_secs(1),
        deadline: Duration::from_secs(5),
        timeout: args
            .timeout
            .or_else(|| site.push.timeout())
            .unwrap_or(super::push::DEFAULT_TIMEOUT),
        trust: args.trust.clone(),
        rate_limit: None,
        quiet: args.quiet,
        job_id: args.job_id,
        owner: args.owner,
        drain_list: args.drain_list.clone(),
    })
}

/// A duration the job spec already checked.
fn duration(v: &Option<String>) -> anyhow::Result<Option<Duration>> {
    v.as_deref()
        .map(humantime::parse_duration)
        .transpose()
        .context("a duration in [network]")
}

/// The nodes, topology and tree of a spec, each from the spec, else the site, else the
/// built-in default.
fn job_args(
    spec: &JobSpec,
    args: &PrefetchArgs,
    rel: &dyn Fn(&PathBuf) -> PathBuf,
    site: &manifest::SiteConfig,
) -> anyhow::Result<JobArgs> {
    let n = &spec.nodes;
    let strategy = match n.strategy.as_ref().or(site.tree.strategy.as_ref()) {
        Some(s) => s.parse().map_err(|e: peertree::Error| {
            anyhow::anyhow!("[nodes] strategy (or the site's [tree] strategy): {e}")
        })?,
        None => peertree::Strategy::Auto,
    };
    // The spec's topology, else the site's (one of them, never mixed).
    let (topology, cluster, group_size) =
        if n.topology.is_some() || n.cluster.is_some() || n.group_size.is_some() {
            (
                n.topology.as_ref().map(rel),
                n.cluster.clone(),
                n.group_size,
            )
        } else {
            (
                site.topology.file.clone(),
                site.topology.cluster.clone(),
                site.topology.group_size,
            )
        };
    if topology.is_none() && group_size.is_none() {
        anyhow::bail!(
            "no topology: set [nodes] topology = \"FILE\" or group_size = N in the job spec, or \
             [topology] file or cluster and group_size in the site's teesfs.toml"
        );
    }
    Ok(JobArgs {
        nodes: args.nodes.clone().or_else(|| n.list.clone()),
        topology,
        cluster,
        group_size,
        links: site
            .topology
            .links
            .as_deref()
            .map(super::jobspec::parse_links)
            .transpose()
            .map_err(|e| anyhow::anyhow!("the site's [topology] links: {e}"))?,
        no_learned_rates: false,
        rates_store: None,
        mean_chunk: None,
        learned: std::sync::OnceLock::new(),
        busy: None,
        idle: None,
        borrow_idle: false,
        strategy,
        width: n.width.or(site.tree.width).unwrap_or(15),
        threshold: n.threshold.or(site.tree.threshold).unwrap_or(512),
        login_copies: site.tree.login_copies,
        seed: 0,
        login: n
            .login
            .clone()
            .or_else(|| site.root.host.clone())
            .unwrap_or_else(|| "login".into()),
        storage: "storage".into(),
        shared_store: spec
            .network
            .shared_store
            .clone()
            .or_else(|| site.store.shared.clone()),
    })
}

/// Runs `teesfs prefetch`.
pub fn run(args: PrefetchArgs) -> anyhow::Result<()> {
    if let Some(owner) = args.owner
        && args.base.is_none()
    {
        check_spec_owner(&args.spec, owner)?;
    }
    let text = super::util::read_text(&args.spec, "job spec")?;
    let spec = JobSpec::from_toml(&text).with_context(|| format!("in {}", args.spec.display()))?;
    // Unknown keys were warned about as the command started; a bad value is fatal here,
    // where every key may be used.
    let site = teesfs_node::site::load_lenient(&teesfs_node::site::main_path())?;
    if let Some(p) = site.problems.iter().find(|p| p.is_invalid()) {
        anyhow::bail!(
            "{p}: fix the site configuration (`teesfs config check` lists every mistake)"
        );
    }
    let site = site.config;
    let base = args.base.clone().unwrap_or_else(|| {
        args.spec
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default()
    });
    let push = push_args(&spec, &args, &base, &site)
        .with_context(|| format!("in {}", args.spec.display()))?;
    let outcome = super::push::run(push);
    // The prolog's per-job files beside the report: the job's owner may read this job's,
    // and the oldest go, whatever the outcome.
    if let Some(report) = &args.report {
        if let Some(owner) = args.owner {
            super::rotate::share_with_owner(report, owner);
        }
        super::rotate::prune_beside(report, &site.reports);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `teesfs prefetch manifest.toml` with no flags.
    fn args() -> PrefetchArgs {
        PrefetchArgs {
            spec: PathBuf::from("manifest.toml"),
            nodes: None,
            trust: Vec::new(),
            report: None,
            report_html: None,
            format: crate::cmd::util::Format::Text,
            listen: "0.0.0.0:0".parse().expect("addr"),
            quiet: true,
            no_learned: false,
            job_id: None,
            owner: None,
            timeout: None,
            base: None,
            drain_list: None,
        }
    }

    /// The README's own `manifest.toml` (128 nodes, no strategy, no shared store) failed in
    /// `prefetch` before any traffic: `auto` picked shared storage and then asked for flags
    /// `prefetch` does not have. Read from the README as written, it now plans the tree.
    #[test]
    fn the_readme_manifest_plans_a_tree() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("```toml\n[layer]")
            .expect("README has a manifest.toml");
        let body = &readme[start + "```toml\n".len()..];
        let text = &body[..body.find("```").expect("closed block")];
        let spec = JobSpec::from_toml(text).expect("the README's manifest parses");
        let args = args();
        let push = push_args(
            &spec,
            &args,
            std::path::Path::new("/"),
            &manifest::SiteConfig::default(),
        )
        .expect("push arguments");
        let (nodes, _, plan) = push.job.plan().expect("the README's job plans");
        assert_eq!(nodes.len(), 128);
        assert_eq!(plan.strategy, peertree::Strategy::Topo);
        // The job starts when the prolog's push returns at the urgent set: the rest is
        // held back while its applications start.
        assert_eq!(push.wait, super::super::push::Wait::Urgent);
        assert_eq!(
            push.bulk_hold(),
            Some(peertree::relay::BulkHold {
                max: Duration::from_secs(120),
                quiet: Some(Duration::from_secs(2)),
            })
        );
        assert_eq!(push.timeout, Duration::from_secs(30 * 60));
    }

    /// `prefetch` waited 30 minutes, hard-coded, whatever the site said: a Slurm job sat in
    /// its prolog that long. The site's `[push] timeout` is its default now, and
    /// `--timeout` overrides it.
    #[test]
    fn prefetch_takes_its_timeout_from_the_site_configuration() {
        let spec = JobSpec::from_toml(
            "[layer]\nstore = \"/s\"\nindex = \"3a6a\"\n[nodes]\nlist = \"cn[1-4]\"\ngroup_size = 4\n",
        )
        .expect("spec");
        let site =
            manifest::SiteConfig::from_toml("[push]\ntimeout = \"90s\"\n", "site").expect("site");
        let mut args = args();
        let push = push_args(&spec, &args, std::path::Path::new("/"), &site).expect("push");
        assert_eq!(push.timeout, Duration::from_secs(90));
        args.timeout = Some(Duration::from_secs(7));
        let push = push_args(&spec, &args, std::path::Path::new("/"), &site).expect("push");
        assert_eq!(push.timeout, Duration::from_secs(7), "the flag wins");
    }

    /// A user's spec names only the layer and the urgent globs; the site configuration
    /// supplies the store, topology, login host and credentials.
    #[test]
    fn a_minimal_spec_takes_the_rest_from_the_site() {
        let spec = JobSpec::from_toml(
            "[layer]\nindex = \"3a6a\"\n[launch]\nurgent = [\"bin/*\"]\n[nodes]\nlist = \"cn[1-16]\"\n",
        )
        .expect("spec");
        let site = manifest::SiteConfig::from_toml(
            "[store]\npath = \"/shared/teesfs\"\n[root]\nhost = \"login7\"\n\
             [topology]\ncluster = \"cn[1-64]\"\ngroup_size = 8\n[network]\nport = 9000\n",
            "site",
        )
        .expect("site");
        let args = args();
        let push = push_args(&spec, &args, std::path::Path::new("/"), &site).expect("push");
        assert_eq!(push.store, PathBuf::from("/shared/teesfs"));
        assert_eq!(push.job.login, "login7");
        assert_eq!(push.job.group_size, Some(8));
        assert_eq!(push.root.port, 9000);
        let (_, _, plan) = push.job.plan().expect("plans");
        assert_eq!(plan.strategy, peertree::Strategy::Topo);
        // Without a site, the missing store is named with both places to set it.
        let e = push_args(
            &spec,
            &args,
            std::path::Path::new("/"),
            &manifest::SiteConfig::default(),
        )
        .expect_err("no store");
        assert!(e.to_string().contains("[store] path"), "{e}");
    }

    /// Idle-proxy borrowing used `--busy/--idle`, which the prolog never passed, and then
    /// took any proxy, even one running somebody else's job. Unknown now means: none.
    #[test]
    fn without_idle_information_no_proxy_outside_the_job_is_borrowed() {
        let spec = JobSpec::from_toml(
            "[layer]\nstore = \"/s\"\nindex = \"3a6a\"\n[nodes]\nlist = \"cn[02-08],cn[10-16]\"\n\
             cluster = \"cn[01-16]\"\ngroup_size = 8\nstrategy = \"topo-paper\"\n",
        )
        .expect("spec");
        let args = args();
        let mut push = push_args(
            &spec,
            &args,
            std::path::Path::new("/"),
            &manifest::SiteConfig::default(),
        )
        .expect("push");
        let (_, _, plan) = push.job.plan().expect("plans");
        assert!(plan.borrowed.is_empty(), "borrowed {:?}", plan.borrowed);
        // Told that cn01 is idle, the planner may borrow it.
        push.job.idle = Some("cn01".into());
        let (_, _, plan) = push.job.plan().expect("plans");
        assert_eq!(plan.borrowed.len(), 1, "{:?}", plan.borrowed);
    }

    /// The prolog pushes for `--owner UID` while running as the Slurm user: a spec that is
    /// not the job user's (or root's), or that anyone may change, is refused before it is
    /// read.
    #[test]
    fn a_spec_must_be_the_job_users_and_not_world_writable() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = dir.path().join("manifest.toml");
        std::fs::write(&spec, "[layer]\nindex = \"3a6a\"\n").expect("spec");
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // As root (CI), the spec is given to an ordinary uid first.
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&spec, Some(nix::unistd::Uid::from_raw(4242)), None).expect("chown");
        }
        let mine = std::fs::metadata(&spec).expect("stat").uid();
        check_spec_owner(&spec, mine).expect("the owner's own spec");
        let e = check_spec_owner(&spec, mine + 1).expect_err("another user's spec");
        assert!(e.to_string().contains("belongs to uid"), "{e}");
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = check_spec_owner(&spec, mine).expect_err("world-writable");
        assert!(e.to_string().contains("chmod o-w"), "{e}");
    }
}

//! `teesfs prefetch manifest.toml`: the push driven by the job spec.
//!
//! Reads the spec, fills in what it leaves open from the environment
//! (`$SLURM_JOB_NODELIST`) and defaults, and runs the same code as `teesfs push`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use manifest::JobSpec;

use super::jobspec::{JobArgs, RootArgs};
use super::push::{PushArgs, Wait};

/// Arguments of `teesfs prefetch`.
#[derive(Debug, clap::Args)]
pub struct PrefetchArgs {
    /// The job spec, manifest.toml: [layer] store/index, [launch] urgent globs, [nodes]
    /// list/topology/group_size/strategy/width/threshold/login, [network]
    /// identity/hosts/port/wait/shared_store (documented in manifest/src/jobspec.rs).
    spec: PathBuf,
    /// Override the spec's node list.
    #[arg(long, value_name = "EXPR")]
    nodes: Option<String>,
    /// Trusted publisher key(s) (see `teesfs verify --help`).
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// Also write the push report as JSON.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Where the root listens.
    #[arg(long, default_value = "0.0.0.0:0")]
    listen: std::net::SocketAddr,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Use this number as the job id (the Slurm prolog passes $SLURM_JOB_ID); see
    /// `teesfs push --help`.
    #[arg(long, value_name = "N")]
    job_id: Option<u64>,
    /// The user the job belongs to on the nodes (the Slurm prolog passes $SLURM_JOB_UID);
    /// see `teesfs push --help`.
    #[arg(long, value_name = "UID")]
    owner: Option<u32>,
}

/// Turns a spec into push arguments.
fn push_args(
    spec: &JobSpec,
    args: &PrefetchArgs,
    base: &std::path::Path,
) -> anyhow::Result<PushArgs> {
    let rel = |p: &PathBuf| {
        if p.is_relative() {
            base.join(p)
        } else {
            p.clone()
        }
    };
    let n = &spec.nodes;
    let strategy = match &n.strategy {
        Some(s) => s
            .parse()
            .map_err(|e: peertree::Error| anyhow::anyhow!("[nodes] strategy: {e}"))?,
        None => peertree::Strategy::Auto,
    };
    let wait = match spec.network.wait.as_deref() {
        Some("all") => Wait::All,
        _ => Wait::Urgent,
    };
    Ok(PushArgs {
        store: rel(&spec.layer.store),
        index: spec.layer.index.clone(),
        job: JobArgs {
            nodes: args.nodes.clone().or_else(|| n.list.clone()),
            topology: n.topology.as_ref().map(rel),
            cluster: n.cluster.clone(),
            group_size: n.group_size,
            busy: None,
            idle: None,
            strategy,
            width: n.width.unwrap_or(15),
            threshold: n.threshold.unwrap_or(512),
            seed: 0,
            login: n.login.clone().unwrap_or_else(|| "login".into()),
            storage: "storage".into(),
            shared_store: spec.network.shared_store.clone(),
        },
        root: RootArgs {
            identity: spec
                .network
                .identity
                .as_ref()
                .map(rel)
                .unwrap_or_else(|| PathBuf::from("/etc/teesfs/cluster")),
            hosts: spec.network.hosts.as_ref().map(rel),
            port: spec.network.port.unwrap_or(7411),
            listen: args.listen,
            advertise: None,
        },
        wait,
        report: args.report.clone(),
        urgent: spec.launch.urgent.clone(),
        heartbeat: Duration::from_secs(1),
        deadline: Duration::from_secs(5),
        timeout: Duration::from_secs(30 * 60),
        trust: args.trust.clone(),
        rate_limit: None,
        quiet: args.quiet,
        job_id: args.job_id,
        owner: args.owner,
    })
}

/// Runs `teesfs prefetch`.
pub fn run(args: PrefetchArgs) -> anyhow::Result<()> {
    let text = super::util::read_text(&args.spec, "job spec")?;
    let spec = JobSpec::from_toml(&text).with_context(|| format!("in {}", args.spec.display()))?;
    if spec.nodes.topology.is_none() && spec.nodes.group_size.is_none() {
        bail!(
            "{}: [nodes] needs `topology = \"FILE\"` or `group_size = N`",
            args.spec.display()
        );
    }
    let base = args
        .spec
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let push = push_args(&spec, &args, &base)?;
    super::push::run(push)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let args = PrefetchArgs {
            spec: PathBuf::from("manifest.toml"),
            nodes: None,
            trust: Vec::new(),
            report: None,
            listen: "0.0.0.0:0".parse().expect("addr"),
            quiet: true,
            job_id: None,
            owner: None,
        };
        let push = push_args(&spec, &args, std::path::Path::new("/")).expect("push arguments");
        let (nodes, _, plan) = push.job.plan().expect("the README's job plans");
        assert_eq!(nodes.len(), 128);
        assert_eq!(plan.strategy, peertree::Strategy::Topo);
    }
}

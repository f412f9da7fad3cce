//! `teesfs learn`: after a job, ask each of its nodes' daemons for what the job used while
//! it started (they keep the records of their last released jobs), merge the records in
//! first-use order across nodes (`seeder::learned::merge`) and keep the result in the store
//! beside the index (`<store>/learned/<index id>.list`), where the next `push` or
//! `prefetch` of that index finds it and pushes those files first. Run by the Slurm
//! EpilogSlurmctld (packaging/slurm/epilog-slurmctld.sh) or by hand on the login node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use peertree::relay::JobId;
use seeder::DirStore;
use seeder::learned::{NodeRecord, UrgentList, merge, write_learned};
use teesfs_node::control::JobRecord;
use teesfs_node::learn::{AskSpec, Gathered, gather};

use super::jobspec::RootArgs;
use super::util;

/// Arguments of `teesfs learn`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  # what the EpilogSlurmctld does (packaging/slurm/epilog-slurmctld.sh) when job 1234 ends
  teesfs learn --job 1234 --nodes 'cn[0001-0128]' --store /shared/teesfs
  # by hand on the login node, after the job; also keep a copy of the merged list
  teesfs learn --job 1234 --nodes 'cn[01-32]' --store /shared/teesfs -o urgent.list

Every node's daemon records each job it mounts: the files opened through the mount until the
node held the whole layer, and any file a read of which had to wait for data, in the order of
first use. It keeps the records of its last 16 released jobs, so the Slurm epilog's `teesfs
release` does not lose them. `learn` asks each node for its record over the network (the
daemons' port, the login node's cluster credentials, as `push` does), merges them (a file
ranks by the earliest position at which any node used it, ties by how many nodes used it)
and writes STORE/learned/<index id>.list atomically. The next `teesfs push` or `prefetch`
of that index (the Slurm prolog) pushes those files first, before the index's own urgent
list, with no republish and no flag (`push --no-learned` ignores it); every chunk is still
verified, so the list is only ever a hint. `teesfs gc` removes it with its index.

A node that is down, unreachable or holds no record of the job is named and skipped; the
others are merged. Exit status 0 when a list was written, 1 when no node had a record.")]
pub struct LearnArgs {
    /// The job: the Slurm job id in decimal as pushed (`push --job`; default: $TEESFS_JOB,
    /// else $SLURM_JOB_ID), 16 hex digits (a push outside Slurm, as `teesfs status` shows
    /// it), or hex with 0x.
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// The job's nodes (a hostlist; default: $SLURM_JOB_NODELIST).
    #[arg(long, value_name = "EXPR")]
    nodes: Option<String>,
    /// The store the job's layer was pushed from; the learned list is written into it.
    /// Default: the --spec's [layer] store, else the site configuration's [store] path.
    // Its own id, so the site's store is not its default ahead of the spec's.
    #[arg(long = "store", id = "learn_store", value_name = "DIR")]
    store: Option<PathBuf>,
    /// The job spec (manifest.toml) the job was pushed with (the prolog's): its [layer]
    /// store, [nodes] login and [network] identity, hosts and port, where it names them,
    /// as the prolog's push took them.
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// Relative paths in the --spec start at DIR instead of its own directory (`teesfs
    /// seeder`, which holds a copy of the spec's text).
    #[arg(long, value_name = "DIR", hide = true)]
    base: Option<PathBuf>,
    /// Learn only from nodes that ran this index (a tag or at least 4 hex characters of its
    /// id). Default: the index most of the job's nodes ran.
    #[arg(long, value_name = "TAG|ID")]
    index: Option<String>,
    /// The login node's name (its credentials are <identity>/<login>.crt).
    #[arg(long, default_value = "login")]
    login: String,
    #[command(flatten)]
    root: RootArgs,
    /// Give up on nodes that have not answered by then.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Also write the merged list to FILE (the format of `teesfs record`).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `teesfs learn`.
pub fn run(mut args: LearnArgs) -> anyhow::Result<()> {
    let spec = match &args.spec {
        Some(path) => Some(read_spec(path, args.base.as_deref())?),
        None => None,
    };
    if let Some((spec, base)) = &spec {
        from_spec(&mut args, spec, base);
    }
    let job = match &args.job {
        Some(j) => j.parse::<JobId>()?,
        None => util::job_from_env()?.context("which job? pass --job ID or set $SLURM_JOB_ID")?,
    };
    let store_dir = match &args.store {
        Some(s) => s.clone(),
        None => {
            let (site, _) = teesfs_node::site::load(&teesfs_node::site::main_path())?;
            site.store.path.context(
                "no store: pass --store DIR, or --spec manifest.toml naming one in [layer] \
                 store, or set [store] path in the site's teesfs.toml",
            )?
        }
    };
    let store = DirStore::open(&store_dir)?;
    let wanted = match &args.index {
        Some(i) => Some(store.resolve_index(i)?),
        None => None,
    };
    let (asked, gathered) = ask(&args, job)?;
    let Picked {
        index,
        mut records,
        mut skipped,
    } = pick_index(gathered, wanted)?;
    let Some(index) = index else {
        for (h, why) in &skipped {
            errln!("skipped {h}: {why}");
        }
        bail!("nothing learned from job {job}: none of its {asked} node(s) had a record of it");
    };
    if !store.has_index(&index) {
        bail!(
            "job {job} ran index {}, which store {} does not hold: pass the store it was pushed \
             from (--store)",
            index.short(),
            store_dir.display()
        );
    }
    records.sort_by(|a, b| a.host.cmp(&b.host));
    skipped.sort();
    let list = merged_list(job, &records, &skipped);
    let (path, left_out) = write_learned(&store, &index, &list)?;
    if let Some(out) = &args.output {
        let (bytes, _) = list.render();
        std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
    }
    for (h, why) in &skipped {
        errln!("skipped {h}: {why}");
    }
    if left_out > 0 {
        tracing::warn!(left_out, "names with a newline cannot be listed; left out");
    }
    outln!(
        "learned {} files and {} names that exist nowhere from {} of {asked} nodes of job {job} \
         (index {}) -> {}",
        list.files.len(),
        list.absent.len(),
        records.len(),
        index.short(),
        path.display()
    );
    Ok(())
}

/// Asks every node of the job for its record; how many were asked, and what they said.
fn ask(args: &LearnArgs, job: JobId) -> anyhow::Result<(usize, Gathered)> {
    let expr = match &args.nodes {
        Some(e) => e.clone(),
        None => std::env::var("SLURM_JOB_NODELIST")
            .context("no job nodes: pass --nodes EXPR or set $SLURM_JOB_NODELIST")?,
    };
    let hosts = peertree::hostlist::expand(&expr)
        .map_err(super::jobspec::explain)
        .context("reading --nodes")?;
    let to = args.root.addresses(&hosts, &args.login)?;
    let spec = AskSpec {
        job,
        nodes: to.nodes,
        identity: to.identity,
        listen: args.root.listen,
        advertise: to.advertise,
        deadline: args.timeout,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let gathered = rt.block_on(gather(spec))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok((hosts.len(), gathered))
}

/// A job spec and the directory its relative paths are taken from.
fn read_spec(
    path: &std::path::Path,
    base: Option<&std::path::Path>,
) -> anyhow::Result<(manifest::JobSpec, PathBuf)> {
    let text = util::read_text(path, "job spec")?;
    let spec =
        manifest::JobSpec::from_toml(&text).with_context(|| format!("in {}", path.display()))?;
    let base = base
        .or(path.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    Ok((spec, base))
}

/// What the job spec names, as the prolog's push took it: its store (unless --store is
/// given), login node and network settings (over the site's and the built-in defaults).
fn from_spec(args: &mut LearnArgs, spec: &manifest::JobSpec, base: &std::path::Path) {
    let rel = |p: &PathBuf| {
        if p.is_relative() {
            base.join(p)
        } else {
            p.clone()
        }
    };
    if args.store.is_none() {
        args.store = spec.layer.store.as_ref().map(rel);
    }
    if let Some(login) = &spec.nodes.login {
        args.login = login.clone();
    }
    let net = &spec.network;
    if let Some(id) = &net.identity {
        args.root.identity = rel(id);
    }
    if let Some(hosts) = &net.hosts {
        args.root.hosts = Some(rel(hosts));
    }
    if let Some(port) = net.port {
        args.root.port = port;
    }
}

/// The records of one index, and every node left out.
struct Picked {
    /// The index; `None` when no record is left.
    index: Option<manifest::IndexId>,
    /// The records of that index.
    records: Vec<JobRecord>,
    /// Nodes without one, and why.
    skipped: Vec<(String, String)>,
}

/// The index to learn for: `wanted`, else the one most records name (ties: the smaller
/// id). Records of other indexes are skipped. `None` when there is no record.
fn pick_index(g: Gathered, wanted: Option<manifest::IndexId>) -> anyhow::Result<Picked> {
    let Gathered {
        records,
        mut skipped,
    } = g;
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        *count.entry(r.index.clone()).or_default() += 1;
    }
    let best = count
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(i, _)| i.clone());
    let chosen = match (wanted, best) {
        (Some(w), _) => Some(w.to_hex()),
        (None, b) => b,
    };
    let Some(chosen) = chosen else {
        return Ok(Picked {
            index: None,
            records,
            skipped,
        });
    };
    let (keep, other): (Vec<JobRecord>, Vec<JobRecord>) =
        records.into_iter().partition(|r| r.index == chosen);
    for r in other {
        let short = r.index.get(..16).unwrap_or(&r.index).to_string();
        skipped.push((r.host, format!("ran another index, {short}")));
    }
    if keep.is_empty() {
        return Ok(Picked {
            index: None,
            records: keep,
            skipped,
        });
    }
    let id = chosen
        .parse()
        .map_err(|e| anyhow::anyhow!("a node named index {chosen:?}, not an index id: {e}"))?;
    Ok(Picked {
        index: Some(id),
        records: keep,
        skipped,
    })
}

/// The merged list with a header saying where it came from.
fn merged_list(job: JobId, records: &[JobRecord], skipped: &[(String, String)]) -> UrgentList {
    let nodes: Vec<NodeRecord> = records
        .iter()
        .map(|r| NodeRecord {
            host: r.host.clone(),
            files: r.files.iter().map(|p| p.0.clone()).collect(),
            absent: r.absent.iter().map(|p| p.0.clone()).collect(),
        })
        .collect();
    let merged = merge(&nodes);
    let hosts: Vec<String> = records.iter().map(|r| r.host.clone()).collect();
    let mut header = vec![format!(
        "learned from job {job}: {} files from {} node(s) ({}), in first-use order across them",
        merged.files.len(),
        records.len(),
        peertree::hostlist::compress(&hosts)
    )];
    if !skipped.is_empty() {
        let names: Vec<String> = skipped.iter().map(|(h, _)| h.clone()).collect();
        header.push(format!(
            "skipped {} node(s) without a record: {}",
            skipped.len(),
            peertree::hostlist::compress(&names)
        ));
    }
    header.push("then `!` names the job looked up that exist nowhere".into());
    UrgentList {
        header,
        files: merged.files,
        absent: merged.absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teesfs_node::control::LayerPath;

    fn rec(host: &str, index: &str) -> JobRecord {
        JobRecord {
            job: "00000000000004d2".into(),
            host: host.into(),
            index: index.into(),
            recording: true,
            mounted: false,
            whole_layer: true,
            files: vec![LayerPath(b"bin/app".to_vec())],
            file_bytes: 1,
            absent: Vec::new(),
            dropped: 0,
            released: true,
        }
    }

    #[test]
    fn the_index_most_nodes_ran_is_learned_and_the_others_are_named() {
        let (a, b) = ("aa".repeat(32), "bb".repeat(32));
        let g = || Gathered {
            records: vec![rec("n1", &b), rec("n2", &a), rec("n3", &b)],
            skipped: vec![("n4".into(), "unreachable".into())],
        };
        let p = pick_index(g(), None).expect("pick");
        assert_eq!(p.index.map(|i| i.to_hex()), Some(b.clone()));
        assert_eq!(p.records.len(), 2);
        assert_eq!(p.skipped.len(), 2);
        assert!(
            p.skipped[1].1.contains("another index, aaaaaaaa"),
            "{:?}",
            p.skipped
        );
        let wanted = a.parse().expect("id");
        let p = pick_index(g(), Some(wanted)).expect("pick");
        assert_eq!(p.index, Some(wanted));
        assert_eq!(p.records.len(), 1);
        let none = Gathered {
            records: Vec::new(),
            skipped: vec![("n1".into(), "recorded nothing".into())],
        };
        let p = pick_index(none, None).expect("pick");
        assert!(p.index.is_none() && p.skipped.len() == 1);
    }

    #[test]
    fn the_merged_list_says_where_it_came_from() {
        let mut r2 = rec("n2", "ab");
        r2.files = vec![
            LayerPath(b"lib/x.so".to_vec()),
            LayerPath(b"bin/app".to_vec()),
        ];
        let list = merged_list(
            JobId(1234),
            &[rec("n1", "ab"), r2],
            &[("n3".into(), "unreachable".into())],
        );
        assert_eq!(list.files, [b"bin/app".to_vec(), b"lib/x.so".to_vec()]);
        assert!(
            list.header[0].contains("2 files from 2 node(s) (n[1-2])"),
            "{:?}",
            list.header
        );
        assert!(list.header[1].contains("skipped 1 node(s) without a record: n3"));
    }
}

//! The job description shared by commands that plan a tree (`plan`, `push`): which nodes,
//! which topology, which strategy, and turning planner errors into advice.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use peertree::relay::{NodeInfo, plan_nodes};
use peertree::topology::{ProxyPick, Topology};
use peertree::{Availability, LinkRates, Plan, PlanOptions, Strategy, hostlist};
use teesfs_node::net::Identity;

/// Arguments that describe a job's nodes and how to plan its tree.
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// Job nodes as a Slurm hostlist, e.g. `cn[00001-17560]`. Default: $SLURM_JOB_NODELIST.
    #[arg(long, value_name = "EXPR")]
    pub nodes: Option<String>,
    /// topology.toml describing groups, proxies and levels.
    #[arg(long, value_name = "FILE", conflicts_with = "cluster")]
    pub topology: Option<PathBuf>,
    /// All nodes of the cluster as a hostlist, cut into groups of --group-size.
    #[arg(long, value_name = "EXPR", requires = "group_size")]
    pub cluster: Option<String>,
    /// Nodes per group with --cluster (or alone: the job's own nodes are the cluster); the
    /// first node of each group is its proxy.
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    pub group_size: Option<usize>,
    /// Link rates, so that no node feeds more streams than its links carry at a node's
    /// rate: `node=RATE,port=RATE,uplink=RATE,login=RATE` (a compute node's NIC, a proxy's
    /// port toward its group, a group's uplink, the login node's link), e.g.
    /// `node=100gbit,port=400gbit,uplink=400gbit,login=200gbit`. Where a proxy's port
    /// carries fewer streams than its group has members, members relay to members.
    /// Overrides the topology file's [links]; without either (or learned rates) a proxy
    /// feeds 3 members and chains the rest, and an uplink carries a whole group (Tianhe).
    /// Without rates here or in the topology file, the planner uses the rates earlier
    /// pushes from the store measured (STORE/learned/rates.json, see --no-learned-rates).
    #[arg(long, value_name = "SPEC", value_parser = parse_links)]
    pub links: Option<LinkRates>,
    /// Plan without the link rates earlier pushes measured (kept in
    /// STORE/learned/rates.json, used when no rates are configured): a proxy then feeds 3
    /// members and chains the rest. Pushes still record what they measure.
    #[arg(long)]
    pub no_learned_rates: bool,
    /// The store whose learned link rates the plan may use (set by the command).
    #[arg(skip)]
    pub rates_store: Option<PathBuf>,
    /// The mean stored size of the pushed index's chunks (set by the command that has the
    /// index): the planner shapes orphan groups by it.
    #[arg(skip)]
    pub mean_chunk: Option<u64>,
    /// The learned rates, once read.
    #[arg(skip)]
    pub learned: std::sync::OnceLock<Option<pushreport::rates::Learned>>,
    /// Nodes outside the job that are busy: their proxies cannot be borrowed, the others
    /// may be. Without --busy or --idle no proxy outside the job is borrowed (whether it
    /// runs somebody else's job cannot be known).
    #[arg(long, value_name = "EXPR", conflicts_with = "idle")]
    pub busy: Option<String>,
    /// Only these nodes outside the job are idle and may be borrowed as proxies (for
    /// example what `sinfo -h -N -t idle -o %N` reports at push time).
    #[arg(long, value_name = "EXPR")]
    pub idle: Option<String>,
    /// Ask Slurm which nodes outside the job are idle now (`sinfo`), borrow proxies only
    /// among them, and hold the borrowed ones drained (`scontrol update State=DRAIN`, the
    /// reason naming the push) until the push ends, so no job starts on them meanwhile.
    /// Needs Slurm's client commands and the right to update nodes; refused inside a Slurm
    /// prolog or epilog.
    #[arg(long, conflicts_with_all = ["busy", "idle"])]
    pub borrow_idle: bool,
    /// topo, topo-paper, random, hostlist, flat, storage or auto.
    #[arg(long, default_value = "topo", value_parser = super::util::parse_strategy)]
    pub strategy: Strategy,
    /// Most children per node (15 on Tianhe: 7 slaves + 8 proxies).
    #[arg(long, default_value_t = 15)]
    pub width: usize,
    /// `auto` reads from shared storage at or below this many nodes (0: always the tree),
    /// when there is a shared store (--shared-store); without one `auto` plans the tree.
    #[arg(long, default_value_t = 512)]
    pub threshold: usize,
    /// Most hosts the login node feeds in a tree: how many copies of the payload leave it
    /// (at least 1; never more than its link carries at a node's rate). Default with link
    /// rates: 1, the other groups taking the payload from members of the groups before them
    /// (without rates: the Tianhe shape's fan-out). E.g. --login-copies 4 for a login node
    /// that pushes alone over a link four nodes wide: a shallower tree, 4 times the egress.
    #[arg(long, value_name = "N")]
    pub login_copies: Option<usize>,
    /// Shared-storage mode: the store as the nodes see it (e.g. on a parallel file system).
    /// Nodes read chunks from it with `--strategy storage`, and `auto` picks that for jobs
    /// of at most --threshold nodes.
    #[arg(long, value_name = "DIR")]
    pub shared_store: Option<PathBuf>,
    /// Seed of the `random` strategy.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Name of the login node, the root of the tree.
    #[arg(long, default_value = "login")]
    pub login: String,
    /// Name of the shared-storage node for the `storage` strategy.
    #[arg(long, default_value = "storage")]
    pub storage: String,
}

impl JobArgs {
    /// The job's nodes, from `--nodes` or `$SLURM_JOB_NODELIST`.
    pub fn job_nodes(&self) -> anyhow::Result<Vec<String>> {
        let (expr, source) = match &self.nodes {
            Some(e) => (e.clone(), "--nodes"),
            None => match std::env::var("SLURM_JOB_NODELIST") {
                Ok(e) => (e, "$SLURM_JOB_NODELIST"),
                Err(_) => bail!(
                    "no job nodes: pass --nodes EXPR (e.g. --nodes 'cn[0001-0128]') or run inside a \
                     Slurm allocation, which sets $SLURM_JOB_NODELIST"
                ),
            },
        };
        let nodes = hostlist::expand(&expr)
            .map_err(explain)
            .with_context(|| format!("reading {source}"))?;
        if nodes.is_empty() {
            bail!("{source} names no nodes");
        }
        Ok(nodes)
    }

    /// The topology: `--topology FILE`, or generated from `--cluster`/`--group-size`; with
    /// the link rates of [`JobArgs::rates_used`].
    pub fn topology(&self, nodes: &[String]) -> anyhow::Result<Topology> {
        let t = self.bare_topology(nodes)?;
        let rates = self.rates_for(&t).rates();
        Ok(t.with_links(rates))
    }

    /// The link rates the plan uses and where they come from: `--links` (or the site's
    /// `[topology] links`), else the topology file's `[links]`, else what earlier pushes
    /// from the store learned (unless `--no-learned-rates`), else none.
    pub fn rates_used(&self, nodes: &[String]) -> anyhow::Result<pushreport::rates::RatesUsed> {
        Ok(self.rates_for(&self.bare_topology(nodes)?))
    }

    fn rates_for(&self, bare: &Topology) -> pushreport::rates::RatesUsed {
        let configured = self.links.or_else(|| bare.links().copied());
        let learned = match (&configured, &self.rates_store) {
            (None, Some(store)) if !self.no_learned_rates => self
                .learned
                .get_or_init(|| super::rates::load(store))
                .as_ref(),
            _ => None,
        };
        pushreport::rates::choose(configured, learned)
    }

    fn bare_topology(&self, nodes: &[String]) -> anyhow::Result<Topology> {
        if let Some(path) = &self.topology {
            let text = super::util::read_text(path, "topology file")?;
            return Topology::from_toml(&text)
                .map_err(|e| anyhow!("{}: {e}", path.display()))
                .context("fix the topology file (format: docs/planner.md)");
        }
        let Some(size) = self.group_size else {
            bail!(
                "no topology: pass --topology FILE, or --cluster EXPR --group-size N \
                 (e.g. --cluster 'cn[00001-17560]' --group-size 8)"
            );
        };
        let cluster = match &self.cluster {
            Some(expr) => hostlist::expand(expr)
                .map_err(explain)
                .context("reading --cluster")?,
            None => nodes.to_vec(),
        };
        Topology::generated(&cluster, size, ProxyPick::First).map_err(explain)
    }

    fn availability(&self) -> anyhow::Result<Availability> {
        let set = |expr: &str, flag: &str| -> anyhow::Result<HashSet<String>> {
            Ok(hostlist::expand(expr)
                .map_err(explain)
                .with_context(|| format!("reading {flag}"))?
                .into_iter()
                .collect())
        };
        if self.borrow_idle {
            return Ok(Availability::Idle(super::borrow::idle_nodes()?));
        }
        Ok(match (&self.busy, &self.idle) {
            (Some(b), _) => Availability::Busy(set(b, "--busy")?),
            (None, Some(i)) => Availability::Idle(set(i, "--idle")?),
            // Unknown: borrowing could put this push on a node running another job.
            (None, None) => Availability::Idle(HashSet::new()),
        })
    }

    /// Planner options from the arguments.
    pub fn options(&self) -> anyhow::Result<PlanOptions> {
        Ok(PlanOptions {
            width: self.width,
            seed: self.seed,
            threshold: self.threshold,
            shared_storage: self.shared_store.is_some(),
            login: self.login.clone(),
            storage: self.storage.clone(),
            availability: self.availability()?,
            mean_chunk: self.mean_chunk,
            login_copies: self.login_copies,
        })
    }

    /// The plan again, with the `busy` nodes (taken by jobs since Slurm reported them idle)
    /// not borrowed.
    pub fn plan_without(&self, busy: &HashSet<String>) -> anyhow::Result<Plan> {
        let nodes = self.job_nodes()?;
        let topology = self.topology(&nodes)?;
        let mut opts = self.options()?;
        if let Availability::Idle(idle) = &mut opts.availability {
            idle.retain(|n| !busy.contains(n));
        }
        peertree::plan(&topology, &nodes, self.strategy, &opts).map_err(explain)
    }

    /// Nodes, topology and the plan of `--strategy`.
    pub fn plan(&self) -> anyhow::Result<(Vec<String>, Topology, Plan)> {
        let nodes = self.job_nodes()?;
        let topology = self.topology(&nodes)?;
        let plan =
            peertree::plan(&topology, &nodes, self.strategy, &self.options()?).map_err(explain)?;
        Ok((nodes, topology, plan))
    }
}

/// `--links`.
pub fn parse_links(s: &str) -> Result<LinkRates, peertree::Error> {
    LinkRates::parse(s)
}

/// Turns a planner error into a message that says what to do.
pub fn explain(e: peertree::Error) -> anyhow::Error {
    match &e {
        peertree::Error::Hostlist { input, pos, reason } => {
            let caret = " ".repeat(input[..(*pos).min(input.len())].chars().count());
            anyhow!(
                "bad hostlist: {reason}\n  {input}\n  {caret}^\n(hostlists look like cn[0001-0128,0130],login1)"
            )
        }
        peertree::Error::UnknownNode { host } => anyhow!(
            "node `{host}` is not in the topology: add it to the topology file or widen --cluster"
        ),
        _ => anyhow!(e),
    }
}

/// How the login node, the root of the tree, reaches the node daemons and is reached by
/// them; shared by `push` and `health`.
#[derive(Debug, Clone, clap::Args)]
pub struct RootArgs {
    /// Cluster credentials directory (ca.crt, <login>.crt, <login>.key).
    #[arg(long, value_name = "DIR", default_value = "/etc/teesfs/cluster")]
    pub identity: PathBuf,
    /// File mapping host names to daemon addresses, one `host addr[:port]` per line
    /// (default: resolve each host name, port --port).
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Port the node daemons listen on.
    #[arg(long, default_value_t = 7411)]
    pub port: u16,
    /// Where the root listens (nodes whose parent died re-attach or answer here).
    #[arg(long, default_value = "0.0.0.0:0")]
    pub listen: SocketAddr,
    /// How nodes reach the root, `host:port`; port 0 means the port the root bound
    /// (default: the --hosts entry of the login node with the bound port, else its name and
    /// the bound port).
    #[arg(long, value_name = "ADDR")]
    pub advertise: Option<String>,
}

/// What the root needs to contact a plan's nodes.
pub struct RootContact {
    /// The plan's nodes with their addresses, root first.
    pub nodes: Vec<NodeInfo>,
    /// The login node's credentials.
    pub identity: Identity,
    /// How nodes reach the root.
    pub advertise: Option<String>,
}

/// What the login node needs to reach nodes outside a tree ([`RootArgs::addresses`]).
pub struct Addresses {
    /// Each node's host name and daemon address.
    pub nodes: Vec<(String, String)>,
    /// The login node's credentials.
    pub identity: Identity,
    /// How nodes reach the login node.
    pub advertise: Option<String>,
}

impl RootArgs {
    /// Addresses for the plan's nodes and the login node's (`login`) credentials.
    pub fn contact(&self, plan: &Plan, login: &str) -> anyhow::Result<RootContact> {
        let hosts = self.hosts_map()?;
        let nodes = plan_nodes(plan, |h| self.address(&hosts, h));
        Ok(RootContact {
            nodes,
            identity: self.identity(login)?,
            advertise: self.advertise(&hosts, login),
        })
    }

    /// The daemon address of each of `nodes`, the login node's (`login`) credentials and
    /// how the nodes reach it: what `teesfs learn` needs to ask nodes outside a tree.
    pub fn addresses(&self, nodes: &[String], login: &str) -> anyhow::Result<Addresses> {
        let hosts = self.hosts_map()?;
        Ok(Addresses {
            nodes: nodes
                .iter()
                .map(|h| (h.clone(), self.address(&hosts, h)))
                .collect(),
            identity: self.identity(login)?,
            advertise: self.advertise(&hosts, login),
        })
    }

    fn hosts_map(&self) -> anyhow::Result<HashMap<String, String>> {
        Ok(match &self.hosts {
            Some(p) => load_hosts(p, self.port)?,
            None => HashMap::new(),
        })
    }

    fn address(&self, hosts: &HashMap<String, String>, host: &str) -> String {
        hosts
            .get(host)
            .cloned()
            .unwrap_or_else(|| format!("{host}:{}", self.port))
    }

    fn identity(&self, login: &str) -> anyhow::Result<Identity> {
        Identity::load(&self.identity, login).with_context(|| {
            format!(
                "loading the login node's credentials for `{login}` from {} (teesfs keygen --cluster)",
                self.identity.display()
            )
        })
    }

    /// The hosts file gives the login node's address; its port is the daemons' (the root
    /// listens on its own): port 0 stands for the root's bound port.
    fn advertise(&self, hosts: &HashMap<String, String>, login: &str) -> Option<String> {
        self.advertise.clone().or_else(|| {
            hosts
                .get(login)
                .map(|a| a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h))
                .map(|h| format!("{h}:0"))
        })
    }
}

/// Reads a hosts file: `host address[:port]` per line, `#` comments.
fn load_hosts(path: &std::path::Path, port: u16) -> anyhow::Result<HashMap<String, String>> {
    let text = super::util::read_text(path, "hosts file")?;
    let mut map = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(host), Some(addr), None) = (parts.next(), parts.next(), parts.next()) else {
            // The line itself is not quoted: the file may be one the user could not read.
            bail!(
                "{}:{}: expected `host address[:port]` (a hosts file has one host per line)",
                path.display(),
                n + 1
            );
        };
        let addr = if addr.parse::<SocketAddr>().is_ok()
            || addr
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            addr.to_string()
        } else {
            format!("{addr}:{port}")
        };
        map.insert(host.to_string(), addr);
    }
    Ok(map)
}

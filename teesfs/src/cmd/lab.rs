//! `teesfs lab`: an emulated cluster on this machine (network namespaces, tbf-shaped links,
//! a real daemon and FUSE mount per node). A thin layer over the `lab` crate: it parses
//! arguments, prints, and leaves building, measuring and cleanup to the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use lab::{Lab, LabOptions, LabSpec, PushOptions, Rates};

use super::{outfile, util};

mod bench;
mod demo;
mod image;
mod launch;
mod soak;

/// Arguments of `teesfs lab`.
#[derive(Debug, clap::Args)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Debug, clap::Subcommand)]
enum LabCmd {
    /// Build a lab, optionally push a layer to it, and keep it up until Ctrl-C.
    Up(UpArgs),
    /// Remove every lab namespace, process and work directory left by a killed run.
    Clean,
    /// The demo: a Python application from PyPI, pushed urgent-first and started on every
    /// node; prints a short report and writes an SVG/HTML report.
    Demo(demo::DemoArgs),
    /// The same job by each distribution method, several repetitions, with ratios.
    Bench(bench::BenchArgs),
    /// A launch benchmark on any layer: start an application on every node by each launch
    /// method (teesfs urgent-first and its variants, copy-first, demand-only, shared
    /// storage, sbcast+untar), each on fresh nodes, and compare.
    Launch(launch::LaunchArgs),
    /// Many jobs through one lab (in sequence and several at a time, a daemon restarted,
    /// a proxy killed during a push), then the daemons' resources against a baseline.
    Soak(soak::SoakArgs),
}

/// The lab's shape, shared by the subcommands.
#[derive(Debug, Clone, clap::Args)]
pub struct ShapeArgs {
    /// Number of groups.
    #[arg(long, default_value_t = 4)]
    pub groups: usize,
    /// Nodes per group; the first is its proxy.
    #[arg(long, default_value_t = 8)]
    pub group_size: usize,
    /// Slave link rate.
    #[arg(long, default_value = "100mbit", value_parser = peertree::rates::parse_rate)]
    pub slave_rate: u64,
    /// Proxy uplink rate (the group's only way to the core).
    #[arg(long, default_value = "400mbit", value_parser = peertree::rates::parse_rate)]
    pub uplink_rate: u64,
    /// Proxy's port on its group bridge.
    #[arg(long, default_value = "400mbit", value_parser = peertree::rates::parse_rate)]
    pub proxy_group_rate: u64,
    /// Login node's link.
    #[arg(long, default_value = "400mbit", value_parser = peertree::rates::parse_rate)]
    pub login_rate: u64,
    /// Storage node's link.
    #[arg(long, default_value = "1000mbit", value_parser = peertree::rates::parse_rate)]
    pub storage_rate: u64,
    /// MTU of every lab link: 9000 (jumbo frames, as on RoCE and IPoIB fabrics) or 1500
    /// (plain Ethernet). Bigger packets cost less CPU per byte in the kernel and in QUIC.
    #[arg(long, default_value_t = lab::JUMBO_MTU, value_name = "BYTES")]
    pub mtu: u32,
    /// Keep the work directory (logs, reports, store) after the lab goes down.
    #[arg(long)]
    pub keep: bool,
    /// Keep the nodes' chunk stores and copies in the work directory's file system (a
    /// disk unless TMPDIR is on tmpfs) instead of a tmpfs per node, to measure a
    /// disk-backed store. The default stands for diskless nodes.
    #[arg(long)]
    pub disk_stores: bool,
    /// Chunk size of the layers the lab publishes (`teesfs publish --chunk-size`; default
    /// its own choice from the layer's size). A chunk crosses each hop whole before it is
    /// verified and sent on, so on the lab's 100 Mbit/s links a 1 MiB chunk costs 84 ms per
    /// level of the tree (0.84 ms at 10 Gbit/s).
    #[arg(long, default_value = "auto", value_parser = util::parse_chunk_size, value_name = "SIZE|auto")]
    pub chunk_size: util::ChunkSize,
    /// CPU of each lab node, in cores: `auto` (the scale model: each node in its own CPU
    /// cgroup, with the CPU the reference node has per byte of its slave link, and link
    /// rates lowered by the same factor when the machine cannot give every node that
    /// much), a fraction such as `1/16` or `0.05` (links scaled to the reference ratio),
    /// or `pooled` (every node shares every core: measures this machine, not a cluster).
    #[arg(long, default_value = "auto", value_name = "auto|pooled|CORES")]
    pub node_cpu: lab::scale::CpuModel,
    /// Under the scale model, whose quota each node's applications run under: `own`, a
    /// quota of the same size beside the daemon's, as a Slurm job's cgroup beside the
    /// daemon's service on a cluster node (both count in what the machine must give at
    /// once, so `auto` gives each less); or `node`, shared with the node's daemon (an
    /// always-runnable application then spends the node's CPU period while the daemon
    /// waits on the network, which no multi-core node does). Default: `own` where the lab
    /// starts applications (`lab launch`, `lab demo`), `node` where it only pushes.
    #[arg(long, value_name = "own|node")]
    pub app_quota: Option<lab::scale::AppQuota>,
    /// The reference node the scale model stands for, as CORESxRATE: its cores and its
    /// fabric link. The lab keeps its CPU-to-link ratio.
    #[arg(long, default_value = "64x100gbit", value_name = "CORESxRATE")]
    pub reference: lab::scale::Reference,
}

impl ShapeArgs {
    /// The spec.
    pub fn spec(&self) -> LabSpec {
        LabSpec {
            groups: self.groups,
            group_size: self.group_size,
            rates: Rates {
                slave: self.slave_rate,
                proxy_uplink: self.uplink_rate,
                proxy_group: self.proxy_group_rate,
                login: self.login_rate,
                storage: self.storage_rate,
            },
            mtu: self.mtu,
        }
    }

    /// Builds a lab that starts applications on its nodes: each node's applications
    /// under a quota of their own unless `--app-quota` says otherwise.
    pub fn up_for_apps(&self) -> anyhow::Result<Lab> {
        self.build(lab::scale::AppQuota::Own)
    }

    /// Builds the lab (after checking root and arming Ctrl-C); nothing is reserved for
    /// applications unless `--app-quota own` asks.
    pub fn up(&self) -> anyhow::Result<Lab> {
        self.build(lab::scale::AppQuota::Node)
    }

    /// Builds the lab with `apps` as the applications' quota unless `--app-quota` is given.
    fn build(&self, apps: lab::scale::AppQuota) -> anyhow::Result<Lab> {
        lab::require_root()?;
        lab::catch_signals()?;
        let exe = std::env::current_exe().context("finding the teesfs binary")?;
        let mut opts = LabOptions::new(exe);
        opts.keep_work = self.keep;
        opts.tmpfs_state = !self.disk_stores;
        opts.chunk_size = self.chunk_size.fixed().map(u64::from);
        opts.cpu = self.node_cpu;
        opts.app_quota = self.app_quota.unwrap_or(apps);
        // The daemons' log filter, for timelines across nodes (docs/lab.md).
        if let Ok(log) = std::env::var("TEESFS_DAEMON_LOG") {
            opts.log = log;
        }
        opts.reference = self.reference;
        let spec = self.spec();
        let t = std::time::Instant::now();
        let lab = Lab::up(&spec, &opts)?;
        let rates = &lab.layout().spec.rates;
        errln!(
            "lab: {} groups x {} nodes, slave links {}, uplinks {}, login {}, MTU {}",
            spec.groups,
            spec.group_size,
            util::bit_rate(rates.slave),
            util::bit_rate(rates.proxy_uplink),
            util::bit_rate(rates.login),
            spec.mtu
        );
        errln!("lab: {}", lab.model_text());
        if let Some(w) = lab::host::page_reporting() {
            errln!("lab: warning: {w}");
        }
        errln!(
            "lab {} up: {} daemons in {:.1} s (work dir {})",
            lab.layout().prefix,
            lab.layout().compute().count(),
            t.elapsed().as_secs_f64(),
            lab.work().display()
        );
        Ok(lab)
    }
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Publish this layer directory and push it once the lab is up.
    #[arg(long, value_name = "DIR")]
    layer: Option<PathBuf>,
    /// Strategy of that push.
    #[arg(long, default_value = "topo")]
    strategy: String,
    /// The most hosts the login node feeds in that push (`teesfs push --login-copies`).
    #[arg(long, value_name = "N")]
    login_copies: Option<usize>,
    /// The push's urgent set, as globs of layer paths (repeatable); the report then gives
    /// when every node held it.
    #[arg(long, value_name = "GLOB")]
    urgent: Vec<String>,
    /// Push to these nodes only (a Slurm hostlist, e.g. `n[01-28,30-41]`): a job whose
    /// allocation is a part of the lab, possibly missing some groups' proxies. The plan
    /// still knows the whole lab's groups. Default: every compute node.
    #[arg(long, value_name = "HOSTLIST")]
    nodes: Option<String>,
    /// Tear down right after the push instead of waiting for Ctrl-C.
    #[arg(long)]
    exit: bool,
    /// Also write that push's report as JSON (the document of `teesfs push --format
    /// json`), for scripts.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also run real Slurm in the lab as a site runs it: munge, slurmctld on its own `ctl`
    /// host as SlurmUser=slurm with the packaged prolog and epilog, the SPANK plugin, a site
    /// teesfs.toml, `teesfs seeder` on the login node, a slurmd in every compute node, and
    /// an unprivileged lab user; prints a ready `sbatch --teesfs=` line for that user (needs
    /// the Debian packages munge, slurmctld, slurmd, slurm-client; see docs/lab.md).
    #[arg(long)]
    slurm: bool,
    /// The SPANK plugin for --slurm (default: libteesfs_spank.so beside this binary).
    #[arg(long, value_name = "FILE", requires = "slurm")]
    spank_plugin: Option<PathBuf>,
}

/// Runs `teesfs lab`.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.cmd {
        LabCmd::Up(a) => up(a),
        LabCmd::Clean => clean(),
        LabCmd::Demo(a) => demo::run(a),
        LabCmd::Bench(a) => bench::run(a),
        LabCmd::Launch(a) => launch::run(a),
        LabCmd::Soak(a) => soak::run(a),
    }
}

fn clean() -> anyhow::Result<()> {
    let c = lab::clean()?;
    outln!(
        "removed {} namespace(s), killed {} process(es), removed {} work dir(s), {} cgroup(s)",
        c.namespaces.len(),
        c.processes,
        c.dirs.len(),
        c.cgroups.len()
    );
    for n in &c.namespaces {
        outln!("  netns {n}");
    }
    for d in &c.dirs {
        outln!("  dir {}", d.display());
    }
    for u in &c.users {
        outln!("  lab user {u}");
    }
    Ok(())
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let lab = a.shape.up()?;
    outln!("{:<8} {:<16} {:<8} address", "host", "netns", "role");
    for n in &lab.layout().nodes {
        outln!(
            "{:<8} {:<16} {:<8} {}",
            n.host,
            n.netns,
            format!("{:?}", n.role).to_lowercase(),
            n.addr()
        );
    }
    if let Some(layer) = &a.layer {
        let index = lab.publish(layer)?;
        let mut o = PushOptions::new(&index);
        o.strategy = a.strategy.clone();
        o.urgent = a.urgent.clone();
        o.nodes = a.nodes.clone();
        if let Some(n) = a.login_copies {
            o.extra = vec!["--login-copies".into(), n.to_string()];
        }
        let run = lab.push(&o)?;
        let r = &run.report;
        if let Some(path) = &a.report {
            outfile::write(path, &serde_json::to_vec_pretty(r)?)?;
        }
        if r.urgent_bytes > 0 {
            outln!(
                "urgent set ({}) on all nodes in {:.2} s",
                util::bytes(r.urgent_bytes),
                r.urgent_complete_s.unwrap_or(f64::NAN)
            );
        }
        outln!(
            "pushed {} ({}) with {}: all nodes in {:.2} s (lower bound {:.2} s), uplinks {} in \
             (minimum {}), cpu {:.1} s",
            index.get(..12).unwrap_or(&index),
            util::bytes(r.total_bytes),
            r.strategy,
            r.all_complete_s.unwrap_or(f64::NAN),
            lab.layout().lower_bound_s(r.total_bytes),
            util::bytes(run.uplink_in()),
            util::bytes(r.total_bytes * lab.layout().spec.groups as u64),
            run.cpu_s
        );
        if let Some(h) = lab.layout().compute().next() {
            outln!(
                "mounted on every node at {}",
                lab.mountpoint(&h.host, &r.job).display()
            );
        }
    }
    let slurm = if a.slurm {
        Some(site_slurm(&lab, a.spank_plugin.clone())?)
    } else {
        None
    };
    if !a.exit {
        if let Some(h) = lab.layout().compute().next()
            && let Some(pid) = lab.daemon_pid(&h.host)
        {
            outln!(
                "enter a node: nsenter --net=/run/netns/{} --mount=/proc/{pid}/ns/mnt bash",
                h.netns
            );
        }
        outln!("lab is up; Ctrl-C tears it down");
        while lab::check_interrupt().is_ok() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Consumes the Option, so no borrow of `lab` outlives this line.
    drop(slurm);
    lab.down()?;
    errln!("lab torn down");
    Ok(())
}

/// Slurm as a site runs it, in `lab`, with a job ready for the lab user; prints the
/// `sbatch` line that user can run.
fn site_slurm(
    lab: &Lab,
    plugin: Option<PathBuf>,
) -> anyhow::Result<lab::slurm::site::SiteSlurm<'_>> {
    let plugin = plugin
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.join("libteesfs_spank.so"))
        })
        .filter(|p| p.is_file())
        .context(
            "--slurm needs the SPANK plugin: build it (`cargo build -p teesfs-spank`, beside \
             this binary) or name it with --spank-plugin",
        )?;
    let site = lab.start_site_slurm(&plugin)?;
    site.prepare_job("hello")?;
    let n = site.slurm.hosts().len();
    outln!(
        "slurm up as a site runs it: slurmctld on ctl as SlurmUser=slurm, the seeder on \
         login, {n} nodes, lab user {user} (site files in {dir}).\n\
         As {user}, from the login node (paste into this host's root shell):\n  {line}\n\
         then `cat {home}/job-<id>.out`; each job's seeder log: {log}/job-<id>.log",
        user = site.user.name,
        dir = site.dir().display(),
        line = site.sbatch_line(),
        home = site.user.home.display(),
        log = site.seeder_log().display(),
    );
    Ok(site)
}

//! A running lab: the network of a [`Layout`] plus a real `teesfs daemon` (with its FUSE
//! mounts in a private mount namespace) on every compute node, cluster credentials, a
//! publisher key and a store on the login node, and pushes run from the login node's
//! namespace with the kernel's uplink counters read around them.
//!
//! The lab drives the `teesfs` binary it is given and reads the documented push report;
//! it does not link the node code, so what it measures is exactly what users run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use crate::cgroup::NodeCgroups;
use crate::error::{LabError, Result};
use crate::layout::{LabSpec, Layout, NodeSpec};
use crate::mounts::{detach_mounts_under, mount_state_tmpfs};
use crate::net::{Counters, Network};
use crate::proc::{self, NodeProc};
use crate::report::PushReport;
use crate::scale::{AppQuota, CpuModel, Reference, ScaleModel};
use crate::{check_interrupt, require_root, sh};

/// File that marks a directory as a lab work directory (for `teesfs lab clean`).
pub const MARKER: &str = ".teesfs-lab";

/// Port the node daemons listen on.
pub const DAEMON_PORT: u16 = 7411;
/// Port the root of a push listens on.
pub const ROOT_PORT: u16 = 7400;

/// How to run the lab.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `teesfs` binary to run daemons and pushes with.
    pub teesfs: PathBuf,
    /// Extra arguments for every daemon.
    pub daemon_args: Vec<String>,
    /// Log filter for the daemons (`TEESFS_LOG`).
    pub log: String,
    /// Keep the work directory (logs, reports) after the lab goes down.
    pub keep_work: bool,
    /// Give every node's state directory (chunk store, passthrough copies) its own tmpfs
    /// of [`STATE_TMPFS`] bytes, as on the diskless nodes the lab stands for. Off: the
    /// work directory's file system (a disk, unless `TMPDIR` is on tmpfs), a measured
    /// option: a disk that has seen many files deleted makes pushes slow.
    pub tmpfs_state: bool,
    /// Chunk size of every layer the lab publishes, in bytes; `None`: `teesfs publish`'s
    /// own choice from the layer's size (`--chunk-size auto`).
    pub chunk_size: Option<u64>,
    /// How the nodes share this machine's CPU: the scale model ([`CpuModel::Auto`]) by
    /// default, so a node's work competes only with itself, as on separate machines.
    pub cpu: CpuModel,
    /// Under the scale model: whether a node's applications share its daemon's quota
    /// ([`AppQuota::Node`], the default for a lab that only pushes) or run under one of
    /// their own beside it ([`AppQuota::Own`], what `lab launch` and the demo use, as a
    /// Slurm job's cgroup beside the daemon's service).
    pub app_quota: AppQuota,
    /// The reference node whose CPU-to-link ratio the scale model keeps.
    pub reference: Reference,
}

/// Size of a node's state tmpfs: the daemon's default store (4 GiB) and copies (1 GiB)
/// budgets and room for its own small files. Pages are used only as files fill them.
pub const STATE_TMPFS: u64 = (5 << 30) + (64 << 20);

impl LabOptions {
    /// Defaults for `teesfs` at `path`.
    pub fn new(teesfs: impl Into<PathBuf>) -> Self {
        Self {
            teesfs: teesfs.into(),
            daemon_args: Vec::new(),
            log: "teesfs=info".into(),
            keep_work: false,
            tmpfs_state: true,
            chunk_size: None,
            cpu: CpuModel::Auto,
            app_quota: AppQuota::Node,
            reference: Reference::default(),
        }
    }
}

/// One push to run.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Index id.
    pub index: String,
    /// `teesfs push --strategy`.
    pub strategy: String,
    /// Host the push runs on (the tree's root): `login`, or `storage` for a one-to-all
    /// push from the storage node's fat link.
    pub root: String,
    /// Wait for the whole layer (else the urgent set).
    pub wait_all: bool,
    /// Extra urgent globs.
    pub urgent: Vec<String>,
    /// Give up after this long.
    pub timeout: Duration,
    /// More `teesfs push` arguments.
    pub extra: Vec<String>,
    /// The job's nodes (`--nodes`); `None`: every compute node of the lab.
    pub nodes: Option<String>,
    /// More environment for the push (e.g. `SLURM_CONF` for `--borrow-idle`).
    pub env: Vec<(String, String)>,
    /// For a push that keeps serving demand (`--serve`): set it to end the push (it gets
    /// SIGTERM, finishes the job on every node and writes its report).
    pub stop: Option<Arc<AtomicBool>>,
    /// Tell the planner the lab's link rates (`--links`), as a site's configuration
    /// would; without them (and learned rates) a proxy feeds 3 members, the rest chained.
    pub links: bool,
}

impl PushOptions {
    /// A `topo` push of `index` from the login node, waiting for everything.
    pub fn new(index: &str) -> Self {
        Self {
            index: index.to_string(),
            strategy: "topo".into(),
            root: "login".into(),
            wait_all: true,
            urgent: Vec::new(),
            timeout: Duration::from_secs(300),
            extra: Vec::new(),
            nodes: None,
            env: Vec::new(),
            stop: None,
            links: true,
        }
    }
}

/// What one push did.
#[derive(Debug, Clone)]
pub struct PushRun {
    /// The root's report.
    pub report: PushReport,
    /// Wall time of the `teesfs push` process.
    pub wall_s: f64,
    /// Kernel counters of each group's uplink during the push (group order).
    pub uplinks: Vec<Counters>,
    /// Kernel counters of the root's own link during the push.
    pub root_link: Counters,
    /// CPU seconds of the daemons and the push process together.
    pub cpu_s: f64,
}

impl PushRun {
    /// Bytes that entered all groups over their uplinks.
    pub fn uplink_in(&self) -> u64 {
        self.uplinks.iter().map(|c| c.rx).sum()
    }
}

/// Removes the work directory on drop unless asked to keep it.
#[derive(Debug)]
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        detach_mounts_under(&self.path);
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A running lab. Dropping it stops every daemon, deletes every namespace and removes the
/// work directory, also during a panic.
#[derive(Debug)]
pub struct Lab {
    /// Behind a lock so that the nodes can start afresh ([`Lab::fresh_nodes`]) while
    /// something else (Slurm, in a bench with `sbcast`) holds the lab. Each `slurmd` keeps
    /// the mount namespace of the daemon it was started in, so jobs of a Slurm started
    /// before do not see the fresh daemons' FUSE mounts (`sbcast` does not need them).
    daemons: Mutex<Vec<NodeProc>>,
    net: Network,
    teesfs: PathBuf,
    work: WorkDir,
    /// How the daemons were started (to restart one the same way).
    opts: LabOptions,
    /// The scale model the lab runs under (`None`: pooled).
    model: Option<ScaleModel>,
    /// The nodes' CPU cgroups; dropped after the daemons and the network.
    cgroups: Option<NodeCgroups>,
}

impl Lab {
    /// Builds the network of `spec`, makes credentials and starts a daemon on every
    /// compute node.
    pub fn up(spec: &LabSpec, opts: &LabOptions) -> Result<Self> {
        require_root()?;
        let cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        let planned = ScaleModel::plan(spec, (opts.cpu, opts.app_quota), opts.reference, cores)?;
        let (model, spec) = match planned {
            Some((m, scaled)) => (Some(m), scaled),
            None => (None, spec.clone()),
        };
        let layout = Layout::new(&Layout::random_prefix(), &spec)?;
        let path = std::env::temp_dir().join(&layout.prefix);
        std::fs::create_dir(&path).map_err(LabError::io(&path))?;
        let work = WorkDir {
            path,
            keep: opts.keep_work,
        };
        std::fs::write(work.path.join(MARKER), b"teesfs lab work directory\n")
            .map_err(LabError::io(work.path.join(MARKER)))?;
        let t = Instant::now();
        let net = Network::build(layout)?;
        tracing::info!("lab network up in {:.2} s", t.elapsed().as_secs_f64());
        let cgroups = match &model {
            Some(m) => Some(NodeCgroups::create(net.layout(), m)?),
            None => None,
        };
        let lab = Self {
            daemons: Mutex::new(Vec::new()),
            net,
            teesfs: opts.teesfs.clone(),
            work,
            opts: opts.clone(),
            model,
            cgroups,
        };
        lab.credentials()?;
        lab.start_daemons(opts)?;
        lab.write_hosts()?;
        Ok(lab)
    }

    /// The lab's shape.
    pub fn layout(&self) -> &Layout {
        self.net.layout()
    }

    /// The scale model the lab runs under; `None` when its nodes share every core.
    pub fn model(&self) -> Option<&ScaleModel> {
        self.model.as_ref()
    }

    /// The model in one line, for every report: CPU per node, link rates, the factor.
    pub fn model_text(&self) -> String {
        match &self.model {
            Some(m) => format!(
                "{}; slave links {:.0} Mbit/s",
                m.describe(),
                self.layout().spec.rates.slave as f64 / 1e6
            ),
            None => crate::scale::POOLED_TEXT.to_string(),
        }
    }

    /// The nodes' CPU cgroups (throttling counters, pids); `None` when pooled.
    pub fn cgroups(&self) -> Option<&NodeCgroups> {
        self.cgroups.as_ref()
    }

    /// Seconds the compute nodes' cgroups have spent throttled by their CPU quotas so far,
    /// summed (`None` when pooled): differences tell how long the model held them back.
    pub fn throttled_s(&self) -> Option<f64> {
        let hosts = self.layout().compute().map(|n| n.host.as_str());
        self.cgroups().map(|c| c.throttled_s(hosts))
    }

    /// The network (for counters).
    pub fn net(&self) -> &Network {
        &self.net
    }

    /// Chunk size of a layer of `layer_bytes` this lab publishes: the fixed one, or what
    /// `teesfs publish --chunk-size auto` chooses for it.
    pub fn chunk_size_for(&self, layer_bytes: u64) -> u64 {
        self.opts.chunk_size.unwrap_or_else(|| {
            u64::from(manifest::chunk_size_for(
                layer_bytes,
                manifest::MAX_AUTO_CHUNK,
            ))
        })
    }

    /// The work directory (logs, store, reports).
    pub fn work(&self) -> &Path {
        &self.work.path
    }

    /// The `teesfs` binary the lab runs.
    pub fn teesfs_bin(&self) -> &Path {
        &self.teesfs
    }

    fn teesfs_cmd(&self) -> Command {
        let mut c = Command::new(&self.teesfs);
        c.env("TEESFS_CONFIG", self.work().join("config"));
        c
    }

    pub(crate) fn run_teesfs(&self, args: &[&str]) -> Result<String> {
        let out = sh::output(self.teesfs_cmd().args(args), "teesfs")?;
        if !out.status.success() {
            return Err(LabError::Command {
                command: format!("teesfs {}", args.join(" ")),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn path_str(&self, rel: &str) -> String {
        self.work().join(rel).display().to_string()
    }

    fn credentials(&self) -> Result<()> {
        let hosts = self.layout().all_hosts().join(",");
        self.run_teesfs(&[
            "keygen",
            "--cluster",
            &self.path_str("cluster"),
            "--nodes",
            &hosts,
        ])?;
        self.run_teesfs(&["keygen", "--out", &self.path_str("publisher.key")])?;
        Ok(())
    }

    /// The running daemons.
    pub(crate) fn daemons(&self) -> MutexGuard<'_, Vec<NodeProc>> {
        self.daemons.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start_daemons(&self, opts: &LabOptions) -> Result<()> {
        let nodes: Vec<_> = self.layout().compute().cloned().collect();
        let mut waiting = Vec::new();
        for node in &nodes {
            let (daemon, rx) = self.spawn_daemon(node, opts)?;
            self.daemons().push(daemon);
            waiting.push(rx);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let daemons = self.daemons();
        for (rx, d) in waiting.iter().zip(daemons.iter()) {
            wait_listening(rx, d, deadline)?;
        }
        Ok(())
    }

    /// Starts `node`'s daemon (not waiting for it): the process, and a channel that
    /// receives its first line of output.
    fn spawn_daemon(
        &self,
        node: &NodeSpec,
        opts: &LabOptions,
    ) -> Result<(NodeProc, mpsc::Receiver<String>)> {
        let dir = self.work().join(&node.host);
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
        let log = dir.join("daemon.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(LabError::io(&log))?;
        if opts.tmpfs_state {
            // Before the daemon's mount namespace copies the host's mounts.
            mount_state_tmpfs(&dir.join("state"))?;
        }
        let mut cmd = proc::in_new_mounts(&node.netns, &self.teesfs.display().to_string());
        cmd.arg("daemon")
            .args(["--host", &node.host])
            .arg("--listen")
            .arg(format!("{}:{DAEMON_PORT}", node.addr()))
            .arg("--identity")
            .arg(self.work().join("cluster"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--mount-root")
            .arg(dir.join("jobs"))
            .arg("--control")
            .arg(dir.join("sock"))
            .arg("--trust")
            .arg(self.work().join("publisher.pub"))
            .args(&opts.daemon_args)
            .env("TEESFS_LOG", &opts.log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: "nsenter".into(),
            source,
        })?;
        let out = child.stdout.take();
        let (tx, rx) = mpsc::channel();
        if let Some(out) = out {
            std::thread::spawn(move || {
                let mut lines = BufReader::new(out).lines();
                if let Some(Ok(l)) = lines.next() {
                    let _ = tx.send(l);
                }
                // Keep draining so the daemon never blocks on a full pipe.
                for _ in lines {}
            });
        }
        Ok((NodeProc::new(&node.host, log, child), rx))
    }

    /// Stops every daemon, empties every node's store and state, and starts them again:
    /// the next push finds nothing held, as on nodes that never ran the layer.
    pub fn fresh_nodes(&self) -> Result<()> {
        self.stop_daemons();
        for node in self.layout().compute() {
            let state = self.work().join(&node.host).join("state");
            if state.exists() {
                // Emptied while still mounted here: a mount namespace that outlives the
                // daemon (a slurmd's) keeps the tmpfs, but not its files.
                for entry in std::fs::read_dir(&state).map_err(LabError::io(&state))? {
                    let path = entry.map_err(LabError::io(&state))?.path();
                    let gone = if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    gone.map_err(LabError::io(&path))?;
                }
                detach_mounts_under(&state);
                std::fs::remove_dir_all(&state).map_err(LabError::io(&state))?;
            }
        }
        let opts = self.opts.clone();
        self.start_daemons(&opts)
    }

    /// Removes every index and chunk the lab has published (`teesfs gc --keep 0`).
    pub fn unpublish_all(&self) -> Result<()> {
        self.run_teesfs(&[
            "gc",
            "--store",
            &self.path_str("store"),
            "--keep",
            "0",
            "--no-keep-tag",
            "--grace",
            "0s",
        ])
        .map(drop)
    }

    /// Starts `host`'s daemon again as [`Lab::up`] did (same directories, same address),
    /// after stopping the running one if any, and waits until it listens.
    pub fn restart_daemon(&self, host: &str) -> Result<()> {
        let node = self
            .layout()
            .node(host)
            .filter(|n| n.group.is_some())
            .ok_or_else(|| LabError::Shape(format!("no compute node {host}")))?
            .clone();
        if let Some(d) = self.daemons().iter_mut().find(|d| d.host == host) {
            d.stop(Duration::from_secs(5));
        }
        let (daemon, rx) = self.spawn_daemon(&node, &self.opts)?;
        wait_listening(&rx, &daemon, Instant::now() + Duration::from_secs(60))?;
        let mut daemons = self.daemons();
        match daemons.iter_mut().find(|d| d.host == host) {
            Some(d) => *d = daemon,
            None => daemons.push(daemon),
        }
        Ok(())
    }

    fn write_hosts(&self) -> Result<()> {
        let mut text = String::new();
        for n in &self.layout().nodes {
            if n.role == crate::layout::Role::Controller {
                continue;
            }
            let port = if n.group.is_some() {
                DAEMON_PORT
            } else {
                ROOT_PORT
            };
            text.push_str(&format!("{} {}:{port}\n", n.host, n.addr()));
        }
        let p = self.work().join("hosts");
        std::fs::write(&p, text).map_err(LabError::io(&p))
    }

    /// Publishes `layer` into the login node's store; returns the index id.
    pub fn publish(&self, layer: &Path) -> Result<String> {
        self.publish_source(&layer.display().to_string(), None)
    }

    /// Publishes the container image `image` (`teesfs publish --image`, e.g. an OCI
    /// layout `DIR:TAG`) into the login node's store; returns the index id.
    pub fn publish_image(&self, image: &str) -> Result<String> {
        self.publish_source(image, Some("--image"))
    }

    fn publish_source(&self, source: &str, flag: Option<&str>) -> Result<String> {
        let chunk_size = self
            .opts
            .chunk_size
            .map_or_else(|| "auto".to_owned(), |c| c.to_string());
        let (store, key) = (self.path_str("store"), self.path_str("publisher.key"));
        let mut args: Vec<&str> = vec!["publish"];
        args.extend(flag);
        args.extend([source, "--store", &store, "--key", &key]);
        args.extend(["--chunk-size", &chunk_size, "--quiet", "--format", "json"]);
        let out = self.run_teesfs(&args)?;
        serde_json::from_str::<pushreport::output::PublishDoc>(&out)
            .map(|doc| doc.index)
            .map_err(|e| LabError::Parse {
                what: "teesfs publish --format json".into(),
                detail: format!("{e}: {out}"),
            })
    }

    /// Pid of `host`'s daemon.
    pub fn daemon_pid(&self, host: &str) -> Option<u32> {
        self.daemons()
            .iter()
            .find(|d| d.host == host)
            .and_then(NodeProc::pid)
    }

    /// Pid of `host`'s daemon, or an error naming the node and its log when it is not
    /// running.
    pub fn running_daemon_pid(&self, host: &str) -> Result<u32> {
        self.daemon_pid(host).ok_or_else(|| LabError::Daemon {
            host: host.into(),
            reason: "not running".into(),
            log: self.work().join(host).join("daemon.log"),
        })
    }

    /// Whether every daemon is still running.
    pub fn daemons_alive(&self) -> bool {
        self.daemons().iter_mut().all(NodeProc::alive)
    }

    /// A command running `program` on `host` with that node's network and mounts.
    pub fn command_on(&self, host: &str, program: &str) -> Result<Command> {
        let node = self
            .layout()
            .node(host)
            .ok_or_else(|| LabError::Shape(format!("no node {host}")))?;
        let pid = self.running_daemon_pid(host)?;
        Ok(proc::in_mounts_of(&node.netns, pid, program))
    }

    /// [`Lab::command_on`] for an application: under [`AppQuota::Own`] it first moves
    /// itself into the cgroup of `host`'s applications.
    pub fn app_command(&self, host: &str, program: &str) -> Result<Command> {
        let Some(dir) = self.cgroups.as_ref().and_then(|c| c.apps_dir(host)) else {
            return self.command_on(host, program);
        };
        let mut cmd = self.command_on(host, "sh")?;
        cmd.args(crate::cgroup::join_then_exec(dir)).arg(program);
        Ok(cmd)
    }

    /// Where `host` mounts job `job` (a path inside that node's mount namespace).
    pub fn mountpoint(&self, host: &str, job: &str) -> PathBuf {
        self.work().join(host).join("jobs").join(job)
    }

    /// CPU seconds used so far by the running daemons and by every waited-for child of
    /// this process (pushes, applications): differences measure what a step cost.
    pub fn cpu_seconds(&self) -> f64 {
        self.daemons_cpu() + proc::children_cpu_seconds()
    }

    fn daemons_cpu(&self) -> f64 {
        self.daemons()
            .iter()
            .filter_map(NodeProc::pid)
            .map(proc::cpu_seconds)
            .sum()
    }

    /// Runs `teesfs push` on the root node and measures it.
    pub fn push(&self, o: &PushOptions) -> Result<PushRun> {
        let root = self
            .layout()
            .node(&o.root)
            .ok_or_else(|| LabError::Shape(format!("no node {}", o.root)))?
            .clone();
        let (mut cmd, report_path, log_path) = self.push_command(o, &root)?;

        let up_before = self.net.uplinks()?;
        let root_before = self.net.counters(&root.host, "eth0")?;
        let cpu_before = self.cpu_seconds();
        let t0 = Instant::now();
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: "nsenter".into(),
            source,
        })?;
        let mut guard = NodeProc::new(&root.host, log_path.clone(), child);
        let status = loop {
            if let Err(e) = check_interrupt() {
                guard.stop(Duration::from_secs(2));
                return Err(e);
            }
            match guard.try_exit() {
                Some(s) => break s,
                None => std::thread::sleep(Duration::from_millis(10)),
            }
            if let Some(stop) = &o.stop
                && stop.swap(false, Ordering::SeqCst)
            {
                guard.signal_stop();
            }
        };
        let wall_s = t0.elapsed().as_secs_f64();
        let cpu_s = self.cpu_seconds() - cpu_before;
        let up_after = self.net.uplinks()?;
        let root_after = self.net.counters(&root.host, "eth0")?;
        if !status {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            return Err(LabError::Command {
                command: format!(
                    "teesfs push --strategy {} (log {})",
                    o.strategy,
                    log_path.display()
                ),
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        let report = crate::report::load(&report_path)?;
        Ok(PushRun {
            report,
            wall_s,
            uplinks: crate::net::Counters::each_since(&up_after, &up_before),
            root_link: root_after.since(root_before),
            cpu_s: cpu_s.max(0.0),
        })
    }

    /// Releases `job` on compute node `host` (`teesfs release` on its control socket), as
    /// the Slurm epilog does.
    pub fn release(&self, host: &str, job: &str) -> Result<()> {
        let sock = self.work().join(host).join("sock");
        self.run_teesfs(&[
            "release",
            "--job",
            job,
            "--control",
            &sock.display().to_string(),
        ])?;
        Ok(())
    }

    /// What a Slurm cluster does when job `job` ends: the Epilog releases it on every
    /// compute node (`teesfs release`), then the EpilogSlurmctld runs `teesfs learn` on the
    /// login node, which asks every node for its record of the job over the network and
    /// keeps the merged list beside `index` in the store. Returns what `learn` printed.
    pub fn learn(&self, job: &str, index: &str) -> Result<String> {
        for node in self.layout().compute() {
            self.release(&node.host, job)?;
        }
        let login = self
            .layout()
            .node("login")
            .ok_or_else(|| LabError::Shape("no login node".into()))?;
        let mut cmd = sh::command_in(&login.netns, &self.teesfs.display().to_string());
        cmd.args(["learn", "--job", job, "--index", index, "--login", "login"])
            .args(["--nodes", &self.layout().hostlist()])
            .args(["--store", &self.path_str("store")])
            .args(["--identity", &self.path_str("cluster")])
            .args(["--hosts", &self.path_str("hosts")])
            .args(["--listen", &format!("{}:0", login.addr())])
            .env("TEESFS_CONFIG", self.work().join("config"));
        let out = sh::output(&mut cmd, "teesfs learn")?;
        if !out.status.success() {
            return Err(LabError::Command {
                command: format!("teesfs learn --job {job} (on the login node)"),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `teesfs push` command of `o` run on `root`, with where it writes its report and
    /// its log.
    pub(crate) fn push_command(
        &self,
        o: &PushOptions,
        root: &NodeSpec,
    ) -> Result<(Command, PathBuf, PathBuf)> {
        let reports = self.work().join("reports");
        std::fs::create_dir_all(&reports).map_err(LabError::io(&reports))?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let report_path = reports.join(format!("{}-{stamp}.json", o.strategy));
        let log_path = reports.join(format!("{}-{stamp}.log", o.strategy));
        let log = std::fs::File::create(&log_path).map_err(LabError::io(&log_path))?;
        let mut cmd = sh::command_in(&root.netns, "setpriv");
        cmd.args(["--pdeathsig", "KILL", "--"])
            .arg(&self.teesfs)
            .args(["push", "--quiet", "--store", &self.path_str("store")])
            .args(["--index", &o.index, "--nodes"])
            .arg(o.nodes.clone().unwrap_or_else(|| self.layout().hostlist()))
            .args(["--group-size", &self.layout().spec.group_size.to_string()])
            // The groups are the lab's, whatever part of it the job has: a push to some of
            // the nodes must not cut its own nodes into new groups.
            .args(["--cluster", &self.layout().hostlist()])
            .args(["--identity", &self.path_str("cluster")])
            .args(["--hosts", &self.path_str("hosts")])
            // Port 0: pushes from one root may run at once (two jobs' prologs); each
            // advertises the port it bound.
            .args(["--listen", &format!("{}:0", root.addr())])
            .args(["--trust", &self.path_str("publisher.pub")])
            .args(["--strategy", &o.strategy, "--login", &o.root])
            .args(["--wait", if o.wait_all { "all" } else { "urgent" }])
            .args(["--timeout", &format!("{}s", o.timeout.as_secs().max(1))])
            .arg("--report")
            .arg(&report_path);
        for g in &o.urgent {
            cmd.args(["--urgent", g]);
        }
        if o.links {
            cmd.args(["--links", &self.layout().links()]);
        }
        cmd.args(&o.extra)
            .envs(o.env.iter().map(|(k, v)| (k, v)))
            .env("TEESFS_CONFIG", self.work().join("config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(LabError::io(&log_path))?)
            .stderr(log);

        Ok((cmd, report_path, log_path))
    }

    /// Stops every daemon and removes the network and work directory; errors are reported
    /// rather than ignored (Drop does the same silently).
    pub fn down(mut self) -> Result<()> {
        self.stop_daemons();
        self.net.teardown()
    }

    fn stop_daemons(&self) {
        let mut daemons = self.daemons();
        // Signal all first so they unmount in parallel, then wait for each.
        for d in daemons.iter() {
            d.signal_stop();
        }
        for d in daemons.iter_mut() {
            d.stop(Duration::from_secs(5));
        }
        daemons.clear();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop_daemons();
        // `net` and `work` drop after this, in field order: namespaces, then the directory.
    }
}

/// Waits for a daemon's `listening on` line.
fn wait_listening(rx: &mpsc::Receiver<String>, d: &NodeProc, deadline: Instant) -> Result<()> {
    loop {
        check_interrupt()?;
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.starts_with("listening on ") => return Ok(()),
            Ok(line) => {
                return Err(LabError::Daemon {
                    host: d.host.clone(),
                    reason: format!("unexpected first line {line:?}"),
                    log: d.log.clone(),
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => {
                return Err(LabError::Daemon {
                    host: d.host.clone(),
                    reason: "no `listening on` line".into(),
                    log: d.log.clone(),
                });
            }
        }
    }
}

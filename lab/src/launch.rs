//! The launch benchmark as a library: one layer and one application, started on every
//! node by each launch method in turn, each on nodes that hold nothing yet
//! ([`Lab::fresh_nodes`]), in one run:
//!
//! - **urgent-first** (teesfs, what `push`, `prefetch` and the Slurm prolog do without
//!   flags): the urgent set streams first and the application starts on a node as soon as
//!   its mount appears; the rest of the layer is held back while the nodes' demand shows
//!   applications starting (`teesfs push --bulk-after --bulk-quiet`, 2 minutes and 2 s);
//! - **urgent-eager** (teesfs `--bulk-after 0s`): the rest streams right behind the
//!   urgent set, competing with the starting applications for links and CPU;
//! - **urgent-only** (teesfs `--stream urgent`): only the urgent set is streamed, the
//!   rest is fetched on demand by whoever reads it;
//! - **copy-first** (teesfs): the whole layer reaches every node (in the urgent set's
//!   order), then the application starts everywhere from local data (its start alone is
//!   the "local" reference);
//! - **demand-only** (teesfs `--stream none`): nothing is streamed; every node fetches
//!   what it reads through the tree, as Copper on Aurora does;
//! - **shared storage**: every node fetches what it reads straight from the storage
//!   node over its link (teesfs `--stream none`, one-to-all from the storage node: the
//!   traffic of a network file system without client-side sharing; this sandbox's kernel
//!   has no NFS);
//! - **sbcast+untar**: today's practice at large sites: `sbcast` of a tarball of the
//!   layer to every node of a real Slurm allocation, `tar -x` on every node, then start;
//! - **urgent-learned** (teesfs): a second job of the same layer with nothing given by
//!   hand: after the urgent-first (else demand-only) run, the lab does what a Slurm
//!   cluster's epilogs do (every node releases the job, then `teesfs learn` on the login
//!   node merges every node's record of it into `learned/<index>.list` in the store), and
//!   then the default push of the same index, without urgent globs, picks the learned list
//!   up by itself.
//!
//! Every other teesfs method pushes with `--no-learned`, so it measures a layer's first
//! launch whatever an earlier run learned.
//!
//! A method that fails (a baseline's tool that cannot reach a node, a push that gives up)
//! is kept in the report with its reason and the run goes on with the next method on fresh
//! nodes: a long run never loses the figures it has. Only an interrupt, or nodes that
//! cannot be made fresh, end it early.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use serde::Serialize;

use crate::cluster::{Lab, PushOptions};
use crate::demo::{self, App, AppRun, DemoRun};
use crate::error::{LabError, Result};
use crate::traffic::Traffic;

#[path = "launch_rounds.rs"]
pub mod rounds;
#[path = "launch_sbcast.rs"]
mod sbcast;
#[path = "launch_table.rs"]
pub(crate) mod table;
pub(crate) use sbcast::sbcast_limit;
use sbcast::sbcast_untar;
pub use table::{goals, table};

/// A launch method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// teesfs as users get it: urgent set first, application on mount, the hysteretic
    /// set held back while applications start.
    UrgentFirst,
    /// teesfs: urgent-first with the hysteretic set streaming at once.
    Eager,
    /// teesfs: only the urgent set streamed, the rest on demand.
    UrgentOnly,
    /// teesfs: whole layer, then the application.
    CopyFirst,
    /// teesfs: nothing streamed, every read through the tree.
    DemandOnly,
    /// Every read from the storage node.
    SharedStorage,
    /// `sbcast` of a tarball, `tar -x`, then the application.
    Sbcast,
    /// teesfs: the default push again, nothing given by hand, after the nodes' records of
    /// an earlier run were learned (`teesfs learn`).
    Learned,
    /// Images: every node pulls from a registry on the storage node and unpacks.
    RegistryPull,
    /// Images: `sbcast` of a squashfs, `unsquashfs` on every node.
    SbcastUnsquash,
    /// Images: the squashfs read lazily from the storage node through `squashfuse`.
    Squashfuse,
}

impl Method {
    /// Every method, in report order.
    pub const ALL: [Method; 11] = [
        Method::UrgentFirst,
        Method::Eager,
        Method::UrgentOnly,
        Method::CopyFirst,
        Method::DemandOnly,
        Method::SharedStorage,
        Method::Sbcast,
        Method::Learned,
        Method::RegistryPull,
        Method::SbcastUnsquash,
        Method::Squashfuse,
    ];

    /// The methods that start an image (they need [`Launch::image`]).
    pub fn image_only(self) -> bool {
        matches!(
            self,
            Method::RegistryPull | Method::SbcastUnsquash | Method::Squashfuse
        )
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Method::UrgentFirst => "urgent-first",
            Method::Eager => "urgent-eager",
            Method::UrgentOnly => "urgent-only",
            Method::CopyFirst => "copy-first",
            Method::DemandOnly => "demand-only",
            Method::SharedStorage => "shared-storage",
            Method::Sbcast => "sbcast+untar",
            Method::Learned => "urgent-learned",
            Method::RegistryPull => "registry-pull",
            Method::SbcastUnsquash => "sbcast+unsquash",
            Method::Squashfuse => "squashfuse",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Method> {
        // `urgent-polite` named the held push before it became the default.
        let s = if s == "urgent-polite" {
            "urgent-first"
        } else {
            s
        };
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether it is a teesfs push that streams the urgent set and the rest behind it.
    fn streams(self) -> bool {
        matches!(
            self,
            Method::UrgentFirst | Method::Eager | Method::UrgentOnly | Method::Learned
        )
    }
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The layer directory (for the tarball).
    pub layer: PathBuf,
    /// Its published index id.
    pub index: String,
    /// Urgent globs.
    pub urgent: Vec<String>,
    /// The application.
    pub app: App,
    /// The layer path whose appearance in a mount starts the application.
    pub probe: String,
    /// Urgent-first holds the hysteretic set back at most this long after the urgent
    /// set is on every node (`teesfs push --bulk-after`)...
    pub bulk_after: std::time::Duration,
    /// ... and lets it flow while no demand reached the root for this long
    /// (`teesfs push --bulk-quiet`).
    pub bulk_quiet: std::time::Duration,
    /// The image, when the layer is a container image's root (the image methods need it).
    pub image: Option<crate::image::ImageFiles>,
}

/// One method's launch.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Method.
    pub method: Method,
    /// Seconds from the method's start until the application had started (exited 0) on
    /// every node.
    pub app_s: f64,
    /// Seconds until the urgent set was on every node (teesfs pushes).
    pub urgent_s: Option<f64>,
    /// Seconds until the whole layer was on every node (methods that copy it).
    pub all_s: Option<f64>,
    /// Nodes where the application ran correctly.
    pub ok: usize,
    /// Nodes.
    pub nodes: usize,
    /// Bytes that entered the groups over their uplinks.
    pub uplink_in_bytes: u64,
    /// Bytes the login and storage nodes sent (where every method's data comes from).
    pub source_out_bytes: u64,
    /// Seconds until every node's mount had appeared (methods that start on mount).
    pub mounted_s: Option<f64>,
    /// Wall time of the `teesfs push` process, and the root's time for the whole push
    /// (from its session's start): the difference is the process's own start and end.
    pub push_wall_s: Option<(f64, f64)>,
    /// CPU seconds of the daemons, pushes, applications and (sbcast) Slurm: on a lab
    /// whose nodes share a few cores, `app_s` cannot be below this over the core count.
    pub cpu_s: f64,
    /// The part of `cpu_s` the applications used (each with what it ran, in user and
    /// kernel time, FUSE reads included); the rest is the method's own.
    pub app_cpu_s: f64,
    /// How the time divides, for a person.
    pub detail: String,
    /// The node whose application finished last: the one that set `app_s`.
    pub last: Option<String>,
    /// Node-seconds the nodes spent throttled by their CPU quotas during this method,
    /// summed over nodes (the scale model's `cpu.stat`); `None` when the lab is pooled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled_s: Option<f64>,
    /// The teesfs job the method pushed (`None` for the other tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// That job's traffic counters summed over the nodes: demand requests among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,
    /// `app_s` of each round, in the order they ran, when the launch ran more than one
    /// ([`rounds::run_rounds`]); the figures above are then the medians over them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
    /// Each node's start (seconds from the method's start until its application had
    /// started), in the nodes' order: whether a slow `app_s` is one late node or all of
    /// them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_starts: Vec<(String, f64)>,
}

/// A method that did not finish, and why: the run goes on with the next method, and the
/// table and the figures say it failed instead of losing the others.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// Method.
    pub method: Method,
    /// What went wrong, as the step that failed said it.
    pub reason: String,
}

/// Every method's launch, and the urgent-first run for the picture.
#[derive(Debug)]
pub struct Report {
    /// One per method that finished, in order.
    pub outcomes: Vec<Outcome>,
    /// The methods that failed or were never run, in order.
    pub failures: Vec<Failure>,
    /// What ended the run before its last method (an interrupt, nodes that could not be
    /// made fresh); the methods not run are among `failures`.
    pub stopped: Option<LabError>,
    /// The application started everywhere from local data with nothing streaming.
    pub local_s: Option<f64>,
    /// The urgent-first run (push report and per-node application runs).
    pub urgent_first: Option<DemoRun>,
    /// Each round's own outcomes when the run had more than one
    /// ([`rounds::run_rounds`]), in the order the rounds ran: what the medians were taken
    /// of, for the JSON.
    pub each_round: Vec<Vec<Outcome>>,
    /// Each round's start from local data, in the order the rounds ran (beside
    /// `each_round`): the goals pair each round's figures with its own.
    pub each_local: Vec<Option<f64>>,
}

impl Report {
    /// A report of `outcomes` with nothing failed and no urgent-first run kept (tests of
    /// the table and the goals).
    #[cfg(test)]
    pub(crate) fn of(outcomes: Vec<Outcome>, local_s: Option<f64>) -> Self {
        Self {
            outcomes,
            failures: Vec::new(),
            stopped: None,
            local_s,
            urgent_first: None,
            each_round: Vec::new(),
            each_local: Vec::new(),
        }
    }
}

fn apps_cpu(apps: &[AppRun]) -> f64 {
    apps.iter().map(|x| x.cpu_s).sum()
}

impl Outcome {
    /// CPU seconds of the method itself: daemons, the push's root, copy tools and
    /// Slurm, without the applications.
    pub fn method_cpu_s(&self) -> f64 {
        (self.cpu_s - self.app_cpu_s).max(0.0)
    }
}

fn max_done(apps: &[AppRun]) -> f64 {
    apps.iter().map(|x| x.done_s).fold(0.0, f64::max)
}

/// Each node's start, as [`Outcome::node_starts`] keeps it.
pub(crate) fn node_starts(apps: &[AppRun]) -> Vec<(String, f64)> {
    apps.iter().map(|x| (x.host.clone(), x.done_s)).collect()
}

/// The node whose application finished last.
pub(crate) fn last_node(apps: &[AppRun]) -> Option<String> {
    apps.iter()
        .max_by(|a, b| a.done_s.total_cmp(&b.done_s))
        .map(|x| x.host.clone())
}

/// A method's turn in a launch run, as it ends.
#[derive(Debug, Clone, Copy)]
pub enum Turn<'a> {
    /// The method ran to the end.
    Done(&'a Outcome),
    /// It failed, or was never run.
    Failed(&'a Failure),
}

/// What a launch run carries from one method to the next.
#[derive(Default)]
struct Carry {
    /// urgent-learned is among the methods.
    wants_learning: bool,
    /// The urgent set the nodes learned in the urgent-first run, else the demand-only one,
    /// asked for only when urgent-learned will use it. (Learning fails when nothing was
    /// read before the layer arrived: only urgent-learned needs it to succeed.)
    learned: Option<(Method, Result<Learned>)>,
    /// Copy-first's start from local data.
    local_s: Option<f64>,
    /// The urgent-first run.
    urgent_first: Option<DemoRun>,
}

/// Runs each of `methods` once on fresh nodes; `on_turn` sees each as it ends. A method
/// that fails is kept in the report with its reason and the next one runs; an interrupt,
/// or nodes that cannot be made fresh, end the run ([`Report::stopped`]) with what was
/// measured so far.
pub fn run(lab: &Lab, l: &Launch, methods: &[Method], mut on_turn: impl FnMut(Turn<'_>)) -> Report {
    let mut carry = Carry {
        wants_learning: methods.contains(&Method::Learned),
        ..Carry::default()
    };
    let (outcomes, failures, stopped) = each(
        methods,
        || {
            crate::check_interrupt()?;
            lab.fresh_nodes()
        },
        |m| one(lab, l, m, &mut carry),
        &mut on_turn,
    );
    Report {
        outcomes,
        failures,
        stopped,
        local_s: carry.local_s,
        urgent_first: carry.urgent_first,
        each_round: Vec::new(),
        each_local: Vec::new(),
    }
}

/// What [`each`] gives back: the outcomes, the failures, and what ended the run early.
type Ran = (Vec<Outcome>, Vec<Failure>, Option<LabError>);

/// Runs `one` for each method in turn, `prepare` before each: a method whose `one` fails
/// is kept as a [`Failure`] with its reason and the next one runs. A failed `prepare`, or
/// an interrupt from either, ends the run: that method and the ones after it are kept as
/// not run, and the error is given back.
fn each(
    methods: &[Method],
    mut prepare: impl FnMut() -> Result<()>,
    mut one: impl FnMut(Method) -> Result<Outcome>,
    on_turn: &mut impl FnMut(Turn<'_>),
) -> Ran {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for (i, &m) in methods.iter().enumerate() {
        let err = match prepare().map(|()| one(m)) {
            Ok(Ok(o)) => {
                on_turn(Turn::Done(&o));
                done.push(o);
                continue;
            }
            Ok(Err(e)) if !matches!(e, LabError::Interrupted) => {
                fail(&mut failed, on_turn, m, e.to_string());
                continue;
            }
            Ok(Err(e)) | Err(e) => e,
        };
        for &method in &methods[i..] {
            fail(&mut failed, on_turn, method, format!("not run: {err}"));
        }
        return (done, failed, Some(err));
    }
    (done, failed, None)
}

/// Keeps `method`'s failure and shows it to `on_turn`.
fn fail(
    failed: &mut Vec<Failure>,
    on_turn: &mut impl FnMut(Turn<'_>),
    method: Method,
    reason: String,
) {
    let f = Failure { method, reason };
    on_turn(Turn::Failed(&f));
    failed.push(f);
}

/// One method's launch on nodes made fresh, with the CPU and traffic it cost.
fn one(lab: &Lab, l: &Launch, m: Method, carry: &mut Carry) -> Result<Outcome> {
    let before = Spent::now(lab);
    // What learning from this run cost: urgent-learned's, which it prepares; and the
    // job's traffic, read before learning releases it.
    let mut learning = Spent::default();
    let mut traffic = None;
    let out_before = crate::image::sources_out(lab)?;
    let mut o = match m {
        Method::UrgentFirst | Method::DemandOnly => {
            let demand = m == Method::DemandOnly;
            let stream = if demand { "none" } else { "all" };
            let o = if demand {
                push_options(l, "login", "topo", stream)
            } else {
                default_options(l)
            };
            let run = on_mount(lab, l, o)?;
            if carry.wants_learning && (!demand || carry.learned.is_none()) {
                let got = learn(lab, &run.push.report.job, &l.index);
                if let Ok(g) = &got {
                    (learning, traffic) = (g.cost, g.traffic);
                }
                carry.learned = Some((m, got));
            }
            let detail = if demand {
                "every read through the tree".to_string()
            } else {
                format!(
                    "the default: the rest held while applications were active in the last {:.1} s (at most {:.0} s)",
                    l.bulk_quiet.as_secs_f64(),
                    l.bulk_after.as_secs_f64()
                )
            };
            let o = teesfs_outcome(m, &run, &detail);
            if !demand {
                carry.urgent_first = Some(run);
            }
            o
        }
        Method::Eager => {
            let mut o = push_options(l, "login", "topo", "all");
            o.extra.extend(["--bulk-after", "0s"].map(String::from));
            let run = on_mount(lab, l, o)?;
            teesfs_outcome(m, &run, "the rest streamed at once")
        }
        Method::UrgentOnly => {
            let run = on_mount(lab, l, push_options(l, "login", "topo", "urgent"))?;
            teesfs_outcome(m, &run, "the rest only on demand")
        }
        Method::CopyFirst => {
            let (o, local) = copy_first(lab, l)?;
            carry.local_s = Some(local);
            o
        }
        Method::SharedStorage => {
            let run = on_mount(lab, l, push_options(l, "storage", "flat", "none"))?;
            teesfs_outcome(m, &run, "every read from the storage node")
        }
        Method::Sbcast => sbcast_untar(lab, l)?,
        Method::Learned => urgent_learned(lab, l, carry.learned.take())?,
        m => crate::image::run(lab, l, m)?,
    };
    let spent = before.until(lab);
    o.cpu_s += spent.cpu_s - learning.cpu_s;
    o.throttled_s = sum(o.throttled_s, spent.throttled_s).map(|t| t - learning.throttled());
    o.traffic = traffic.or_else(|| o.job.as_deref().and_then(|j| traffic_of(lab, j)));
    o.source_out_bytes = crate::image::sources_out(lab)?.saturating_sub(out_before);
    Ok(o)
}

/// CPU a step used: the lab's CPU seconds ([`Lab::cpu_seconds`]) and the compute nodes'
/// time held by their quotas ([`crate::cgroup::NodeCgroups::throttled_s`], `None` pooled).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Spent {
    cpu_s: f64,
    throttled_s: Option<f64>,
}

impl Spent {
    /// The counters now.
    fn now(lab: &Lab) -> Self {
        Self {
            cpu_s: lab.cpu_seconds(),
            throttled_s: lab.throttled_s(),
        }
    }

    /// What was spent from `self` until now.
    fn until(self, lab: &Lab) -> Self {
        let now = Self::now(lab);
        Self {
            cpu_s: now.cpu_s - self.cpu_s,
            throttled_s: now.throttled_s.zip(self.throttled_s).map(|(a, b)| a - b),
        }
    }

    fn throttled(self) -> f64 {
        self.throttled_s.unwrap_or(0.0)
    }
}

/// `job`'s traffic on the nodes, or `None` (said in the log) when a node cannot tell.
fn traffic_of(lab: &Lab, job: &str) -> Option<Traffic> {
    crate::traffic::of_job(lab, job)
        .map_err(|e| tracing::warn!("the traffic of job {job} is not known: {e}"))
        .ok()
}

/// The sum of two optional figures; `None` when neither is known.
fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// The urgent-learned run: a second job of the layer, pushed by default with no urgent
/// globs, which must pick up the list `learned` from the earlier run.
fn urgent_learned(
    lab: &Lab,
    l: &Launch,
    learned: Option<(Method, Result<Learned>)>,
) -> Result<Outcome> {
    let (from, list) = learned.ok_or_else(|| {
        LabError::Shape(
            "urgent-learned learns from an urgent-first or demand-only run of the \
             same launch: list one of them before it"
                .into(),
        )
    })?;
    let learned = list?;
    // A second job of the layer: no urgent globs, the default push.
    let mut again = l.clone();
    again.urgent.clear();
    let mut o = default_options(&again);
    o.extra.retain(|a| a != "--no-learned");
    let run = on_mount(lab, &again, o)?;
    let pushed = run.push.report.learned_files;
    if pushed == 0 {
        return Err(LabError::Shape(format!(
            "urgent-learned: the push did not pick up the list learned in {} ({})",
            from.name(),
            learned.said.trim()
        )));
    }
    let mut o = teesfs_outcome(
        Method::Learned,
        &run,
        &format!(
            "{} files learned from {} nodes in {}, {pushed} pushed first with nothing given",
            learned.files,
            learned.nodes,
            from.name()
        ),
    );
    // The epilogs' release and `teesfs learn` belong to this method, not the one learned
    // from.
    o.cpu_s += learned.cost.cpu_s;
    o.throttled_s = learned.cost.throttled_s;
    Ok(o)
}

/// What `teesfs learn` merged from the nodes' records of a job.
#[derive(Debug, Clone, PartialEq)]
struct Learned {
    /// Files in the merged list.
    files: usize,
    /// Nodes whose records were merged.
    nodes: usize,
    /// What `learn` printed.
    said: String,
    /// What the releases and `learn` cost.
    cost: Spent,
    /// The job's traffic, read before the releases.
    traffic: Option<Traffic>,
}

/// The job's end as on a Slurm cluster ([`Lab::learn`]): every node releases `job`, then
/// `teesfs learn` on the login node keeps the merged record beside `index`.
fn learn(lab: &Lab, job: &str, index: &str) -> Result<Learned> {
    let before = Spent::now(lab);
    let traffic = traffic_of(lab, job);
    let said = lab.learn(job, index)?;
    let mut got = parse_learned(&said)
        .ok_or_else(|| LabError::Shape(format!("cannot read what `teesfs learn` said: {said}")))?;
    got.cost = before.until(lab);
    got.traffic = traffic;
    Ok(got)
}

/// Reads `learned N files and K names that exist nowhere from M of T nodes of job ...`.
fn parse_learned(said: &str) -> Option<Learned> {
    let line = said.lines().find(|l| l.starts_with("learned "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let files = words.get(1)?.parse().ok()?;
    let from = words.iter().position(|w| *w == "from")?;
    let nodes = words.get(from + 1)?.parse().ok()?;
    Some(Learned {
        files,
        nodes,
        said: said.to_string(),
        cost: Spent::default(),
        traffic: None,
    })
}

/// How long a launch's push may take before the method fails. A safety net, not a goal:
/// the scale model stretches a big image's push far beyond the default 5 minutes (32
/// nodes of 0.05 cores receiving a 1.2 GB image, with the rest held back for up to
/// `--bulk-after` while the applications start, passed 5 minutes).
const LAUNCH_PUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// A push of `l` from `root` with `strategy` that streams `stream` (`all`, `urgent` or
/// `none`); what it does not stream it serves on demand until the launch stops it.
fn push_options(l: &Launch, root: &str, strategy: &str, stream: &str) -> PushOptions {
    let mut o = PushOptions::new(&l.index);
    o.timeout = LAUNCH_PUSH_TIMEOUT;
    o.root = root.into();
    o.strategy = strategy.into();
    // 32 applications starting at once on a small machine can starve a daemon's heartbeat
    // for seconds; that is CPU contention of the emulation, not a failed node. A method
    // measures a layer's first launch: what an earlier run learned is not used (only
    // urgent-learned drops the flag).
    o.extra = vec!["--deadline".into(), "30s".into(), "--no-learned".into()];
    if stream != "none" {
        o.urgent = l.urgent.clone();
    }
    if stream != "all" {
        o.extra
            .extend(["--stream", stream, "--serve", "1h"].map(String::from));
        o.stop = Some(Arc::new(AtomicBool::new(false)));
    }
    o
}

/// The push users get (urgent-first, the hysteretic set held back while applications
/// start), with the launch's hold.
fn default_options(l: &Launch) -> PushOptions {
    let mut o = push_options(l, "login", "topo", "all");
    o.extra.extend([
        "--bulk-after".into(),
        format!("{}ms", l.bulk_after.as_millis()),
        "--bulk-quiet".into(),
        format!("{}ms", l.bulk_quiet.as_millis()),
    ]);
    o
}

fn on_mount(lab: &Lab, l: &Launch, o: PushOptions) -> Result<DemoRun> {
    demo::run(lab, &o, &l.app, &l.probe)
}

fn teesfs_outcome(method: Method, run: &DemoRun, detail: &str) -> Outcome {
    let r = &run.push.report;
    Outcome {
        method,
        app_s: max_done(&run.apps),
        urgent_s: r.urgent_complete_s.filter(|_| method.streams()),
        all_s: r.all_complete_s.filter(|_| method.streams()),
        ok: run.apps.iter().filter(|x| x.ok).count(),
        nodes: run.apps.len(),
        uplink_in_bytes: run.push.uplink_in(),
        source_out_bytes: 0,
        mounted_s: Some(run.apps.iter().map(|x| x.started_s).fold(0.0, f64::max)),
        push_wall_s: r.all_complete_s.map(|all| (run.push.wall_s, all)),
        cpu_s: 0.0,
        app_cpu_s: apps_cpu(&run.apps),
        detail: detail.into(),
        last: last_node(&run.apps),
        throttled_s: None,
        job: Some(r.job.clone()),
        traffic: None,
        rounds: Vec::new(),
        node_starts: node_starts(&run.apps),
    }
}

/// The whole layer by teesfs, then the application everywhere from local data; also
/// returns that start alone (the local reference).
///
/// The push keeps the urgent set, as the default's does: it changes only the order the
/// layer arrives in, not when the last byte does, and it makes the nodes' passthrough
/// copies ahead of the application's files, as the default's push makes them. Without
/// one a node makes a copy ahead of every file of the layer: the realistic layer's 545 MB
/// on each of 32 nodes, beside their stores, which filled this machine's 24 GiB of memory
/// (BENCHMARKS.md, 2026-12-06), where the application opens 225 MB of it.
fn copy_first(lab: &Lab, l: &Launch) -> Result<(Outcome, f64)> {
    let o = push_options(l, "login", "topo", "all");
    let t0 = Instant::now();
    let push = lab.push(&o)?;
    let copied = t0.elapsed().as_secs_f64();
    let apps = demo::run_warm(lab, &push.report.job, &l.app)?;
    let local = max_done(&apps);
    let out = Outcome {
        method: Method::CopyFirst,
        app_s: copied + local,
        urgent_s: None,
        all_s: Some(copied),
        ok: apps.iter().filter(|x| x.ok).count(),
        nodes: apps.len(),
        uplink_in_bytes: push.uplink_in(),
        source_out_bytes: 0,
        mounted_s: None,
        push_wall_s: push.report.all_complete_s.map(|all| (push.wall_s, all)),
        cpu_s: 0.0,
        app_cpu_s: apps_cpu(&apps),
        detail: format!("copy {copied:.2} s, then start {local:.2} s"),
        last: last_node(&apps),
        throttled_s: None,
        job: Some(push.report.job.clone()),
        traffic: None,
        rounds: Vec::new(),
        node_starts: node_starts(&apps),
    };
    Ok((out, local))
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;

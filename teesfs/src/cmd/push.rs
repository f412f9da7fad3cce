//! `teesfs push`: plan the tree for a job, act as its root, and report.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use peertree::Strategy;
use peertree::relay::{BulkHold, JobId, Phase, Timing};
use seeder::DirStore;
use teesfs_node::handover::{self, Background, Handover};
use teesfs_node::push::{Outcome, PushSpec, push, report};
use teesfs_node::report::{FailureKind, PushReport};

use super::jobspec::{JobArgs, RootArgs, RootContact};
use super::util;

/// How long a push holds the rest of the layer back by default (`--bulk-after`).
pub const DEFAULT_BULK_AFTER: Duration = Duration::from_secs(120);
/// How quiet the nodes must be for the held rest to flow by default (`--bulk-quiet`).
pub const DEFAULT_BULK_QUIET: Duration = Duration::from_secs(2);
/// How long a push waits for the nodes without a site's `[push] timeout` (`--timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// What to wait for before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// Every node holds the urgent set.
    Urgent,
    /// Every node holds the whole layer.
    All,
}

/// What the tree streams to every node ahead of use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stream {
    /// The whole layer, urgent set first.
    All,
    /// Only the urgent set; the rest is fetched through the tree by the nodes that read it.
    Urgent,
    /// Nothing: every node fetches what it reads through the tree (as Copper does).
    None,
}

/// Arguments of `teesfs push`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  # Slurm job 1234's 128 nodes, racks of 8, the urgent set awaited, the rest in the background
  teesfs push --store /shared/teesfs --index 3a6a --nodes 'cn[0001-0128]' \\
      --cluster 'cn[0001-1024]' --group-size 8 --login login1 --job 1234 --owner 4242
  # wait for the whole layer and keep the report for a script
  teesfs push --store /shared/teesfs --index 3a6a --nodes 'cn[01-32]' --wait all \\
      --format json > push.json
  # spare the login node's uplink: cap the root's bulk rate, let nodes fetch the rest on demand
  teesfs push --store /shared/teesfs --index 3a6a --nodes 'cn[01-32]' --rate-limit 200MiB \\
      --stream urgent

The site configuration (teesfs.toml(5)) gives the defaults of the Topology and Network flags
and of --timeout ([push] timeout);
--index takes a tag (`teesfs publish --tag`) or at least 4 hex characters of an index id
(`teesfs inspect --store DIR` lists both). Exit status 0 when every node holds what --wait asked for, 1 otherwise.")]
pub struct PushArgs {
    /// The store holding the published layer.
    #[arg(help_heading = "Job", long, value_name = "DIR")]
    pub store: PathBuf,
    /// A tag, or at least 4 hex characters of the index id.
    #[arg(help_heading = "Job", long, value_name = "TAG|ID")]
    pub index: String,
    #[command(flatten, next_help_heading = "Topology")]
    pub job: JobArgs,
    #[command(flatten, next_help_heading = "Network")]
    pub root: RootArgs,
    /// Return once every node holds the urgent set (the rest keeps streaming from a
    /// background copy of this command), or once every node holds the whole layer.
    #[arg(help_heading = "Timing", long, value_enum, default_value_t = Wait::All)]
    pub wait: Wait,
    /// What the tree streams to every node ahead of use. With `urgent` or `none`, what is
    /// not streamed is fetched on demand through the tree, from this command while it keeps
    /// serving (`--serve`).
    #[arg(help_heading = "Timing", long, value_enum, default_value_t = Stream::All)]
    pub stream: Stream,
    /// With `--stream urgent` or `none`: how long to keep serving the nodes' demand once
    /// the wait is over (the job's time limit; SIGTERM or Ctrl-C ends it sooner and
    /// finishes the job on every node).
    #[arg(help_heading = "Timing", long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub serve: Option<Duration>,
    /// Hold the rest of the layer (the hysteretic set) back after the urgent set is on
    /// every node, at most this long: applications starting then fetch what else they
    /// read on demand, without bulk traffic competing for their node's links and CPU (see
    /// --bulk-quiet). Default: 2m with `--wait urgent` (the job starts when this command
    /// returns; two minutes outlast the start of a large Python stack), none with
    /// `--wait all` (nothing starts before the whole layer is there). In the scale-model
    /// lab the demo's application started soonest this way of every method, in three runs
    /// (BENCHMARKS.md, issue 28).
    /// `0s` streams the rest at once. A push without an urgent set never holds.
    #[arg(help_heading = "Timing", long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub bulk_after: Option<Duration>,
    /// Within the hold, let the rest flow once the job's applications, having shown
    /// themselves after the urgent set was everywhere (files opened or looked up in the
    /// nodes' mounts, reads fetched on demand), sent no sign to this command for this
    /// long. New signs pause it again until the hold is over. Keep it above the heartbeat
    /// times the tree's depth (the nodes' reports carry the signs).
    #[arg(help_heading = "Timing", long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub bulk_quiet: Duration,
    /// Also write the report as JSON to FILE (the document of --format json).
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Also write the report as an HTML page (what `teesfs report` draws from the JSON):
    /// the tree by group, arrivals over time, failures in red.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    pub report_html: Option<PathBuf>,
    /// What to print on stdout: `text`, or `json`: the report, `{"version": 1, "job",
    /// "index", "strategy", "root", "nodes", "urgent_chunks", "chunks", "urgent_bytes",
    /// "total_bytes", "streamed_bytes", "urgent_complete_s", "all_complete_s", "per_node":
    /// [{"host", "parent", "urgent_s", "all_s"}], "edges": [{"parent", "child", "bytes"}],
    /// "uplinks": [{"group", "proxy", "in_bytes", "out_bytes"}], "failures": [{"kind",
    /// "parent", "child", "at_s", "reason"}], "rates": {"source", "node", "port", "uplink",
    /// "login", "pushes", "learned_at"}}` (times in seconds since the push started;
    /// teesfs_node::report::PushReport). Progress and notes go to stderr.
    #[arg(help_heading = "Output", long, value_enum, default_value_t = util::Format::Text)]
    pub format: util::Format,
    /// Extra urgent paths (glob over layer paths, e.g. 'bin/*', 'lib/python3*/site.py').
    #[arg(help_heading = "Job", long, value_name = "GLOB")]
    pub urgent: Vec<String>,
    /// Ignore the index's learned urgent list. By default, the files the layer's last job
    /// was seen to use on its nodes (`teesfs learn`, the Slurm EpilogSlurmctld; kept in
    /// STORE/learned/<index id>.list) are pushed first, ahead of the index's own urgent
    /// list: a hint only, every chunk is still verified, and an unusable list is named in a
    /// warning and ignored.
    #[arg(help_heading = "Job", long)]
    pub no_learned: bool,
    /// Heartbeat interval between peers.
    #[arg(help_heading = "Timing", long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub heartbeat: Duration,
    /// A peer silent this long is declared failed.
    #[arg(help_heading = "Timing", long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub deadline: Duration,
    /// Give up waiting after this long (default: the site's `[push] timeout`, else 30m). A
    /// chunk the store cannot deliver, and a node that refuses the job or cannot keep its
    /// chunks, end the push at once instead.
    #[arg(help_heading = "Timing", long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Trusted publisher key(s) to check the index before sending it.
    #[arg(help_heading = "Job", long, value_name = "FILE.pub")]
    pub trust: Vec<PathBuf>,
    /// Cap on the root's bulk bytes per second to each child, to spare the login node's
    /// uplink (demand traffic is never capped). With link rates in the topology
    /// (`[links]`), every stream is already paced at its share of its sender's link; this
    /// caps the root's streams further.
    #[arg(help_heading = "Network", long, value_name = "SIZE", value_parser = util::parse_size)]
    pub rate_limit: Option<u64>,
    /// No progress bar.
    #[arg(help_heading = "Output", long, short)]
    pub quiet: bool,
    /// The job id: the Slurm job id in decimal (e.g. $SLURM_JOB_ID, as the Slurm prolog
    /// passes it; also 16 hex digits or hex with 0x), so nodes mount the layer at
    /// /run/teesfs/jobs/<id> (decimal; 16 hex digits for a fresh id), where `teesfs run`, `status` and `release`
    /// find it from $SLURM_JOB_ID. Default: a fresh random id. (--job-id is the old name.)
    #[arg(
        help_heading = "Job",
        long = "job",
        visible_alias = "job-id",
        value_name = "ID"
    )]
    pub job_id: Option<JobId>,
    /// The user the job belongs to on the nodes (a uid, e.g. $SLURM_JOB_UID in the Slurm
    /// prolog): only they (and root) may enter its mount, query or stop it. Default: you,
    /// unless you are root (then root only).
    #[arg(help_heading = "Job", long, value_name = "UID")]
    pub owner: Option<u32>,
    /// When the push fails because of some of its nodes, write those to FILE, one a line:
    /// the host, a tab, and the reason to drain it with (`teesfs: login -> n05: no daemon
    /// (connection refused)`). The Slurm prolog drains them, so that Slurm requeues the job
    /// onto healthy nodes. Nothing is written when the root or the job is at fault. With
    /// this flag (the prolog's push, whose job does not start if it fails) a push that
    /// fails, or is stopped by SIGTERM or SIGINT, before the job starts releases the job on
    /// every node the tree reaches (as `teesfs release` there would), so the failed start
    /// leaves no mount behind; it does not go on streaming in the background either.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    pub drain_list: Option<PathBuf>,
}

impl PushArgs {
    /// How the rest of the layer is held back (`--bulk-after`, `--bulk-quiet`): by
    /// default only when this command returns before the whole layer is everywhere.
    pub fn bulk_hold(&self) -> Option<BulkHold> {
        let max = self.bulk_after.unwrap_or(match self.wait {
            Wait::Urgent => DEFAULT_BULK_AFTER,
            Wait::All => Duration::ZERO,
        });
        (!max.is_zero()).then_some(BulkHold {
            max,
            quiet: Some(self.bulk_quiet),
        })
    }
}

/// The phase a push waits for.
fn phase_of(wait: Wait) -> Phase {
    match wait {
        Wait::Urgent => Phase::Urgent,
        Wait::All => Phase::All,
    }
}

/// Runs `teesfs push`.
pub fn run(mut args: PushArgs) -> anyhow::Result<()> {
    if args.job.rates_store.is_none() {
        args.job.rates_store = Some(args.store.clone());
    }
    // Held shared for the whole push (and by a background copy for its own), so that gc
    // does not remove the index or chunks the nodes are still fetching.
    let store = DirStore::open(&args.store)?.locked_for_reading()?;
    let (index_id, signed_bytes, index) =
        util::open_trusted_index(&store, &args.index, &args.trust, util::Expired::Refuse)
            .context("nodes would refuse it")?;
    args.job.mean_chunk = index.mean_stored_chunk();
    let (nodes, topology, mut plan) = args.job.plan()?;
    let rates = args.job.rates_used(&nodes)?;
    let job = match args.job_id {
        Some(id) => id,
        None => teesfs_node::fresh_job_id(&index_id.0),
    };
    let serving = handover::serving().is_some();
    // The process that carries the push out holds the proxies it borrows (a foreground
    // that hands off to a background copy only shows the plan).
    let _hold = if args.job.borrow_idle && (serving || args.wait == Wait::All) {
        Some(hold_borrowed(&args.job, &mut plan, &job.to_string())?)
    } else {
        None
    };
    let shared = shared_store(&plan, &args.job)?;
    if shared.is_some() {
        // Nodes read from the file system: the root only tells each node to start.
        plan = plan.flat_without_storage();
    }
    let hint = if args.no_learned {
        Vec::new()
    } else {
        learned_hint(&store, &index_id, &index)
    };
    let order = streamed(
        push_order(&index, &hint, &args.urgent)?,
        args.stream,
        args.serve,
    )?;
    let RootContact {
        nodes,
        identity,
        advertise,
    } = args.root.contact(&plan, &args.job.login)?;
    let index = Arc::new(index);
    let spec = PushSpec {
        job,
        nodes,
        signed_index: signed_bytes,
        index: index.clone(),
        index_id,
        store,
        order: order.clone(),
        timing: Timing {
            heartbeat_ms: args.heartbeat.as_millis().clamp(10, u32::MAX as u128) as u32,
            deadline_ms: args.deadline.as_millis().clamp(50, u32::MAX as u128) as u32,
        },
        identity,
        listen: args.root.listen,
        shared_store: shared,
        advertise,
        rate_limit: args.rate_limit,
        owner: args.owner.or_else(|| {
            let me = nix::unistd::getuid();
            (!me.is_root()).then(|| me.as_raw())
        }),
        serve: args.serve,
        bulk_hold: args.bulk_hold(),
        // The prolog's push: the job starts when the push returns (a background copy's
        // foreground returns at the urgent set).
        release: args.drain_list.as_ref().map(|_| phase_of(args.wait)),
    };
    let n = plan.len() - 1;
    let bar = progress_bar(args.quiet, n);
    let wait = phase_of(args.wait);
    errln!(
        "pushing index {} to {n} nodes ({} plan, depth {}, job {job})",
        index_id.short(),
        plan.strategy,
        plan.depth()
    );
    errln!("link rates: {}", rates.describe());
    if wait == Phase::Urgent && !serving {
        // Return at the urgent set while a background copy of this command keeps
        // streaming the hysteretic set.
        return hand_off(&args, &bar);
    }
    let wait = if serving { Phase::All } else { wait };
    let report_of = |o: &Outcome| {
        let mut r = report(&plan, Some(&topology), job, index_id, &index, &order, o);
        r.learned_files = hint.len();
        r.rates = Some(rates.clone());
        r
    };
    let outcome = carry_out(spec, wait, args.timeout, &bar, serving, &report_of)?;
    if outcome.released {
        errln!("teesfs: released job {job} on every node the push reached");
    }
    if outcome.stopped && !outcome.failed() {
        bail!("stopped by a signal before the push completed");
    }
    finish(&args, &report_of(&outcome), outcome.timed_out, serving)
}

/// Carries the push out on a runtime of its own until `wait` (or `timeout`), the bar
/// following its progress; a background copy (`serving`) hands its report over once the
/// urgent set is everywhere, and goes on.
fn carry_out(
    spec: PushSpec,
    wait: Phase,
    timeout: Duration,
    bar: &ProgressBar,
    serving: bool,
    report_of: &dyn Fn(&Outcome) -> PushReport,
) -> anyhow::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut urgent_sent = false;
    // Every line the root logs names the job (the Slurm id under Slurm).
    let span = tracing::info_span!("push", job = %spec.job);
    let outcome = rt.block_on(tracing::Instrument::instrument(
        push(spec, wait, timeout, |p, so_far| {
            bar.set_position(p.urgent as u64);
            bar.set_message(format!(
                "urgent, {} complete, {} failed, {} sent",
                p.all,
                p.failed,
                util::bytes(p.bytes_out)
            ));
            if serving && !urgent_sent && so_far.urgent_s.is_some() {
                urgent_sent = true;
                Handover::Urgent(report_of(so_far)).emit();
            }
        }),
        span,
    ))?;
    bar.finish_and_clear();
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(outcome)
}

/// Shows or hands over the final report, writes `--report`, and fails when nodes did.
fn finish(args: &PushArgs, rep: &PushReport, timed_out: bool, serving: bool) -> anyhow::Result<()> {
    if serving {
        Handover::Done(rep.clone()).emit();
    } else {
        show_report(args, rep)?;
    }
    write_report(args, rep);
    super::rates::fold(&args.store, rep);
    if let Some(e) = failed(rep) {
        write_drain_list(args, rep);
        return Err(e);
    }
    if timed_out {
        bail!("timed out after {}", util::duration(args.timeout));
    }
    // A background copy that completed leaves no log behind (a failed one keeps it).
    handover::completed();
    Ok(())
}

/// Why the push failed, if it did: the root's store (named with its chunks and what to do)
/// before the nodes.
fn failed(rep: &PushReport) -> Option<anyhow::Error> {
    if let Some(why) = rep
        .failures
        .iter()
        .find(|f| f.kind == FailureKind::Store)
        .and_then(|f| f.reason.as_deref())
    {
        return Some(anyhow::anyhow!("{why}"));
    }
    (!rep.failures.is_empty()).then(|| {
        anyhow::anyhow!(
            "{} node(s) failed; see the report above",
            rep.failures.len()
        )
    })
}

/// The shared store nodes read from when the plan is `storage`.
fn shared_store(
    plan: &peertree::Plan,
    job: &super::jobspec::JobArgs,
) -> anyhow::Result<Option<String>> {
    Ok(match (plan.strategy, &job.shared_store) {
        (Strategy::Storage, Some(p)) => Some(p.display().to_string()),
        (Strategy::Storage, None) => bail!(
            "the plan is `storage` (shared storage): pass --shared-store DIR, the store's path as \
             the nodes see it, or pick a tree strategy (--strategy topo, or --threshold 0)"
        ),
        _ => None,
    })
}

/// The push's progress bar over `n` nodes (hidden with `--quiet` or without a terminal).
fn progress_bar(quiet: bool, n: usize) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    ProgressBar::new(n as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:30}] {pos}/{len} nodes {msg}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    )
}

/// Holds the proxies `plan` borrows (drained in Slurm until the push ends). A node a job took
/// between `sinfo` and the drain is given back at once and the plan is made again without
/// it.
fn hold_borrowed(
    job: &super::jobspec::JobArgs,
    plan: &mut peertree::Plan,
    label: &str,
) -> anyhow::Result<super::borrow::Hold> {
    let mut busy = std::collections::HashSet::new();
    for _ in 0..3 {
        let borrowed: Vec<String> = plan
            .borrowed
            .iter()
            .map(|&id| plan.host(id).to_string())
            .collect();
        let (hold, lost) = super::borrow::Hold::take(&borrowed, label)?;
        if lost.is_empty() {
            if !hold.nodes().is_empty() {
                errln!(
                    "borrowing idle proxies {} (drained in Slurm until the push ends)",
                    hold.nodes().join(",")
                );
            }
            return Ok(hold);
        }
        drop(hold);
        busy.extend(lost);
        *plan = job.plan_without(&busy)?;
    }
    bail!(
        "the idle nodes kept being taken by jobs while borrowing them; push again, or without --borrow-idle"
    )
}

/// Runs this same command again in the background with the whole layer as its goal, shows
/// its progress, and returns once it reports the urgent set everywhere.
fn hand_off(args: &PushArgs, bar: &ProgressBar) -> anyhow::Result<()> {
    let mut bg = Background::spawn()?;
    let first = bg.first();
    bar.finish_and_clear();
    let first = first?;
    let rep = first.report();
    show_report(args, rep)?;
    write_report(args, rep);
    if let Handover::Urgent(_) = first {
        errln!(
            "the rest of the layer keeps streaming in the background (pid {}, log {}, \
             removed when it completes); nodes fetch anything they need first on demand",
            bg.pid(),
            bg.log().display()
        );
    }
    if let Some(e) = failed(rep) {
        if args.drain_list.is_some() {
            // The prolog's push: the job will not start on these nodes. The copy saw the
            // same failure and releases the job on every node it reaches, then ends; the
            // prolog returns after that, so Slurm's next start of the job (the same id)
            // meets no half-released nodes.
            let pid = bg.pid();
            if bg.ended_within(RELEASE_BOUND) {
                errln!("teesfs: the push released the job on every node it reached");
            } else {
                errln!(
                    "teesfs: the background push (pid {pid}) did not end within {}; stopping it",
                    util::duration(RELEASE_BOUND)
                );
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        write_drain_list(args, rep);
        return Err(e);
    }
    Ok(())
}

/// How long a failed prolog's push waits for its background copy to release the job on the
/// nodes and end: the release's own bound and the drain of the root's last messages, twice.
const RELEASE_BOUND: Duration = Duration::from_secs(10);

/// Writes `--drain-list`: the nodes the push failed because of, with why
/// ([`pushreport::nodes_to_drain`]); best-effort, as the report.
fn write_drain_list(args: &PushArgs, rep: &PushReport) {
    let Some(path) = &args.drain_list else {
        return;
    };
    let drains = pushreport::nodes_to_drain(rep);
    let text: String = drains
        .iter()
        .map(|d| format!("{}\t{}\n", d.host, d.reason))
        .collect();
    if let Err(e) = std::fs::write(path, text) {
        errln!(
            "teesfs: warning: the drain list {} was not written: {e}",
            path.display()
        );
    }
}

/// Writes `--report` and `--report-html`, best-effort: the layer is delivered whether or
/// not its report can be written (a full log directory warns, it does not fail the job).
fn write_report(args: &PushArgs, rep: &PushReport) {
    let warn = |path: &std::path::Path, e: anyhow::Error| {
        errln!(
            "teesfs: warning: the report {} was not written: {e:#}",
            path.display()
        );
    };
    if let Some(path) = &args.report {
        let written = serde_json::to_vec_pretty(rep)
            .map_err(anyhow::Error::from)
            .and_then(|json| super::outfile::write(path, &json));
        if let Err(e) = written {
            warn(path, e);
        }
    }
    if let Some(path) = &args.report_html
        && let Err(e) = super::report::write_html(path, rep)
    {
        warn(path, e);
    }
}

/// The part of the push order that `stream` streams; the rest is left to demand, which
/// needs the root to keep serving (`serve`).
fn streamed(
    (mut order, urgent): (Vec<u32>, usize),
    stream: Stream,
    serve: Option<Duration>,
) -> anyhow::Result<(Vec<u32>, usize)> {
    let keep = match stream {
        Stream::All => order.len(),
        Stream::Urgent => urgent,
        Stream::None => 0,
    };
    if stream == Stream::All && serve.is_some() {
        bail!("--serve applies only with --stream urgent or none");
    }
    if keep < order.len() && serve.is_none() {
        let name = clap::ValueEnum::to_possible_value(&stream)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        bail!(
            "--stream {name} leaves {} of the layer's {} chunks on this node only: say how long \
             to serve them on demand with --serve (the job's time limit, e.g. --serve 2h), or \
             stream everything (--stream all)",
            order.len() - keep,
            order.len()
        );
    }
    order.truncate(keep);
    Ok((order, urgent.min(keep)))
}

/// The entries of the index's learned urgent list (`teesfs learn`), in its order; none when
/// there is no list. An unusable list is warned about and ignored: it is a hint, and a push
/// must not fail for it.
fn learned_hint(
    store: &DirStore,
    id: &manifest::IndexId,
    index: &manifest::Index,
) -> Vec<manifest::EntryIdx> {
    let list = match seeder::learned::read_learned(store, id) {
        Ok(Some(l)) => l,
        Ok(None) => return Vec::new(),
        Err(e) => {
            tracing::warn!("{e}; pushing without it");
            return Vec::new();
        }
    };
    let (hint, unknown) = manifest::entries_named(index, &list.files);
    if unknown > 0 {
        tracing::warn!(
            unknown,
            "the learned urgent list names files the index does not have; they are skipped"
        );
    }
    errln!(
        "pushing first the {} files earlier jobs of this index used ({}; --no-learned ignores it)",
        hint.len(),
        seeder::learned::learned_path(store, id).display()
    );
    hint
}

/// The order chunks are pushed in: the learned `hint`, the index's urgent set, and the
/// files `--urgent` globs match, first.
fn push_order(
    index: &manifest::Index,
    hint: &[manifest::EntryIdx],
    urgent: &[String],
) -> anyhow::Result<(Vec<u32>, usize)> {
    let globs = build_globs(urgent)?;
    Ok(manifest::push_order_hinted(index, hint, &|p: &[u8]| {
        globs
            .as_ref()
            .is_some_and(|g| g.is_match(String::from_utf8_lossy(p).as_ref()))
    }))
}

fn build_globs(patterns: &[String]) -> anyhow::Result<Option<globset::GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = globset::GlobSetBuilder::new();
    for p in patterns {
        b.add(
            globset::Glob::new(p.trim_start_matches('/'))
                .with_context(|| format!("bad urgent glob {p:?}"))?,
        );
    }
    Ok(Some(b.build()?))
}

/// Prints the report on stdout as `--format` asks.
fn show_report(args: &PushArgs, rep: &PushReport) -> anyhow::Result<()> {
    match args.format {
        util::Format::Text => print_report(rep),
        util::Format::Json => util::print_json(rep)?,
    }
    Ok(())
}

fn print_report(r: &PushReport) {
    let secs = |s: Option<f64>| s.map_or("not reached".to_string(), |s| format!("{s:.2} s"));
    outln!("job {} index {}", r.job, &r.index[..12]);
    // With failures, "all" is every node reached: say how many that was.
    let lost: std::collections::HashSet<&str> = r
        .failures
        .iter()
        .filter(|f| f.kind != FailureKind::Store)
        .map(|f| f.child.as_str())
        .collect();
    let on = if lost.is_empty() {
        "on all nodes".to_owned()
    } else {
        let n = r.per_node.len();
        format!(
            "on the {} of {n} nodes reached",
            n.saturating_sub(lost.len())
        )
    };
    outln!(
        "  urgent set ({} chunks, {}) {on}: {}",
        r.urgent_chunks,
        util::bytes(r.urgent_bytes),
        secs(r.urgent_complete_s)
    );
    outln!(
        "  whole layer ({} chunks, {}) {on}: {}",
        r.chunks,
        util::bytes(r.total_bytes),
        secs(r.all_complete_s)
    );
    let mut urgent: Vec<f64> = r.per_node.iter().filter_map(|n| n.urgent_s).collect();
    urgent.sort_by(f64::total_cmp);
    if let (Some(first), Some(last)) = (urgent.first(), urgent.last()) {
        outln!(
            "  per node, urgent set: first {first:.2} s, median {:.2} s, last {last:.2} s",
            urgent[urgent.len() / 2]
        );
    }
    if let Some(rates) = &r.rates {
        outln!("  link rates: {}", rates.describe());
    }
    if !r.uplinks.is_empty() {
        let total_in = r.predicted_uplink_in();
        outln!(
            "  group uplinks: {} in over {} groups (minimum {})",
            util::bytes(total_in),
            r.uplinks.len(),
            util::bytes(r.total_bytes * r.uplinks.len() as u64)
        );
    }
    for f in &r.failures {
        match &f.reason {
            Some(why) if f.kind == FailureKind::Store => {
                outln!("  STORE FAILED at {:.2} s: {why}", f.at_s)
            }
            Some(why) if f.kind == FailureKind::Refused => {
                outln!("  REFUSED by {} at {:.2} s: {why}", f.child, f.at_s)
            }
            Some(why) => outln!(
                "  FAILED ({}) {} -> {} at {:.2} s: {why}",
                f.kind,
                f.parent,
                f.child,
                f.at_s
            ),
            None => outln!(
                "  FAILED ({}) {} -> {} at {:.2} s",
                f.kind,
                f.parent,
                f.child,
                f.at_s
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_part_of_the_layer_needs_a_serving_time() {
        let order = (vec![5, 1, 2, 0, 4, 3], 2);
        assert_eq!(
            streamed(order.clone(), Stream::All, None).expect("all"),
            order
        );
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(
            streamed(order.clone(), Stream::Urgent, hour).expect("urgent"),
            (vec![5, 1], 2)
        );
        assert_eq!(
            streamed(order.clone(), Stream::None, hour).expect("none"),
            (vec![], 0)
        );
        let e = streamed(order.clone(), Stream::None, None).expect_err("no --serve");
        assert!(e.to_string().contains("--serve"), "{e}");
        assert!(e.to_string().contains("6 of the layer's 6 chunks"), "{e}");
        let e = streamed(order, Stream::All, hour).expect_err("--serve without --stream");
        assert!(e.to_string().contains("--stream urgent or none"), "{e}");
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        push: PushArgs,
    }

    /// The default launch is the one that won in the scale-model lab (issue 28): when the
    /// job starts as the push returns (`--wait urgent`), the rest of the layer is held back
    /// while applications start; `--bulk-after 0s` streams it at once. A push that waits
    /// for the whole layer holds nothing back unless told to: nothing starts before it ends.
    #[test]
    fn a_push_holds_the_rest_back_while_applications_start_unless_told_not_to() {
        use clap::Parser;
        let base = [
            "push", "--store", "/s", "--index", "abcd", "--nodes", "n[1-4]",
        ];
        let with = |extra: &[&str]| {
            Cli::try_parse_from(base.iter().chain(extra))
                .expect("parses")
                .push
        };
        let held = Some(BulkHold {
            max: DEFAULT_BULK_AFTER,
            quiet: Some(DEFAULT_BULK_QUIET),
        });
        assert_eq!(with(&["--wait", "urgent"]).bulk_hold(), held);
        assert_eq!(with(&[]).bulk_hold(), None, "--wait all is the default");
        assert_eq!(
            with(&["--wait", "urgent", "--bulk-after", "0s"]).bulk_hold(),
            None
        );
        let told = with(&["--bulk-after", "30s", "--bulk-quiet", "5s"]);
        assert_eq!(
            told.bulk_hold(),
            Some(BulkHold {
                max: Duration::from_secs(30),
                quiet: Some(Duration::from_secs(5)),
            })
        );
        assert_eq!(with(&[]).timeout, DEFAULT_TIMEOUT);
    }
}

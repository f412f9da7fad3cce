//! The `teesfs` command line: a thin layer over the library crates.
//! Parses arguments, sets up logging, dispatches to `cmd::*`, and maps errors to exit codes.

/// `outln!`, `errln!`, ...: output that never panics on a full disk or a closed pipe.
#[macro_use]
extern crate teesfs_node;

mod cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// teesfs gets a software layer from the login node onto thousands of compute nodes fast:
/// publish it as content-addressed chunks with a signed index, plan a topology-aware tree,
/// and mount it read-only on every node, fetching what is missing on demand.
///
/// Logging goes to stderr; set TEESFS_LOG (e.g. `debug`, `teesfs=trace`) for more.
///
/// The site configuration, /etc/teesfs/teesfs.toml (with teesfs.d/*.toml and
/// teesfs.toml.local; $TEESFS_SITE_CONFIG names another), gives the defaults of `plan`,
/// `push`, `health`, `prefetch`, `daemon` and the store commands; a flag overrides it for
/// one run. See teesfs.toml(5).
///
/// `sim` and `lab` (in builds with the `lab` feature) are development tools: a simulator and
/// an emulated cluster on one machine (docs/sim.md, docs/lab.md), not for production nodes.
// `about` comes from this doc comment, not Cargo's description (a bare `about` would take it).
#[derive(Debug, Parser)]
#[command(name = "teesfs", version, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the publisher's signing key pair.
    Keygen(cmd::keygen::KeygenArgs),
    /// Publish a layer directory into a store: chunks plus a signed index.
    Publish(cmd::publish::PublishArgs),
    /// Check an index's signature and every chunk it references.
    Verify(cmd::verify::VerifyArgs),
    /// List a store's indexes, or the entries of one index.
    Inspect(cmd::inspect::InspectArgs),
    /// Remove a store's old indexes and the chunks only they needed.
    Gc(cmd::gc::GcArgs),
    /// Mount a published layer read-only (FUSE) until Ctrl-C or SIGTERM.
    Mount(cmd::mount::MountArgs),
    /// Plan the distribution tree for a job and print its metrics.
    Plan(cmd::plan::PlanArgs),
    /// Push a published layer to a job's nodes down a planned tree (the login node is root).
    Push(Box<cmd::push::PushArgs>),
    /// Push the layer a job spec (manifest.toml) names to the job's nodes.
    Prefetch(cmd::prefetch::PrefetchArgs),
    /// Serve Slurm jobs as the root of their trees, on a login or data-mover node: the
    /// controller's prolog hands each job here (`teesfs handoff`), so the controller needs
    /// no store, no home directories and no key.
    Seeder(cmd::seeder::SeederArgs),
    /// Hand a Slurm job to the seeder and relay its push (the controller's prolog and
    /// EpilogSlurmctld, when [seeder] host is set).
    Handoff(cmd::handoff::HandoffArgs),
    /// Draw a push report (the JSON of push/prefetch --report) as an HTML page or an SVG.
    Report(cmd::report::ReportArgs),
    /// List what a command run once against a published layer (or in an image) used, or
    /// what a job used on this node (--from-job): the urgent set.
    Record(cmd::record::RecordArgs),
    /// After a job: merge what its nodes used while it started into the urgent set the next
    /// push of its layer sends first (the Slurm EpilogSlurmctld).
    Learn(Box<cmd::learn::LearnArgs>),
    /// Run a command in the execution environment: the job's layer over "/", private writes.
    Run(cmd::run::RunArgs),
    /// Run the node daemon: receive jobs, mount them, relay to children.
    #[command(after_long_help = DAEMON_EXAMPLES)]
    Daemon(cmd::daemon::DaemonArgs),
    /// Show what a running daemon holds and does.
    Status(cmd::status::StatusArgs),
    /// End a job on this node: unmount it and stop relaying it (the Slurm epilog).
    Release(cmd::status::ReleaseArgs),
    /// Check that this node can run teesfs jobs (FUSE, namespaces, credentials, keys,
    /// port, store, Slurm, daemon) and say how to fix what fails. Exits 1 on a FAIL.
    Doctor(cmd::doctor::DoctorArgs),
    /// Check the site configuration (teesfs.toml): every unknown key and bad value, with
    /// its file and line.
    Config(cmd::config::ConfigArgs),
    /// Probe the job's tree: every edge's round trip, and where it stalls.
    Health(Box<cmd::health::HealthArgs>),
    /// [development] Simulate deployments at scale with the shipping relay state machine.
    #[cfg(feature = "lab")]
    Sim(cmd::sim::SimArgs),
    /// [development] An emulated cluster on this machine: namespaces, shaped links, real
    /// daemons.
    #[cfg(feature = "lab")]
    Lab(cmd::lab::LabArgs),
    /// Write man pages and shell completions (used by packaging).
    #[command(hide = true)]
    GenerateDocs(GenerateArgs),
    /// Hold the jobs' FUSE connections while the daemon restarts (started by
    /// `teesfs daemon --keep-jobs`).
    #[command(hide = true)]
    KeepFds(cmd::keep_fds::KeepFdsArgs),
}

/// Arguments of the hidden `generate-docs` command.
#[derive(Debug, clap::Args)]
struct GenerateArgs {
    /// Directory for man pages (teesfs.1, teesfs-<command>.1, ...).
    #[arg(long, value_name = "DIR")]
    man: std::path::PathBuf,
    /// Directory for completions (teesfs.bash, _teesfs, teesfs.fish).
    #[arg(long, value_name = "DIR")]
    completions: std::path::PathBuf,
}

/// Examples of `teesfs daemon` (its arguments' module belongs to the daemon's owners).
const DAEMON_EXAMPLES: &str = "\
Examples:
  systemctl enable --now teesfs-daemon       # as packaged: options in /etc/teesfs/daemon.env
  teesfs daemon --identity /etc/teesfs/tls --store-budget 8GiB
  teesfs daemon --no-mount --listen 0.0.0.0:7878   # a relay-only node (a borrowed proxy)

The daemon listens for peers on --listen, mounts each job at /run/teesfs/jobs/<job id> (a Slurm
job's number, else 16 hex digits) and answers `teesfs status` and `teesfs release` on its control socket
(/run/teesfs/daemon.sock). SIGHUP reloads the trusted keys and the revocation list.";

/// The FILES section of every man page (roff).
const MAN_FILES: &str = r#".SH FILES
.TP
\fB/etc/teesfs/teesfs.toml\fR, \fB/etc/teesfs/teesfs.d/*.toml\fR, \fB/etc/teesfs/teesfs.toml.local\fR
The site configuration: defaults of plan, push, health, prefetch, daemon and the store commands; see \fBteesfs.toml\fR(5).
.TP
\fBmanifest.toml\fR
A job spec, read by \fBteesfs prefetch\fR; see \fBmanifest.toml\fR(5).
.TP
\fB~/.config/teesfs/publisher.key\fR, \fBpublisher.pub\fR
The publisher's signing key pair (\fBteesfs keygen\fR).
.TP
\fB~/.config/teesfs/trusted/\fR, \fB/etc/teesfs/trusted/\fR
Trusted publisher keys (*.pub).
.TP
\fB/run/teesfs/daemon.sock\fR
The node daemon's control socket (\fBteesfs status\fR, \fBteesfs release\fR).
.TP
\fB/run/teesfs/jobs/\fR\fIJOB\fR
Where the daemon mounts a job's layer (\fIJOB\fR: the Slurm job id, or 16 hex digits for a push outside Slurm).
"#;

/// The ENVIRONMENT section of every man page (roff).
const MAN_ENVIRONMENT: &str = r#".SH ENVIRONMENT
.TP
\fBTEESFS_LOG\fR
Log filter for stderr (e.g. debug, teesfs=trace); default warn.
.TP
\fBTEESFS_SITE_CONFIG\fR
Another site configuration file instead of /etc/teesfs/teesfs.toml.
.TP
\fBTEESFS_CONFIG\fR
The user's configuration directory instead of ~/.config/teesfs (keys, trusted keys).
.TP
\fBTEESFS_JOB\fR, \fBSLURM_JOB_ID\fR
The default job of run, status, release and record \-\-from\-job, in this order.
.TP
\fBSLURM_JOB_NODELIST\fR
The default \-\-nodes of plan, push, health and prefetch.
.TP
\fBJOURNAL_STREAM\fR
Set by systemd: logs go to the journal with structured fields.
"#;

/// The EXIT STATUS section of every man page (roff).
const MAN_EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
The command failed; the reason is on stderr (push, prefetch and health: a node failed or did not answer; verify: something did not verify).
.TP
\fB2\fR
Bad arguments or a bad site configuration.
.TP
\fB125\fR
\fBteesfs run\fR could not set up the environment; otherwise run exits with the command's status, or 128+N when it died of signal N.
"#;

/// Writes the man page of the built `cmd` (`teesfs.1`, `teesfs-push.1`, ...) and of each of
/// its visible subcommands: clap_mangen's sections, the command's long after-help as
/// EXAMPLES, then FILES, ENVIRONMENT and EXIT STATUS.
fn write_man(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_man(sub, dir)?;
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.1")))?);
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(after) = cmd.get_after_long_help().or_else(|| cmd.get_after_help()) {
        writeln!(out, ".SH EXAMPLES")?;
        writeln!(out, ".nf")?;
        for line in after.to_string().lines() {
            writeln!(out, "{}", roff_line(line))?;
        }
        writeln!(out, ".fi")?;
    }
    out.write_all(MAN_FILES.as_bytes())?;
    out.write_all(MAN_ENVIRONMENT.as_bytes())?;
    out.write_all(MAN_EXIT_STATUS.as_bytes())?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    out.flush()
}

/// One line of literal text for roff: backslashes escaped, and a leading `.` or `'` (which
/// roff would read as a request) protected.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// Writes the man pages and completions generated from the command line definition.
fn generate_docs(a: GenerateArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    use clap_complete::Shell;
    std::fs::create_dir_all(&a.man).context("creating the man page directory")?;
    std::fs::create_dir_all(&a.completions).context("creating the completions directory")?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    write_man(&cmd, &a.man).with_context(|| format!("writing man pages to {}", a.man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "teesfs", &a.completions)
            .with_context(|| format!("writing {shell} completions"))?;
    }
    Ok(())
}

/// Logs to stderr, with colours only on a terminal (never in a log file or the journal);
/// under systemd with stderr connected to the journal (`$JOURNAL_STREAM`), to journald with
/// structured fields instead.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TEESFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let journald = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten();
    match journald {
        Some(layer) => tracing_subscriber::registry()
            .with(filter)
            .with(layer.with_syslog_identifier("teesfs".into()))
            .init(),
        None => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            // A log line that cannot be written is dropped: the default reports it with
            // `eprintln!`, which panics on the same full stderr (issue 29).
            .log_internal_errors(false)
            .init(),
    }
}

/// jemalloc instead of glibc's malloc: a daemon that runs thousands of jobs frees 1 MiB
/// chunk buffers on other threads than the ones that allocated them, and glibc's per-thread
/// arenas kept that memory: 8 lab daemons grew from 0.8 to 3.4 GiB over 100 jobs of the
/// soak (`teesfs lab soak`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    init_logging();
    // The init of `teesfs run`'s PID namespace: not a user command, so not in clap.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == runenv::INIT_SUBCOMMAND) {
        return match runenv::init_main(&argv[2..]) {
            Ok(never) => match never {},
            Err(e) => {
                errln!("teesfs run: {}", error_text(&anyhow::Error::from(e)));
                std::process::ExitCode::from(125)
            }
        };
    }
    // The SPANK plugin's helper that builds a Slurm task's environment: not a user command.
    if argv
        .get(1)
        .is_some_and(|a| a == runenv::TASK_ENV_SUBCOMMAND)
    {
        let done = match argv.get(2) {
            Some(a) if a == "--image" => cmd::task_env::image_main(&argv[3..]),
            _ => runenv::task_env_main(&argv[2..]).map_err(anyhow::Error::from),
        };
        return match done {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                errln!("teesfs: {}", error_text(&e));
                std::process::ExitCode::from(125)
            }
        };
    }
    let command = Cli::command();
    let site = match site_config(&command, &argv) {
        Ok(site) => site,
        Err(code) => return code,
    };
    let matches = cmd::site::apply(command, &site, &argv).get_matches_from(&argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Keygen(a) => cmd::keygen::run(a),
        Command::Publish(a) => cmd::publish::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Gc(a) => cmd::gc::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Push(a) => cmd::push::run(*a),
        Command::Prefetch(a) => cmd::prefetch::run(a),
        Command::Seeder(a) => cmd::seeder::run(a),
        Command::Handoff(a) => return exit_code(cmd::handoff::run(a)),
        Command::Report(a) => cmd::report::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Learn(a) => cmd::learn::run(*a),
        Command::Run(a) => return exit_code(cmd::run::run(a)),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Release(a) => cmd::status::release(a),
        Command::Health(a) => cmd::health::run(*a),
        Command::Doctor(a) => return exit_code(cmd::doctor::run(a)),
        Command::Config(a) => return exit_code(cmd::config::run(a)),
        #[cfg(feature = "lab")]
        Command::Sim(a) => cmd::sim::run(a),
        #[cfg(feature = "lab")]
        Command::Lab(a) => cmd::lab::run(a),
        Command::GenerateDocs(a) => generate_docs(a),
        Command::KeepFds(a) => cmd::keep_fds::run(a),
    };
    exit_code(result.map(|()| std::process::ExitCode::SUCCESS))
}

/// The site configuration for the command `argv` runs. Each mistake in it is a warning,
/// except a bad value of a key the command uses, which stops it (exit 2): a login-side
/// mistake never stops `release`, `status`, `run` or a node's daemon.
fn site_config(
    command: &clap::Command,
    argv: &[std::ffi::OsString],
) -> Result<manifest::SiteConfig, std::process::ExitCode> {
    use std::io::Write;
    let mut err = std::io::stderr();
    if cmd::site::subcommand_name(command, argv) == Some("config") {
        // `config check` reads and reports the files itself.
        return Ok(manifest::SiteConfig::default());
    }
    let loaded = match teesfs_node::site::load_lenient(&teesfs_node::site::main_path()) {
        Ok(l) => l,
        Err(e) if !cmd::site::reads_site(command, argv) => {
            let e = error_text(&e.into());
            let _ = writeln!(err, "teesfs: warning: {e} (not used by this command)");
            return Ok(manifest::SiteConfig::default());
        }
        Err(e) => {
            let _ = writeln!(err, "teesfs: error: {}", error_text(&e.into()));
            return Err(std::process::ExitCode::from(2));
        }
    };
    let fatal = cmd::site::fatal(command, argv, &loaded.problems);
    for p in loaded.problems.iter().filter(|p| !fatal.contains(p)) {
        let _ = writeln!(err, "teesfs: warning: {p}");
    }
    if let Some(p) = fatal.first() {
        let _ = writeln!(
            err,
            "teesfs: error: {p}; this command uses it: fix the file or give the flag (`teesfs config check` lists every mistake)"
        );
        return Err(std::process::ExitCode::from(2));
    }
    Ok(loaded.config)
}

/// Maps a command's result to the process exit code, printing the error chain.
fn exit_code(result: anyhow::Result<std::process::ExitCode>) -> std::process::ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            errln!("teesfs: error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each once: many errors already say their cause in their own
/// text (`{path}: {source}`), and printing the chain as well said it twice.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

//! The `teesfs` command line: a thin layer over the library crates.
//! Parses arguments, sets up logging, dispatches to `cmd::*`, and maps errors to exit codes.

mod cmd;

use clap::{Parser, Subcommand};

/// teesfs gets a software layer from the login node onto thousands of compute nodes fast:
/// publish it as content-addressed chunks with a signed index, plan a topology-aware tree,
/// and mount it read-only on every node, fetching what is missing on demand.
///
/// Logging goes to stderr; set TEESFS_LOG (e.g. `debug`, `teesfs=trace`) for more.
#[derive(Debug, Parser)]
#[command(name = "teesfs", version, about, long_about, args_override_self = true)]
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
    /// Mount a published layer read-only (FUSE) until Ctrl-C or SIGTERM.
    Mount(cmd::mount::MountArgs),
    /// Plan the distribution tree for a job and print its metrics.
    Plan(cmd::plan::PlanArgs),
    /// Push a published layer to a job's nodes down a planned tree (the login node is root).
    Push(Box<cmd::push::PushArgs>),
    /// Push the layer a job spec (manifest.toml) names to the job's nodes.
    Prefetch(cmd::prefetch::PrefetchArgs),
    /// Run the node daemon: receive jobs, mount them, relay to children.
    Daemon(cmd::daemon::DaemonArgs),
    /// Show what a running daemon holds and does.
    Status(cmd::status::StatusArgs),
    /// Probe the job's tree: every edge's round trip, and where it stalls.
    Health(Box<cmd::health::HealthArgs>),
    /// Simulate deployments at scale with the shipping relay state machine.
    Sim(cmd::sim::SimArgs),
    /// An emulated cluster on this machine: namespaces, shaped links, real daemons.
    Lab(cmd::lab::LabArgs),
}

fn main() -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TEESFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Keygen(a) => cmd::keygen::run(a),
        Command::Publish(a) => cmd::publish::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Push(a) => cmd::push::run(*a),
        Command::Prefetch(a) => cmd::prefetch::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Health(a) => cmd::health::run(*a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Lab(a) => cmd::lab::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("teesfs: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

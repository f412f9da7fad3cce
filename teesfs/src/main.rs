//! The `teesfs` command line: a thin layer over the library crates.
//! Parses arguments, sets up logging, dispatches to `cmd::*`, and maps errors to exit codes.

mod cmd;

use clap::{Parser, Subcommand};

/// teesfs: get a software layer from the login node onto thousands of compute nodes fast.
#[derive(Debug, Parser)]
#[command(name = "teesfs", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Plan the distribution tree for a job and print its metrics.
    Plan(cmd::plan::PlanArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => cmd::plan::run(args),
    }
}

//! `teesfs config check`: reads the site configuration the way every command does and
//! lists each file read and each key left out of it (unknown, or a bad value), so an admin
//! sees a mistake before a job does.

use std::io::Write;
use std::path::PathBuf;

/// Arguments of `teesfs config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigAction {
    /// Check the site configuration: list the files read and every key that is unknown or
    /// has a bad value, with its file and line. Exits 1 if any key is wrong.
    #[command(after_long_help = "\
Examples:
  teesfs config check                          # /etc/teesfs/teesfs.toml, teesfs.d/*.toml, .local
  teesfs config check --file ./teesfs.toml     # a file about to be installed
  TEESFS_SITE_CONFIG=/srv/teesfs.toml teesfs config check

A mistake is contained to its key: an unknown key is ignored with a warning by every command,
and a key with a bad value stops only the commands that use it (plan, push, prefetch, health,
daemon, ... when the flag it stands for is not given). `release`, `status` and `run` never
stop for the site configuration.")]
    Check {
        /// The main file to check instead of $TEESFS_SITE_CONFIG or /etc/teesfs/teesfs.toml
        /// (its teesfs.d/*.toml and .local are read with it).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

/// Runs `teesfs config`.
pub fn run(args: ConfigArgs) -> anyhow::Result<std::process::ExitCode> {
    let ConfigAction::Check { file } = args.action;
    let main = file.unwrap_or_else(teesfs_node::site::main_path);
    let loaded = teesfs_node::site::load_lenient(&main)?;
    let mut out = std::io::stdout().lock();
    if loaded.read.is_empty() {
        let _ = writeln!(
            out,
            "no site configuration at {} (every key has its default)",
            main.display()
        );
    }
    for f in &loaded.read {
        let _ = writeln!(out, "read {}", f.display());
    }
    for p in &loaded.problems {
        let level = if p.is_invalid() { "error" } else { "warning" };
        let _ = writeln!(out, "{level}: {p}");
    }
    if loaded.problems.is_empty() {
        let _ = writeln!(out, "ok: every key is known and valid");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    Ok(std::process::ExitCode::from(1))
}

//! The lab's one error type. Every variant says what the operator can do about it.

use std::path::PathBuf;

/// Everything that can go wrong while building, running or tearing down a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The lab creates namespaces, bridges and mounts: it needs root.
    #[error("the lab needs root (network namespaces, tc, FUSE mounts): run it with sudo")]
    NotRoot,
    /// A lab shape that cannot be built.
    #[error("bad lab shape: {0}")]
    Shape(String),
    /// A helper program could not be started at all.
    #[error(
        "cannot run `{program}` (is it installed? the lab needs iproute2, util-linux): {source}"
    )]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program a baseline needs is not installed.
    #[error(
        "`{program}` is not installed: install the Debian package `{package}` (scripts/deps.sh does)"
    )]
    Missing {
        /// The program.
        program: String,
        /// The Debian package that provides it.
        package: String,
    },
    /// A helper program ran and failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A daemon did not come up.
    #[error("daemon {host} did not start: {reason} (log: {log})")]
    Daemon {
        /// The node.
        host: String,
        /// What was seen.
        reason: String,
        /// Its log file.
        log: PathBuf,
    },
    /// Output of a helper that could not be understood.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// What was being parsed.
        what: String,
        /// Why it failed.
        detail: String,
    },
    /// File system trouble in the lab's work directory.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Ctrl-C or SIGTERM arrived; the lab was torn down.
    #[error("interrupted; the lab has been torn down")]
    Interrupted,
    /// A step ran past its time limit.
    #[error("{0} timed out")]
    Timeout(String),
    /// The planner or the simulator refused a simulated job.
    #[error("{what}: {source}")]
    Sim {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: peertree::Error,
    },
    /// A plot could not be drawn.
    #[error("drawing the plot: {0}")]
    Plot(String),
}

/// Result alias for the lab.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

impl LabError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

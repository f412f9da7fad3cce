//! A push that returns at the urgent set while the rest of the layer keeps streaming.
//!
//! The login node's push is a process, not a daemon, so the command that must return early
//! starts [`Background`]: the same command again, in its own process group (Ctrl-C on the
//! terminal does not stop it), stdin closed, its log in a file. That copy carries the push
//! to the whole layer and tells the foreground what happened in typed [`Handover`] lines on
//! its standard output; the foreground returns at the first one. A copy that completes
//! removes its log; one that fails keeps it for the operator.

use std::io::{BufRead, BufReader, Lines, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use super::report::PushReport;
use crate::Error;

/// Set (to its log file) in the environment of the background copy.
pub(crate) const SERVE_ENV: &str = "TEESFS_PUSH_SERVE";

/// Set (to the foreground's pid) in the environment of the background copy.
const PARENT_ENV: &str = "TEESFS_PUSH_PARENT";

/// What the background copy tells the foreground, one JSON line each
/// (`{"event": "urgent", "report": {...}}`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", content = "report", rename_all = "lowercase")]
pub enum Handover {
    /// The urgent set is on every node; the push goes on.
    Urgent(PushReport),
    /// The push has ended (the whole layer, failures or a timeout).
    Done(PushReport),
}

impl Handover {
    /// The report it carries.
    pub fn report(&self) -> &PushReport {
        match self {
            Handover::Urgent(r) | Handover::Done(r) => r,
        }
    }

    /// Writes it to standard output for the foreground, which may have gone (errors are
    /// ignored: the push goes on without a reader).
    pub fn emit(&self) {
        let Ok(line) = serde_json::to_string(self) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The log file, if this process is a background copy.
pub fn serving() -> Option<PathBuf> {
    std::env::var_os(SERVE_ENV).map(PathBuf::from)
}

/// Called by a background copy whose push completed: its log is not needed.
pub fn completed() {
    if let Some(log) = serving() {
        let _ = std::fs::remove_file(log);
    }
}

/// In a background copy that releases its job if the push fails before the job starts
/// (the Slurm prolog's push): SIGTERM when the foreground ends, as when slurmctld kills a
/// prolog that ran too long or the seeder kills the push its prolog no longer waits for.
/// Call it once SIGTERM is handled. Elsewhere nothing happens.
pub(crate) fn tie_to_parent() {
    let Some(parent) = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|_| serving().is_some())
    else {
        return;
    };
    use nix::sys::signal::{Signal, raise};
    if nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err() {
        tracing::warn!("could not ask to be told when the foreground push ends");
    }
    // It may have ended before the request above.
    if nix::unistd::getppid().as_raw() != parent {
        let _ = raise(Signal::SIGTERM);
    }
}

/// The job started: the foreground may end without this copy stopping.
pub(crate) fn untie_from_parent() {
    if serving().is_some() && std::env::var_os(PARENT_ENV).is_some() {
        let _ = nix::sys::prctl::set_pdeathsig(None);
    }
}

/// The background copy, seen from the foreground.
pub struct Background {
    child: Child,
    log: PathBuf,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Background {
    /// Starts this process's command again in the background, logging to a file in the
    /// temporary directory.
    pub fn spawn() -> Result<Self, Error> {
        let sys = |what: &str| {
            let what = what.to_string();
            move |source| Error::Sys { what, source }
        };
        let exe = std::env::current_exe().map_err(sys("finding the teesfs binary"))?;
        let log = std::env::temp_dir().join(format!("teesfs-push-{}.log", std::process::id()));
        let stderr = std::fs::File::create(&log)
            .map_err(sys(&format!("creating the push log {}", log.display())))?;
        let mut child = Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(SERVE_ENV, &log)
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(sys("starting the background push"))?;
        let Some(out) = child.stdout.take() else {
            return Err(Error::InvalidRun(
                "the background push has no output".into(),
            ));
        };
        Ok(Self {
            child,
            log,
            lines: BufReader::new(out).lines(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Waits at most `bound` for it to end (it has released its job, say), reading what it
    /// still says; whether it ended.
    pub fn ended_within(self, bound: std::time::Duration) -> bool {
        let Self {
            mut child, lines, ..
        } = self;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            lines.for_each(drop);
            let _ = tx.send(child.wait().is_ok());
        });
        rx.recv_timeout(bound).unwrap_or(false)
    }

    /// Waits for its first [`Handover`]. If it ends without one, the error carries its exit
    /// status and the last lines of its log.
    pub fn first(&mut self) -> Result<Handover, Error> {
        for line in self.lines.by_ref() {
            let line = line.map_err(|source| Error::Sys {
                what: "reading the background push".into(),
                source,
            })?;
            // Anything else on its standard output is not for us.
            if let Ok(h) = serde_json::from_str::<Handover>(&line) {
                return Ok(h);
            }
        }
        let status = self.child.wait().map_err(|source| Error::Sys {
            what: "waiting for the background push".into(),
            source,
        })?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(Error::InvalidRun(format!(
            "the push ended ({status}) before the urgent set arrived everywhere (log {}):\n{}",
            self.log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handover_lines_keep_their_documented_shape() {
        let r = PushReport::default();
        let line = serde_json::to_string(&Handover::Urgent(r)).expect("json");
        assert!(
            line.starts_with(r#"{"event":"urgent","report":{"#),
            "{line}"
        );
        let back: Handover = serde_json::from_str(&line).expect("parse");
        assert!(matches!(back, Handover::Urgent(_)));
        let done = serde_json::to_string(&Handover::Done(PushReport::default())).expect("json");
        assert!(matches!(
            serde_json::from_str::<Handover>(&done).expect("parse"),
            Handover::Done(_)
        ));
    }
}

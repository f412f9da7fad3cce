//! Best-effort standard output and standard error for the commands: what a command prints
//! for people (progress, final lines, reports on stdout) must never decide whether it
//! worked. The Slurm prolog sends both streams to a log directory that may be full, and
//! `teesfs status | head -1` closes the pipe early; `println!` panics on either, which
//! failed delivered pushes and left empty logs.
//!
//! A failing stdout is named once on stderr (unless it is a closed pipe, which is what
//! `head` does on purpose) and the rest of stdout is dropped; a failing stderr is ignored.
//! The command's exit status stays its own. Use [`outln!`](crate::outln),
//! [`out!`](crate::out), [`errln!`](crate::errln) and [`err!`](crate::err) in place of the
//! std macros. Nothing here decides what to print.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout failed: later output is dropped without trying again.
static STDOUT_LOST: AtomicBool = AtomicBool::new(false);

/// Writes to stdout and flushes (so a failure shows here, not at exit); on failure, warns
/// once on stderr and drops the rest of stdout.
pub fn stdout(args: fmt::Arguments<'_>) {
    if STDOUT_LOST.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush())
        && !STDOUT_LOST.swap(true, Ordering::Relaxed)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        stderr(format_args!(
            "teesfs: warning: standard output cannot be written ({e}); the rest of it is \
             dropped and the command carries on\n"
        ));
    }
}

/// Writes to stderr, ignoring failure (there is nowhere left to say it).
pub fn stderr(args: fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.flush());
}

/// Whether stdout has failed since the process started.
pub fn stdout_lost() -> bool {
    STDOUT_LOST.load(Ordering::Relaxed)
}

/// `println!` that never panics: see [`crate::say`].
#[macro_export]
macro_rules! outln {
    () => { $crate::say::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::say::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that never panics: see [`crate::say`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::say::stdout(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics: see [`crate::say`].
#[macro_export]
macro_rules! errln {
    () => { $crate::say::stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::say::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics: see [`crate::say`].
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::say::stderr(format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn formatting_passes_through() {
        // Writes to the test harness's captured streams: what matters is that it compiles
        // to the same formatting as the std macros and does not panic.
        crate::outln!("{} {x}", 1, x = 2);
        crate::errln!("{:>3}", 7);
        crate::out!("");
        crate::err!("");
        assert!(!super::stdout_lost());
    }
}

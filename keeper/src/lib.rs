//! What lets a FUSE daemon restart without breaking its mounts (teesfs's `--keep-jobs`).
//! The daemon's jobs, trust and relays are not known here: only descriptors, keys and
//! bytes.
//!
//! - [`process`]: the keeper process (`teesfs keep-fds`) that holds each mount's
//!   `/dev/fuse` descriptor while no daemon runs, and the daemon's side of it ([`Keeper`]).
//! - [`fuse`]: a fuser session on a connection that is already up (a synthetic
//!   `FUSE_INIT`), and the kernel's resend of the requests a dead daemon had taken.
//! - [`record`]: the framing of the records a daemon keeps of its mounts: a header, a body
//!   and the body's hash, written atomically and read back checked.

pub mod fuse;
pub mod process;
pub mod record;

pub use process::{Keeper, serve, socket_path};

/// Why keeping or taking back a mount failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed: what was being done, and the error underneath.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A record cannot be used (cut short, changed, not a record).
    #[error("{0}")]
    Record(String),
}

//! Small readers of what the Linux kernel reports about this process, shared by the daemon
//! and the execution environment. Nothing here changes system state.
//!
//! - [`mountinfo`]: the mount table of a mount namespace (`/proc/<pid>/mountinfo`), from
//!   the `runenv` crate, which reads it to lay out a job's view.

pub use runenv::mountinfo;

//! teesfs integration tests: one binary, real FUSE mounts, real processes.
//!
//! Tests that need root and /dev/fuse skip with a printed reason elsewhere; CI runs as root.
//! Every mount is made in a fresh temporary directory and torn down by a Drop guard, also
//! when the test panics.

mod cluster;
mod corruption;
mod distribution;
mod health;
mod lab;
mod lab_faults;
mod roundtrip;
mod slow_source;
mod transport;
mod util;

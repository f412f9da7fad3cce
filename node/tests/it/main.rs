//! The node library's own integration tests: its filesystem over sources a test controls
//! (`read_path`, `slow_source`) and its QUIC transport (`transport`), without the `teesfs`
//! binary. Tests of the product as a whole (daemons, pushes, the lab) are in
//! `teesfs/tests/it`.

mod read_path;
mod slow_source;
mod transport;
mod util;

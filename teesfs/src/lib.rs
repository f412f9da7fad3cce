//! The node side of teesfs: the read-only layer filesystem and where its chunks come from.
//!
//! - [`fs`]: the FUSE filesystem (pure tree, content layer, thin fuser adapter, mounting).
//! - [`source`]: the [`source::ChunkSource`] interface and the local-store source.
//!
//! The CLI in `main.rs` is a thin shell over this library and the `manifest`, `seeder` and
//! `peertree` crates.

pub mod fs;
pub mod source;

/// Errors of the node-side library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Mounting or unmounting failed.
    #[error("cannot mount at {mountpoint}: {source}")]
    Mount {
        /// The mountpoint.
        mountpoint: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An index or chunk problem.
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    /// A store problem.
    #[error(transparent)]
    Store(#[from] seeder::Error),
}

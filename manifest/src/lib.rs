//! The layer's signed, content-addressed index.
//!
//! A published layer is two things: a set of **chunks** (fixed-size slices of file contents,
//! each addressed by the blake3 of its plain bytes and stored zstd-compressed or raw), and one
//! **index** that lists every entry of the tree (directories, files, symlinks, hard links) with
//! its metadata and chunk list. The index is encoded compactly, compressed, signed with the
//! publisher's ed25519 key, and addressed by the blake3 of that key and the compressed body.
//!
//! This crate owns the formats and their strict decoders, plus a builder that walks a
//! directory and produces chunks and an index. It does no I/O except the builder's reads of
//! the layer; where chunks go is the caller's business (see [`build::ChunkSink`]). It also
//! parses the two human-written files: the job spec ([`jobspec`], `manifest.toml`) and the
//! site configuration ([`site`], `teesfs.toml`).

pub mod build;
pub mod chunk;
mod codec;
mod error;
pub mod ids;
pub mod image;
pub mod index;
pub mod jobspec;
pub mod sign;
pub mod site;
pub mod urgent;
mod wire;

pub use build::{
    BuildOptions, BuildReport, CHUNKS_PER_LAYER, ChunkSink, MAX_AUTO_CHUNK, MIN_ADAPTIVE_CHUNK,
    Skipped, build, chunk_size_for, set_urgent_paths,
};
pub use chunk::{
    CheckedChunk, StoredForm, Verified, check_chunk, decode_chunk, encode_chunk, raw_stored,
    verify_chunk,
};
pub use error::Error;
pub use ids::{ChunkId, IndexId, StoredHash};
pub use image::ImageConfig;
pub use index::{
    ChunkInfo, Entry, EntryFlags, EntryIdx, EntryKind, FileData, Index, Limits, Meta, Slot,
};
pub use jobspec::JobSpec;
pub use sign::{PublicKey, SecretKey, SignedIndex};
pub use site::{Problem as SiteProblemKind, SiteConfig, SiteProblem};
pub use urgent::{entries_named, push_order, push_order_hinted};

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;

//! The crate's one error type: every refusal names the image part (layer, entry) at fault.

use std::path::PathBuf;

/// What can go wrong while reading an image.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An entry of a layer is malformed or hostile (`..`, an absolute path, a path through
    /// a symlink, a hard link out of the tree, a truncated file).
    #[error("layer {layer}: entry {entry:?}: {reason}")]
    Layer {
        /// The layer (its blob path, or the file).
        layer: String,
        /// The entry's path as the archive gives it.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// A layer inflates beyond the decompression ratio limit (a compression bomb).
    #[error(
        "layer {layer}: entry {entry:?}: decompresses to more than {ratio} times its \
         compressed size (a compression bomb?)"
    )]
    Bomb {
        /// The layer.
        layer: String,
        /// The entry being read when the limit tripped.
        entry: String,
        /// The ratio limit.
        ratio: u64,
    },
    /// The image is larger than the limits allow.
    #[error("layer {layer}: entry {entry:?}: the image's {what} exceed the limit of {limit}")]
    TooLarge {
        /// The layer.
        layer: String,
        /// The entry that went over.
        entry: String,
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// The image's structure (index, manifest, SIF header) is malformed or not supported.
    #[error("image format: {0}")]
    Format(String),
    /// The file is none of the formats read here.
    #[error(
        "{}: not an OCI image layout, oci-archive, docker-archive, squashfs or SIF file",
        .0.display()
    )]
    UnknownFormat(PathBuf),
    /// The image's config cannot be kept in an index.
    #[error("image config: {0}")]
    Config(manifest::Error),
    /// An external tool (`sqfs2tar`) is missing or failed.
    #[error("{0}")]
    Tool(String),
    /// Reading the image or writing the staging directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

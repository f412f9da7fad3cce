//! Container images as teesfs layers (issue 34): reads an image in any of the forms sites
//! keep them in and unpacks its final root filesystem into a private staging directory,
//! for the index builder to walk.
//!
//! - an OCI image layout directory, or a tarball of one (`oci-archive`);
//! - a `docker-archive` (`docker save`, `podman save`, `skopeo copy ... docker-archive:`);
//! - a squashfs file, or an Apptainer SIF file (its squashfs partition), read through
//!   `sqfs2tar` as one tar layer.
//!
//! Layers are applied bottom first, with whiteouts (`.wh.NAME`) and opaque directories
//! (`.wh..wh..opq`) honoured, so the staging tree is the image's root filesystem. The
//! staging tree is written without owners, setuid bits or odd modes (a publisher that is
//! not root could not set them); the image's own metadata comes back in
//! [`Unpacked::meta`], and [`apply_meta`] puts it into the built index. Device nodes,
//! fifos and sockets are skipped and counted, as `umoci unpack --rootless` does.
//!
//! Hostile archives are refused with an [`Error`] naming the entry and never write outside
//! the staging directory: see [`tree`] for how paths are resolved, and [`ReadLimits`] for
//! the bounds on entries, bytes and decompression ratio.

mod error;
mod layer;
mod source;
mod squash;
pub mod tree;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use manifest::{EntryKind, Index, Meta};

pub use error::Error;
pub use tree::Staging;

/// Bounds on what an image may make the reader write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Most tar entries over all layers (the index's entry limit).
    pub max_entries: u64,
    /// Largest file (the index's file size limit).
    pub max_file_size: u64,
    /// Most bytes of file content over all layers.
    pub max_total_bytes: u64,
    /// Most decompressed bytes per compressed byte of a layer...
    pub max_ratio: u64,
    /// ...once a layer has inflated past this many bytes.
    pub ratio_floor: u64,
}

impl ReadLimits {
    /// The limits an index of `limits` can hold, with at most 1 TiB of content and a
    /// ratio of 256 past the first 64 MiB (real layers compress 2-10 times; zeros in gzip
    /// about 1000 times).
    pub fn for_index(limits: &manifest::Limits) -> Self {
        Self {
            max_entries: limits.max_entries,
            max_file_size: limits.max_file_size,
            max_total_bytes: 1 << 40,
            max_ratio: 256,
            ratio_floor: 64 << 20,
        }
    }
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self::for_index(&manifest::Limits::default())
    }
}

/// Which form the image came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An OCI image layout directory.
    OciLayout,
    /// A tarball of an OCI image layout.
    OciArchive,
    /// A `docker save` tarball.
    DockerArchive,
    /// A squashfs file.
    Squashfs,
    /// An Apptainer SIF file.
    Sif,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::OciLayout => "OCI image layout",
            Format::OciArchive => "oci-archive",
            Format::DockerArchive => "docker-archive",
            Format::Squashfs => "squashfs",
            Format::Sif => "SIF",
        })
    }
}

/// An image unpacked into a staging directory.
#[derive(Debug)]
pub struct Unpacked {
    /// The form it came in.
    pub format: Format,
    /// Layers applied.
    pub layers: usize,
    /// The config a task follows (`None` for squashfs and SIF, which carry none).
    pub config: Option<manifest::ImageConfig>,
    /// The image's metadata of every path in the tree, keyed by `/`-joined path (the
    /// root is the empty key).
    pub meta: BTreeMap<Vec<u8>, Meta>,
    /// Device nodes, fifos and sockets left out: path and kind.
    pub skipped: Vec<(String, &'static str)>,
}

/// An image to read: a file or directory, and for an OCI layout (directory or archive)
/// which of its tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file or directory.
    pub path: PathBuf,
    /// The tag (`org.opencontainers.image.ref.name`); `None`: the layout's only image.
    pub tag: Option<String>,
}

impl Source {
    /// Reads `PATH` or `PATH:TAG`, as `skopeo` names an OCI layout (`oci:DIR:TAG`): the
    /// text is a path when it exists, else a tag follows the last `:` when what precedes it
    /// exists.
    pub fn parse(text: &Path) -> Self {
        let whole = Self {
            path: text.to_path_buf(),
            tag: None,
        };
        if text.exists() {
            return whole;
        }
        let Some(s) = text.to_str() else { return whole };
        match s.rsplit_once(':') {
            Some((path, tag))
                if !tag.is_empty() && !tag.contains('/') && Path::new(path).exists() =>
            {
                Self {
                    path: PathBuf::from(path),
                    tag: Some(tag.to_string()),
                }
            }
            _ => whole,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tag {
            Some(t) => write!(f, "{}:{t}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// Reads the format of `source` from its first bytes (or its being a directory).
pub fn detect(source: &Path) -> Result<Format, Error> {
    let io = |e| Error::Io {
        path: source.to_path_buf(),
        source: e,
    };
    if source.is_dir() {
        if source.join("oci-layout").is_file() {
            return Ok(Format::OciLayout);
        }
        return Err(Error::UnknownFormat(source.to_path_buf()));
    }
    let mut head = [0u8; 64];
    let mut f = std::fs::File::open(source).map_err(io)?;
    let n = f.read(&mut head).map_err(io)?;
    let head = &head[..n];
    if head.starts_with(squash::SQUASHFS_MAGIC) {
        return Ok(Format::Squashfs);
    }
    let at = squash::SIF_MAGIC_AT as usize;
    if head.get(at..at + squash::SIF_MAGIC.len()) == Some(squash::SIF_MAGIC) {
        return Ok(Format::Sif);
    }
    let blobs =
        source::Blobs::tar(source).map_err(|_| Error::UnknownFormat(source.to_path_buf()))?;
    if blobs.has("oci-layout") && blobs.has("index.json") {
        Ok(Format::OciArchive)
    } else if blobs.has("manifest.json") {
        Ok(Format::DockerArchive)
    } else {
        Err(Error::UnknownFormat(source.to_path_buf()))
    }
}

/// Unpacks the image `image` into `staging` (an empty directory).
pub fn unpack(
    image: &Source,
    staging: &Path,
    index_limits: &manifest::Limits,
    limits: ReadLimits,
) -> Result<Unpacked, Error> {
    let source = image.path.as_path();
    let format = detect(source)?;
    if image.tag.is_some() && !matches!(format, Format::OciLayout | Format::OciArchive) {
        return Err(Error::Format(format!(
            "{image}: a {} has no tags; give the file alone",
            format
        )));
    }
    let mut tree = tree::Tree::new(staging)?;
    let mut totals = layer::Totals::default();
    let whiteouts = layer::LayerMode { whiteouts: true };
    let (layers, config) = match format {
        Format::OciLayout | Format::OciArchive | Format::DockerArchive => {
            let blobs = if format == Format::OciLayout {
                source::Blobs::Dir(source.to_path_buf())
            } else {
                source::Blobs::tar(source)?
            };
            let image = if format == Format::DockerArchive {
                source::docker(blobs)?
            } else {
                source::oci(blobs, image.tag.as_deref())?
            };
            for name in &image.layers {
                let raw = image.blobs.open(name)?;
                layer::apply(&mut tree, raw, name, whiteouts, limits, &mut totals)?;
            }
            let config = match &image.config {
                Some(c) => Some(source::image_config(c, index_limits)?),
                None => None,
            };
            (image.layers.len(), config)
        }
        Format::Squashfs | Format::Sif => {
            let copy = staging.with_extension("squashfs");
            let _cleanup = RemoveOnDrop(&copy);
            let image = if format == Format::Sif {
                squash::extract_sif(source, &copy)?;
                copy.as_path()
            } else {
                source
            };
            let (child, out) = squash::Sqfs2tar::start(image)?;
            let mode = layer::LayerMode { whiteouts: false };
            let name = source.display().to_string();
            layer::apply(&mut tree, Box::new(out), &name, mode, limits, &mut totals)?;
            child.finish()?;
            (1, None)
        }
    };
    Ok(Unpacked {
        format,
        layers,
        config,
        meta: tree.meta,
        skipped: totals.skipped,
    })
}

/// Removes a file when dropped (the squashfs copied out of a SIF file).
struct RemoveOnDrop<'p>(&'p Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// Puts the image's metadata into an index built from the staging tree: each entry's
/// mode, owner and mtime become the image's (hard links share their target's), and the
/// image's config is kept. A path the table lacks keeps what the builder saw.
pub fn apply_meta(index: &mut Index, unpacked: &Unpacked) {
    for i in 0..index.entries.len() {
        let idx = manifest::EntryIdx(i as u32);
        if matches!(index.entries[i].kind, EntryKind::Hardlink { .. }) {
            continue;
        }
        if let Some(m) = unpacked.meta.get(&index.path_of(idx)) {
            let symlink = matches!(index.entries[i].kind, EntryKind::Symlink { .. });
            index.entries[i].meta = if symlink {
                Meta { mode: 0o777, ..*m }
            } else {
                *m
            };
        }
    }
    for i in 0..index.entries.len() {
        if let EntryKind::Hardlink { target } = index.entries[i].kind {
            index.entries[i].meta = index.entries[target.get()].meta;
        }
    }
    index.image = unpacked.config.clone();
}

/// Applies one layer stream to a fresh staging directory: what the fuzz target runs.
/// Answers the number of paths the tree holds afterwards.
pub fn apply_layer_for_fuzzing(
    bytes: &[u8],
    staging: &Path,
    limits: ReadLimits,
) -> Result<usize, Error> {
    let mut tree = tree::Tree::new(staging)?;
    let mut totals = layer::Totals::default();
    let mode = layer::LayerMode { whiteouts: true };
    layer::apply(
        &mut tree,
        Box::new(bytes),
        "fuzz",
        mode,
        limits,
        &mut totals,
    )?;
    Ok(tree.meta.len())
}

#[cfg(test)]
mod tests;

//! One layer: a tar stream (plain, gzip or zstd, told apart by their magic numbers) applied
//! to the [`Tree`] entry by entry, whiteouts and opaque directories included.
//!
//! Everything read is bounded by [`ReadLimits`]: the entry count and the bytes of all
//! layers (checked against each header before its content is read), and the ratio of
//! decompressed to compressed bytes (a gzip or zstd bomb trips it while it inflates).

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;

use manifest::Meta;

use crate::tree::{Comps, Tree, clean, show};
use crate::{Error, ReadLimits};

/// Counts the bytes read through it (the compressed side of a layer).
struct Counted<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Fails the read once the decompressed bytes exceed `max_ratio` times the compressed ones
/// (past the first `ratio_floor` bytes, where any ratio is fine).
struct Guard<R> {
    inner: R,
    compressed: Rc<Cell<u64>>,
    out: u64,
    limits: ReadLimits,
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out += n as u64;
        let allowed = self
            .compressed
            .get()
            .max(1)
            .saturating_mul(self.limits.max_ratio);
        if self.out > self.limits.ratio_floor && self.out > allowed {
            self.tripped.set(true);
            return Err(std::io::Error::other("decompression ratio limit"));
        }
        Ok(n)
    }
}

/// The layer's bytes decompressed, and whether the bomb guard tripped.
fn decompress<'r>(
    raw: Box<dyn Read + 'r>,
    limits: ReadLimits,
    tripped: Rc<Cell<bool>>,
) -> std::io::Result<Box<dyn Read + 'r>> {
    let count = Rc::new(Cell::new(0));
    let mut buf = BufReader::with_capacity(
        1 << 16,
        Counted {
            inner: raw,
            count: count.clone(),
        },
    );
    let head = buf.fill_buf()?;
    let guard = |inner: Box<dyn Read + 'r>| -> Box<dyn Read + 'r> {
        Box::new(Guard {
            inner,
            compressed: count.clone(),
            out: 0,
            limits,
            tripped: tripped.clone(),
        })
    };
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        guard(Box::new(flate2::bufread::MultiGzDecoder::new(buf)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        guard(Box::new(zstd::Decoder::with_buffer(buf)?))
    } else {
        Box::new(buf)
    })
}

/// How a layer's entries are read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerMode {
    /// Names `.wh.*` are whiteouts (OCI and docker layers); a squashfs's tree is final, so
    /// such names are plain files there.
    pub whiteouts: bool,
}

/// Running totals over all layers of an image.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub entries: u64,
    pub bytes: u64,
    /// Device nodes, fifos and sockets skipped: (path, kind).
    pub skipped: Vec<(String, &'static str)>,
}

/// Applies one layer (`name` for errors) to `tree`.
pub(crate) fn apply(
    tree: &mut Tree,
    raw: Box<dyn Read + '_>,
    name: &str,
    mode: LayerMode,
    limits: ReadLimits,
    totals: &mut Totals,
) -> Result<(), Error> {
    tree.next_layer();
    let tripped = Rc::new(Cell::new(false));
    let io_err = |entry: Option<&str>, e: std::io::Error, tripped: &Rc<Cell<bool>>| {
        if tripped.get() {
            Error::Bomb {
                layer: name.to_owned(),
                entry: entry.unwrap_or("(archive header)").to_owned(),
                ratio: limits.max_ratio,
            }
        } else {
            Error::Layer {
                layer: name.to_owned(),
                entry: entry.unwrap_or("(archive header)").to_owned(),
                reason: e.to_string(),
            }
        }
    };
    let stream = decompress(raw, limits, tripped.clone()).map_err(|e| io_err(None, e, &tripped))?;
    let mut archive = tar::Archive::new(stream);
    let entries = archive.entries().map_err(|e| io_err(None, e, &tripped))?;
    let mut last = String::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| io_err(Some(&format!("after {last}")), e, &tripped))?;
        last = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        totals.entries += 1;
        if totals.entries > limits.max_entries {
            return Err(Error::TooLarge {
                layer: name.to_owned(),
                entry: last,
                what: "entries",
                limit: limits.max_entries,
            });
        }
        let result = one(tree, &mut entry, mode, limits, totals);
        match result {
            Ok(()) => {}
            Err(Step::Bad(_)) if tripped.get() => {
                return Err(Error::Bomb {
                    layer: name.to_owned(),
                    entry: last,
                    ratio: limits.max_ratio,
                });
            }
            Err(Step::Bad(reason)) => {
                return Err(Error::Layer {
                    layer: name.to_owned(),
                    entry: last,
                    reason,
                });
            }
            Err(Step::Limit { what, limit }) => {
                return Err(Error::TooLarge {
                    layer: name.to_owned(),
                    entry: last,
                    what,
                    limit,
                });
            }
        }
    }
    Ok(())
}

/// Why one entry failed.
enum Step {
    Bad(String),
    Limit { what: &'static str, limit: u64 },
}

impl From<String> for Step {
    fn from(s: String) -> Self {
        Step::Bad(s)
    }
}

fn meta_of<R: Read>(entry: &tar::Entry<'_, R>) -> Result<Meta, Step> {
    let h = entry.header();
    let bad = |what: &str, e: std::io::Error| Step::Bad(format!("bad {what} in the header: {e}"));
    let uid = h.uid().map_err(|e| bad("uid", e))?;
    let gid = h.gid().map_err(|e| bad("gid", e))?;
    let owner =
        |v: u64| u32::try_from(v).map_err(|_| Step::Bad(format!("owner {v} is not 32-bit")));
    Ok(Meta {
        mode: h.mode().map_err(|e| bad("mode", e))? & 0o7777,
        uid: owner(uid)?,
        gid: owner(gid)?,
        mtime: i64::try_from(h.mtime().map_err(|e| bad("mtime", e))?).unwrap_or(i64::MAX),
        mtime_nsec: 0,
    })
}

/// Applies one entry.
fn one<R: Read>(
    tree: &mut Tree,
    entry: &mut tar::Entry<'_, R>,
    mode: LayerMode,
    limits: ReadLimits,
    totals: &mut Totals,
) -> Result<(), Step> {
    use tar::EntryType as T;
    let comps: Comps =
        clean(&entry.path_bytes()).map_err(|r| Step::Bad(format!("{r} is not allowed")))?;
    let kind = entry.header().entry_type();
    if matches!(
        kind,
        T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink
    ) {
        return Ok(());
    }
    if mode.whiteouts
        && let Some(name) = comps.last()
        && let Some(hidden) = name.strip_prefix(b".wh.")
    {
        let dir = &comps[..comps.len() - 1];
        if hidden == b".wh..opq" {
            return Ok(tree.opaque(dir)?);
        }
        if hidden.starts_with(b".wh.") {
            // aufs's own bookkeeping (.wh..wh.plnk and the like): not part of the tree.
            return Ok(());
        }
        let mut target = dir.to_vec();
        target.push(hidden.to_vec());
        return Ok(tree.whiteout(&target)?);
    }
    let meta = meta_of(entry)?;
    match kind {
        T::Directory => tree.mkdir(&comps, meta)?,
        T::Regular | T::Continuous | T::GNUSparse => {
            let size = entry.size();
            if size > limits.max_file_size {
                return Err(Step::Limit {
                    what: "file size",
                    limit: limits.max_file_size,
                });
            }
            totals.bytes = totals.bytes.saturating_add(size);
            if totals.bytes > limits.max_total_bytes {
                return Err(Step::Limit {
                    what: "bytes of content",
                    limit: limits.max_total_bytes,
                });
            }
            if comps.is_empty() {
                return Err(Step::Bad("a file entry for the root".into()));
            }
            tree.file(&comps, meta, entry, size)?;
        }
        T::Symlink => {
            let target = entry
                .link_name_bytes()
                .ok_or_else(|| Step::Bad("a symlink without a target".into()))?
                .into_owned();
            if comps.is_empty() {
                return Err(Step::Bad("a symlink entry for the root".into()));
            }
            tree.symlink(&comps, meta, &target)?;
        }
        T::Link => {
            let raw = entry
                .link_name_bytes()
                .ok_or_else(|| Step::Bad("a hard link without a target".into()))?
                .into_owned();
            let target = clean(&raw).map_err(|r| {
                Step::Bad(format!(
                    "hard link target {:?}: {r} is not allowed",
                    String::from_utf8_lossy(&raw)
                ))
            })?;
            if comps.is_empty() || target.is_empty() {
                return Err(Step::Bad("a hard link to or as the root".into()));
            }
            tree.hardlink(&comps, &target)?;
        }
        T::Char | T::Block | T::Fifo => {
            let what = match kind {
                T::Char => "character device",
                T::Block => "block device",
                _ => "fifo",
            };
            tracing::warn!(path = %show(&comps), kind = what, "skipping: an index cannot hold it");
            totals.skipped.push((show(&comps), what));
        }
        other => {
            return Err(Step::Bad(format!("unsupported tar entry type {other:?}")));
        }
    }
    Ok(())
}

//! Squashfs and Apptainer SIF files.
//!
//! A squashfs is read through `sqfs2tar` (Debian's `squashfs-tools-ng`, installed by
//! `scripts/deps.sh`): it writes the filesystem as a tar stream with owners, modes, mtimes
//! and hard links, which then goes through the same checked layer reader as OCI layers
//! (so the one fuzzed, bounded path unpacks every format).
//!
//! A SIF file is a global header, a table of descriptors and data objects; the image's
//! root filesystem is the descriptor of type partition (`0x4004`) whose filesystem is
//! squashfs (1), the primary system partition (type 2) first. Only that table is read
//! here (layout as in sylabs/sif: a 128-byte header, then 585-byte descriptors), every
//! offset checked against the file's size; the partition is copied out to a file for
//! `sqfs2tar`.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::Error;

/// squashfs's magic number, `hsqs`.
pub(crate) const SQUASHFS_MAGIC: &[u8; 4] = b"hsqs";
/// Where a SIF file says what it is.
pub(crate) const SIF_MAGIC_AT: u64 = 32;
/// What it says.
pub(crate) const SIF_MAGIC: &[u8; 9] = b"SIF_MAGIC";

const HEADER_LEN: usize = 128;
const DESCR_LEN: u64 = 585;
const DATA_PARTITION: i32 = 0x4004;
const FS_SQUASH: i32 = 1;
const PART_PRIMSYS: i32 = 2;
/// The most descriptors read (Apptainer makes 48).
const MAX_DESCRIPTORS: u64 = 4096;

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(a)
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_le_bytes(a)
}

/// The offset and length of the squashfs partition of a SIF file's bytes (header and
/// descriptor table given by `read_at`, the file `len` bytes long).
pub(crate) fn sif_partition(
    read_at: &dyn Fn(&mut [u8], u64) -> std::io::Result<()>,
    len: u64,
) -> Result<(u64, u64), Error> {
    let bad = |why: String| Error::Format(format!("SIF: {why}"));
    let mut h = [0u8; HEADER_LEN];
    read_at(&mut h, 0).map_err(|e| bad(format!("header: {e}")))?;
    if &h[32..41] != SIF_MAGIC {
        return Err(bad("no SIF_MAGIC".into()));
    }
    let total = i64_at(&h, 88);
    let descroff = i64_at(&h, 96);
    let (Ok(total), Ok(descroff)) = (u64::try_from(total), u64::try_from(descroff)) else {
        return Err(bad("negative descriptor count or offset".into()));
    };
    if total > MAX_DESCRIPTORS {
        return Err(bad(format!("{total} descriptors, above {MAX_DESCRIPTORS}")));
    }
    if descroff
        .checked_add(total * DESCR_LEN)
        .is_none_or(|end| end > len)
    {
        return Err(bad(
            "the descriptor table is past the end of the file".into()
        ));
    }
    let mut best: Option<(bool, u64, u64)> = None;
    let mut d = vec![0u8; DESCR_LEN as usize];
    for i in 0..total {
        read_at(&mut d, descroff + i * DESCR_LEN)
            .map_err(|e| bad(format!("descriptor {i}: {e}")))?;
        let used = d[4] != 0;
        if !used || i32_at(&d, 0) != DATA_PARTITION || i32_at(&d, 201) != FS_SQUASH {
            continue;
        }
        let (off, size) = (i64_at(&d, 17), i64_at(&d, 25));
        let (Ok(off), Ok(size)) = (u64::try_from(off), u64::try_from(size)) else {
            return Err(bad(format!("descriptor {i}: negative offset or size")));
        };
        if off.checked_add(size).is_none_or(|end| end > len) || size == 0 {
            return Err(bad(format!(
                "descriptor {i}: the partition is outside the file"
            )));
        }
        let primary = i32_at(&d, 205) == PART_PRIMSYS;
        if best.is_none_or(|(p, _, _)| primary && !p) {
            best = Some((primary, off, size));
        }
    }
    let (_, off, size) = best.ok_or_else(|| bad("no squashfs partition".into()))?;
    Ok((off, size))
}

/// Copies the SIF file's squashfs partition to `out`.
pub(crate) fn extract_sif(sif: &Path, out: &Path) -> Result<(), Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let f = File::open(sif).map_err(io(sif))?;
    let len = f.metadata().map_err(io(sif))?.len();
    let (off, size) = sif_partition(&|buf, at| f.read_exact_at(buf, at), len)?;
    let mut dst = File::create(out).map_err(io(out))?;
    let mut src = f.try_clone().map_err(io(sif))?;
    std::io::Seek::seek(&mut src, std::io::SeekFrom::Start(off)).map_err(io(sif))?;
    let copied = std::io::copy(&mut src.take(size), &mut dst).map_err(io(out))?;
    if copied != size {
        return Err(Error::Format("SIF: the partition is cut short".into()));
    }
    Ok(())
}

/// A running `sqfs2tar` whose stdout is the squashfs's tree as a tar stream.
pub(crate) struct Sqfs2tar {
    child: std::process::Child,
}

impl Sqfs2tar {
    /// Starts `sqfs2tar` on `image`.
    pub(crate) fn start(image: &Path) -> Result<(Self, std::process::ChildStdout), Error> {
        let mut child = Command::new("sqfs2tar")
            // Keep the root's metadata (as `./`), no extended attributes.
            .args(["--root-becomes", ".", "--no-xattr"])
            .arg(image)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Tool(format!(
                    "cannot run sqfs2tar ({e}): install squashfs-tools-ng (scripts/deps.sh)"
                ))
            })?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| Error::Tool("sqfs2tar: no stdout".into()))?;
        Ok((Self { child }, out))
    }

    /// Waits for it and fails with its stderr if it failed.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let status = self
            .child
            .wait()
            .map_err(|e| Error::Tool(format!("sqfs2tar: {e}")))?;
        if !status.success() {
            return Err(Error::Tool(format!(
                "sqfs2tar failed ({status}): {}",
                err.trim()
            )));
        }
        Ok(())
    }
}

impl Drop for Sqfs2tar {
    fn drop(&mut self) {
        // A layer error leaves it blocked on a full pipe: end it (our own child).
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sif(descriptors: &[(i32, bool, i32, i32, i64, i64)], len: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[32..41].copy_from_slice(SIF_MAGIC);
        b[88..96].copy_from_slice(&(descriptors.len() as i64).to_le_bytes());
        b[96..104].copy_from_slice(&128i64.to_le_bytes());
        for (i, &(dt, used, fs, pt, off, size)) in descriptors.iter().enumerate() {
            let at = 128 + i * DESCR_LEN as usize;
            b[at..at + 4].copy_from_slice(&dt.to_le_bytes());
            b[at + 4] = u8::from(used);
            b[at + 17..at + 25].copy_from_slice(&off.to_le_bytes());
            b[at + 25..at + 33].copy_from_slice(&size.to_le_bytes());
            b[at + 201..at + 205].copy_from_slice(&fs.to_le_bytes());
            b[at + 205..at + 209].copy_from_slice(&pt.to_le_bytes());
        }
        b.resize(len as usize, 0);
        b
    }

    fn find(b: &[u8]) -> Result<(u64, u64), Error> {
        let read = |buf: &mut [u8], at: u64| {
            let at = at as usize;
            let src = b
                .get(at..at + buf.len())
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        };
        sif_partition(&read, b.len() as u64)
    }

    #[test]
    fn the_primary_squashfs_partition_is_found() {
        let b = sif(
            &[
                (0x4001, true, 0, 0, 4096, 10),
                (DATA_PARTITION, true, FS_SQUASH, 1, 5000, 100),
                (DATA_PARTITION, true, FS_SQUASH, PART_PRIMSYS, 6000, 200),
                (DATA_PARTITION, false, FS_SQUASH, PART_PRIMSYS, 7000, 200),
            ],
            8192,
        );
        assert_eq!(find(&b).expect("found"), (6000, 200));
    }

    #[test]
    fn out_of_bounds_and_missing_partitions_are_refused() {
        for d in [
            (DATA_PARTITION, true, FS_SQUASH, PART_PRIMSYS, 8000, 500),
            (DATA_PARTITION, true, FS_SQUASH, PART_PRIMSYS, -1, 5),
            (
                DATA_PARTITION,
                true,
                FS_SQUASH,
                PART_PRIMSYS,
                i64::MAX,
                i64::MAX,
            ),
            (DATA_PARTITION, true, 2, PART_PRIMSYS, 5000, 5),
        ] {
            assert!(find(&sif(&[d], 8192)).is_err(), "{d:?}");
        }
        let mut b = sif(&[], 8192);
        b[88..96].copy_from_slice(&1_000_000i64.to_le_bytes());
        assert!(find(&b).is_err());
        b[88..96].copy_from_slice(&20i64.to_le_bytes());
        assert!(find(&b[..4096]).is_err(), "a table past the end");
        assert!(find(&[0u8; 200]).is_err(), "no magic");
    }
}

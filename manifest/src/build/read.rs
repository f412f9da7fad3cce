//! Reading the layer's file content: each planned read becomes an inline byte string, a
//! hole, or a chunk hashed, compressed and handed to the sink (run in parallel, one read
//! buffer per worker thread). Decides nothing about the index's shape: the walk assembles.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::walk::Work;
use super::{BuildOptions, BuildProgress, ChunkSink, changed, io_err};
use crate::Error;
use crate::chunk::{StoredForm, encode_chunk};
use crate::ids::{ChunkId, StoredHash};

/// What one read found.
pub(super) enum Outcome {
    Inline(Box<[u8]>),
    Hole,
    Chunk {
        id: ChunkId,
        plain_len: u32,
        stored_len: u32,
        stored_hash: Option<StoredHash>,
        new: bool,
    },
}

/// Reads one planned piece of a file: its inline bytes, a hole, or a chunk the sink has
/// (or now has).
pub(super) fn process(
    w: &Work,
    paths: &HashMap<u32, PathBuf>,
    opts: &BuildOptions,
    sink: &dyn ChunkSink,
    progress: &dyn BuildProgress,
) -> Result<Outcome, Error> {
    match *w {
        Work::Inline { entry, size } => {
            let path = &paths[&entry];
            let mut buf = Vec::with_capacity(size as usize);
            open_walked(path)?
                .take(size + 1)
                .read_to_end(&mut buf)
                .map_err(io_err(path))?;
            if buf.len() as u64 != size {
                return Err(changed(path));
            }
            progress.advance(size);
            Ok(Outcome::Inline(buf.into()))
        }
        Work::Chunk {
            entry,
            off,
            len,
            sparse,
        } => {
            let path = &paths[&entry];
            let file = open_walked(path)?;
            // A file with all its blocks has no holes: skip the lseek (one syscall per
            // chunk, a tenth of the work for a small file). All-zero chunks are still
            // found below, so this is only ever a shortcut.
            let outcome = if sparse && is_hole(&file, off, len) {
                Outcome::Hole
            } else {
                // One read buffer per worker thread, reused: a fresh zeroed 1 MiB per chunk
                // costs a page fault per 4 KiB and a memset before the read overwrites it.
                READ_BUF.with_borrow_mut(|buf| {
                    buf.resize(len as usize, 0);
                    let buf = &mut buf[..len as usize];
                    file.read_exact_at(buf, off).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            changed(path)
                        } else {
                            io_err(path)(e)
                        }
                    })?;
                    if buf.iter().all(|&b| b == 0) {
                        return Ok(Outcome::Hole);
                    }
                    let id = ChunkId::of(buf);
                    if let Some(form) = sink.stored_form(&id, len) {
                        return Ok(Outcome::Chunk {
                            id,
                            plain_len: len,
                            stored_len: form.len,
                            stored_hash: form.hash,
                            new: false,
                        });
                    }
                    let stored = encode_chunk(buf, opts.zstd_level);
                    sink.put(&id, &stored)
                        .map_err(|source| Error::Sink { id, source })?;
                    let form = StoredForm::of(&stored);
                    Ok::<_, Error>(Outcome::Chunk {
                        id,
                        plain_len: len,
                        stored_len: form.len,
                        stored_hash: form.hash,
                        new: true,
                    })
                })?
            };
            progress.advance(u64::from(len));
            Ok(outcome)
        }
    }
}

thread_local! {
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Opens a regular file found by the walk. One deleted or replaced by a symlink since is a
/// change, not an I/O failure; one replaced by a FIFO does not block the open (and fails
/// the stamp check after reading).
fn open_walked(path: &Path) -> Result<File, Error> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32)
            {
                changed(path)
            } else {
                io_err(path)(e)
            }
        })
}

/// Whether `[off, off+len)` lies entirely in a hole, by `SEEK_DATA`.
fn is_hole(file: &File, off: u64, len: u32) -> bool {
    use nix::unistd::{Whence, lseek};
    match lseek(file, off as i64, Whence::SeekData) {
        Ok(data) => data as u64 >= off + u64::from(len),
        Err(nix::errno::Errno::ENXIO) => true,
        Err(_) => false,
    }
}

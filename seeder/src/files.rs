//! Reading files named by users or found in stores, with bounds: such a path may be a
//! symlink to `/dev/zero`, a FIFO that never answers, or a huge file. Opening never blocks
//! (`O_NONBLOCK`), only regular files are read, symlinks are refused where they have no
//! business, and a read stops at the length the caller expects.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Whether the last component of a path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Follow it (paths users name, like `/etc/teesfs/hosts` linked elsewhere).
    Follow,
    /// Refuse it (store objects, which are never symlinks).
    Refuse,
}

fn kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The bytes of the regular file at `path`, at most `max` of them. Errors (the path is
/// the caller's to name): `InvalidInput` for anything but a regular file (or a symlink
/// with [`Symlinks::Refuse`]), `InvalidData` for a file longer than `max`.
pub fn read_limited(path: &Path, max: u64, symlinks: Symlinks) -> std::io::Result<Vec<u8>> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if symlinks == Symlinks::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) && symlinks == Symlinks::Refuse {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a symlink")
            } else {
                e
            }
        })?;
    read_file_limited(&file, max)
}

/// [`read_limited`] of a file already opened (e.g. `openat` relative to a directory's fd):
/// only a regular file is read, and at most `max` bytes of it.
pub fn read_file_limited(file: &std::fs::File, max: u64) -> std::io::Result<Vec<u8>> {
    let md = file.metadata()?;
    if !md.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("is {}, not a regular file", kind(md.file_type())),
        ));
    }
    if md.len() > max {
        return Err(too_long(max));
    }
    // Room for the whole file and one byte more (to notice a file that grew since its
    // metadata was read), read into uninitialised capacity: a zeroed buffer (`vec![0; n]`)
    // is a `calloc`, for which the allocator hands back freshly zeroed pages, and faulting
    // those in cost the pushing root more than the copy itself. The limit holds whatever
    // the file does meanwhile.
    let mut buf = Vec::with_capacity(md.len() as usize + 1);
    file.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(too_long(max));
    }
    Ok(buf)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_limited_to_string(
    path: &Path,
    max: u64,
    symlinks: Symlinks,
) -> std::io::Result<String> {
    String::from_utf8(read_limited(path, max, symlinks)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

fn too_long(max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("is larger than {max} bytes, the limit for this file"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_zero_fifos_symlinks_and_big_files_are_refused_without_reading_them() {
        let t = tempfile::tempdir().expect("tempdir");
        let e =
            read_limited(Path::new("/dev/zero"), 1 << 20, Symlinks::Follow).expect_err("device");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("character device"), "{e}");

        let fifo = t.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let e = read_limited(&fifo, 1 << 20, Symlinks::Follow).expect_err("fifo");
        assert!(e.to_string().contains("FIFO"), "{e}");

        let file = t.path().join("f");
        std::fs::write(&file, b"hello").expect("write");
        assert_eq!(
            read_limited(&file, 5, Symlinks::Refuse).expect("fits"),
            b"hello"
        );
        let e = read_limited(&file, 4, Symlinks::Refuse).expect_err("too big");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);

        let link = t.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        let e = read_limited(&link, 1 << 20, Symlinks::Refuse).expect_err("symlink");
        assert!(e.to_string().contains("symlink"), "{e}");
        let e = read_limited(&link, 1 << 20, Symlinks::Follow).expect_err("followed to a device");
        assert!(e.to_string().contains("character device"), "{e}");
    }
}

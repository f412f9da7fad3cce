//! The mount table of a mount namespace, from `/proc/<pid>/mountinfo` (proc(5)): the one
//! parser of it in the crate. Mount points come back as paths with the kernel's octal
//! escapes (`\040` for a space, `\011`, `\012`, `\134`) undone, byte for byte, so a path
//! that is not UTF-8 survives. It reads; it never mounts or unmounts. [`Watch`] waits for
//! the table to change (the kernel wakes a poller of mountinfo on every mount and unmount).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, as this namespace sees it.
    pub mount_point: PathBuf,
    /// The file system type (`fuse`, `fuse.teesfs`, `overlay`, `tmpfs`, ...).
    pub fs_type: String,
    /// The mount source (the device, or the name given to mount(2)).
    pub source: String,
}

/// Parses mountinfo text; lines that do not have the documented shape are skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

/// The mounts of this process's mount namespace (`pid` `None`) or of process `pid`'s.
pub fn read(pid: Option<u32>) -> std::io::Result<Vec<Mount>> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/mountinfo"),
        None => "/proc/self/mountinfo".to_string(),
    };
    Ok(parse(&std::fs::read_to_string(path)?))
}

/// This namespace's mount table, opened to wait for changes.
pub struct Watch(std::fs::File);

impl Watch {
    /// Opens `/proc/self/mountinfo` for watching.
    pub fn new() -> std::io::Result<Self> {
        std::fs::File::open("/proc/self/mountinfo").map(Self)
    }

    /// Waits until the mount table changes or `timeout` passes (at most about a minute per
    /// call); returns whether it changed.
    pub fn changed(&mut self, timeout: std::time::Duration) -> std::io::Result<bool> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLPRI)];
        // A change seen by poll is consumed by it: the next poll waits for the next one.
        let n = poll(&mut fds, PollTimeout::from(ms)).map_err(std::io::Error::from)?;
        Ok(n > 0)
    }
}

fn parse_line(line: &str) -> Option<Mount> {
    // 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    let (head, tail) = line.split_once(" - ")?;
    let mount_point = head.split(' ').nth(4)?;
    let mut tail = tail.split(' ');
    let fs_type = tail.next()?;
    let source = tail.next().unwrap_or_default();
    Some(Mount {
        mount_point: PathBuf::from(OsString::from_vec(unescape(mount_point))),
        fs_type: String::from_utf8_lossy(&unescape(fs_type)).into_owned(),
        source: String::from_utf8_lossy(&unescape(source)).into_owned(),
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = u32::from(digits[0] - b'0') * 64
                    + u32::from(digits[1] - b'0') * 8
                    + u32::from(digits[2] - b'0');
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    /// A mount made while a watcher waits wakes it (root: CI fails here when not root).
    #[test]
    fn a_mount_wakes_the_watch() {
        if !nix::unistd::geteuid().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().to_path_buf();
        struct Unmount(std::path::PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let mut watch = Watch::new().expect("watch");
        let mounter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            nix::mount::mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            )
            .expect("mount tmpfs");
            Unmount(target)
        });
        let changed = watch.changed(Duration::from_secs(20)).expect("poll");
        let _guard = mounter.join().expect("mounter");
        assert!(changed, "the mount did not wake the watch");
        assert!(
            read(None)
                .expect("mountinfo")
                .iter()
                .any(|m| m.mount_point == dir.path())
        );
    }

    #[test]
    fn fields_and_escapes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse.teesfs teesfs rw\n\
                    37 35 0:5 / /x\\134y rw shared:2 - tmpfs tmp\\040fs rw\n\
                    garbage line\n\
                    38 35 0:6 / /plain rw - overlay overlay rw,lowerdir=/a:/b\n";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, Path::new("/mnt/a b"));
        assert_eq!(m[0].fs_type, "fuse.teesfs");
        assert_eq!(m[1].mount_point, Path::new("/x\\y"));
        assert_eq!(m[1].source, "tmp fs");
        assert_eq!(m[2].mount_point, Path::new("/plain"));
        assert_eq!(m[2].fs_type, "overlay");
    }

    #[test]
    fn incomplete_or_out_of_range_escapes_stay_as_they_are() {
        assert_eq!(unescape("/end\\04"), b"/end\\04");
        assert_eq!(unescape("/big\\777"), b"/big\\777");
        assert_eq!(unescape("/tab\\011x"), b"/tab\tx");
    }

    #[test]
    fn this_process_has_a_root_mount() {
        let m = read(None).expect("mountinfo");
        assert!(m.iter().any(|m| m.mount_point == Path::new("/")), "{m:?}");
    }
}

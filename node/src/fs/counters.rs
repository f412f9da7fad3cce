//! Counts of the requests a mount answers, by kind, and of how reads were served: what
//! the read path costs in round trips to the daemon, for tests and the read-path
//! benchmark. Counting is one relaxed atomic add per request; nothing here decides
//! anything.

use std::sync::atomic::{AtomicU64, Ordering};

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A lookup of a name the layer has.
    Lookup,
    /// A lookup of a name the layer lacks (answered with a cacheable negative entry).
    LookupAbsent,
    /// Attributes asked for.
    Getattr,
    /// A symlink read.
    Readlink,
    /// An open served by the daemon's reads (the page cache keeps what it reads).
    Open,
    /// An open of a complete file, offered to the kernel for passthrough (served by the
    /// daemon if the copy cannot be made).
    OpenPassthrough,
    /// A read answered on the FUSE thread, from cached or local chunks.
    ReadNow,
    /// A read that went to a task (a chunk to fetch and decode, or one to wait for).
    ReadSlow,
    /// A handle released.
    Release,
    /// A flush (answered ENOSYS once, so the kernel stops sending them).
    Flush,
    /// An ioctl (isatty probes).
    Ioctl,
    /// A directory listing page (plain or with attributes).
    Readdir,
    /// An extended attribute asked for or listed.
    Xattr,
    /// An access check.
    Access,
    /// Anything else (statfs, opendir).
    Other,
}

const OPS: usize = 15;

/// The live counters of one mount.
#[derive(Debug, Default)]
pub(crate) struct FsCounters {
    ops: [AtomicU64; OPS],
    read_bytes: AtomicU64,
    prefilled: AtomicU64,
}

/// A snapshot of [`FsCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsCount {
    /// Lookups of names the layer has.
    pub lookup: u64,
    /// Lookups of names the layer lacks.
    pub lookup_absent: u64,
    /// Getattr requests.
    pub getattr: u64,
    /// Readlink requests.
    pub readlink: u64,
    /// Opens served by the daemon.
    pub open: u64,
    /// Opens handed to the kernel for passthrough.
    pub open_passthrough: u64,
    /// Reads answered on the FUSE thread, from cached or local chunks.
    pub read_now: u64,
    /// Reads that went to a task.
    pub read_slow: u64,
    /// Bytes the daemon returned to reads.
    pub read_bytes: u64,
    /// Files put into the page cache as they were opened (not requests: their reads
    /// that never came).
    pub prefilled: u64,
    /// Releases.
    pub release: u64,
    /// Flushes.
    pub flush: u64,
    /// Ioctls.
    pub ioctl: u64,
    /// Directory listing pages.
    pub readdir: u64,
    /// Extended attribute requests.
    pub xattr: u64,
    /// Access checks.
    pub access: u64,
    /// Other requests.
    pub other: u64,
}

impl FsCount {
    /// Every request counted.
    pub fn requests(&self) -> u64 {
        self.lookup
            + self.lookup_absent
            + self.getattr
            + self.readlink
            + self.open
            + self.open_passthrough
            + self.reads()
            + self.release
            + self.flush
            + self.ioctl
            + self.readdir
            + self.xattr
            + self.access
            + self.other
    }

    /// Reads served by the daemon.
    pub fn reads(&self) -> u64 {
        self.read_now + self.read_slow
    }
}

impl FsCounters {
    /// Counts one request.
    pub fn count(&self, op: Op) {
        self.ops[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a file put into the page cache at its open.
    pub fn prefilled(&self) {
        self.prefilled.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts bytes returned to a read.
    pub fn read_bytes(&self, n: usize) {
        self.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn snapshot(&self) -> FsCount {
        let g = |op: Op| self.ops[op as usize].load(Ordering::Relaxed);
        FsCount {
            lookup: g(Op::Lookup),
            lookup_absent: g(Op::LookupAbsent),
            getattr: g(Op::Getattr),
            readlink: g(Op::Readlink),
            open: g(Op::Open),
            open_passthrough: g(Op::OpenPassthrough),
            read_now: g(Op::ReadNow),
            read_slow: g(Op::ReadSlow),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            prefilled: self.prefilled.load(Ordering::Relaxed),
            release: g(Op::Release),
            flush: g(Op::Flush),
            ioctl: g(Op::Ioctl),
            readdir: g(Op::Readdir),
            xattr: g(Op::Xattr),
            access: g(Op::Access),
            other: g(Op::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_its_own_counter() {
        let c = FsCounters::default();
        let all = [
            Op::Lookup,
            Op::LookupAbsent,
            Op::Getattr,
            Op::Readlink,
            Op::Open,
            Op::OpenPassthrough,
            Op::ReadNow,
            Op::ReadSlow,
            Op::Release,
            Op::Flush,
            Op::Ioctl,
            Op::Readdir,
            Op::Xattr,
            Op::Access,
            Op::Other,
        ];
        assert_eq!(all.len(), OPS);
        for (i, op) in all.iter().enumerate() {
            for _ in 0..=i {
                c.count(*op);
            }
        }
        let s = c.snapshot();
        let got = [
            s.lookup,
            s.lookup_absent,
            s.getattr,
            s.readlink,
            s.open,
            s.open_passthrough,
            s.read_now,
            s.read_slow,
            s.release,
            s.flush,
            s.ioctl,
            s.readdir,
            s.xattr,
            s.access,
            s.other,
        ];
        assert_eq!(got, std::array::from_fn(|i| i as u64 + 1));
        assert_eq!(s.requests(), (1..=OPS as u64).sum::<u64>());
    }
}

//! Serving a FUSE connection that is already up: a restarted daemon takes a job's mount
//! back from the keeper ([`crate::process`]) and answers its requests where the dead daemon
//! left off.
//!
//! fuser 0.18 serves a `/dev/fuse` descriptor only after a `FUSE_INIT` handshake
//! (`Session::from_fd`), which a live connection never sends again. So the session is made
//! over one end of a socket pair into which [`init_request`] wrote the `FUSE_INIT` the
//! kernel sent at the first mount (its protocol version and capabilities, kept in the
//! job's record as [`InitParams`]); the session's answer stays in the pair, never reaching
//! the kernel, whose connection keeps what it negotiated then. Before the session runs, its
//! descriptor is replaced (`dup3`) by the live `/dev/fuse` one, so its readers (and the
//! clones fuser makes for its worker threads when it starts) read the mount's requests.
//! Then [`resend`] asks the kernel (Linux 6.9 and later) to queue again the requests the
//! dead daemon had read and never answered, so a read in flight at a crash completes.
//!
//! This module knows the FUSE wire layout of those two messages and nothing else.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use fuser::{Config, Filesystem, Session};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};

/// What the kernel offered in its `FUSE_INIT` at a mount's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitParams {
    /// Protocol major version (7).
    pub major: u32,
    /// Protocol minor version.
    pub minor: u32,
    /// The capability flags (`FUSE_INIT_EXT`'s second word included).
    pub flags: u64,
}

/// `FUSE_INIT`'s opcode.
const FUSE_INIT: u32 = 26;
/// `struct fuse_in_header`.
const IN_HEADER: usize = 40;
/// `struct fuse_init_in` (7.36 and later: `flags2` and reserved words).
const INIT_IN: usize = 64;
/// The flag that says `flags2` carries the high 32 capability bits.
const FUSE_INIT_EXT: u64 = 1 << 30;
/// `FUSE_NOTIFY_RESEND`: re-queue the requests read and not answered (Linux 6.9).
const FUSE_NOTIFY_RESEND: i32 = 7;
/// Readahead offered in the synthetic `FUSE_INIT`: only what the filesystem asks back is
/// affected, and that answer never reaches the kernel.
const MAX_READAHEAD: u32 = 1 << 20;

/// The `FUSE_INIT` request the kernel sends with `p`, under the request id `unique`.
pub fn init_request(p: &InitParams, unique: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(IN_HEADER + INIT_IN);
    let len = u32::try_from(IN_HEADER + INIT_IN).expect("a constant that fits");
    b.extend(len.to_ne_bytes());
    b.extend(FUSE_INIT.to_ne_bytes());
    b.extend(unique.to_ne_bytes());
    b.extend(0u64.to_ne_bytes()); // nodeid
    b.extend([0u8; 16]); // uid, gid, pid, total_extlen and padding
    let flags = p.flags | FUSE_INIT_EXT;
    for word in [
        p.major,
        p.minor,
        MAX_READAHEAD,
        (flags & 0xffff_ffff) as u32,
        (flags >> 32) as u32,
    ] {
        b.extend(word.to_ne_bytes());
    }
    b.resize(IN_HEADER + INIT_IN, 0); // the reserved words
    b
}

/// A fuser session over the live FUSE connection `fuse`, made with a synthetic handshake
/// from `init` (the filesystem's `init` runs as at the first mount). Not started: its
/// descriptor already reads `fuse`.
pub fn session_on<FS: Filesystem>(
    fs: FS,
    fuse: BorrowedFd<'_>,
    init: &InitParams,
    config: Config,
) -> io::Result<Session<FS>> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    nix::unistd::write(&ours, &init_request(init, 1))?;
    let acl = config.acl;
    let session = Session::from_fd(fs, theirs, acl, config)?;
    let mut reply = [0u8; 512];
    let n = nix::unistd::read(&ours, &mut reply)?;
    check_init_reply(&reply[..n])?;
    replace_fd(fuse, session.as_fd().as_raw_fd())?;
    Ok(session)
}

/// The session's answer to the synthetic `FUSE_INIT` must be a success for request 1.
fn check_init_reply(reply: &[u8]) -> io::Result<()> {
    let word = |at: usize| reply.get(at..at + 4).map(|w| [w[0], w[1], w[2], w[3]]);
    let (Some(error), Some(unique)) = (word(4), reply.get(8..16)) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short answer to FUSE_INIT",
        ));
    };
    let error = i32::from_ne_bytes(error);
    if error != 0 || unique != 1u64.to_ne_bytes() {
        return Err(io::Error::other(format!(
            "the filesystem refused the FUSE_INIT it was given (error {error})"
        )));
    }
    Ok(())
}

/// Makes the descriptor number `target` (the session's, which nothing reads yet) refer to
/// `with`'s open file.
#[allow(unsafe_code)] // nix's safe dup3 needs the `OwnedFd` of `target`, which fuser keeps.
fn replace_fd(with: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: `target` is open and owned by the session, which outlives this call and has
    // not started; dup3 atomically closes it and makes it a duplicate of `with`, so the
    // session's owner closes exactly one descriptor later, as before.
    let rc = unsafe { libc::dup3(with.as_raw_fd(), target, libc::O_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to queue again every request of the connection `fuse` that a reader
/// took and never answered (`FUSE_NOTIFY_RESEND`; Linux 6.9 and later). On older kernels
/// it fails (EINVAL), and those requests wait until the job's mount is gone.
pub fn resend(fuse: BorrowedFd<'_>) -> io::Result<()> {
    let mut b = Vec::with_capacity(16);
    b.extend(16u32.to_ne_bytes());
    b.extend(FUSE_NOTIFY_RESEND.to_ne_bytes());
    b.extend(0u64.to_ne_bytes());
    nix::unistd::write(fuse, &b)?;
    Ok(())
}

/// A duplicate of `fd` that closes on exec.
pub fn dup(fd: impl AsFd) -> io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what its `init` saw.
    struct Seen(Arc<Mutex<Option<(u32, u32, u64)>>>);

    impl Filesystem for Seen {
        fn init(
            &mut self,
            _req: &fuser::Request,
            config: &mut fuser::KernelConfig,
        ) -> io::Result<()> {
            let v = config.kernel_abi();
            *self.0.lock().expect("lock") = Some((v.0, v.1, config.capabilities().bits()));
            Ok(())
        }
    }

    #[test]
    fn the_synthetic_init_is_a_well_formed_request() {
        let p = InitParams {
            major: 7,
            minor: 45,
            flags: (1 << 33) | (1 << 3),
        };
        let b = init_request(&p, 9);
        assert_eq!(b.len(), 104);
        assert_eq!(b[0..4], 104u32.to_ne_bytes());
        assert_eq!(b[4..8], 26u32.to_ne_bytes());
        assert_eq!(b[8..16], 9u64.to_ne_bytes());
        assert_eq!(b[40..44], 7u32.to_ne_bytes());
        assert_eq!(b[44..48], 45u32.to_ne_bytes());
        assert_eq!(b[52..56], ((1u32 << 30) | (1 << 3)).to_ne_bytes());
        assert_eq!(b[56..60], 2u32.to_ne_bytes());
    }

    /// The handshake fuser insists on is satisfied by the synthetic request: the
    /// filesystem sees the kernel's version and capabilities (the second word too), and
    /// the session's descriptor is the one given afterwards.
    #[test]
    fn a_session_is_made_over_a_given_descriptor_with_the_kernels_parameters() {
        let p = InitParams {
            major: 7,
            minor: 45,
            flags: (1 << 33) | (1 << 3),
        };
        let seen = Arc::new(Mutex::new(None));
        let (a, _b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("pair");
        let session =
            session_on(Seen(seen.clone()), a.as_fd(), &p, Config::default()).expect("session");
        assert_eq!(*seen.lock().expect("lock"), Some((7, 45, p.flags)));
        // The session's descriptor is now a duplicate of `a`: same socket, same inode.
        let ino = |fd: BorrowedFd<'_>| nix::sys::stat::fstat(fd).expect("fstat").st_ino;
        assert_eq!(ino(session.as_fd()), ino(a.as_fd()));
    }
}

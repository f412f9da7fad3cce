//! The keeper of a daemon's FUSE connections (`teesfs keep-fds`): a small process that holds
//! a duplicate of each mounted job's `/dev/fuse` descriptor, so a mount outlives the daemon
//! that made it. The kernel keeps a FUSE connection up while any process holds its
//! descriptor: with the daemon dead (a crash, an upgrade, `systemctl restart`), the job's
//! requests wait in the kernel instead of failing with ENOTCONN, and the next daemon on the
//! same state directory takes the descriptors back ([`Keeper::held`]) and serves them
//! ([`crate::fuse`]).
//!
//! The keeper listens on `<state-dir>/keeper.sock` (its pid in `keeper.pid`; a `SOCK_SEQPACKET` socket, mode 0600,
//! and only callers of its own uid are served: `SO_PEERCRED`). It drops a descriptor when
//! the daemon says the job is released, or when the connection ends under it (the mount is
//! gone: the descriptor reports `POLLERR`), and exits once it holds none and no daemon is
//! connected. It never reads or writes a FUSE descriptor, and it knows nothing of jobs but
//! the key each descriptor is held under.
//!
//! Messages, one per packet: `H<key>` with one descriptor (hold it, in place of another of
//! that key), `D<key>` (drop it), both answered `K`; `L` (list), answered `F<key>` with a
//! descriptor for each held one, then `E`.

use std::io::{BufRead, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr, accept4, bind, connect, getsockopt, listen, recvmsg, sendmsg, socket, sockopt,
};

use crate::Error;

/// Locks `m`, even if a holder panicked (the socket is still usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The keeper's socket in a state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("keeper.sock")
}

/// Largest packet: a key is a job id, far shorter.
const PACKET: usize = 4096;

/// How long a keeper nobody connects to waits before it exits.
const FIRST_CLIENT: u16 = 60_000;

fn sys(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> Error {
    let what = what.into();
    move |e| Error::Sys {
        what,
        source: std::io::Error::from(e),
    }
}

/// A descriptor the kernel just made for this process (by `accept` or in an `SCM_RIGHTS`
/// message), owned by nothing else yet.
#[allow(unsafe_code)] // nix hands such descriptors out raw; std has no safe constructor.
fn own(fd: RawFd) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` was returned to this process by accept4(2) or recvmsg(2) a moment ago,
    // is open, and no other value owns or closes it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Sends one packet, with `fd` attached if given.
fn send(sock: BorrowedFd<'_>, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> nix::Result<()> {
    let fds;
    let cmsgs: &[ControlMessage<'_>] = match fd {
        Some(f) => {
            fds = [f.as_raw_fd()];
            &[ControlMessage::ScmRights(&fds)]
        }
        None => &[],
    };
    let iov = [IoSlice::new(bytes)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None).map(drop)
}

/// Receives one packet and the descriptors attached to it; an empty packet is the end.
fn recv(sock: BorrowedFd<'_>) -> nix::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; PACKET];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            fds.extend(raw.into_iter().map(own));
        }
    }
    let n = msg.bytes;
    buf.truncate(n);
    Ok((buf, fds))
}

/// A daemon's connection to its state directory's keeper.
pub struct Keeper {
    sock: Mutex<OwnedFd>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keeper")
    }
}

impl Keeper {
    /// Connects to the keeper of `state_dir`, starting one (`program keep-fds --state-dir
    /// DIR`, in its own process group, logging to `<state-dir>/keeper.log`) if none runs.
    pub fn open(state_dir: &Path, program: &Path) -> Result<Keeper, Error> {
        let path = socket_path(state_dir);
        if let Ok(k) = Self::connect(&path) {
            tracing::info!(socket = %path.display(), "connected to the running keeper of the jobs' FUSE connections");
            return Ok(k);
        }
        spawn(state_dir, program)?;
        Self::connect(&path)
    }

    fn connect(path: &Path) -> Result<Keeper, Error> {
        let what = format!("connecting to the keeper at {}", path.display());
        let fd = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(sys(&what))?;
        let addr = UnixAddr::new(path).map_err(sys(&what))?;
        connect(fd.as_raw_fd(), &addr).map_err(sys(&what))?;
        Ok(Keeper {
            sock: Mutex::new(fd),
        })
    }

    fn ask(&self, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<(), Error> {
        let sock = lock(&self.sock);
        send(sock.as_fd(), bytes, fd).map_err(sys("telling the keeper"))?;
        match recv(sock.as_fd()).map_err(sys("hearing the keeper"))? {
            (k, _) if k == b"K" => Ok(()),
            (other, _) => Err(Error::Sys {
                what: format!("the keeper answered {:?}", String::from_utf8_lossy(&other)),
                source: std::io::Error::from(std::io::ErrorKind::InvalidData),
            }),
        }
    }

    /// Has the keeper hold (a duplicate of) `fd` under `key`, replacing one held before.
    pub fn hold(&self, key: &str, fd: BorrowedFd<'_>) -> Result<(), Error> {
        self.ask(&[b"H", key.as_bytes()].concat(), Some(fd))
    }

    /// Has the keeper drop what it holds under `key` (nothing if it holds nothing).
    pub fn forget(&self, key: &str) -> Result<(), Error> {
        self.ask(&[b"D", key.as_bytes()].concat(), None)
    }

    /// Duplicates of every descriptor the keeper holds, by key (it goes on holding them).
    pub fn held(&self) -> Result<Vec<(String, OwnedFd)>, Error> {
        let sock = lock(&self.sock);
        send(sock.as_fd(), b"L", None).map_err(sys("asking the keeper"))?;
        let mut out = Vec::new();
        loop {
            let (bytes, mut fds) = recv(sock.as_fd()).map_err(sys("hearing the keeper"))?;
            match bytes.split_first() {
                Some((b'F', key)) if fds.len() == 1 => {
                    let key = String::from_utf8_lossy(key).into_owned();
                    out.extend(fds.pop().map(|fd| (key, fd)));
                }
                Some((b'E', _)) => return Ok(out),
                _ => {
                    return Err(Error::Sys {
                        what: "the keeper's list is malformed".into(),
                        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
                    });
                }
            }
        }
    }
}

/// Starts a keeper for `state_dir` and waits for its `ready` line (it listens then).
fn spawn(state_dir: &Path, program: &Path) -> Result<(), Error> {
    use std::os::unix::process::CommandExt;
    let io = |what: &str| {
        let what = format!("{what} (keeper {})", program.display());
        move |source| Error::Sys { what, source }
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join("keeper.log"))
        .map_err(io("opening keeper.log"))?;
    let mut child = std::process::Command::new(program)
        .arg("keep-fds")
        .arg("--state-dir")
        .arg(state_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        // Its own process group: a signal to the daemon's group (a terminal's Ctrl-C, a
        // supervisor killing the group) leaves the mounts' connections held.
        .process_group(0)
        .spawn()
        .map_err(io("starting the keeper"))?;
    let out = child.stdout.take().ok_or_else(|| Error::Sys {
        what: "the keeper's stdout".into(),
        source: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
    })?;
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .map_err(io("hearing the keeper start"))?;
    if line.trim() != "ready" {
        let _ = child.wait();
        return Err(Error::Sys {
            what: format!(
                "the keeper did not start; see {}",
                state_dir.join("keeper.log").display()
            ),
            source: std::io::Error::from(std::io::ErrorKind::NotConnected),
        });
    }
    tracing::info!(
        pid = child.id(),
        "started the keeper of the jobs' FUSE connections"
    );
    // Not waited for: it outlives this daemon on purpose (it is reaped by init).
    drop(child);
    Ok(())
}

/// The keeper's state: its listening socket, its clients and what it holds.
struct Held {
    listener: OwnedFd,
    clients: Vec<OwnedFd>,
    fds: Vec<(String, OwnedFd)>,
    served: bool,
}

/// Runs the keeper of `state_dir` until it holds nothing and no daemon is connected.
/// Prints `ready` on stdout once it listens.
pub fn serve(state_dir: &Path) -> Result<(), Error> {
    let path = socket_path(state_dir);
    let what = format!("listening at {}", path.display());
    let listener = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(sys(&what))?;
    let _ = std::fs::remove_file(&path);
    let addr = UnixAddr::new(&path).map_err(sys(&what))?;
    bind(listener.as_raw_fd(), &addr).map_err(sys(&what))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    }
    listen(&listener, Backlog::new(16).map_err(sys(&what))?).map_err(sys(&what))?;
    // Who holds the connections, for operators (and tests) that must end it.
    let pid_file = state_dir.join("keeper.pid");
    let _ = std::fs::write(&pid_file, format!("{}\n", std::process::id()));
    {
        use std::io::Write;
        // The daemon that started it waits for this line; a closed stdout changes nothing.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready").and_then(|()| out.flush());
    }
    tracing::info!(socket = %path.display(), pid = std::process::id(), "keeping the jobs' FUSE connections");
    let mut k = Held {
        listener,
        clients: Vec::new(),
        fds: Vec::new(),
        served: false,
    };
    while !(k.served && k.clients.is_empty() && k.fds.is_empty()) {
        if !k.step()? {
            tracing::info!("no daemon connected within a minute; exiting");
            break;
        }
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&pid_file);
    tracing::info!("holding nothing and serving no daemon: exiting");
    Ok(())
}

impl Held {
    /// Waits for one round of events and handles them; `false` if nobody ever connected
    /// in time.
    fn step(&mut self) -> Result<bool, Error> {
        let mut gone_clients = Vec::new();
        let mut gone_fds = Vec::new();
        let accept;
        {
            let mut polls = vec![PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
            polls.extend((self.clients.iter()).map(|c| PollFd::new(c.as_fd(), PollFlags::POLLIN)));
            // No events asked: a FUSE descriptor reports only its end (POLLERR).
            polls
                .extend((self.fds.iter()).map(|(_, f)| PollFd::new(f.as_fd(), PollFlags::empty())));
            let timeout = if self.served {
                PollTimeout::NONE
            } else {
                PollTimeout::from(FIRST_CLIENT)
            };
            match poll(&mut polls, timeout) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => return Ok(true),
                Err(e) => return Err(sys("waiting for the daemon and the mounts")(e)),
            }
            let ready = |p: &PollFd<'_>| p.revents().unwrap_or(PollFlags::empty());
            accept = !ready(&polls[0]).is_empty();
            let n = self.clients.len();
            for (i, p) in polls[1..=n].iter().enumerate() {
                if !ready(p).is_empty() {
                    gone_clients.push(i);
                }
            }
            for (i, p) in polls[n + 1..].iter().enumerate() {
                if !ready(p).is_empty() {
                    gone_fds.push(i);
                }
            }
        }
        for i in gone_fds.into_iter().rev() {
            let (key, _) = self.fds.remove(i);
            tracing::info!(
                key,
                "a held FUSE connection ended (its mount is gone): dropped"
            );
        }
        // Clients with something to say are answered; those whose connection ended go.
        for i in gone_clients.into_iter().rev() {
            if !self.answer(i) {
                self.clients.remove(i);
                tracing::debug!("a daemon disconnected");
            }
        }
        if accept {
            self.accept();
        }
        Ok(true)
    }

    /// Takes a new connection from a process of this keeper's own uid.
    fn accept(&mut self) {
        let fd = match accept4(self.listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
            Ok(fd) => own(fd),
            Err(e) => return tracing::warn!(error = %e, "accept failed"),
        };
        match getsockopt(&fd, sockopt::PeerCredentials) {
            Ok(c) if c.uid() == nix::unistd::geteuid().as_raw() => {
                self.served = true;
                self.clients.push(fd);
            }
            Ok(c) => tracing::warn!(
                uid = c.uid(),
                pid = c.pid(),
                "refused a caller of another uid"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot tell who connected"),
        }
    }

    /// Answers client `i`'s packet; `false` once its connection ended.
    fn answer(&mut self, i: usize) -> bool {
        let sock = self.clients[i].as_fd();
        let (bytes, mut fds) = match recv(sock) {
            Ok((b, _)) if b.is_empty() => return false,
            Ok(m) => m,
            Err(_) => return false,
        };
        let reply = match bytes.split_first() {
            Some((b'H', key)) if fds.len() == 1 => {
                let key = String::from_utf8_lossy(key).into_owned();
                self.fds.retain(|(k, _)| *k != key);
                tracing::info!(key, "holding a job's FUSE connection");
                self.fds.extend(fds.pop().map(|fd| (key, fd)));
                send(sock, b"K", None)
            }
            Some((b'D', key)) => {
                let key = String::from_utf8_lossy(key).into_owned();
                let before = self.fds.len();
                self.fds.retain(|(k, _)| *k != key);
                if self.fds.len() < before {
                    tracing::info!(key, "dropped a released job's FUSE connection");
                }
                send(sock, b"K", None)
            }
            Some((b'L', _)) => (self.fds.iter())
                .try_for_each(|(k, fd)| {
                    send(sock, &[b"F", k.as_bytes()].concat(), Some(fd.as_fd()))
                })
                .and_then(|()| send(sock, b"E", None)),
            _ => {
                tracing::warn!("a malformed request; closing its connection");
                return false;
            }
        };
        reply.is_ok()
    }
}

//! Mounting a layer: builds the tree and content layers, starts a fuser session with the
//! right options (read-only, nosuid, nodev, kernel permission checks), and unmounts cleanly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fuser::{Config, MountOption, SessionACL};
use manifest::{Index, IndexId};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::counters::{FsCount, FsCounters};
use super::data::Data;
use super::fuse::{LayerFs, PassthroughConfig};
use super::tree::Tree;
use crate::Error;
use crate::source::ChunkSource;
use keeper::fuse::InitParams;

/// How a layer is mounted.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Bytes of plain chunks kept in memory.
    pub cache_bytes: u64,
    /// Serve complete local files through kernel passthrough, materialised here.
    pub passthrough: Option<PassthroughConfig>,
    /// FUSE worker threads.
    pub threads: usize,
    /// Record opens, failed lookups and reads that wait for a chunk (`teesfs record`, and
    /// the daemon's record of each job).
    pub recorder: Option<Arc<crate::fs::record::Recorder>>,
    /// Make the root directory this user's and closed to others (a job's owner): other
    /// users cannot enter the mount; root and the owner see the layer as it is below it.
    pub root_owner: Option<u32>,
    /// How long a read waits for a chunk before failing with EIO.
    pub read_timeout: std::time::Duration,
    /// Each observes how long each read that waits for a chunk waits (the daemon's
    /// metrics: the job's histogram and the node's).
    pub read_waits: Vec<prometheus_client::metrics::histogram::Histogram>,
    /// Make passthrough copies of the files this push needs to start as their chunks arrive
    /// ([`Data::arrived`]): a node's mount of a job, whose chunks come from the tree (not a
    /// mount of a store, where none arrive).
    pub ahead: Option<Arc<peertree::relay::Schedule>>,
    /// The mount may outlive this process (a keeper holds its connection): every worker
    /// thread reads the one descriptor the keeper holds a copy of, so requests taken and
    /// not answered when the process dies stay queued there for the next daemon to have
    /// resent. A cloned descriptor per thread (faster) would fail its requests with
    /// ECONNABORTED as it closes with the process.
    pub outlive: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self {
            cache_bytes: 256 << 20,
            passthrough: None,
            threads: 4,
            recorder: None,
            root_owner: None,
            read_timeout: super::data::DEFAULT_READ_TIMEOUT,
            read_waits: Vec::new(),
            ahead: None,
            outlive: false,
        }
    }
}

/// A mounted layer. Dropping it unmounts (lazily if files are still open).
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
    data: Arc<Data>,
    passthrough_on: Arc<AtomicBool>,
    passthrough: Option<PassthroughConfig>,
    rt: Option<tokio::runtime::Runtime>,
    counters: Arc<FsCounters>,
    /// The mount's FUSE connection (a duplicate of the session's descriptor).
    fuse: OwnedFd,
    /// What the kernel offered at `FUSE_INIT`, once the session started.
    init: Arc<std::sync::OnceLock<InitParams>>,
    /// Served on a connection an earlier daemon made: fuser does not know the mount, so
    /// unmounting is done here.
    adopted: bool,
}

impl Mounted {
    /// The content layer (for statistics).
    pub fn data(&self) -> &Arc<Data> {
        &self.data
    }

    /// The requests the mount answered so far, by kind.
    pub fn counters(&self) -> FsCount {
        self.counters.snapshot()
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the kernel accepted passthrough for this mount.
    pub fn passthrough_active(&self) -> bool {
        self.passthrough_on
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the session ended on its own (someone ran `umount`).
    pub fn is_finished(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts now and waits for the session to end.
    pub fn unmount(mut self) -> Result<(), Error> {
        self.shutdown()
    }

    /// The mount's FUSE connection, for the keeper to hold.
    pub fn fuse_fd(&self) -> BorrowedFd<'_> {
        self.fuse.as_fd()
    }

    /// What the kernel offered at `FUSE_INIT` (`None` before the session started).
    pub fn init_params(&self) -> Option<InitParams> {
        self.init.get().copied()
    }

    /// Leaves the mount as it is for the next daemon (the keeper holds its connection):
    /// nothing of it is torn down, and it goes on answering until this process exits
    /// (which it must do next); requests left unanswered then wait in the kernel for the
    /// next daemon, which has them resent.
    pub fn leave(self) {
        tracing::info!(mountpoint = %self.mountpoint.display(), "left mounted for the next daemon");
        // Dropping any part would unmount it, or fail the requests it is answering (a
        // reply dropped unsent is an EIO): its session, runtime and threads end with the
        // process.
        std::mem::forget(self);
    }

    fn shutdown(&mut self) -> Result<(), Error> {
        let mounted = self.session.is_some();
        let adopted = self.adopted;
        let mountpoint = self.mountpoint.clone();
        let result = match self.session.take() {
            Some(s) if adopted => unmount_adopted(s, &mountpoint),
            Some(s) => s.umount_and_join().or_else(|e| {
                // Busy (a process still has a file open): detach so the mount disappears
                // from the namespace now and goes away when the last user closes.
                tracing::warn!(error = %e, mountpoint = %self.mountpoint.display(), "unmount busy; detaching");
                nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                    .map_err(std::io::Error::from)
            }),
            None => Ok(()),
        };
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        if mounted {
            let (c, d) = (self.counters.snapshot(), self.data.stats());
            tracing::info!(mountpoint = %self.mountpoint.display(), requests = c.requests(), counts = ?c, chunks = ?d, "unmounted");
        }
        // The mount is gone (or detached with files still open, whose copies stay until
        // closed): its copies go unless another mount uses them.
        if let Some(pt) = self.passthrough.take() {
            pt.copies.release(self.data.copy_user());
        }
        result.map_err(|source| Error::Mount {
            mountpoint: self.mountpoint.clone(),
            source,
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "unmount failed");
        }
    }
}

/// Unmounts a mount fuser did not make ([`adopt`]) and waits for its session to end; a
/// busy mount is detached instead, and its session ends when the last user closes.
fn unmount_adopted(s: fuser::BackgroundSession, mountpoint: &Path) -> std::io::Result<()> {
    use nix::mount::{MntFlags, umount2};
    match umount2(mountpoint, MntFlags::empty()) {
        Ok(()) => s.join(),
        Err(e) => {
            tracing::warn!(error = %e, mountpoint = %mountpoint.display(), "unmount busy; detaching");
            // Not joined: its session ends when the last file is closed.
            drop(s);
            umount2(mountpoint, MntFlags::MNT_DETACH).map_err(std::io::Error::from)
        }
    }
}

/// Why this process cannot mount FUSE filesystems itself, if it cannot: not root (a user
/// mounts through fusermount3 instead), or no `/dev/fuse`.
pub fn why_cannot_mount() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        Some("needs root to mount FUSE without fusermount (CI runs as root)")
    } else if !std::path::Path::new("/dev/fuse").exists() {
        Some("this kernel has no /dev/fuse")
    } else {
        None
    }
}

/// What a mount keeps of its layer's filesystem.
struct Prepared {
    rt: tokio::runtime::Runtime,
    data: Arc<Data>,
    passthrough_on: Arc<AtomicBool>,
    counters: Arc<FsCounters>,
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    init: Arc<std::sync::OnceLock<InitParams>>,
}

/// The layer's filesystem over `source` and the session's options.
fn prepare(
    index: Index,
    id: IndexId,
    source: Arc<dyn ChunkSource>,
    mountpoint: &Path,
    cfg: &MountConfig,
) -> Result<(LayerFs, Config, Prepared), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("teesfs-io")
        .enable_all()
        .build()
        .map_err(|source| Error::Mount {
            mountpoint: mountpoint.to_path_buf(),
            source,
        })?;
    let mut tree = Tree::new(index);
    tree.set_root_owner(cfg.root_owner);
    let tree = Arc::new(tree);
    let passthrough_on = Arc::new(AtomicBool::new(false));
    let mut data =
        Data::new(tree.clone(), source, cfg.cache_bytes).with_read_timeout(cfg.read_timeout);
    if let (Some(push), Some(pt)) = (&cfg.ahead, &cfg.passthrough) {
        data = data.with_ahead(push, pt.copies.clone(), pt.min_size);
    }
    let data = Arc::new(data);
    let fs = LayerFs::new(
        tree,
        data.clone(),
        rt.handle().clone(),
        cfg.passthrough.clone(),
        passthrough_on.clone(),
    )
    .with_recorder(cfg.recorder.clone())
    .with_read_waits(cfg.read_waits.clone());
    let root = nix::unistd::geteuid().is_root();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(format!("teesfs:{}", id.short())),
        MountOption::Subtype("teesfs".into()),
        MountOption::RO,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::DefaultPermissions,
    ];
    // Everyone on the node may read the layer (the kernel still checks modes); only root
    // can grant that without fusermount's user_allow_other.
    config.acl = if root {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = !cfg.outlive;
    let kept = Prepared {
        counters: fs.counters(),
        notifier: fs.notifier_slot(),
        init: fs.init_slot(),
        rt,
        data,
        passthrough_on,
    };
    Ok((fs, config, kept))
}

/// Mounts `index` at `mountpoint`, reading chunks from `source`.
pub fn mount(
    index: Index,
    id: IndexId,
    source: Arc<dyn ChunkSource>,
    mountpoint: &Path,
    cfg: &MountConfig,
) -> Result<Mounted, Error> {
    let chunk_size = u64::from(index.chunk_size);
    let (fs, config, p) = prepare(index, id, source, mountpoint, cfg)?;
    let failed = |source| Error::Mount {
        mountpoint: mountpoint.to_path_buf(),
        source,
    };
    let session = fuser::Session::new(fs, mountpoint, &config).map_err(failed)?;
    // Kept so the connection can outlive this process ([`crate::keeper`]).
    let fuse = keeper::fuse::dup(session.as_fd()).map_err(failed)?;
    let session = session.spawn().map_err(failed)?;
    raise_readahead(mountpoint, (4 * chunk_size).clamp(1 << 20, 16 << 20));
    Ok(p.mounted(session, mountpoint, cfg, fuse, false))
}

impl Prepared {
    /// The mount, its session running.
    fn mounted(
        self,
        session: fuser::BackgroundSession,
        mountpoint: &Path,
        cfg: &MountConfig,
        fuse: OwnedFd,
        adopted: bool,
    ) -> Mounted {
        let _ = self.notifier.set(session.notifier());
        Mounted {
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
            data: self.data,
            passthrough_on: self.passthrough_on,
            passthrough: cfg.passthrough.clone(),
            rt: Some(self.rt),
            counters: self.counters,
            fuse,
            init: self.init,
            adopted,
        }
    }
}

/// Serves `index` on the live FUSE connection `fuse` of the mount at `mountpoint`, which
/// an earlier daemon made (its kernel parameters were `init`), and has the kernel resend
/// the requests that daemon took and never answered. Passthrough is off on such a mount:
/// the kernel may still hold the earlier daemon's backing files for its inodes.
pub fn adopt(
    (index, id, source): (Index, IndexId, Arc<dyn ChunkSource>),
    mountpoint: &Path,
    cfg: &MountConfig,
    fuse: std::os::fd::OwnedFd,
    init: &InitParams,
) -> Result<Mounted, Error> {
    let cfg = MountConfig {
        passthrough: None,
        ahead: None,
        outlive: true,
        ..cfg.clone()
    };
    let (fs, config, p) = prepare(index, id, source, mountpoint, &cfg)?;
    let failed = |source| Error::Mount {
        mountpoint: mountpoint.to_path_buf(),
        source,
    };
    let session = keeper::fuse::session_on(fs, fuse.as_fd(), init, config).map_err(failed)?;
    let session = session.spawn().map_err(failed)?;
    let _ = p.init.set(*init);
    if let Err(e) = keeper::fuse::resend(fuse.as_fd()) {
        tracing::warn!(error = %e, "the kernel cannot resend the requests the dead daemon took (Linux 6.9 and later can): they wait until the job ends");
    }
    Ok(p.mounted(session, mountpoint, &cfg, fuse, true))
}

/// Raises the mount's readahead to `bytes`.
///
/// The kernel offers FUSE its default readahead (128 KiB), which cuts a sequential read into
/// 128 KiB requests with one or two in flight. With a few chunks' worth, requests grow to
/// the kernel's largest (`max_pages`, 1 MiB by default) and several are in flight at once,
/// so missing chunks are fetched and decoded on every core while the reader consumes
/// earlier ones. The knob is the mount's backing device in sysfs and needs root; without
/// it reads are only slower.
fn raise_readahead(mountpoint: &Path, bytes: u64) {
    // The stat waits for the INIT exchange to finish; after it the kernel no longer lowers
    // the value to what INIT negotiated. It runs in a child process, never in this one:
    // this process's own threads answer the mount's requests, and a thread blocked in a
    // request to its own mount cannot be interrupted. Killed then (SIGKILL), the daemon
    // could never finish exiting nor release /dev/fuse, so the request would never be
    // answered nor aborted: an unkillable zombie holding a dead mount (found by the soak).
    // A child's request fails instead when this process dies, and the child exits.
    let out = std::process::Command::new("stat")
        .args(["--format", "%d", "--"])
        .arg(mountpoint)
        .stdin(std::process::Stdio::null())
        .output();
    let dev: u64 = match out {
        Ok(o) if o.status.success() => match String::from_utf8_lossy(&o.stdout).trim().parse() {
            Ok(d) => d,
            Err(_) => return,
        },
        Ok(o) => {
            tracing::debug!(stderr = %String::from_utf8_lossy(&o.stderr).trim(), "cannot stat the new mount; keeping the default readahead");
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot run stat on the new mount; keeping the default readahead");
            return;
        }
    };
    let knob = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    match std::fs::write(&knob, (bytes >> 10).to_string()) {
        Ok(()) => tracing::debug!(knob, kib = bytes >> 10, "raised readahead"),
        Err(e) => tracing::debug!(knob, error = %e, "keeping the default readahead"),
    }
}

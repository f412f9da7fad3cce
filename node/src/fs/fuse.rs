//! The fuser adapter: translates kernel requests into calls on [`Tree`] and [`Data`] and
//! results into replies. No filesystem logic lives here.
//!
//! A read whose chunks are cached is answered on the FUSE thread; any other read moves its
//! reply into a task on the runtime, so a slow fetch never blocks other requests.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyXattr, Request,
};
use manifest::{EntryKind, FileData};

use super::FsError;
use super::copies::{Copies, Lease};
use super::counters::{FsCounters, Op};
use super::data::Data;
use super::record::{Access, Recorder};
use super::tree::{Attr, Ino, NodeKind, Tree};
use crate::sync::lock;

/// File handles with this bit set were opened for passthrough.
const PASSTHROUGH_FH: u64 = 1 << 63;

/// Files up to this size are put into the page cache at their first open ([`LayerFs`]'s
/// prefill): the kernel reads them whole in one request anyway (its readahead is at least
/// this), and a program that opens a file reads it.
const PREFILL_MAX: u64 = 128 << 10;

/// What is open of one inode. The kernel keeps all the open files of an inode in one I/O
/// mode: served by the daemon through the page cache, or passed through to one backing
/// file (one backing id per inode for as long as any of them is open). An open answered in
/// the other mode fails with EIO while a file of the first is open (Linux's fuse iomode):
/// a program that maps a library while its chunks arrive holds it open cached, so every
/// later open stays cached until the last such file is closed, however local the chunks.
#[derive(Default)]
struct Opened {
    /// Open files the daemon serves.
    cached: u32,
    /// The backing file, its open count, and the lease that keeps its copy from eviction.
    backing: Option<(Arc<BackingId>, u32, Lease)>,
    /// Passthrough opens still making their copy.
    pending: u32,
}

impl Opened {
    fn idle(&self) -> bool {
        self.cached == 0 && self.backing.is_none() && self.pending == 0
    }
}

/// [`Opened`] by inode, for the inodes with files open (or opening).
type OpenMap = Arc<Mutex<HashMap<u64, Opened>>>;

/// How to serve complete files.
#[derive(Clone, Debug)]
pub struct PassthroughConfig {
    /// Where materialised files are kept, and their budget.
    pub copies: Arc<Copies>,
    /// Files smaller than this are served by the daemon (materialising costs an open).
    pub min_size: u64,
}

/// The mounted layer as fuser sees it.
pub(crate) struct LayerFs {
    tree: Arc<Tree>,
    data: Arc<Data>,
    rt: tokio::runtime::Handle,
    passthrough: Option<PassthroughConfig>,
    passthrough_on: Arc<AtomicBool>,
    opened: OpenMap,
    next_fh: AtomicU64,
    ttl: Duration,
    recorder: Option<Arc<Recorder>>,
    read_waits: Vec<prometheus_client::metrics::histogram::Histogram>,
    counters: Arc<FsCounters>,
    /// Where to put file contents into the kernel's page cache, once the session exists.
    notifier: Arc<OnceLock<fuser::Notifier>>,
    /// Inodes whose contents were put into the page cache (or tried); locked while one is.
    prefilled: Mutex<HashSet<u64>>,
    /// What the kernel offered at `FUSE_INIT`, kept so a restarted daemon can serve the
    /// same connection ([`keeper::fuse`]).
    init_seen: Arc<OnceLock<keeper::fuse::InitParams>>,
}

fn err(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(k: NodeKind) -> FileType {
    match k {
        NodeKind::Dir => FileType::Directory,
        NodeKind::File => FileType::RegularFile,
        NodeKind::Symlink => FileType::Symlink,
        NodeKind::Whiteout => FileType::CharDevice,
    }
}

/// The attributes of a negative lookup answer: inode 0 tells the kernel "no such name".
fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Answers an xattr request: the size when asked with 0, the value if it fits, else ERANGE.
fn xattr_reply(value: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if (size as usize) < value.len() {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

fn to_fuse(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino.0),
        size: a.size,
        blocks: a.blocks,
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 128 << 10,
        flags: 0,
    }
}

/// Answers a passthrough open whose copy is `made` (or could not be): through the inode's
/// backing file, made now or by an open meanwhile; served by the daemon if the copy or the
/// backing file failed, or if a file of the inode was opened cached meanwhile.
fn answer_passthrough(
    o: &mut Opened,
    made: Result<(Lease, std::fs::File), FsError>,
    fh: u64,
    reply: ReplyOpen,
) {
    let cached = |o: &mut Opened, reply: ReplyOpen| {
        o.cached += 1;
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    };
    if let Some((id, count, _)) = &mut o.backing {
        *count += 1;
        return reply.opened_passthrough(FileHandle(fh | PASSTHROUGH_FH), FopenFlags::empty(), id);
    }
    let (lease, file) = match made {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "passthrough unavailable; serving from the daemon");
            return cached(o, reply);
        }
    };
    if o.cached > 0 {
        return cached(o, reply);
    }
    match reply.open_backing(&file) {
        Ok(id) => {
            let id = Arc::new(id);
            reply.opened_passthrough(FileHandle(fh | PASSTHROUGH_FH), FopenFlags::empty(), &id);
            o.backing = Some((id, 1, lease));
        }
        Err(e) => {
            tracing::warn!(error = %e, "kernel refused the backing file; serving from the daemon");
            cached(o, reply);
        }
    }
}

impl LayerFs {
    /// A filesystem over `tree` and `data`, running slow work on `rt`.
    pub fn new(
        tree: Arc<Tree>,
        data: Arc<Data>,
        rt: tokio::runtime::Handle,
        passthrough: Option<PassthroughConfig>,
        passthrough_on: Arc<AtomicBool>,
    ) -> Self {
        Self {
            tree,
            data,
            rt,
            passthrough,
            passthrough_on,
            opened: Arc::default(),
            next_fh: AtomicU64::new(1),
            // The layer is immutable: the kernel may cache names and attributes for good.
            ttl: Duration::from_secs(365 * 24 * 3600),
            recorder: None,
            read_waits: Vec::new(),
            counters: Arc::default(),
            notifier: Arc::default(),
            prefilled: Mutex::default(),
            init_seen: Arc::default(),
        }
    }

    /// Where the kernel's `FUSE_INIT` parameters are put once the session starts.
    pub(crate) fn init_slot(&self) -> Arc<OnceLock<keeper::fuse::InitParams>> {
        self.init_seen.clone()
    }

    /// Where the mount puts the session's notifier once it runs, which lets small files be
    /// put into the page cache as they are opened.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    /// Puts a small file's bytes into the kernel's page cache at its first open here, if its
    /// chunks are held on this machine: reading it then costs no round trip to the daemon
    /// (the open keeps the cache). Otherwise, or if the kernel drops the pages, reads come
    /// as usual. Before the open is answered, so the bytes are there when it returns.
    fn prefill(&self, ino: Ino, size: u64) {
        if size == 0 || size > PREFILL_MAX {
            return;
        }
        let (Some(notifier), Ok(entry)) = (self.notifier.get(), self.tree.entry(ino)) else {
            return;
        };
        // Held until the bytes are in: an open of the same file on another thread waits
        // here, so no read of it can hold a page the kernel's store must lock (a read
        // waits for this daemon's answer with its pages locked). The work is a decode of
        // at most one small file, never a wait for the network.
        let mut prefilled = lock(&self.prefilled);
        if !prefilled.insert(ino.0) {
            return;
        }
        if let Some(Ok(bytes)) = self.data.read_now(entry, 0, size as u32) {
            match notifier.store(INodeNo(ino.0), 0, &bytes) {
                Ok(()) => self.counters.prefilled(),
                Err(e) => tracing::debug!(error = %e, "the kernel refused a file's contents"),
            }
        }
    }

    /// The requests this filesystem answered so far, by kind.
    pub fn counters(&self) -> Arc<FsCounters> {
        self.counters.clone()
    }

    /// Records opens, failed lookups and reads that wait for a chunk into `recorder`
    /// (`teesfs record`, and every job a daemon mounts).
    pub(crate) fn with_recorder(mut self, recorder: Option<Arc<Recorder>>) -> Self {
        self.recorder = recorder;
        self
    }

    /// Observes into each of `read_waits` how long each read that waits for a chunk waits
    /// (the daemon's metrics: the job's histogram and the node's).
    pub(crate) fn with_read_waits(
        mut self,
        read_waits: Vec<prometheus_client::metrics::histogram::Histogram>,
    ) -> Self {
        self.read_waits = read_waits;
        self
    }

    fn passthrough_candidate(&self, ino: Ino) -> Option<PassthroughConfig> {
        let cfg = self.passthrough.as_ref()?;
        if !self.passthrough_on.load(Ordering::Relaxed) {
            return None;
        }
        let e = self.tree.entry(ino).ok()?;
        let idx = self.tree.index();
        match &idx.entry(idx.resolve(e)).kind {
            EntryKind::File {
                size,
                data: FileData::Chunks(_),
            } if *size >= cfg.min_size && self.data.all_local(e) => Some(cfg.clone()),
            _ => None,
        }
    }
}

impl Filesystem for LayerFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let abi = config.kernel_abi();
        let _ = self.init_seen.set(keeper::fuse::InitParams {
            major: abi.0,
            minor: abi.1,
            flags: config.capabilities().bits(),
        });
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.add_capabilities(InitFlags::FUSE_CACHE_SYMLINKS);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // A directory listing carries every child's attributes, so a walk costs one request
        // per directory page instead of one lookup per name.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if self.passthrough.is_some() {
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !ok {
                tracing::warn!(
                    "kernel refused FUSE passthrough: serving all reads from the daemon"
                );
                self.data.no_passthrough();
            }
            self.passthrough_on.store(ok, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.tree.lookup(Ino(parent.0), name.as_bytes()) {
            Ok(a) => {
                self.counters.count(Op::Lookup);
                reply.entry(&self.ttl, &to_fuse(&a), Generation(0));
            }
            Err(FsError::NotFound) => {
                self.counters.count(Op::LookupAbsent);
                if let Some(r) = &self.recorder {
                    r.note(Access::Absent(Ino(parent.0), name.as_bytes().into()));
                }
                // A name the layer lacks is answered from the index alone, and the kernel
                // may remember the answer (inode 0 = a cached negative entry): the loader's
                // and Python's path probing never waits on the network, nor asks twice.
                reply.entry(&self.ttl, &negative_entry(), Generation(0));
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.counters.count(Op::Getattr);
        match self.tree.getattr(Ino(ino.0)) {
            Ok(a) => reply.attr(&self.ttl, &to_fuse(&a)),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.counters.count(Op::Readlink);
        match self.tree.readlink(Ino(ino.0)) {
            Ok(t) => reply.data(t),
            Err(e) => reply.error(err(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = Ino(ino.0);
        let attr = match self.tree.getattr(ino) {
            Ok(a) => a,
            Err(e) => return reply.error(err(&e)),
        };
        if attr.kind == NodeKind::Dir {
            return reply.error(err(&FsError::IsDir));
        }
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(err(&FsError::ReadOnly));
        }
        if let Some(r) = &self.recorder {
            r.note(Access::Opened(ino));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        // Asked before the lock: it looks at every chunk of the file.
        let candidate = self.passthrough_candidate(ino);
        let mut opened = lock(&self.opened);
        let o = opened.entry(ino.0).or_default();
        if let Some((id, count, _)) = &mut o.backing {
            *count += 1;
            self.counters.count(Op::OpenPassthrough);
            return reply.opened_passthrough(
                FileHandle(fh | PASSTHROUGH_FH),
                FopenFlags::empty(),
                id,
            );
        }
        let Some(cfg) = candidate.filter(|_| o.cached == 0) else {
            o.cached += 1;
            drop(opened);
            self.counters.count(Op::Open);
            self.prefill(ino, attr.size);
            return reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
        };
        o.pending += 1;
        drop(opened);
        self.counters.count(Op::OpenPassthrough);
        let data = self.data.clone();
        let opened = self.opened.clone();
        let entry = self
            .tree
            .entry(ino)
            .expect("getattr succeeded, so the inode exists");
        self.rt.spawn(async move {
            let made = async {
                let (lease, path) = data.materialize(entry, &cfg.copies).await?;
                let file = std::fs::File::open(&path)
                    .map_err(|e| FsError::unavailable("opening a passthrough copy", e))?;
                Ok::<_, FsError>((lease, file))
            }
            .await;
            let mut map = lock(&opened);
            let o = map.entry(ino.0).or_default();
            o.pending -= 1;
            answer_passthrough(o, made, fh, reply);
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let entry = match self.tree.entry(Ino(ino.0)) {
            Ok(e) => e,
            Err(e) => return reply.error(err(&e)),
        };
        // Cached or local chunks are served here: decoding a chunk is a millisecond of
        // work on this thread, less than handing the read to another thread and back.
        if let Some(r) = self.data.read_now(entry, offset, size) {
            self.counters.count(Op::ReadNow);
            return match r {
                Ok(bytes) => {
                    self.counters.read_bytes(bytes.len());
                    reply.data(&bytes);
                }
                Err(e) => reply.error(err(&e)),
            };
        }
        let waits = (self.recorder.is_some() || !self.read_waits.is_empty())
            && self.data.must_wait(entry, offset, size);
        if let (true, Some(r)) = (waits, &self.recorder) {
            r.note_wait(Ino(ino.0));
        }
        let waited = (waits && !self.read_waits.is_empty())
            .then(|| (self.read_waits.clone(), std::time::Instant::now()));
        let data = self.data.clone();
        self.counters.count(Op::ReadSlow);
        let counters = self.counters.clone();
        self.rt.spawn(async move {
            let read = data.read_shared(entry, offset, size).await;
            if let Some((hs, t0)) = waited {
                let waited = t0.elapsed().as_secs_f64();
                for h in &hs {
                    h.observe(waited);
                }
            }
            match read {
                Ok(bytes) => {
                    counters.read_bytes(bytes.len());
                    reply.data(&bytes);
                }
                Err(e) => reply.error(err(&e)),
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.counters.count(Op::Release);
        let mut map = lock(&self.opened);
        if let Some(o) = map.get_mut(&ino.0) {
            if fh.0 & PASSTHROUGH_FH == 0 {
                o.cached = o.cached.saturating_sub(1);
            } else if let Some((_, count, _)) = &mut o.backing {
                *count -= 1;
                if *count == 0 {
                    o.backing = None;
                }
            }
            if o.idle() {
                map.remove(&ino.0);
            }
        }
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is ever written, so there is nothing to flush. ENOSYS tells the kernel to
        // stop sending flushes for good (one round trip per close() saved).
        self.counters.count(Op::Flush);
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counters.count(Op::Other);
        // Directories need no open state. ENOSYS tells the kernel to stop sending
        // OPENDIR/RELEASEDIR altogether and to keep and cache listings (it then treats
        // every directory as FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR), so a cached walk asks
        // the daemon nothing. The kernel itself refuses opendir on non-directories.
        reply.error(Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.counters.count(Op::Readdir);
        match self.tree.readdir(Ino(ino.0), offset) {
            Ok(items) => {
                for (next, e) in items {
                    if reply.add(
                        INodeNo(e.ino.0),
                        next,
                        file_type(e.kind),
                        OsStr::from_bytes(e.name),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.counters.count(Op::Readdir);
        match self.tree.readdir(Ino(ino.0), offset) {
            Ok(items) => {
                for (next, e) in items {
                    let attr = match self.tree.getattr(e.ino) {
                        Ok(a) => a,
                        Err(e) => return reply.error(err(&e)),
                    };
                    if reply.add(
                        INodeNo(e.ino.0),
                        next,
                        OsStr::from_bytes(e.name),
                        &self.ttl,
                        &to_fuse(&attr),
                        Generation(0),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Regular files answer no ioctls; isatty() probes (TCGETS) expect exactly ENOTTY.
        self.counters.count(Op::Ioctl);
        reply.error(Errno::ENOTTY);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.counters.count(Op::Other);
        let idx = self.tree.index();
        let blocks = idx.total_file_bytes().div_ceil(4096);
        reply.statfs(blocks, 0, 0, idx.entries.len() as u64, 0, 4096, 255, 4096);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.counters.count(Op::Xattr);
        if !self.tree.has_xattrs() {
            // No entry has any: ENOSYS makes the kernel answer every later getxattr itself
            // (EOPNOTSUPP). An overlay over the mount asks for its own attributes of every
            // file it opens, and a job's programs start through one.
            return reply.error(Errno::ENOSYS);
        }
        let found = match self.tree.xattrs(Ino(ino.0)) {
            Ok(list) => list.iter().find(|(n, _)| name.as_bytes() == n.as_bytes()),
            Err(e) => return reply.error(err(&e)),
        };
        match found {
            None => reply.error(Errno::NO_XATTR),
            Some((_, v)) => xattr_reply(v, size, reply),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.counters.count(Op::Xattr);
        if !self.tree.has_xattrs() {
            return reply.error(Errno::ENOSYS);
        }
        match self.tree.xattrs(Ino(ino.0)) {
            Ok(list) => {
                let mut names = Vec::new();
                for (n, _) in list {
                    names.extend_from_slice(n.as_bytes());
                    names.push(0);
                }
                xattr_reply(&names, size, reply);
            }
            Err(e) => reply.error(err(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.counters.count(Op::Access);
        match self.tree.getattr(Ino(ino.0)) {
            Ok(_) if mask.contains(AccessFlags::W_OK) => reply.error(err(&FsError::ReadOnly)),
            Ok(_) => reply.ok(),
            Err(e) => reply.error(err(&e)),
        }
    }
}

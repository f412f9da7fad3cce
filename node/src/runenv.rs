//! The execution environment of `teesfs run`: the node's "/" with the user's layer on top.
//!
//! The view is built in new user, mount and PID namespaces, so any user can enter it
//! without privileges and nothing it mounts is visible outside or outlives it:
//!
//! - every top-level directory of "/" that lives on the root file system becomes an
//!   overlay: `lowerdir=<layer>/<dir>:/<dir>` when the layer has it, `/<dir>` otherwise,
//!   with a writable upper directory (tmpfs on compute nodes, the user's own directory with
//!   `--upper` on the login node). The kernel refuses "/" itself as an overlay lower layer
//!   inside a user namespace (it has mounts on it that must stay covered), which is why the
//!   overlay is per directory;
//! - the layer's top-level directories that "/" lacks are overlays of the layer alone;
//! - top-level mount points (`/home`, `/scratch`, `/tmp`, `/run`, `/dev`, `/sys`, ...) and
//!   the directories in [`RunSpec::bind`] are bind-mounted as they are: the user's home and
//!   scratch stay the real ones, and writes there are not captured in the layer;
//! - `/proc` is a new proc mounted by the first process of the new PID namespace.
//!
//! Every overlay is `nosuid,nodev`, the command runs with `no_new_privs` as the invoking
//! user (a nested user namespace maps them back), so a setuid file in the layer gives no
//! privilege. The first process of the new PID namespace is a small init ([`init_main`])
//! that forwards signals, reaps orphans and reports the command's exit status or signal.
//! When it exits, the kernel ends every process of the namespace and drops every mount.
//!
//! [`enter`] runs in the invoking `teesfs run` process; it must be called while the process
//! is single-threaded (the kernel refuses a new user namespace otherwise).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Pid, Uid};

/// Errors of the execution environment, each naming the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A system call or file operation failed.
    #[error("{what}")]
    Sys {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The request itself is unusable.
    #[error("{0}")]
    Invalid(String),
}

type Result<T> = std::result::Result<T, RunError>;

fn sys(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Sys { what, source }
}

fn nix_err(what: impl Into<String>) -> impl FnOnce(nix::Error) -> RunError {
    let what = what.into();
    move |e| RunError::Sys {
        what,
        source: std::io::Error::from(e),
    }
}

/// Where the environment's writes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upper {
    /// A tmpfs that disappears with the environment (compute nodes).
    Tmpfs,
    /// A persistent directory: the user's own layer on the login node.
    Dir(PathBuf),
}

/// What `teesfs run` builds.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The read-only layer on top of "/" (a job mount), if any.
    pub layer: Option<PathBuf>,
    /// Where writes go.
    pub upper: Upper,
    /// Extra top-level paths bound as they are (besides mount points and [`ALWAYS_BIND`]).
    pub bind: Vec<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// The working directory inside the environment (falls back to "/").
    pub cwd: PathBuf,
}

/// Top-level directories always bound from the host, never captured in an overlay: the
/// kernel's file systems, per-boot state and the places users keep their data.
pub const ALWAYS_BIND: &[&str] = &["dev", "sys", "run", "tmp", "home", "proc"];

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
}

impl Outcome {
    fn encode(self) -> String {
        match self {
            Outcome::Exited(c) => format!("exit {c}"),
            Outcome::Signaled(s) => format!("signal {s}"),
        }
    }

    fn decode(s: &str) -> Option<Self> {
        let (kind, n) = s.trim().split_once(' ')?;
        let n: i32 = n.parse().ok()?;
        match kind {
            "exit" => Some(Outcome::Exited(n)),
            "signal" => Some(Outcome::Signaled(n)),
            _ => None,
        }
    }
}

/// The hidden subcommand `teesfs run` re-executes itself with as the namespace's init.
pub const INIT_SUBCOMMAND: &str = "__run-init";

/// Signals passed on to the command when a process (not the terminal) sends them.
const FORWARDED: &[i32] = &[
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// Builds the environment and runs the command in it; returns how the command ended.
///
/// Must be called while the process is single-threaded. `self_exe` is the `teesfs` binary
/// (re-executed as the namespace's init).
pub fn enter(spec: &RunSpec, self_exe: &Path) -> Result<Outcome> {
    if spec.command.is_empty() {
        return Err(RunError::Invalid("no command to run".into()));
    }
    if let Some(layer) = &spec.layer
        && !layer.is_dir()
    {
        return Err(RunError::Invalid(format!(
            "the layer {} is not a directory (is the job mounted?)",
            layer.display()
        )));
    }
    let uid = Uid::current();
    let gid = Gid::current();
    let staging = Staging(
        tempfile::Builder::new()
            .prefix("teesfs-run.")
            .tempdir()
            .map_err(sys("creating a staging directory in the temp dir"))?,
    );
    // Beside the staging directory (not inside: that becomes a tmpfs), named after it so
    // concurrent runs never share it.
    let mut status_path = staging.path().as_os_str().to_owned();
    status_path.push(".status");
    let status_path = PathBuf::from(status_path);
    let status_guard = RemoveOnDrop(status_path.clone());
    std::fs::write(&status_path, b"").map_err(sys(format!(
        "creating the status file {}",
        status_path.display()
    )))?;

    let mut signals = catch_signals()?;
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(nix_err(
            "creating user, mount and PID namespaces (are unprivileged user namespaces \
             enabled? see `sysctl kernel.unprivileged_userns_clone` and \
             `user.max_user_namespaces`)",
        ))?;
    map_ids(0, uid.as_raw(), 0, gid.as_raw())?;
    mount::<str, str, str, str>(None, "/", None, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None)
        .map_err(nix_err("making mounts private"))?;

    let (root, created) = build_root(spec, staging.path(), Privilege::User)?;
    tracing::debug!(root = %root.display(), "environment built");

    let mut init = Command::new(self_exe);
    init.arg(INIT_SUBCOMMAND)
        .arg(&root)
        .arg(&status_path)
        .arg(uid.as_raw().to_string())
        .arg(gid.as_raw().to_string())
        .arg(&spec.cwd)
        .arg("--")
        .args(&spec.command);
    let child = init
        .spawn()
        .map_err(sys(format!("starting {}", self_exe.display())))?;
    match supervise(Pid::from_raw(child.id() as i32), &mut signals) {
        Outcome::Exited(0) => {}
        other => {
            return Err(RunError::Invalid(format!(
                "the environment's init failed ({other:?}); see the message above"
            )));
        }
    }

    let mut text = String::new();
    std::fs::File::open(&status_path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(sys("reading the command's status"))?;
    drop(status_guard);
    drop(staging);
    // Upper directories the command left untouched would only add empty directories to
    // the user's layer.
    if matches!(spec.upper, Upper::Dir(_)) {
        for d in created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
    Outcome::decode(&text).ok_or_else(|| {
        RunError::Invalid(format!(
            "the environment's init ended without reporting the command's status ({text:?})"
        ))
    })
}

/// The staging directory: a tmpfs in this mount namespace only (the host sees an empty
/// directory). Dropping detaches the tmpfs and everything on it, then removes the directory.
struct Staging(tempfile::TempDir);

impl Staging {
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = umount2(self.0.path(), MntFlags::MNT_DETACH);
    }
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes this process's uid and gid maps: `inside` ids map to `outside` ids.
fn map_ids(uid_in: u32, uid_out: u32, gid_in: u32, gid_out: u32) -> Result<()> {
    std::fs::write("/proc/self/setgroups", b"deny").map_err(sys("writing setgroups"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid_in} {uid_out} 1\n"))
        .map_err(sys("writing the uid map"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid_in} {gid_out} 1\n"))
        .map_err(sys("writing the gid map"))?;
    Ok(())
}

/// Who builds the environment, which decides two details of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Privilege {
    /// An unprivileged user in a new user namespace (`teesfs run`): overlays keep their
    /// metadata in `user.` extended attributes, and the namespace's init mounts a new /proc.
    User,
    /// Root on the node (a Slurm task, through the SPANK plugin): overlays use the usual
    /// `trusted.` attributes, and /proc is the host's, as for any task.
    Root,
}

/// Lays out the new root under `staging` (a fresh tmpfs) and returns its path.
/// Also returns the upper directories it created.
fn build_root(
    spec: &RunSpec,
    staging: &Path,
    privilege: Privilege,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    mount(
        Some("teesfs-run"),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(nix_err(format!(
        "mounting a tmpfs on {}",
        staging.display()
    )))?;
    let root = staging.join("root");
    let (upper_base, work_base) = match &spec.upper {
        Upper::Tmpfs => (staging.join("upper"), staging.join("work")),
        Upper::Dir(d) => {
            let d = std::fs::canonicalize(d)
                .map_err(sys(format!("the upper directory {}", d.display())))?;
            let work = work_dir_for(&d)?;
            (d, work)
        }
    };
    for d in [&root, &upper_base, &work_base] {
        std::fs::create_dir_all(d).map_err(sys(format!("creating {}", d.display())))?;
    }
    // pivot_root wants the new root to be a mount point.
    mount::<Path, Path, str, str>(Some(&root), &root, None, MsFlags::MS_BIND, None)
        .map_err(nix_err("binding the new root onto itself"))?;
    let mut bind: Vec<PathBuf> = ALWAYS_BIND.iter().map(PathBuf::from).collect();
    bind.extend(
        spec.bind
            .iter()
            .filter_map(|p| p.strip_prefix("/").ok().map(Path::to_path_buf)),
    );
    let layout = Layout {
        layer: spec.layer.clone(),
        root: root.clone(),
        upper_base,
        work_base,
        mount_points: mount_points()?,
        bind,
        privilege,
        created: Default::default(),
    };
    layout.place_children(Path::new(""))?;
    Ok((root, layout.created.into_inner()))
}

/// Where things go while the new root is laid out.
struct Layout {
    layer: Option<PathBuf>,
    root: PathBuf,
    upper_base: PathBuf,
    work_base: PathBuf,
    /// Every mount point of the host, relative to "/".
    mount_points: Vec<PathBuf>,
    /// Paths (relative to "/") bound from the host as they are.
    bind: Vec<PathBuf>,
    /// Who is building it.
    privilege: Privilege,
    /// Upper directories this run created (removed again if left empty).
    created: std::cell::RefCell<Vec<PathBuf>>,
}

impl Layout {
    /// Places every entry of the host's and the layer's directory `rel` under the new root.
    fn place_children(&self, rel: &Path) -> Result<()> {
        let mut names = read_names(&Path::new("/").join(rel)).unwrap_or_default();
        if let Some(l) = &self.layer {
            for n in read_names(&l.join(rel)).unwrap_or_default() {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names.sort();
        for n in names {
            self.place(&rel.join(n))?;
        }
        Ok(())
    }

    /// Places `rel`: a bind of the host's, an overlay, or (when mounts lie below it) a
    /// directory whose entries are placed one by one.
    fn place(&self, rel: &Path) -> Result<()> {
        let host = Path::new("/").join(rel);
        let target = self.root.join(rel);
        let in_layer = self.layer.as_ref().map(|l| l.join(rel));
        let layer_md = in_layer
            .as_ref()
            .and_then(|p| std::fs::symlink_metadata(p).ok());
        let layer_dir = layer_md.as_ref().is_some_and(|m| m.is_dir());
        let host_md = std::fs::symlink_metadata(&host).ok();
        // A non-directory in the layer hides whatever "/" has under that name.
        if let (Some(md), Some(p)) = (&layer_md, &in_layer)
            && !md.is_dir()
        {
            return place_entry(p, md, &target);
        }
        let layer_only = |this: &Self| match &in_layer {
            Some(l) => this.overlay(&[l.as_path()], rel, &target),
            None => Ok(()),
        };
        let Some(hmd) = host_md else {
            return if layer_dir { layer_only(self) } else { Ok(()) };
        };
        if !hmd.is_dir() {
            return if layer_dir {
                layer_only(self)
            } else {
                place_entry(&host, &hmd, &target)
            };
        }
        mkdir_like(&target, &hmd)?;
        if rel == Path::new("proc") && self.privilege == Privilege::User {
            return Ok(()); // the init mounts a proc of the new PID namespace here
        }
        if self.bind.iter().any(|b| b == rel) || self.mount_points.iter().any(|m| m == rel) {
            if layer_dir && layer_has_entries(in_layer.as_deref()) {
                tracing::warn!(
                    dir = %host.display(),
                    "the layer has files under a directory bound from the host; \
                     they are hidden in the environment"
                );
            }
            return mount::<Path, Path, str, str>(
                Some(&host),
                &target,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
            )
            .map_err(nix_err(format!("binding {}", host.display())));
        }
        if self.mount_points.iter().any(|m| m.starts_with(rel)) {
            // The kernel will not take a directory with mounts below it as a lower layer
            // (that would uncover what they hide): split it.
            return self.place_children(rel);
        }
        let mut lowers: Vec<&Path> = Vec::new();
        if layer_dir && let Some(l) = in_layer.as_deref() {
            lowers.push(l);
        }
        lowers.push(&host);
        self.overlay(&lowers, rel, &target)
    }

    /// Mounts an overlay of `lowers` (first is topmost) with its own upper on `target`.
    fn overlay(&self, lowers: &[&Path], rel: &Path, target: &Path) -> Result<()> {
        let upper = self.upper_base.join(rel);
        let work = self.work_base.join(rel);
        if !upper.exists() {
            self.created.borrow_mut().push(upper.clone());
        }
        for d in [&upper, &work, &target.to_path_buf()] {
            std::fs::create_dir_all(d).map_err(sys(format!("creating {}", d.display())))?;
        }
        let esc = |p: &Path| {
            p.to_string_lossy()
                .replace('\\', "\\\\")
                .replace(':', "\\:")
                .replace(',', "\\,")
        };
        let lower = lowers.iter().map(|p| esc(p)).collect::<Vec<_>>().join(":");
        let mut data = format!(
            "lowerdir={lower},upperdir={},workdir={}",
            esc(&upper),
            esc(&work)
        );
        if self.privilege == Privilege::User {
            data.push_str(",userxattr");
        }
        mount(
            Some("teesfs-run"),
            target,
            Some("overlay"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .map_err(nix_err(format!(
            "mounting an overlay on /{} ({data})",
            rel.display()
        )))
    }
}

/// Creates `target` as a directory with the mode of `like`.
fn mkdir_like(target: &Path, like: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(target).map_err(sys(format!("creating {}", target.display())))?;
    let _ = std::fs::set_permissions(
        target,
        std::fs::Permissions::from_mode(like.mode() & 0o7777),
    );
    Ok(())
}

/// The mount points of this mount namespace, relative to "/" (from `/proc/self/mountinfo`).
fn mount_points() -> Result<Vec<PathBuf>> {
    let mounts = crate::sys::mountinfo::read(None).map_err(sys("reading /proc/self/mountinfo"))?;
    Ok(mounts
        .into_iter()
        .filter_map(|m| m.mount_point.strip_prefix("/").ok().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .collect())
}

/// Whether a directory exists and has at least one entry.
fn layer_has_entries(dir: Option<&Path>) -> bool {
    dir.and_then(|d| std::fs::read_dir(d).ok())
        .is_some_and(|mut r| r.next().is_some())
}

fn read_names(dir: &Path) -> Result<Vec<OsString>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(sys(format!("listing {}", dir.display())))? {
        out.push(
            e.map_err(sys(format!("listing {}", dir.display())))?
                .file_name(),
        );
    }
    Ok(out)
}

/// Places a top-level symlink (copied) or file (bound) at `target`.
fn place_entry(src: &Path, md: &std::fs::Metadata, target: &Path) -> Result<()> {
    if md.file_type().is_symlink() {
        let to = std::fs::read_link(src).map_err(sys(format!("reading {}", src.display())))?;
        std::os::unix::fs::symlink(&to, target)
            .map_err(sys(format!("creating {}", target.display())))?;
    } else if md.is_file() {
        std::fs::write(target, b"").map_err(sys(format!("creating {}", target.display())))?;
        mount::<Path, Path, str, str>(Some(src), target, None, MsFlags::MS_BIND, None)
            .map_err(nix_err(format!("binding {}", src.display())))?;
    }
    Ok(())
}

/// The overlay work directory for a persistent upper `dir`: a hidden sibling on the same
/// file system (overlayfs requires that), never inside the layer itself.
pub fn work_dir_for(dir: &Path) -> Result<PathBuf> {
    let parent = dir.parent().ok_or_else(|| {
        RunError::Invalid(format!("{} cannot be an upper directory", dir.display()))
    })?;
    let name = dir
        .file_name()
        .ok_or_else(|| RunError::Invalid(format!("{} has no name", dir.display())))?;
    let mut w = OsString::from(".");
    w.push(name);
    w.push(".teesfs-work");
    Ok(parent.join(w))
}

type Signals = signal_hook::iterator::SignalsInfo<signal_hook::iterator::exfiltrator::WithOrigin>;

/// Catches the signals to pass on, and SIGCHLD, so that [`supervise`] waits on signals
/// instead of polling. No thread: a process that has unshared its PID namespace cannot
/// start one.
fn catch_signals() -> Result<Signals> {
    Signals::new(FORWARDED.iter().copied().chain([libc::SIGCHLD]))
        .map_err(sys("installing signal handlers"))
}

/// Passes caught signals on to `pid` until it ends (reaping any other child on the way, as
/// an init must) and returns how it ended.
fn supervise(pid: Pid, signals: &mut Signals) -> Outcome {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use signal_hook::low_level::siginfo::Cause;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == pid => return Outcome::Exited(code),
                Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                    return Outcome::Signaled(sig as i32);
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    tracing::error!(error = %e, "waiting for the command");
                    return Outcome::Exited(255);
                }
            }
        }
        // Blocks until a signal comes: one to pass on, or SIGCHLD (a child ended; one that
        // ended since the reaping above is pending already, so nothing is missed).
        for origin in signals.wait() {
            // The terminal signals the whole foreground process group, the command
            // included; pass on only what a process sent to us.
            if origin.signal == libc::SIGCHLD || matches!(origin.cause, Cause::Kernel) {
                continue;
            }
            if let Ok(sig) = Signal::try_from(origin.signal) {
                let _ = nix::sys::signal::kill(pid, sig);
            }
        }
    }
}

/// The hidden subcommand the SPANK plugin runs to build a Slurm task's environment
/// (`teesfs-spank`'s `TASK_ENV_SUBCOMMAND`).
pub const TASK_ENV_SUBCOMMAND: &str = "__task-env";

/// `teesfs __task-env LAYER UID`, run as root by the SPANK plugin for each task of a job
/// whose layer is mounted at LAYER: builds the execution environment (the layer over "/",
/// writes to a tmpfs, the host's mount points, `/home`, `/tmp`, `/run`, `/dev`, `/sys` and
/// `/proc` as they are) in a new mount namespace that still receives the host's later
/// mounts, switches its root to it, prints `ready`, and waits for standard input to close.
/// The plugin joins the namespace in between; the helper then exits and the namespace
/// lives as long as the task.
///
/// The layer must belong to UID (the daemon gives a job's mount to the job's user) or to
/// root (a job pushed without an owner): a task never sees another user's layer.
pub fn task_env_main(args: &[OsString]) -> Result<()> {
    let bad = || {
        RunError::Invalid(format!(
            "{TASK_ENV_SUBCOMMAND}: bad arguments {args:?} (LAYER UID)"
        ))
    };
    let [layer, uid] = args else {
        return Err(bad());
    };
    let uid: u32 = uid.to_str().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    if !nix::unistd::geteuid().is_root() {
        return Err(RunError::Invalid(format!(
            "{TASK_ENV_SUBCOMMAND} builds a Slurm task's environment and must run as root \
             (slurmstepd's SPANK plugin runs it); users run `teesfs run`"
        )));
    }
    let layer = PathBuf::from(layer);
    let md = std::fs::metadata(&layer).map_err(sys(format!("the layer {}", layer.display())))?;
    if md.uid() != uid && md.uid() != 0 {
        return Err(RunError::Invalid(format!(
            "the layer {} belongs to uid {}, not to the job's user {uid}; refusing to show it \
             to this job",
            layer.display(),
            md.uid()
        )));
    }
    let parent = layer
        .parent()
        .ok_or_else(|| RunError::Invalid(format!("{} has no parent", layer.display())))?;
    // Staged beside the job's mount; the directory is removed once the root has moved.
    let parent_dir =
        std::fs::File::open(parent).map_err(sys(format!("opening {}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".task-env.")
        .tempdir_in(parent)
        .map_err(sys(format!(
            "creating a staging directory in {}",
            parent.display()
        )))?
        .keep();
    let spec = RunSpec {
        layer: Some(layer.clone()),
        upper: Upper::Tmpfs,
        bind: Vec::new(),
        command: Vec::new(),
        cwd: PathBuf::from("/"),
    };
    unshare(CloneFlags::CLONE_NEWNS).map_err(nix_err("creating a mount namespace"))?;
    // Nothing done here reaches the host; what the host mounts later (automounted homes,
    // other jobs) still reaches the task.
    mount::<str, str, str, str>(None, "/", None, MsFlags::MS_REC | MsFlags::MS_SLAVE, None)
        .map_err(nix_err("making mounts slaves of the host's"))?;
    let (root, _) = build_root(&spec, &staging, Privilege::Root)?;
    switch_root(&root)?;
    // The staging tmpfs shows up again under the bound /run; it is of no use to the task.
    let _ = umount2(&staging, MntFlags::MNT_DETACH);
    if let Some(name) = staging.file_name() {
        let _ = nix::unistd::unlinkat(&parent_dir, name, nix::unistd::UnlinkatFlags::RemoveDir);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n")
        .and_then(|()| out.flush())
        .map_err(sys("telling the plugin the environment is ready"))?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    Ok(())
}

/// Makes `root` this process's "/" (and its mount namespace's, for whoever joins it).
fn switch_root(root: &Path) -> Result<()> {
    nix::unistd::chdir(root).map_err(nix_err(format!("entering {}", root.display())))?;
    match nix::unistd::pivot_root(".", ".") {
        Ok(()) => {
            umount2(".", MntFlags::MNT_DETACH).map_err(nix_err("detaching the old root"))?;
        }
        Err(e) => {
            // "/" is the initramfs (diskless nodes that never switched root): pivot_root
            // refuses it, but the new root can be moved over it, as switch_root does.
            tracing::debug!(error = %e, "pivot_root refused; moving the new root over /");
            mount::<str, str, str, str>(Some("."), "/", None, MsFlags::MS_MOVE, None)
                .map_err(nix_err("moving the new root over /"))?;
            nix::unistd::chroot(".").map_err(nix_err("chroot into the new root"))?;
        }
    }
    nix::unistd::chdir("/").map_err(nix_err("entering /"))
}

/// The namespace's init (`teesfs __run-init ROOT STATUS UID GID CWD -- CMD...`): mounts
/// `/proc`, switches to the new root, drops back to the invoking user, runs the command,
/// forwards signals, reaps orphans and writes the command's outcome to STATUS.
pub fn init_main(args: &[OsString]) -> Result<std::convert::Infallible> {
    let bad = || RunError::Invalid(format!("{INIT_SUBCOMMAND}: bad arguments {args:?}"));
    let (head, cmd) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => return Err(bad()),
    };
    let [root, status, uid, gid, cwd] = head else {
        return Err(bad());
    };
    let num = |s: &OsString| {
        s.to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(bad)
    };
    let (uid, gid) = (num(uid)?, num(gid)?);
    let root = PathBuf::from(root);
    let mut status = std::fs::OpenOptions::new()
        .write(true)
        .open(status)
        .map_err(sys("opening the status file"))?;
    // If `teesfs run` itself is killed outright, take the whole environment with it.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if cmd.is_empty() {
        return Err(bad());
    }

    let proc_dir = root.join("proc");
    if let Err(e) = mount::<str, Path, str, str>(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    ) {
        tracing::warn!(error = %e, "cannot mount a new /proc; binding the host's");
        mount::<str, Path, str, str>(
            Some("/proc"),
            &proc_dir,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )
        .map_err(nix_err("binding /proc"))?;
    }
    nix::unistd::chdir(&root).map_err(nix_err(format!("entering {}", root.display())))?;
    match nix::unistd::pivot_root(".", ".") {
        Ok(()) => {
            umount2(".", MntFlags::MNT_DETACH).map_err(nix_err("detaching the old root"))?;
        }
        Err(e) => {
            tracing::debug!(error = %e, "pivot_root refused; using chroot");
            nix::unistd::chroot(".").map_err(nix_err("chroot into the new root"))?;
        }
    }
    let cwd = PathBuf::from(cwd);
    if nix::unistd::chdir(&cwd).is_err() {
        tracing::warn!(cwd = %cwd.display(), "working directory missing in the environment; using /");
        nix::unistd::chdir("/").map_err(nix_err("entering /"))?;
    }
    // Back to the invoking user: a nested user namespace maps them to the root of this one.
    if uid != 0 || gid != 0 {
        unshare(CloneFlags::CLONE_NEWUSER).map_err(nix_err("creating the user's namespace"))?;
        map_ids(uid, 0, gid, 0)?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(nix_err("setting no_new_privs"))?;

    let mut signals = catch_signals()?;
    let child = Command::new(&cmd[0]).args(&cmd[1..]).spawn();
    let outcome = match child {
        Ok(child) => supervise(Pid::from_raw(child.id() as i32), &mut signals),
        Err(e) => {
            eprintln!(
                "teesfs run: cannot run {}: {e}",
                Path::new(&cmd[0]).display()
            );
            Outcome::Exited(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
    };
    let _ = status.write_all(outcome.encode().as_bytes());
    let _ = status.sync_all();
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_round_trips() {
        for o in [
            Outcome::Exited(0),
            Outcome::Exited(3),
            Outcome::Signaled(15),
        ] {
            assert_eq!(Outcome::decode(&o.encode()), Some(o));
        }
        assert_eq!(Outcome::decode(""), None);
        assert_eq!(Outcome::decode("exit x"), None);
        assert_eq!(Outcome::decode("killed 3"), None);
    }

    #[test]
    fn work_dir_is_a_hidden_sibling() {
        assert_eq!(
            work_dir_for(Path::new("/home/u/layer")).expect("has a parent"),
            Path::new("/home/u/.layer.teesfs-work")
        );
        assert!(work_dir_for(Path::new("/")).is_err());
    }
}

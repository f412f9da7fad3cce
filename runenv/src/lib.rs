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
//! - a directory with mount points below it (`/mnt` holding `/mnt/data`) is split: its
//!   entries are placed one by one by the same rules;
//! - `/proc` is a new proc mounted by the first process of the new PID namespace.
//!
//! Every overlay is `nosuid,nodev`, the command runs with `no_new_privs` as the invoking
//! user (a nested user namespace maps them back), so a setuid file in the layer gives no
//! privilege. The first process of the new PID namespace is a small init ([`init_main`])
//! that forwards signals, reaps orphans and reports the command's exit status or signal.
//! When it exits, the kernel ends every process of the namespace and drops every mount.
//!
//! With [`RunSpec::image`] the layer is not put over the node's "/" but is the whole root,
//! as enroot and Apptainer do with an image: only `/proc`, `/dev`, `/sys`, `/tmp`, the
//! user's home and the site's paths come from the host ([`image`] has the rules).
//!
//! [`enter`] runs in the invoking `teesfs run` process; it must be called while the process
//! is single-threaded (the kernel refuses a new user namespace otherwise). [`task_env`]
//! builds the same layout as root for a Slurm task.
//!
//! By concern: `layout` decides the layout as a pure plan of operations from gathered
//! facts (`image` an image's), `apply` carries plans out (the only mount(2) calls),
//! `image_root` gathers an image's facts, `init` is the namespace's PID 1, `task_env`
//! a Slurm task's environment. This module is the public surface and the sequence: it
//! sets up the namespaces, gathers what the layout depends on (the mount table, the
//! entries of "/" and of the layer), and hands it to the planner. It must not decide what
//! goes where itself, nor mount anything but through `apply`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::MsFlags;
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Pid, Uid};

mod apply;
pub mod image;
mod image_root;
mod init;
mod layout;
pub mod mountinfo;
mod task_env;

pub use init::init_main;
pub use layout::work_dir_for;
use layout::{Facts, Kind, Listing, Places, Privilege};
pub use task_env::{TASK_ENV_SUBCOMMAND, TaskImage, task_env, task_env_main};

/// Why an execution environment could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call or file operation of the execution environment failed.
    #[error("{what}")]
    Sys {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A request for an execution environment that cannot be carried out (what to do is in
    /// the message).
    #[error("{0}")]
    InvalidRun(String),
}

type Result<T> = std::result::Result<T, Error>;

fn sys(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> crate::Error {
    let what = what.into();
    move |source| crate::Error::Sys { what, source }
}

fn nix_err(what: impl Into<String>) -> impl FnOnce(nix::Error) -> crate::Error {
    let what = what.into();
    move |e| crate::Error::Sys {
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
    /// The layer is an image: the whole root, not a layer over the node's "/".
    pub image: Option<ImageView>,
}

/// What an image run takes from the host and the image's config ([`image`]).
#[derive(Debug, Clone, Default)]
pub struct ImageView {
    /// Host paths bound at the same place (the site's `[run] image_binds` and `--bind`);
    /// those the host lacks are skipped.
    pub binds: Vec<PathBuf>,
    /// The user's home on the host, bound at the same place.
    pub home: Option<PathBuf>,
    /// Where the command starts when [`RunSpec::cwd`] is not in the image (its
    /// `WorkingDir`).
    pub workdir: Option<PathBuf>,
    /// The command's whole environment ([`image::apply_env`]).
    pub env: Vec<(OsString, OsString)>,
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

/// Builds the environment and runs the command in it; returns how the command ended.
///
/// Must be called while the process is single-threaded. `self_exe` is the `teesfs` binary
/// (re-executed as the namespace's init).
pub fn enter(spec: &RunSpec, self_exe: &Path) -> Result<Outcome> {
    if spec.command.is_empty() {
        return Err(crate::Error::InvalidRun("no command to run".into()));
    }
    if spec.image.is_some() && (spec.layer.is_none() || spec.upper != Upper::Tmpfs) {
        return Err(crate::Error::InvalidRun(
            "an image runs from a job's mount or a layer directory, with writes in a tmpfs \
             (not --upper)"
                .into(),
        ));
    }
    if let Some(layer) = &spec.layer
        && !layer.is_dir()
    {
        return Err(crate::Error::InvalidRun(format!(
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

    let mut signals = init::catch_signals()?;
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(nix_err(
            "creating user, mount and PID namespaces (are unprivileged user namespaces \
             enabled? see `sysctl kernel.unprivileged_userns_clone` and \
             `user.max_user_namespaces`)",
        ))?;
    map_ids(0, uid.as_raw(), 0, gid.as_raw())?;
    apply::propagate_all(MsFlags::MS_PRIVATE, "making mounts private")?;

    let (root, created) = match (&spec.image, &spec.layer) {
        (Some(view), Some(layer)) => {
            let root = image_root::build(
                layer,
                view,
                staging.path(),
                Privilege::User,
                (uid.as_raw(), gid.as_raw()),
            )?;
            (root, Vec::new())
        }
        _ => build_root(spec, staging.path(), Privilege::User)?,
    };
    tracing::debug!(root = %root.display(), "environment built");

    let mut init = Command::new(self_exe);
    init.arg(INIT_SUBCOMMAND)
        .arg(&root)
        .arg(&status_path)
        .arg(uid.as_raw().to_string())
        .arg(gid.as_raw().to_string())
        .arg(&spec.cwd);
    if let Some(view) = &spec.image {
        init.args(&view.workdir);
        init.env_clear().envs(view.env.iter().map(|(k, v)| (k, v)));
    }
    init.arg("--").args(&spec.command);
    let child = init
        .spawn()
        .map_err(sys(format!("starting {}", self_exe.display())))?;
    match init::supervise(Pid::from_raw(child.id() as i32), &mut signals) {
        Outcome::Exited(0) => {}
        other => {
            return Err(crate::Error::InvalidRun(format!(
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
        crate::Error::InvalidRun(format!(
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
        let _ = apply::detach(self.0.path());
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

/// Lays out the new root under `staging` (an empty directory that gets a tmpfs) and
/// returns its path, with the upper directories it created.
///
/// The order matters: the staging mounts come first because they are mount points the
/// layout must see (a staging directory on the root file system splits its parents).
fn build_root(
    spec: &RunSpec,
    staging: &Path,
    privilege: Privilege,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let places = match &spec.upper {
        Upper::Tmpfs => Places::on_tmpfs(staging),
        Upper::Dir(d) => {
            let d = std::fs::canonicalize(d)
                .map_err(sys(format!("the upper directory {}", d.display())))?;
            Places::persistent(staging, &d)?
        }
    };
    let mut created = apply::apply(&layout::prepare(&places))?;
    let bound = layout::bound_paths(&spec.bind);
    let facts = gather(spec.layer.as_deref(), &bound)?;
    let plan = layout::plan(&places, &facts, &bound, privilege);
    for dir in &plan.shadowed {
        if has_entries(dir) {
            tracing::warn!(
                dir = %dir.display(),
                "the layer has files under a directory bound from the host; \
                 they are hidden in the environment"
            );
        }
    }
    created.extend(apply::apply(&plan.ops)?);
    Ok((places.root(), created))
}

/// What the layout depends on: the mount points of this namespace, and the entries of "/"
/// and the layer in the directories [`layout::dirs_to_list`] names.
fn gather(layer: Option<&Path>, bound: &[PathBuf]) -> Result<Facts> {
    let mount_points = mount_points()?;
    let mut host = Listing::new();
    let mut in_layer = Listing::new();
    for dir in layout::dirs_to_list(&mount_points, bound) {
        // Only through directories: a listing through a symlink would describe somewhere
        // else (the planner never looks there anyway).
        let through_dirs = dir.parent().is_none_or(|parent| {
            dir.file_name().is_some_and(|name| {
                host.get(parent)
                    .and_then(|entries| entries.get(name))
                    .is_some_and(|k| matches!(k, Kind::Dir { .. }))
            })
        });
        if !through_dirs {
            continue;
        }
        host.insert(dir.clone(), list(&Path::new("/").join(&dir))?);
        if let Some(l) = layer {
            in_layer.insert(dir.clone(), list(&l.join(&dir))?);
        }
    }
    Ok(Facts {
        host,
        layer: layer.map(|l| (l.to_path_buf(), in_layer)),
        mount_points,
    })
}

/// The entries of `dir` and what each is; an unreadable directory, or an entry gone
/// before it could be looked at, counts as absent.
fn list(dir: &Path) -> Result<BTreeMap<OsString, Kind>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = if md.is_dir() {
            Kind::Dir {
                mode: md.mode() & 0o7777,
            }
        } else if md.file_type().is_symlink() {
            Kind::Symlink {
                to: std::fs::read_link(&path)
                    .map_err(sys(format!("reading {}", path.display())))?,
            }
        } else if md.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        out.insert(e.file_name(), kind);
    }
    Ok(out)
}

/// The mount points of this mount namespace, relative to "/" (from `/proc/self/mountinfo`).
fn mount_points() -> Result<Vec<PathBuf>> {
    let mounts = crate::mountinfo::read(None).map_err(sys("reading /proc/self/mountinfo"))?;
    Ok(mounts
        .into_iter()
        .filter_map(|m| m.mount_point.strip_prefix("/").ok().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .collect())
}

/// Whether a directory exists and has at least one entry.
fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut r| r.next().is_some())
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
}

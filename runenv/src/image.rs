//! The root of an image run (`teesfs run --image`, a Slurm job with `--teesfs-image`),
//! decided as pure data, as `layout` does for a layer over the node's "/".
//!
//! The image is the whole root, as with enroot and Apptainer, not a layer over the host:
//!
//! - "/" is an overlay: a small skeleton on the staging tmpfs (the directories the host's
//!   mounts go on, and the files below), over the image, writes to the tmpfs. The skeleton
//!   is what lets an unprivileged user place mount points in an image whose directories
//!   belong to root;
//! - `/dev`, `/sys`, `/tmp`, the user's home and the site's paths (`[run] image_binds`,
//!   `--bind`) are the host's, bound as they are; the ones the host lacks are skipped;
//! - `/proc` is a new proc (`teesfs run`) or the host's (a Slurm task, as for any task);
//! - `/etc/passwd` and `/etc/group` are the image's with the user's entry added when the
//!   image lacks it, `/etc/hosts` and `/etc/resolv.conf` the host's (as enroot and pyxis
//!   inject them), so names resolve inside as on the node.
//!
//! The command's environment follows pyxis's rules ([`env_ops`]): the host's locale
//! variables are dropped, the image's `Env` is applied over the user's environment
//! (keeping the user's own `HOME`, `USER`, `LOGNAME` and `TERM`), and `PATH` is the
//! image's. It starts in the user's working directory if the image view has it, else in
//! the image's `WorkingDir`, else in "/"; without a command, it is `Entrypoint` + `Cmd`.
//!
//! It must not look at the system: `runenv`'s image sequence gathers the facts and
//! `apply` carries out the plan.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::layout::{Kind, Op, Privilege};

/// The `PATH` of an image whose config sets none (Docker's default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The user's variables an image's `Env` does not replace (it only sets them when the user
/// has none).
pub const USER_KEEPS: &[&str] = &["HOME", "USER", "LOGNAME", "TERM"];

/// The host's locale variables, dropped: the image may lack the locale they name (pyxis
/// drops them too). The image's own are applied after.
pub const LOCALE_DROPPED: &[&str] = &["LANG", "LANGUAGE", "LC_ALL"];

/// Host paths every image gets (relative to "/"), besides the home and the site's.
const FROM_HOST: &[&str] = &["dev", "sys", "tmp"];

/// What the environment takes from an image's config (the signed index's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `Env`: `NAME=value` entries.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
}

/// One change to the command's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvOp {
    /// Set the variable, replacing the user's.
    Set(String, String),
    /// Set the variable only if the user has none.
    Default(String, String),
    /// Remove the variable.
    Unset(String),
}

/// The changes an image's `Env` makes to the user's environment, in order.
pub fn env_ops(image_env: &[String]) -> Vec<EnvOp> {
    let mut ops: Vec<EnvOp> = LOCALE_DROPPED
        .iter()
        .map(|k| EnvOp::Unset(k.to_string()))
        .collect();
    let mut has_path = false;
    for entry in image_env {
        let Some((k, v)) = entry.split_once('=') else {
            continue;
        };
        if k.is_empty() {
            continue;
        }
        has_path |= k == "PATH";
        ops.push(if USER_KEEPS.contains(&k) {
            EnvOp::Default(k.into(), v.into())
        } else {
            EnvOp::Set(k.into(), v.into())
        });
    }
    if !has_path {
        ops.push(EnvOp::Set("PATH".into(), DEFAULT_PATH.into()));
    }
    ops
}

/// `user` (in order) changed by `ops`; new variables come last, in the ops' order.
pub fn apply_env(user: Vec<(OsString, OsString)>, ops: &[EnvOp]) -> Vec<(OsString, OsString)> {
    let mut env = user;
    for op in ops {
        let (k, v, replace) = match op {
            EnvOp::Unset(k) => {
                env.retain(|(name, _)| name != OsStr::new(k));
                continue;
            }
            EnvOp::Set(k, v) => (k, v, true),
            EnvOp::Default(k, v) => (k, v, false),
        };
        match env.iter_mut().find(|(name, _)| name == OsStr::new(k)) {
            Some((_, old)) if replace => *old = v.into(),
            Some(_) => {}
            None => env.push((k.into(), v.into())),
        }
    }
    env
}

/// What runs: the given command, else the image's `Entrypoint` + `Cmd`; `None` if neither.
pub fn command(given: &[OsString], config: &ImageConfig) -> Option<Vec<OsString>> {
    if !given.is_empty() {
        return Some(given.to_vec());
    }
    let from_image: Vec<OsString> = (config.entrypoint.iter().chain(&config.cmd))
        .map(OsString::from)
        .collect();
    (!from_image.is_empty()).then_some(from_image)
}

/// The user, as the image's `/etc/passwd` and `/etc/group` should know them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name (the uid in decimal when the host has no entry).
    pub name: String,
    /// Uid.
    pub uid: u32,
    /// Primary gid.
    pub gid: u32,
    /// The primary group's name.
    pub group: String,
    /// Home directory.
    pub home: PathBuf,
    /// Login shell.
    pub shell: PathBuf,
}

/// What the image's root depends on, gathered by `runenv`.
#[derive(Debug, Clone)]
pub struct ImageFacts {
    /// The image (the job's mount).
    pub image: PathBuf,
    /// What the image's `etc` is, if it has one.
    pub etc: Option<Kind>,
    /// The image's `/etc/passwd` and `/etc/group`, when regular files.
    pub passwd: Option<String>,
    /// See `passwd`.
    pub group: Option<String>,
    /// The host's `/etc/hosts` and `/etc/resolv.conf`, when readable.
    pub hosts: Option<Vec<u8>>,
    /// See `hosts`.
    pub resolv: Option<Vec<u8>>,
    /// The user.
    pub user: User,
    /// The user's home on the host, bound at the same place, if it has one.
    pub home: Option<PathBuf>,
    /// The site's and the user's paths to bind, each with what the host has there
    /// (following symlinks; `None`: nothing).
    pub binds: Vec<(PathBuf, Option<Kind>)>,
}

/// One entry of the skeleton.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skel {
    /// A directory (and its parents).
    Dir(PathBuf),
    /// A file with this content.
    File(PathBuf, Vec<u8>),
}

/// The image's root, in the order it is built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagePlan {
    /// The staging tmpfs and the directories on it.
    pub prepare: Vec<Op>,
    /// The skeleton, written on the tmpfs before the overlay is mounted.
    pub skeleton: Vec<Skel>,
    /// The overlay and the binds.
    pub ops: Vec<Op>,
    /// Paths left out, with why (a log line each, not an error).
    pub skipped: Vec<(PathBuf, String)>,
}

/// Where the new root is built under `staging`.
pub fn root_of(staging: &Path) -> PathBuf {
    staging.join("root")
}

/// Lays out the image's root under `staging` (an empty directory that gets a tmpfs).
pub fn plan(staging: &Path, facts: &ImageFacts, privilege: Privilege) -> ImagePlan {
    let (skel, upper, work, root) = (
        staging.join("skel"),
        staging.join("upper"),
        staging.join("work"),
        root_of(staging),
    );
    let mut p = ImagePlan::default();
    p.prepare.push(Op::Tmpfs {
        target: staging.to_path_buf(),
    });
    for d in [&skel, &upper, &work, &root] {
        p.prepare.push(Op::Mkdir {
            path: d.clone(),
            mode: None,
        });
    }
    if privilege == Privilege::User {
        // The namespace's init mounts a proc of its own here.
        p.skeleton.push(Skel::Dir(skel.join("proc")));
    }
    p.ops.push(Op::Overlay {
        target: root.clone(),
        lowers: vec![skel.clone(), facts.image.clone()],
        upper,
        work,
        userxattr: privilege == Privilege::User,
    });
    for (rel, source, dir) in binds(facts, privilege, &mut p.skipped) {
        p.skeleton.push(if dir {
            Skel::Dir(skel.join(&rel))
        } else {
            Skel::File(skel.join(&rel), Vec::new())
        });
        p.ops.push(Op::Bind {
            source,
            target: root.join(&rel),
            recursive: dir,
        });
    }
    etc_files(facts, &skel, &mut p);
    p
}

/// The binds, parents first: `(path relative to "/", host source, whether a directory)`.
fn binds(
    facts: &ImageFacts,
    privilege: Privilege,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Vec<(PathBuf, PathBuf, bool)> {
    let mut out: Vec<(PathBuf, PathBuf, bool)> = FROM_HOST
        .iter()
        .map(|d| (PathBuf::from(d), Path::new("/").join(d), true))
        .collect();
    if privilege == Privilege::Root {
        out.push(("proc".into(), "/proc".into(), true));
    }
    if let Some(home) = &facts.home {
        match home.strip_prefix("/") {
            Ok(rel) if !rel.as_os_str().is_empty() => out.push((rel.into(), home.clone(), true)),
            _ => skipped.push((home.clone(), "the home directory is not below \"/\"".into())),
        }
    }
    for (path, kind) in &facts.binds {
        if let Some(why) = manifest_bind_problem(path) {
            skipped.push((path.clone(), why.into()));
            continue;
        }
        let rel = path.strip_prefix("/").unwrap_or(path).to_path_buf();
        if out.iter().any(|(r, _, _)| *r == rel) {
            continue;
        }
        match kind {
            Some(Kind::Dir { .. }) => out.push((rel, path.clone(), true)),
            Some(Kind::File) => out.push((rel, path.clone(), false)),
            Some(_) => skipped.push((path.clone(), "is neither a directory nor a file".into())),
            None => skipped.push((path.clone(), "is not on this node".into())),
        }
    }
    // A parent's bind must come before its children's, or it would hide them.
    out.sort_by_key(|(rel, _, _)| rel.components().count());
    out
}

/// The same rule as the site file's `[run] image_binds` (kept here so the plan stays pure
/// and the crate free of the manifest).
fn manifest_bind_problem(p: &Path) -> Option<&'static str> {
    use std::path::Component;
    if !p.is_absolute() || p.parent().is_none() {
        return Some("is not an absolute path below \"/\"");
    }
    let plain = p
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    (!plain).then_some("has a `.` or `..` component")
}

/// `/etc/passwd`, `/etc/group`, `/etc/hosts` and `/etc/resolv.conf` in the skeleton,
/// unless the image's `etc` is not a directory (a link or a file would be hidden whole).
fn etc_files(facts: &ImageFacts, skel: &Path, p: &mut ImagePlan) {
    if facts
        .etc
        .as_ref()
        .is_some_and(|k| !matches!(k, Kind::Dir { .. }))
    {
        p.skipped.push((
            "/etc".into(),
            "is not a directory in the image: its passwd, group, hosts and resolv.conf are \
             left as they are"
                .into(),
        ));
        return;
    }
    let etc = skel.join("etc");
    p.skeleton.push(Skel::Dir(etc.clone()));
    let u = &facts.user;
    let passwd = with_entry(
        facts
            .passwd
            .as_deref()
            .unwrap_or("root:x:0:0:root:/root:/bin/sh\n"),
        u.uid,
        &format!(
            "{}:x:{}:{}:{}:{}:{}",
            u.name,
            u.uid,
            u.gid,
            u.name,
            u.home.display(),
            u.shell.display()
        ),
    );
    let group = with_entry(
        facts.group.as_deref().unwrap_or("root:x:0:\n"),
        u.gid,
        &format!("{}:x:{}:", u.group, u.gid),
    );
    p.skeleton
        .push(Skel::File(etc.join("passwd"), passwd.into_bytes()));
    p.skeleton
        .push(Skel::File(etc.join("group"), group.into_bytes()));
    for (name, content) in [("hosts", &facts.hosts), ("resolv.conf", &facts.resolv)] {
        if let Some(c) = content {
            p.skeleton.push(Skel::File(etc.join(name), c.clone()));
        }
    }
}

/// `file` (passwd or group lines) with `line` added unless an entry has the id `id` (the
/// third field).
pub fn with_entry(file: &str, id: u32, line: &str) -> String {
    let id = id.to_string();
    let known = file
        .lines()
        .any(|l| l.split(':').nth(2) == Some(id.as_str()));
    let mut out = file.to_string();
    if !known {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;

//! A Slurm task's environment (`teesfs __task-env`), built as root for the SPANK plugin:
//! the layer over the node's "/", or with [`TaskImage`] the image as the whole root. The
//! plugin joins the mount namespace made here, then Slurm drops to the user and execs the
//! task's command in it.
//!
//! What the plugin reads on the helper's standard output, one line each, before `ready`
//! (names and values hex-encoded, as they may hold any byte but NUL):
//! `env-set NAME VALUE`, `env-default NAME VALUE` (only if the task has none),
//! `env-unset NAME` (an image's environment, [`image::env_ops`]) and `workdir PATH`
//! (where the task starts when its working directory is not in the image).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;
use nix::sched::{CloneFlags, unshare};

use super::image::{self, EnvOp, ImageConfig};
use super::layout::Privilege;
use super::{ImageView, Result, RunSpec, Upper, apply, build_root, image_root, nix_err, sys};

/// The hidden subcommand the SPANK plugin runs to build a Slurm task's environment
/// (`teesfs-spank`'s `TASK_ENV_SUBCOMMAND`).
pub const TASK_ENV_SUBCOMMAND: &str = "__task-env";

/// What a task of an image job gets besides the layer.
#[derive(Debug, Clone, Default)]
pub struct TaskImage {
    /// The site's paths bound into the image (`[run] image_binds`).
    pub binds: Vec<PathBuf>,
    /// The image's config, from the job's signed index.
    pub config: ImageConfig,
}

/// `teesfs __task-env LAYER UID`: [`task_env`] with the layer over the node's "/".
pub fn task_env_main(args: &[OsString]) -> Result<()> {
    let bad = || {
        crate::Error::InvalidRun(format!(
            "{TASK_ENV_SUBCOMMAND}: bad arguments {args:?} (LAYER UID)"
        ))
    };
    let [layer, uid] = args else {
        return Err(bad());
    };
    let uid: u32 = uid.to_str().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    task_env(Path::new(layer), uid, None)
}

/// Run as root by the SPANK plugin for each task of a job whose layer is mounted at
/// `layer`: builds the execution environment (the layer over "/", writes to a tmpfs, the
/// host's mount points, `/home`, `/tmp`, `/run`, `/dev`, `/sys` and `/proc` as they are;
/// or, with `image`, the image as "/" with the host's places of [`image`]) in a new mount
/// namespace that still receives the host's later mounts, switches its root to it, prints
/// what the task's environment needs and `ready`, and waits for standard input to close.
/// The plugin joins the namespace in between; the helper then exits and the namespace
/// lives as long as the task.
///
/// The layer must belong to UID (the daemon gives a job's mount to the job's user) or to
/// root (a job pushed without an owner): a task never sees another user's layer.
pub fn task_env(layer: &Path, uid: u32, image: Option<TaskImage>) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Err(crate::Error::InvalidRun(format!(
            "{TASK_ENV_SUBCOMMAND} builds a Slurm task's environment and must run as root \
             (slurmstepd's SPANK plugin runs it); users run `teesfs run`"
        )));
    }
    let md = std::fs::metadata(layer).map_err(sys(format!("the layer {}", layer.display())))?;
    if md.uid() != uid && md.uid() != 0 {
        return Err(crate::Error::InvalidRun(format!(
            "the layer {} belongs to uid {}, not to the job's user {uid}; refusing to show it \
             to this job",
            layer.display(),
            md.uid()
        )));
    }
    let parent = layer
        .parent()
        .ok_or_else(|| crate::Error::InvalidRun(format!("{} has no parent", layer.display())))?;
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
    unshare(CloneFlags::CLONE_NEWNS).map_err(nix_err("creating a mount namespace"))?;
    // Nothing done here reaches the host; what the host mounts later (automounted homes,
    // other jobs) still reaches the task.
    apply::propagate_all(MsFlags::MS_SLAVE, "making mounts slaves of the host's")?;
    // An image task's user as the passwd entry has them: their home is bound into the image.
    let entry = (image.as_ref())
        .and_then(|_| nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok())
        .flatten();
    let home =
        (entry.as_ref().map(|u| u.dir.clone())).filter(|d| d.is_absolute() && d.parent().is_some());
    let root = match &image {
        Some(img) => {
            let gid = entry.as_ref().map_or(uid, |u| u.gid.as_raw());
            let view = ImageView {
                binds: img.binds.clone(),
                home: home.clone(),
                ..ImageView::default()
            };
            image_root::build(layer, &view, &staging, Privilege::Root, (uid, gid))?
        }
        None => {
            let spec = RunSpec {
                layer: Some(layer.to_path_buf()),
                upper: Upper::Tmpfs,
                bind: Vec::new(),
                command: Vec::new(),
                cwd: PathBuf::from("/"),
                image: None,
            };
            build_root(&spec, &staging, Privilege::Root)?.0
        }
    };
    apply::switch_root(&root)?;
    // The staging tmpfs shows up again under the bound /run; it is of no use to the task.
    let _ = apply::detach(&staging);
    if let Some(name) = staging.file_name() {
        let _ = nix::unistd::unlinkat(&parent_dir, name, nix::unistd::UnlinkatFlags::RemoveDir);
    }
    let mut said = String::new();
    if let Some(img) = &image {
        let name = entry.as_ref().map(|u| u.name.as_str());
        said = directives(&img.config, name, home.as_deref());
    }
    said.push_str("ready\n");
    let mut out = std::io::stdout().lock();
    out.write_all(said.as_bytes())
        .and_then(|()| out.flush())
        .map_err(sys("telling the plugin the environment is ready"))?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    Ok(())
}

/// `bytes` as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines that tell the plugin an image's environment and working directory. `name`
/// and `home` (the user's passwd entry; the home is bound into the image) come first as
/// `HOME`, `USER` and `LOGNAME` for a task whose job has none (`sbatch --export=NONE`
/// passes only `SLURM_*` variables): the image's own `HOME` (often `/root`, not the user's)
/// then fills in nothing.
pub fn directives(config: &ImageConfig, name: Option<&str>, home: Option<&Path>) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    let own = (home.map(|h| ("HOME", h.as_os_str().as_bytes())).into_iter())
        .chain(name.map(|n| ("USER", n.as_bytes())))
        .chain(name.map(|n| ("LOGNAME", n.as_bytes())));
    for (k, v) in own {
        out.push_str(&format!("env-default {} {}\n", hex(k.as_bytes()), hex(v)));
    }
    for op in image::env_ops(&config.env) {
        let line = match op {
            EnvOp::Set(k, v) => format!("env-set {} {}", hex(k.as_bytes()), hex(v.as_bytes())),
            EnvOp::Default(k, v) => {
                format!("env-default {} {}", hex(k.as_bytes()), hex(v.as_bytes()))
            }
            EnvOp::Unset(k) => format!("env-unset {}", hex(k.as_bytes())),
        };
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(w) = &config.working_dir {
        out.push_str(&format!("workdir {}\n", hex(w.as_bytes())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_carry_the_env_ops_and_workdir_in_hex() {
        let cfg = ImageConfig {
            env: vec!["PATH=/x".into(), "HOME=/root".into()],
            working_dir: Some("/w".into()),
            ..ImageConfig::default()
        };
        let d = directives(&cfg, None, None);
        let lines: Vec<&str> = d.lines().collect();
        let image = [
            "env-unset 4c414e47",
            "env-unset 4c414e4755414745",
            "env-unset 4c435f414c4c",
            "env-set 50415448 2f78",
            "env-default 484f4d45 2f726f6f74",
            "workdir 2f77",
        ];
        assert_eq!(lines, image);
        // The user's own HOME, USER and LOGNAME come first: a job without them (`sbatch
        // --export=NONE`) gets the home bound into the image, not the image's /root.
        let d = directives(&cfg, Some("ann"), Some(Path::new("/h/ann")));
        let lines: Vec<&str> = d.lines().collect();
        let own = [
            "env-default 484f4d45 2f682f616e6e",
            "env-default 55534552 616e6e",
            "env-default 4c4f474e414d45 616e6e",
        ];
        assert_eq!(lines, own.iter().chain(&image).copied().collect::<Vec<_>>());
    }
}

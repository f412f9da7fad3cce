//! `teesfs run --image`: the layer as the whole root, as enroot and Apptainer run an image
//! (runenv's `image` has the layout and the rules). This module finds the image's config
//! (the daemon's, for a job; the index's, for `--image TAG|ID`, which it mounts for the
//! run), and turns it into the command, its environment and its working directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use peertree::relay::JobId;
use runenv::image::{self, ImageConfig};
use runenv::{ImageView, Outcome, RunSpec};
use teesfs_node::control::Request;

use super::run::RunArgs;
use super::util;

/// Fills in `spec.image` (and the command) for an image run of `spec.layer`.
pub(super) fn make_image_spec(args: &RunArgs, spec: &mut RunSpec) -> anyhow::Result<()> {
    let config = match (&args.image_config, &args.layer, &spec.layer) {
        (Some(json), _, _) => config_from_json(&serde_json::from_str(json)?),
        // A directory of the user's: no config but what it holds.
        (None, Some(_), _) | (None, None, None) => ImageConfig::default(),
        (None, None, Some(mount)) => job_config(&args.control, mount),
    };
    spec.command = image::command(&args.command, &config).context(
        "the image has no Entrypoint or Cmd: give the command (`teesfs run --image -- CMD`)",
    )?;
    let mut binds = args.image_bind.clone();
    for b in &args.bind {
        if let Some(why) = manifest::site::run::bind_problem(b) {
            bail!("--bind {}: it {why}", b.display());
        }
        binds.push(b.clone());
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.parent().is_some());
    spec.image = Some(ImageView {
        binds,
        home,
        workdir: config.working_dir.as_deref().map(PathBuf::from),
        env: image::apply_env(std::env::vars_os().collect(), &image::env_ops(&config.env)),
    });
    Ok(())
}

/// An image config from its JSON (the index's `image`, as the daemon's `status` and
/// `--image-config` carry it); missing fields are empty.
pub(super) fn config_from_json(v: &serde_json::Value) -> ImageConfig {
    let list = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    ImageConfig {
        env: list("env"),
        entrypoint: list("entrypoint"),
        cmd: list("cmd"),
        working_dir: v["working_dir"]
            .as_str()
            .filter(|w| !w.is_empty())
            .map(str::to_string),
    }
}

/// The image config of the job mounted at `mount`, as its node's daemon has it (from the
/// job's signed index); none, with a warning, when the daemon cannot tell.
pub(super) fn job_config(control: &Path, mount: &Path) -> ImageConfig {
    let job = mount
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<JobId>().ok());
    let asked = job
        .context("the job's directory is not named by its id")
        .and_then(|j| {
            let line = super::status::ask(control, &Request::Job(j).to_string())?;
            Ok(serde_json::from_str::<serde_json::Value>(&line)?)
        });
    match asked {
        Ok(status) => config_from_json(&status["image"]),
        Err(e) => {
            tracing::warn!(
                "cannot ask the daemon for the image's config ({e:#}); running without its \
                 Env, WorkingDir, Entrypoint and Cmd"
            );
            ImageConfig::default()
        }
    }
}

/// The image's config as `--image-config` carries it.
pub(super) fn config_to_json(c: &ImageConfig) -> serde_json::Value {
    serde_json::json!({
        "env": c.env,
        "entrypoint": c.entrypoint,
        "cmd": c.cmd,
        "working_dir": c.working_dir,
    })
}

/// `teesfs run --image TAG|ID`: mounts that index of the store for the run, and runs
/// `teesfs run --image --layer MOUNT` in it (this process has FUSE threads now, and a new
/// user namespace needs a single-threaded one).
pub(super) fn from_store(args: &RunArgs) -> anyhow::Result<std::process::ExitCode> {
    use teesfs_node::fs::mount::{MountConfig, mount};
    let at = util::IndexArgs {
        store: (args.store.clone())
            .context("--image TAG|ID needs --store DIR (or the site's [store] path)")?,
        index: args.image.clone().unwrap_or_default(),
        trust: args.trust.clone(),
    };
    let (store, id, index) = at.open().context("refusing to run it")?;
    let config = index_config(&index);
    let mountpoint = tempfile::Builder::new()
        .prefix("teesfs-image.")
        .tempdir()
        .context("creating a mountpoint")?;
    let source = Arc::new(teesfs_node::source::StoreSource::new(store, &index));
    let mounted = mount(
        index,
        id,
        source,
        mountpoint.path(),
        &MountConfig::default(),
    )
    .context("mounting the image (needs root, or fusermount3 from fuse3)")?;
    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    let mut child = std::process::Command::new(exe);
    child
        .arg("run")
        .arg("--image")
        .arg("--layer")
        .arg(mountpoint.path())
        .arg("--image-config")
        .arg(config_to_json(&config).to_string());
    for b in &args.image_bind {
        child.arg(format!("--image-bind={}", b.display()));
    }
    for b in &args.bind {
        child.arg(format!("--bind={}", b.display()));
    }
    let status = child
        .arg("--")
        .args(&args.command)
        .status()
        .context("starting `teesfs run`");
    mounted.unmount()?;
    let status = status?;
    use std::os::unix::process::ExitStatusExt;
    super::run::exit_code(match (status.code(), status.signal()) {
        (Some(c), _) => Outcome::Exited(c),
        (None, Some(s)) => Outcome::Signaled(s),
        (None, None) => Outcome::Exited(125),
    })
}

/// The image config the index carries (none for a plain layer).
pub(super) fn index_config(index: &manifest::Index) -> ImageConfig {
    index
        .image
        .as_ref()
        .map_or_else(ImageConfig::default, |c| ImageConfig {
            env: c.env.clone(),
            entrypoint: c.entrypoint.clone(),
            cmd: c.cmd.clone(),
            working_dir: c.working_dir.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_round_trips_through_json() {
        let c = ImageConfig {
            env: vec!["A=1".into()],
            entrypoint: vec!["/e".into()],
            cmd: vec!["x".into(), "y".into()],
            working_dir: Some("/w".into()),
        };
        assert_eq!(config_from_json(&config_to_json(&c)), c);
        assert_eq!(
            config_from_json(&serde_json::Value::Null),
            ImageConfig::default()
        );
    }
}

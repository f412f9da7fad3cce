//! `teesfs __task-env --image CONTROL LAYER UID`: the SPANK plugin's helper (run as root)
//! for a task of an image job (`--teesfs-image`, or `[layer] image = true`). It asks this
//! node's daemon (its control socket, CONTROL) for the image's config from the job's signed
//! index, takes the site's `[run] image_binds`, and has runenv build the task's root.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Runs the helper with the arguments after `--image`.
pub fn image_main(args: &[OsString]) -> anyhow::Result<()> {
    let [control, layer, uid] = args else {
        bail!(
            "{}: bad arguments {args:?} (--image CONTROL LAYER UID)",
            runenv::TASK_ENV_SUBCOMMAND
        );
    };
    let uid: u32 = uid
        .to_str()
        .and_then(|u| u.parse().ok())
        .context("the uid is not a number")?;
    let layer = PathBuf::from(layer);
    let config = super::run_image::job_config(Path::new(control), &layer);
    let loaded =
        teesfs_node::site::load_lenient(&teesfs_node::site::main_path()).unwrap_or_default();
    for p in loaded.problems.iter().filter(|p| p.section == "run") {
        tracing::warn!("{p}; binding the default paths");
    }
    let binds = loaded.config.run.image_binds();
    runenv::task_env(&layer, uid, Some(runenv::TaskImage { binds, config }))?;
    Ok(())
}

//! `teesfs lab launch --image`: an OCI image prepared for every launch method. The image is
//! unpacked once with `umoci` (the tree the baselines deliver) and squashed once with
//! `mksquashfs` (what enroot/pyxis and Apptainer ship), both cached under
//! `/var/tmp/teesfs-lab-image/` by the image's manifest. Every method starts the
//! application the same way, as `teesfs run --image` starts a task: the node's copy of the
//! image is the root (an overlay with private writes; /tmp, /dev, /sys, home from the
//! node), with the image's Env and WorkingDir, and its Entrypoint and Cmd by default.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::cmd::util::sh_quote;

/// An image ready for the launch methods.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The image unpacked: the tree every method delivers.
    pub rootfs: PathBuf,
    /// The forms the baselines use.
    pub files: lab::image::ImageFiles,
    /// The image's config: `Env` (NAME=VALUE).
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
}

/// Splits `DIR[:TAG]` (tag `latest` when absent, or the layout's only tag).
fn split_source(source: &str) -> (PathBuf, Option<String>) {
    match source.rsplit_once(':') {
        Some((dir, tag)) if !tag.contains('/') && Path::new(dir).is_dir() => {
            (PathBuf::from(dir), Some(tag.to_string()))
        }
        _ => (PathBuf::from(source), None),
    }
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<Vec<u8>> {
    let out = cmd
        .output()
        .with_context(|| format!("running {what} (scripts/deps.sh installs it)"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// The layout's tags (`umoci ls`).
fn tags(layout: &Path) -> anyhow::Result<Vec<String>> {
    let out = run(
        Command::new("umoci").args(["ls", "--layout"]).arg(layout),
        "umoci ls",
    )?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_string)
        .collect())
}

/// Prepares the OCI image layout `source` (`DIR` or `DIR:TAG`).
pub fn prepare(source: &str) -> anyhow::Result<Prepared> {
    let (layout, tag) = split_source(source);
    if !layout.join("index.json").is_file() {
        bail!(
            "--image {source}: not an OCI image layout (no index.json); make one with \
             `skopeo copy docker-archive:FILE oci:DIR:TAG` or scripts/image-build.sh"
        );
    }
    let known = tags(&layout)?;
    let tag = match tag {
        Some(t) if known.contains(&t) => t,
        Some(t) => bail!("--image {source}: no tag {t:?}; the layout has {known:?}"),
        None if known.len() == 1 => known[0].clone(),
        None => bail!("--image {source}: name a tag (DIR:TAG); the layout has {known:?}"),
    };
    let image_ref = format!("oci:{}:{tag}", layout.display());
    let config = run(
        Command::new("skopeo").args(["inspect", "--config", &image_ref]),
        "skopeo inspect --config",
    )?;
    let config: serde_json::Value =
        serde_json::from_slice(&config).context("reading the image's config")?;
    let key = blake3::hash(&run(
        Command::new("skopeo").args(["inspect", "--raw", &image_ref]),
        "skopeo inspect --raw",
    )?)
    .to_hex();
    let cache = PathBuf::from("/var/tmp/teesfs-lab-image").join(&key[..16]);
    let rootfs = cache.join("bundle/rootfs");
    let squashfs = cache.join("image.sqfs");
    if !squashfs.is_file() {
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
        errln!("unpacking {image_ref} into {} (once)", cache.display());
        run(
            Command::new("umoci")
                .args(["unpack", "--image"])
                .arg(format!("{}:{tag}", layout.display()))
                .arg(cache.join("bundle")),
            "umoci unpack",
        )?;
        let part = cache.join("image.sqfs.part");
        run(
            Command::new("mksquashfs").arg(&rootfs).arg(&part).args([
                "-quiet",
                "-no-progress",
                "-noappend",
            ]),
            "mksquashfs",
        )?;
        std::fs::rename(&part, &squashfs)?;
    }
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let c = &config["config"];
    Ok(Prepared {
        rootfs,
        files: lab::image::ImageFiles {
            oci: layout,
            tag,
            squashfs,
        },
        env: strings(&c["Env"]),
        entrypoint: strings(&c["Entrypoint"]),
        cmd: strings(&c["Cmd"]),
        working_dir: c["WorkingDir"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    })
}

impl Prepared {
    /// The image's config as `teesfs run --image --image-config` takes it.
    fn config_json(&self) -> String {
        serde_json::json!({
            "env": self.env,
            "entrypoint": self.entrypoint,
            "cmd": self.cmd,
            "working_dir": self.working_dir,
        })
        .to_string()
    }

    /// What runs: `-- /bin/sh -c APP` for `--app`, else nothing (the Entrypoint and Cmd).
    fn command(&self, app: Option<&str>) -> anyhow::Result<Vec<String>> {
        match app {
            Some(a) => Ok(["--", "/bin/sh", "-c", a].map(str::to_string).to_vec()),
            None if self.entrypoint.is_empty() && self.cmd.is_empty() => {
                bail!("the image has no Entrypoint or Cmd: give the application with --app")
            }
            None => Ok(Vec::new()),
        }
    }

    /// The shell command that starts `app` (default: the image's Entrypoint and Cmd) on a
    /// node whose copy of the image is at `$TEESFS_MOUNT`, as a Slurm task of an image job
    /// starts: `teesfs run --image` over that copy, with the image's config.
    pub fn app(&self, teesfs: &Path, app: Option<&str>) -> anyhow::Result<String> {
        let mut words = vec![
            "exec".to_string(),
            sh_quote(&teesfs.display().to_string()),
            "run --image --layer \"$TEESFS_MOUNT\" --image-config".into(),
            sh_quote(&self.config_json()),
        ];
        words.extend(self.command(app)?.iter().map(|w| sh_quote(w)));
        Ok(words.join(" "))
    }

    /// The arguments of `teesfs record` after `--image INDEX` that record `app` (default:
    /// the image's Entrypoint and Cmd, which the index carries).
    pub fn record_args(&self, app: Option<&str>) -> anyhow::Result<Vec<String>> {
        self.command(app)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_runs_as_a_task_of_an_image_job_with_the_images_config() {
        let p = Prepared {
            rootfs: PathBuf::new(),
            files: lab::image::ImageFiles {
                oci: PathBuf::new(),
                tag: "sci".into(),
                squashfs: PathBuf::new(),
            },
            env: vec!["PATH=/usr/bin:/bin".into(), "A=it's".into()],
            entrypoint: vec!["python3".into()],
            cmd: vec!["-m".into(), "sciapp".into()],
            working_dir: Some("/opt/sciapp".into()),
        };
        let app = p.app(Path::new("/t/teesfs"), None).expect("app");
        assert_eq!(
            app,
            r#"exec '/t/teesfs' run --image --layer "$TEESFS_MOUNT" --image-config '{"cmd":["-m","sciapp"],"entrypoint":["python3"],"env":["PATH=/usr/bin:/bin","A=it'\''s"],"working_dir":"/opt/sciapp"}'"#
        );
        let given = p.app(Path::new("/t/teesfs"), Some("true")).expect("app");
        assert!(given.ends_with(r#"'--' '/bin/sh' '-c' 'true'"#), "{given}");
        assert!(p.record_args(None).expect("args").is_empty());
        let none = Prepared {
            entrypoint: vec![],
            cmd: vec![],
            ..p
        };
        assert!(none.app(Path::new("t"), None).is_err());
        assert!(none.record_args(Some("x")).is_ok());
    }

    #[test]
    fn a_source_names_its_tag_after_a_colon_only_when_the_directory_exists() {
        let dir = std::env::temp_dir();
        let s = format!("{}:sci", dir.display());
        assert_eq!(split_source(&s), (dir.clone(), Some("sci".into())));
        assert_eq!(
            split_source("/no/such/dir:sci"),
            (PathBuf::from("/no/such/dir:sci"), None)
        );
    }
}

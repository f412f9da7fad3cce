//! `teesfs record`: run a command once against a published layer and write down, in order,
//! the files it opened and the names it probed that exist nowhere. The list is the urgent
//! set (and its push order) for `teesfs publish --urgent-list`.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use teesfs::fs::mount::{MountConfig, mount};
use teesfs::fs::record::{Recorder, Recording};
use teesfs::fs::tree::Tree;
use teesfs::source::StoreSource;

use super::util;

/// Arguments of `teesfs record`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Example (login node):
  teesfs publish ~/layer --store /shared/teesfs            # prints the index id
  teesfs record --store /shared/teesfs --index 3a6a -o urgent.list -- python3 /opt/app/main.py
  teesfs publish ~/layer --store /shared/teesfs --urgent-list urgent.list

The command runs in `teesfs run`'s environment with the published layer (mounted with FUSE,
which needs root or fusermount3) over \"/\", so it sees exactly what a compute node will.
The list holds one layer path per line in the order of first use; lines starting with `#`
are comments and lines starting with `!` are names the command looked up that exist neither
in the layer nor on this node (a node answers those from its index, without the network).")]
pub struct RecordArgs {
    #[command(flatten)]
    at: util::IndexArgs,
    /// Where to write the list.
    #[arg(short, long, value_name = "FILE", default_value = "urgent.list")]
    output: PathBuf,
    /// The command to record and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `teesfs record`.
pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    let (store, id, index) = args.at.open().context("refusing to record against it")?;
    let tree = Tree::new(index.clone());
    let mountpoint = tempfile::Builder::new()
        .prefix("teesfs-record.")
        .tempdir()
        .context("creating a mountpoint")?;
    let recorder = Arc::new(Recorder::default());
    let cfg = MountConfig {
        recorder: Some(recorder.clone()),
        ..MountConfig::default()
    };
    let mounted = mount(
        index,
        id,
        Arc::new(StoreSource::new(store)),
        mountpoint.path(),
        &cfg,
    )
    .context("mounting the layer to record against (needs root, or fusermount3 from fuse3)")?;

    let exe = std::env::current_exe().context("finding the teesfs binary")?;
    let status = std::process::Command::new(exe)
        .arg("run")
        .arg("--layer")
        .arg(mountpoint.path())
        .arg("--")
        .args(&args.command)
        .status()
        .context("starting `teesfs run`");
    let recording = recorder.recording(&tree);
    mounted.unmount()?;
    let status = status?;

    let absent: Vec<&Vec<u8>> = recording
        .absent
        .iter()
        .filter(|p| !Path::new("/").join(std::ffi::OsStr::from_bytes(p)).exists())
        .collect();
    write_list(&args, &id.to_string(), &recording, &absent)
        .with_context(|| format!("writing {}", args.output.display()))?;
    println!(
        "recorded {} files opened ({}) and {} names that exist nowhere -> {}",
        recording.opened.len(),
        util::bytes(recording.opened_bytes),
        absent.len(),
        args.output.display()
    );
    if !status.success() {
        bail!(
            "the command failed ({status}); the list holds what it used until then. Record a \
             run that succeeds"
        );
    }
    println!(
        "next: teesfs publish LAYER --store {} --urgent-list {}",
        args.at.store.display(),
        args.output.display()
    );
    Ok(())
}

fn write_list(
    args: &RecordArgs,
    index: &str,
    rec: &Recording,
    absent: &[&Vec<u8>],
) -> std::io::Result<()> {
    let mut out = Vec::new();
    let cmd: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    writeln!(
        out,
        "# teesfs record of `{}` against index {index}",
        cmd.join(" ")
    )?;
    writeln!(
        out,
        "# {} files in order of first use, then `!` names looked up that exist nowhere",
        rec.opened.len()
    )?;
    for p in &rec.opened {
        line(&mut out, "", p)?;
    }
    for p in absent {
        line(&mut out, "!", p)?;
    }
    let tmp = args.output.with_extension("tmp");
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, &args.output)
}

fn line(out: &mut Vec<u8>, prefix: &str, path: &[u8]) -> std::io::Result<()> {
    if path.contains(&b'\n') {
        tracing::warn!(path = %String::from_utf8_lossy(path), "a name with a newline cannot be listed; left out");
        return Ok(());
    }
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(path);
    out.push(b'\n');
    Ok(())
}

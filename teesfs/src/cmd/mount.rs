//! `teesfs mount`: mount a published layer read-only with FUSE and stay in the foreground
//! until Ctrl-C, SIGTERM or an external unmount.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use teesfs_node::fs::copies::Copies;
use teesfs_node::fs::fuse::PassthroughConfig;
use teesfs_node::fs::mount::{MountConfig, mount};
use teesfs_node::source::StoreSource;

use super::util;

/// When to hand complete files to the kernel (FUSE passthrough).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Passthrough {
    /// When running as root (passthrough needs CAP_SYS_ADMIN).
    Auto,
    /// Never: every read is served by this process.
    Never,
}

/// Arguments of `teesfs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// Where to mount (an existing directory).
    mountpoint: PathBuf,
    #[command(flatten)]
    at: util::IndexArgs,
    /// Memory for decompressed chunks.
    #[arg(long, default_value = "256MiB", value_parser = util::parse_size)]
    cache: u64,
    /// Serve complete files through kernel passthrough (near native speed).
    #[arg(long, value_enum, default_value_t = Passthrough::Auto)]
    passthrough: Passthrough,
    /// Where files are materialised for passthrough (memory-backed by default). Each mount
    /// uses a private directory `mount-PID` in it (0700), removed at exit; DIR itself must
    /// not be writable by other users unless it is sticky (like /tmp).
    #[arg(long, value_name = "DIR", default_value = "/run/teesfs/files")]
    materialize_dir: PathBuf,
    /// Bytes of passthrough copies kept at once (copies not open are evicted).
    #[arg(long, default_value = "1GiB", value_parser = util::parse_size)]
    copies_budget: u64,
    /// How long a read waits for a missing chunk before failing with EIO.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    read_timeout: Duration,
    /// Files below this size are always served by the daemon.
    #[arg(long, default_value = "64KiB", value_parser = util::parse_size)]
    passthrough_min: u64,
}

/// Runs `teesfs mount`.
pub fn run(args: MountArgs) -> anyhow::Result<()> {
    check_mountpoint(&args.mountpoint)?;
    let (store, id, index) = args.at.open().context("refusing to mount it")?;
    let root = nix::unistd::geteuid().is_root();
    let passthrough = if args.passthrough == Passthrough::Auto && root {
        let dir = args
            .materialize_dir
            .join(format!("mount-{}", std::process::id()));
        Some(PassthroughConfig {
            copies: Copies::open(&dir, args.copies_budget)?,
            min_size: args.passthrough_min,
        })
    } else {
        None
    };
    let cfg = MountConfig {
        cache_bytes: args.cache,
        passthrough,
        read_timeout: args.read_timeout,
        ..MountConfig::default()
    };
    // Catch signals before the mount exists, so a signal at any moment after it is
    // announced leads to a clean unmount rather than a dead daemon and a stale mount.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = tx.send(sig);
        }
    });
    let entries = index.entries.len();
    let source = Arc::new(StoreSource::new(store, &index));
    let mounted = mount(index, id, source, &args.mountpoint, &cfg).with_context(|| {
        if root {
            "is /dev/fuse present (modprobe fuse) and the mountpoint an existing directory?"
        } else {
            "mounting as a normal user needs fusermount3 (apt-get install fuse3)"
        }
    })?;
    outln!(
        "mounted {id} at {} ({entries} entries, passthrough {}); Ctrl-C to unmount",
        args.mountpoint.display(),
        if mounted.passthrough_active() {
            "on"
        } else {
            "off"
        }
    );

    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(sig) => {
                tracing::info!(signal = sig, "unmounting");
                break;
            }
            Err(_) if mounted.is_finished() => {
                tracing::info!("unmounted externally");
                break;
            }
            Err(_) => {}
        }
    }
    handle.close();
    let stats = mounted.data().stats();
    mounted.unmount()?;
    outln!(
        "unmounted {} ({} chunk fetches, {} corrupt chunks refused)",
        args.mountpoint.display(),
        stats.fetches,
        stats.corrupt
    );
    Ok(())
}

/// Refuses a mountpoint that cannot take the layer, saying what to do: a dead mount left by
/// a killed `teesfs mount`, something already mounted there, or not a directory.
fn check_mountpoint(mp: &std::path::Path) -> anyhow::Result<()> {
    let shown = mp.display();
    let dead = || {
        anyhow::anyhow!(
            "{shown}: a dead mount is still there (a killed `teesfs mount` leaves one): run \
             `umount -l {shown}` (or `fusermount3 -uz {shown}`), then mount again"
        )
    };
    let not_connected = |e: &std::io::Error| e.raw_os_error() == Some(nix::libc::ENOTCONN);
    match std::fs::metadata(mp) {
        Err(e) if not_connected(&e) => return Err(dead()),
        Err(e) => anyhow::bail!("{shown}: {e}; mount on an existing empty directory"),
        Ok(m) if !m.is_dir() => {
            anyhow::bail!("{shown} is not a directory; mount on an existing empty directory")
        }
        Ok(_) => {}
    }
    let full = std::fs::canonicalize(mp).with_context(|| format!("resolving {shown}"))?;
    let mounts =
        teesfs_node::sys::mountinfo::read(None).context("reading this process's mounts")?;
    if let Some(m) = mounts.iter().rev().find(|m| m.mount_point == full) {
        // The kernel may answer a dead FUSE mount's root attributes and listing from its
        // caches; a name never looked up before asks the (gone) daemon.
        let probe = mp.join(format!(".teesfs-probe-{}", std::process::id()));
        if std::fs::symlink_metadata(probe).is_err_and(|e| not_connected(&e)) {
            return Err(dead());
        }
        anyhow::bail!(
            "{shown} already has a mount ({} from {}): unmount it first (`umount {shown}`) or \
             choose another directory",
            m.fs_type,
            m.source
        );
    }
    Ok(())
}

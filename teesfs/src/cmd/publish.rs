//! `teesfs publish`: turn a layer directory into chunks and a signed index in a store.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use manifest::BuildOptions;
use manifest::build::BuildProgress;
use seeder::DirStore;

use super::util;

mod image;

/// Arguments of `teesfs publish`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  teesfs publish ~/layer --store /shared/teesfs --tag torch-2.3   # prints the index id
  teesfs publish ~/layer --store /shared/teesfs --urgent-exec python3 --expires-in 30d
  teesfs publish --image ./torch-oci --store /shared/teesfs --tag torch-img   # OCI layout
  teesfs publish --image ./images:torch-2.4 --store /shared/teesfs   # one tag of a layout
  teesfs publish --image torch.tar --store /shared/teesfs   # oci-archive or docker-archive
  teesfs publish --image torch.sif --store /shared/teesfs   # SIF or squashfs (needs sqfs2tar)

The urgent set (the files every node receives first, in the order given) is recorded in the
signed index:
  --urgent-list FILE  one layer path per line in the order needed (as `teesfs record` writes
                      it; `#` comments and `!absent` lines are skipped); unknown paths are errors
  --urgent-exec CMD   the files CMD needs to start, found by dependency analysis against the
                      layer over this machine's \"/\": the executable (via PATH unless a path;
                      a relative path is taken from the layer root), #! interpreters (also
                      `#!/usr/bin/env NAME`), PT_INTERP and the shared libraries as ld.so
                      finds them (RPATH/RUNPATH with $ORIGIN, LD_LIBRARY_PATH and PATH of this
                      shell, /etc/ld.so.cache, the system directories). Only files inside the
                      layer are urgent; the host's are on every node already.
The list's paths come first, then each --urgent-exec's in turn; a file keeps its first place.")]
pub struct PublishArgs {
    /// The layer: a directory tree (for example the upper directory of the user's overlay).
    #[arg(required_unless_present = "image", conflicts_with = "image")]
    layer: Option<PathBuf>,
    /// Publish a container image instead of a directory: an OCI image layout directory
    /// (`DIR`, or `DIR:TAG` when it holds several images, as `skopeo copy ... oci:DIR:TAG`
    /// names them), an
    /// oci-archive or docker-archive tarball (`skopeo copy`, `podman save`, `docker save`),
    /// a squashfs or an Apptainer SIF file. Its layers are applied in order (whiteouts and
    /// opaque directories honoured) in a staging directory under the store, owners and
    /// modes kept in the index, device nodes skipped; its config (Env, Entrypoint, Cmd,
    /// WorkingDir, User, Labels) is signed into the index.
    #[arg(long, value_name = "SOURCE")]
    image: Option<PathBuf>,
    /// The store to publish into (created if missing).
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// How long to wait while a gc holds the store's lock (the wait is announced at once,
    /// naming the holder) before giving up.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    lock_wait: std::time::Duration,
    /// Publisher secret key. Default: ~/.config/teesfs/publisher.key
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Chunk size: a power of two between 64KiB and 64MiB, or "auto" (the default): 1/64
    /// of the layer's content as a power of two, between 256KiB and 1MiB. A chunk crosses
    /// each level of the tree whole before it is sent on, so small layers get small chunks;
    /// from 64MiB on it is 1MiB. Versions of a layer share chunks (nodes keep what they
    /// hold) only when cut alike: give a fixed size to a small layer that is republished
    /// often as it grows.
    #[arg(long, default_value = "auto", value_parser = util::parse_chunk_size, value_name = "SIZE|auto")]
    chunk_size: util::ChunkSize,
    /// zstd compression level for chunks (1 is fast; chunks are compressed once, here).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=19))]
    level: i32,
    /// Urgent paths from FILE, one layer path per line in the order needed (see below).
    #[arg(long, value_name = "FILE")]
    urgent_list: Option<PathBuf>,
    /// Make the files CMD needs to start urgent, by dependency analysis (repeatable).
    #[arg(long, value_name = "CMD")]
    urgent_exec: Vec<std::ffi::OsString>,
    /// Publish files that carry extended attributes or ACLs, dropping those (with a
    /// warning per file). Without it they are refused: dropping an ACL that denied someone
    /// would widen access on the nodes.
    #[arg(long)]
    ignore_xattrs: bool,
    /// Sign the index valid for this long only (e.g. 30d, 12h): nodes refuse to mount or
    /// relay it afterwards, and it must be published again. Default: valid until revoked
    /// (`teesfs daemon --revoked`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    expires_in: Option<std::time::Duration>,
    /// Name the new index NAME in the store (moving the tag if it named another), so that
    /// `--index NAME` finds it and `teesfs gc` keeps it. A tag is 1 to 64 characters of
    /// A-Z a-z 0-9 . _ -, not all hex digits.
    #[arg(long, value_name = "NAME")]
    tag: Option<seeder::TagName>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// What to print: `text`, or `json`: one object, `{"version": 1, "index": ID,
    /// "tag", "expires", "files", "dirs", "symlinks", "hardlinks", "skipped": [PATH...],
    /// "file_bytes", "chunk_size", "urgent_entries", "urgent_chunks", "urgent_bytes", "chunks",
    /// "unique_chunks", "new_chunks", "new_stored_bytes", "stored_bytes", "index_bytes",
    /// "elapsed_s"}` (sizes in bytes; pushreport::output::PublishDoc).
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
}

/// The ordered urgent set from `--urgent-list` and `--urgent-exec`.
fn urgent_paths(args: &PublishArgs, layer: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if let Some(list) = &args.urgent_list {
        let text = seeder::files::read_limited(list, 64 << 20, seeder::files::Symlinks::Follow)
            .with_context(|| format!("reading --urgent-list {}", list.display()))?;
        out.extend(seeder::deps::parse_urgent_list(&text));
    }
    if !args.urgent_exec.is_empty() {
        use seeder::deps::{Analysis, Env, Platform, View};
        let view = View::new(layer, "/");
        let mut a = Analysis::new(view, Env::from_process(), Platform::host());
        for cmd in &args.urgent_exec {
            let before = a.urgent().len();
            a.add_command(cmd).with_context(|| {
                format!(
                    "--urgent-exec {}: dependency analysis against {} over /",
                    cmd.to_string_lossy(),
                    layer.display()
                )
            })?;
            tracing::info!(
                command = %cmd.to_string_lossy(),
                files = a.urgent().len() - before,
                "dependency analysis"
            );
        }
        for m in a.missing() {
            errln!(
                "warning: {} needs {}, which is nowhere in the layer over / (the command would not start)",
                m.needed_by.display(),
                m.name
            );
        }
        out.extend(a.urgent().iter().cloned());
    }
    Ok(out)
}

/// Top-level names that merged-/usr systems make links (`/bin -> usr/bin`).
const SYSTEM_LINKS: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The top-level directories of `layer` that would hide a link of the same name in
/// `host`'s root: on such a node the overlay shows the layer's directory alone, so
/// `/bin/sh` or the C library is gone.
fn hidden_system_links(layer: &Path, host: &Path) -> Vec<&'static str> {
    let is_link = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_symlink());
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    SYSTEM_LINKS
        .into_iter()
        .filter(|n| is_dir(&layer.join(n)) && is_link(&host.join(n)))
        .collect()
}

/// What to say of a layer whose top-level directories would hide this host's merged-/usr
/// links when a job runs in it over "/" (the Slurm plugin, `teesfs run`); a layer only
/// mounted at a path of its own is fine. `None` when it hides nothing.
fn system_dirs_warning(layer: &Path, host: &Path) -> Option<String> {
    let hidden = hidden_system_links(layer, host);
    if hidden.is_empty() {
        return None;
    }
    let list = |f: fn(&str) -> String| hidden.iter().map(|n| f(n)).collect::<Vec<_>>().join(", ");
    Some(format!(
        "warning: {} has a top-level {}, while {} on this host {} into /usr: a job run in \
         this layer over / (the Slurm plugin, teesfs run) sees the layer's directory instead, \
         without /bin/sh or the system's libraries. Move the layer's files under a prefix such \
         as opt/APP (pip install --prefix /opt/APP instead of --target) and publish again",
        layer.display(),
        list(|n| format!("{n}/")),
        list(|n| format!("/{n}")),
        if hidden.len() == 1 {
            "is a link"
        } else {
            "are links"
        }
    ))
}

/// Warns, on stderr, about a layer that would hide this host's merged-/usr links.
fn warn_system_dirs(layer: &Path, host: &Path) {
    if let Some(w) = system_dirs_warning(layer, host) {
        errln!("{w}");
    }
}

/// `e`, with how to share the store if it is a permission error in a store that is not
/// shared by a group (see `seeder::shared`).
fn sharing_hint(e: anyhow::Error, store: &Path) -> anyhow::Error {
    let denied = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    });
    if !denied || seeder::shared::is_shared(store) {
        return e;
    }
    e.context(format!(
        "this user may not write into store {0}, which another user made: a store several \
         users publish into is a group's (as its owner or root: `chgrp GROUP {0} && chmod \
         2775 {0}`, and the same for the directories already in it: `find {0} -type d \
         -exec chmod 2775 {{}} +`), or publish into a store of your own",
        store.display()
    ))
}

struct Bar(ProgressBar);

impl BuildProgress for Bar {
    fn total(&self, bytes: u64) {
        self.0.set_length(bytes);
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

/// The build options the flags give.
fn build_options(args: &PublishArgs) -> BuildOptions {
    let (chunk_size, adaptive_chunks) = match args.chunk_size.fixed() {
        None => (manifest::MAX_AUTO_CHUNK, true),
        Some(cs) => (cs, false),
    };
    BuildOptions {
        chunk_size,
        adaptive_chunks,
        zstd_level: args.level,
        ignore_xattrs: args.ignore_xattrs,
        expires: args
            .expires_in
            .map(|d| util::unix_now().saturating_add(d.as_secs().max(1))),
        ..BuildOptions::default()
    }
}

/// The publisher's key and the store (created if missing).
fn key_and_store(args: &PublishArgs) -> anyhow::Result<(manifest::SecretKey, DirStore)> {
    let key_path = args.key.clone().unwrap_or_else(util::default_key_path);
    let key = util::load_secret(&key_path)?;
    let store = DirStore::create(&args.store)
        .with_context(|| format!("opening store {}", args.store.display()))
        .map_err(|e| sharing_hint(e, &args.store))?
        .with_lock_wait(args.lock_wait);
    Ok((key, store))
}

/// The progress bar (hidden with `--quiet`).
fn progress_bar(quiet: bool) -> Bar {
    if quiet {
        return Bar(ProgressBar::hidden());
    }
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template(
            "{spinner} publishing [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    );
    Bar(b)
}

/// Prints what a publish did, as `--format` asks.
fn print_published(
    args: &PublishArgs,
    p: &seeder::Published,
    expires: Option<u64>,
) -> anyhow::Result<()> {
    match args.format {
        util::Format::Text => print_summary(p, expires, args.tag.as_ref()),
        util::Format::Json => {
            for s in &p.report.skipped {
                errln!(
                    "skipped {} ({}): an index cannot hold it",
                    s.path.display(),
                    s.kind
                );
            }
            util::print_json(&doc(p, expires, args.tag.as_ref()))?;
        }
    }
    Ok(())
}

/// Runs `teesfs publish`.
pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    let layer = match (&args.layer, &args.image) {
        (_, Some(source)) => return image::run(&args, source),
        (Some(layer), None) => layer.clone(),
        (None, None) => anyhow::bail!("give a layer directory or --image SOURCE"),
    };
    warn_system_dirs(&layer, Path::new("/"));
    let urgent = urgent_paths(&args, &layer)?;
    let (key, store) = key_and_store(&args)?;
    let opts = build_options(&args);
    let progress = progress_bar(args.quiet);
    let p = seeder::publish_tagged(
        &layer,
        &store,
        &key,
        &opts,
        &urgent,
        args.tag.as_ref(),
        &progress,
    )
    .with_context(|| format!("publishing {}", layer.display()))
    .map_err(|e| sharing_hint(e, &args.store))?;
    progress.0.finish_and_clear();
    print_published(&args, &p, opts.expires)
}

/// What a publish did, for a script.
fn doc(
    p: &seeder::Published,
    expires: Option<u64>,
    tag: Option<&seeder::TagName>,
) -> pushreport::output::PublishDoc {
    let r = &p.report;
    let (urgent_entries, urgent_chunks, urgent_bytes) = util::urgent_size(&p.index);
    pushreport::output::PublishDoc {
        version: pushreport::output::VERSION,
        index: p.id.to_string(),
        tag: tag.map(ToString::to_string),
        expires,
        files: r.files,
        dirs: r.dirs,
        symlinks: r.symlinks,
        hardlinks: r.hardlinks,
        skipped: r
            .skipped
            .iter()
            .map(|s| s.path.display().to_string())
            .collect(),
        file_bytes: r.file_bytes,
        chunk_size: u64::from(p.index.chunk_size),
        urgent_entries,
        urgent_chunks,
        urgent_bytes,
        chunks: r.chunk_refs,
        unique_chunks: r.unique_chunks,
        new_chunks: r.new_chunks,
        new_stored_bytes: r.new_stored_bytes,
        stored_bytes: r.unique_stored_bytes,
        index_bytes: p.index_bytes,
        elapsed_s: p.elapsed.as_secs_f64(),
    }
}

/// What a publish did, for a person.
fn print_summary(p: &seeder::Published, expires: Option<u64>, tag: Option<&seeder::TagName>) {
    let r = &p.report;
    for s in &r.skipped {
        errln!(
            "skipped {} ({}): an index cannot hold it",
            s.path.display(),
            s.kind
        );
    }
    outln!("index {}", p.id);
    if let Some(tag) = tag {
        outln!("  tagged {tag}");
    }
    if let Some(at) = expires {
        outln!(
            "  valid until {} (publish again before then)",
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(at)
            )
        );
    }
    outln!(
        "  {} files, {} dirs, {} symlinks, {} hard links, {} skipped",
        r.files,
        r.dirs,
        r.symlinks,
        r.hardlinks,
        r.skipped.len()
    );
    if r.whiteouts + r.opaque_dirs > 0 {
        outln!(
            "  {} deletions (overlay whiteouts) and {} opaque directories kept: the names \
             they hide stay hidden on the nodes",
            r.whiteouts,
            r.opaque_dirs
        );
    }
    outln!(
        "  {} of content ({} in sparse holes, {} inline)",
        util::bytes(r.file_bytes),
        util::bytes(r.hole_bytes),
        util::bytes(r.inline_bytes)
    );
    if !p.index.urgent.is_empty() {
        let (entries, chunks, bytes) = util::urgent_size(&p.index);
        outln!(
            "  urgent set: {entries} entries, {chunks} chunks ({} stored)",
            util::bytes(bytes)
        );
    }
    outln!(
        "  {} chunks of {}, {} unique, {} new ({} written)",
        r.chunk_refs,
        util::bytes(u64::from(p.index.chunk_size)),
        r.unique_chunks,
        r.new_chunks,
        util::bytes(r.new_stored_bytes)
    );
    outln!(
        "  saved {} by dedup and {} by compression; stored size {}",
        util::bytes(r.dedup_saved()),
        util::bytes(r.compression_saved()),
        util::bytes(r.unique_stored_bytes)
    );
    let secs = p.elapsed.as_secs_f64().max(1e-6);
    outln!(
        "  index {}, took {} ({}/s)",
        util::bytes(p.index_bytes),
        util::duration(p.elapsed),
        util::bytes((r.file_bytes as f64 / secs) as u64)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_level_bin_directory_is_named_only_where_the_host_has_a_bin_link() {
        let t = tempfile::tempdir().expect("tmp");
        let (layer, merged, split) = (t.path().join("l"), t.path().join("m"), t.path().join("s"));
        for d in [
            "l/bin",
            "l/lib64",
            "l/opt/app/bin",
            "m/usr/bin",
            "s/bin",
            "s/lib64",
        ] {
            std::fs::create_dir_all(t.path().join(d)).expect("mkdir");
        }
        std::os::unix::fs::symlink("usr/bin", merged.join("bin")).expect("link");
        std::os::unix::fs::symlink("usr/lib64", merged.join("lib64")).expect("link");
        std::os::unix::fs::symlink("usr/lib", merged.join("lib")).expect("link");
        assert_eq!(hidden_system_links(&layer, &merged), ["bin", "lib64"]);
        assert!(
            hidden_system_links(&layer, &split).is_empty(),
            "real dirs merge"
        );
        let w = system_dirs_warning(&layer, &merged).expect("warned");
        assert!(
            w.contains("bin/, lib64/") && w.contains("/bin, /lib64"),
            "{w}"
        );
        assert!(system_dirs_warning(&layer, &split).is_none());
        // A layer whose bin is itself a link (a whole image's root) hides nothing.
        let image = t.path().join("image");
        std::fs::create_dir_all(image.join("usr/bin")).expect("mkdir");
        std::os::unix::fs::symlink("usr/bin", image.join("bin")).expect("link");
        assert!(hidden_system_links(&image, &merged).is_empty());
    }
}

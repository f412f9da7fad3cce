//! `teesfs publish --image SOURCE`: a container image (OCI layout, oci-archive,
//! docker-archive, squashfs, SIF) unpacked by the `ociimage` crate into a staging
//! directory under the store, built like a layer, and signed with the image's owners,
//! modes and config.

use std::path::Path;

use anyhow::Context;

use super::{
    PublishArgs, build_options, key_and_store, print_published, progress_bar, sharing_hint,
};

/// Publishes the image at `source`.
pub(super) fn run(args: &PublishArgs, source: &Path) -> anyhow::Result<()> {
    if !args.urgent_exec.is_empty() {
        anyhow::bail!(
            "--urgent-exec analyses a layer over this host's \"/\", which an image replaces: \
             give the image's urgent files with --urgent-list (paths inside the image)"
        );
    }
    let urgent = super::urgent_paths(args, source)?;
    let (key, store) = key_and_store(args)?;
    let opts = build_options(args);
    let limits = manifest::Limits::default();
    let staging = ociimage::Staging::new(&args.store.join("staging"))
        .context("making a staging directory in the store")?;
    let image = ociimage::Source::parse(source);
    let unpacked = ociimage::unpack(
        &image,
        staging.path(),
        &limits,
        ociimage::ReadLimits::for_index(&limits),
    )
    .with_context(|| format!("reading image {image}"))?;
    for (path, kind) in &unpacked.skipped {
        errln!("skipped {path} ({kind}): an index cannot hold it");
    }
    let progress = progress_bar(args.quiet);
    let p = seeder::publish_adjusted(
        staging.path(),
        &store,
        &key,
        &opts,
        &urgent,
        args.tag.as_ref(),
        &progress,
        &|index| ociimage::apply_meta(index, &unpacked),
    )
    .with_context(|| format!("publishing image {image}"))
    .map_err(|e| sharing_hint(e, &args.store))?;
    progress.0.finish_and_clear();
    drop(staging);
    if matches!(args.format, crate::cmd::util::Format::Text) {
        outln!(
            "image {image} ({}, {} layer{}), {} device nodes/fifos/sockets skipped",
            unpacked.format,
            unpacked.layers,
            if unpacked.layers == 1 { "" } else { "s" },
            unpacked.skipped.len()
        );
        if let Some(c) = &unpacked.config {
            outln!(
                "  config: entrypoint {:?}, cmd {:?}, {} env, working dir {}, user {}",
                c.entrypoint,
                c.cmd,
                c.env.len(),
                c.working_dir.as_deref().unwrap_or("/"),
                c.user.as_deref().unwrap_or("(root)")
            );
        }
    }
    print_published(args, &p, opts.expires)
}

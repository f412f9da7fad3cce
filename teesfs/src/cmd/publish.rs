//! `teesfs publish`: turn a layer directory into chunks and a signed index in a store.

use std::path::PathBuf;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use manifest::BuildOptions;
use manifest::build::BuildProgress;
use seeder::DirStore;

use super::util;

/// Arguments of `teesfs publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The layer: a directory tree (for example the upper directory of the user's overlay).
    layer: PathBuf,
    /// The store to publish into (created if missing).
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Publisher secret key. Default: ~/.config/teesfs/publisher.key
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Chunk size (power of two between 64KiB and 64MiB).
    #[arg(long, default_value = "1MiB", value_parser = util::parse_size)]
    chunk_size: u64,
    /// zstd compression level for chunks (1 is fast; chunks are compressed once, here).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=19))]
    level: i32,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
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

/// Runs `teesfs publish`.
pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    let cs = args.chunk_size;
    if !cs.is_power_of_two() || !(64 << 10..=64 << 20).contains(&cs) {
        anyhow::bail!(
            "--chunk-size {} is not a power of two between 64 KiB and 64 MiB",
            util::bytes(cs)
        );
    }
    let key_path = args.key.unwrap_or_else(util::default_key_path);
    let key = util::load_secret(&key_path)?;
    let store = DirStore::create(&args.store)
        .with_context(|| format!("opening store {}", args.store.display()))?;
    let opts = BuildOptions {
        chunk_size: cs as u32,
        zstd_level: args.level,
        ..BuildOptions::default()
    };
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} publishing [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("static template is valid")
            .progress_chars("=> "),
        );
        b
    };
    let progress = Bar(bar);
    let p = seeder::publish(&args.layer, &store, &key, &opts, &progress)
        .with_context(|| format!("publishing {}", args.layer.display()))?;
    progress.0.finish_and_clear();

    let r = &p.report;
    for s in &r.skipped {
        eprintln!(
            "skipped {} ({}): an index cannot hold it",
            s.path.display(),
            s.kind
        );
    }
    println!("index {}", p.id);
    println!(
        "  {} files, {} dirs, {} symlinks, {} hard links, {} skipped",
        r.files,
        r.dirs,
        r.symlinks,
        r.hardlinks,
        r.skipped.len()
    );
    if r.whiteouts + r.opaque_dirs > 0 {
        println!(
            "  {} deletions (overlay whiteouts) and {} opaque directories kept: the names \
             they hide stay hidden on the nodes",
            r.whiteouts, r.opaque_dirs
        );
    }
    println!(
        "  {} of content ({} in sparse holes, {} inline)",
        util::bytes(r.file_bytes),
        util::bytes(r.hole_bytes),
        util::bytes(r.inline_bytes)
    );
    println!(
        "  {} chunks, {} unique, {} new ({} written)",
        r.chunk_refs,
        r.unique_chunks,
        r.new_chunks,
        util::bytes(r.new_stored_bytes)
    );
    println!(
        "  saved {} by dedup and {} by compression; stored size {}",
        util::bytes(r.dedup_saved()),
        util::bytes(r.compression_saved()),
        util::bytes(r.unique_stored_bytes)
    );
    let secs = p.elapsed.as_secs_f64().max(1e-6);
    println!(
        "  index {}, took {} ({}/s)",
        util::bytes(p.index_bytes),
        util::duration(p.elapsed),
        util::bytes((r.file_bytes as f64 / secs) as u64)
    );
    Ok(())
}

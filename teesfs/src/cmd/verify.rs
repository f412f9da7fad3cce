//! `teesfs verify`: check an index's signature and every chunk it references.

use std::path::PathBuf;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use manifest::{Limits, SignedIndex, decode_chunk};
use rayon::prelude::*;
use seeder::DirStore;
use teesfs::output::{VerifiedIndex, VerifyDoc};

use super::util;

/// Arguments of `teesfs verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The store holding the index and chunks.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// A tag, or at least 4 hex characters of the index id; default: every index in the
    /// store.
    #[arg(long, value_name = "TAG|ID")]
    index: Option<String>,
    /// Trusted publisher public key (repeatable). Default: your own publisher.pub and
    /// keys in ~/.config/teesfs/trusted/ and /etc/teesfs/trusted/.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// What to print: `text`, or `json`: `{"version": 1, "ok", "indexes": [{"id", "ok",
    /// "refused", "publisher", "entries", "chunks", "stored_bytes", "bad_chunks": [TEXT]}]}`
    /// (teesfs::output::VerifyDoc). The exit status is the same in both: 1 when anything
    /// does not verify.
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
}

/// Runs `teesfs verify`; fails when anything does not verify.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let trusted = util::load_trust(&args.trust)?;
    let store = DirStore::open(&args.store)?;
    let ids = match &args.index {
        Some(p) => vec![store.resolve_index(p)?],
        None => store.list_indexes()?,
    };
    if ids.is_empty() {
        bail!("store {} holds no index", args.store.display());
    }
    let mut bad = 0usize;
    let json = args.format == util::Format::Json;
    let mut doc = VerifyDoc {
        version: teesfs::output::VERSION,
        ok: true,
        indexes: Vec::new(),
    };
    for id in ids {
        // A bad index file (a symlink, a FIFO, damaged) is one bad index, not the end of
        // the check.
        let opened = store
            .get_index(&id)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| {
                SignedIndex::open(bytes, Some(id), &trusted, &Limits::default())
                    .map_err(anyhow::Error::from)
            });
        let (signed, index) = match opened {
            Ok(x) => x,
            Err(e) => {
                bad += 1;
                if json {
                    doc.indexes.push(VerifiedIndex {
                        id: id.to_string(),
                        ok: false,
                        refused: Some(format!("{e:#}")),
                        publisher: None,
                        entries: 0,
                        chunks: 0,
                        stored_bytes: 0,
                        bad_chunks: Vec::new(),
                    });
                } else {
                    outln!("index {id}: REFUSED: {e}");
                }
                continue;
            }
        };
        let bar = if args.quiet || json {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(index.total_stored_bytes()).with_style(
                ProgressStyle::with_template(
                    "{spinner} verifying [{bar:30}] {binary_bytes}/{binary_total_bytes}",
                )
                .expect("static template is valid")
                .progress_chars("=> "),
            )
        };
        let problems: Vec<String> = index
            .chunks
            .par_iter()
            .filter_map(|c| {
                bar.inc(u64::from(c.stored_len));
                match store.get_chunk(&c.id) {
                    Err(e) => Some(e.to_string()),
                    Ok(stored) => decode_chunk(&stored, &c.id, c.plain_len)
                        .err()
                        .map(|e| e.to_string()),
                }
            })
            .collect();
        bar.finish_and_clear();
        let publisher = signed.publisher().context("publisher key")?;
        if !problems.is_empty() {
            bad += 1;
        }
        if json {
            doc.indexes.push(VerifiedIndex {
                id: id.to_string(),
                ok: problems.is_empty(),
                refused: None,
                publisher: Some(publisher.to_hex()),
                entries: index.entries.len() as u64,
                chunks: index.chunks.len() as u64,
                stored_bytes: index.total_stored_bytes(),
                bad_chunks: problems,
            });
        } else if problems.is_empty() {
            outln!(
                "index {id}: OK (signed by {}, {} entries, {} chunks, {})",
                publisher.to_hex().get(..16).unwrap_or_default(),
                index.entries.len(),
                index.chunks.len(),
                util::bytes(index.total_stored_bytes())
            );
        } else {
            outln!(
                "index {id}: {} of {} chunks BAD",
                problems.len(),
                index.chunks.len()
            );
            for p in problems.iter().take(20) {
                outln!("  {p}");
            }
            if problems.len() > 20 {
                outln!("  ... and {} more", problems.len() - 20);
            }
        }
    }
    if json {
        doc.ok = bad == 0;
        util::print_json(&doc)?;
    }
    if bad > 0 {
        bail!("{bad} index(es) failed verification");
    }
    Ok(())
}

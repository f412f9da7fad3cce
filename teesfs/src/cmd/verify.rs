//! `teesfs verify`: check an index's signature and every chunk it references
//! ([`seeder::verify`]), and print what it found.

use std::path::PathBuf;

use std::sync::Mutex;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use manifest::IndexId;
use pushreport::output::{VerifiedIndex, VerifyDoc};
use seeder::DirStore;
use seeder::verify::{IndexCheck, Report, Verdict, VerifyProgress, Which};

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
    /// (pushreport::output::VerifyDoc). The exit status is the same in both: 1 when anything
    /// does not verify.
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
}

/// Runs `teesfs verify`; fails when anything does not verify.
pub fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let trusted = util::load_trust(&args.trust)?;
    let store = DirStore::open(&args.store)?;
    let which = args.index.as_deref().map_or(Which::All, Which::Named);
    let json = args.format == util::Format::Json;
    let shown = Shown {
        bar: (!args.quiet && !json).then(|| Mutex::new(None)),
        text: !json,
    };
    let report = seeder::verify(&store, which, &trusted, &shown)?;
    if json {
        util::print_json(&doc(&report))?;
    }
    let bad = report.failed();
    if bad > 0 {
        bail!("{bad} index(es) failed verification");
    }
    Ok(())
}

/// What the check shows as it goes: a progress bar per index (unless quiet), and in text
/// the index's lines once it is checked.
struct Shown {
    bar: Option<Mutex<Option<ProgressBar>>>,
    text: bool,
}

impl Shown {
    fn bar(&self) -> Option<std::sync::MutexGuard<'_, Option<ProgressBar>>> {
        let bar = self.bar.as_ref()?;
        Some(
            bar.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl VerifyProgress for Shown {
    fn index_opened(&self, _: &IndexId, stored_bytes: u64) {
        if let Some(mut bar) = self.bar() {
            *bar = Some(
                ProgressBar::new(stored_bytes).with_style(
                    ProgressStyle::with_template(
                        "{spinner} verifying [{bar:30}] {binary_bytes}/{binary_total_bytes}",
                    )
                    .expect("static template is valid")
                    .progress_chars("=> "),
                ),
            );
        }
    }

    fn chunk_checked(&self, stored_len: u64) {
        if let Some(bar) = self.bar().as_deref().and_then(Option::as_ref) {
            bar.inc(stored_len);
        }
    }

    fn index_checked(&self, check: &IndexCheck) {
        if let Some(bar) = self.bar().and_then(|mut b| b.take()) {
            bar.finish_and_clear();
        }
        if self.text {
            print_text(check);
        }
    }
}

/// An index's lines in text.
fn print_text(check: &IndexCheck) {
    let id = check.id;
    let o = match &check.verdict {
        Verdict::Refused(e) => {
            outln!("index {id}: REFUSED: {e}");
            return;
        }
        Verdict::Opened(o) => o,
    };
    if o.bad_chunks.is_empty() {
        outln!(
            "index {id}: OK (signed by {}, {} entries, {} chunks, {})",
            o.publisher.to_hex().get(..16).unwrap_or_default(),
            o.entries,
            o.chunks,
            util::bytes(o.stored_bytes)
        );
        return;
    }
    outln!(
        "index {id}: {} of {} chunks BAD",
        o.bad_chunks.len(),
        o.chunks
    );
    for p in o.bad_chunks.iter().take(20) {
        outln!("  {p}");
    }
    if o.bad_chunks.len() > 20 {
        outln!("  ... and {} more", o.bad_chunks.len() - 20);
    }
}

/// The report as `--format json` prints it.
fn doc(report: &Report) -> VerifyDoc {
    let index = |check: &IndexCheck| match &check.verdict {
        Verdict::Refused(e) => VerifiedIndex {
            id: check.id.to_string(),
            ok: false,
            refused: Some(util::error_chain(e)),
            publisher: None,
            entries: 0,
            chunks: 0,
            stored_bytes: 0,
            bad_chunks: Vec::new(),
        },
        Verdict::Opened(o) => VerifiedIndex {
            id: check.id.to_string(),
            ok: check.ok(),
            refused: None,
            publisher: Some(o.publisher.to_hex()),
            entries: o.entries,
            chunks: o.chunks,
            stored_bytes: o.stored_bytes,
            bad_chunks: o.bad_chunks.iter().map(ToString::to_string).collect(),
        },
    };
    VerifyDoc {
        version: pushreport::output::VERSION,
        ok: report.ok(),
        indexes: report.indexes.iter().map(index).collect(),
    }
}

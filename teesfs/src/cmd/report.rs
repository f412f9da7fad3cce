//! `teesfs report`: draw a push report (the JSON of `teesfs push --report` or `teesfs
//! prefetch --report`) as an HTML page or a bare SVG. The drawing is `teesfs_node::report`; this
//! reads, picks the output and writes.

use std::path::{Path, PathBuf};

use anyhow::Context;
use teesfs_node::report::PushReport;

/// Arguments of `teesfs report`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Draw a push report as an HTML page (or with --svg a bare SVG picture).

The report is the JSON that `teesfs push --report FILE` and `teesfs prefetch --report FILE` \
write (the Slurm prolog keeps one per job in /var/log/teesfs). The page shows the job, its \
index, node count, sizes and completion times; the tree by group with failed edges in red; \
how many nodes held the urgent set and the whole layer over time; a timeline (a row per node \
up to 128 nodes, above that min/median/max bars per group); and tables of failures, bytes per \
group uplink and per edge. It opens in any browser, without network access.",
    after_help = "Examples:
  teesfs push --store /srv/teesfs --index 3fa2 --nodes 'cn[01-32]' --report push.json
  teesfs report push.json -o push.html          # then open push.html in a browser
  teesfs report push.json --svg -o push.svg     # the picture alone
  teesfs report /var/log/teesfs/job-4242.json   # writes /var/log/teesfs/job-4242.html"
)]
pub struct ReportArgs {
    /// The push report (JSON) to draw.
    #[arg(value_name = "REPORT.json")]
    input: PathBuf,
    /// Where to write the page (default: the report's path with .html, or .svg with --svg);
    /// `-` writes to standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the SVG picture alone instead of the HTML page.
    #[arg(long)]
    svg: bool,
    /// The title (default: "teesfs push of job <job> (<strategy>)").
    #[arg(long)]
    title: Option<String>,
}

/// Runs `teesfs report`.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let rep = load(&args.input)?;
    let title = args.title.unwrap_or_else(|| pushreport::title(&rep));
    let text = if args.svg {
        pushreport::svg(&rep, &title)?
    } else {
        pushreport::html(&rep, &title)?
    };
    let out = args.output.unwrap_or_else(|| {
        args.input
            .with_extension(if args.svg { "svg" } else { "html" })
    });
    if out.as_os_str() == "-" {
        out!("{text}");
        return Ok(());
    }
    write(&out, &text)?;
    outln!("wrote {}", out.display());
    Ok(())
}

/// Reads a push report, saying what to do when the file is not one.
///
/// Root may run this on a user's file, so it must be a regular file (a FIFO is refused
/// without waiting for a writer, a device without reading it), is read up to the report's
/// size bound, and then every field is checked ([`pushreport::from_json`]).
pub fn load(path: &Path) -> anyhow::Result<PushReport> {
    let limits = pushreport::Limits::default();
    let bytes =
        seeder::files::read_limited(path, limits.max_input, seeder::files::Symlinks::Follow)
            .with_context(|| format!("reading the push report {}", path.display()))?;
    pushreport::from_json(&bytes, &limits).with_context(|| path.display().to_string())
}

/// Writes the HTML page of `rep` to `path` (`--report-html` of push and prefetch).
pub fn write_html(path: &Path, rep: &PushReport) -> anyhow::Result<()> {
    let page = pushreport::html(rep, &pushreport::title(rep))?;
    write(path, &page)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    super::outfile::write(path, text.as_bytes())
}

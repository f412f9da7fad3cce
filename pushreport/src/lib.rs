//! The push report: its JSON format ([`format`]), how untrusted bytes become one
//! ([`read`]: a size bound, then strict checks of every time, size and count), and the report
//! drawn for a person: an SVG picture and an HTML page around it, as `teesfs report`,
//! `teesfs push --report-html` and the lab's launch reports write them.
//!
//! The picture has a summary header (job, index, nodes, sizes, completion times), the tree by
//! group (every node for small jobs; for large ones a map of groups coloured by arrival),
//! the curve of nodes holding the urgent set and the whole layer over time, and a timeline
//! (a row per node, or min/median/max bars per group or run of groups). Failed edges are red
//! and nothing else is. The page adds tables: failures, groups with their uplink bytes,
//! edges with their bytes, and (small jobs) nodes.
//!
//! Beside it, [`rates`]: the link rates the tree learns from its pushes' reports, for the
//! planner of the next push. And [`output`]: the JSON documents the store commands print (`publish`, `inspect`,
//! `verify`, `gc` with `--format json`), typed once for the binary that fills them and the
//! tests and scripts that read them.
//!
//! The drawing (`svg`, `html`) is behind the feature `draw`, which brings plotters: the
//! binary turns it on, while the node library, which only writes and reads the format, does
//! not link it.
//!
//! Everything here is a pure function of the report: no I/O, no clock. It must not grow a
//! second copy of the report's format; it reads the one in [`format`]. Drawing is linear in
//! the report's size, so that a report of the largest size [`read`] accepts draws in seconds.

#[cfg(feature = "draw")]
mod curve;
pub mod drain;
#[cfg(feature = "draw")]
mod draw;
pub mod format;
#[cfg(feature = "draw")]
mod group_map;
#[cfg(feature = "draw")]
mod model;
pub mod output;
#[cfg(feature = "draw")]
mod page;
pub mod rates;
pub mod read;
#[cfg(feature = "draw")]
mod style;
#[cfg(feature = "draw")]
mod timeline;
#[cfg(feature = "draw")]
mod tree;

pub use drain::{Drain, nodes_to_drain};
#[cfg(feature = "draw")]
pub use draw::svg;
pub use format::{Cause, EdgeBytes, Failure, FailureKind, NodeTimes, PushReport, Uplink};
#[cfg(feature = "draw")]
pub use model::{DETAIL_MAX_NODES, MAX_ROWS};
#[cfg(feature = "draw")]
pub use page::html;
pub use read::{Limits, from_json};

/// A byte count for people: `16.0 MiB`.
pub fn human_bytes(b: u64) -> String {
    bytesize::ByteSize::b(b).display().iec().to_string()
}

/// Seconds for people: `0.42 s`, `12.3 s`, `4 min 05 s`, `2 h 03 min`.
pub fn human_secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".to_string();
    }
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        let whole = s.round() as u64;
        format!("{} min {:02} s", whole / 60, whole % 60)
    } else {
        let min = (s / 60.0).round() as u64;
        format!("{} h {:02} min", min / 60, min % 60)
    }
}

/// `human_secs`, or `never` for a time that was not reached.
pub fn human_when(s: Option<f64>) -> String {
    s.map_or_else(|| "never".to_string(), human_secs)
}

/// The default title: the job and its strategy.
pub fn title(rep: &PushReport) -> String {
    format!(
        "teesfs push of job {} ({})",
        job_label(&rep.job),
        rep.strategy
    )
}

/// A job as people name it: as `JobId` shows it (a Slurm job's number in decimal). A report
/// of an earlier release names a Slurm job by 16 hex digits: its number comes first, the
/// digits beside it. Anything else is kept.
pub fn job_label(job: &str) -> String {
    match job.parse::<peertree::relay::JobId>() {
        Ok(id) if job.len() == 16 && id.is_slurm() => format!("{id} ({job})"),
        _ => job.to_string(),
    }
}

/// Errors of reading and drawing a push report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are larger than a report may be.
    #[error(
        "the push report is {size} bytes, more than the {max} a report may have; it is not one \
         `teesfs push --report` wrote"
    )]
    TooLarge {
        /// Its size (or the bytes read before giving up).
        size: u64,
        /// The bound.
        max: u64,
    },
    /// The bytes are not the JSON of a push report.
    #[error(
        "this is not a push report (the JSON `teesfs push --report FILE` or `teesfs prefetch --report \
         FILE` writes): {source}"
    )]
    Json {
        /// What serde_json said (with the line and column).
        source: serde_json::Error,
    },
    /// A field holds a value no push produces (a time that is negative, not finite or
    /// beyond [`Limits::max_seconds`], a size beyond [`Limits::max_bytes`], too many entries).
    #[error(
        "the push report's {field} is {value}: {why}; the report is damaged or was not written by teesfs"
    )]
    Invalid {
        /// The field, with its position (`per_node[3].all_s`).
        field: String,
        /// Its value as read.
        value: String,
        /// What it should be.
        why: String,
    },
    /// The learned-rates file (`STORE/learned/rates.json`) is not one teesfs wrote.
    #[error(
        "the learned link rates are unreadable ({detail}); they are ignored until the next push rewrites them"
    )]
    LearnedRates {
        /// What is wrong.
        detail: String,
    },
    /// The push report cannot be drawn (plotters refused a drawing command).
    #[error("cannot draw the push report: {detail}")]
    Draw {
        /// What plotters said.
        detail: String,
    },
}

/// Plotters' errors carry their backend's error type: kept as text.
#[cfg(feature = "draw")]
fn draw_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Draw {
        detail: format!("{e:?}"),
    }
}

/// `&`, `<`, `>` and quotes escaped for HTML text and attributes.
#[cfg(feature = "draw")]
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_read_like_a_person_would_write_them() {
        assert_eq!(human_bytes(16 << 20), "16.0 MiB");
        assert_eq!(human_secs(0.4234), "0.42 s");
        assert_eq!(human_secs(12.34), "12.3 s");
        assert_eq!(human_secs(245.0), "4 min 05 s");
        assert_eq!(human_secs(7380.0), "2 h 03 min");
        assert_eq!(human_when(None), "never");
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }

    #[test]
    fn a_job_reads_as_its_slurm_id_with_its_directory_name() {
        assert_eq!(job_label("00000000000004d2"), "1234 (00000000000004d2)");
        assert_eq!(job_label("1234"), "1234");
        assert_eq!(job_label("8000000000000005"), "8000000000000005");
        assert_eq!(job_label("lab-demo"), "lab-demo");
        assert_eq!(job_label("4d2"), "4d2");
    }
}

//! A push report from untrusted bytes: bounded in size before it is parsed, then checked
//! field by field so that what is drawn is what a push could have written. A report is any
//! file a user hands to `teesfs report` (root may run it on a user's file), so a crafted one
//! must be refused with the field it got wrong, never hang or exhaust the drawing: a time of
//! 1e308 once made plotters' axis range infinite and the drawing spin forever.
//!
//! Pure: the caller reads the file (with [`Limits::max_input`] as its bound) and hands the
//! bytes in. The fuzz target `report` drives [`from_json`] and the drawing with any bytes.

use crate::Error;
use crate::format::PushReport;

/// What a push report may hold. The defaults are far above any real push (the largest
/// machines have some 20,000 nodes, a push times out after hours, not years) and low enough
/// that drawing the largest report they admit stays within seconds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes of JSON.
    pub max_input: u64,
    /// Entries in `per_node`.
    pub max_nodes: usize,
    /// Entries in each of `edges`, `uplinks` and `failures`.
    pub max_entries: usize,
    /// Any time, in seconds since the push started.
    pub max_seconds: f64,
    /// Any byte count.
    pub max_bytes: u64,
    /// Bytes of any text field (host names, ids, reasons).
    pub max_text: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_input: 64 << 20,
            max_nodes: 200_000,
            max_entries: 1_000_000,
            // A year: a push is over in minutes.
            max_seconds: 365.0 * 24.0 * 3600.0,
            // An exbibyte: the sums of a million of them still fit a u64 with room.
            max_bytes: 1 << 60,
            max_text: 4096,
        }
    }
}

/// Parses and checks a push report (see [`check`]).
pub fn from_json(bytes: &[u8], limits: &Limits) -> Result<PushReport, Error> {
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > limits.max_input {
        return Err(Error::TooLarge {
            size,
            max: limits.max_input,
        });
    }
    let rep: PushReport = serde_json::from_slice(bytes).map_err(|source| Error::Json { source })?;
    check(&rep, limits)?;
    Ok(rep)
}

fn invalid(field: impl Into<String>, value: impl ToString, why: impl Into<String>) -> Error {
    Error::Invalid {
        field: field.into(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// Checks every time, size, count and text of a report against `limits`: times finite, not
/// negative and at most [`Limits::max_seconds`]; byte counts at most [`Limits::max_bytes`];
/// lists and texts within their bounds. The error names the first field that is not.
pub fn check(rep: &PushReport, limits: &Limits) -> Result<(), Error> {
    check_times(rep, limits.max_seconds)?;
    let lists = [
        ("per_node", rep.per_node.len(), limits.max_nodes),
        ("edges", rep.edges.len(), limits.max_entries),
        ("uplinks", rep.uplinks.len(), limits.max_entries),
        ("failures", rep.failures.len(), limits.max_entries),
    ];
    for (field, len, max) in lists {
        if len > max {
            return Err(invalid(
                field,
                format!("{len} entries"),
                format!("at most {max} are allowed"),
            ));
        }
    }
    let byte = |field: &dyn Fn() -> String, b: u64| {
        if b <= limits.max_bytes {
            Ok(())
        } else {
            Err(invalid(
                field(),
                b,
                format!("a byte count is at most {}", limits.max_bytes),
            ))
        }
    };
    byte(&|| "urgent_bytes".into(), rep.urgent_bytes)?;
    byte(&|| "total_bytes".into(), rep.total_bytes)?;
    byte(&|| "streamed_bytes".into(), rep.streamed_bytes)?;
    for (i, e) in rep.edges.iter().enumerate() {
        byte(&|| format!("edges[{i}].bytes"), e.bytes)?;
    }
    for (i, u) in rep.uplinks.iter().enumerate() {
        byte(&|| format!("uplinks[{i}].in_bytes"), u.in_bytes)?;
        byte(&|| format!("uplinks[{i}].out_bytes"), u.out_bytes)?;
    }
    check_texts(rep, limits.max_text)
}

/// Checks the times alone: what the drawing cannot do without (an infinite or enormous
/// time makes the axis range overflow). [`crate::svg`] and [`crate::html`] check this
/// much of any report they are given, however it was made.
pub fn check_times(rep: &PushReport, max_seconds: f64) -> Result<(), Error> {
    let one = |field: &dyn Fn() -> String, t: f64| {
        if t.is_finite() && (0.0..=max_seconds).contains(&t) {
            Ok(())
        } else {
            Err(invalid(
                field(),
                format!("{t:?}"),
                format!("a time is seconds since the push started, from 0 to {max_seconds}"),
            ))
        }
    };
    let opt = |field: &dyn Fn() -> String, t: Option<f64>| t.map_or(Ok(()), |t| one(field, t));
    opt(&|| "urgent_complete_s".into(), rep.urgent_complete_s)?;
    opt(&|| "all_complete_s".into(), rep.all_complete_s)?;
    for (i, n) in rep.per_node.iter().enumerate() {
        opt(&|| format!("per_node[{i}].urgent_s"), n.urgent_s)?;
        opt(&|| format!("per_node[{i}].all_s"), n.all_s)?;
        opt(&|| format!("per_node[{i}].app_start_s"), n.app_start_s)?;
    }
    for (i, f) in rep.failures.iter().enumerate() {
        one(&|| format!("failures[{i}].at_s"), f.at_s)?;
    }
    Ok(())
}

fn check_texts(rep: &PushReport, max: usize) -> Result<(), Error> {
    let text = |field: &dyn Fn() -> String, s: &str| {
        if s.len() <= max {
            Ok(())
        } else {
            Err(invalid(
                field(),
                format!("{} bytes long", s.len()),
                format!("a text field has at most {max} bytes"),
            ))
        }
    };
    text(&|| "job".into(), &rep.job)?;
    text(&|| "index".into(), &rep.index)?;
    text(&|| "strategy".into(), &rep.strategy)?;
    text(&|| "root".into(), &rep.root)?;
    for (i, n) in rep.per_node.iter().enumerate() {
        text(&|| format!("per_node[{i}].host"), &n.host)?;
        text(&|| format!("per_node[{i}].parent"), &n.parent)?;
    }
    for (i, e) in rep.edges.iter().enumerate() {
        text(&|| format!("edges[{i}].parent"), &e.parent)?;
        text(&|| format!("edges[{i}].child"), &e.child)?;
    }
    for (i, u) in rep.uplinks.iter().enumerate() {
        text(&|| format!("uplinks[{i}].proxy"), &u.proxy)?;
    }
    for (i, f) in rep.failures.iter().enumerate() {
        text(&|| format!("failures[{i}].parent"), &f.parent)?;
        text(&|| format!("failures[{i}].child"), &f.child)?;
        text(
            &|| format!("failures[{i}].reason"),
            f.reason.as_deref().unwrap_or(""),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::sample;

    fn json(rep: &PushReport) -> Vec<u8> {
        serde_json::to_vec(rep).expect("a report serialises")
    }

    fn field_of(e: Error) -> String {
        match e {
            Error::Invalid { field, .. } => field,
            other => panic!("not an invalid field: {other}"),
        }
    }

    #[test]
    fn a_report_push_wrote_reads_back_the_same() {
        let rep = sample(4, 8);
        let back = from_json(&json(&rep), &Limits::default()).expect("valid");
        let hosts = |r: &PushReport| {
            r.per_node
                .iter()
                .map(|n| n.host.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(hosts(&back), hosts(&rep));
        assert_eq!(back.failures.len(), 1);
    }

    /// Issue 29: a time of about 1.25e308 made the axis range infinite and `teesfs report`
    /// spin forever. It is refused, naming the field, when read and when drawn.
    #[test]
    fn a_time_of_1e308_in_a_report_is_refused_naming_the_field() {
        let mut rep = sample(2, 4);
        rep.per_node[3].all_s = Some(1.25e308);
        let e = from_json(&json(&rep), &Limits::default()).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("per_node[3].all_s") && text.contains("1.25e308"),
            "{text}"
        );
        assert_eq!(
            field_of(crate::svg(&rep, "t").expect_err("not drawn")),
            "per_node[3].all_s"
        );
        assert_eq!(
            field_of(crate::html(&rep, "t").expect_err("not drawn")),
            "per_node[3].all_s"
        );
        rep.per_node[3].all_s = Some(-1.0);
        assert_eq!(
            field_of(check(&rep, &Limits::default()).expect_err("negative")),
            "per_node[3].all_s"
        );
        rep.per_node[3].all_s = Some(1.0);
        rep.failures[0].at_s = f64::INFINITY;
        assert_eq!(
            field_of(check(&rep, &Limits::default()).expect_err("infinite")),
            "failures[0].at_s"
        );
    }

    #[test]
    fn a_report_beyond_its_bounds_is_refused_naming_what() {
        let limits = Limits {
            max_input: 1 << 20,
            max_nodes: 16,
            ..Limits::default()
        };
        let e = from_json(&vec![b' '; (1 << 20) + 1], &limits).expect_err("too large");
        assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        let e = from_json(&json(&sample(3, 8)), &limits).expect_err("too many nodes");
        assert_eq!(field_of(e), "per_node");
        let mut rep = sample(2, 2);
        rep.edges[1].bytes = u64::MAX;
        assert_eq!(
            field_of(from_json(&json(&rep), &limits).expect_err("bytes")),
            "edges[1].bytes"
        );
        let mut rep = sample(2, 2);
        rep.per_node[2].host = "h".repeat(5000);
        assert_eq!(
            field_of(from_json(&json(&rep), &limits).expect_err("text")),
            "per_node[2].host"
        );
        let e = from_json(b"{\"nodes\": 3}", &limits).expect_err("not a report");
        assert!(e.to_string().contains("is not a push report"), "{e}");
    }

    /// Saturating sums: an unchecked report (as the drawing may be handed) does not
    /// overflow.
    #[test]
    fn uplink_sums_of_huge_byte_counts_saturate() {
        let mut rep = sample(2, 2);
        for u in &mut rep.uplinks {
            u.in_bytes = u64::MAX;
        }
        rep.edges[0].bytes = u64::MAX;
        assert_eq!(rep.predicted_uplink_in(), u64::MAX);
        crate::html(&rep, "t").expect("drawn");
    }
}

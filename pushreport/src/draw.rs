//! The SVG picture of a push report, drawn with plotters' SVG backend into a string: the
//! header, the tree ([`super::tree`]) or group map ([`super::group_map`]), the arrival
//! curve ([`super::curve`]) and the timeline ([`super::timeline`]), stacked. Geometry is
//! computed from the [`Model`]; nothing here reads files or the clock.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::curve::draw_curve;
use super::group_map::GroupMap;
use super::model::Model;
use super::style::{FAILED, px, unsigned};
use super::timeline::draw_timeline;
use super::tree::Tree;
use super::{draw_err, human_bytes, human_when};
use crate::Error;
use crate::format::PushReport;

/// The narrowest picture: what a laptop browser shows without scrolling.
const MIN_WIDTH: i32 = 1360;
const HEADER_H: i32 = 86;
const CURVE_H: i32 = 300;

/// Draws the report as SVG (see the module doc of [`crate`] for what it shows).
pub fn svg(rep: &PushReport, title: &str) -> Result<String, Error> {
    crate::read::check_times(rep, crate::Limits::default().max_seconds)?;
    svg_of(&Model::new(rep), title)
}

/// [`svg`] of a report's model, built once by the caller.
pub(super) fn svg_of(m: &Model<'_>, title: &str) -> Result<String, Error> {
    let rep = m.rep;
    let tree = m.detail.then(|| Tree::new(m));
    let width = tree.as_ref().map_or(MIN_WIDTH, |t| t.width.max(MIN_WIDTH));
    let map = (!m.detail).then(|| GroupMap::new(m.groups.len(), width));
    let top_h = match (&tree, &map) {
        (Some(t), _) => t.height,
        (_, Some(g)) => g.height,
        _ => 0,
    };
    let has_nodes = !rep.per_node.is_empty();
    let row_h = if m.detail { 17 } else { 15 };
    let timeline_h = if has_nodes {
        px(m.rows.len()) * row_h + 120
    } else {
        0
    };
    let curve_h = if has_nodes { CURVE_H } else { 0 };
    let height = HEADER_H + top_h + curve_h + timeline_h;

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (unsigned(width), unsigned(height)))
            .into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (header, rest) = root.split_vertically(HEADER_H);
        let (top, rest) = rest.split_vertically(top_h);
        let (curve, timeline) = rest.split_vertically(curve_h);
        draw_header(&header, m, title)?;
        if let Some(t) = &tree {
            t.draw(&top, m, width)?;
        }
        if let Some(g) = &map {
            g.draw(&top, m)?;
        }
        if has_nodes {
            draw_curve(&curve, m)?;
            draw_timeline(&timeline, m)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// Title, then who and what, then when.
fn draw_header(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    m: &Model<'_>,
    title: &str,
) -> Result<(), Error> {
    let r = m.rep;
    let short = |s: &str| s.chars().take(16).collect::<String>();
    let groups = m.groups.iter().filter(|g| g.number.is_some()).count();
    let lines = [
        format!(
            "job {} · index {} · strategy {} · root {} · {} nodes{} · tree depth {}",
            super::job_label(&r.job),
            short(&r.index),
            r.strategy,
            r.root,
            r.nodes,
            if groups > 0 {
                format!(" in {groups} groups")
            } else {
                String::new()
            },
            m.max_depth()
        ),
        format!(
            "layer {} in {} chunks · urgent set {} in {} chunks · streamed {} · urgent set on every node: {} · whole layer: {}",
            human_bytes(r.total_bytes),
            r.chunks,
            human_bytes(r.urgent_bytes),
            r.urgent_chunks,
            human_bytes(r.streamed_bytes),
            human_when(r.urgent_complete_s),
            human_when(r.all_complete_s),
        ),
        match r.failures.len() {
            0 => String::new(),
            n => format!(
                "{n} failure(s): the red edges and crosses below; the page's table lists them"
            ),
        },
    ];
    area.draw(&Text::new(
        title.to_string(),
        (20, 12),
        ("sans-serif", 19).into_font().style(FontStyle::Bold),
    ))
    .map_err(draw_err)?;
    for (k, l) in lines.into_iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let color = if k == 2 { &FAILED } else { &BLACK };
        area.draw(&Text::new(
            l,
            (20, 34 + 16 * px(k)),
            ("sans-serif", 13).into_font().color(color),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Failure, NodeTimes};
    use crate::model::tests::sample;
    use crate::style::{FAILED, PROXY, hex};

    #[test]
    fn a_small_push_draws_every_node_its_groups_and_the_summary() {
        let mut rep = sample(4, 8);
        rep.per_node[3].app_start_s = Some(0.9);
        let s = svg(&rep, "push <test>").expect("draws");
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        for n in &rep.per_node {
            assert!(s.contains(&n.host), "{} is not drawn", n.host);
        }
        for word in [
            "push &lt;test&gt;",
            "group 3 (8 nodes)",
            "uplink in 16.0 MiB / out 0 B",
            "job 1234 (00000000000004d2)",
            "32 nodes in 4 groups",
            "layer 16.0 MiB",
            "urgent set on every node: 1.00 s",
            "whole layer: never",
            "urgent set held",
            "whole layer held",
            "application started",
            "cn00010 (failed)",
            "failed (from cn00009)",
            "1 failure(s)",
        ] {
            assert!(s.contains(word), "picture lacks {word:?}");
        }
        assert!(s.contains(&hex(FAILED)), "the failed edge is not red");
        assert!(s.contains(&hex(PROXY)));
    }

    #[test]
    fn red_only_when_something_failed() {
        let mut rep = sample(4, 8);
        rep.failures.clear();
        let s = svg(&rep, "t").expect("draws");
        assert!(!s.contains(&hex(FAILED)), "red drawn without a failure");
    }

    /// The TEES paper's 17,560 nodes in groups of 8: drawn per group, in a picture of
    /// bounded size.
    #[test]
    fn a_huge_push_is_drawn_per_group_and_stays_small() {
        let rep = sample(2195, 8);
        let s = svg(&rep, "t").expect("draws");
        assert!(!s.contains("cn17560"), "nodes are not drawn one by one");
        assert!(s.contains("2195 groups"));
        assert!(s.contains("groups 0-21 (176)"));
        assert!(s.contains("1 node(s) failed"));
        assert!(s.contains(&hex(FAILED)));
        assert!(s.len() < 2_000_000, "{} bytes", s.len());
    }

    #[test]
    fn an_empty_report_still_draws_its_header() {
        let rep = PushReport {
            job: "1".into(),
            ..PushReport::default()
        };
        let s = svg(&rep, "empty").expect("draws");
        assert!(s.contains("job 1"));
    }

    /// A crafted report: `n` nodes in one chain of parents, each in its own group, each
    /// with a failure into it.
    fn chain(n: usize) -> PushReport {
        let host = |i: usize| format!("n{i}");
        let mut rep = sample(1, 1);
        rep.per_node = (0..n)
            .map(|i| NodeTimes {
                host: host(i),
                parent: if i == 0 { "login".into() } else { host(i - 1) },
                urgent_s: Some(i as f64 / 1000.0),
                all_s: Some(i as f64 / 500.0),
                group: Some(i),
                app_start_s: None,
            })
            .collect();
        rep.failures = (0..n)
            .map(|i| Failure {
                kind: crate::FailureKind::Failed,
                parent: host(i.saturating_sub(1)),
                child: host(i),
                at_s: 0.5,
                reason: None,
                cause: None,
            })
            .collect();
        rep.nodes = n;
        rep
    }

    /// Issue 29: drawing was quadratic on crafted input (20,000 nodes in a chain, each its
    /// own group with a failure, took 7-11 s). At 40,000 the quadratic parts (walking every
    /// chain to the root, every group searching every failure and uplink) would take
    /// minutes; linear drawing takes about a second.
    #[test]
    fn a_long_chain_of_nodes_with_many_failures_draws_in_linear_time() {
        let rep = chain(40_000);
        let t = std::time::Instant::now();
        let page = crate::html(&rep, "chain").expect("drawn");
        let took = t.elapsed();
        assert!(page.contains("tree depth 40000"), "the depth is counted");
        assert!(took.as_secs() < 15, "drawing 40,000 nodes took {took:?}");
    }
}

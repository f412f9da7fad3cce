//! The push report as `teesfs push --report` writes it (the documented JSON of
//! `node/src/node/report.rs`, read here field by field so the lab does not link the node
//! code), and the SVG drawing of one run with plotters' SVG backend: the tree with its
//! groups and a per-node timeline.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::layout::{Layout, Role};
use crate::plot::plot_err;

/// One node's arrival times.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct NodeTimes {
    /// Host.
    pub host: String,
    /// Parent in the plan.
    pub parent: String,
    /// Seconds until it held the urgent set.
    pub urgent_s: Option<f64>,
    /// Seconds until it held everything.
    pub all_s: Option<f64>,
}

/// Bytes over one group's uplink as the root predicts them from edge traffic.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Uplink {
    /// Group number.
    pub group: usize,
    /// Its proxy.
    pub proxy: String,
    /// Payload bytes into the group.
    pub in_bytes: u64,
    /// Payload bytes out of the group.
    pub out_bytes: u64,
}

/// The fields of the push report the lab uses.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PushReport {
    /// Job id (hex), also the mount directory's name.
    pub job: String,
    /// Plan strategy.
    pub strategy: String,
    /// Nodes in the job.
    pub nodes: usize,
    /// Stored bytes of the urgent set.
    pub urgent_bytes: u64,
    /// Stored bytes of the layer.
    pub total_bytes: u64,
    /// Stored bytes the push streamed (the rest travels on demand).
    #[serde(default)]
    pub streamed_bytes: u64,
    /// When every node held the urgent set.
    pub urgent_complete_s: Option<f64>,
    /// When every node held everything.
    pub all_complete_s: Option<f64>,
    /// Per node.
    pub per_node: Vec<NodeTimes>,
    /// Per group uplink.
    #[serde(default)]
    pub uplinks: Vec<Uplink>,
    /// Failures, as reported.
    #[serde(default)]
    pub failures: Vec<serde_json::Value>,
}

impl PushReport {
    /// Reads a report file.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(LabError::io(path))?;
        serde_json::from_slice(&bytes).map_err(|e| LabError::Parse {
            what: path.display().to_string(),
            detail: e.to_string(),
        })
    }

    /// Payload bytes the root predicts into all groups.
    pub fn predicted_uplink_in(&self) -> u64 {
        self.uplinks.iter().map(|u| u.in_bytes).sum()
    }
}

/// Extra per-node marks for the timeline (e.g. when the application started).
#[derive(Debug, Clone, Default)]
pub struct Marks {
    /// Label of the mark.
    pub label: String,
    /// Seconds per host.
    pub at: Vec<(String, f64)>,
}

/// Held the urgent set: dark, because it is what the application waits for.
const URGENT: RGBColor = RGBColor(0x22, 0x66, 0xAA);
/// Held the whole layer: light, drawn under the urgent bar so the dark part reads as "first".
const WHOLE: RGBColor = RGBColor(0x9C, 0xCB, 0xE4);
/// Failed nodes and edges: the one red in the picture, so it cannot be mistaken for data.
const FAILED: RGBColor = RGBColor(0xD0, 0x10, 0x10);
/// Caller's marks (e.g. the application finished starting).
const MARK: RGBColor = RGBColor(0xDD, 0x66, 0x00);
/// A proxy: the node that owns its group's uplink.
const PROXY: RGBColor = RGBColor(0x22, 0xAA, 0x66);
/// Group boxes in the tree and every other group band in the timeline.
const GROUP_FILL: RGBColor = RGBColor(0xEE, 0xF3, 0xFB);
/// Plain tree edges: grey, so that red stays reserved for failures.
const EDGE: RGBColor = RGBColor(0x99, 0x99, 0x99);
/// Group names and other secondary text.
const MUTED: RGBColor = RGBColor(0x55, 0x66, 0x77);

/// Height of the title and summary lines above everything else.
const HEADER_H: u32 = 52;
/// Pixel rows of the tree drawing.
const TREE_TOP: i32 = 34;
const TREE_ROW_H: i32 = 34;
/// Horizontal room per node inside a group box.
const CELL: i32 = 26;
/// One timeline row per node.
const TIMELINE_ROW_H: u32 = 17;

/// A failure entry of the report (`{kind, parent, child, at_s}`), read leniently because
/// the lab keeps failures as raw JSON: an entry without a child cannot be placed and is
/// only counted in the title.
struct Failure {
    kind: String,
    parent: String,
    child: String,
    at_s: Option<f64>,
}

fn failures(rep: &PushReport) -> Vec<Failure> {
    let text = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    rep.failures
        .iter()
        .map(|v| Failure {
            kind: text(v, "kind"),
            parent: text(v, "parent"),
            child: text(v, "child"),
            at_s: v.get("at_s").and_then(serde_json::Value::as_f64),
        })
        .collect()
}

/// A count as pixels or rows. `Layout::new` caps a lab at 200 groups of 250 nodes, so
/// counts are far below the limit; saturating keeps an absurd report from wrapping.
fn px(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn seconds(t: Option<f64>) -> String {
    t.map_or_else(|| "never".to_string(), |t| format!("{t:.2} s"))
}

/// Draws the run as SVG: a title with the strategy, node count and completion times; the
/// tree (groups as boxes, proxies filled, edges parent to child, rows by depth, failed
/// nodes and edges in red) above a per-node timeline (one row per node, grouped by group:
/// urgent set held, whole layer held, the caller's marks, failures in red).
///
/// The drawing only writes into a string, so it does not fail in practice; should plotters
/// refuse anyway, the picture says why instead of leaving the report without one.
pub fn svg(layout: &Layout, rep: &PushReport, marks: &Marks, title: &str) -> String {
    draw(layout, rep, marks, title).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot draw the push report");
        let mut fallback = String::new();
        {
            let root = SVGBackend::with_string(&mut fallback, (760, 60)).into_drawing_area();
            let _ = root.fill(&WHITE);
            let _ = root.draw(&Text::new(
                format!("{title}: {e}"),
                (10, 20),
                ("sans-serif", 14).into_font().color(&FAILED),
            ));
            let _ = root.present();
        }
        fallback
    })
}

fn draw(layout: &Layout, rep: &PushReport, marks: &Marks, title: &str) -> Result<String> {
    let fails = failures(rep);
    let failed_node = |h: &str| fails.iter().any(|f| f.child == h);

    let rows = timeline_rows(layout, rep);

    let groups = layout.spec.groups;
    let gs = px(layout.spec.group_size);
    let gw = (gs * CELL + 20).max(90);
    let tree_w = px(groups) * (gw + 12) + 40;
    let width = tree_w.max(900);

    let parent_of = |h: &str| {
        rep.per_node
            .iter()
            .find(|n| n.host == h)
            .map(|n| n.parent.as_str())
    };
    // Depth in the tree as the report's parents give it; bounded because a corrupt report
    // could hold a cycle.
    let depth = |h: &str| {
        let mut d = 0;
        let mut cur = h;
        while let Some(p) = parent_of(cur) {
            d += 1;
            cur = p;
            if d > 64 {
                break;
            }
        }
        d
    };
    let max_depth = rows.iter().map(|r| depth(&r.0)).max().unwrap_or(1).max(1);
    let tree_h = TREE_TOP + max_depth * TREE_ROW_H + 34;
    let pos = |h: &str| -> (i32, i32) {
        match layout.node(h) {
            Some(n) if n.group.is_some() => {
                let g = px(n.group.unwrap_or(0));
                let i = layout
                    .compute()
                    .filter(|m| m.group == n.group)
                    .position(|m| m.host == h)
                    .map_or(0, px);
                (
                    20 + g * (gw + 12) + 10 + CELL * i + CELL / 2,
                    TREE_TOP + depth(h) * TREE_ROW_H,
                )
            }
            // The login node (the root) and anything outside the groups sit above them.
            _ => (width / 2, TREE_TOP - 20),
        }
    };

    let tmax = last_time(rep, &fails, marks);

    let unsigned = |v: i32| u32::try_from(v).unwrap_or(0);
    let timeline_h = unsigned(px(rows.len())) * TIMELINE_ROW_H + 110;
    let tree_h_px = unsigned(tree_h);
    let width_px = unsigned(width);
    let height = HEADER_H + tree_h_px + timeline_h;

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width_px, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (header, rest) = root.split_vertically(HEADER_H);
        let (tree, timeline) = rest.split_vertically(tree_h_px);

        draw_header(&header, title, rep, fails.len())?;
        draw_tree(&tree, layout, rep, &fails, &pos, (gw, tree_h))?;
        draw_timeline(&timeline, rep, marks, &fails, &rows, tmax, &failed_node)?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// The timeline's rows: the layout's compute nodes in group order (so groups stay
/// together), then any host the report names that the layout does not know, so no reported
/// node is dropped.
fn timeline_rows(layout: &Layout, rep: &PushReport) -> Vec<(String, Option<usize>)> {
    let mut rows: Vec<(String, Option<usize>)> = layout
        .compute()
        .map(|n| (n.host.clone(), n.group))
        .collect();
    for n in &rep.per_node {
        if !rows.iter().any(|r| r.0 == n.host) {
            rows.push((n.host.clone(), None));
        }
    }
    rows
}

/// The latest time anything in the picture happens (at least 0.1 s).
fn last_time(rep: &PushReport, fails: &[Failure], marks: &Marks) -> f64 {
    rep.per_node
        .iter()
        .flat_map(|n| [n.all_s, n.urgent_s])
        .chain([rep.urgent_complete_s, rep.all_complete_s])
        .chain(fails.iter().map(|f| f.at_s))
        .flatten()
        .chain(marks.at.iter().map(|m| m.1))
        .fold(0.1f64, f64::max)
}

/// The title and a one-line summary of the run.
fn draw_header(
    header: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    rep: &PushReport,
    failures: usize,
) -> Result<()> {
    header
        .draw(&Text::new(
            title.to_string(),
            (20, 10),
            ("sans-serif", 17).into_font().style(FontStyle::Bold),
        ))
        .map_err(plot_err)?;
    let mut summary = format!(
        "strategy {}, {} nodes; every node held the urgent set at {}, the whole layer at {}",
        rep.strategy,
        rep.nodes,
        seconds(rep.urgent_complete_s),
        seconds(rep.all_complete_s)
    );
    if failures > 0 {
        summary.push_str(&format!("; {} failure(s)", failures));
    }
    header
        .draw(&Text::new(summary, (20, 32), ("sans-serif", 13)))
        .map_err(plot_err)?;
    Ok(())
}

/// The tree: group boxes, edges parent to child, the root, compute nodes (proxies filled),
/// failures in red on top so nothing hides them.
fn draw_tree(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    layout: &Layout,
    rep: &PushReport,
    fails: &[Failure],
    pos: &dyn Fn(&str) -> (i32, i32),
    (gw, tree_h): (i32, i32),
) -> Result<()> {
    let label = ("sans-serif", 12).into_font().color(&MUTED);
    for g in 0..layout.spec.groups {
        let x = 20 + px(g) * (gw + 12);
        area.draw(&Rectangle::new(
            [(x, TREE_TOP - 16), (x + gw, tree_h - 4)],
            GROUP_FILL.filled(),
        ))
        .map_err(plot_err)?;
        area.draw(&Rectangle::new(
            [(x, TREE_TOP - 16), (x + gw, tree_h - 4)],
            MUTED.stroke_width(1),
        ))
        .map_err(plot_err)?;
        area.draw(&Text::new(
            format!("group {g}"),
            (x + 6, tree_h - 20),
            label.clone(),
        ))
        .map_err(plot_err)?;
    }
    for node in &rep.per_node {
        area.draw(&PathElement::new(
            vec![pos(&node.parent), pos(&node.host)],
            EDGE.stroke_width(1),
        ))
        .map_err(plot_err)?;
    }
    for f in fails.iter().filter(|f| !f.child.is_empty()) {
        area.draw(&PathElement::new(
            vec![pos(&f.parent), pos(&f.child)],
            FAILED.stroke_width(3),
        ))
        .map_err(plot_err)?;
    }
    let login = layout
        .nodes
        .iter()
        .find(|n| n.role == Role::Login)
        .map_or("login", |n| n.host.as_str());
    let (lx, ly) = pos(login);
    area.draw(&Circle::new((lx, ly), 9, BLACK.filled()))
        .map_err(plot_err)?;
    area.draw(&Text::new(
        format!("root ({login})"),
        (lx + 13, ly - 6),
        ("sans-serif", 12),
    ))
    .map_err(plot_err)?;
    let name = ("sans-serif", 9).into_font().color(&MUTED);
    for node in layout.compute() {
        let (x, y) = pos(&node.host);
        let failed = fails.iter().any(|f| f.child == node.host);
        let fill = if failed {
            FAILED.filled()
        } else if node.role == Role::Proxy {
            PROXY.filled()
        } else {
            WHITE.filled()
        };
        area.draw(&Circle::new((x, y), 7, fill)).map_err(plot_err)?;
        let ring = if failed {
            FAILED
        } else {
            RGBColor(0x22, 0x66, 0x44)
        };
        area.draw(&Circle::new((x, y), 7, ring.stroke_width(1)))
            .map_err(plot_err)?;
        // The number only: "n17" does not fit a cell, "17" does, and the timeline has the
        // full names.
        let short = node.host.trim_start_matches(|c: char| !c.is_ascii_digit());
        area.draw(&Text::new(
            short.to_string(),
            (x, y + 9),
            name.clone().pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(plot_err)?;
    }
    Ok(())
}

/// The timeline: one row per node, groups in alternating bands, seconds across.
fn draw_timeline(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    rep: &PushReport,
    marks: &Marks,
    fails: &[Failure],
    rows: &[(String, Option<usize>)],
    tmax: f64,
    failed_node: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let n = px(rows.len());
    // The first node goes on top, plotters counts upwards.
    let y_of = |i: usize| n - 1 - px(i);
    let row_of = |h: &str| rows.iter().position(|r| r.0 == h).map(y_of);
    // Room right of the last arrival for the group names and the legend, which plotters
    // places inside the plot.
    let xmax = tmax * 1.5;
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(y) => usize::try_from(n - 1 - y)
            .ok()
            .and_then(|i| rows.get(i))
            .map(|r| {
                if failed_node(&r.0) {
                    format!("{} (failed)", r.0)
                } else {
                    r.0.clone()
                }
            })
            .unwrap_or_default(),
        _ => String::new(),
    };

    let mut chart = ChartBuilder::on(area)
        .caption(
            "per-node timeline: when each node held the urgent set and the whole layer",
            ("sans-serif", 14),
        )
        .margin_left(20)
        .margin_right(20)
        .margin_bottom(10)
        .x_label_area_size(42)
        .y_label_area_size(100)
        // Plotters' integer ranges include their end: 0..n-1 gives exactly n rows.
        .build_cartesian_2d(0f64..xmax, (0..(n - 1).max(0)).into_segmented())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len() + 1)
        .y_label_formatter(&label_of)
        .x_labels(10)
        .x_label_formatter(&|t| format!("{t:.1}"))
        .x_desc("seconds since the push started")
        .y_desc("node (by group)")
        .label_style(("sans-serif", 11))
        .axis_desc_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(plot_err)?;

    draw_bands(&mut chart, rows, tmax, xmax, &y_of)?;

    draw_arrivals(&mut chart, rep, &row_of)?;
    draw_marks(&mut chart, marks, fails, &row_of)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .margin(8)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(MUTED)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// The timeline's chart: seconds across, one segment per node row.
type Timeline<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordi32>>>;

/// Group bands behind the timeline: consecutive rows of one group share a band, every other
/// band is tinted, and each is named at its top.
fn draw_bands(
    chart: &mut Timeline<'_, '_>,
    rows: &[(String, Option<usize>)],
    tmax: f64,
    xmax: f64,
    y_of: &dyn Fn(usize) -> i32,
) -> Result<()> {
    let mut bands: Vec<(Option<usize>, usize, usize)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        match bands.last_mut() {
            Some(b) if b.0 == r.1 => b.2 = i,
            _ => bands.push((r.1, i, i)),
        }
    }
    for (k, (g, first, last)) in bands.iter().enumerate() {
        let top = SegmentValue::Exact(y_of(*first) + 1);
        let bottom = SegmentValue::Exact(y_of(*last));
        if k % 2 == 0 {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, bottom), (xmax, top)],
                    // Translucent so the seconds grid still shows through.
                    GROUP_FILL.mix(0.7).filled(),
                )))
                .map_err(plot_err)?;
        }
        let name = g.map_or_else(|| "no group".to_string(), |g| format!("group {g}"));
        chart
            .draw_series(std::iter::once(Text::new(
                name,
                (tmax * 1.03, SegmentValue::CenterOf(y_of(*first))),
                ("sans-serif", 12).into_font().color(&MUTED),
            )))
            .map_err(plot_err)?;
    }

    Ok(())
}

/// A bar per node from zero to when it held the whole layer, and over it one to when it
/// held the urgent set.
fn draw_arrivals(
    chart: &mut Timeline<'_, '_>,
    rep: &PushReport,
    row_of: &dyn Fn(&str) -> Option<i32>,
) -> Result<()> {
    let bar = |t: f64, y: i32, c: RGBColor| {
        let mut r = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(y)),
                (t, SegmentValue::Exact(y + 1)),
            ],
            c.filled(),
        );
        r.set_margin(3, 3, 0, 0);
        r
    };
    let legend_box = |c: RGBColor| {
        move |(x, y): (i32, i32)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
    };
    chart
        .draw_series(
            rep.per_node
                .iter()
                .filter_map(|nd| Some(bar(nd.all_s?, row_of(&nd.host)?, WHOLE))),
        )
        .map_err(plot_err)?
        .label("whole layer held")
        .legend(legend_box(WHOLE));
    chart
        .draw_series(
            rep.per_node
                .iter()
                .filter_map(|nd| Some(bar(nd.urgent_s?, row_of(&nd.host)?, URGENT))),
        )
        .map_err(plot_err)?
        .label("urgent set held")
        .legend(legend_box(URGENT));
    Ok(())
}

/// The application marks (diamonds) and the failures (crosses, with the failed edge).
fn draw_marks(
    chart: &mut Timeline<'_, '_>,
    marks: &Marks,
    fails: &[Failure],
    row_of: &dyn Fn(&str) -> Option<i32>,
) -> Result<()> {
    let diamond = |c: RGBColor| {
        move |at: (f64, SegmentValue<i32>)| {
            EmptyElement::at(at) + Polygon::new(vec![(0, -6), (5, 0), (0, 6), (-5, 0)], c.filled())
        }
    };
    if !marks.at.is_empty() {
        chart
            .draw_series(
                marks.at.iter().filter_map(|(h, t)| {
                    Some(diamond(MARK)((*t, SegmentValue::CenterOf(row_of(h)?))))
                }),
            )
            .map_err(plot_err)?
            .label(marks.label.clone())
            .legend(move |(x, y)| diamond_legend(x + 7, y, MARK));
    }
    if !fails.is_empty() {
        // A failure without a time is marked at zero, still on its node's row.
        chart
            .draw_series(fails.iter().filter_map(|f| {
                let at = (
                    f.at_s.unwrap_or(0.0),
                    SegmentValue::CenterOf(row_of(&f.child)?),
                );
                Some(
                    EmptyElement::at(at)
                        + Cross::new((0, 0), 6, FAILED.stroke_width(3))
                        + Text::new(
                            format!("{} (from {})", f.kind, f.parent),
                            (10, -6),
                            ("sans-serif", 11).into_font().color(&FAILED),
                        ),
                )
            }))
            .map_err(plot_err)?
            .label("failure (edge parent to node)")
            .legend(|(x, y)| Cross::new((x + 7, y), 5, FAILED.stroke_width(3)));
    }
    Ok(())
}

/// The mark's legend entry: the same diamond as on the rows, in pixels.
fn diamond_legend(x: i32, y: i32, c: RGBColor) -> Polygon<(i32, i32)> {
    Polygon::new(
        vec![(x, y - 6), (x + 5, y), (x, y + 6), (x - 5, y)],
        c.filled(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LabSpec;

    /// The reference shape (4 x 8) with every node arriving a little after the last, and
    /// n05 cut off from its proxy at 0.7 s.
    fn sample() -> (Layout, PushReport, Marks) {
        let layout =
            Layout::new("tlab0001", &LabSpec::default()).expect("the default shape is valid");
        let per_node = layout
            .compute()
            .enumerate()
            .map(|(i, n)| NodeTimes {
                host: n.host.clone(),
                parent: if n.role == Role::Proxy {
                    "login".into()
                } else {
                    format!("n{:02}", (i / 8) * 8 + 1)
                },
                urgent_s: Some(0.5 + i as f64 * 0.01),
                all_s: (n.host != "n05").then_some(1.0 + i as f64 * 0.02),
            })
            .collect();
        let rep = PushReport {
            job: "00".into(),
            strategy: "topo".into(),
            nodes: 32,
            urgent_bytes: 1,
            total_bytes: 2,
            streamed_bytes: 2,
            urgent_complete_s: Some(0.9),
            all_complete_s: Some(1.7),
            per_node,
            uplinks: vec![],
            failures: vec![serde_json::json!({
                "kind": "failed", "parent": "n01", "child": "n05", "at_s": 0.7
            })],
        };
        let marks = Marks {
            label: "app started".into(),
            at: vec![("n02".into(), 1.2)],
        };
        (layout, rep, marks)
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn svg_draws_every_node_the_legend_and_the_title() {
        let (layout, rep, marks) = sample();
        let s = svg(&layout, &rep, &marks, "demo <test>");
        assert!(s.starts_with("<svg"), "{}", &s[..s.len().min(200)]);
        assert!(s.trim_end().ends_with("</svg>"));
        for node in layout.compute() {
            assert!(s.contains(&node.host), "{} is not drawn", node.host);
        }
        for word in [
            "urgent set held",
            "whole layer held",
            "app started",
            "failure",
        ] {
            assert!(s.contains(word), "legend lacks {word:?}");
        }
        assert!(
            s.contains("demo &lt;test&gt;"),
            "title not escaped or missing"
        );
        assert!(s.contains("strategy topo, 32 nodes"));
        assert!(s.contains("0.90 s") && s.contains("1.70 s"));
        assert!(s.contains("seconds since the push started"));
        // Both bar colours are used.
        assert!(s.contains(&hex(URGENT)) && s.contains(&hex(WHOLE)));
    }

    #[test]
    fn svg_marks_a_failure_in_red_and_only_then() {
        let (layout, rep, marks) = sample();
        let s = svg(&layout, &rep, &marks, "t");
        assert!(s.contains(&hex(FAILED)), "no red for the failed edge");
        assert!(s.contains("n05 (failed)"));
        assert!(s.contains("1 failure(s)"));

        let healthy = PushReport {
            failures: vec![],
            ..rep
        };
        let s = svg(&layout, &healthy, &marks, "t");
        assert!(!s.contains(&hex(FAILED)), "red drawn without a failure");
        assert!(!s.contains("(failed)"));
    }
}

//! The SVG picture of a push report, drawn with plotters' SVG backend into a string: the
//! header, the tree (or group map), the arrival curve and the timeline, stacked. Geometry
//! is computed from the [`Model`]; nothing here reads files or the clock.

use std::collections::HashMap;

use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::model::{Model, Row, Spread};
use super::{draw_err, human_bytes, human_secs, human_when};
use crate::Error;
use crate::node::report::PushReport;

/// Held the urgent set: dark, because it is what the application waits for.
const URGENT: RGBColor = RGBColor(0x22, 0x66, 0xAA);
/// Held the whole layer: light, drawn under the urgent bar so the dark part reads as "first".
const WHOLE: RGBColor = RGBColor(0x8C, 0xBF, 0xE0);
/// Failed nodes and edges: the one red in the picture, so it cannot be mistaken for data.
const FAILED: RGBColor = RGBColor(0xD0, 0x10, 0x10);
/// The application started.
const APP: RGBColor = RGBColor(0xDD, 0x66, 0x00);
/// A proxy: the node that owns its group's uplink.
const PROXY: RGBColor = RGBColor(0x22, 0xAA, 0x66);
/// Group boxes in the tree and every other group band in the timeline.
const GROUP_FILL: RGBColor = RGBColor(0xEE, 0xF3, 0xFB);
/// Plain tree edges: grey, so that red stays reserved for failures.
const EDGE: RGBColor = RGBColor(0x99, 0x99, 0x99);
/// Group names and other secondary text.
const MUTED: RGBColor = RGBColor(0x55, 0x66, 0x77);
/// A group whose nodes never all held the layer.
const NEVER: RGBColor = RGBColor(0xBB, 0xBB, 0xBB);
/// The arrival ramp of the group map, early to late.
const EARLY: RGBColor = RGBColor(0xDE, 0xEB, 0xF7);
const LATE: RGBColor = RGBColor(0x08, 0x30, 0x6B);

/// The narrowest picture: what a laptop browser shows without scrolling.
const MIN_WIDTH: i32 = 1360;
const HEADER_H: i32 = 86;
const CURVE_H: i32 = 300;
/// Tree: the root's row, then one row per depth.
const TREE_TOP: i32 = 56;
const TREE_ROW_H: i32 = 36;
/// Group map: room for its caption and colour scale.
const MAP_TOP: i32 = 64;
const MAP_MAX_H: i32 = 420;

/// A count or length as pixels; reports large enough to overflow are drawn clipped.
fn px(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX / 4)
}

fn unsigned(v: i32) -> u32 {
    u32::try_from(v.max(1)).unwrap_or(1)
}

/// Draws the report as SVG (see the module doc of [`crate::report`] for what it shows).
pub fn svg(rep: &PushReport, title: &str) -> Result<String, Error> {
    let m = Model::new(rep);
    let tree = m.detail.then(|| Tree::new(&m));
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
        draw_header(&header, &m, title)?;
        if let Some(t) = &tree {
            t.draw(&top, &m, width)?;
        }
        if let Some(g) = &map {
            g.draw(&top, &m)?;
        }
        if has_nodes {
            draw_curve(&curve, &m)?;
            draw_timeline(&timeline, &m)?;
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
            r.job,
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

/// Where every node of a small job goes: a box per group side by side, the nodes of a group
/// left to right in report (breadth-first) order, one row per depth.
struct Tree {
    boxes: Vec<(i32, i32)>,
    pos: Vec<(i32, i32)>,
    width: i32,
    height: i32,
}

impl Tree {
    fn new(m: &Model<'_>) -> Self {
        let cell = if m.rep.per_node.len() <= 48 { 26 } else { 18 };
        let mut pos = vec![(0, 0); m.rep.per_node.len()];
        let mut boxes = Vec::new();
        let mut x = 20;
        for g in &m.groups {
            // Each depth is its own row, filled left to right, so children sit under
            // their parents' row rather than beside it.
            let mut filled: HashMap<usize, i32> = HashMap::new();
            for &i in &g.nodes {
                let k = filled.entry(m.depth[i]).or_insert(0);
                pos[i] = (
                    x + 10 + cell * *k + cell / 2,
                    TREE_TOP + px(m.depth[i] - 1) * TREE_ROW_H + 12,
                );
                *k += 1;
            }
            let widest = filled.values().copied().max().unwrap_or(1);
            let w = (widest * cell + 20).max(150);
            boxes.push((x, w));
            x += w + 12;
        }
        Tree {
            boxes,
            pos,
            width: x + 8,
            height: TREE_TOP + px(m.max_depth()) * TREE_ROW_H + 52,
        }
    }

    fn draw(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
        width: i32,
    ) -> Result<(), Error> {
        let root = (width / 2, 24);
        let label = ("sans-serif", 12).into_font().color(&MUTED);
        area.draw(&Text::new(
            "the tree by group: edges parent to child, wider = more bytes; proxies green; failed edges and nodes red",
            (20, 2),
            ("sans-serif", 13),
        ))
        .map_err(draw_err)?;
        let bottom = self.height - 6;
        for (g, &(x, w)) in m.groups.iter().zip(&self.boxes) {
            let corners = [(x, TREE_TOP - 4), (x + w, bottom)];
            area.draw(&Rectangle::new(corners, GROUP_FILL.filled()))
                .map_err(draw_err)?;
            area.draw(&Rectangle::new(corners, MUTED.stroke_width(1)))
                .map_err(draw_err)?;
            area.draw(&Text::new(
                format!("{} ({} nodes)", g.label, g.nodes.len()),
                (x + 6, bottom - 30),
                label.clone(),
            ))
            .map_err(draw_err)?;
            if let (Some(i), Some(o)) = (g.in_bytes, g.out_bytes) {
                area.draw(&Text::new(
                    format!("uplink in {} / out {}", human_bytes(i), human_bytes(o)),
                    (x + 6, bottom - 15),
                    label.clone(),
                ))
                .map_err(draw_err)?;
            }
        }
        let index: HashMap<&str, usize> = m
            .rep
            .per_node
            .iter()
            .enumerate()
            .map(|(i, n)| (n.host.as_str(), i))
            .collect();
        let at = |h: &str| index.get(h).map_or(root, |&i| self.pos[i]);
        let bytes: HashMap<(&str, &str), u64> = m
            .rep
            .edges
            .iter()
            .map(|e| ((e.parent.as_str(), e.child.as_str()), e.bytes))
            .collect();
        let most = bytes.values().copied().max().unwrap_or(1).max(1);
        for n in &m.rep.per_node {
            let b = bytes
                .get(&(n.parent.as_str(), n.host.as_str()))
                .copied()
                .unwrap_or(0);
            let w = 1 + u32::try_from(3 * b / most).unwrap_or(3);
            area.draw(&PathElement::new(
                vec![at(&n.parent), at(&n.host)],
                EDGE.stroke_width(w),
            ))
            .map_err(draw_err)?;
        }
        for f in &m.rep.failures {
            area.draw(&PathElement::new(
                vec![at(&f.parent), at(&f.child)],
                FAILED.stroke_width(3),
            ))
            .map_err(draw_err)?;
        }
        area.draw(&Circle::new(root, 9, BLACK.filled()))
            .map_err(draw_err)?;
        area.draw(&Text::new(
            format!("root ({})", m.rep.root),
            (root.0 + 13, root.1 - 6),
            ("sans-serif", 12),
        ))
        .map_err(draw_err)?;
        let name = ("sans-serif", 9).into_font().color(&MUTED);
        for (n, &(x, y)) in m.rep.per_node.iter().zip(&self.pos) {
            let failed = m.failed.contains(n.host.as_str());
            let fill = if failed {
                FAILED.filled()
            } else if m.proxies.contains(n.host.as_str()) {
                PROXY.filled()
            } else {
                WHITE.filled()
            };
            area.draw(&Circle::new((x, y), 7, fill)).map_err(draw_err)?;
            let ring = if failed {
                FAILED
            } else {
                RGBColor(0x22, 0x66, 0x44)
            };
            area.draw(&Circle::new((x, y), 7, ring.stroke_width(1)))
                .map_err(draw_err)?;
            // The trailing number only ("cn0017" does not fit a cell, "17" does); the
            // timeline has the full names.
            let digits = n.host.trim_start_matches(|c: char| !c.is_ascii_digit());
            let short = if digits.is_empty() {
                n.host.as_str()
            } else {
                digits.trim_start_matches('0')
            };
            area.draw(&Text::new(
                short.to_string(),
                (x, y + 9),
                name.clone().pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }
}

/// A large job's groups as a grid of cells coloured by when the group's last node held the
/// whole layer; red outline where an edge into the group failed.
struct GroupMap {
    cell: i32,
    cols: usize,
    height: i32,
}

impl GroupMap {
    fn new(groups: usize, width: i32) -> Self {
        let mut pick = (5, 1);
        for cell in [40, 30, 22, 16, 12, 9, 7, 5] {
            let cols = usize::try_from((width - 120) / (cell + 2))
                .unwrap_or(1)
                .max(1);
            pick = (cell, cols);
            if px(groups.div_ceil(cols)) * (cell + 2) <= MAP_MAX_H {
                break;
            }
        }
        let (cell, cols) = pick;
        GroupMap {
            cell,
            cols,
            height: MAP_TOP + px(groups.div_ceil(cols)) * (cell + 2) + 24,
        }
    }

    fn draw(&self, area: &DrawingArea<SVGBackend<'_>, Shift>, m: &Model<'_>) -> Result<(), Error> {
        let tmax = m.tmax;
        area.draw(&Text::new(
            format!(
                "the tree by group: {} groups, each coloured by when its last node held the whole layer; red outline: a failed edge into the group",
                m.groups.len()
            ),
            (20, 2),
            ("sans-serif", 13),
        ))
        .map_err(draw_err)?;
        // The colour scale.
        let (sx, sy, sw) = (20, 26, 300);
        for k in 0..sw {
            let c = ramp(f64::from(k) / f64::from(sw));
            area.draw(&Rectangle::new(
                [(sx + k, sy), (sx + k + 1, sy + 12)],
                c.filled(),
            ))
            .map_err(draw_err)?;
        }
        let small = ("sans-serif", 11).into_font().color(&MUTED);
        for (f, anchor) in [(0.0, HPos::Left), (0.5, HPos::Center), (1.0, HPos::Right)] {
            area.draw(&Text::new(
                human_secs(tmax * f),
                (sx + (f64::from(sw) * f) as i32, sy + 15),
                small.clone().pos(Pos::new(anchor, VPos::Top)),
            ))
            .map_err(draw_err)?;
        }
        let lx = sx + sw + 30;
        area.draw(&Rectangle::new(
            [(lx, sy), (lx + 12, sy + 12)],
            NEVER.filled(),
        ))
        .map_err(draw_err)?;
        area.draw(&Text::new(
            "a node never held it",
            (lx + 18, sy),
            small.clone(),
        ))
        .map_err(draw_err)?;
        let fx = lx + 170;
        area.draw(&Rectangle::new(
            [(fx, sy), (fx + 12, sy + 12)],
            FAILED.stroke_width(2),
        ))
        .map_err(draw_err)?;
        area.draw(&Text::new(
            "a failed edge into the group",
            (fx + 18, sy),
            small.clone(),
        ))
        .map_err(draw_err)?;

        let step = self.cell + 2;
        for (k, g) in m.groups.iter().enumerate() {
            let (r, c) = (px(k / self.cols), px(k % self.cols));
            let (x, y) = (80 + c * step, MAP_TOP + r * step);
            let a = &g.arrivals;
            let fill = match a.all {
                Some(s) if a.never_all == 0 => ramp(s.max / tmax),
                _ => NEVER,
            };
            let corners = [(x, y), (x + self.cell, y + self.cell)];
            area.draw(&Rectangle::new(corners, fill.filled()))
                .map_err(draw_err)?;
            if a.failed > 0 {
                area.draw(&Rectangle::new(corners, FAILED.stroke_width(2)))
                    .map_err(draw_err)?;
            }
            if k % self.cols == 0 {
                area.draw(&Text::new(
                    g.number.map_or_else(|| g.label.clone(), |n| n.to_string()),
                    (74, y + self.cell / 2),
                    small.clone().pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
            if self.cell >= 30 {
                let text_color = if a.all.is_some_and(|s| s.max / tmax > 0.5) {
                    WHITE
                } else {
                    BLACK
                };
                area.draw(&Text::new(
                    g.number.map_or_else(String::new, |n| n.to_string()),
                    (x + self.cell / 2, y + self.cell / 2),
                    ("sans-serif", 10)
                        .into_font()
                        .color(&text_color)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
        }
        Ok(())
    }
}

/// Early (light) to late (dark) along the map's ramp; `f` is clamped to 0..=1.
fn ramp(f: f64) -> RGBColor {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    RGBColor(
        mix(EARLY.0, LATE.0),
        mix(EARLY.1, LATE.1),
        mix(EARLY.2, LATE.2),
    )
}

/// `n` sorted times as the steps of "how many nodes by then", at most ~1000 points.
fn steps(mut times: Vec<f64>) -> Vec<(f64, f64)> {
    times.retain(|t| t.is_finite());
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let stride = n.div_ceil(1000).max(1);
    let mut pts = vec![(0.0, 0.0)];
    for (i, &t) in times.iter().enumerate() {
        if i % stride == stride - 1 || i + 1 == n {
            pts.push((t, (i + 1) as f64));
        }
    }
    pts
}

/// How many nodes held the urgent set, the whole layer (and had started the application)
/// over time.
fn draw_curve(area: &DrawingArea<SVGBackend<'_>, Shift>, m: &Model<'_>) -> Result<(), Error> {
    let nodes = &m.rep.per_node;
    let n = nodes.len() as f64;
    let xmax = m.tmax * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "nodes holding the urgent set and the whole layer over time",
            ("sans-serif", 14),
        )
        .margin_left(20)
        .margin_right(30)
        .margin_bottom(8)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..xmax, 0f64..(n * 1.05).max(1.0))
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the push started")
        .y_desc("nodes")
        .x_label_formatter(&|t| format!("{t:.1}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 11))
        .axis_desc_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    let series: [(&str, RGBColor, u32, Vec<f64>); 3] = [
        (
            "whole layer held",
            WHOLE,
            4,
            nodes.iter().filter_map(|n| n.all_s).collect(),
        ),
        (
            "urgent set held",
            URGENT,
            2,
            nodes.iter().filter_map(|n| n.urgent_s).collect(),
        ),
        (
            "application started",
            APP,
            2,
            nodes.iter().filter_map(|n| n.app_start_s).collect(),
        ),
    ];
    for (label, color, w, times) in series {
        if times.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(steps(times), color.stroke_width(w)))
            .map_err(draw_err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(w))
            });
    }
    if !m.rep.failures.is_empty() {
        chart
            .draw_series(
                m.rep
                    .failures
                    .iter()
                    .map(|f| Cross::new((f.at_s, 0.0), 6, FAILED.stroke_width(2))),
            )
            .map_err(draw_err)?
            .label(format!("failure ({})", m.rep.failures.len()))
            .legend(|(x, y)| Cross::new((x + 10, y), 5, FAILED.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .margin(10)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(MUTED)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// The timeline's chart: seconds across, one segment per row.
type Timeline<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordi32>>>;

/// One row per node (bars to the urgent set and the whole layer) or per group (min to max
/// bars with the median marked), groups in alternating bands.
fn draw_timeline(area: &DrawingArea<SVGBackend<'_>, Shift>, m: &Model<'_>) -> Result<(), Error> {
    let n = px(m.rows.len());
    // The first row goes on top; plotters counts upwards.
    let y_of = |i: usize| n - 1 - px(i);
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(y) => usize::try_from(n - 1 - y)
            .ok()
            .and_then(|i| m.rows.get(i))
            .map(|r| r.label.clone())
            .unwrap_or_default(),
        _ => String::new(),
    };
    // Room right of the last arrival for the band names and the legend.
    let xmax = m.tmax * if m.detail { 1.45 } else { 1.35 };
    let caption = if m.detail {
        "per-node timeline: when each node held the urgent set and the whole layer"
    } else {
        "per-group timeline: bars from the first to the last node, black tick at the median"
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 14))
        .margin_left(20)
        .margin_right(30)
        .margin_bottom(10)
        .x_label_area_size(42)
        .y_label_area_size(150)
        // Plotters' integer ranges include their end: 0..n-1 gives exactly n rows.
        .build_cartesian_2d(0f64..xmax, (0..(n - 1).max(0)).into_segmented())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(m.rows.len() + 1)
        .y_label_formatter(&label_of)
        .x_labels(12)
        .x_label_formatter(&|t| format!("{t:.1}"))
        .x_desc("seconds since the push started")
        .y_desc(if m.detail {
            "node (by group)"
        } else {
            "group (nodes)"
        })
        .label_style(("sans-serif", 11))
        .axis_desc_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    draw_bands(&mut chart, m, xmax, &y_of)?;
    if m.detail {
        draw_node_bars(&mut chart, &m.rows, &y_of)?;
    } else {
        draw_group_bars(&mut chart, &m.rows, m.tmax, &y_of)?;
    }
    draw_row_marks(&mut chart, m, &y_of)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .margin(8)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(MUTED)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// Consecutive rows of one group share a band; every other band is tinted and, per node,
/// named right of the bars.
fn draw_bands(
    chart: &mut Timeline<'_, '_>,
    m: &Model<'_>,
    xmax: f64,
    y_of: &dyn Fn(usize) -> i32,
) -> Result<(), Error> {
    let mut bands: Vec<(usize, usize, usize)> = Vec::new();
    for (i, r) in m.rows.iter().enumerate() {
        match bands.last_mut() {
            Some(b) if b.0 == r.group => b.2 = i,
            _ => bands.push((r.group, i, i)),
        }
    }
    for (k, &(g, first, last)) in bands.iter().enumerate() {
        if k % 2 == 0 {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(y_of(last))),
                        (xmax, SegmentValue::Exact(y_of(first) + 1)),
                    ],
                    GROUP_FILL.mix(0.8).filled(),
                )))
                .map_err(draw_err)?;
        }
        if m.detail {
            let name = m.groups.get(g).map_or("", |g| g.label.as_str());
            chart
                .draw_series(std::iter::once(Text::new(
                    name.to_string(),
                    (m.tmax * 1.03, SegmentValue::CenterOf(y_of(first))),
                    ("sans-serif", 12).into_font().color(&MUTED),
                )))
                .map_err(draw_err)?;
        }
    }
    Ok(())
}

fn bar(
    from: f64,
    to: f64,
    y: i32,
    c: ShapeStyle,
    (top, bottom): (u32, u32),
) -> Rectangle<(f64, SegmentValue<i32>)> {
    let mut r = Rectangle::new(
        [
            (from, SegmentValue::Exact(y)),
            (to, SegmentValue::Exact(y + 1)),
        ],
        c,
    );
    r.set_margin(top, bottom, 0, 0);
    r
}

fn legend_box(c: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
}

/// A bar per node from zero to the whole layer, and over it one to the urgent set.
fn draw_node_bars(
    chart: &mut Timeline<'_, '_>,
    rows: &[Row],
    y_of: &dyn Fn(usize) -> i32,
) -> Result<(), Error> {
    let at = |pick: fn(&Row) -> Option<Spread>| {
        rows.iter()
            .enumerate()
            .filter_map(move |(i, r)| pick(r).map(|s| (i, s)))
    };
    chart
        .draw_series(
            at(|r| r.arrivals.all).map(|(i, s)| bar(0.0, s.max, y_of(i), WHOLE.filled(), (3, 3))),
        )
        .map_err(draw_err)?
        .label("whole layer held")
        .legend(legend_box(WHOLE));
    chart
        .draw_series(
            at(|r| r.arrivals.urgent)
                .map(|(i, s)| bar(0.0, s.max, y_of(i), URGENT.filled(), (3, 3))),
        )
        .map_err(draw_err)?
        .label("urgent set held")
        .legend(legend_box(URGENT));
    Ok(())
}

/// Per row: the whole layer's min-to-max bar (light, lower half), the urgent set's (dark,
/// upper half), each with a black tick at its median.
fn draw_group_bars(
    chart: &mut Timeline<'_, '_>,
    rows: &[Row],
    tmax: f64,
    y_of: &dyn Fn(usize) -> i32,
) -> Result<(), Error> {
    // A few pixels wide whatever the time scale.
    let w = tmax * 0.002;
    let tick = |s: Spread, y: i32, half: (u32, u32)| {
        bar(s.median - w, s.median + w, y, BLACK.filled(), half)
    };
    for (pick, color, half, label) in [
        (
            (|r: &Row| r.arrivals.all) as fn(&Row) -> Option<Spread>,
            WHOLE,
            (8, 2),
            "whole layer held: first to last node",
        ),
        (
            (|r: &Row| r.arrivals.urgent) as fn(&Row) -> Option<Spread>,
            URGENT,
            (2, 8),
            "urgent set held: first to last node",
        ),
    ] {
        let spans: Vec<(i32, Spread)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| pick(r).map(|s| (y_of(i), s)))
            .collect();
        chart
            .draw_series(
                spans
                    .iter()
                    .map(|&(y, s)| bar(s.min, s.max.max(s.min + 1e-6), y, color.filled(), half)),
            )
            .map_err(draw_err)?
            .label(label)
            .legend(legend_box(color));
        chart
            .draw_series(spans.iter().map(|&(y, s)| tick(s, y, half)))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Application starts (diamonds, the median per group) and failures (red crosses at the
/// first failure into the row, with what failed).
fn draw_row_marks(
    chart: &mut Timeline<'_, '_>,
    m: &Model<'_>,
    y_of: &dyn Fn(usize) -> i32,
) -> Result<(), Error> {
    let apps: Vec<(f64, i32)> = m
        .rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((r.arrivals.app?.median, y_of(i))))
        .collect();
    if !apps.is_empty() {
        chart
            .draw_series(apps.into_iter().map(|(t, y)| {
                EmptyElement::at((t, SegmentValue::CenterOf(y)))
                    + Polygon::new(vec![(0, -6), (5, 0), (0, 6), (-5, 0)], APP.filled())
            }))
            .map_err(draw_err)?
            .label(if m.detail {
                "application started"
            } else {
                "application started (median)"
            })
            .legend(|(x, y)| {
                Polygon::new(
                    vec![(x + 7, y - 6), (x + 12, y), (x + 7, y + 6), (x + 2, y)],
                    APP.filled(),
                )
            });
    }
    let fails: Vec<(f64, i32, String)> = m
        .rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let t = r.arrivals.first_failure_s?;
            let text = if m.detail {
                let host = &m.rep.per_node[*r.nodes.first()?].host;
                m.rep
                    .failures
                    .iter()
                    .find(|f| &f.child == host)
                    .map(|f| format!("{} (from {})", f.kind, f.parent))
                    .unwrap_or_default()
            } else {
                format!("{} node(s) failed", r.arrivals.failed)
            };
            Some((t, y_of(i), text))
        })
        .collect();
    if !fails.is_empty() {
        chart
            .draw_series(fails.into_iter().map(|(t, y, text)| {
                EmptyElement::at((t, SegmentValue::CenterOf(y)))
                    + Cross::new((0, 0), 6, FAILED.stroke_width(3))
                    + Text::new(
                        text,
                        (10, -6),
                        ("sans-serif", 11).into_font().color(&FAILED),
                    )
            }))
            .map_err(draw_err)?
            .label("failure (the edge into the node)")
            .legend(|(x, y)| Cross::new((x + 7, y), 5, FAILED.stroke_width(3)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::tests::sample;

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

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
            "job 00000000000004d2",
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

    #[test]
    fn steps_count_nodes_and_are_thinned() {
        assert_eq!(
            steps(vec![2.0, 1.0]),
            vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]
        );
        let many = steps((0..17_560).map(f64::from).collect());
        assert!(many.len() <= 1002, "{}", many.len());
        assert_eq!(many.last(), Some(&(17_559.0, 17_560.0)));
    }
}

//! The timeline: a row per node (small jobs) or per group or run of groups (large ones),
//! bars to when each held the urgent set and the whole layer, application starts and
//! failures marked, groups in alternating bands. Drawn from the [`Model`]'s rows alone,
//! which already bound their number.

use plotters::chart::{ChartContext, SeriesLabelPosition};
use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;

use super::draw_err;
use super::model::{Model, Row, Spread};
use super::style::{APP, FAILED, GROUP_FILL, MUTED, URGENT, WHOLE, draw_legend, px};
use crate::Error;

/// The timeline's chart: seconds across, one segment per row.
type Timeline<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordi32>>>;

/// One row per node (bars to the urgent set and the whole layer) or per group (min to max
/// bars with the median marked), groups in alternating bands.
pub(super) fn draw_timeline(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    m: &Model<'_>,
) -> Result<(), Error> {
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
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight, 8)
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
                m.fails
                    .first
                    .get(host.as_str())
                    .map(|&f| {
                        let f = &m.rep.failures[f];
                        format!("{} (from {})", f.kind, f.parent)
                    })
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

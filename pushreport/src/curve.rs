//! The arrival curve: how many nodes held the urgent set and the whole layer (and had
//! started the application) over time, with failures marked on the time axis. Drawn from
//! the [`Model`] alone, thinned to a bounded number of points.

use plotters::chart::SeriesLabelPosition;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::draw_err;
use super::model::Model;
use super::style::{APP, FAILED, URGENT, WHOLE, draw_legend};
use crate::Error;

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

/// Where to mark `times` on an axis to `tmax`: one mark per thousandth of it at most, so
/// that a report with a million failures draws as fast as one with a thousand.
fn marks(times: impl Iterator<Item = f64>, tmax: f64) -> Vec<f64> {
    let slot = |t: f64| (t / tmax * 1000.0).round() as i64;
    let mut seen = std::collections::HashSet::new();
    times
        .filter(|t| t.is_finite())
        .filter(|&t| seen.insert(slot(t)))
        .collect()
}

/// How many nodes held the urgent set, the whole layer (and had started the application)
/// over time.
pub(super) fn draw_curve(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    m: &Model<'_>,
) -> Result<(), Error> {
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
                marks(m.rep.failures.iter().map(|f| f.at_s), m.tmax)
                    .into_iter()
                    .map(|t| Cross::new((t, 0.0), 6, FAILED.stroke_width(2))),
            )
            .map_err(draw_err)?
            .label(format!("failure ({})", m.rep.failures.len()))
            .legend(|(x, y)| Cross::new((x + 10, y), 5, FAILED.stroke_width(2)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_count_nodes_and_are_thinned() {
        assert_eq!(
            steps(vec![2.0, 1.0]),
            vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]
        );
        let many = steps((0..17_560).map(f64::from).collect());
        assert_eq!(marks([0.5, 0.5001, 0.9].into_iter(), 1.0), vec![0.5, 0.9]);
        assert!(many.len() <= 1002, "{}", many.len());
        assert_eq!(many.last(), Some(&(17_559.0, 17_560.0)));
    }
}

//! The simulator's plots (deployment time against job size, the TEES paper's Fig. 4, and
//! group-uplink load against `topo`'s, Fig. 5) and `teesfs lab bench`'s bars, drawn with
//! plotters.

use std::path::Path;

use peertree::Strategy;
use plotters::prelude::*;

use crate::bench::{BenchReport, Method};
use crate::error::{LabError, Result};
use crate::sweep::{Row, secs};
use bytesize::ByteSize;

const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// Strategies present in `rows`, in order of first appearance.
fn strategies(rows: &[&Row]) -> Vec<Strategy> {
    let mut out: Vec<Strategy> = Vec::new();
    for r in rows {
        if !out.contains(&r.strategy) {
            out.push(r.strategy);
        }
    }
    out
}

fn x_range(rows: &[&Row]) -> std::ops::Range<f64> {
    let lo = rows.iter().map(|r| r.nodes).min().unwrap_or(1) as f64;
    let hi = rows.iter().map(|r| r.nodes).max().unwrap_or(10) as f64;
    (lo / 1.5)..(hi * 1.5)
}

/// Plotters' errors carry the backend's error type: kept as text.
pub(crate) fn plot_err<E: std::fmt::Debug>(e: E) -> LabError {
    LabError::Plot(format!("{e:?}"))
}

/// Deployment time against job size per strategy, with the lower bound (Fig. 4).
pub fn plot_time(path: &Path, rows: &[&Row], payload: u64) -> Result<()> {
    let times: Vec<f64> = rows.iter().map(|r| secs(r.report.deploy)).collect();
    let bound = rows.first().map_or(1e-3, |r| secs(r.report.lower_bound));
    let lo = times.iter().copied().fold(bound, f64::min) / 1.5;
    let hi = times.iter().copied().fold(bound, f64::max) * 1.5;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Simulated deployment time, {} (cf. TEES Fig. 4)",
                ByteSize::b(payload)
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(rows).log_scale(), (lo..hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("job nodes")
        .y_desc("seconds until every node holds the payload")
        .draw()
        .map_err(plot_err)?;
    for (i, s) in strategies(rows).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.strategy == s)
            .map(|r| (r.nodes as f64, secs(r.report.deploy)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    let xr = x_range(rows);
    chart
        .draw_series(LineSeries::new(
            vec![(xr.start, bound), (xr.end, bound)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label("lower bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Bytes entering groups per strategy, as a multiple of `topo`'s (Fig. 5).
pub fn plot_uplink(path: &Path, rows: &[&Row], payload: u64) -> Result<()> {
    let norm = |r: &Row| {
        rows.iter()
            .find(|t| t.strategy == Strategy::Topo && t.nodes == r.nodes)
            .map(|t| r.report.uplink_in as f64 / t.report.uplink_in.max(1) as f64)
    };
    let hi = rows.iter().filter_map(|r| norm(r)).fold(1.0f64, f64::max) * 1.15;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Simulated group-uplink load ÷ topo, {} (cf. TEES Fig. 5)",
                ByteSize::b(payload)
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(rows).log_scale(), 0.0..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("job nodes")
        .y_desc("bytes into groups ÷ topo's")
        .draw()
        .map_err(plot_err)?;
    for (i, s) in strategies(rows).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.strategy == s)
            .filter_map(|r| norm(r).map(|v| (r.nodes as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(s.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// A method's label in the table and the plot.
pub fn label(m: Method) -> String {
    if m.is_teesfs() {
        format!("teesfs {}", m.name())
    } else {
        m.name().to_string()
    }
}

/// One bar chart panel: a bar per method (the median), a dot per repetition, and a dashed
/// reference line (`reference`, labelled `ref_label`).
#[allow(clippy::too_many_arguments)]
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    r: &BenchReport,
    median: &dyn Fn(&crate::bench::Summary) -> f64,
    each: &dyn Fn(&crate::bench::Run) -> f64,
    reference: f64,
    ref_label: &str,
) -> Result<()> {
    let n = r.summary.len();
    let top = r
        .runs
        .iter()
        .map(each)
        .chain(r.summary.iter().map(median))
        .chain([reference])
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.15;
    let names: Vec<String> = r.summary.iter().map(|s| label(s.method)).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(70)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0.0..top.max(1e-9))
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(
            ("sans-serif", 12)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc(y_desc)
        .draw()
        .map_err(plot_err)?;
    for (i, s) in r.summary.iter().enumerate() {
        let x = i as f64;
        let color = if s.method == Method::Topo {
            BLUE.mix(0.8)
        } else if s.method.is_teesfs() {
            BLUE.mix(0.35)
        } else {
            RED.mix(0.5)
        };
        let v = median(s);
        if v.is_finite() {
            chart
                .draw_series([Rectangle::new(
                    [(x - 0.35, 0.0), (x + 0.35, v)],
                    color.filled(),
                )])
                .map_err(plot_err)?;
        }
        let dots: Vec<(f64, f64)> = r
            .runs
            .iter()
            .filter(|run| run.method == s.method)
            .map(|run| (x, each(run)))
            .filter(|p| p.1.is_finite())
            .collect();
        chart
            .draw_series(dots.into_iter().map(|p| Circle::new(p, 3, BLACK.filled())))
            .map_err(plot_err)?;
    }
    chart
        .draw_series(DashedLineSeries::new(
            vec![(-0.5, reference), (n as f64 - 0.5, reference)],
            6,
            4,
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?
        .label(ref_label)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// The SVG: time until every node holds the payload, and bytes into the groups over their
/// uplinks, per method (bars: medians; dots: repetitions; dashed: link lower bound and
/// minimum traffic).
pub fn bench(path: &Path, r: &BenchReport) -> Result<()> {
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root
        .titled(
            &format!(
                "teesfs lab bench: {} groups x {}, {} per run, {} repetitions",
                r.groups,
                r.group_size,
                ByteSize::b(r.payload_bytes),
                r.reps
            ),
            ("sans-serif", 20),
        )
        .map_err(plot_err)?;
    // The model the figures were measured under, as a footer.
    let (root, foot) = root.split_vertically(500);
    foot.draw_text(
        &r.model_text,
        &("sans-serif", 14).into_text_style(&foot),
        (12, 8),
    )
    .map_err(plot_err)?;
    let panels = root.split_evenly((1, 2));
    const MIB: f64 = (1u64 << 20) as f64;
    bars(
        &panels[0],
        "time until every node holds the payload",
        "seconds",
        r,
        &|s| s.all_s,
        &|run| run.all_s,
        r.lower_bound_s,
        "link lower bound",
    )?;
    bars(
        &panels[1],
        "bytes into the groups over their uplinks",
        "MiB",
        r,
        &|s| s.uplink_in_bytes as f64 / MIB,
        &|run| run.uplink_in_bytes as f64 / MIB,
        r.min_uplink_bytes as f64 / MIB,
        "minimum (each group once)",
    )?;
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Run, Summary};

    #[test]
    fn plot_shows_every_method_and_the_references() {
        let methods = [Method::Topo, Method::Torrent, Method::Sbcast];
        let runs: Vec<Run> = methods
            .iter()
            .enumerate()
            .map(|(i, &method)| Run {
                method,
                rep: 0,
                all_s: 2.0 + i as f64,
                wall_s: 2.5 + i as f64,
                uplink_in_bytes: (64 + 100 * i as u64) << 20,
                root_out_bytes: 64 << 20,
                cpu_s: 1.0,
                throttled_s: None,
            })
            .collect();
        let summary = runs
            .iter()
            .map(|r| Summary {
                method: r.method,
                all_s: r.all_s,
                vs_topo: r.all_s / 2.0,
                vs_lower_bound: r.all_s / 1.34,
                uplink_in_bytes: r.uplink_in_bytes,
                uplink_vs_min: 1.0,
                uplink_vs_random: f64::NAN,
                cpu_s: r.cpu_s,
                throttled_per_node_s: None,
            })
            .collect();
        let rep = BenchReport {
            version: 1,
            groups: 4,
            group_size: 8,
            payload_bytes: 16 << 20,
            stored_bytes: 16 << 20,
            chunk_bytes: 1 << 20,
            reps: 1,
            lower_bound_s: 1.34,
            min_uplink_bytes: 64 << 20,
            runs,
            summary,
            model: None,
            model_text: crate::scale::POOLED_TEXT.into(),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("bench.svg");
        bench(&p, &rep).expect("plot");
        let svg = std::fs::read_to_string(&p).expect("svg");
        for l in [
            "teesfs topo",
            "bittorrent",
            "sbcast",
            "link lower bound",
            "minimum",
            "pooled: every node shares",
        ] {
            assert!(svg.contains(l), "plot lacks {l:?}");
        }
        // Two panels, a bar per method in each.
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
    }
}

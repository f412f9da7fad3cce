//! `teesfs lab bench`: the same payload deployed by each method on one lab, several
//! repetitions, with a table of ratios to teesfs-topo and to the link lower bound, the
//! figures as JSON and an SVG plot (time and uplink bytes per method).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use lab::bench::{BenchReport, Method};
use plotters::prelude::*;

use super::super::util;
use super::ShapeArgs;

/// Arguments of `teesfs lab bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Payload size per run (fresh incompressible content each run).
    #[arg(long, default_value = "16MiB", value_parser = util::parse_size)]
    payload: u64,
    /// Repetitions of every method.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Methods, comma-separated: topo, random, hostlist, flat, storage (teesfs plans),
    /// bittorrent (aria2c + mktorrent + the lab's tracker), sbcast (real Slurm in the lab).
    /// Default: all; a baseline whose programs are not installed is then skipped with a
    /// warning (named explicitly, it is an error).
    #[arg(long, value_delimiter = ',')]
    methods: Option<Vec<String>>,
    /// Write the figures as JSON (fields in docs/lab.md); the plot goes next to it
    /// (FILE with the extension .svg) unless --plot says otherwise.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the SVG plot (time until every node holds the payload, and uplink bytes,
    /// per method) here.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// Whether the programs of a baseline are installed (teesfs methods always are).
fn installed(m: Method) -> lab::Result<()> {
    match m {
        Method::Torrent => lab::torrent::available(),
        Method::Sbcast => lab::slurm::available(),
        _ => Ok(()),
    }
}

/// Runs the bench.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let mut methods = match &a.methods {
        Some(names) => {
            let ms = names
                .iter()
                .map(|m| {
                    Method::parse(m).ok_or_else(|| {
                        anyhow!(
                            "unknown method {m:?}: use topo, random, hostlist, flat, storage, \
                             bittorrent or sbcast"
                        )
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            for &m in &ms {
                installed(m).with_context(|| format!("method {}", m.name()))?;
            }
            ms
        }
        None => Method::ALL
            .into_iter()
            .filter(|&m| match installed(m) {
                Ok(()) => true,
                Err(e) => {
                    eprintln!("skipping {}: {e}", m.name());
                    false
                }
            })
            .collect(),
    };
    if !methods.contains(&Method::Topo) {
        methods.insert(0, Method::Topo);
    }
    let lab = a.shape.up()?;
    eprintln!(
        "bench: {} per run, {} repetitions of {} methods",
        util::bytes(a.payload),
        a.reps,
        methods.len()
    );
    let rep = lab::bench::run(&lab, &methods, a.reps, a.payload, |r| {
        eprintln!(
            "  {:<10} rep {}: all nodes {:6.2} s, uplinks {:>10}, cpu {:5.1} s",
            r.method.name(),
            r.rep,
            r.all_s,
            util::bytes(r.uplink_in_bytes),
            r.cpu_s
        );
    })?;
    lab.down()?;
    print_table(&rep);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_vec_pretty(&rep)?)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("figures in {}", p.display());
    }
    let plot = a
        .plot
        .clone()
        .or_else(|| a.json.as_ref().map(|j| j.with_extension("svg")));
    if let Some(p) = plot {
        plot_bench(&p, &rep)?;
        eprintln!("plot in {}", p.display());
    }
    Ok(())
}

/// A method's label in the table and the plot.
fn label(m: Method) -> String {
    if m.is_teesfs() {
        format!("teesfs {}", m.name())
    } else {
        m.name().to_string()
    }
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

/// One bar chart panel: a bar per method (the median), a dot per repetition, and a dashed
/// reference line (`reference`, labelled `ref_label`).
#[allow(clippy::too_many_arguments)]
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    r: &BenchReport,
    median: &dyn Fn(&lab::bench::Summary) -> f64,
    each: &dyn Fn(&lab::bench::Run) -> f64,
    reference: f64,
    ref_label: &str,
) -> anyhow::Result<()> {
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
fn plot_bench(path: &Path, r: &BenchReport) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root
        .titled(
            &format!(
                "teesfs lab bench: {} groups x {}, {} per run, {} repetitions",
                r.groups,
                r.group_size,
                util::bytes(r.payload_bytes),
                r.reps
            ),
            ("sans-serif", 20),
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

fn print_table(r: &BenchReport) {
    println!(
        "{} groups x {}, payload {} ({} stored), {} reps, medians; lower bound {:.2} s, minimum uplink {}",
        r.groups,
        r.group_size,
        util::bytes(r.payload_bytes),
        util::bytes(r.stored_bytes),
        r.reps,
        r.lower_bound_s,
        util::bytes(r.min_uplink_bytes)
    );
    println!(
        "{:<16} {:>8} {:>8} {:>9} {:>11} {:>8} {:>9} {:>7}",
        "method", "all (s)", "vs topo", "vs bound", "uplink in", "vs min", "vs random", "cpu (s)"
    );
    for s in &r.summary {
        println!(
            "{:<16} {:>8.2} {:>8.2} {:>9.2} {:>11} {:>8.2} {:>9.2} {:>7.1}",
            label(s.method),
            s.all_s,
            s.vs_topo,
            s.vs_lower_bound,
            util::bytes(s.uplink_in_bytes),
            s.uplink_vs_min,
            s.uplink_vs_random,
            s.cpu_s
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab::bench::{Run, Summary};

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
            })
            .collect();
        let rep = BenchReport {
            version: 1,
            groups: 4,
            group_size: 8,
            payload_bytes: 16 << 20,
            stored_bytes: 16 << 20,
            reps: 1,
            lower_bound_s: 1.34,
            min_uplink_bytes: 64 << 20,
            runs,
            summary,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("bench.svg");
        plot_bench(&p, &rep).expect("plot");
        let svg = std::fs::read_to_string(&p).expect("svg");
        for l in [
            "teesfs topo",
            "bittorrent",
            "sbcast",
            "link lower bound",
            "minimum",
        ] {
            assert!(svg.contains(l), "plot lacks {l:?}");
        }
        // Two panels, a bar per method in each.
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
    }
}

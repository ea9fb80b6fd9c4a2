//! PNG plots of an [`AppsReport`] with `plotters`' bitmap backend: `speedup.png` (speedup
//! over the sequential build against node count, one line per app, with the ideal line) and
//! `breakdown.png` (stacked bars of task / sync / data stall / messaging / protocol time per
//! app and node count, like seed 000 Figures 3–4). Text is drawn with a TrueType font loaded
//! at run time (DejaVu Sans from `fonts-dejavu-core`, or `$SQUALL_PLOT_FONT`). Owns drawing;
//! must not run or measure anything.
use super::error::AppsError;
use super::model::AppsReport;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where Debian's `fonts-dejavu-core` puts DejaVu Sans.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The family name the plots ask for.
pub const FAMILY: &str = "sans-serif";

/// Bar colours (colour-blind safe, Okabe–Ito); `squall report` draws with them too.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

/// Line colours: distinct enough for the 13 seed apps (Paul Tol's muted + vibrant sets).
const LINE_COLORS: [RGBColor; 14] = [
    RGBColor(51, 34, 136),
    RGBColor(136, 204, 238),
    RGBColor(68, 170, 153),
    RGBColor(17, 119, 51),
    RGBColor(153, 153, 51),
    RGBColor(221, 204, 119),
    RGBColor(204, 102, 119),
    RGBColor(136, 34, 85),
    RGBColor(170, 68, 153),
    RGBColor(0, 119, 187),
    RGBColor(238, 119, 51),
    RGBColor(204, 51, 17),
    RGBColor(238, 51, 119),
    RGBColor(0, 0, 0),
];

/// The font file: `$SQUALL_PLOT_FONT` or [`DEFAULT_FONT`].
pub fn font_path() -> PathBuf {
    std::env::var_os("SQUALL_PLOT_FONT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_FONT))
}

/// Load and register the font once per process (the bench plots and `squall report`).
pub fn ensure_font() -> Result<(), AppsError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    let path = font_path();
    let bytes = std::fs::read(&path).map_err(|source| AppsError::FontMissing {
        path: path.clone(),
        source,
    })?;
    let loaded = LOADED.get_or_init(|| {
        // plotters keeps fonts for the life of the process; this happens once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a usable TrueType font", path.display()))
    });
    loaded.clone().map_err(|why| AppsError::Plot {
        file: "plots".into(),
        why,
    })
}

fn plot_err(file: &Path, e: impl std::fmt::Display) -> AppsError {
    AppsError::Plot {
        file: file.display().to_string(),
        why: e.to_string(),
    }
}

/// Write speedup.png and breakdown.png into `dir`; returns their paths.
pub fn write_all(report: &AppsReport, dir: &Path) -> Result<Vec<PathBuf>, AppsError> {
    ensure_font()?;
    let speed = dir.join("speedup.png");
    speedup(report, &speed)?;
    let brk = dir.join("breakdown.png");
    breakdown(report, &brk)?;
    Ok(vec![speed, brk])
}

/// speedup.png: speedup over the sequential build against nodes, one line per app.
pub fn speedup(report: &AppsReport, path: &Path) -> Result<(), AppsError> {
    let apps = report.apps();
    let max_nodes = report
        .rows
        .iter()
        .map(|r| r.nodes)
        .max()
        .unwrap_or(1)
        .max(2);
    let ideal_max = (max_nodes * report.threads_per_node.max(1)) as f64;
    // Speedups of a software DSM span decades (0.01 .. N): a log axis keeps every app visible.
    let speedups: Vec<f64> = report
        .rows
        .iter()
        .filter_map(|r| r.speedup)
        .filter(|s| *s > 0.0)
        .collect();
    let lo = speedups.iter().copied().fold(1.0f64, f64::min) / 1.5;
    let hi = speedups.iter().copied().fold(ideal_max, f64::max) * 1.5;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Speedup over sequential ({} size, {}, {} thread(s)/node)",
                report.size, report.protocol, report.threads_per_node
            ),
            (FAMILY, 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.5f64..max_nodes as f64 + 0.5, (lo..hi).log_scale())
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("nodes")
        .y_desc("speedup (sequential time / Squall time, log)")
        .x_labels(max_nodes.min(16))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    let tpn = report.threads_per_node.max(1) as f64;
    let grey = RGBColor(150, 150, 150);
    chart
        .draw_series(LineSeries::new(
            [(1.0, tpn), (max_nodes as f64, ideal_max)],
            ShapeStyle::from(&grey).stroke_width(1),
        ))
        .map_err(|e| plot_err(path, e))?
        .label("ideal")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
    chart
        .draw_series(LineSeries::new(
            [(0.5, 1.0), (max_nodes as f64 + 0.5, 1.0)],
            ShapeStyle::from(&BLACK).stroke_width(1),
        ))
        .map_err(|e| plot_err(path, e))?;
    for (i, app) in apps.iter().enumerate() {
        let color = LINE_COLORS[i % LINE_COLORS.len()];
        let points: Vec<(f64, f64)> = report
            .rows
            .iter()
            .filter(|r| &r.app == app)
            .filter_map(|r| r.speedup.filter(|s| *s > 0.0).map(|s| (r.nodes as f64, s)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let style = ShapeStyle::from(&color).stroke_width(2);
        let marker = i % 3;
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(|e| plot_err(path, e))?
            .label(app.as_str())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(
                        [(-10, 0), (10, 0)],
                        ShapeStyle::from(&color).stroke_width(2),
                    )
                    + marker_at(marker, color)
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| EmptyElement::at(p) + marker_at(marker, color)),
            )
            .map_err(|e| plot_err(path, e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FAMILY, 15))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    root.present().map_err(|e| plot_err(path, e))
}

/// A point marker: circle, triangle or cross by `kind`, so lines that share a colour differ.
fn marker_at<DB: DrawingBackend>(
    kind: usize,
    color: RGBColor,
) -> DynElement<'static, DB, (i32, i32)> {
    let style = ShapeStyle::from(&color).filled();
    match kind {
        0 => Circle::new((0, 0), 4, style).into_dyn(),
        1 => TriangleMarker::new((0, 0), 6, style).into_dyn(),
        _ => Cross::new((0, 0), 5, ShapeStyle::from(&color).stroke_width(2)).into_dyn(),
    }
}

/// breakdown.png: one stacked bar per (app, nodes), each component a share of that run's
/// time summed over nodes.
pub fn breakdown(report: &AppsReport, path: &Path) -> Result<(), AppsError> {
    let bars: Vec<(String, usize, [f64; 5])> = report
        .rows
        .iter()
        .map(|r| {
            (
                r.app.clone(),
                r.nodes,
                r.stats
                    .as_ref()
                    .map(|s| s.breakdown.percent())
                    .unwrap_or([0.0; 5]),
            )
        })
        .collect();
    let names = ["task", "sync", "data stall", "messaging", "protocol"];
    let n = bars.len().max(1);
    let legend_w = 150u32;
    let width = (160 + 60 * n as u32 + legend_w).clamp(700, 3000);
    let root = BitMapBackend::new(path, (width, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let (left, right) = root.split_horizontally(width - legend_w);
    let mut chart = ChartBuilder::on(&left)
        .caption(
            format!(
                "Time breakdown ({} size, {}; summed over nodes)",
                report.size, report.protocol
            ),
            (FAMILY, 22),
        )
        .margin(15)
        .x_label_area_size(60)
        .y_label_area_size(55)
        // An integer range's end is a key point of its own: 0..n-1 gives n segments.
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..100f64)
        .map_err(|e| plot_err(path, e))?;
    let labels: Vec<String> = bars.iter().map(|(_, n, _)| format!("n={n}")).collect();
    let label_of = move |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
        SegmentValue::Exact(_) | SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .label_style((FAMILY, 14))
        .x_labels(n)
        .x_label_formatter(&label_of)
        .y_desc("% of time")
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    for (k, name) in names.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let rects: Vec<Rectangle<(SegmentValue<usize>, f64)>> = bars
            .iter()
            .enumerate()
            .map(|(i, (_, _, pct))| {
                let base: f64 = pct[..k].iter().sum();
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), base),
                        (SegmentValue::Exact(i + 1), base + pct[k]),
                    ],
                    color.filled(),
                );
                r.set_margin(0, 0, 6, 6);
                r
            })
            .collect();
        chart.draw_series(rects).map_err(|e| plot_err(path, e))?;
        // The legend sits in its own panel right of the plot, top to bottom in stack order
        // reversed (so it reads like the bars).
        let y = 70 + 28 * (names.len() - 1 - k) as i32;
        right
            .draw(&Rectangle::new([(10, y), (28, y + 18)], color.filled()))
            .map_err(|e| plot_err(path, e))?;
        right
            .draw(&Text::new(*name, (36, y + 2), (FAMILY, 15).into_font()))
            .map_err(|e| plot_err(path, e))?;
    }
    // App names under their group of bars.
    let mut first = 0;
    while first < bars.len() {
        let app = &bars[first].0;
        let last = (first..bars.len())
            .take_while(|&j| bars[j].0 == *app)
            .last()
            .unwrap_or(first);
        let (x0, y) = chart.backend_coord(&(SegmentValue::CenterOf(first), 0.0));
        let (x1, _) = chart.backend_coord(&(SegmentValue::CenterOf(last), 0.0));
        let style =
            TextStyle::from((FAMILY, 16).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(app.clone(), ((x0 + x1) / 2, y + 28), style))
            .map_err(|e| plot_err(path, e))?;
        first = last + 1;
    }
    if report.rows.iter().any(|r| r.stats.is_none()) {
        right
            .draw(&Text::new(
                "empty bar: no statistics",
                (10, 70 + 28 * names.len() as i32 + 10),
                (FAMILY, 12).into_font(),
            ))
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::apps::writers::tests::sample;

    #[test]
    fn draws_both_pngs() {
        if !font_path().is_file() {
            // The font is a documented requirement (apt-get install fonts-dejavu-core): fail
            // loudly rather than skip.
            panic!(
                "{} missing: apt-get install fonts-dejavu-core",
                font_path().display()
            );
        }
        let dir = std::env::temp_dir().join(format!("squall-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut one = sample();
        one.rows.truncate(1);
        for report in [sample(), one] {
            let files = write_all(&report, &dir).expect("plots");
            for f in files {
                let bytes = std::fs::read(&f).expect("png written");
                assert!(bytes.len() > 1000, "{} is tiny", f.display());
                assert_eq!(&bytes[1..4], b"PNG", "{} is not a PNG", f.display());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

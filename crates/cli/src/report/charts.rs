//! The report's three charts, drawn with `plotters`' SVG backend into strings the page
//! inlines: faults over time per node (a line per node), the page × node fault heat map of
//! the worst allocation (with its colour scale), and the time breakdown per node (stacked
//! bars: compute, data wait, synchronization, protocol — seed 000 Figures 3–4).
//!
//! Owns: drawing. Must not touch: the document (read through [`super::model`]). Text is laid
//! out with the font the bench plots register (`SQUALL_PLOT_FONT`, else DejaVu Sans); the
//! browser draws it.
use super::model::{Profile, Site};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// The family the SVG text asks for (and the registered font is called).
const FAMILY: &str = crate::bench::apps::plots::FAMILY;

/// Line and bar colours: the bench plots' Okabe–Ito palette (colour-blind safe).
use crate::bench::apps::plots::PALETTE;

/// Most heat-map columns drawn: wider allocations are binned (each column sums its pages).
pub const HEAT_COLUMNS: u64 = 256;

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// `n` (at least 1) equal segments for bars or rows: an integer range's end is a key point of
/// its own, so 0..n-1 gives n segments (one category: 0..1, the second segment left empty).
fn segments(
    n: usize,
) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordusize> {
    if n <= 1 {
        (0..1usize).into_segmented()
    } else {
        (0..n - 1).into_segmented()
    }
}

/// Draw into an SVG string of `size` with `draw` (which gets the white root area).
fn svg(
    what: &str,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<String, String> {
    crate::bench::apps::plots::ensure_font().map_err(|e| err(what, e))?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(what, e))?;
        draw(&root)?;
        root.present().map_err(|e| err(what, e))?;
    }
    Ok(out)
}

/// A chart that says why it has nothing to show.
fn empty(what: &str, size: (u32, u32), why: &str) -> Result<String, String> {
    svg(what, size, |root| {
        root.titled(what, (FAMILY, 20)).map_err(|e| err(what, e))?;
        root.draw(&Text::new(
            why.to_string(),
            (20, size.1 as i32 / 2),
            (FAMILY, 16).into_font().color(&RGBColor(90, 90, 90)),
        ))
        .map_err(|e| err(what, e))
    })
}

/// Faults per time bucket, one line per node.
pub fn faults_over_time(p: &Profile) -> Result<String, String> {
    const WHAT: &str = "Faults over time per node";
    let size = (1000, 340);
    if p.timeline.is_empty() {
        return empty(WHAT, size, "no timeline in this profile");
    }
    let nodes = p.node_count().max(1);
    let t_max = p
        .timeline
        .iter()
        .map(|t| t.t_s)
        .fold(p.elapsed_s, f64::max)
        .max(1e-3);
    let y_max = p
        .timeline
        .iter()
        .map(|t| t.faults)
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    svg(WHAT, size, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(WHAT, (FAMILY, 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)
            .map_err(|e| err(WHAT, e))?;
        chart
            .configure_mesh()
            .x_desc("time since start (s)")
            .y_desc("faults per interval")
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 14))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| err(WHAT, e))?;
        for n in 0..nodes {
            let pts = p.node_series(n);
            if pts.is_empty() {
                continue;
            }
            let color = PALETTE[n as usize % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    pts,
                    ShapeStyle::from(&color).stroke_width(2),
                ))
                .map_err(|e| err(WHAT, e))?
                .label(format!("node {n}"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FAMILY, 13))
            .draw()
            .map_err(|e| err(WHAT, e))
    })
}

/// White (no faults) through orange to dark red (the most), by `v` in 0..=1.
pub fn heat_color(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64, t: f64| (a + (b - a) * t).round() as u8;
    if v < 0.5 {
        let t = v * 2.0;
        RGBColor(255, lerp(255.0, 160.0, t), lerp(255.0, 40.0, t))
    } else {
        let t = (v - 0.5) * 2.0;
        RGBColor(
            lerp(255.0, 140.0, t),
            lerp(160.0, 0.0, t),
            lerp(40.0, 0.0, t),
        )
    }
}

/// The heat map's cells: `(column, node, faults)` with pages binned into at most
/// [`HEAT_COLUMNS`] columns, the pages per column, and the column count.
pub fn heat_cells(site: &Site) -> (Vec<(u64, u32, u64)>, u64, u64) {
    let pages = site
        .heat
        .iter()
        .map(|c| c[0] + 1)
        .max()
        .unwrap_or(0)
        .max(site.pages)
        .max(1);
    let per = pages.div_ceil(HEAT_COLUMNS);
    let cols = pages.div_ceil(per);
    let mut sums = std::collections::BTreeMap::<(u64, u32), u64>::new();
    for c in &site.heat {
        let node = u32::try_from(c[1]).unwrap_or(u32::MAX);
        *sums.entry((c[0] / per, node)).or_default() += c[2];
    }
    (
        sums.into_iter().map(|((col, n), f)| (col, n, f)).collect(),
        per,
        cols,
    )
}

/// The page × node fault heat map of the worst allocation, with a colour scale.
pub fn heat_map(p: &Profile) -> Result<String, String> {
    const WHAT: &str = "Faults per page and node";
    let size = (1000, 300);
    let Some(site) = p.heat_site() else {
        return empty(
            WHAT,
            size,
            "no allocation in this profile has per-page faults",
        );
    };
    let (cells, per, cols) = heat_cells(site);
    let nodes = cells
        .iter()
        .map(|c| c.1.saturating_add(1))
        .max()
        .unwrap_or(1)
        .max(p.node_count())
        .max(1);
    let max = cells.iter().map(|c| c.2).max().unwrap_or(1).max(1);
    let title = format!("{WHAT}: {}", site.site);
    let x_desc = if per == 1 {
        "page of the allocation".to_string()
    } else {
        format!("page of the allocation ({per} pages a column)")
    };
    svg(WHAT, size, |root| {
        let (left, right) = root.split_horizontally(size.0 - 110);
        let node_labels: Vec<String> = (0..nodes).map(|n| n.to_string()).collect();
        let mut chart = ChartBuilder::on(&left)
            .caption(&title, (FAMILY, 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..(cols * per) as f64, segments(nodes as usize))
            .map_err(|e| err(WHAT, e))?;
        let label_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => node_labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(x_desc.as_str())
            .y_desc("node")
            .y_labels(nodes as usize)
            .y_label_formatter(&label_of)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 14))
            .draw()
            .map_err(|e| err(WHAT, e))?;
        chart
            .draw_series(cells.iter().map(|&(col, n, f)| {
                let x0 = (col * per) as f64;
                let n = n as usize;
                Rectangle::new(
                    [
                        (x0, SegmentValue::Exact(n)),
                        (x0 + per as f64, SegmentValue::Exact(n + 1)),
                    ],
                    heat_color(f as f64 / max as f64).filled(),
                )
            }))
            .map_err(|e| err(WHAT, e))?;
        // The colour scale: 0 at the bottom, the most faults in one cell at the top.
        let mut scale = ChartBuilder::on(&right)
            .margin_top(40)
            .margin_bottom(52)
            .margin_right(10)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..1f64, 0f64..max as f64)
            .map_err(|e| err(WHAT, e))?;
        scale
            .configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_desc("faults")
            .y_labels(5)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 13))
            .draw()
            .map_err(|e| err(WHAT, e))?;
        let steps = 64;
        scale
            .draw_series((0..steps).map(|i| {
                let lo = max as f64 * i as f64 / steps as f64;
                // Each step overlaps the next a little: no hairline gaps between them.
                let hi = (max as f64 * (i as f64 + 1.5) / steps as f64).min(max as f64);
                Rectangle::new(
                    [(0.0, lo), (1.0, hi)],
                    heat_color((i as f64 + 0.5) / steps as f64).filled(),
                )
            }))
            .map_err(|e| err(WHAT, e))?;
        Ok(())
    })
}

/// Stacked bars of each node's time: compute, data wait, synchronization, protocol (and
/// messaging when the writer gives it).
pub fn breakdown(p: &Profile) -> Result<String, String> {
    const WHAT: &str = "Time breakdown per node";
    let size = (1000, 380);
    if p.breakdown.is_empty() {
        return empty(WHAT, size, "no time breakdown in this profile");
    }
    let mut rows = p.breakdown.clone();
    rows.sort_by_key(|r| r.node);
    let n = rows.len();
    let top = rows
        .iter()
        .map(|r| r.parts().iter().map(|x| x.1.max(0.0)).sum::<f64>())
        .fold(0f64, f64::max)
        .max(1e-6)
        * 1.08;
    let labels: Vec<String> = rows.iter().map(|r| format!("node {}", r.node)).collect();
    svg(WHAT, size, |root| {
        let (left, right) = root.split_horizontally(size.0 - 170);
        let mut chart = ChartBuilder::on(&left)
            .caption(WHAT, (FAMILY, 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(segments(n), 0f64..top)
            .map_err(|e| err(WHAT, e))?;
        let label_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&label_of)
            .y_desc("seconds")
            .label_style((FAMILY, 13))
            .axis_desc_style((FAMILY, 14))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| err(WHAT, e))?;
        let names = rows[0].parts().map(|x| x.0);
        // The schema's four parts always; messaging only when some node has it.
        let shown: Vec<usize> = (0..names.len())
            .filter(|&k| k < 4 || rows.iter().any(|r| r.parts()[k].1 > 0.0))
            .collect();
        for (row, &k) in shown.iter().enumerate() {
            let (name, color) = (names[k], PALETTE[k]);
            chart
                .draw_series(rows.iter().enumerate().map(|(i, r)| {
                    let parts = r.parts();
                    let lo: f64 = parts[..k].iter().map(|x| x.1.max(0.0)).sum();
                    let hi = lo + parts[k].1.max(0.0);
                    let mut bar = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), lo),
                            (SegmentValue::Exact(i + 1), hi),
                        ],
                        color.filled(),
                    );
                    bar.set_margin(0, 0, 18, 18);
                    bar
                }))
                .map_err(|e| err(WHAT, e))?;
            // The legend beside the chart.
            let y = 60 + 26 * row as i32;
            right
                .draw(&Rectangle::new([(10, y), (26, y + 16)], color.filled()))
                .map_err(|e| err(WHAT, e))?;
            right
                .draw(&Text::new(
                    name.to_string(),
                    (34, y + 2),
                    (FAMILY, 14).into_font(),
                ))
                .map_err(|e| err(WHAT, e))?;
        }
        Ok(())
    })
}

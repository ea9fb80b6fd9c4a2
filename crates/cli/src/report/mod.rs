//! `squall report FILE [-o OUT.html]`: render the profile JSON a `squall run --profile` job
//! wrote as one self-contained HTML page (inline SVG charts drawn with `plotters`, no script,
//! no network): faults over time per node, the page × node fault heat map of the worst
//! allocation, the time breakdown per node (seed 000 Figures 3–4 style), and the worst
//! sites, locks and barriers tables.
//!
//! Owns: the page (this file), the reader's model ([`model`]) and the charts ([`charts`]).
//! Must not touch: the profile's contents (read as written; the writer is the runtime's).
pub mod charts;
pub mod model;

use clap::Args;
use model::Profile;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Rows the sites, locks and barriers tables show.
pub const TOP: usize = 10;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The profile JSON (`squall run --profile[=FILE]`, default squall-profile.json).
    #[arg(default_value = "squall-profile.json")]
    pub file: PathBuf,
    /// Where the HTML goes (default: FILE with the extension .html).
    #[arg(short, long, value_name = "HTML")]
    pub output: Option<PathBuf>,
}

pub fn main(args: ReportArgs) -> i32 {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("squall report: {}: {e}", args.file.display());
            return 2;
        }
    };
    let profile: Profile = match serde_json::from_str(&text) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "squall report: {} is not a squall profile (squall run --profile writes one): {e}",
                args.file.display()
            );
            return 2;
        }
    };
    let out = args
        .output
        .unwrap_or_else(|| args.file.with_extension("html"));
    let (page, problems) = html(&profile, &args.file.display().to_string());
    for p in &problems {
        eprintln!("squall report: {p}");
    }
    match std::fs::write(&out, page) {
        Ok(()) => {
            println!("{}", out.display());
            0
        }
        Err(e) => {
            eprintln!("squall report: {}: {e}", out.display());
            1
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:72em;color:#222}\
    table{border-collapse:collapse;font-size:90%;margin-bottom:1em}\
    td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
    td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}\
    .d{color:#555;text-align:left;font-style:italic}.warn{color:#a00}\
    .f{color:#b3261e;font-weight:bold}.t{color:#1f5fa8;font-weight:bold}\
    svg{display:block;max-width:100%;height:auto}";

/// The whole page, and the problems met (a chart that could not be drawn is replaced by a
/// note on the page and named here).
pub fn html(p: &Profile, title: &str) -> (String, Vec<String>) {
    let mut h = String::new();
    let mut problems = Vec::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>squall profile: {t}</title>\
         <style>{STYLE}</style></head><body><h1>Squall sharing profile</h1>\
         <p><b>{prog}</b> on {n} nodes, {el:.3} s; {s} allocation sites and globals with \
         activity, {l} locks, {b} barriers (page {ps} B; {t}).</p>",
        t = esc(title),
        prog = esc(if p.program.is_empty() {
            "(program not named)"
        } else {
            &p.program
        }),
        n = p.node_count(),
        el = p.elapsed_s,
        s = p.sites.len(),
        l = p.locks.len(),
        b = p.barriers.len(),
        ps = p.page_size,
    );
    type Chart = fn(&Profile) -> Result<String, String>;
    let charts: [(&str, Chart); 3] = [
        ("Faults over time", charts::faults_over_time),
        (
            "Page × node heat map of the worst allocation",
            charts::heat_map,
        ),
        ("Time breakdown per node", charts::breakdown),
    ];
    for (name, draw) in charts {
        let _ = write!(h, "<h2>{name}</h2>");
        match draw(p) {
            Ok(svg) => h.push_str(&svg),
            Err(e) => {
                let _ = write!(h, "<p class=\"warn\">not drawn: {}</p>", esc(&e));
                problems.push(format!("{name}: not drawn: {e}"));
            }
        }
    }
    sites_table(&mut h, p);
    locks_table(&mut h, p);
    barriers_table(&mut h, p);
    h.push_str("</body></html>\n");
    (h, problems)
}

fn nodes_list(nodes: &[u32]) -> String {
    nodes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn sites_table(h: &mut String, p: &Profile) {
    let _ = write!(
        h,
        "<h2>Worst sites</h2><table><tr><th>site</th><th>kind</th><th>bytes</th><th>pages</th>\
         <th>read faults</th><th>write faults</th><th>fetches</th><th>invalidations</th>\
         <th>diffs</th><th>diff bytes</th><th>home migrations</th><th>false-shared pages</th>\
         <th>true-shared pages</th><th>sharing</th><th>nodes</th></tr>"
    );
    for s in p.sites.iter().take(TOP) {
        let class = match s.sharing.as_str() {
            "false" => " class=\"f\"",
            "true" => " class=\"t\"",
            _ => "",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td{class}>{}</td><td>{}</td></tr>",
            esc(&s.site),
            esc(&s.kind),
            s.bytes,
            s.pages,
            s.read_faults,
            s.write_faults,
            s.fetches,
            s.invalidations,
            s.diffs,
            s.diff_bytes,
            s.home_migrations,
            s.false_shared_pages,
            s.true_shared_pages,
            esc(&s.sharing),
            nodes_list(&s.nodes_involved),
        );
        if !s.diagnosis.is_empty() {
            let _ = write!(
                h,
                "<tr><td class=\"d\" colspan=\"15\">{}</td></tr>",
                esc(&s.diagnosis)
            );
        }
    }
    h.push_str("</table>");
}

fn locks_table(h: &mut String, p: &Profile) {
    h.push_str(
        "<h2>Locks by total wait</h2><table><tr><th>lock</th><th>address</th><th>acquires</th>\
         <th>remote acquires</th><th>transfers</th><th>total wait s</th><th>avg hold µs</th></tr>",
    );
    for l in p.locks_by_wait().into_iter().take(TOP) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.6}</td>\
             <td>{:.2}</td></tr>",
            esc(&l.name),
            esc(&l.addr),
            l.acquires,
            l.remote_acquires,
            l.transfers,
            l.wait_s,
            l.avg_hold_us
        );
    }
    h.push_str("</table>");
}

fn barriers_table(h: &mut String, p: &Profile) {
    h.push_str(
        "<h2>Barriers by total wait</h2><table><tr><th>barrier</th><th>address</th>\
         <th>episodes</th><th>total wait s</th></tr>",
    );
    for b in p.barriers_by_wait().into_iter().take(TOP) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.6}</td></tr>",
            esc(&b.name),
            esc(&b.addr),
            b.episodes,
            b.wait_s
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample profile the integration test renders too.
    const SAMPLE: &str = include_str!("../../tests/data/profile-sample.json");

    fn sample() -> Profile {
        serde_json::from_str(SAMPLE).expect("the sample follows the schema")
    }

    #[test]
    fn the_page_has_three_charts_and_every_table() {
        let p = sample();
        let (page, problems) = html(&p, "sample.json");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(page.matches("<svg").count(), 3, "three charts");
        // Sites worst first with their diagnoses; locks and barriers by wait.
        let fs = page.find("fs.c:41 (main)").expect("false sharing site");
        let ts = page.find("fs.c:52 (main)").expect("true sharing site");
        assert!(fs < ts, "written order kept");
        assert!(page.contains("false sharing between nodes 0 and 1 on 16 pages"));
        let hot = page.find("lock.c:10 (main)").expect("hot lock");
        let cold = page.find("lock.c:30 (worker)").expect("cold lock");
        assert!(hot < cold, "the longest wait first");
        assert!(page.contains("barrier.c:12 (main)"));
        // The heat map is the worst allocation's (not the global listed before it).
        assert!(page.contains("Faults per page and node: fs.c:41 (main)"));
        // Series: one line per node and the four stacked parts with their legend.
        assert!(page.contains("node 1") && page.contains("synchronization"));
        // Escaped.
        assert!(page.contains("a &lt;b&gt; &amp; c"));
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_default() {
        let p: Profile = serde_json::from_str(
            r#"{"version": 2, "nodes": 1, "future": {"x": 1},
                "sites": [{"site": "g", "kind": "global", "new_count": 3}]}"#,
        )
        .expect("tolerant reader");
        assert_eq!(p.sites[0].site, "g");
        let (page, problems) = html(&p, "partial.json");
        assert!(problems.is_empty(), "{problems:?}");
        // Each chart is still there, saying why it is empty.
        assert_eq!(page.matches("<svg").count(), 3);
        assert!(page.contains("no timeline in this profile"));
        assert!(page.contains("no allocation in this profile has per-page faults"));
        assert!(page.contains("no time breakdown in this profile"));
    }

    #[test]
    fn wide_allocations_are_binned_into_columns() {
        let mut p = sample();
        let site = &mut p.sites[1];
        site.pages = 10_000;
        site.heat = (0..10_000u64).map(|i| [i, i % 2, 1]).collect();
        let (cells, per, cols) = charts::heat_cells(site);
        assert_eq!(per, 40);
        assert_eq!(cols, 250);
        assert!(cols <= charts::HEAT_COLUMNS);
        // Every fault is kept: 20 pages of each node per column.
        assert_eq!(cells.iter().map(|c| c.2).sum::<u64>(), 10_000);
        assert!(cells.iter().all(|c| c.2 == 20));
        let svg = charts::heat_map(&p).expect("drawn");
        assert!(svg.contains("40 pages a column"));
    }

    #[test]
    fn one_node_draws_too() {
        let mut p = sample();
        p.nodes = 1;
        p.timeline.retain(|t| t.node == 0);
        p.breakdown.retain(|b| b.node == 0);
        for s in &mut p.sites {
            s.heat.retain(|c| c[1] == 0);
        }
        let (page, problems) = html(&p, "one.json");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(page.matches("<svg").count(), 3);
    }

    #[test]
    fn a_sparse_timeline_falls_to_zero_between_its_points() {
        let p: Profile = serde_json::from_str(
            r#"{"nodes": 2, "timeline": [
                {"node": 0, "t_s": 0.01, "faults": 5}, {"node": 1, "t_s": 0.02, "faults": 3},
                {"node": 0, "t_s": 0.05, "faults": 7}]}"#,
        )
        .expect("parse");
        // Buckets of 10 ms: node 0 has 0.01 and 0.05, zero at 0.02..0.04.
        let s = p.node_series(0);
        let t: Vec<f64> = s.iter().map(|x| (x.0 * 1000.0).round()).collect();
        let f: Vec<f64> = s.iter().map(|x| x.1).collect();
        assert_eq!(t, [10.0, 20.0, 40.0, 50.0]);
        assert_eq!(f, [5.0, 0.0, 0.0, 7.0]);
        // Node 1's first point comes after an empty first bucket.
        let s = p.node_series(1);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].1, s[1].1), (0.0, 3.0));
    }

    #[test]
    fn messaging_is_a_part_only_when_given() {
        let mut p = sample();
        let svg = charts::breakdown(&p).expect("drawn");
        assert!(svg.contains("protocol") && !svg.contains("messaging"));
        p.breakdown[1].messaging_s = 0.05;
        let svg = charts::breakdown(&p).expect("drawn");
        assert!(svg.contains("messaging"));
    }

    #[test]
    fn heat_colours_run_from_white_to_dark_red() {
        use plotters::style::RGBColor;
        assert_eq!(charts::heat_color(0.0), RGBColor(255, 255, 255));
        assert_eq!(charts::heat_color(1.0), RGBColor(140, 0, 0));
        assert_eq!(charts::heat_color(7.0), charts::heat_color(1.0));
    }
}

//! `squall report FILE`: render the sharing profile JSON a `squall run --profile` job wrote as
//! one self-contained HTML page (inline SVG, no script, no network): faults over time per
//! node, the page × node fault heat map of the worst allocation, the time breakdown per node
//! (seed 000 Figures 3–4 style), and the worst-sites, locks and barriers tables.
//!
//! Owns: the rendering. Must not touch: the profile's contents (read as written).

use clap::Args;
use squall::profile::report::{JobProfile, SyncReport};
use std::fmt::Write as _;
use std::path::PathBuf;

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
    let job: JobProfile = match serde_json::from_str(&text) {
        Ok(j) => j,
        Err(e) => {
            eprintln!(
                "squall report: {} is not a squall profile: {e}",
                args.file.display()
            );
            return 2;
        }
    };
    let out = args
        .output
        .unwrap_or_else(|| args.file.with_extension("html"));
    let title = args.file.display().to_string();
    match std::fs::write(&out, html(&job, &title)) {
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

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The whole page.
pub fn html(job: &JobProfile, title: &str) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>squall profile: {t}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:70em}}\
         table{{border-collapse:collapse;font-size:90%}}td,th{{border:1px solid #ccc;\
         padding:2px 6px;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
         .d{{color:#555;text-align:left}}</style></head><body>\
         <h1>Squall sharing profile</h1><p>{t}: {n} nodes, {s} allocation sites and globals \
         with activity.</p>",
        t = esc(title),
        n = job.nodes,
        s = job.sites.len()
    );
    h.push_str("<h2>Faults over time per node</h2>");
    h.push_str(&faults_svg(job));
    let _ = write!(h, "<h2>Page × node faults: {}</h2>", esc(&job.heat.site));
    h.push_str(&heat_svg(job));
    h.push_str("<h2>Time breakdown per node</h2>");
    h.push_str(&breakdown_svg(job));
    h.push_str(
        "<h2>Worst sites</h2><table><tr><th>site</th><th>pages</th><th>read faults</th>\
                <th>write faults</th><th>fetches</th><th>invalidations</th><th>diffs</th>\
                <th>diff bytes</th><th>migrations</th><th>bouncing</th><th>class</th></tr>",
    );
    for s in job.sites.iter().take(10) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\
             <tr><td class=\"d\" colspan=\"11\">{}</td></tr>",
            esc(&s.site),
            s.pages,
            s.read_faults,
            s.write_faults,
            s.fetches,
            s.invalidations,
            s.diffs,
            s.diff_bytes,
            s.home_migrations,
            s.bouncing_pages,
            esc(&s.class),
            esc(&s.diagnosis)
        );
    }
    h.push_str("</table>");
    sync_table(&mut h, "Locks by total wait", &job.locks);
    sync_table(&mut h, "Barriers by total wait", &job.barriers);
    h.push_str("</body></html>\n");
    h
}

fn sync_table(h: &mut String, title: &str, list: &[SyncReport]) {
    let _ = write!(
        h,
        "<h2>{title}</h2><table><tr><th>name</th><th>acquires</th><th>transfers</th>\
         <th>total wait ms</th><th>max wait ms</th><th>avg hold µs</th></tr>"
    );
    for l in list.iter().take(10) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.2}</td></tr>",
            esc(&l.name),
            l.acquires,
            l.transfers,
            l.total_wait_ms,
            l.max_wait_ms,
            l.avg_hold_us
        );
    }
    h.push_str("</table>");
}

/// Line plot: faults per bucket, one line per node (rebinned to at most 200 points).
fn faults_svg(job: &JobProfile) -> String {
    let (w, ht) = (720.0, 220.0);
    let len = job
        .faults_over_time
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(1);
    let per = len.div_ceil(200).max(1);
    let bins = len.div_ceil(per);
    let series: Vec<Vec<u32>> = job
        .faults_over_time
        .iter()
        .map(|s| {
            (0..bins)
                .map(|b| s.iter().skip(b * per).take(per).sum())
                .collect()
        })
        .collect();
    let max = series.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\">\
         <rect x=\"40\" y=\"10\" width=\"{}\" height=\"{ht}\" fill=\"none\" stroke=\"#999\"/>",
        ht + 40.0,
        w - 60.0
    );
    for (n, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let x = 40.0 + (w - 60.0) * i as f64 / (bins.max(2) - 1) as f64;
                let y = 10.0 + ht - ht * f64::from(*v) / max;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let c = COLORS[n % COLORS.len()];
        let _ = write!(
            o,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" fill=\"{c}\" font-size=\"12\">node {n}</text>",
            pts.join(" "),
            50 + 70 * n,
            ht + 35.0
        );
    }
    let _ = write!(
        o,
        "<text x=\"2\" y=\"20\" font-size=\"11\">{max}</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{} ms per point, {:.2} s</text></svg>",
        w - 20.0,
        ht + 22.0,
        per as u64 * job.bucket_ms,
        (len as u64 * job.bucket_ms) as f64 / 1000.0
    );
    o
}

/// Heat map: one column per page of the worst site, one row per node, darker = more faults.
fn heat_svg(job: &JobProfile) -> String {
    let pages = job.heat.pages.len().min(256);
    let nodes = job.heat.faults.len();
    let cw = (680.0 / pages.max(1) as f64).clamp(2.0, 24.0);
    let rh = 20.0;
    let max = job
        .heat
        .faults
        .iter()
        .flatten()
        .copied()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\">",
        60.0 + cw * pages as f64,
        30.0 + rh * nodes as f64
    );
    for (n, row) in job.heat.faults.iter().enumerate() {
        let y = 5.0 + rh * n as f64;
        let _ = write!(
            o,
            "<text x=\"0\" y=\"{:.0}\" font-size=\"12\">node {n}</text>",
            y + 14.0
        );
        for (p, v) in row.iter().take(pages).enumerate() {
            let a = f64::from(*v) / max;
            let _ = write!(
                o,
                "<rect x=\"{:.1}\" y=\"{y:.0}\" width=\"{cw:.1}\" height=\"{rh}\" \
                 fill=\"rgb(214,39,40)\" fill-opacity=\"{a:.3}\" stroke=\"#eee\">\
                 <title>page {p}: {v} faults</title></rect>",
                55.0 + cw * p as f64
            );
        }
    }
    let _ = write!(
        o,
        "<text x=\"55\" y=\"{:.0}\" font-size=\"11\">{pages} pages, darkest = {max} faults</text></svg>",
        20.0 + rh * nodes as f64
    );
    o
}

/// Stacked bars per node: task, sync, data stall, messaging, protocol (seconds).
fn breakdown_svg(job: &JobProfile) -> String {
    let parts = [
        "task",
        "synchronization",
        "data stall",
        "messaging",
        "protocol",
    ];
    let vals: Vec<[f64; 5]> = job
        .breakdown
        .iter()
        .map(|b| {
            [
                b.compute_s,
                b.sync_s,
                b.data_wait_s,
                b.messaging_s,
                b.protocol_s,
            ]
        })
        .collect();
    let max = vals
        .iter()
        .map(|v| v.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9);
    let (bw, ht) = (60.0, 200.0);
    let width = 80.0 + 90.0 * vals.len() as f64 + 160.0;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{:.0}\">",
        ht + 40.0
    );
    for (n, v) in vals.iter().enumerate() {
        let x = 60.0 + 90.0 * n as f64;
        let mut y = 10.0 + ht;
        for (i, s) in v.iter().enumerate() {
            let hgt = ht * s / max;
            y -= hgt;
            let _ = write!(
                o,
                "<rect x=\"{x:.0}\" y=\"{y:.1}\" width=\"{bw}\" height=\"{hgt:.1}\" fill=\"{}\">\
                 <title>node {n} {}: {s:.3} s</title></rect>",
                COLORS[i], parts[i]
            );
        }
        let _ = write!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"12\" text-anchor=\"middle\">node {n}</text>",
            x + bw / 2.0,
            ht + 28.0
        );
    }
    let lx = 70.0 + 90.0 * vals.len() as f64;
    for (i, p) in parts.iter().enumerate() {
        let y = 20.0 + 18.0 * i as f64;
        let _ = write!(
            o,
            "<rect x=\"{lx:.0}\" y=\"{y:.0}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{:.0}\" y=\"{:.0}\" font-size=\"12\">{p}</text>",
            COLORS[i],
            lx + 16.0,
            y + 11.0
        );
    }
    let _ = write!(
        o,
        "<text x=\"2\" y=\"20\" font-size=\"11\">{max:.2} s</text></svg>"
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use squall::profile::report::build;
    use squall::profile::{AllocRec, NodeProfile, SiteName, SyncRec};
    use squall_protocol::profile::PageCounts;

    fn site(file: &str, line: u32) -> SiteName {
        SiteName {
            file: Some(file.into()),
            line: Some(line),
            function: Some("main".into()),
            raw: String::new(),
        }
    }

    #[test]
    fn the_page_has_the_plots_and_both_sites() {
        let false_page = PageCounts {
            write_faults: 4,
            diffs: 3,
            diff_bytes: 300,
            false_sharing: 2,
            writers: 0b11,
            false_nodes: 0b11,
            ..PageCounts::default()
        };
        let true_page = PageCounts {
            write_faults: 2,
            diffs: 2,
            diff_bytes: 16,
            true_sharing: 1,
            writers: 0b11,
            true_nodes: 0b11,
            ..PageCounts::default()
        };
        let nodes: Vec<NodeProfile> = (0..2u16)
            .map(|n| NodeProfile {
                node: n,
                allocs: if n == 0 {
                    vec![
                        AllocRec {
                            addr: 0x10000,
                            len: 0x2000,
                            site: site("/src/prog.c", 10),
                        },
                        AllocRec {
                            addr: 0x20000,
                            len: 0x1000,
                            site: site("/src/prog.c", 11),
                        },
                    ]
                } else {
                    Vec::new()
                },
                pages: vec![
                    (0x10000, false_page.clone()),
                    (0x11000, false_page.clone()),
                    (0x20000, true_page.clone()),
                ],
                locks: vec![(
                    0x20008,
                    SyncRec {
                        acquires: 4,
                        wait_ns: 5_000_000,
                        ..SyncRec::default()
                    },
                )],
                faults_over_time: vec![1, 5, 2, 0, 7],
                ..NodeProfile::default()
            })
            .collect();
        let job = build(&nodes);
        assert_eq!(job.sites[0].class, "false sharing");
        assert_eq!(job.sites[0].false_sharing_pages, 2);
        let h = html(&job, "test.json");
        assert_eq!(h.matches("<svg").count(), 3, "three plots");
        assert!(h.contains("<polyline") && h.contains("<rect"));
        assert!(h.contains("src/prog.c:10 (main)"), "false sharing site");
        assert!(h.contains("src/prog.c:11 (main)"), "true sharing site");
        assert!(
            h.contains("src/prog.c:11 (main)+0x8"),
            "the lock by its allocation"
        );
        assert!(h.contains("true sharing between nodes 0 and 1"));
    }
}

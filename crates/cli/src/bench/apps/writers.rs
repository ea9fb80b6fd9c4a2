//! Writing an [`AppsReport`]: `apps.csv`, `apps.json`, `apps.md` and the text table on
//! stdout. Owns the formats; must not run or measure anything (plots are in `plots`).
use super::error::AppsError;
use super::model::{AppRow, AppsReport, StyleRow};
use crate::bench::report::Table;
use std::fmt::Write as _;
use std::path::Path;

/// Column names of apps.csv, in order.
pub const CSV_HEADER: &[&str] = &[
    "app",
    "nodes",
    "threads",
    "squall_time_s",
    "seq_time_s",
    "native_time_s",
    "ratio",
    "speedup",
    "native_ratio",
    "verified",
    "faults",
    "read_faults",
    "write_faults",
    "twins",
    "diffs",
    "page_fetches",
    "messages",
    "bytes",
    "lock_acquires",
    "barriers",
    "task_s",
    "sync_s",
    "data_stall_s",
    "messaging_s",
    "protocol_s",
    "unit_pages",
    "invalidations",
];

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x}")).unwrap_or_default()
}

fn secs(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.4}")).unwrap_or_else(|| "-".into())
}

fn times(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

/// A CSV field, quoted when it needs to be.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The statistics cells of a row, in [`CSV_HEADER`] order (empty without statistics).
fn stat_cells(r: &AppRow) -> Vec<String> {
    match &r.stats {
        Some(s) => {
            let b = &s.breakdown;
            vec![
                s.faults.to_string(),
                s.read_faults.to_string(),
                s.write_faults.to_string(),
                s.twins.to_string(),
                s.diffs.to_string(),
                s.page_fetches.to_string(),
                s.messages.to_string(),
                s.bytes.to_string(),
                s.lock_acquires.to_string(),
                s.barriers.to_string(),
                format!("{}", b.task_s),
                format!("{}", b.sync_s),
                format!("{}", b.data_stall_s),
                format!("{}", b.messaging_s),
                format!("{}", b.protocol_s),
            ]
        }
        None => vec![String::new(); 15],
    }
}

/// apps.csv: one line per row.
pub fn csv(report: &AppsReport) -> String {
    let mut out = CSV_HEADER.join(",");
    out.push('\n');
    for r in &report.rows {
        let mut cells = vec![
            field(&r.app),
            r.nodes.to_string(),
            r.threads.to_string(),
            opt(r.squall_time_s),
            opt(r.seq_time_s),
            opt(r.native_time_s),
            opt(r.ratio),
            opt(r.speedup),
            opt(r.native_ratio),
            r.verified.to_string(),
        ];
        cells.extend(stat_cells(r));
        cells.push(r.unit_pages.to_string());
        cells.push(
            r.stats
                .as_ref()
                .map_or(String::new(), |s| s.invalidations.to_string()),
        );
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// `1.2k`, `3.4M`: counts short enough for a table cell.
pub fn human(n: u64) -> String {
    let x = n as f64;
    if n < 10_000 {
        n.to_string()
    } else if x < 1e6 {
        format!("{:.1}k", x / 1e3)
    } else if x < 1e9 {
        format!("{:.1}M", x / 1e6)
    } else {
        format!("{:.1}G", x / 1e9)
    }
}

/// `1.5 MiB`-style byte counts.
pub fn human_bytes(n: u64) -> String {
    let x = n as f64;
    if n < 1024 {
        format!("{n} B")
    } else if x < 1024.0 * 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else if x < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", x / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", x / (1024.0 * 1024.0 * 1024.0))
    }
}

/// Header of the results table (Markdown and text share it).
const TABLE_HEADER: &[&str] = &[
    "app",
    "nodes",
    "threads",
    "time (s)",
    "speedup vs seq",
    "squall/native",
    "verified",
    "faults (r/w)",
    "twins",
    "diffs",
    "messages",
    "bytes",
    "lock acquires",
    "barriers",
    "task/sync/stall/msg/proto %",
];

fn table_cells(r: &AppRow) -> Vec<String> {
    let mut cells = vec![
        r.app.clone(),
        r.nodes.to_string(),
        r.threads.to_string(),
        secs(r.squall_time_s),
        times(r.speedup),
        times(r.native_ratio),
        if r.verified { "yes" } else { "NO" }.to_string(),
    ];
    match &r.stats {
        Some(s) => {
            let pct = s.breakdown.percent();
            cells.extend([
                format!(
                    "{} ({}/{})",
                    human(s.faults),
                    human(s.read_faults),
                    human(s.write_faults)
                ),
                human(s.twins),
                human(s.diffs),
                human(s.messages),
                human_bytes(s.bytes),
                human(s.lock_acquires),
                s.barriers.to_string(),
                pct.iter()
                    .map(|p| format!("{p:.0}"))
                    .collect::<Vec<_>>()
                    .join("/"),
            ]);
        }
        None => cells.extend(vec!["-".to_string(); 8]),
    }
    cells
}

/// A Markdown table.
fn md_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n", headers.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(headers.len()));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
    }
    s
}

/// The settings line shown above the tables.
pub fn settings(report: &AppsReport) -> String {
    format!(
        "size `{}`, protocol `{}`, transport `{}`, {} thread(s) per node, median of {} repetition(s)",
        report.size, report.protocol, report.transport, report.threads_per_node, report.reps
    )
}

/// Baselines pivoted: one line per app, columns seq and native at each thread count.
fn baseline_table(report: &AppsReport) -> String {
    let mut threads: Vec<usize> = report
        .baselines
        .iter()
        .filter(|b| b.mode == "native")
        .map(|b| b.threads)
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let mut apps: Vec<&str> = Vec::new();
    for b in &report.baselines {
        if !apps.contains(&b.app.as_str()) {
            apps.push(&b.app);
        }
    }
    let cell = |app: &str, mode: &str, t: usize| {
        report
            .baselines
            .iter()
            .find(|b| b.app == app && b.mode == mode && (mode == "seq" || b.threads == t))
            .map(|b| {
                let v = secs(b.time_s);
                if b.verified {
                    v
                } else {
                    format!("{v} NO")
                }
            })
            .unwrap_or_else(|| "-".into())
    };
    let mut headers = vec!["app".to_string(), "seq".to_string()];
    headers.extend(threads.iter().map(|t| format!("native t={t}")));
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|app| {
            let mut r = vec![app.to_string(), cell(app, "seq", 1)];
            r.extend(threads.iter().map(|&t| cell(app, "native", t)));
            r
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    md_table(&h, &rows)
}

/// The body shared by apps.md and docs/results.md: results table, baselines, problems.
pub fn markdown_body(report: &AppsReport, heading: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{heading} Squall runs\n");
    let _ = writeln!(s, "{}.\n", settings(report));
    let _ = writeln!(
        s,
        "`time` is the median parallel-phase time printed by the app; `speedup vs seq` is the \
         sequential build's time over it; `squall/native` is it over native pthreads with the \
         same thread count. Statistics are summed over nodes for the median repetition \
         (barriers: episodes); the breakdown is the share of task, synchronization, data \
         stall, messaging and protocol time (seed 000 Figures 3–4).\n"
    );
    let rows: Vec<Vec<String>> = report.rows.iter().map(table_cells).collect();
    s.push_str(&md_table(TABLE_HEADER, &rows));
    let _ = writeln!(
        s,
        "\n{heading} Baselines\n\nMedian parallel-phase seconds of the sequential build and of \
         native pthreads per thread count (`NO`: a repetition was not verified).\n"
    );
    s.push_str(&baseline_table(report));
    if !report.styles.is_empty() {
        let _ = writeln!(
            s,
            "\n{heading} Sharing styles\n\nThe same apps written against CRL regions (`crl`) and \
             Split-C global pointers (`splitc`), SPMD programs with one process per node, beside \
             the page-based build (`pages`, {} thread(s) per node). `vs pages` is the style's \
             time over the page-based time on the same nodes; messages and bytes are every \
             node's, of every model, in the timed phase.\n",
            report.threads_per_node
        );
        s.push_str(&md_table(STYLE_HEADER, &style_rows(report)));
        for r in report.styles.iter().filter(|r| !r.problems.is_empty()) {
            for p in &r.problems {
                let _ = writeln!(s, "- {} {} on {} node(s): {}", r.app, r.style, r.nodes, p);
            }
        }
    }
    let failed: Vec<&AppRow> = report
        .rows
        .iter()
        .filter(|r| !r.problems.is_empty())
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\n{heading} Problems\n");
        for r in failed {
            for p in &r.problems {
                let _ = writeln!(s, "- {} on {} node(s): {}", r.app, r.nodes, p);
            }
        }
    }
    s
}

/// apps.md: the report as a Markdown document.
pub fn markdown(report: &AppsReport, plots: bool) -> String {
    let mut s = String::from("# squall bench apps\n\n");
    if !report.command.is_empty() {
        let _ = writeln!(s, "Produced by `{}`.\n", report.command);
    }
    s.push_str(&markdown_body(report, "##"));
    if plots {
        s.push_str("\n## Plots\n\n![speedup](speedup.png)\n\n![breakdown](breakdown.png)\n");
    }
    s
}

/// The text table printed on stdout.
pub fn text_table(report: &AppsReport) -> Table {
    let mut t = Table::new(
        format!("apps: {}", settings(report).replace('`', "")),
        TABLE_HEADER,
    );
    for r in &report.rows {
        t.row(table_cells(r));
    }
    t
}

/// Header of the sharing-styles table.
const STYLE_HEADER: &[&str] = &[
    "app",
    "nodes",
    "style",
    "time (s)",
    "vs pages",
    "speedup vs seq",
    "verified",
    "messages",
    "bytes",
];

/// The styles table's rows: per app and node count the page-based row, then each style.
fn style_rows(report: &AppsReport) -> Vec<Vec<String>> {
    let stat = |st: &Option<super::stats::StatsSummary>| match st {
        Some(s) => [human(s.messages), human_bytes(s.bytes)],
        None => ["-".to_string(), "-".to_string()],
    };
    let mut out = Vec::new();
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in &report.styles {
        if !keys.contains(&(r.app.clone(), r.nodes)) {
            keys.push((r.app.clone(), r.nodes));
        }
    }
    for (app, nodes) in keys {
        if let Some(p) = report
            .rows
            .iter()
            .find(|r| r.app == app && r.nodes == nodes)
        {
            let mut c = vec![
                app.clone(),
                nodes.to_string(),
                "pages".to_string(),
                secs(p.squall_time_s),
                "1.00".to_string(),
                times(p.speedup),
                if p.verified { "yes" } else { "NO" }.to_string(),
            ];
            c.extend(stat(&p.stats));
            out.push(c);
        }
        for r in report
            .styles
            .iter()
            .filter(|r| r.app == app && r.nodes == nodes)
        {
            out.push(style_cells(r, &stat(&r.stats)));
        }
    }
    out
}

fn style_cells(r: &StyleRow, stat: &[String; 2]) -> Vec<String> {
    let mut c = vec![
        r.app.clone(),
        r.nodes.to_string(),
        r.style.clone(),
        secs(r.time_s),
        times(r.pages_ratio),
        times(r.speedup),
        if r.verified { "yes" } else { "NO" }.to_string(),
    ];
    c.extend(stat.iter().cloned());
    c
}

/// The sharing-styles table printed on stdout (None when no other style ran).
pub fn style_table(report: &AppsReport) -> Option<Table> {
    if report.styles.is_empty() {
        return None;
    }
    let mut t = Table::new(
        format!(
            "apps by sharing style: time and messages per style ({})",
            settings(report).replace('`', "")
        ),
        STYLE_HEADER,
    );
    for r in style_rows(report) {
        t.row(r);
    }
    Some(t)
}

/// apps_styles.csv: one line per style row.
pub fn styles_csv(report: &AppsReport) -> String {
    let mut out = String::from(
        "app,style,nodes,time_s,pages_time_s,pages_ratio,seq_time_s,speedup,verified,messages,bytes\n",
    );
    for r in &report.styles {
        let (m, b) = r
            .stats
            .as_ref()
            .map(|s| (s.messages.to_string(), s.bytes.to_string()))
            .unwrap_or_default();
        let cells = [
            field(&r.app),
            field(&r.style),
            r.nodes.to_string(),
            opt(r.time_s),
            opt(r.pages_time_s),
            opt(r.pages_ratio),
            opt(r.seq_time_s),
            opt(r.speedup),
            r.verified.to_string(),
            m,
            b,
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The unit sweep printed on stdout (`--unit`): per app, node count and unit, the time and
/// what the unit changes (fetches, invalidations, messages, bytes).
pub fn unit_table(report: &AppsReport) -> Table {
    let mut t = Table::new(
        "apps: coherence unit sweep".to_string(),
        &[
            "app",
            "nodes",
            "unit pages",
            "time s",
            "fetches",
            "invalidations",
            "messages",
            "bytes",
            "verified",
        ],
    );
    for r in &report.rows {
        let s = r.stats.as_ref();
        let cell = |f: fn(&crate::bench::apps::stats::StatsSummary) -> u64| {
            s.map_or("-".to_string(), |s| human(f(s)))
        };
        t.row(vec![
            r.app.clone(),
            r.nodes.to_string(),
            r.unit_pages.to_string(),
            secs(r.squall_time_s),
            cell(|s| s.page_fetches),
            cell(|s| s.invalidations),
            cell(|s| s.messages),
            s.map_or("-".to_string(), |s| human_bytes(s.bytes)),
            r.verified.to_string(),
        ]);
    }
    t
}

/// Write `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<(), AppsError> {
    std::fs::write(path, text).map_err(|e| AppsError::io("write", path, e))
}

/// Write apps.csv, apps.json and apps.md into `dir`.
pub fn write_all(report: &AppsReport, dir: &Path, plots: bool) -> Result<(), AppsError> {
    write(&dir.join("apps.csv"), &csv(report))?;
    let json = serde_json::to_string_pretty(report).map_err(|e| AppsError::BadJson {
        path: dir.join("apps.json"),
        why: e.to_string(),
    })?;
    write(&dir.join("apps.json"), &(json + "\n"))?;
    if !report.styles.is_empty() {
        write(&dir.join("apps_styles.csv"), &styles_csv(report))?;
    }
    write(&dir.join("apps.md"), &markdown(report, plots))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::apps::model::Baseline;
    use crate::bench::apps::stats::{Breakdown, StatsSummary};

    pub(crate) fn sample() -> AppsReport {
        let row = |app: &str, nodes: usize, t: f64, stats: bool| AppRow {
            app: app.into(),
            nodes,
            threads: nodes,
            unit_pages: 1,
            squall_time_s: Some(t),
            seq_time_s: Some(1.0),
            native_time_s: Some(0.5),
            ratio: Some(t),
            speedup: Some(1.0 / t),
            native_ratio: Some(t / 0.5),
            verified: true,
            squall_times_s: vec![t],
            problems: vec![],
            stats: stats.then_some(StatsSummary {
                faults: 12_345,
                read_faults: 12_000,
                write_faults: 345,
                twins: 3,
                diffs: 3,
                page_fetches: 100,
                invalidations: 40,
                messages: 2_000_000,
                bytes: 3 << 20,
                lock_acquires: 0,
                barriers: 20,
                breakdown: Breakdown {
                    task_s: 0.7,
                    sync_s: 0.2,
                    data_stall_s: 0.1,
                    messaging_s: 0.0,
                    protocol_s: 0.0,
                },
            }),
        };
        AppsReport {
            styles: vec![],
            bench: "apps".into(),
            size: "tiny".into(),
            protocol: "hlrc".into(),
            transport: "tcp".into(),
            threads_per_node: 1,
            reps: 1,
            command: "squall bench apps --size tiny".into(),
            machine: None,
            rows: vec![
                row("sor", 1, 1.1, true),
                row("sor", 2, 0.6, true),
                row("clu", 1, 1.2, false),
                row("clu", 2, 0.8, true),
            ],
            baselines: vec![Baseline {
                app: "sor".into(),
                mode: "seq".into(),
                threads: 1,
                time_s: Some(1.0),
                times_s: vec![1.0],
                verified: true,
            }],
        }
    }

    #[test]
    fn csv_has_a_line_per_row_and_full_width() {
        let text = csv(&sample());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        for l in &lines {
            assert_eq!(l.split(',').count(), CSV_HEADER.len(), "{l}");
        }
        assert!(lines[1].starts_with("sor,1,1,1.1,1,0.5,"));
        assert!(lines[1].contains(",12345,12000,345,3,3,100,2000000,3145728,0,20,0.7,"));
        // No statistics: empty cells, then the unit and no invalidation count.
        assert!(
            lines[3].ends_with(",true,,,,,,,,,,,,,,,,1,"),
            "{}",
            lines[3]
        );
        assert!(lines[1].ends_with(",1,40"), "{}", lines[1]);
        assert_eq!(field("a,b"), "\"a,b\"");
    }

    #[test]
    fn unit_table_shows_time_fetches_and_invalidations_per_unit() {
        let mut r = sample();
        r.rows[1].unit_pages = 4;
        let t = unit_table(&r).render();
        assert!(t.contains("unit pages"), "{t}");
        assert!(t.contains(" 4 "), "{t}");
        assert!(t.contains("100") && t.contains("40"), "{t}");
    }

    #[test]
    fn markdown_and_text_tables_show_every_row() {
        let r = sample();
        let md = markdown(&r, true);
        assert!(md.contains("| app | nodes | threads | time (s) |"));
        assert!(md.contains("| sor | 2 | 2 | 0.6000 | 1.67 | 1.20 | yes | 12.3k (12.0k/345) | 3 | 3 | 2.0M | 3.0 MiB | 0 | 20 | 70/20/10/0/0 |"), "{md}");
        assert!(md.contains("![speedup](speedup.png)"));
        assert!(!markdown(&r, false).contains("png"));
        assert!(md.contains("Produced by `squall bench apps --size tiny`."));
        assert!(
            md.contains("| app | seq |\n|---|---|\n| sor | 1.0000 |\n"),
            "{md}"
        );
        let mut failed = sample();
        failed.rows[1].verified = false;
        failed.rows[1].problems = vec!["rep 1: node 1 was killed by signal SIGSEGV".into()];
        let md = markdown(&failed, false);
        assert!(
            md.contains("| sor | 2 | 2 | 0.6000 | 1.67 | 1.20 | NO |"),
            "{md}"
        );
        assert!(
            md.contains(
                "## Problems\n\n- sor on 2 node(s): rep 1: node 1 was killed by signal SIGSEGV\n"
            ),
            "{md}"
        );
        let text = text_table(&r).render();
        assert_eq!(text.lines().count(), 2 + r.rows.len());
        assert_eq!(human(999), "999");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}

//! `squall bench apps`: the application benchmark. For each seed app (apps/bin, built by
//! `make -C apps`) it runs the sequential build, native pthreads at every thread count the
//! Squall runs use, and the Squall build on each node count with statistics on; repeats the
//! whole round `--reps` times (the kinds alternate), takes medians, and writes apps.csv,
//! apps.json, apps.md and PNG plots into `--out` (and, asked to, docs/results.md). Owns the
//! driver: planning runs, progress and turning outcomes into a report; the parts are in
//! [`runner`] (processes), [`result_line`] (the RESULT line), [`stats`] (runtime statistics),
//! [`model`] (medians and ratios), [`writers`] (CSV/JSON/Markdown), [`plots`] (PNGs) and
//! [`results_doc`]. Must not build anything or touch protocol internals.
pub mod error;
pub mod model;
pub mod plots;
pub mod result_line;
pub mod results_doc;
pub mod runner;
pub mod stats;
pub mod writers;

use super::report::emit_json;
use clap::Args;
use error::AppsError;
use model::{AppRow, AppsReport, Baseline, Reps, StyleRow};
use runner::{absolute, BinDir, Mode, RunSpec};
use stats::StatsSummary;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct AppsArgs {
    /// Apps to run, comma-separated (e.g. sor,clu), or `all`: every app with a `_seq` binary.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub apps: Vec<String>,
    /// Squall node counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub nodes: Vec<usize>,
    /// Application threads per node (a run on N nodes uses N × this many threads; native
    /// pthreads runs use the same totals).
    #[arg(long, default_value_t = 1)]
    pub threads_per_node: usize,
    /// Sharing styles, comma-separated: `pages` (the pthreads build on page-based shared
    /// memory), `crl` (`<app>_crl`: CRL regions), `splitc` (`<app>_splitc`: Split-C global
    /// pointers). The non-page styles are SPMD programs, one process per node; apps without
    /// a version in a style are skipped for it.
    #[arg(long, value_delimiter = ',', default_value = "pages", value_parser = ["pages", "crl", "splitc"])]
    pub style: Vec<String>,
    /// Problem size passed to every app (`-s`).
    #[arg(long, default_value = "small", value_parser = ["tiny", "small", "medium", "large"])]
    pub size: String,
    /// Repetitions of every run; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Coherence protocol of the Squall runs (`SQUALL_PROTOCOL`); `hlrc+updates` is hlrc with
    /// push updates (`SQUALL_PUSH_UPDATES=1`: writes reach the readers' copies at releases
    /// instead of invalidating them — Em3d's update variant, seed 001 §4).
    #[arg(long, default_value = "hlrc", value_parser = ["hlrc", "sc", "hlrc+updates"])]
    pub protocol: String,
    /// Coherence units of the Squall runs, in pages (`SQUALL_UNIT_PAGES`, hlrc): every node
    /// count is run at each; a sweep (`--unit 1,4,16`) also prints time, fetches and
    /// invalidations per unit.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub unit: Vec<u32>,
    /// Transport of the Squall runs.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "udp"])]
    pub transport: String,
    /// Output folder for apps.csv, apps.json, apps.md, the plots and stats/.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// End stdout with apps.json's object on one line.
    #[arg(long)]
    pub json: bool,
    /// Skip speedup.png and breakdown.png.
    #[arg(long)]
    pub no_plots: bool,
    /// Folder holding <app>_seq, <app>_native and <app>_squall (default: $SQUALL_APPS_BIN,
    /// else apps/bin).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Seconds after which one run is killed (and counted as failed).
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Also write this Markdown results document with a machine description (default path
    /// docs/results.md).
    #[arg(long, num_args = 0..=1, default_missing_value = "docs/results.md")]
    pub results_md: Option<PathBuf>,
    /// Run nothing: regenerate the outputs (and --results-md) from this apps.json.
    #[arg(long)]
    pub from_json: Option<PathBuf>,
}

pub fn main(a: AppsArgs) -> Result<(), String> {
    run(a).map_err(|e| e.to_string())
}

/// Identifies the repetitions of one configuration: app, mode, nodes, threads, unit pages.
type Key = (String, Mode, usize, usize, u32);

/// One planned run.
struct Planned {
    key: Key,
    rep: usize,
    spec: RunSpec,
}

fn run(a: AppsArgs) -> Result<(), AppsError> {
    if a.reps == 0 || a.threads_per_node == 0 || a.nodes.is_empty() || a.nodes.contains(&0) {
        return Err(AppsError::Usage(
            "--reps, --threads-per-node and every --nodes value must be at least 1".into(),
        ));
    }
    if let Some(u) = a
        .unit
        .iter()
        .find(|u| !u.is_power_of_two() || **u > squall_protocol::MAX_UNIT_PAGES)
    {
        return Err(AppsError::Usage(format!(
            "--unit {u}: every unit is a power of two from 1 to {} pages",
            squall_protocol::MAX_UNIT_PAGES
        )));
    }
    if a.unit.iter().any(|&u| u > 1) && a.protocol != "hlrc" {
        // (units of several pages are refused with push updates too)
        return Err(AppsError::Usage(
            "--unit above 1 needs --protocol hlrc (units of several pages are kept by hlrc)".into(),
        ));
    }
    std::fs::create_dir_all(&a.out).map_err(|e| AppsError::io("create", &a.out, e))?;
    let (report, measured) = match &a.from_json {
        Some(p) => (load(p)?, false),
        None => (measure(&a)?, true),
    };
    writers::write_all(&report, &a.out, !a.no_plots)?;
    if let Some(doc) = &a.results_md {
        write_results_doc(&report, doc, &a.out, !a.no_plots)?;
    }
    writers::text_table(&report).print();
    if let Some(t) = writers::style_table(&report) {
        t.print();
    }
    if report.rows.iter().any(|r| r.unit_pages != 1) {
        writers::unit_table(&report).print();
    }
    eprintln!(
        "squall bench apps: wrote {}",
        a.out.join("apps.{csv,json,md}").display()
    );
    if a.json {
        emit_json(&serde_json::to_value(&report).unwrap_or_default());
    }
    // Plots last: a missing font must not cost the tables and the JSON.
    if !a.no_plots {
        plots::write_all(&report, &a.out)?;
    }
    if measured && !report.all_verified() {
        let bad: Vec<String> = report
            .rows
            .iter()
            .filter(|r| !r.verified)
            .map(|r| format!("{} on {} node(s)", r.app, r.nodes))
            .chain(
                report
                    .baselines
                    .iter()
                    .filter(|b| !b.verified)
                    .map(|b| format!("{} {} -t {}", b.app, b.mode, b.threads)),
            )
            .chain(
                report
                    .styles
                    .iter()
                    .filter(|s| !s.verified)
                    .map(|s| format!("{} {} on {} node(s)", s.app, s.style, s.nodes)),
            )
            .collect();
        return Err(AppsError::NotVerified {
            what: bad.join(", "),
            report: a.out.join("apps.md"),
        });
    }
    Ok(())
}

/// Read an apps.json written earlier.
fn load(path: &Path) -> Result<AppsReport, AppsError> {
    let text = std::fs::read_to_string(path).map_err(|e| AppsError::io("read", path, e))?;
    let report: AppsReport = serde_json::from_str(&text).map_err(|e| AppsError::BadJson {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    if report.bench != "apps" {
        return Err(AppsError::BadJson {
            path: path.to_path_buf(),
            why: format!("bench is {:?}, not \"apps\"", report.bench),
        });
    }
    Ok(report)
}

/// The values in the given order, each once.
fn dedup<T: PartialEq + Clone>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

/// Every run, in order: per app and per rep, the sequential run, the native runs per thread
/// count, then the Squall runs per node count (per style: `styled` lists the apps that have
/// each non-page style's binary). The kinds alternate rep by rep, so a machine that
/// drifts (a noisy neighbour, a VM slowing down) weighs on every kind alike instead of on
/// whichever ran during the slow minutes.
fn plan(
    a: &AppsArgs,
    apps: &[String],
    styled: &[(String, Mode)],
    stats_dir: &Path,
) -> Vec<Planned> {
    let nodes = dedup(&a.nodes);
    let tpn = a.threads_per_node;
    // Native at every thread count a Squall run uses, and always at one node's worth.
    let mut thread_counts = dedup(
        &std::iter::once(tpn)
            .chain(nodes.iter().map(|n| n * tpn))
            .collect::<Vec<_>>(),
    );
    thread_counts.sort_unstable();
    let mut out = Vec::new();
    let timeout = Duration::from_secs(a.timeout);
    let units = dedup(&a.unit);
    let spec = |app: &str, mode: Mode, nodes: usize, threads: usize, unit, stats_file| RunSpec {
        app: app.to_string(),
        mode,
        nodes,
        threads,
        unit_pages: unit,
        size: a.size.clone(),
        transport: a.transport.clone(),
        protocol: a.protocol.clone(),
        stats_file,
        timeout,
    };
    for app in apps {
        for rep in 1..=a.reps {
            let mut push = |mode: Mode, n: usize, t: usize, u: u32| {
                let stats_file = mode.on_squall().then(|| {
                    let tag = match mode {
                        Mode::Squall => a.protocol.clone(),
                        m => m.name().to_string(),
                    };
                    let unit = if u == 1 {
                        String::new()
                    } else {
                        format!("-u{u}")
                    };
                    stats_dir.join(format!("{app}-{tag}{unit}-n{n}-t{t}-rep{rep}.json"))
                });
                out.push(Planned {
                    key: (app.clone(), mode, n, t, u),
                    rep,
                    spec: spec(app, mode, n, t, u, stats_file),
                });
            };
            push(Mode::Seq, 1, 1, 1);
            for &t in &thread_counts {
                push(Mode::Native, 1, t, 1);
            }
            let pages = a.style.iter().any(|s| s == "pages");
            for &n in &nodes {
                if pages {
                    for &u in &units {
                        push(Mode::Squall, n, n * tpn, u);
                    }
                }
                for (_, m) in styled.iter().filter(|(x, _)| x == app) {
                    push(*m, n, n, 1);
                }
            }
        }
    }
    out
}

/// Run every planned run and reduce them to a report.
fn measure(a: &AppsArgs) -> Result<AppsReport, AppsError> {
    let bins = BinDir::locate(a.bin_dir.clone());
    let apps = if a.apps.iter().any(|x| x == "all") {
        bins.discover()?
    } else {
        let names: Vec<String> = a
            .apps
            .iter()
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect();
        dedup(&names)
    };
    if apps.is_empty() {
        return Err(AppsError::Usage("--apps is empty".into()));
    }
    let pages = a.style.iter().any(|s| s == "pages");
    let mut must = vec![Mode::Seq, Mode::Native];
    if pages {
        must.push(Mode::Squall);
    }
    bins.check(&apps, &must)?;
    let styled = styled_apps(a, &bins, &apps)?;
    let stats_dir = absolute(&a.out.join("stats"));
    std::fs::create_dir_all(&stats_dir).map_err(|e| AppsError::io("create", &stats_dir, e))?;
    let planned = plan(a, &apps, &styled, &stats_dir);
    let total = planned.len();
    let mut results: BTreeMap<Key, Reps> = BTreeMap::new();
    for (i, p) in planned.iter().enumerate() {
        let (app, mode, n, t, u) = &p.key;
        let what = match mode {
            Mode::Seq => format!("{app} seq"),
            Mode::Native => format!("{app} native t={t}"),
            Mode::Squall if *u == 1 => format!("{app} squall n={n} t={t}"),
            Mode::Squall => format!("{app} squall n={n} t={t} unit={u}"),
            m => format!("{app} {} n={n}", m.name()),
        };
        progress(&format!(
            "[{}/{total}] {what} rep {}/{} ... ",
            i + 1,
            p.rep,
            a.reps
        ));
        let outcome = p.spec.run(&bins)?;
        match (&outcome.problem, outcome.time_s()) {
            (None, Some(s)) => eprintln!("{s:.4} s"),
            (problem, _) => {
                eprintln!("FAILED: {}", problem.as_deref().unwrap_or("unknown"));
                for l in &outcome.stderr_tail {
                    eprintln!("    {l}");
                }
            }
        }
        let reps = results.entry(p.key.clone()).or_default();
        reps.push(
            outcome.time_s(),
            outcome.verified(),
            outcome
                .problem
                .as_ref()
                .map(|x| format!("rep {}: {x}", p.rep)),
        );
        if let (Some(file), Some(time)) = (&p.spec.stats_file, outcome.time_s()) {
            match StatsSummary::read(file) {
                Ok(s) => reps.stats.push((time, s)),
                Err(e) => eprintln!("    no statistics: {e}"),
            }
        }
    }
    Ok(report_from(a, &apps, &results))
}

/// Every (app, mode) of a non-page style asked for whose binary exists; the others are skipped
/// with a note. A style no app has is an error naming the make command.
fn styled_apps(
    a: &AppsArgs,
    bins: &BinDir,
    apps: &[String],
) -> Result<Vec<(String, Mode)>, AppsError> {
    let mut out = Vec::new();
    for style in dedup(&a.style) {
        let mode = match Mode::of_style(&style) {
            Some(Mode::Squall) | None => continue,
            Some(m) => m,
        };
        let have: Vec<&String> = apps
            .iter()
            .filter(|app| bins.binary(app, mode).is_file())
            .collect();
        if have.is_empty() {
            return bins.check(&apps[..1], &[mode]).map(|_| Vec::new());
        }
        let missing: Vec<&str> = apps
            .iter()
            .filter(|x| !have.contains(x))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "squall bench apps: no {style} version of {} (no {}); skipped in that style",
                missing.join(", "),
                bins.binary(missing[0], mode).display()
            );
        }
        out.extend(have.into_iter().map(|app| (app.clone(), mode)));
    }
    Ok(out)
}

fn progress(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Turn the repetitions into rows and baselines.
fn report_from(a: &AppsArgs, apps: &[String], results: &BTreeMap<Key, Reps>) -> AppsReport {
    let empty = Reps::new();
    let get = |app: &str, mode: Mode, n: usize, t: usize, u: u32| {
        results
            .get(&(app.to_string(), mode, n, t, u))
            .unwrap_or(&empty)
    };
    let mut baselines = Vec::new();
    for ((app, mode, _, t, _), reps) in results {
        if !mode.on_squall() {
            baselines.push(Baseline::from_reps(app, mode.name(), *t, reps));
        }
    }
    // Baselines in the order of the apps given.
    baselines.sort_by_key(|b| {
        (
            apps.iter().position(|x| *x == b.app).unwrap_or(usize::MAX),
            b.mode != "seq",
            b.threads,
        )
    });
    let mut rows = Vec::new();
    let mut styles = Vec::new();
    let pages = a.style.iter().any(|s| s == "pages");
    for app in apps {
        let seq = get(app, Mode::Seq, 1, 1, 1).median();
        let units = dedup(&a.unit);
        for n in dedup(&a.nodes) {
            let t = n * a.threads_per_node;
            let native = get(app, Mode::Native, 1, t, 1).median();
            if pages {
                for &u in &units {
                    let mut row =
                        AppRow::build(app, n, t, get(app, Mode::Squall, n, t, u), seq, native);
                    row.unit_pages = u;
                    rows.push(row);
                }
            }
            // The styles compare with the page-based run at the first unit asked for.
            let paged = get(app, Mode::Squall, n, t, units.first().copied().unwrap_or(1));
            for mode in [Mode::Crl, Mode::Splitc] {
                if let (Some(reps), Some(style)) =
                    (results.get(&(app.to_string(), mode, n, n, 1)), mode.style())
                {
                    styles.push(StyleRow::build(app, style, n, reps, paged.median(), seq));
                }
            }
        }
    }
    AppsReport {
        bench: "apps".into(),
        size: a.size.clone(),
        protocol: a.protocol.clone(),
        transport: a.transport.clone(),
        threads_per_node: a.threads_per_node,
        reps: a.reps,
        command: std::iter::once("squall".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        machine: Some(results_doc::Machine::this()),
        rows,
        baselines,
        styles,
    }
}

/// `target` relative to folder `base` (both made absolute first), e.g. `../results`.
fn relative(target: &Path, base: &Path) -> PathBuf {
    let norm = |p: &Path| -> Vec<String> {
        let mut parts: Vec<String> = Vec::new();
        for c in absolute(p).components() {
            match c {
                Component::ParentDir => {
                    parts.pop();
                }
                Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
                _ => {}
            }
        }
        parts
    };
    let (t, b) = (norm(target), norm(base));
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for part in &t[common..] {
        out.push(part);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

fn write_results_doc(
    report: &AppsReport,
    doc: &Path,
    out: &Path,
    plots: bool,
) -> Result<(), AppsError> {
    let parent = doc
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| AppsError::io("create", parent, e))?;
    let plots_dir = plots.then(|| relative(out, parent));
    let command = if report.command.is_empty() {
        "squall bench apps".to_string()
    } else {
        report.command.clone()
    };
    let machine = report
        .machine
        .clone()
        .unwrap_or_else(results_doc::Machine::this);
    let text = results_doc::render(report, &machine, &command, plots_dir.as_deref());
    writers::write(doc, &text)?;
    eprintln!("squall bench apps: wrote {}", doc.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: AppsArgs,
    }

    fn args(extra: &[&str]) -> AppsArgs {
        Cli::try_parse_from(std::iter::once("apps").chain(extra.iter().copied()))
            .expect("parses")
            .a
    }

    #[test]
    fn plan_covers_seq_native_per_thread_count_and_squall_per_node_count() {
        let a = args(&[
            "--apps",
            "sor,clu",
            "--nodes",
            "1,2,4,2",
            "--reps",
            "2",
            "--threads-per-node",
            "2",
        ]);
        let p = plan(&a, &["sor".into(), "clu".into()], &[], Path::new("/s"));
        let sor: Vec<&Planned> = p.iter().filter(|x| x.key.0 == "sor").collect();
        // seq 2 + native {2,4,8} x 2 + squall {1,2,4} x 2
        assert_eq!(sor.len(), 2 + 6 + 6);
        assert_eq!(p.len(), 28);
        let native: Vec<usize> = sor
            .iter()
            .filter(|x| x.key.1 == Mode::Native && x.rep == 1)
            .map(|x| x.key.3)
            .collect();
        assert_eq!(native, [2, 4, 8]);
        let sq: Vec<(usize, usize)> = sor
            .iter()
            .filter(|x| x.key.1 == Mode::Squall && x.rep == 2)
            .map(|x| (x.key.2, x.key.3))
            .collect();
        assert_eq!(sq, [(1, 2), (2, 4), (4, 8)]);
        // The kinds alternate: every run of rep 1 comes before any run of rep 2.
        let reps: Vec<usize> = sor.iter().map(|x| x.rep).collect();
        assert_eq!(reps, [[1; 7], [2; 7]].concat());
        assert_eq!(sor[0].key.1, Mode::Seq);
        assert_eq!(sor[7].key.1, Mode::Seq);
        let f = sor
            .iter()
            .find(|x| x.key.1 == Mode::Squall)
            .and_then(|x| x.spec.stats_file.clone())
            .expect("stats file");
        assert_eq!(f, PathBuf::from("/s/sor-hlrc-n1-t2-rep1.json"));
        assert!(sor
            .iter()
            .all(|x| x.key.1 == Mode::Squall || x.spec.stats_file.is_none()));
    }

    #[test]
    fn styles_run_one_process_per_node_beside_pages() {
        let a = args(&[
            "--apps",
            "mm",
            "--nodes",
            "2,4",
            "--reps",
            "1",
            "--style",
            "pages,crl,splitc",
        ]);
        let styled = [
            ("mm".to_string(), Mode::Crl),
            ("mm".to_string(), Mode::Splitc),
        ];
        let p = plan(&a, &["mm".into()], &styled, Path::new("/s"));
        let runs: Vec<(Mode, usize, usize)> = p
            .iter()
            .filter(|x| x.key.1.on_squall())
            .map(|x| (x.key.1, x.key.2, x.key.3))
            .collect();
        assert_eq!(
            runs,
            [
                (Mode::Squall, 2, 2),
                (Mode::Crl, 2, 2),
                (Mode::Splitc, 2, 2),
                (Mode::Squall, 4, 4),
                (Mode::Crl, 4, 4),
                (Mode::Splitc, 4, 4)
            ]
        );
        let crl = p.iter().find(|x| x.key.1 == Mode::Crl).expect("crl run");
        assert_eq!(crl.spec.args(), ["-s", "small"]);
        assert_eq!(
            crl.spec.stats_file,
            Some(PathBuf::from("/s/mm-crl-n2-t2-rep1.json"))
        );
        // Only the styles asked for: no page-based runs without `pages`.
        let a = args(&["--apps", "mm", "--nodes", "2", "--style", "crl"]);
        let p = plan(&a, &["mm".into()], &styled[..1], Path::new("/s"));
        assert!(p.iter().all(|x| x.key.1 != Mode::Squall));
        assert_eq!(p.iter().filter(|x| x.key.1 == Mode::Crl).count(), 3);

        let mut results = BTreeMap::new();
        let reps = |t: f64| {
            let mut r = Reps::new();
            r.push(Some(t), true, None);
            r
        };
        results.insert(("mm".to_string(), Mode::Seq, 1, 1, 1), reps(1.0));
        results.insert(("mm".to_string(), Mode::Squall, 2, 2, 1), reps(2.0));
        results.insert(("mm".to_string(), Mode::Crl, 2, 2, 1), reps(1.0));
        let a = args(&["--apps", "mm", "--nodes", "2", "--style", "pages,crl"]);
        let r = report_from(&a, &["mm".into()], &results);
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.styles.len(), 1);
        assert_eq!(r.styles[0].style, "crl");
        assert_eq!(r.styles[0].pages_ratio, Some(0.5));
        assert_eq!(r.styles[0].speedup, Some(1.0));
        assert!(r.all_verified());
        let table = writers::style_table(&r).expect("a styles table").render();
        assert!(table.contains("pages") && table.contains("crl"), "{table}");
    }

    #[test]
    fn report_rows_pair_squall_with_same_thread_native() {
        let a = args(&["--apps", "sor", "--nodes", "1,2", "--reps", "1"]);
        let mut results = BTreeMap::new();
        let reps = |t: f64| {
            let mut r = Reps::new();
            r.push(Some(t), true, None);
            r
        };
        results.insert(("sor".to_string(), Mode::Seq, 1, 1, 1), reps(2.0));
        results.insert(("sor".to_string(), Mode::Native, 1, 1, 1), reps(2.0));
        results.insert(("sor".to_string(), Mode::Native, 1, 2, 1), reps(1.0));
        results.insert(("sor".to_string(), Mode::Squall, 1, 1, 1), reps(2.5));
        results.insert(("sor".to_string(), Mode::Squall, 2, 2, 1), reps(4.0));
        let r = report_from(&a, &["sor".into()], &results);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows[1].native_time_s, Some(1.0));
        assert_eq!(r.rows[1].native_ratio, Some(4.0));
        assert_eq!(r.rows[1].speedup, Some(0.5));
        assert_eq!(r.baselines.len(), 3);
        assert_eq!(r.baselines[0].mode, "seq");
        assert!(r.all_verified());
    }

    #[test]
    fn unit_sweep_runs_squall_per_unit_and_names_its_stats() {
        let a = args(&[
            "--apps", "mm", "--nodes", "2", "--reps", "1", "--unit", "1,4,16",
        ]);
        let p = plan(&a, &["mm".into()], &[], Path::new("/s"));
        let sq: Vec<(usize, u32)> = p
            .iter()
            .filter(|x| x.key.1 == Mode::Squall)
            .map(|x| (x.key.2, x.key.4))
            .collect();
        assert_eq!(sq, [(2, 1), (2, 4), (2, 16)]);
        let files: Vec<PathBuf> = p.iter().filter_map(|x| x.spec.stats_file.clone()).collect();
        assert_eq!(files[1], PathBuf::from("/s/mm-hlrc-u4-n2-t2-rep1.json"));
        let env = p[p.len() - 1]
            .spec
            .job(&BinDir(PathBuf::from("/b")))
            .extra_env;
        assert!(env.contains(&("SQUALL_UNIT_PAGES".to_string(), "16".to_string())));
        let e = run(args(&["--unit", "3"])).expect_err("unit 3");
        assert!(e.to_string().contains("--unit"));
        let e = run(args(&["--unit", "4", "--protocol", "sc"])).expect_err("sc units");
        assert!(e.to_string().contains("hlrc"));
    }

    #[test]
    fn relative_paths_for_the_results_document() {
        assert_eq!(
            relative(Path::new("results"), Path::new("docs")),
            PathBuf::from("../results")
        );
        assert_eq!(
            relative(Path::new("/a/b/c"), Path::new("/a")),
            PathBuf::from("b/c")
        );
        assert_eq!(
            relative(Path::new("/a"), Path::new("/a")),
            PathBuf::from(".")
        );
    }

    #[test]
    fn bad_counts_are_usage_errors() {
        let e = run(args(&["--reps", "0"])).expect_err("zero reps");
        assert!(e.to_string().contains("--reps"));
        let e = run(args(&["--nodes", "0"])).expect_err("zero nodes");
        assert!(e.to_string().contains("--nodes"));
    }
}

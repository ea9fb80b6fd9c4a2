//! `squall bench omp`: what OpenMP's team operations cost on Squall beside the system's libgomp
//! with the same thread count, and two OpenMP kernels where computation dominates. The program
//! (crates/capi/c-tests/openmp/bench.c, compiled into this binary) is built twice with `gcc
//! -fopenmp`: plainly (libgomp) and with `pkg-config squall-openmp`. For each node count N it
//! runs both builds with N × `--threads-per-node` threads, `--reps` times, alternating which goes
//! first; the region/barrier/chunk rows pool the per-operation times (thread 0's) of every run
//! and give p50 and p99, the kernel rows the median and p99 of the runs' times, each with the
//! ratio Squall / libgomp. Every run must report the operations it counted equal to those
//! expected (threadprivate counters, a barrier check, the kernels' answers against a sequential
//! computation), and every Squall `ops` run's statistics must show at least one barrier episode
//! per timed barrier. Owns this driver; must not touch the runtime.
use super::apps::stats::StatsSummary;
use super::cprog::{pkg_config, run_tagged, JobError};
use super::report::{emit_json, median, round, Table};
use clap::Args;
use serde_json::{json, Value};
use squall_launch::JobSpec;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The benchmark program's source (built at run time by gcc, twice).
const SOURCE: &str = include_str!("../../../capi/c-tests/openmp/bench.c");
/// The tag of the program's result lines.
const TAG: &str = "@omp ";

#[derive(Args, Debug)]
pub struct OmpArgs {
    /// Squall node counts (each beside libgomp with the same thread count).
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    pub nodes: Vec<usize>,
    /// OpenMP threads per node (libgomp gets nodes × this many).
    #[arg(long, default_value_t = 1)]
    pub threads_per_node: usize,
    /// Timed operations per run (regions, barrier episodes, chunks per thread).
    #[arg(long, default_value_t = 200)]
    pub ops: usize,
    /// Runs of every program per node count (alternating Squall and libgomp).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Kernels to run beside the operations: stencil, matmul, or `none`.
    #[arg(long, value_delimiter = ',', default_value = "stencil,matmul")]
    pub apps: Vec<String>,
    /// Stencil grid side.
    #[arg(long, default_value_t = 1024)]
    pub stencil_n: usize,
    /// Stencil sweeps.
    #[arg(long, default_value_t = 40)]
    pub stencil_iters: usize,
    /// Matrix side of the multiply (rounded up to a multiple of 32).
    #[arg(long, default_value_t = 512)]
    pub matmul_n: usize,
    /// Squall's install prefix (crates/capi/install.sh PREFIX); default: wherever pkg-config
    /// finds squall-openmp.
    #[arg(long)]
    pub prefix: Option<PathBuf>,
    /// Transport of the Squall runs.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "udp"])]
    pub transport: String,
    /// Seconds after which one run is killed (and the bench fails).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// End stdout with the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One run's result lines, by operation, in the order printed.
#[derive(Debug, Default)]
struct RunLines(Vec<(String, Value)>);

impl RunLines {
    fn get(&self, op: &str) -> Option<&Value> {
        self.0.iter().find(|(o, _)| o == op).map(|(_, v)| v)
    }

    fn ops(&self) -> Vec<String> {
        self.0.iter().map(|(o, _)| o.clone()).collect()
    }
}

pub fn main(a: OmpArgs) -> Result<(), String> {
    for app in &a.apps {
        if !matches!(app.as_str(), "stencil" | "matmul" | "none") {
            return Err(format!(
                "--apps: unknown kernel {app:?} (give stencil, matmul or none)"
            ));
        }
    }
    let dir = std::env::temp_dir().join(format!("squall-bench-omp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = run(&a, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run(a: &OmpArgs, dir: &Path) -> Result<(), String> {
    let (native, squall) = build(dir, a.prefix.as_deref())?;
    let mut workloads: Vec<(&str, Vec<String>)> = vec![("ops", vec![a.ops.to_string()])];
    for app in &a.apps {
        match app.as_str() {
            "stencil" => workloads.push((
                "stencil",
                vec![a.stencil_n.to_string(), a.stencil_iters.to_string()],
            )),
            "matmul" => workloads.push(("matmul", vec![a.matmul_n.to_string()])),
            _ => {}
        }
    }
    let timeout = Duration::from_secs(a.timeout);
    let mut rows = Vec::new();
    let mut table = Table::new(
        format!(
            "squall bench omp: Squall ({}) vs native libgomp (OMP_WAIT_POLICY {}), same thread count; {} runs each, alternating",
            a.transport,
            wait_policy(),
            a.reps
        ),
        &[
            "nodes", "threads", "operation", "unit", "squall p50", "squall p99", "libgomp p50",
            "libgomp p99", "ratio", "checked",
        ],
    );
    for &nodes in &a.nodes {
        let threads = nodes * a.threads_per_node;
        for (what, extra) in &workloads {
            let mut args = vec![what.to_string()];
            args.extend(extra.iter().cloned());
            let mut runs: [Vec<RunLines>; 2] = [Vec::new(), Vec::new()];
            let mut stats = Vec::new();
            for rep in 0..a.reps {
                for is_squall in [rep % 2 == 0, rep % 2 == 1] {
                    if is_squall {
                        let stats_file = dir.join(format!("stats-{nodes}-{what}-{rep}.json"));
                        let lines = run_squall(
                            &squall,
                            &args,
                            nodes,
                            threads,
                            &a.transport,
                            &stats_file,
                            timeout,
                        )?;
                        let s = read_stats(&stats_file)?;
                        check_stats(what, a.ops, &s)?;
                        stats.push(s);
                        runs[0].push(lines);
                    } else {
                        runs[1].push(run_native(&native, &args, threads, timeout)?);
                    }
                }
            }
            let ops: Vec<String> = runs[0].first().map(RunLines::ops).unwrap_or_default();
            for op in ops {
                let row = summarize(&op, nodes, threads, &runs, &stats)?;
                table.row(vec![
                    nodes.to_string(),
                    threads.to_string(),
                    op.clone(),
                    row["unit"].as_str().unwrap_or("").to_string(),
                    format!("{}", row["squall_p50"]),
                    format!("{}", row["squall_p99"]),
                    format!("{}", row["native_p50"]),
                    format!("{}", row["native_p99"]),
                    format!("{}", row["ratio"]),
                    format!("{}", row["count"]),
                ]);
                rows.push(row);
            }
        }
    }
    table.print();
    if a.json {
        emit_json(&json!({
            "bench": "omp",
            "transport": a.transport,
            "threads_per_node": a.threads_per_node,
            "reps": a.reps,
            "native_wait_policy": wait_policy(),
            "rows": rows,
        }));
    }
    Ok(())
}

/// `OMP_WAIT_POLICY` as the libgomp runs see it (they inherit this environment).
fn wait_policy() -> String {
    std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "default".into())
}

/// Build the program against libgomp and against Squall; returns (native, squall).
fn build(dir: &Path, prefix: Option<&Path>) -> Result<(PathBuf, PathBuf), String> {
    let src = dir.join("bench.c");
    std::fs::write(&src, SOURCE).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let flags = pkg_config("squall-openmp", prefix)?;
    let native = dir.join("bench_native");
    let squall = dir.join("bench_squall");
    for (exe, extra) in [(&native, &[][..]), (&squall, &flags[..])] {
        let out = Command::new("gcc")
            .args(["-O2", "-fopenmp", "-o"])
            .arg(exe)
            .arg(&src)
            .args(extra)
            .output()
            .map_err(|e| format!("cannot run gcc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "gcc -fopenmp {} {} failed:\n{}",
                src.display(),
                extra.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok((native, squall))
}

/// The "@omp" lines of one run, by operation; fails on a line that is not JSON or says the
/// operations were not all seen.
fn parse_lines(text: &str, who: &str) -> Result<RunLines, String> {
    let mut lines = RunLines::default();
    for line in text.lines() {
        let Some(body) = line.strip_prefix(TAG) else {
            continue;
        };
        let v: Value = serde_json::from_str(body)
            .map_err(|e| format!("{who} printed a bad result line ({e}): {line}"))?;
        let op = v["op"].as_str().unwrap_or("").to_string();
        if v["ok"] != 1 || v["count"] != v["expect"] || op.is_empty() {
            return Err(format!(
                "{who}: {op} not verified: count {} of {} expected, ok {}",
                v["count"], v["expect"], v["ok"]
            ));
        }
        lines.0.push((op, v));
    }
    if lines.0.is_empty() {
        return Err(format!("{who} printed no result line"));
    }
    Ok(lines)
}

fn run_native(
    exe: &Path,
    args: &[String],
    threads: usize,
    timeout: Duration,
) -> Result<RunLines, String> {
    let who = format!("libgomp {} ({threads} threads)", args.join(" "));
    let mut child = Command::new(exe)
        .args(args)
        .env("OMP_NUM_THREADS", threads.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{who} timed out after {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{who}: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{who}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{who} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_lines(&String::from_utf8_lossy(&out.stdout), &who)
}

fn run_squall(
    exe: &Path,
    args: &[String],
    nodes: usize,
    threads: usize,
    transport: &str,
    stats_file: &Path,
    timeout: Duration,
) -> Result<RunLines, String> {
    let who = format!(
        "squall {} ({nodes} nodes, {threads} threads)",
        args.join(" ")
    );
    let _ = std::fs::remove_file(stats_file);
    let mut spec = JobSpec::local(nodes, exe.to_string_lossy().into_owned(), args.to_vec());
    spec.transport = transport.to_string();
    spec.timeout = Some(timeout);
    spec.stats = true;
    spec.extra_env = vec![
        ("OMP_NUM_THREADS".into(), threads.to_string()),
        (
            squall_core::env::STATS_FILE.into(),
            stats_file.to_string_lossy().into_owned(),
        ),
    ];
    let text = run_tagged(&spec, TAG, &who).map_err(|e| match e {
        JobError::Launch(e) => e,
        JobError::Failed { why, tail } => {
            let mut err = std::io::stderr().lock();
            for l in &tail {
                let _ = writeln!(err, "{l}");
            }
            why
        }
    })?;
    parse_lines(&text, &who)
}

/// The Squall statistics of one run: the reduced summary and the atomic operations.
#[derive(Debug, Clone, Copy)]
struct RunStats {
    barriers: u64,
    atomics: u64,
    messages: u64,
}

fn read_stats(path: &Path) -> Result<RunStats, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "the Squall run wrote no statistics ({}): {e}",
            path.display()
        )
    })?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("bad statistics file {}: {e}", path.display()))?;
    let s = StatsSummary::from_doc(&doc)?;
    let atomics = doc
        .pointer("/total/counts/protocol/atomics")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok(RunStats {
        barriers: s.barriers,
        atomics,
        messages: s.messages,
    })
}

/// The `ops` runs time `ops` barrier episodes: Squall must have counted at least that many.
fn check_stats(what: &str, ops: usize, s: &RunStats) -> Result<(), String> {
    if what == "ops" && s.barriers < ops as u64 {
        return Err(format!(
            "the Squall ops run counted {} barrier episodes, fewer than the {ops} timed",
            s.barriers
        ));
    }
    Ok(())
}

/// The `q` quantile (0..=1) of `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Samples of `op` over runs: per-operation microseconds, or each run's seconds.
fn samples(op: &str, runs: &[RunLines]) -> Result<(Vec<f64>, u64), String> {
    let mut out = Vec::new();
    let mut count = 0;
    for r in runs {
        let v = r
            .get(op)
            .ok_or_else(|| format!("a run printed no {op} line"))?;
        count += v["count"].as_u64().unwrap_or(0);
        match v["us"].as_array() {
            Some(us) => out.extend(us.iter().filter_map(Value::as_f64)),
            None => out.push(v["s"].as_f64().unwrap_or(f64::NAN)),
        }
    }
    Ok((out, count))
}

fn summarize(
    op: &str,
    nodes: usize,
    threads: usize,
    runs: &[Vec<RunLines>; 2],
    stats: &[RunStats],
) -> Result<Value, String> {
    let (sq, count) = samples(op, &runs[0])?;
    let (nat, _) = samples(op, &runs[1])?;
    let unit = if matches!(op, "stencil" | "matmul") {
        "s"
    } else {
        "us"
    };
    let digits = if unit == "s" { 6 } else { 3 };
    let (sp50, np50) = (median(&sq), median(&nat));
    let mut row = json!({
        "nodes": nodes,
        "threads": threads,
        "op": op,
        "unit": unit,
        "squall_p50": round(sp50, digits),
        "squall_p99": round(quantile(&sq, 0.99), digits),
        "native_p50": round(np50, digits),
        "native_p99": round(quantile(&nat, 0.99), digits),
        "ratio": round(sp50 / np50, 3),
        "samples": sq.len(),
        "count": count,
    });
    if let Some(first) = runs[0].first().and_then(|r| r.get(op)) {
        for key in ["n", "iters"] {
            if !first[key].is_null() {
                row[key] = first[key].clone();
            }
        }
    }
    if unit == "us" {
        let pick = |f: fn(&RunStats) -> u64| {
            median(&stats.iter().map(|s| f(s) as f64).collect::<Vec<_>>())
        };
        row["squall_barrier_episodes"] = json!(pick(|s| s.barriers));
        row["squall_atomics"] = json!(pick(|s| s.atomics));
        row["squall_messages"] = json!(pick(|s| s.messages));
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn result_lines_must_be_verified() {
        let good =
            "noise\n@omp {\"op\":\"region\",\"count\":4,\"expect\":4,\"ok\":1,\"us\":[1.5,2]}\n";
        let r = parse_lines(good, "t").expect("parses");
        assert_eq!(r.get("region").expect("region")["us"][0], 1.5);
        let short = "@omp {\"op\":\"barrier\",\"count\":3,\"expect\":4,\"ok\":1,\"us\":[]}";
        assert!(parse_lines(short, "t")
            .expect_err("short count")
            .contains("3 of 4"));
        let wrong = "@omp {\"op\":\"matmul\",\"count\":4,\"expect\":4,\"ok\":0,\"s\":1}";
        assert!(parse_lines(wrong, "t").is_err());
        assert!(parse_lines("nothing", "t").is_err());
    }
}

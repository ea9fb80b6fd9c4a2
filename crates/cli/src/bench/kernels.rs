//! `squall bench kernels`: the side-by-side kernels of bench/sidebyside (MM, a NAS-CG-style
//! solver, a 2-D Jacobi stencil, EP; one C source per kernel over the thin `dsm.h` layer,
//! compiled into this binary) built three ways and run in alternation: sequentially, on Squall
//! at `--nodes` nodes, and on ArgoDSM at the same node count when `--argo-home` (or
//! `ARGO_HOME`) names an ArgoDSM install (then built with `mpicc -DUSE_ARGO` and started by
//! `mpirun`). Prints per kernel the median time of each, Squall / sequential and, with Argo,
//! Squall / Argo. A run counts only if node 0 printed `"ok":1` (its answer matched a
//! sequential computation) and, for Squall, its statistics show the shared-memory traffic
//! (remote page fetches and messages). Owns this driver; must not touch the runtime.
use super::apps::stats::StatsSummary;
use super::cprog::{pkg_config, run_tagged, JobError};
use super::report::{emit_json, median, round, Table};
use clap::Args;
use serde_json::{json, Value};
use squall_launch::JobSpec;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The sources (bench/sidebyside), written out and compiled at run time.
const HEADER: &str = include_str!("../../../../bench/sidebyside/dsm.h");
const SOURCES: [(&str, &str); 4] = [
    ("mm", include_str!("../../../../bench/sidebyside/mm.c")),
    ("cg", include_str!("../../../../bench/sidebyside/cg.c")),
    (
        "stencil",
        include_str!("../../../../bench/sidebyside/stencil.c"),
    ),
    ("ep", include_str!("../../../../bench/sidebyside/ep.c")),
];
/// The tag of the kernels' result lines.
const TAG: &str = "@kernel ";

#[derive(Args, Debug)]
pub struct KernelsArgs {
    /// Kernels to run: mm, cg, stencil, ep.
    #[arg(long, value_delimiter = ',', default_value = "mm,cg,stencil,ep")]
    pub kernels: Vec<String>,
    /// Nodes of the Squall (and Argo) runs.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Runs of each build per kernel (alternating which goes first).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// `default` (MM n=1024, CG n=65536 × 50 iterations, stencil 1024² × 100 sweeps, EP 2^24
    /// pairs) or `tiny` (seconds in all; for tests).
    #[arg(long, default_value = "default", value_parser = ["default", "tiny"])]
    pub size: String,
    /// Squall's install prefix (crates/capi/install.sh PREFIX); default: wherever pkg-config
    /// finds `squall`.
    #[arg(long)]
    pub prefix: Option<PathBuf>,
    /// An ArgoDSM install (include/ and lib/ with libargo and libargobackend-mpi); default
    /// `ARGO_HOME`. Without it only sequential and Squall run.
    #[arg(long, env = "ARGO_HOME")]
    pub argo_home: Option<PathBuf>,
    /// The MPI launcher of the Argo runs (its arguments split on spaces; `-n NODES` and the
    /// program follow).
    #[arg(long, default_value = "mpirun")]
    pub mpirun: String,
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

/// The three builds of a kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Impl {
    Seq,
    Squall,
    Argo,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Seq => "seq",
            Impl::Squall => "squall",
            Impl::Argo => "argo",
        }
    }
}

/// `-n` / `-i` of a kernel at a size.
fn kernel_args(kernel: &str, size: &str) -> Vec<String> {
    let (n, i) = match (kernel, size) {
        ("mm", "tiny") => (64, 1),
        ("mm", _) => (1024, 1),
        ("cg", "tiny") => (2048, 5),
        ("cg", _) => (65536, 50),
        ("stencil", "tiny") => (64, 4),
        ("stencil", _) => (1024, 100),
        ("ep", "tiny") => (12, 1),
        _ => (24, 1),
    };
    vec!["-n".into(), n.to_string(), "-i".into(), i.to_string()]
}

pub fn main(a: KernelsArgs) -> Result<(), String> {
    for k in &a.kernels {
        if !SOURCES.iter().any(|(name, _)| name == k) {
            return Err(format!(
                "--kernels: unknown kernel {k:?} (give mm, cg, stencil or ep)"
            ));
        }
    }
    if a.nodes < 2 || a.reps == 0 {
        return Err("--nodes must be at least 2 and --reps at least 1".into());
    }
    let dir = std::env::temp_dir().join(format!("squall-bench-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = run(&a, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One kernel's runs: seconds per build, and the Squall runs' statistics.
#[derive(Default)]
struct Runs {
    secs: [Vec<f64>; 3],
    stats: Vec<KernelStats>,
}

fn run(a: &KernelsArgs, dir: &Path) -> Result<(), String> {
    let squall_flags = pkg_config("squall", a.prefix.as_deref())?;
    let argo = a.argo_home.as_deref();
    let mut impls = vec![Impl::Seq, Impl::Squall];
    if argo.is_some() {
        impls.push(Impl::Argo);
    }
    let timeout = Duration::from_secs(a.timeout);
    let mut table = Table::new(
        format!(
            "squall bench kernels: bench/sidebyside at {} nodes ({}), blocked placement, median of {} runs each, alternating; {}",
            a.nodes,
            a.transport,
            a.reps,
            if argo.is_some() { "ArgoDSM from --argo-home" } else { "no ArgoDSM (set ARGO_HOME)" }
        ),
        &[
            "kernel", "n", "iters", "seq s", "squall s", "argo s", "squall/seq", "squall/argo",
            "page fetches", "messages", "MiB sent", "home queries", "barrier-fetched",
        ],
    );
    let mut rows = Vec::new();
    for kernel in &a.kernels {
        let src = write_sources(dir, kernel)?;
        let mut exes = Vec::new();
        for &i in &impls {
            exes.push((i, build(dir, &src, kernel, i, &squall_flags, argo)?));
        }
        let args = kernel_args(kernel, &a.size);
        let mut runs = Runs::default();
        for rep in 0..a.reps {
            // Rotate the order so no build always runs first (or always after another).
            for k in 0..exes.len() {
                let (i, exe) = &exes[(k + rep) % exes.len()];
                let who = format!("{kernel} {} {}", i.name(), args.join(" "));
                let (line, stats) = match i {
                    Impl::Seq => (run_plain(exe, &args, None, &who, timeout)?, None),
                    Impl::Argo => (
                        run_plain(exe, &args, Some((&a.mpirun, a.nodes)), &who, timeout)?,
                        None,
                    ),
                    Impl::Squall => {
                        let file = dir.join(format!("stats-{kernel}-{rep}.json"));
                        let line = run_squall(exe, &args, a, &file, &who, timeout)?;
                        (line, Some(read_stats(&file, &who)?))
                    }
                };
                check_line(&line, kernel, *i, a.nodes, &who)?;
                if let Some(s) = stats {
                    s.check(&who)?;
                    runs.stats.push(s);
                }
                runs.secs[*i as usize].push(line["s"].as_f64().unwrap_or(f64::NAN));
            }
        }
        let row = summarize(kernel, &args, &runs, argo.is_some());
        table.row(vec![
            kernel.clone(),
            args[1].clone(),
            args[3].clone(),
            fmt(&row["seq_s"]),
            fmt(&row["squall_s"]),
            fmt(&row["argo_s"]),
            fmt(&row["squall_over_seq"]),
            fmt(&row["squall_over_argo"]),
            fmt(&row["page_fetches"]),
            fmt(&row["messages"]),
            fmt(&row["mib_sent"]),
            fmt(&row["home_queries"]),
            fmt(&row["pages_barrier_fetched"]),
        ]);
        rows.push(row);
    }
    table.print();
    if a.json {
        emit_json(&json!({
            "bench": "kernels",
            "nodes": a.nodes,
            "transport": a.transport,
            "size": a.size,
            "reps": a.reps,
            "argo": argo.is_some(),
            "rows": rows,
        }));
    }
    Ok(())
}

fn fmt(v: &Value) -> String {
    if v.is_null() {
        "-".into()
    } else {
        v.to_string()
    }
}

fn summarize(kernel: &str, args: &[String], runs: &Runs, argo: bool) -> Value {
    let med = |i: Impl| median(&runs.secs[i as usize]);
    let (seq, sq) = (med(Impl::Seq), med(Impl::Squall));
    let stat = |f: fn(&KernelStats) -> u64| {
        median(&runs.stats.iter().map(|s| f(s) as f64).collect::<Vec<_>>())
    };
    let mut row = json!({
        "kernel": kernel,
        "n": args[1].parse::<u64>().unwrap_or(0),
        "iters": args[3].parse::<u64>().unwrap_or(0),
        "runs": runs.secs[Impl::Squall as usize].len(),
        "seq_s": round(seq, 6),
        "squall_s": round(sq, 6),
        "argo_s": Value::Null,
        "squall_over_seq": round(sq / seq, 3),
        "squall_over_argo": Value::Null,
        "page_fetches": stat(|s| s.page_fetches),
        "messages": stat(|s| s.messages),
        "bytes_sent": stat(|s| s.bytes),
        "mib_sent": round(stat(|s| s.bytes) / (1024.0 * 1024.0), 2),
        "home_queries": stat(|s| s.home_queries),
        "pages_barrier_fetched": stat(|s| s.pages_barrier_fetched),
    });
    if argo {
        let ar = med(Impl::Argo);
        row["argo_s"] = json!(round(ar, 6));
        row["squall_over_argo"] = json!(round(sq / ar, 3));
    }
    row
}

/// Write dsm.h and the kernel's source into `dir`; returns the source's path.
fn write_sources(dir: &Path, kernel: &str) -> Result<PathBuf, String> {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        Ok::<PathBuf, String>(p)
    };
    write("dsm.h", HEADER)?;
    let text = SOURCES
        .iter()
        .find(|(n, _)| *n == kernel)
        .map(|(_, t)| *t)
        .ok_or_else(|| format!("unknown kernel {kernel}"))?;
    write(&format!("{kernel}.c"), text)
}

fn build(
    dir: &Path,
    src: &Path,
    kernel: &str,
    i: Impl,
    squall: &[String],
    argo: Option<&Path>,
) -> Result<PathBuf, String> {
    let exe = dir.join(format!("{kernel}_{}", i.name()));
    let mut cmd = Command::new(if i == Impl::Argo { "mpicc" } else { "cc" });
    cmd.args(["-std=c11", "-O2", "-Wall", "-Wextra", "-o"])
        .arg(&exe)
        .arg(src);
    match i {
        Impl::Seq => {
            cmd.arg("-DDSM_SEQ");
        }
        Impl::Squall => {
            cmd.args(squall);
        }
        Impl::Argo => {
            let home = argo.ok_or("no ArgoDSM install given")?;
            let lib = home.join("lib");
            cmd.arg("-DUSE_ARGO")
                .arg(format!("-I{}", home.join("include/argo").display()))
                .arg(format!("-I{}", home.join("include").display()))
                .arg(format!("-L{}", lib.display()))
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .args(["-largo", "-largobackend-mpi"]);
        }
    }
    cmd.arg("-lm");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run the C compiler for {kernel} ({}): {e}", i.name()))?;
    if !out.status.success() {
        return Err(format!(
            "building {kernel} ({}) failed:\n{}",
            i.name(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

/// Node 0's result line in `text` (the last one), as JSON.
fn parse_line(text: &str, who: &str) -> Result<Value, String> {
    let line = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix(TAG))
        .next_back()
        .ok_or_else(|| format!("{who} printed no result line"))?;
    serde_json::from_str(line).map_err(|e| format!("{who} printed a bad result line ({e}): {line}"))
}

/// The run checked its answer and is the run asked for.
fn check_line(v: &Value, kernel: &str, i: Impl, nodes: usize, who: &str) -> Result<(), String> {
    let want_nodes = if i == Impl::Seq { 1 } else { nodes as u64 };
    if v["ok"] != 1 {
        return Err(format!(
            "{who}: the answer does not match the sequential computation: {v}"
        ));
    }
    if v["kernel"] != kernel || v["impl"] != i.name() || v["nodes"] != want_nodes {
        return Err(format!("{who}: unexpected result line {v}"));
    }
    if !v["s"].as_f64().is_some_and(|s| s.is_finite() && s >= 0.0) {
        return Err(format!("{who}: no time in {v}"));
    }
    Ok(())
}

/// Run a sequential build, or (with a launcher) an Argo build under MPI.
fn run_plain(
    exe: &Path,
    args: &[String],
    mpi: Option<(&str, usize)>,
    who: &str,
    timeout: Duration,
) -> Result<Value, String> {
    let mut cmd = match mpi {
        Some((launcher, nodes)) => {
            let mut words = launcher.split_whitespace();
            let mut c = Command::new(words.next().unwrap_or("mpirun"));
            c.args(words).args(["-n", &nodes.to_string()]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {who}: {e}"))?;
    // Read the pipes on their own threads (a full pipe would stall the child).
    let out = child.stdout.take().map(read_all);
    let err = child.stderr.take().map(read_all);
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{who} timed out after {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("{who}: {e}")),
        }
    };
    let text = |h: Option<std::thread::JoinHandle<String>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (out, err) = (text(out), text(err));
    if !status.success() {
        return Err(format!("{who} failed ({status}):\n{out}{err}"));
    }
    parse_line(&out, who)
}

fn read_all<R: std::io::Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

fn run_squall(
    exe: &Path,
    args: &[String],
    a: &KernelsArgs,
    stats_file: &Path,
    who: &str,
    timeout: Duration,
) -> Result<Value, String> {
    let _ = std::fs::remove_file(stats_file);
    let mut spec = JobSpec::local(a.nodes, exe.to_string_lossy().into_owned(), args.to_vec());
    spec.transport = a.transport.clone();
    spec.timeout = Some(timeout);
    spec.stats = true;
    spec.extra_env = vec![(
        squall_core::env::STATS_FILE.into(),
        stats_file.to_string_lossy().into_owned(),
    )];
    let text = run_tagged(&spec, TAG, who).map_err(|e| match e {
        JobError::Launch(e) => e,
        JobError::Failed { why, tail } => format!("{why}\n{}", tail.join("\n")),
    })?;
    parse_line(&text, who)
}

/// What a Squall run's statistics say about its shared-memory traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct KernelStats {
    page_fetches: u64,
    messages: u64,
    bytes: u64,
    home_queries: u64,
    pages_barrier_fetched: u64,
}

impl KernelStats {
    fn from_doc(doc: &Value) -> Result<KernelStats, String> {
        let s = StatsSummary::from_doc(doc)?;
        let count = |p: &str| doc.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        Ok(KernelStats {
            page_fetches: s.page_fetches,
            messages: s.messages,
            bytes: s.bytes,
            home_queries: count("/total/counts/protocol/sent/home_query/messages"),
            pages_barrier_fetched: count("/total/counts/protocol/pages_barrier_fetched"),
        })
    }

    /// Every kernel reads data another node wrote (node 0 at least gathers the result): a run
    /// without remote page fetches did not share memory.
    fn check(&self, who: &str) -> Result<(), String> {
        if self.page_fetches == 0 || self.messages == 0 {
            return Err(format!(
                "{who}: the statistics show no shared-memory traffic ({} page fetches, {} messages)",
                self.page_fetches, self.messages
            ));
        }
        Ok(())
    }
}

fn read_stats(path: &Path, who: &str) -> Result<KernelStats, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{who} wrote no statistics ({}): {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("bad statistics file {}: {e}", path.display()))?;
    KernelStats::from_doc(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_must_be_checked_and_match_the_run() {
        let good = "noise\n@kernel {\"kernel\":\"cg\",\"impl\":\"squall\",\"nodes\":2,\"n\":64,\"iters\":5,\"s\":0.5,\"ok\":1}\n";
        let v = parse_line(good, "t").expect("parses");
        assert!(check_line(&v, "cg", Impl::Squall, 2, "t").is_ok());
        assert!(check_line(&v, "mm", Impl::Squall, 2, "t").is_err());
        assert!(check_line(&v, "cg", Impl::Squall, 4, "t").is_err());
        let bad = good.replace("\"ok\":1", "\"ok\":0");
        let v = parse_line(&bad, "t").expect("parses");
        assert!(check_line(&v, "cg", Impl::Squall, 2, "t")
            .expect_err("not verified")
            .contains("does not match"));
        assert!(parse_line("nothing", "t").is_err());
    }

    #[test]
    fn stats_without_page_fetches_are_refused() {
        let doc = json!({"total": {"counts": {
            "protocol": {"page_fetches": 3, "pages_barrier_fetched": 7,
                         "sent": {"home_query": {"messages": 2, "bytes": 40}}},
            "net": {"messages_sent": 10, "bytes_sent": 9000}}}});
        let s = KernelStats::from_doc(&doc).expect("reduces");
        assert_eq!(
            (s.page_fetches, s.home_queries, s.pages_barrier_fetched),
            (3, 2, 7)
        );
        assert!(s.check("t").is_ok());
        let none = KernelStats {
            page_fetches: 0,
            ..s
        };
        assert!(none.check("t").is_err());
    }

    #[test]
    fn every_kernel_has_arguments_at_both_sizes() {
        for (k, _) in SOURCES {
            for size in ["tiny", "default"] {
                let a = kernel_args(k, size);
                assert_eq!(a.len(), 4, "{k} {size}");
                assert!(a[1].parse::<u64>().is_ok_and(|n| n > 0));
            }
        }
    }
}

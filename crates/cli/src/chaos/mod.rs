//! `squall chaos`: faults at scale. For each kind of fault (SIGKILL of a node, SIGSTOP of a
//! node past the peer timeout, a partition of two nodes by the fault-injection layer) it runs
//! `--trials` jobs of the apps (`apps/bin/<app>_squall`, as `squall bench apps` runs them),
//! injects the fault at a random moment of the run, and records how each job ended
//! ([`trial::Outcome`]): ended with a non-zero exit and a line naming the node within
//! `--end-limit` of detection, ended otherwise, hung (ended by the harness `--bound` after the
//! fault), or finished before the fault. Prints a table per kind and, with `--json`, one JSON
//! object as the last stdout line; exits 1 if any trial hung or ended otherwise.
//!
//! Each app is first run once without a fault at the same node count (its run time sets the
//! range of the random moment; an app that fails it is reported and left out). Owns planning
//! and reporting; one trial's processes are [`trial`]'s. Must not touch the nodes' internals.
pub mod trial;

use crate::bench::apps::runner::{BinDir, Mode};
use crate::bench::report::{emit_json, round, Table};
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use trial::{Kind, Outcome, TrialPlan, TrialRecord};

/// Environment variable that marks one trial's processes (the harness signals only those).
pub const MARKER_VAR: &str = "SQUALL_CHAOS_TRIAL";

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Node processes per job.
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    /// Kinds of fault, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill,stop,partition"
    )]
    pub kinds: Vec<Kind>,
    /// Trials per kind (spread over the apps in turn).
    #[arg(long, default_value_t = 10)]
    pub trials: usize,
    /// Apps, comma-separated (e.g. sor,clu), or `all`: every app with a `_squall` binary.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub apps: Vec<String>,
    /// Problem size passed to every app (`-s`).
    #[arg(long, default_value = "tiny", value_parser = ["tiny", "small", "medium", "large"])]
    pub size: String,
    /// Application threads per node (`-t` is nodes × this).
    #[arg(long, default_value_t = 1)]
    pub threads_per_node: usize,
    /// Seed of the random moments and nodes (same seed, same plan).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The nodes' peer timeout (`SQUALL_PEER_TIMEOUT_MS`): a stopped or cut-off node is
    /// found after this much silence.
    #[arg(long, default_value_t = 1000)]
    pub peer_timeout_ms: u64,
    /// Backend of the jobs.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "udp"])]
    pub transport: String,
    /// Seconds after the fault after which a job still running counts as a hang (and is ended).
    #[arg(long, default_value_t = 30)]
    pub bound: u64,
    /// Seconds from detection (the first failure line) within which the job must end.
    #[arg(long, default_value_t = 5.0)]
    pub end_limit: f64,
    /// Folder holding <app>_squall (default: $SQUALL_APPS_BIN, else apps/bin).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// End stdout with one JSON object (summary per kind and every trial).
    #[arg(long)]
    pub json: bool,
}

/// An app that ran cleanly at the trial node count, and how long that took.
struct Calibrated {
    name: String,
    program: PathBuf,
    run_time: Duration,
}

pub fn main(a: ChaosArgs) -> i32 {
    match run(&a) {
        Ok(clean) => i32::from(!clean),
        Err(msg) => {
            eprintln!("squall chaos: {msg}");
            2
        }
    }
}

fn app_args(a: &ChaosArgs) -> Vec<String> {
    vec![
        "-t".into(),
        (a.nodes * a.threads_per_node).to_string(),
        "-s".into(),
        a.size.clone(),
    ]
}

/// Ok(true): no trial hung or ended otherwise.
fn run(a: &ChaosArgs) -> Result<bool, String> {
    if a.nodes < 2 || a.trials == 0 || a.threads_per_node == 0 || a.kinds.is_empty() {
        return Err(
            "--nodes must be at least 2; --trials, --threads-per-node and --kinds at least 1"
                .into(),
        );
    }
    if a.peer_timeout_ms < 10 {
        return Err("--peer-timeout-ms must be at least 10".into());
    }
    let bins = BinDir::locate(a.bin_dir.clone());
    let apps: Vec<String> = if a.apps.iter().any(|x| x == "all") {
        bins.discover()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|x| bins.binary(x, Mode::Squall).is_file())
            .collect()
    } else {
        a.apps.clone()
    };
    bins.check(&apps, &[Mode::Squall])
        .map_err(|e| e.to_string())?;
    if apps.is_empty() {
        return Err(format!("no <app>_squall binary in {}", bins.0.display()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let mut calibrated = Vec::new();
    let mut left_out = Vec::new();
    for app in &apps {
        let program = bins.binary(app, Mode::Squall);
        match calibrate(a, app, &program)? {
            Ok(run_time) => {
                eprintln!(
                    "squall chaos: {app}: {:.2} s without a fault on {} nodes",
                    run_time.as_secs_f64(),
                    a.nodes
                );
                calibrated.push(Calibrated {
                    name: app.clone(),
                    program,
                    run_time,
                });
            }
            Err(why) => {
                eprintln!("squall chaos: {app}: left out: {why}");
                left_out.push(json!({"app": app, "why": why}));
            }
        }
    }
    if calibrated.is_empty() {
        return Err("no app ran cleanly without a fault".into());
    }
    let mut records: Vec<TrialRecord> = Vec::new();
    let mut serial = 0usize;
    for &kind in &a.kinds {
        for i in 0..a.trials {
            let which = i % calibrated.len();
            let app = &calibrated[which];
            let plan = plan(a, kind, app, &mut rng, serial);
            serial += 1;
            let rec = trial::run(&plan).map_err(|e| format!("starting a trial: {e}"))?;
            eprintln!(
                "squall chaos: {} {}/{} {} node {}{} at {:.0} ms: {:?} (exit {:?}) {}",
                kind.name(),
                i + 1,
                a.trials,
                app.name,
                plan.victim,
                plan.other.map(|o| format!("-{o}")).unwrap_or_default(),
                plan.delay.as_secs_f64() * 1e3,
                rec.outcome,
                rec.exit,
                rec.note
            );
            if rec.clean_run {
                // The job ran to its end before the fault's moment: a clean run, faster than
                // the calibration (the load changes); later moments are drawn over it.
                let t = Duration::from_secs_f64(rec.job_ms / 1e3);
                let c = &mut calibrated[which];
                c.run_time = c.run_time.min(t);
            }
            records.push(rec);
        }
    }
    let summary = summarize(a, &records);
    let clean = summary.iter().all(|s| s.hangs == 0 && s.otherwise == 0);
    print_table(a, &summary);
    if a.json {
        emit_json(&json!({
            "bench": "chaos",
            "nodes": a.nodes,
            "transport": a.transport,
            "size": a.size,
            "seed": a.seed,
            "peer_timeout_ms": a.peer_timeout_ms,
            "bound_s": a.bound,
            "end_limit_s": a.end_limit,
            "apps": calibrated.iter().map(|c| json!({
                "app": c.name, "run_time_ms": round(c.run_time.as_secs_f64() * 1e3, 1)
            })).collect::<Vec<_>>(),
            "left_out": left_out,
            "kinds": summary.iter().map(KindSummary::to_json).collect::<Vec<_>>(),
            "trials": records,
        }));
    }
    Ok(clean)
}

/// One run without a fault: Ok(Ok(time)) if it exited 0 and verified.
fn calibrate(
    a: &ChaosArgs,
    app: &str,
    program: &std::path::Path,
) -> Result<Result<Duration, String>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let t0 = Instant::now();
    let out = std::process::Command::new(exe)
        .args([
            "run",
            "-n",
            &a.nodes.to_string(),
            "--transport",
            &a.transport,
        ])
        .arg("--timeout")
        .arg(a.bound.max(60).to_string())
        .arg(program)
        .args(app_args(a))
        .env(
            squall_core::env::PEER_TIMEOUT_MS,
            a.peer_timeout_ms.to_string(),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running {app}: {e}"))?;
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Ok(Err(format!("{} ({tail:?})", out.status)));
    }
    if !stdout.contains("verified=1") {
        return Ok(Err("no verified=1 RESULT line".into()));
    }
    Ok(Ok(took))
}

fn plan(
    a: &ChaosArgs,
    kind: Kind,
    app: &Calibrated,
    rng: &mut ChaCha8Rng,
    serial: usize,
) -> TrialPlan {
    let nodes = u16::try_from(a.nodes).unwrap_or(u16::MAX);
    let victim = rng.gen_range(0..nodes);
    let other = (kind == Kind::Partition).then(|| {
        let o = rng.gen_range(0..nodes - 1);
        if o >= victim {
            o + 1
        } else {
            o
        }
    });
    // Anywhere in the run (start-up and finalize included). A partition's moment counts from
    // each node's network start, later than the launcher's: its range is shortened.
    let share = if kind == Kind::Partition { 0.75 } else { 1.0 };
    let span = (app.run_time.as_secs_f64() * share).max(0.05);
    let delay = Duration::from_secs_f64(rng.gen_range(0.0..span));
    TrialPlan {
        kind,
        app: app.name.clone(),
        program: app.program.clone(),
        args: app_args(a),
        nodes: a.nodes,
        transport: a.transport.clone(),
        peer_timeout_ms: a.peer_timeout_ms,
        delay,
        victim,
        other,
        bound: Duration::from_secs(a.bound),
        end_limit: Duration::from_secs_f64(a.end_limit.max(0.0)),
        marker: format!("{}-{serial}", std::process::id()),
    }
}

/// Per-kind counts and end times.
struct KindSummary {
    kind: Kind,
    trials: usize,
    correct: usize,
    otherwise: usize,
    hangs: usize,
    finished_first: usize,
    /// Detection → end, ms: p50, p99, max (of the trials that ended after a fault).
    detect_end: [f64; 3],
    /// Injection → end, ms.
    inject_end: [f64; 3],
}

impl KindSummary {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": self.kind.name(),
            "trials": self.trials,
            "ended_correctly": self.correct,
            "ended_otherwise": self.otherwise,
            "hangs": self.hangs,
            "finished_first": self.finished_first,
            "detect_to_end_ms": {"p50": self.detect_end[0], "p99": self.detect_end[1], "max": self.detect_end[2]},
            "inject_to_end_ms": {"p50": self.inject_end[0], "p99": self.inject_end[1], "max": self.inject_end[2]},
        })
    }
}

/// p50, p99 and max of `v` (nearest rank; NaN when empty).
fn percentiles(mut v: Vec<f64>) -> [f64; 3] {
    if v.is_empty() {
        return [f64::NAN; 3];
    }
    v.sort_by(|x, y| x.total_cmp(y));
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    [round(at(0.5), 1), round(at(0.99), 1), round(at(1.0), 1)]
}

fn summarize(a: &ChaosArgs, records: &[TrialRecord]) -> Vec<KindSummary> {
    a.kinds
        .iter()
        .map(|&kind| {
            let of: Vec<&TrialRecord> = records.iter().filter(|r| r.kind == kind).collect();
            let count = |o: Outcome| of.iter().filter(|r| r.outcome == o).count();
            let ended: Vec<&&TrialRecord> = of
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Correct | Outcome::Otherwise))
                .collect();
            KindSummary {
                kind,
                trials: of.len(),
                correct: count(Outcome::Correct),
                otherwise: count(Outcome::Otherwise),
                hangs: count(Outcome::Hang),
                finished_first: count(Outcome::FinishedFirst),
                detect_end: percentiles(ended.iter().filter_map(|r| r.detect_to_end_ms).collect()),
                inject_end: percentiles(ended.iter().filter_map(|r| r.inject_to_end_ms).collect()),
            }
        })
        .collect()
}

fn print_table(a: &ChaosArgs, summary: &[KindSummary]) {
    let mut t = Table::new(
        format!(
            "squall chaos: {} nodes over {}, peer timeout {} ms, size {} (times in ms)",
            a.nodes, a.transport, a.peer_timeout_ms, a.size
        ),
        &[
            "kind",
            "trials",
            "ended-correctly",
            "otherwise",
            "hangs",
            "finished-first",
            "detect->end p50",
            "p99",
            "inject->end p50",
            "p99",
        ],
    );
    let f = |x: f64| {
        if x.is_nan() {
            "-".to_string()
        } else {
            format!("{x:.0}")
        }
    };
    for s in summary {
        t.row(vec![
            s.kind.name().to_string(),
            s.trials.to_string(),
            s.correct.to_string(),
            s.otherwise.to_string(),
            s.hangs.to_string(),
            s.finished_first.to_string(),
            f(s.detect_end[0]),
            f(s.detect_end[1]),
            f(s.inject_end[0]),
            f(s.inject_end[1]),
        ]);
    }
    t.print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(v), [50.0, 99.0, 100.0]);
        assert_eq!(percentiles(vec![7.0]), [7.0, 7.0, 7.0]);
        assert!(percentiles(Vec::new())[0].is_nan());
    }
}

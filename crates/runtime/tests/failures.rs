//! Multi-node tests of failing together, through the public API: a collective that fails on
//! one node fails on every node with the same error within a second, and a barrier whose
//! episode can never complete ends the job with the failing node and the cause printed on
//! every node. Every scenario runs as jobs of 2 and 4 separate node processes (this test
//! binary re-executed by the launcher library); the runner reads what each node printed.
//!
//! Run: `cargo test -p squall --test failures` (add `-- NAME` to run the cases whose name
//! contains NAME).
use squall::{BarrierCount, BarrierId, Node, Placement, SquallError};
use squall_launch::{JobSpec, LineSink, Stream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{launched_as_node, node_exit, run_matrix, Axes, Scenario};

/// How long after rank 0's failure every node must have its error.
const FAIL_WITHIN: Duration = Duration::from_secs(1);
/// Bound on a whole failing job, start-up included (a loaded 2-core CI machine).
const JOB_WITHIN: Duration = Duration::from_secs(10);

/// The line a node prints when it got the collective's error in time.
const GOT: &str = "got the collective's error";

/// Check a collective's outcome on this node: the same `SquallError::Collective` naming node 0
/// and containing `cause` on every node, within [`FAIL_WITHIN`] of the barrier before it.
/// The node then fails (exit 1), as a program that cannot go on would.
fn expect_collective_error<T: std::fmt::Debug>(
    node: &Node,
    t0: Instant,
    r: squall::Result<T>,
    what: &str,
    cause: &str,
) -> Result<(), String> {
    let took = t0.elapsed();
    match r {
        Err(e @ SquallError::Collective { .. }) => {
            let text = e.to_string();
            if !text.contains(&format!("{what} failed on node 0")) || !text.contains(cause) {
                return Err(format!("unexpected error text: {text}"));
            }
            if took > FAIL_WITHIN {
                return Err(format!(
                    "the error took {took:?} (more than {FAIL_WITHIN:?})"
                ));
            }
            eprintln!("{}: {GOT} in {} ms: {text}", node.rank(), took.as_millis());
            Err(text)
        }
        other => Err(format!("expected a collective error, got {other:?}")),
    }
}

/// A collective allocation larger than the whole global range: rank 0's allocation fails,
/// every node gets its error.
fn alloc_too_big(node: &Node) -> Result<(), String> {
    let size = node.range().1.saturating_mul(2);
    node.barrier().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let r = node.alloc_collective(size, Placement::FirstTouch);
    expect_collective_error(node, t0, r, "collective allocation", "allocation on node 0")
}

/// Rank 0 calls a broadcast without a value.
fn broadcast_without_value(node: &Node) -> Result<(), String> {
    node.barrier().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let r = node.broadcast(None);
    expect_collective_error(node, t0, r, "broadcast", "rank 0 must supply the value")
}

/// Node 0 counts one more participant than the others: the episode can never complete.
fn barrier_mismatch(node: &Node) -> Result<(), String> {
    let n = u32::from(node.size());
    let total = if node.rank().0 == 0 { n + 1 } else { n };
    node.barrier().map_err(|e| e.to_string())?;
    node.barrier_with(BarrierId(9), BarrierCount::Total { total })
        .map_err(|e| format!("the barrier failed here only: {e}"))?;
    Err("a barrier with contradicting counts completed".into())
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("alloc_too_big", alloc_too_big, &["hlrc", "sc"]),
    (
        "broadcast_without_value",
        broadcast_without_value,
        &["hlrc"],
    ),
    ("barrier_mismatch", barrier_mismatch, &["hlrc"]),
];

/// What every node of a job printed, by rank and stream.
#[derive(Default)]
struct Capture {
    lines: Mutex<Vec<(u16, Stream, String)>>,
}

impl LineSink for Capture {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        if let Ok(mut l) = self.lines.lock() {
            l.push((rank, stream, String::from_utf8_lossy(line).into_owned()));
        }
    }
}

/// What every rank must have printed on stderr (all of the needles in one line), and the
/// exit status the job must end with (`None`: any non-zero status).
struct Expect {
    needles: &'static [&'static str],
    status: Option<i32>,
}

fn expectation(name: &str) -> Expect {
    match name {
        "alloc_too_big" => Expect {
            needles: &[GOT, "collective allocation failed on node 0"],
            status: Some(1),
        },
        "broadcast_without_value" => Expect {
            needles: &[GOT, "broadcast failed on node 0"],
            status: Some(1),
        },
        // The failing node (the barrier's manager) prints the cause; the others print it
        // after "node M failed:".
        _ => Expect {
            needles: &["synchronization:", "ending the job", "barrier"],
            status: Some(4),
        },
    }
}

fn run(label: &str, name: &str, spec: &JobSpec) -> bool {
    let cap = Arc::new(Capture::default());
    let t = Instant::now();
    let report = match squall_launch::run_job(spec, cap.clone()) {
        Ok(r) => r,
        Err(e) => {
            println!("test {label} ... FAILED (launch: {e})");
            return false;
        }
    };
    let took = t.elapsed();
    let lines = cap.lines.lock().map(|l| l.clone()).unwrap_or_default();
    let want = expectation(name);
    let mut why = Vec::new();
    if report.success() {
        why.push("the job succeeded".to_string());
    }
    if report.timed_out {
        why.push("the job timed out".to_string());
    }
    if let Some(s) = want.status {
        if report.exit_code() != s {
            why.push(format!("exit status {} (expected {s})", report.exit_code()));
        }
    }
    if took > JOB_WITHIN {
        why.push(format!("the job took {took:?} (more than {JOB_WITHIN:?})"));
    }
    for rank in 0..spec.nodes as u16 {
        let said = lines.iter().any(|(r, s, l)| {
            *r == rank && *s == Stream::Stderr && want.needles.iter().all(|n| l.contains(n))
        });
        if !said {
            why.push(format!(
                "node {rank} printed no line with {:?}",
                want.needles
            ));
        }
    }
    let ok = why.is_empty();
    println!(
        "test {label} ... {} ({:.2}s)",
        if ok { "ok" } else { "FAILED" },
        took.as_secs_f64()
    );
    if !ok {
        for w in &why {
            println!("    {w}");
        }
        for (r, s, l) in &lines {
            let tag = if *s == Stream::Stdout { "" } else { "!" };
            println!("    [{r}{tag}] {l}");
        }
    }
    ok
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_matrix(SCENARIOS, &args, Axes::TCP, |label, name, spec| {
        run(label, name, &spec)
    })
}

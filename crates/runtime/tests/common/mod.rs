//! What the multi-process runtime tests share: a scenario is a function every node of a job
//! runs; a node process started by the launcher runs the scenario named on its command line.
//! Also here: the runner side (the job of one case, the loop over scenarios, protocols and job
//! sizes) and the pieces of scenarios that several test binaries run.
// Every test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use squall::{BarrierCount, BarrierId, Node, Placement, PAGE_SIZE};
use squall_launch::JobSpec;
use std::time::Duration;

/// One scenario: run on every node; `Err` fails the node (and the job).
pub type Scenario = fn(&Node) -> Result<(), String>;

/// A node process: start the node, run scenario `name` of `scenarios` (a table of name,
/// function and the protocols it runs under), finalize. Exit code: 0 ok, 1 the scenario
/// failed, 2 no node or no such scenario, 3 finalize failed.
pub fn node_main(scenarios: &[(&str, Scenario, &[&str])], name: &str) -> i32 {
    let node = match squall::init() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("init failed: {e}");
            return 2;
        }
    };
    let Some((_, f, _)) = scenarios.iter().find(|(n, _, _)| *n == name) else {
        eprintln!("no scenario {name}");
        return 2;
    };
    let r = f(&node);
    if let Err(e) = &r {
        eprintln!("{}: scenario {name} failed: {e}", node.rank());
    }
    if let Err(e) = node.finalize() {
        eprintln!("finalize: {e}");
        return 3;
    }
    i32::from(r.is_err())
}

/// Run one job of a scenario and print its test line (`test LABEL ... ok|FAILED (secs)`);
/// `true` if every node succeeded.
pub fn run_case(label: &str, spec: &squall_launch::JobSpec) -> bool {
    let t = std::time::Instant::now();
    let sink = std::sync::Arc::new(squall_launch::ForwardSink { prefix: true });
    let ok = match squall_launch::run_job(spec, sink) {
        Ok(r) => r.success(),
        Err(e) => {
            eprintln!("launch failed: {e}");
            false
        }
    };
    println!(
        "test {label} ... {} ({:.2}s)",
        if ok { "ok" } else { "FAILED" },
        t.elapsed().as_secs_f64()
    );
    ok
}

/// `Err(what())` unless `cond`.
pub fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// Whether this process is a node of a job started by the launcher (`SQUALL_RANK` set).
pub fn launched_as_node() -> bool {
    std::env::var_os("SQUALL_RANK").is_some()
}

/// In a node process: run the scenario named by the first argument of `args` and exit with
/// [`node_main`]'s code.
pub fn node_exit(scenarios: &[(&str, Scenario, &[&str])], args: &[String]) -> ! {
    std::process::exit(node_main(
        scenarios,
        args.get(1).map(String::as_str).unwrap_or(""),
    ))
}

/// The job of scenario `name` on `nodes` node processes of this test binary: 60 s timeout,
/// a 4 GiB shared heap, the default protocol.
pub fn job_spec(nodes: usize, name: &str) -> JobSpec {
    let exe = std::env::current_exe().expect("own path");
    let mut spec = JobSpec::local(nodes, exe.display().to_string(), vec![name.to_string()]);
    spec.timeout = Some(Duration::from_secs(60));
    spec.extra_env
        .push(("SQUALL_HEAP_SIZE".into(), "4G".into()));
    spec
}

/// The faults injected on the lossy udp axis of [`run_matrix`]: datagrams lost, duplicated and
/// reordered (the udp transport's reliability layer must hide all of it from the DSM).
pub const LOSSY_UDP: &str = "loss=0.03,dup=0.02,reorder=0.05";

/// The axes of [`run_matrix`] beyond 2 and 4 nodes over tcp.
#[derive(Clone, Copy)]
pub struct Axes {
    /// Again over udp with [`LOSSY_UDP`] faults injected, at 2 and 4 nodes.
    pub lossy_udp: bool,
    /// Again at 2 nodes over tcp with faults served by the faulting threads
    /// (`SQUALL_FAULTS=signal`).
    pub signal_faults: bool,
}

impl Axes {
    /// Every axis.
    pub const ALL: Axes = Axes {
        lossy_udp: true,
        signal_faults: true,
    };
    /// 2 and 4 nodes over tcp only.
    pub const TCP: Axes = Axes {
        lossy_udp: false,
        signal_faults: false,
    };
}

/// Run every scenario of `scenarios` under each of its protocols as jobs of 2 and 4 nodes over
/// tcp, and on the further `axes` (only the cases whose label `name/protocol/N
/// nodes[/udp-lossy|/signal-faults]` contains the first non-option argument of `args`, if any),
/// print the totals and exit (1 if a case failed). A protocol `P+push` is `P` with push
/// updates at barriers (`SQUALL_PUSH_UPDATES`). `case(label, name, spec)` runs one job and
/// says whether it passed.
pub fn run_matrix(
    scenarios: &[(&str, Scenario, &[&str])],
    args: &[String],
    axes: Axes,
    mut case: impl FnMut(&str, &str, JobSpec) -> bool,
) -> ! {
    let filter: Option<&String> = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let (mut passed, mut failed) = (0, 0);
    for (name, _, protocols) in scenarios {
        for proto in *protocols {
            for (nodes, axis) in [
                (2usize, ""),
                (4, ""),
                (2, "udp-lossy"),
                (4, "udp-lossy"),
                (2, "signal-faults"),
            ] {
                let (lossy, signal) = (axis == "udp-lossy", axis == "signal-faults");
                if (lossy && !axes.lossy_udp) || (signal && !axes.signal_faults) {
                    continue;
                }
                let label = if axis.is_empty() {
                    format!("{name}/{proto}/{nodes} nodes")
                } else {
                    format!("{name}/{proto}/{nodes} nodes/{axis}")
                };
                if filter.is_some_and(|f| !label.contains(f.as_str())) {
                    continue;
                }
                let mut spec = job_spec(nodes, name);
                if lossy {
                    spec.transport = "udp".into();
                    spec.net_faults = Some(format!("{LOSSY_UDP},seed={}", passed + failed));
                }
                if signal {
                    spec.extra_env
                        .push(("SQUALL_FAULTS".into(), "signal".into()));
                }
                let (protocol, push) = match proto.split_once('+') {
                    Some((p, "push")) => (p, true),
                    _ => (*proto, false),
                };
                spec.extra_env
                    .push(("SQUALL_PROTOCOL".into(), protocol.to_string()));
                if push {
                    spec.extra_env
                        .push(("SQUALL_PUSH_UPDATES".into(), "1".into()));
                }
                if case(&label, name, spec) {
                    passed += 1
                } else {
                    failed += 1
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    std::process::exit(i32::from(failed > 0));
}

/// Run every scenario of `scenarios` as jobs of 2 and 4 nodes over tcp and over udp (only the
/// cases whose label `{prefix}name/transport/N nodes` contains the first non-option argument of
/// `args`, if any), print the totals and exit (1 if a case failed). For the sharing models
/// whose operations do not depend on the page protocol (one-sided operations, shared objects).
pub fn run_transports(scenarios: &[(&str, Scenario, &[&str])], args: &[String], prefix: &str) -> ! {
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let (mut passed, mut failed) = (0, 0);
    for (name, _, _) in scenarios {
        for transport in ["tcp", "udp"] {
            for nodes in [2usize, 4] {
                let label = format!("{prefix}{name}/{transport}/{nodes} nodes");
                if filter.is_some_and(|f| !label.contains(f.as_str())) {
                    continue;
                }
                let mut spec = job_spec(nodes, name);
                spec.extra_env
                    .push(("SQUALL_TRANSPORT".into(), transport.into()));
                if run_case(&label, &spec) {
                    passed += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    std::process::exit(i32::from(failed > 0));
}

/// Thread `gid` of `t` per node (of `n` nodes) writes `value(i)` to its words
/// `gid, gid + n*t, ...` of the `words` u64 at `a`, meets every thread of the job at barrier 1,
/// then checks every word; `what` names the round in the error.
///
/// # Safety
/// `a` points to `words` u64 of shared memory; until the barrier each thread writes only its
/// own words.
pub unsafe fn write_meet_check(
    node: &Node,
    a: *mut u64,
    words: usize,
    (gid, t, n): (usize, usize, usize),
    value: impl Fn(usize) -> u64,
    what: &str,
) -> Result<(), String> {
    for i in (gid..words).step_by(n * t) {
        // SAFETY: a points to `words` u64 of shared memory (the caller's promise).
        unsafe { a.add(i).write_volatile(value(i)) };
    }
    node.barrier_with(BarrierId(1), BarrierCount::PerNode { local: t as u32 })
        .map_err(|e| e.to_string())?;
    for i in 0..words {
        // SAFETY: as above.
        let v = unsafe { a.add(i).read_volatile() };
        check(v == value(i), || {
            format!("thread {gid}{what} word {i}: {v}")
        })?;
    }
    Ok(())
}

/// 4 threads per node share the node's copy; all threads of all nodes write disjoint words of
/// shared pages (every page has a writer on every node), meet at a barrier and check
/// everything, then meet again; three rounds.
pub fn threads(node: &Node) -> Result<(), String> {
    const T: usize = 4;
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let words = 2 * PAGE_SIZE / 8 * n;
    let a = node
        .alloc_collective(words * 8, Placement::RoundRobin { block_pages: 1 })
        .map_err(|e| e.to_string())? as usize;
    on_threads(node, T, move |node, t| {
        let gid = me * T + t;
        for round in 0..3u64 {
            // SAFETY: a points to `words` u64 of shared memory; each thread writes only its
            // own words between the barriers.
            unsafe {
                write_meet_check(
                    &node,
                    a as *mut u64,
                    words,
                    (gid, T, n),
                    |i| round + 3 * i as u64,
                    &format!(" round {round}"),
                )?
            };
            node.barrier_with(BarrierId(1), BarrierCount::PerNode { local: T as u32 })
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// Run `f(node, t)` on `t_count` new threads of this node (`t` = 0, 1, ...) and wait for all;
/// the first error (or panic) of a thread is the result.
pub fn on_threads(
    node: &Node,
    t_count: usize,
    f: impl Fn(Node, usize) -> Result<(), String> + Clone + Send + 'static,
) -> Result<(), String> {
    let mut hs = Vec::new();
    for t in 0..t_count {
        let node = node.clone();
        let f = f.clone();
        hs.push(std::thread::spawn(move || f(node, t)));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked".to_string())??;
    }
    Ok(())
}

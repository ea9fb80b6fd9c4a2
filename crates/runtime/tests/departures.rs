//! Clean departures: many short jobs of 4 and 8 node processes, each ending right after
//! traffic that the job's last barrier makes nodes send to each other (write notices that
//! invalidate copies, so `Dropped` batches and diffs go to the homes while the departure
//! spreads; thread results; lock hand-offs), must all end with status 0. Before the departure
//! round of `finalize`, such a job could fail at shutdown with
//! `node 3: sending to node 1: node 1 has left the job (said goodbye); ending the job`.
//!
//! Run: `cargo test -p squall --test departures` (40 jobs of 4 nodes and 10 of 8, the two
//! scenarios in turn); `-- --jobs N` runs N jobs of each size instead (by hand:
//! `-- --jobs 1000`).
use squall::{LockId, Node, NodeId, Placement, PAGE_SIZE};
use std::ffi::c_void;
use std::time::Instant;

mod common;
use common::{
    check, job_spec, launched_as_node, node_exit, on_threads, run_case, threads, write_meet_check,
    Scenario,
};

/// A thread started on another node: adds its argument to a shared counter under a lock.
extern "C" fn add_under_lock(arg: *mut c_void) -> *mut c_void {
    let Ok(node) = squall::node() else {
        return std::ptr::null_mut();
    };
    let counter = arg as *mut u64;
    if node.lock(LockId(3)).is_err() {
        return std::ptr::null_mut();
    }
    // SAFETY: `arg` is a shared u64 allocated by the job; the lock orders the accesses.
    unsafe { counter.write_volatile(counter.read_volatile() + 1) };
    if node.unlock(LockId(3)).is_err() {
        return std::ptr::null_mut();
    }
    arg
}

/// A short job: threads of every node write words spread over every page (homes round
/// robin), barriers, every node reads everything, a thread on the next node increments a
/// counter under a lock, and finally every node writes its words once more and ends: the
/// first barrier of `finalize` carries those writes' notices, which invalidate the copies
/// every node just read.
fn short(node: &Node) -> Result<(), String> {
    const T: usize = 2;
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let words = PAGE_SIZE / 8 * n;
    let a = node
        .alloc_collective(words * 8, Placement::RoundRobin { block_pages: 1 })
        .map_err(|e| e.to_string())? as usize;
    let counter = node
        .alloc_collective(8, Placement::Node(NodeId(0)))
        .map_err(|e| e.to_string())? as usize;
    on_threads(node, T, move |node, t| {
        // SAFETY: a points to `words` u64 of shared memory; each thread writes only its own
        // words before the barrier.
        unsafe {
            write_meet_check(
                &node,
                a as *mut u64,
                words,
                (me * T + t, T, n),
                |i| 1 + i as u64,
                "",
            )
        }
    })?;
    let next = NodeId(((me + 1) % n) as u16);
    let tid = node
        .spawn_on(Some(next), add_under_lock, counter as *mut c_void)
        .map_err(|e| e.to_string())?;
    let ret = node.join(tid).map_err(|e| e.to_string())?;
    check(ret as usize == counter, || {
        "the remote thread failed".to_string()
    })?;
    node.barrier().map_err(|e| e.to_string())?;
    // SAFETY: the counter is a shared u64; every increment happened before the barrier.
    let c = unsafe { (counter as *const u64).read_volatile() };
    check(c == n as u64, || {
        format!("the counter is {c}, expected {n}")
    })?;
    // The last writes, published by finalize's first barrier.
    let a = a as *mut u64;
    for i in (me..words).step_by(n) {
        // SAFETY: as above.
        unsafe { a.add(i).write_volatile(2 + i as u64) };
    }
    Ok(())
}

const SCENARIOS: &[(&str, Scenario, &[&str])] =
    &[("short", short, &["hlrc"]), ("threads", threads, &["hlrc"])];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    let jobs: Option<usize> = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok());
    let t0 = Instant::now();
    let mut failed_total = 0;
    for (nodes, default_jobs) in [(4usize, 40usize), (8, 10)] {
        let count = jobs.unwrap_or(default_jobs);
        let mut failed = 0;
        for j in 0..count {
            let name = SCENARIOS[j % SCENARIOS.len()].0;
            let spec = job_spec(nodes, name);
            if !run_case(&format!("{name}/hlrc/{nodes} nodes/job {j}"), &spec) {
                failed += 1;
            }
        }
        println!("{nodes}-node jobs: failures {failed}/{count}");
        failed_total += failed;
    }
    println!(
        "departures: {failed_total} failed ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    std::process::exit(i32::from(failed_total > 0));
}

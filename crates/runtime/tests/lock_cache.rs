//! Multi-node tests of the node-local lock cache (the lock fast path) through the public API:
//! every scenario runs as 2 and 4 separate node processes (this test binary re-executed by the
//! launcher library) over the real transport, with the cache on (the default).
//!
//! Run: `cargo test --release -p squall --test lock_cache` (add `-- NAME` to run the
//! scenarios whose label contains NAME).
use squall::stats::NodeStats;
use squall::{LockId, Node, NodeId, Placement};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{check, launched_as_node, node_exit, run_case, run_matrix, Axes, Scenario};

fn e(x: squall::SquallError) -> String {
    x.to_string()
}

fn sync_of(st: &NodeStats, name: &str) -> u64 {
    st.counts
        .get("sync")
        .and_then(|p| p.get(name))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Every way this node acquired a lock so far.
fn acquires(st: &NodeStats) -> u64 {
    sync_of(st, "lock_acquires_local")
        + sync_of(st, "lock_acquires_local_fast")
        + sync_of(st, "lock_acquires_remote")
}

/// Error checks still hold on cached locks: relocking a lock this thread holds through the
/// cache is an error (deadlock), so is unlocking a cached lock it does not hold; a second
/// thread's unlock of it fails too, and the holder's unlock afterwards works.
fn errors(node: &Node) -> Result<(), String> {
    // A lock per node (managed here when ids spread over managers by `id % nodes`).
    let l = LockId(40_000 + u64::from(node.rank().0));
    node.lock(l).map_err(e)?;
    node.unlock(l).map_err(e)?;
    let before = sync_of(&node.stats(), "lock_acquires_local_fast");
    node.lock(l).map_err(e)?;
    let fast = sync_of(&node.stats(), "lock_acquires_local_fast") - before;
    check(fast == 1, || format!("{fast} fast acquires, expected 1"))?;
    let again = node.lock(l);
    check(again.is_err(), || "relocking a held lock succeeded".into())?;
    let n2 = node.clone();
    let other = std::thread::spawn(move || n2.unlock(l).is_err())
        .join()
        .map_err(|_| "thread panicked".to_string())?;
    check(other, || "another thread unlocked the lock".into())?;
    node.unlock(l).map_err(e)?;
    check(node.unlock(l).is_err(), || {
        "unlocking a lock nobody holds succeeded".into()
    })?;
    // It is cached again after all that: the next pair takes the fast path.
    let before = sync_of(&node.stats(), "lock_acquires_local_fast");
    node.lock(l).map_err(e)?;
    node.unlock(l).map_err(e)?;
    let fast = sync_of(&node.stats(), "lock_acquires_local_fast") - before;
    check(fast == 1, || format!("{fast} fast acquires, expected 1"))?;
    node.barrier().map_err(e)
}

/// Threads on every node hammer a few locks, each protecting plain shared counters, in runs
/// of re-acquires of one lock (the cache's case) that other nodes' requests interrupt: every
/// counter ends exact, and each node counts exactly its acquires, many of them fast.
fn counters(node: &Node) -> Result<(), String> {
    const T: usize = 3;
    const LOCKS: usize = 3;
    const RUN: u64 = 40;
    const RUNS: u64 = 30;
    const WORDS: usize = 512; // counters per lock, a page apart in groups
    let n = node.size() as u64;
    let c = node
        .alloc_collective(LOCKS * WORDS * 8, Placement::Blocked)
        .map_err(e)? as usize;
    let before = acquires(&node.stats());
    let mut hs = Vec::new();
    for t in 0..T {
        let node = node.clone();
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            let me = node.rank().0 as usize;
            for r in 0..RUNS {
                let k = (me + t + r as usize) % LOCKS;
                for i in 0..RUN {
                    node.lock(LockId(7 + k as u64)).map_err(e)?;
                    // SAFETY: c has LOCKS * WORDS u64 of shared memory; lock 7 + k orders the
                    // accesses to counters k * WORDS ..; a plain read-modify-write.
                    unsafe {
                        let p = (c as *mut u64).add(k * WORDS + (i as usize * 67) % WORDS);
                        let v = p.read_volatile();
                        p.write_volatile(v + 1);
                        let s = (c as *mut u64).add(k * WORDS);
                        if !(i as usize * 67).is_multiple_of(WORDS) {
                            s.write_volatile(s.read_volatile() + 1);
                        }
                    }
                    node.unlock(LockId(7 + k as u64)).map_err(e)?;
                }
            }
            Ok(())
        }));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked".to_string())??;
    }
    let st = node.stats();
    let mine = acquires(&st) - before;
    let want_mine = T as u64 * RUNS * RUN;
    check(mine == want_mine, || {
        format!("this node counted {mine} acquires, expected {want_mine}")
    })?;
    let fast = sync_of(&st, "lock_acquires_local_fast");
    check(fast > 0, || "no acquire took the lock cache".into())?;
    node.barrier().map_err(e)?;
    // Sum every counter: each increment was under its lock.
    let mut sum = 0u64;
    for k in 0..LOCKS {
        node.lock(LockId(7 + k as u64)).map_err(e)?;
        for w in 0..WORDS {
            // SAFETY: as above, under lock 7 + k.
            sum += unsafe { (c as *const u64).add(k * WORDS + w).read_volatile() };
        }
        node.unlock(LockId(7 + k as u64)).map_err(e)?;
    }
    // Each acquire adds 1 to its word, and 1 more to word 0 of its lock unless that was it.
    let per_run: u64 = (0..RUN)
        .map(|i| {
            if (i as usize * 67).is_multiple_of(WORDS) {
                1
            } else {
                2
            }
        })
        .sum();
    let want = n * T as u64 * RUNS * per_run;
    check(sum == want, || {
        format!("counters sum to {sum}, expected {want}")
    })?;
    node.barrier().map_err(e)
}

/// Fairness: a thread of node 0 re-acquires one lock in a loop, always through the cache
/// while nobody else asks; every other node asks for it once, with a bounded wait, and adds
/// itself to a count under it; node 0's loop ends when it sees every other node counted.
fn fairness(node: &Node) -> Result<(), String> {
    const BOUND: Duration = Duration::from_secs(10);
    let l = LockId(1_000_000); // managed by node 0 (a multiple of 2 and 4)
    let c = node
        .alloc_collective(8, Placement::Node(NodeId(0)))
        .map_err(e)? as usize;
    let others = u64::from(node.size()) - 1;
    if node.rank().0 == 0 {
        node.lock(l).map_err(e)?;
        node.unlock(l).map_err(e)?;
        node.barrier().map_err(e)?;
        let t0 = Instant::now();
        let loops = AtomicU64::new(0);
        loop {
            node.lock(l).map_err(e)?;
            // SAFETY: c is 8 bytes of shared memory; lock l orders the accesses.
            let seen = unsafe { (c as *const u64).read_volatile() };
            node.unlock(l).map_err(e)?;
            loops.fetch_add(1, Ordering::Relaxed);
            if seen == others {
                break;
            }
            check(t0.elapsed() < BOUND, || {
                format!(
                    "after {} local re-acquires in {BOUND:?} only {seen} of {others} nodes got \
                     the lock",
                    loops.load(Ordering::Relaxed)
                )
            })?;
        }
        let fast = sync_of(&node.stats(), "lock_acquires_local_fast");
        check(fast > 0, || "node 0's loop never took the cache".into())?;
    } else {
        node.barrier().map_err(e)?;
        // Let node 0's loop run through the cache first.
        std::thread::sleep(Duration::from_millis(20 * u64::from(node.rank().0)));
        let t0 = Instant::now();
        node.lock(l).map_err(e)?;
        let waited = t0.elapsed();
        // SAFETY: as above, under lock l.
        unsafe {
            let p = c as *mut u64;
            p.write_volatile(p.read_volatile() + 1);
        }
        node.unlock(l).map_err(e)?;
        check(waited < BOUND, || format!("waited {waited:?} for the lock"))?;
    }
    node.barrier().map_err(e)
}

/// A remote request for a lock held through the cache on another node waits for that
/// critical section only, and sees its writes: node 0 holds the lock (cached) and writes a
/// value after the others asked for it, then releases.
fn handoff_sees_writes(node: &Node) -> Result<(), String> {
    let l = LockId(2_000_000);
    let c = node
        .alloc_collective(8 * 64, Placement::Node(NodeId(0)))
        .map_err(e)? as usize;
    if node.rank().0 == 0 {
        node.lock(l).map_err(e)?;
        node.unlock(l).map_err(e)?;
        node.lock(l).map_err(e)?; // through the cache
        node.barrier().map_err(e)?;
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..64 {
            // SAFETY: c has 64 u64 of shared memory; lock l orders the accesses.
            unsafe { (c as *mut u64).add(i).write_volatile(1000 + i as u64) };
        }
        node.unlock(l).map_err(e)?;
    } else {
        node.barrier().map_err(e)?;
        node.lock(l).map_err(e)?;
        for i in 0..64 {
            // SAFETY: as above, under lock l.
            let v = unsafe { (c as *const u64).add(i).read_volatile() };
            check(v == 1000 + i as u64, || {
                format!("word {i} is {v} after the hand-off, expected {}", 1000 + i)
            })?;
        }
        node.unlock(l).map_err(e)?;
    }
    node.barrier().map_err(e)
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("errors", errors, &["hlrc"]),
    ("counters", counters, &["hlrc", "sc"]),
    ("fairness", fairness, &["hlrc"]),
    ("handoff_sees_writes", handoff_sees_writes, &["hlrc", "sc"]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_matrix(SCENARIOS, &args, Axes::ALL, |label, _, spec| {
        run_case(label, &spec)
    })
}

//! Node side of `squall bench lock --contended`: every node's threads (`--threads`, default 1)
//! take one lock in a loop
//! and adds to a shared counter under it (the lock handed between nodes at each acquire),
//! then, with 3 nodes or more, the third-node case: a lock last held by node 0 taken by node 2
//! (its manager node 1). Every node prints its own counts (statistics deltas); node 0 adds
//! the timings and checks the counter. Owns these measurements; must not touch protocol
//! internals (it reads only the public statistics).
use super::dsm::{dsm, rtt_us, serve_fetch, SyncNodeArgs};
use super::NodeError;
use crate::bench::report::emit_result;
use serde_json::{json, Value};
use squall::{LockId, Node, NodeId, Placement};
use std::time::Instant;

/// One node's counters at a point in time (statistics), for deltas over a loop.
#[derive(Clone, Copy, Default)]
struct Counts {
    /// Lock messages sent (request, forward, grant: `squall_sync::message::KIND_NAMES` 0..3).
    lock_msgs: u64,
    /// Acquisitions of a token that came from another node (hand-offs into this node).
    remote: u64,
    /// Page fetches this node sent.
    fetches: u64,
    /// Diffs this node created (each is a diff/ack round trip to the page's home).
    diffs: u64,
    /// hlrc: pages this node sent inside its lock grants, and pushed pages it took (its copy
    /// updated in place instead of fetched again).
    pushed: u64,
    taken: u64,
}

fn counts(node: &Node) -> Counts {
    let st = node.stats();
    let sync = st.counts.get("sync");
    let lock_msgs = sync
        .and_then(|p| p.get("messages_sent"))
        .and_then(Value::as_array)
        .map_or(0, |a| a.iter().take(3).filter_map(Value::as_u64).sum());
    let key = |part: &str, k: &str| {
        st.counts
            .get(part)
            .and_then(|p| p.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Counts {
        lock_msgs,
        remote: key("sync", "lock_acquires_remote"),
        fetches: key("protocol", "page_fetches"),
        diffs: key("protocol", "diffs_created"),
        pushed: key("protocol", "grant_pages_pushed"),
        taken: key("protocol", "grant_pushes_taken"),
    }
}

fn delta(a: Counts, b: Counts) -> Counts {
    Counts {
        lock_msgs: b.lock_msgs.saturating_sub(a.lock_msgs),
        remote: b.remote.saturating_sub(a.remote),
        fetches: b.fetches.saturating_sub(a.fetches),
        diffs: b.diffs.saturating_sub(a.diffs),
        pushed: b.pushed.saturating_sub(a.pushed),
        taken: b.taken.saturating_sub(a.taken),
    }
}

fn add(a: &mut Counts, d: Counts) {
    a.lock_msgs += d.lock_msgs;
    a.remote += d.remote;
    a.fetches += d.fetches;
    a.diffs += d.diffs;
    a.pushed += d.pushed;
    a.taken += d.taken;
}

/// Works (spins) for `us` microseconds outside the lock.
fn think(us: u64) {
    if us == 0 {
        return;
    }
    let until = Instant::now() + std::time::Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

pub fn contended(a: SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let me = node.rank().0;
    let nodes = node.size();
    let threads = a.threads.max(1);
    let counter = node
        .alloc_array_collective::<u64>(a.reps.max(1), Placement::Node(NodeId(0)))
        .map_err(dsm)?;
    let (mut per_acquire_us, mut loop_us) = (Vec::new(), Vec::new());
    let mut sum = Counts::default();
    let (mut third_us, mut third_msgs) = (Vec::new(), 0u64);
    for rep in 0..a.reps {
        // Managed by node 0 (`manager_of`: id mod nodes), where the token starts.
        let l = LockId(u64::from(nodes) * (500 + rep as u64));
        node.barrier().map_err(dsm)?;
        let c0 = counts(&node);
        let t = Instant::now();
        let work = |node: &Node| -> Result<(), NodeError> {
            for _ in 0..a.iters {
                node.lock(l).map_err(dsm)?;
                counter.set(rep, counter.get(rep) + 1);
                node.unlock(l).map_err(dsm)?;
                think(a.think_us);
            }
            Ok(())
        };
        std::thread::scope(|s| {
            let others: Vec<_> = (1..threads).map(|_| s.spawn(|| work(&node))).collect();
            let mine = work(&node);
            others.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| NodeError::Check("a bench thread panicked".into()))?
            })?;
            mine
        })?;
        let took = t.elapsed().as_secs_f64() * 1e6;
        node.barrier().map_err(dsm)?;
        add(&mut sum, delta(c0, counts(&node)));
        loop_us.push(took);
        per_acquire_us.push(took / (a.iters as f64 * f64::from(nodes) * threads as f64));
        if me == 0 {
            node.lock(l).map_err(dsm)?;
            let got = counter.get(rep);
            node.unlock(l).map_err(dsm)?;
            let want = (a.iters * threads) as u64 * u64::from(nodes);
            if got != want {
                return Err(NodeError::Check(format!(
                    "contended counter {got} after {want} increments under one lock"
                )));
            }
        }
        if nodes >= 3 {
            // A lock managed by node 1, last held by node 0, taken by node 2.
            let l3 = LockId(1 + u64::from(nodes) * (1000 + rep as u64));
            if me == 0 {
                node.lock(l3).map_err(dsm)?;
                node.unlock(l3).map_err(dsm)?;
            }
            node.barrier().map_err(dsm)?;
            let c1 = counts(&node);
            if me == 2 {
                let t = Instant::now();
                node.lock(l3).map_err(dsm)?;
                third_us.push(t.elapsed().as_secs_f64() * 1e6);
                node.unlock(l3).map_err(dsm)?;
            }
            node.barrier().map_err(dsm)?;
            third_msgs += delta(c1, counts(&node)).lock_msgs;
        }
    }
    // The unit hand-offs are reported in: a small request/reply round trip, node 0 <-> 1.
    let rtt = if me == 0 {
        vec![rtt_us(&node, 200)?]
    } else {
        Vec::new()
    };
    node.barrier().map_err(dsm)?;
    emit_result(
        &json!({"rank": me, "per_acquire_us": per_acquire_us, "loop_us": loop_us,
        "acquires": a.iters * a.reps * threads, "lock_msgs": sum.lock_msgs,
        "remote_acquires": sum.remote, "page_fetches": sum.fetches, "diffs": sum.diffs,
        "grant_pages_pushed": sum.pushed, "grant_pushes_taken": sum.taken,
        "rtt_us": rtt, "third_us": third_us, "third_msgs": third_msgs,
        "third_acquires": if nodes >= 3 { a.reps } else { 0 }}),
    );
    node.finalize().map_err(dsm)
}

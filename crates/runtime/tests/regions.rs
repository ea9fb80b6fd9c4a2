//! Multi-node tests of CRL regions through the Rust API (`Node::region_create`,
//! `region_map`, the `read()`/`write()` guards): every scenario runs as 2 and 4 node
//! processes, over tcp and over udp.
//!
//! Run: `cargo test -p squall --test regions` (add `-- NAME` to pick scenarios).
use squall::regions::Region;
use squall::{Node, NodeId, Placement, RegionId};

mod common;
use common::{check, launched_as_node, node_exit, run_case, run_matrix, Axes, Scenario};

fn e(x: squall::SquallError) -> String {
    x.to_string()
}

/// Rank 0 creates a region of `size` bytes and every node maps it (the id by broadcast).
fn shared_region(node: &Node, size: usize) -> Result<Region, String> {
    let rid = if node.rank() == NodeId(0) {
        Some(node.region_create(size).map_err(e)?.0)
    } else {
        None
    };
    let rid = RegionId(node.broadcast(rid).map_err(e)?);
    node.region_map(rid).map_err(e)
}

/// Every thread of every node (2 per node) increments a counter in one region under write
/// brackets; the total is exact on every node.
fn counter(node: &Node) -> Result<(), String> {
    const K: u64 = 200;
    const T: usize = 2;
    let r = shared_region(node, 64)?;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..T)
            .map(|_| {
                s.spawn(|| -> Result<(), String> {
                    for _ in 0..K {
                        let mut w = r.write().map_err(e)?;
                        let v = u64::from_le_bytes(w[0..8].try_into().map_err(|_| "size")?);
                        w[0..8].copy_from_slice(&(v + 1).to_le_bytes());
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().map_err(|_| "thread panicked".to_string())?)
    })?;
    node.barrier().map_err(e)?;
    let want = K * T as u64 * u64::from(node.size());
    {
        let g = r.read().map_err(e)?;
        let v = u64::from_le_bytes(g[0..8].try_into().map_err(|_| "size")?);
        check(v == want, || format!("counter {v}, expected {want}"))?;
    }
    let st = node.region_stats();
    check(st.write_misses > 0, || format!("no write miss: {st:?}"))?;
    node.barrier().map_err(e)
}

/// A region of 10,000 bytes written once by rank 0 is read many times by every node: one
/// miss per node (the copy stays cached across brackets); a later write invalidates every
/// copy, and the next reads see the new bytes.
fn read_sharing(node: &Node) -> Result<(), String> {
    const S: usize = 10_000;
    let r = shared_region(node, S)?;
    let pattern = |round: u8| (0..S).map(move |i| (i as u8).wrapping_mul(7) ^ round);
    if node.rank() == NodeId(0) {
        let mut w = r.write().map_err(e)?;
        for (b, v) in w.iter_mut().zip(pattern(1)) {
            *b = v;
        }
    }
    node.barrier().map_err(e)?;
    let before = node.region_stats();
    for _ in 0..50 {
        let g = r.read().map_err(e)?;
        check(g.iter().copied().eq(pattern(1)), || {
            "round 1 bytes differ".into()
        })?;
    }
    let after = node.region_stats();
    let misses = after.read_misses - before.read_misses;
    let hits = after.read_hits - before.read_hits;
    // The home holds the written copy (a hit); every other node misses once.
    let want_misses = u64::from(node.rank() != NodeId(0));
    check(misses == want_misses && hits == 50 - want_misses, || {
        format!("50 reads: {misses} misses and {hits} hits, expected {want_misses} misses")
    })?;
    node.barrier().map_err(e)?;
    if node.rank() == NodeId(0) {
        let mut w = r.write().map_err(e)?;
        for (b, v) in w.iter_mut().zip(pattern(2)) {
            *b = v;
        }
    }
    node.barrier().map_err(e)?;
    {
        let g = r.read().map_err(e)?;
        check(g.iter().copied().eq(pattern(2)), || {
            "round 2 bytes differ".into()
        })?;
    }
    let st = node.region_stats();
    if node.rank() != NodeId(0) {
        check(st.invalidations == 1, || {
            format!("expected the write to invalidate this copy once: {st:?}")
        })?;
    }
    node.barrier().map_err(e)
}

/// Every node creates its own region (ids exchanged through page-based shared memory), fills
/// it, and every node reads every other node's; then each node flushes and deletes.
fn per_node(node: &Node) -> Result<(), String> {
    let n = usize::from(node.size());
    let me = usize::from(node.rank().0);
    let ids = node
        .alloc_collective(8 * n, Placement::Node(NodeId(0)))
        .map_err(e)? as *mut u64;
    let size = 1000 + 333 * me;
    let mine = node.region_create(size).map_err(e)?;
    // SAFETY: `ids` has n u64 of shared memory; each node writes its own slot before the
    // barrier, everyone reads after it.
    unsafe { ids.add(me).write_volatile(mine.0) };
    {
        let r = node.region_map(mine).map_err(e)?;
        let mut w = r.write().map_err(e)?;
        w.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i + me) as u8);
    }
    node.barrier().map_err(e)?;
    for k in 0..n {
        // SAFETY: as above.
        let rid = RegionId(unsafe { ids.add(k).read_volatile() });
        check(rid.home() == NodeId(k as u16), || format!("{rid} home"))?;
        let r = node.region_map(rid).map_err(e)?;
        check(r.size() == 1000 + 333 * k, || {
            format!("{rid} size {}", r.size())
        })?;
        {
            let g = r.read().map_err(e)?;
            check(
                g.iter().enumerate().all(|(i, b)| *b == (i + k) as u8),
                || format!("{rid} bytes"),
            )?;
        }
        r.flush().map_err(e)?;
    }
    node.barrier().map_err(e)?;
    node.region_delete(mine).map_err(e)?;
    node.barrier().map_err(e)?;
    // A deleted region cannot be mapped.
    let gone = RegionId(unsafe { ids.add((me + 1) % n).read_volatile() });
    check(node.region_map(gone).is_err(), || {
        format!("{gone} still maps")
    })?;
    node.barrier().map_err(e)
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("counter", counter, &["hlrc"]),
    ("read_sharing", read_sharing, &["hlrc"]),
    ("per_node", per_node, &["hlrc"]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_matrix(SCENARIOS, &args, Axes::TCP, |label, _, spec| {
        let mut udp = spec.clone();
        udp.extra_env
            .push(("SQUALL_TRANSPORT".into(), "udp".into()));
        let tcp = run_case(&format!("{label}/tcp"), &spec);
        run_case(&format!("{label}/udp"), &udp) && tcp
    })
}

//! Multi-node tests of user-written protocols: the two examples of `examples/protocols`
//! (migratory, write-update), registered through `squall::protocol::register` before the
//! node starts, each keeping an allocation coherent beside allocations under the job's
//! default (`hlrc`), synchronized by the same locks and barriers, and under 4 threads per
//! node. Each runs as 2- and 4-node jobs over tcp and over lossy udp.
//!
//! Run: `cargo test -p squall --test user_protocols` (add `-- NAME` to filter by case label).
use squall::protocol::{self, ProtocolKind};
use squall::{AtomicOp, BarrierCount, BarrierId, LockId, Node, Placement, Policy, PAGE_SIZE};
use squall_example_protocols::{Migratory, WriteUpdate};

mod common;
use common::{
    check, launched_as_node, node_exit, on_threads, run_case, run_matrix, write_meet_check, Axes,
    Scenario,
};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Every node registers the two protocols, in this order, before the node starts.
fn register() -> Result<(ProtocolKind, ProtocolKind), String> {
    let mig = protocol::register("migratory", |_, _| Box::new(Migratory::new())).map_err(err)?;
    let upd =
        protocol::register("write-update", |_, _| Box::new(WriteUpdate::new())).map_err(err)?;
    Ok((mig, upd))
}

/// Node 0 allocates `bytes` under `policy`; every node gets the address.
fn shared(node: &Node, bytes: usize, policy: Policy) -> Result<*mut u64, String> {
    let mine = if node.rank().0 == 0 {
        Some(node.alloc_policy(bytes, policy).map_err(err)? as u64)
    } else {
        None
    };
    Ok(node.broadcast(mine).map_err(err)? as usize as *mut u64)
}

/// Messages this node sent of the protocol messages counted under `name`.
fn sent(node: &Node, name: &str) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get("sent"))
        .and_then(|p| p.get(name))
        .and_then(|c| c.get("messages"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

const RECORDS: usize = 6;
/// u64 words per record: count, sum of ranks, last writer, padding to 64 bytes.
const RECORD_WORDS: usize = 8;
const ROUNDS: u64 = 8;

/// Lock-protected records under the migratory protocol, six to a 64-byte-record area spread
/// over two pages, and a tally under the default protocol updated under the same locks. Every
/// node visits every record each round (starting at its own rank), adding one to its count
/// and its rank to its sum. The counts, sums and tallies must be exact; an atomic on the
/// migratory memory is refused.
fn migratory_records(node: &Node) -> Result<(), String> {
    let (mig, _) = register()?;
    let (me, n) = (u64::from(node.rank().0), u64::from(node.size()));
    let place = Placement::FirstTouch;
    // Records 0..2 on the first page, 3..5 on the second.
    let records = shared(node, 2 * PAGE_SIZE, Policy::new(mig, false, place))?;
    let rec = |r: usize| -> *mut u64 {
        let page = r / 3;
        // SAFETY: inside the two-page allocation (3 records of 64 bytes per page).
        unsafe { records.add(page * PAGE_SIZE / 8 + (r % 3) * RECORD_WORDS) }
    };
    let tally = shared(node, RECORDS * 8, node.default_policy())?;
    let got = node.policy_of(records as *const u8).map_err(err)?;
    check(got.protocol == mig, || {
        format!("records follow {:?}", got.protocol)
    })?;
    for round in 0..ROUNDS {
        for k in 0..RECORDS {
            let r = (k + me as usize + round as usize) % RECORDS;
            node.lock(LockId(10 + r as u64)).map_err(err)?;
            let p = rec(r);
            // SAFETY: record r and tally word r are touched only under lock 10 + r.
            unsafe {
                p.write_volatile(p.read_volatile() + 1);
                p.add(1).write_volatile(p.add(1).read_volatile() + me);
                p.add(2).write_volatile(me);
                let t = tally.add(r);
                t.write_volatile(t.read_volatile() + 1);
            }
            node.unlock(LockId(10 + r as u64)).map_err(err)?;
        }
    }
    node.barrier().map_err(err)?;
    for r in 0..RECORDS {
        let p = rec(r);
        // SAFETY: after the barrier nobody writes.
        let (count, sum, t) = unsafe {
            (
                p.read_volatile(),
                p.add(1).read_volatile(),
                tally.add(r).read_volatile(),
            )
        };
        check(count == n * ROUNDS && t == n * ROUNDS, || {
            format!(
                "record {r}: count {count}, tally {t}, expected {}",
                n * ROUNDS
            )
        })?;
        let want = ROUNDS * n * (n - 1) / 2;
        check(sum == want, || {
            format!("record {r}: sum {sum}, expected {want}")
        })?;
    }
    // User protocols offer no atomics: the call fails instead of touching the word.
    let refused = node.atomic(records, AtomicOp::FetchAdd(1)).is_err();
    check(refused, || {
        "an atomic on migratory memory was not refused".into()
    })?;
    node.barrier().map_err(err)?;
    // The records moved between nodes: every node asked for them at least once.
    check(n < 2 || sent(node, "migratory") > 0, || {
        format!("node {me} sent no migratory message")
    })
}

/// Words in each node's block of the write-update allocation (two and a half pages).
const UPD_WORDS: usize = 5 * PAGE_SIZE / 16;

/// Producer/consumer under the write-update protocol: every node allocates its own block
/// (so every node is the home of some pages) and publishes the address through a table
/// under the default protocol. Each round every node writes its block, meets the others at
/// a barrier and checks every block; then every node adds to a counter in node 0's block
/// under a lock (several writers of one page, merged by diffs at its home). Every value
/// and the count must be exact, and copies were updated in place.
fn update_producer_consumer(node: &Node) -> Result<(), String> {
    let (_, upd) = register()?;
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let table = shared(node, n * 8, node.default_policy())?;
    let mine = node
        .alloc_policy(
            (UPD_WORDS + 1) * 8,
            Policy::new(upd, false, Placement::FirstTouch),
        )
        .map_err(err)? as *mut u64;
    // SAFETY: word `me` of the n-word table is written only by this node.
    unsafe { table.add(me).write_volatile(mine as u64) };
    node.barrier().map_err(err)?;
    // SAFETY: written before the barrier.
    let blocks: Vec<*mut u64> = (0..n)
        .map(|k| unsafe { table.add(k).read_volatile() } as usize as *mut u64)
        .collect();
    let value = |r: u64, k: usize, i: usize| (r + 1) << 40 | (k as u64) << 32 | i as u64;
    for r in 0..ROUNDS {
        for i in 0..UPD_WORDS {
            // SAFETY: this node's own block; others only read it after the barrier.
            unsafe { mine.add(i).write_volatile(value(r, me, i)) };
        }
        node.barrier().map_err(err)?;
        for (k, b) in blocks.iter().enumerate() {
            for i in (0..UPD_WORDS).step_by(37) {
                // SAFETY: block k, written before the barrier.
                let v = unsafe { b.add(i).read_volatile() };
                check(v == value(r, k, i), || {
                    format!(
                        "round {r}: block {k} word {i} is {v:#x}, expected {:#x}",
                        value(r, k, i)
                    )
                })?;
            }
        }
        // The counter after node 0's block: updated under lock 3 by every node.
        node.lock(LockId(3)).map_err(err)?;
        // SAFETY: word UPD_WORDS of node 0's block, touched only under lock 3.
        unsafe {
            let c = blocks[0].add(UPD_WORDS);
            c.write_volatile(c.read_volatile() + 1);
        }
        node.unlock(LockId(3)).map_err(err)?;
        node.barrier().map_err(err)?;
    }
    // SAFETY: after the last barrier.
    let count = unsafe { blocks[0].add(UPD_WORDS).read_volatile() };
    check(count == n as u64 * ROUNDS, || {
        format!("counter {count}, expected {}", n as u64 * ROUNDS)
    })?;
    check(n < 2 || sent(node, "write-update") > 0, || {
        format!("node {me} sent no write-update message")
    })
}

/// Threads per node in `user_threads`.
const T: usize = 4;

/// 4 threads per node share the node's copies: under each user protocol in turn, all threads
/// of all nodes write disjoint words of shared pages (every page has writers on every node),
/// meet at a barrier and check every word; two rounds each. Concurrent faults on one page,
/// and (write-update) one thread's release carrying another's writes.
fn user_threads(node: &Node) -> Result<(), String> {
    let (mig, upd) = register()?;
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let words = PAGE_SIZE / 8 * n;
    for (k, kind) in [mig, upd].into_iter().enumerate() {
        let policy = Policy::new(kind, false, Placement::RoundRobin { block_pages: 1 });
        let a = node
            .alloc_collective_policy(words * 8, policy)
            .map_err(err)? as usize;
        on_threads(node, T, move |node, t| {
            let gid = me * T + t;
            for round in 0..2u64 {
                // SAFETY: `a` points to `words` u64 of shared memory; each thread writes only
                // its own words between the barriers.
                unsafe {
                    write_meet_check(
                        &node,
                        a as *mut u64,
                        words,
                        (gid, T, n),
                        |i| (k as u64 + 1) * 1000 + round * 7 + i as u64,
                        &format!(" protocol {k} round {round}"),
                    )?
                };
                node.barrier_with(BarrierId(1), BarrierCount::PerNode { local: T as u32 })
                    .map_err(err)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("user_threads", user_threads, &["hlrc"]),
    ("migratory_records", migratory_records, &["hlrc"]),
    (
        "update_producer_consumer",
        update_producer_consumer,
        &["hlrc"],
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        // Registration must precede `squall::init`, which `node_exit` calls.
        if let Err(e) = register() {
            eprintln!("registering the user protocols: {e}");
            std::process::exit(2);
        }
        node_exit(SCENARIOS, &args);
    }
    run_matrix(SCENARIOS, &args, Axes::ALL, |label, _, spec| {
        run_case(label, &spec)
    })
}

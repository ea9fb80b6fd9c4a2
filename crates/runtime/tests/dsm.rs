//! Multi-node tests of the shared address space through the public API: every scenario runs
//! as 2 or 4 separate node processes (this test binary re-executed by the launcher library),
//! over the real transport and the real fault path.
//!
//! Run: `cargo test -p squall --test dsm` (add `-- NAME` to run the scenarios whose name
//! contains NAME). With `SQUALL_DSM_LAUNCHER=mpirun` every job is one `mpirun -n N` over the
//! mpi transport (build with `--features squall-net/mpi`).
use squall::{BarrierCount, BarrierId, LockId, Node, Placement, PAGE_SIZE};
use squall_launch::MpirunOptions;
use std::time::{Duration, Instant};

mod common;
use common::{check, launched_as_node, node_exit, run_case, run_matrix, threads, Axes, Scenario};

/// Every node writes its block of a shared array, a barrier, every node reads all of it.
fn array(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let words_per_node = 3 * PAGE_SIZE / 8 + 17; // blocks straddle page boundaries
    let total = words_per_node * n;
    let a = node
        .alloc_collective(total * 8, Placement::FirstTouch)
        .map_err(|e| e.to_string())? as *mut u64;
    for round in 0..3u64 {
        for i in me * words_per_node..(me + 1) * words_per_node {
            // SAFETY: `a` points to `total` u64 of shared memory; i < total.
            unsafe { a.add(i).write_volatile(round * 1_000_000 + i as u64) };
        }
        node.barrier().map_err(|e| e.to_string())?;
        for i in 0..total {
            // SAFETY: as above.
            let v = unsafe { a.add(i).read_volatile() };
            check(v == round * 1_000_000 + i as u64, || {
                format!(
                    "round {round}: word {i} is {v}, expected {}",
                    round * 1_000_000 + i as u64
                )
            })?;
        }
        node.barrier().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Two (or more) nodes write different words of the same page at the same time; after a
/// barrier every node sees all the writes (multiple-writer merge).
fn false_sharing(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let p = node
        .alloc_collective(PAGE_SIZE, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as *mut u64;
    let words = PAGE_SIZE / 8;
    for round in 1..=5u64 {
        for i in (me..words).step_by(n) {
            // SAFETY: p points to one page of shared memory; i < words.
            unsafe { p.add(i).write_volatile(round * 10_000 + i as u64) };
        }
        node.barrier().map_err(|e| e.to_string())?;
        for i in 0..words {
            // SAFETY: as above.
            let v = unsafe { p.add(i).read_volatile() };
            check(v == round * 10_000 + i as u64, || {
                format!("round {round}: word {i} = {v}")
            })?;
        }
        node.barrier().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Gauss's cyclic rows in small: every node writes its own words of the same pages at every
/// step (write-write false sharing), then a barrier; everybody checks every word. The copies a
/// barrier's notices take come back at the barrier writable (a barrier fetch with a fresh
/// twin), so a step costs no fetch on demand and no twin fault: this node's write faults stay
/// far below one per page and step (a node with its own diff still unacked at the barrier
/// takes the page on demand instead, so the bound is half of that).
fn false_sharing_steps(node: &Node) -> Result<(), String> {
    const PAGES: usize = 8;
    const STEPS: u64 = 12;
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let p = node
        .alloc_collective(PAGES * PAGE_SIZE, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as *mut u64;
    let words = PAGES * PAGE_SIZE / 8;
    let value = |step: u64, i: usize| step * 1_000_000 + i as u64;
    let before = protocol_count(node, "write_faults");
    for step in 1..=STEPS {
        for i in (me..words).step_by(n) {
            // SAFETY: p points to PAGES pages of shared memory; i < words.
            unsafe { p.add(i).write_volatile(value(step, i)) };
        }
        node.barrier().map_err(|e| e.to_string())?;
        for i in 0..words {
            // SAFETY: as above; read between the barrier after the writes and the next.
            let v = unsafe { p.add(i).read_volatile() };
            check(v == value(step, i), || {
                format!("step {step}: word {i} = {v}, expected {}", value(step, i))
            })?;
        }
        node.barrier().map_err(|e| e.to_string())?;
    }
    let faults = protocol_count(node, "write_faults") - before;
    // One per page and step without it; about one per page with it (a few more when a diff
    // is still unacked at the barrier, as under loss).
    let limit = PAGES as u64 * STEPS / 2;
    check(faults <= limit, || {
        format!(
            "node {me}: {faults} write faults in {STEPS} steps over {PAGES} pages (at most \
             {limit} expected: copies lost at a barrier come back writable)"
        )
    })
}

/// Under first touch a node that first touched its block is that block's home: touching it
/// again after others have read it costs no page fetch.
fn first_touch(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let pages_per_node = 4;
    let a = node
        .alloc_collective(n * pages_per_node * PAGE_SIZE, Placement::FirstTouch)
        .map_err(|e| e.to_string())?;
    let mine = |i: usize| unsafe { a.add(me * pages_per_node * PAGE_SIZE + i) };
    for pg in 0..pages_per_node {
        // SAFETY: inside this node's block of the allocation.
        unsafe { mine(pg * PAGE_SIZE).write_volatile(me as u8 + 1) };
    }
    node.barrier().map_err(|e| e.to_string())?;
    // Everybody reads everybody's block.
    for r in 0..n {
        for pg in 0..pages_per_node {
            // SAFETY: inside the allocation.
            let v = unsafe { a.add((r * pages_per_node + pg) * PAGE_SIZE).read_volatile() };
            check(v == r as u8 + 1, || format!("node {r} page {pg}: {v}"))?;
        }
    }
    node.barrier().map_err(|e| e.to_string())?;
    let before = fetches(node);
    for pg in 0..pages_per_node {
        // SAFETY: inside this node's block.
        unsafe { mine(pg * PAGE_SIZE + 8).write_volatile(7) };
        let v = unsafe { mine(pg * PAGE_SIZE).read_volatile() };
        check(v == me as u8 + 1, || format!("own page {pg}: {v}"))?;
    }
    let after = fetches(node);
    check(after == before, || {
        format!(
            "node {me} fetched {} pages of its own first-touched block",
            after - before
        )
    })?;
    node.barrier().map_err(|e| e.to_string())
}

/// `calloc` of memory never handed out writes nothing, so the pages' homes still go to their
/// first toucher (not to the allocating node); a reused small chunk is zeroed.
fn calloc_first_touch(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let pages_per_node = 4;
    let slot = node
        .alloc_array_collective::<u64>(1, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())?;
    if me == 0 {
        let small = node.calloc(1, 100).map_err(|e| e.to_string())?;
        // SAFETY: 100 bytes just allocated.
        unsafe { std::ptr::write_bytes(small, 0xab, 100) };
        node.free(small).map_err(|e| e.to_string())?;
        let again = node.calloc(1, 100).map_err(|e| e.to_string())?;
        // SAFETY: 100 bytes just allocated.
        let bytes = unsafe { std::slice::from_raw_parts(again, 100) };
        check(bytes.iter().all(|b| *b == 0), || {
            format!("reused chunk at {again:p} not zeroed by calloc")
        })?;
        let big = node
            .calloc(n * pages_per_node, PAGE_SIZE)
            .map_err(|e| e.to_string())?;
        slot.set(0, big as u64);
    }
    node.barrier().map_err(|e| e.to_string())?;
    let a = slot.get(0) as usize as *mut u8;
    let mine = |i: usize| unsafe { a.add(me * pages_per_node * PAGE_SIZE + i) };
    let first = fetches(node);
    for pg in 0..pages_per_node {
        // SAFETY: inside this node's block of the calloc'd range.
        let v = unsafe { mine(pg * PAGE_SIZE + 8).read_volatile() };
        check(v == 0, || {
            format!("calloc'd page {pg} of node {me} holds {v}")
        })?;
        unsafe { mine(pg * PAGE_SIZE).write_volatile(me as u8 + 1) };
    }
    let touched = fetches(node);
    check(touched == first, || {
        format!(
            "node {me} fetched {} pages on first touching its calloc'd block (calloc made them homed elsewhere)",
            touched - first
        )
    })?;
    node.barrier().map_err(|e| e.to_string())?;
    for r in 0..n {
        // SAFETY: inside the calloc'd range.
        let v = unsafe { a.add(r * pages_per_node * PAGE_SIZE).read_volatile() };
        check(v == r as u8 + 1, || format!("node {r}'s first page: {v}"))?;
    }
    node.barrier().map_err(|e| e.to_string())?;
    let before = fetches(node);
    for pg in 0..pages_per_node {
        // SAFETY: inside this node's block.
        unsafe { mine(pg * PAGE_SIZE + 16).write_volatile(7) };
    }
    let after = fetches(node);
    check(after == before, || {
        format!(
            "node {me} fetched {} pages of its own first-touched calloc'd block",
            after - before
        )
    })?;
    node.barrier().map_err(|e| e.to_string())
}

fn fetches(node: &Node) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get("page_fetches"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// DSM/IP lock_test: every thread of every node increments one shared counter under one lock.
fn lock_counter(node: &Node) -> Result<(), String> {
    const T: usize = 2;
    const ITERS: u64 = 200;
    let c = node
        .alloc_collective(8, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as usize;
    let mut hs = Vec::new();
    for _ in 0..T {
        let node = node.clone();
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            for _ in 0..ITERS {
                node.lock(LockId(5)).map_err(|e| e.to_string())?;
                // SAFETY: c is 8 bytes of shared memory; the lock orders the accesses.
                unsafe {
                    let p = c as *mut u64;
                    p.write_volatile(p.read_volatile() + 1);
                }
                node.unlock(LockId(5)).map_err(|e| e.to_string())?;
            }
            Ok(())
        }));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked".to_string())??;
    }
    node.barrier().map_err(|e| e.to_string())?;
    // SAFETY: as above, after the barrier.
    let v = unsafe { (c as *const u64).read_volatile() };
    let want = ITERS * T as u64 * node.size() as u64;
    check(v == want, || format!("counter is {v}, expected {want}"))
}

fn sync_count(node: &Node, name: &str) -> u64 {
    sync_of(&node.stats(), name)
}

fn sync_of(st: &squall::stats::NodeStats, name: &str) -> u64 {
    st.counts
        .get("sync")
        .and_then(|p| p.get(name))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Statistics marks: rank 0 alone marks the start and the end of a phase; every node's phase
/// counts exactly the barriers and lock acquires between the marks (the mark's message reaches
/// the others before rank 0's next barrier message), while the whole run counts more.
fn stats_mark(node: &Node) -> Result<(), String> {
    let e = |x: squall::SquallError| x.to_string();
    let work = |rounds: u64| -> Result<(), String> {
        for r in 0..rounds {
            for i in 0..8u64 {
                node.lock(LockId(3000 + (i + r) % 8)).map_err(e)?;
                node.unlock(LockId(3000 + (i + r) % 8)).map_err(e)?;
            }
        }
        Ok(())
    };
    work(2)?;
    node.barrier().map_err(e)?;
    if node.rank().0 == 0 {
        check(node.stats_phase().is_none(), || {
            "a phase before any mark".to_string()
        })?;
        node.stats_mark().map_err(e)?;
    }
    // Barriers are managed by rank 0: its departures follow its mark on every pair (FIFO).
    node.barrier().map_err(e)?; // A: in the phase
    work(3)?;
    node.barrier().map_err(e)?; // B: in the phase
    if node.rank().0 == 0 {
        node.stats_mark().map_err(e)?;
    }
    node.barrier().map_err(e)?; // C: after it
    work(5)?;
    node.barrier().map_err(e)?;
    let phase = node.stats_phase().ok_or("no phase after two marks")?;
    let run = node.stats();
    let acquires = |st: &squall::stats::NodeStats| {
        sync_of(st, "lock_acquires_local")
            + sync_of(st, "lock_acquires_local_fast")
            + sync_of(st, "lock_acquires_remote")
    };
    check(sync_of(&phase, "barrier_episodes") == 2, || {
        format!(
            "{} barriers in the phase, expected 2",
            sync_of(&phase, "barrier_episodes")
        )
    })?;
    check(acquires(&phase) == 24, || {
        format!(
            "{} lock acquires in the phase, expected 24",
            acquires(&phase)
        )
    })?;
    check(acquires(&run) >= 80, || {
        format!(
            "{} lock acquires in the run, expected at least 80",
            acquires(&run)
        )
    })?;
    check(
        phase.breakdown.sync_s <= run.breakdown.sync_s + 1e-9
            && phase.breakdown.task_s <= run.breakdown.task_s + 1e-3,
        || {
            format!(
                "phase times {:?} above the run's {:?}",
                phase.breakdown, run.breakdown
            )
        },
    )
}

/// Water's lock pattern: 3 threads per node each sweep 96 locks in id order from their own
/// starting point, adding to the lock's counter (8 counters per 512 bytes: several locks
/// guard words of one page), barrier, again. Every counter must come out exact; on 2 nodes
/// lock read-ahead must have lent tokens (about a quarter of the acquires take one here, as
/// six sweeps cross), on 4 nodes none.
fn lock_sweep(node: &Node) -> Result<(), String> {
    const T: usize = 3;
    const K: usize = 96;
    const ROUNDS: u64 = 4;
    const STRIDE: usize = 8; // u64 words between counters
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let c = node
        .alloc_collective((K * STRIDE + 8) * 8, Placement::Blocked)
        .map_err(|e| e.to_string())? as usize;
    let mut hs = Vec::new();
    for t in 0..T {
        let node = node.clone();
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            let start = (me * T + t) * K / (n * T);
            for _ in 0..ROUNDS {
                for o in 0..K {
                    let i = (start + o) % K;
                    node.lock(LockId(1000 + i as u64))
                        .map_err(|e| e.to_string())?;
                    // SAFETY: c has K * STRIDE u64 of shared memory; lock 1000 + i orders the
                    // accesses to counter i.
                    unsafe {
                        let p = (c as *mut u64).add(i * STRIDE);
                        let v = p.read_volatile();
                        std::hint::spin_loop();
                        p.write_volatile(v + 1);
                    }
                    node.unlock(LockId(1000 + i as u64))
                        .map_err(|e| e.to_string())?;
                }
                node.barrier_with(BarrierId(3), BarrierCount::PerNode { local: T as u32 })
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked".to_string())??;
    }
    // Each node's lent acquires into the word after the counters (node 0 adds them up).
    let lent = sync_count(node, "lock_acquires_lent");
    node.lock(LockId(999)).map_err(|e| e.to_string())?;
    // SAFETY: the word after the counters; lock 999 orders the accesses.
    unsafe {
        let p = (c as *mut u64).add(K * STRIDE);
        p.write_volatile(p.read_volatile() + lent);
    }
    node.unlock(LockId(999)).map_err(|e| e.to_string())?;
    node.barrier().map_err(|e| e.to_string())?;
    for i in 0..K {
        // SAFETY: as above, after the barrier.
        let v = unsafe { (c as *const u64).add(i * STRIDE).read_volatile() };
        let want = ROUNDS * (T * n) as u64;
        check(v == want, || format!("counter {i} is {v}, expected {want}"))?;
    }
    // SAFETY: as above, after the barrier.
    let lent_all = unsafe { (c as *const u64).add(K * STRIDE).read_volatile() };
    let acquires = ROUNDS * (K * T * n) as u64;
    check(n != 2 || lent_all > 0, || {
        format!("none of {acquires} acquires took a lent token on 2 nodes")
    })?;
    check(n == 2 || lent_all == 0, || {
        format!("{lent_all} lent acquires on {n} nodes")
    })
}

/// A racy flag handoff (no locks): node 0 writes data then a flag; the others spin on the flag
/// with plain loads, must then see the data, and answer with a plain store to their ack word.
/// Correct only under `sc`: the words live in an `sc` allocation even when the run's default
/// protocol is `hlrc`.
fn sc_flag_handoff(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    // The racy words are allocated under `sc` whatever the run's default protocol: a
    // per-allocation protocol choice.
    let mine = if node.rank().0 == 0 {
        let p = node
            .alloc_in(
                3 * PAGE_SIZE,
                0,
                Placement::Node(squall::NodeId(0)),
                squall::ProtocolKind::Sc,
            )
            .map_err(|e| e.to_string())?;
        Some(p as u64)
    } else {
        None
    };
    let base = node.broadcast(mine).map_err(|e| e.to_string())? as usize;
    let flag = base as *mut u64;
    let data = (base + PAGE_SIZE) as *mut u64;
    let acks = (base + 2 * PAGE_SIZE) as *mut u64;
    let spin_until = |p: *mut u64, v: u64, what: &str| -> Result<(), String> {
        let t = Instant::now();
        // SAFETY: p is a word of the allocation.
        while unsafe { p.read_volatile() } < v {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("{what} never reached {v}"));
            }
            std::hint::spin_loop();
        }
        Ok(())
    };
    for round in 1..=20u64 {
        if node.rank().0 == 0 {
            for i in 0..64 {
                // SAFETY: data page of the allocation.
                unsafe { data.add(i).write_volatile(round * 100 + i as u64) };
            }
            // SAFETY: flag word of the allocation.
            unsafe { flag.write_volatile(round) };
            for r in 1..n {
                // SAFETY: ack words of the allocation.
                spin_until(unsafe { acks.add(r) }, round, &format!("ack of node {r}"))?;
            }
        } else {
            spin_until(flag, round, "the flag")?;
            for i in 0..64 {
                // SAFETY: data page of the allocation.
                let v = unsafe { data.add(i).read_volatile() };
                check(v == round * 100 + i as u64, || {
                    format!("round {round}: data[{i}] = {v} after the flag")
                })?;
            }
            // SAFETY: this node's ack word.
            unsafe { acks.add(node.rank().0 as usize).write_volatile(round) };
        }
    }
    node.barrier().map_err(|e| e.to_string())
}

/// Allocation and free from any node: each node allocates, another node frees; a double
/// free is a clear error.
fn alloc_free(node: &Node) -> Result<(), String> {
    let n = node.size();
    let me = node.rank().0;
    let slots = node
        .alloc_collective(8 * n as usize, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as *mut u64;
    let p = node.alloc(1000).map_err(|e| e.to_string())?;
    // SAFETY: 1000 bytes just allocated.
    unsafe { std::ptr::write_bytes(p, me as u8 + 1, 1000) };
    // SAFETY: slot `me` of the shared table.
    unsafe { slots.add(me as usize).write_volatile(p as u64) };
    node.barrier().map_err(|e| e.to_string())?;
    let victim = (me + 1) % n;
    // SAFETY: slot of another node, published before the barrier.
    let q = unsafe { slots.add(victim as usize).read_volatile() } as *mut u8;
    // SAFETY: the other node's 1000-byte allocation, written before the barrier.
    let b = unsafe { q.add(999).read_volatile() };
    check(b == victim as u8 + 1, || {
        format!("byte of node {victim}'s block is {b}")
    })?;
    node.barrier().map_err(|e| e.to_string())?;
    node.free(q)
        .map_err(|e| format!("free of node {victim}'s block: {e}"))?;
    let again = node.free(q);
    check(again.is_err(), || "double free was accepted".into())?;
    let mut local = 7u64;
    check(
        node.free(&mut local as *mut u64 as *mut u8).is_err(),
        || "free of a stack pointer accepted".into(),
    )?;
    node.barrier().map_err(|e| e.to_string())
}

/// The body of threads created on other nodes: the argument points to a shared record
/// `[input, output]`; it reads the input the creator wrote before creating it and writes
/// output = input * 2 + its node's rank marker.
extern "C" fn doubler(arg: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
    let rec = arg as *mut u64;
    // SAFETY: the creator passes a pointer to two u64 of shared memory.
    unsafe {
        let input = rec.read_volatile();
        rec.add(1).write_volatile(input * 2);
    }
    (arg as usize + 1) as *mut std::ffi::c_void
}

/// Node 0 creates threads on every node (round robin and named), each reads what node 0
/// wrote before the create and writes a result that node 0 sees after the join.
fn remote_threads(node: &Node) -> Result<(), String> {
    let n = node.size() as usize;
    let per = 3;
    let recs = node
        .alloc_collective(16 * n * per, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as *mut u64;
    if node.rank().0 == 0 {
        let mut tids = Vec::new();
        for i in 0..n * per {
            // SAFETY: record i of the shared table.
            let rec = unsafe { recs.add(2 * i) };
            unsafe { rec.write_volatile(1000 + i as u64) };
            let on = if i % 2 == 0 {
                None
            } else {
                Some(squall::NodeId((i % n) as u16))
            };
            let tid = node
                .spawn_on(on, doubler, rec as *mut std::ffi::c_void)
                .map_err(|e| e.to_string())?;
            tids.push((i, tid));
        }
        for (i, tid) in tids {
            let ret = node.join(tid).map_err(|e| e.to_string())?;
            // SAFETY: record i, after the join.
            let rec = unsafe { recs.add(2 * i) };
            check(ret as usize == rec as usize + 1, || {
                format!("thread {i} returned {ret:?}")
            })?;
            let out = unsafe { rec.add(1).read_volatile() };
            check(out == 2 * (1000 + i as u64), || {
                format!("thread {i} wrote {out}")
            })?;
        }
        check(node.join(squall::ThreadId(12345)).is_err(), || {
            "join of an unknown thread succeeded".into()
        })?;
    }
    node.barrier().map_err(|e| e.to_string())
}

/// One of this node's protocol counters (0 if absent).
fn protocol_count(node: &Node, name: &str) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get(name))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Pages and rounds of `remote_barrier_fetch`.
const RBF_PAGES: usize = 8;
const RBF_ROUNDS: u64 = 10;

/// The thread `remote_barrier_fetch` starts on node 1: each round, between two total-count
/// barriers with node 0's main, checks what node 0 wrote before the first. Returns its node's
/// barrier fetches, or `u64::MAX` if a value was wrong.
extern "C" fn rbf_reader(arg: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
    let data = arg as *const u64;
    let total = BarrierCount::Total { total: 2 };
    let Ok(node) = squall::node() else {
        return u64::MAX as usize as *mut std::ffi::c_void;
    };
    let mut ok = true;
    for r in 0..RBF_ROUNDS {
        ok &= node.barrier_with(BarrierId(21), total).is_ok();
        for p in 0..RBF_PAGES {
            // SAFETY: `data` spans RBF_PAGES pages of shared memory; read after the barrier
            // that followed node 0's writes.
            let v = unsafe { data.add(p * PAGE_SIZE / 8).read_volatile() };
            ok &= v == r * 100 + p as u64;
        }
        ok &= node.barrier_with(BarrierId(22), total).is_ok();
    }
    let fetched = protocol_count(&node, "barrier_fetches");
    let ret = if ok { fetched } else { u64::MAX };
    ret as usize as *mut std::ffi::c_void
}

/// Single-system-image shape (the C apps' `pthread_create` on a remote node): node 1's main
/// is in `finalize` from the start while a thread node 0 started there reads, each round, the
/// pages node 0 rewrote. The barrier fetches must still bring those pages to node 1 (they were
/// off for a whole node that was finalizing, running threads or not), and the job must end
/// cleanly (no fetch after the last barrier).
fn remote_barrier_fetch(node: &Node) -> Result<(), String> {
    let data = node
        .alloc_collective(RBF_PAGES * PAGE_SIZE, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())? as *mut u64;
    if node.rank().0 != 0 {
        return Ok(());
    }
    let total = BarrierCount::Total { total: 2 };
    let tid = node
        .spawn_on(
            Some(squall::NodeId(1)),
            rbf_reader,
            data as *mut std::ffi::c_void,
        )
        .map_err(|e| e.to_string())?;
    for r in 0..RBF_ROUNDS {
        for p in 0..RBF_PAGES {
            // SAFETY: page p of the block, written between node 1's reads.
            unsafe {
                data.add(p * PAGE_SIZE / 8)
                    .write_volatile(r * 100 + p as u64)
            };
        }
        node.barrier_with(BarrierId(21), total)
            .map_err(|e| e.to_string())?;
        node.barrier_with(BarrierId(22), total)
            .map_err(|e| e.to_string())?;
    }
    let fetched = node.join(tid).map_err(|e| e.to_string())? as usize as u64;
    check(fetched != u64::MAX, || "node 1 read a wrong value".into())?;
    // Round 0 is a demand fetch; later rounds' pages were used lately and come at the barrier.
    check(fetched > 0, || {
        "node 1 made no barrier fetch while its thread ran".into()
    })
}

/// Every thread of every node adds to one counter with remote atomics; the total is exact.
fn atomics(node: &Node) -> Result<(), String> {
    const T: usize = 2;
    const ITERS: u64 = 100;
    let c = node
        .alloc_collective(16, Placement::Node(squall::NodeId(node.size() - 1)))
        .map_err(|e| e.to_string())? as usize;
    let mut hs = Vec::new();
    for _ in 0..T {
        let node = node.clone();
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            for _ in 0..ITERS {
                node.atomic(c as *mut u64, squall::AtomicOp::FetchAdd(1))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked".to_string())??;
    }
    node.barrier().map_err(|e| e.to_string())?;
    let v = node
        .atomic(c as *mut u64, squall::AtomicOp::FetchAdd(0))
        .map_err(|e| e.to_string())?;
    let want = ITERS * T as u64 * node.size() as u64;
    check(v == want, || {
        format!("atomic counter is {v}, expected {want}")
    })?;
    // compare-swap: only one node wins each round
    let slot = (c + 8) as *mut u64;
    let won = node
        .atomic(
            slot,
            squall::AtomicOp::CompareSwap {
                expected: 0,
                new: node.rank().0 as u64 + 1,
            },
        )
        .map_err(|e| e.to_string())?
        == 0;
    node.barrier().map_err(|e| e.to_string())?;
    let winner = node
        .atomic(slot, squall::AtomicOp::FetchAdd(0))
        .map_err(|e| e.to_string())?;
    check(
        winner >= 1 && (won == (winner == node.rank().0 as u64 + 1)),
        || format!("compare-swap winner {winner}, this node won: {won}"),
    )?;
    node.barrier().map_err(|e| e.to_string())
}

/// DSM/IP barrier_test: 10^4 barriers across all threads of all nodes (3 per node); every
/// 1000 episodes each thread publishes the episode number and checks everyone's.
fn barrier_test(node: &Node) -> Result<(), String> {
    const T: usize = 3;
    const EPISODES: u64 = 10_000;
    let n = node.size() as usize;
    let slots = node
        .alloc_array_collective::<u64>(n * T, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())?;
    let me = node.rank().0 as usize;
    let mut hs = Vec::new();
    for t in 0..T {
        let node = node.clone();
        hs.push(std::thread::spawn(move || -> Result<u64, String> {
            let gid = me * T + t;
            let mut serial = 0;
            for e in 1..=EPISODES {
                if e % 1000 == 0 {
                    slots.set(gid, e);
                }
                let s = node
                    .barrier_with(BarrierId(9), BarrierCount::PerNode { local: T as u32 })
                    .map_err(|x| format!("episode {e}: {x}"))?;
                serial += u64::from(s);
                if e % 1000 == 0 {
                    for g in 0..n * T {
                        let v = slots.get(g);
                        check(v == e, || format!("episode {e}: thread {g}'s slot is {v}"))?;
                    }
                    node.barrier_with(BarrierId(10), BarrierCount::PerNode { local: T as u32 })
                        .map_err(|x| x.to_string())?;
                }
            }
            Ok(serial)
        }));
    }
    let mut serial = 0;
    for h in hs {
        serial += h.join().map_err(|_| "thread panicked".to_string())??;
    }
    // Exactly one thread of the whole job is told it is the serial one per episode.
    let total = node
        .alloc_array_collective::<u64>(1, Placement::Node(squall::NodeId(0)))
        .map_err(|e| e.to_string())?;
    node.atomic(total.as_ptr(), squall::AtomicOp::FetchAdd(serial))
        .map_err(|e| e.to_string())?;
    node.barrier().map_err(|e| e.to_string())?;
    let all = node
        .atomic(total.as_ptr(), squall::AtomicOp::FetchAdd(0))
        .map_err(|e| e.to_string())?;
    check(all == EPISODES, || {
        format!("{all} serial threads over {EPISODES} episodes")
    })
}

/// Pages per node and rounds of `push_updates`.
const PU_PAGES: usize = 4;
const PU_ROUNDS: u64 = 12;

/// Producer/consumer sharing under `SQUALL_PUSH_UPDATES=1`: each round every node rewrites
/// the pages it is home of (a blocked allocation), and after a barrier every node reads all
/// pages. Every value must be the round's, and the homes' pushes must have kept copies up to
/// date (pushes taken on every node).
fn push_updates(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let words = PAGE_SIZE / 8;
    let data = node
        .alloc_collective(n * PU_PAGES * PAGE_SIZE, Placement::Blocked)
        .map_err(|e| e.to_string())? as *mut u64;
    let value = |r: u64, page: usize| r * 1000 + page as u64;
    for r in 0..PU_ROUNDS {
        for p in me * PU_PAGES..(me + 1) * PU_PAGES {
            for w in [0, words / 2, words - 1] {
                // SAFETY: page p of the block this node is home of, inside the allocation.
                unsafe { data.add(p * words + w).write_volatile(value(r, p)) };
            }
        }
        node.barrier().map_err(|e| e.to_string())?;
        for p in 0..n * PU_PAGES {
            for w in [0, words / 2, words - 1] {
                // SAFETY: inside the allocation; read after the barrier that followed the
                // home's writes, before the next round's.
                let v = unsafe { data.add(p * words + w).read_volatile() };
                check(v == value(r, p), || {
                    format!(
                        "round {r}: page {p} word {w} is {v}, expected {}",
                        value(r, p)
                    )
                })?;
            }
        }
        node.barrier().map_err(|e| e.to_string())?;
    }
    let taken = protocol_count(node, "pushes_taken");
    check(taken > 0, || "no push updated a copy on this node".into())
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("array", array, &["hlrc", "sc"]),
    ("false_sharing", false_sharing, &["hlrc", "sc"]),
    ("false_sharing_steps", false_sharing_steps, &["hlrc"]),
    ("first_touch", first_touch, &["hlrc"]),
    ("calloc_first_touch", calloc_first_touch, &["hlrc"]),
    ("threads", threads, &["hlrc", "sc"]),
    ("lock_counter", lock_counter, &["hlrc", "sc"]),
    ("lock_sweep", lock_sweep, &["hlrc", "sc"]),
    ("stats_mark", stats_mark, &["hlrc"]),
    ("sc_flag_handoff", sc_flag_handoff, &["hlrc", "sc"]),
    ("alloc_free", alloc_free, &["hlrc"]),
    ("remote_threads", remote_threads, &["hlrc", "sc"]),
    ("atomics", atomics, &["hlrc", "sc"]),
    ("barrier_test", barrier_test, &["hlrc", "hlrc+push"]),
    ("remote_barrier_fetch", remote_barrier_fetch, &["hlrc"]),
    ("push_updates", push_updates, &["hlrc+push"]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let under_mpi = std::env::var("SQUALL_TRANSPORT").is_ok_and(|t| t == "mpi");
    if launched_as_node() || under_mpi {
        node_exit(SCENARIOS, &args);
    }
    let mpirun = std::env::var("SQUALL_DSM_LAUNCHER").is_ok_and(|l| l == "mpirun");
    run_matrix(
        SCENARIOS,
        &args,
        if mpirun { Axes::TCP } else { Axes::ALL },
        |label, _, mut spec| {
            if mpirun {
                spec.transport = "mpi".into();
                spec.launcher = squall_launch::LauncherKind::Mpirun(MpirunOptions {
                    extra_args: ["--mca", "btl_vader_single_copy_mechanism", "none"]
                        .map(String::from)
                        .to_vec(),
                    ..MpirunOptions::default()
                });
            }
            run_case(label, &spec)
        },
    )
}

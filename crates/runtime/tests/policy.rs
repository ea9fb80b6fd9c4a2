//! Multi-node tests of per-allocation policies (the protocol router): allocations under
//! `hlrc`, `sc` and the update policy in one program, synchronized by the same locks and
//! barriers; an `sc` allocation larger than half of a node's share of the space; updates on
//! one allocation beside invalidation on another; freed memory reused under another policy;
//! coherence units of 4 and 16 pages beside one-page ones; allocations larger than a node's
//! share of the range (the global part).
//! Each runs as 2- and 4-node jobs under each default protocol its table names.
//!
//! Run: `cargo test -p squall --test policy` (add `-- NAME` to filter by case label).
use squall::{LockId, Node, NodeId, Placement, Policy, ProtocolKind, PAGE_SIZE};

mod common;
use common::{check, launched_as_node, node_exit, run_case, run_matrix, Axes, Scenario};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
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

fn protocol_count(node: &Node, name: &str) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get(name))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Words per node in each allocation of `mixed_policies`, and its rounds.
const MP_WORDS: usize = 3 * PAGE_SIZE / 8;
const MP_ROUNDS: u64 = 4;
const MP_INCS: u64 = 25;

/// Three allocations, one under each of `hlrc` (invalidation), `hlrc` with updates and `sc`,
/// whatever the run's default. Each round every node writes its block of all three and
/// meets the others at a barrier, then checks every block; then every node adds to one
/// counter in each allocation under one lock. The counts and every value must be exact.
fn mixed_policies(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let place = Placement::RoundRobin { block_pages: 1 };
    let policies = [
        Policy::new(ProtocolKind::Hlrc, false, place),
        Policy::new(ProtocolKind::Hlrc, true, place),
        Policy::new(ProtocolKind::Sc, false, place),
    ];
    let mut arrays = Vec::new();
    for p in policies {
        let a = shared(node, (n * MP_WORDS + 1) * 8, p)?;
        let got = node.policy_of(a as *const u8).map_err(err)?;
        check(
            got.protocol == p.protocol && got.updates == p.updates,
            || format!("node {me} sees {got:?} for an allocation made under {p:?}"),
        )?;
        arrays.push(a);
    }
    let value = |r: u64, k: usize, i: usize| (r + 1) * 1_000_000 + k as u64 * 100_000 + i as u64;
    for r in 0..MP_ROUNDS {
        for (k, a) in arrays.iter().enumerate() {
            for i in me * MP_WORDS..(me + 1) * MP_WORDS {
                // SAFETY: this node's block of allocation k (n * MP_WORDS + 1 words).
                unsafe { a.add(i).write_volatile(value(r, k, i)) };
            }
        }
        node.barrier().map_err(err)?;
        for (k, a) in arrays.iter().enumerate() {
            for i in (0..n * MP_WORDS).step_by(61) {
                // SAFETY: inside allocation k; written before the barrier.
                let v = unsafe { a.add(i).read_volatile() };
                check(v == value(r, k, i), || {
                    format!(
                        "round {r}: allocation {k} word {i} is {v}, expected {}",
                        value(r, k, i)
                    )
                })?;
            }
        }
        node.barrier().map_err(err)?;
    }
    let counter = |k: usize| arrays[k].wrapping_add(n * MP_WORDS);
    for _ in 0..MP_INCS {
        node.lock(LockId(7)).map_err(err)?;
        for k in 0..arrays.len() {
            // SAFETY: the counter word of allocation k, only touched under lock 7.
            unsafe { counter(k).write_volatile(counter(k).read_volatile() + k as u64 + 1) };
        }
        node.unlock(LockId(7)).map_err(err)?;
    }
    node.barrier().map_err(err)?;
    for k in 0..arrays.len() {
        // SAFETY: the counter word, read after the barrier that followed every increment.
        let v = unsafe { counter(k).read_volatile() };
        let want = n as u64 * MP_INCS * (k as u64 + 1);
        check(v == want, || {
            format!("counter of allocation {k} is {v}, expected {want}")
        })?;
    }
    Ok(())
}

/// An `sc` allocation of three quarters of node 0's share of the global range (more than
/// the half a protocol got when the space was split in halves): every node writes one word
/// in every 64th page of its stripe, including the last page, then every node checks a
/// sample of all of them; a racy flag handoff in its last page works without any lock.
fn big_sc(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let share = node.range().1 / n;
    let bytes = share / 4 * 3;
    let a = shared(
        node,
        bytes,
        Policy::new(ProtocolKind::Sc, false, Placement::FirstTouch),
    )?;
    let pages = bytes / PAGE_SIZE;
    let words = PAGE_SIZE / 8;
    let touched: Vec<usize> = (0..pages)
        .step_by(64)
        .chain(std::iter::once(pages - 2))
        .collect();
    for (j, &p) in touched.iter().enumerate() {
        if j % n == me {
            // SAFETY: page p < pages of the allocation.
            unsafe { a.add(p * words + 1).write_volatile(p as u64 * 3 + 1) };
        }
    }
    node.barrier().map_err(err)?;
    for (j, &p) in touched.iter().enumerate() {
        if j % 7 == me % 7 || p == pages - 2 {
            // SAFETY: as above.
            let v = unsafe { a.add(p * words + 1).read_volatile() };
            check(v == p as u64 * 3 + 1, || {
                format!("page {p} of {pages} holds {v}")
            })?;
        }
    }
    // sc: node 0 hands a value to everyone through a flag in the last page, no lock.
    let last = (pages - 1) * words;
    node.barrier().map_err(err)?;
    if me == 0 {
        // SAFETY: the last page of the allocation.
        unsafe {
            a.add(last + 8).write_volatile(4242);
            a.add(last).write_volatile(1);
        }
    } else {
        let t = std::time::Instant::now();
        // SAFETY: as above.
        while unsafe { a.add(last).read_volatile() } == 0 {
            check(t.elapsed().as_secs() < 20, || "the flag never came".into())?;
            std::hint::spin_loop();
        }
        // SAFETY: as above.
        let v = unsafe { a.add(last + 8).read_volatile() };
        check(v == 4242, || format!("flag seen, data {v}"))?;
    }
    node.barrier().map_err(err)
}

/// Pages per node of each allocation of `update_beside_invalidate`, and its rounds.
const UI_UPD: usize = 2;
const UI_INV: usize = 6;
const UI_ROUNDS: u64 = 10;

/// Producer/consumer sharing in two allocations, each node the home of its block and its
/// only writer: one under the update policy (homes push their pages to the copies at
/// barriers), one under invalidation, whatever the run's default. Every value read must be
/// the round's; pushes must have updated copies, and no more of them than the update
/// allocation's pages can account for (the invalidation allocation is never pushed).
fn update_beside_invalidate(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let words = PAGE_SIZE / 8;
    let upd = shared(
        node,
        n * UI_UPD * PAGE_SIZE,
        Policy::new(ProtocolKind::Hlrc, true, Placement::Blocked),
    )?;
    let inv = shared(
        node,
        n * UI_INV * PAGE_SIZE,
        Policy::new(ProtocolKind::Hlrc, false, Placement::Blocked),
    )?;
    let before = protocol_count(node, "pushes_taken");
    let value = |r: u64, k: u64, p: usize| r * 10_000 + k * 1000 + p as u64;
    for r in 0..UI_ROUNDS {
        for (k, a, per) in [(0, upd, UI_UPD), (1, inv, UI_INV)] {
            for p in me * per..(me + 1) * per {
                for w in [0, words / 2, words - 1] {
                    // SAFETY: page p of the block this node is home of.
                    unsafe { a.add(p * words + w).write_volatile(value(r, k, p)) };
                }
            }
        }
        node.barrier().map_err(err)?;
        for (k, a, per) in [(0, upd, UI_UPD), (1, inv, UI_INV)] {
            for p in 0..n * per {
                for w in [0, words / 2, words - 1] {
                    // SAFETY: inside the allocation, read after the barrier.
                    let v = unsafe { a.add(p * words + w).read_volatile() };
                    check(v == value(r, k, p), || {
                        format!("round {r}: allocation {k} page {p} word {w} is {v}")
                    })?;
                }
            }
        }
        node.barrier().map_err(err)?;
    }
    let taken = protocol_count(node, "pushes_taken") - before;
    let most = UI_ROUNDS * ((n - 1) * UI_UPD) as u64;
    check(taken > 0, || "no push updated a copy on this node".into())?;
    check(taken <= most, || {
        format!("{taken} pushes taken, but the update allocation accounts for at most {most}")
    })
}

/// Memory freed under one policy and allocated again under another: a small `sc` object's
/// page never takes `hlrc` objects (a page follows one protocol), a freed `sc` page range is
/// never handed out again, and every node sees each allocation's own policy.
fn free_reuse(node: &Node) -> Result<(), String> {
    let me = node.rank().0;
    let sc = Policy::new(ProtocolKind::Sc, false, Placement::FirstTouch);
    let hl = Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch);
    let mut ptrs = [0u64; 4];
    if me == 0 {
        let small = node.alloc_policy(64, sc).map_err(err)?;
        let big = node.alloc_policy(4 * PAGE_SIZE, sc).map_err(err)?;
        node.free(small).map_err(err)?;
        node.free(big).map_err(err)?;
        let small2 = node.alloc_policy(64, hl).map_err(err)?;
        let big2 = node.alloc_policy(4 * PAGE_SIZE, hl).map_err(err)?;
        check(
            small2 as usize / PAGE_SIZE != small as usize / PAGE_SIZE,
            || "an hlrc object went into an sc page".into(),
        )?;
        let (b, b2) = (big as usize, big2 as usize);
        check(b2 >= b + 4 * PAGE_SIZE || b2 + 4 * PAGE_SIZE <= b, || {
            "a freed sc page range was handed out again".into()
        })?;
        let small3 = node.alloc_policy(64, sc).map_err(err)?;
        check(small3 == small, || {
            "the freed sc object was not reused under sc".into()
        })?;
        ptrs = [small3 as u64, big as u64, small2 as u64, big2 as u64];
    }
    for p in &mut ptrs {
        *p = node.broadcast((me == 0).then_some(*p)).map_err(err)?;
    }
    for (i, want) in [sc, sc, hl, hl].iter().enumerate() {
        let got = node.policy_of(ptrs[i] as *const u8).map_err(err)?;
        check(got.protocol == want.protocol, || {
            format!("pointer {i}: node {me} sees {:?}", got.protocol)
        })?;
    }
    // The reused objects work under their policies on every node.
    node.lock(LockId(3)).map_err(err)?;
    for &p in &[ptrs[0], ptrs[2]] {
        let w = p as usize as *mut u64;
        // SAFETY: a live 64-byte allocation, touched only under lock 3.
        unsafe { w.write_volatile(w.read_volatile() + 1) };
    }
    node.unlock(LockId(3)).map_err(err)?;
    node.barrier().map_err(err)?;
    for &p in &[ptrs[0], ptrs[2]] {
        // SAFETY: as above, after the barrier.
        let v = unsafe { (p as usize as *const u64).read_volatile() };
        check(v == u64::from(node.size()), || format!("count {v}"))?;
    }
    Ok(())
}

/// Pages of each allocation of `units_beside_pages`, and its rounds.
const UN_PAGES: usize = 32;
const UN_ROUNDS: u64 = 3;
const UN_INCS: u64 = 10;

/// Three `hlrc` allocations side by side, in coherence units of 1, 4 and 16 pages, whatever
/// the run's default. Each round every node writes its own word of every page of all three
/// (false sharing inside each page and each unit), meets the others at a barrier and checks
/// every word; every node adds to a counter in each under one lock. Then node 0 writes every
/// page, and after a barrier each other node reads them all, one allocation at a time: a
/// unit comes whole with one fetch, so the fetches counted for an allocation of units of
/// `u` pages are at most its pages over `u`, fewer than the pages read. Node 0 is the home
/// of every page, so each other node fetches.
fn units_beside_pages(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let words = PAGE_SIZE / 8;
    let units = [1u32, 4, 16];
    let mut arrays = Vec::new();
    for u in units {
        let p = Policy {
            unit_pages: u,
            ..Policy::new(ProtocolKind::Hlrc, false, Placement::Node(NodeId(0)))
        };
        let a = shared(node, (UN_PAGES * words + 1) * 8, p)?;
        let got = node.policy_of(a as *const u8).map_err(err)?;
        check(
            got.unit_pages == u && got.protocol == ProtocolKind::Hlrc,
            || format!("node {me} sees {got:?} for an allocation in units of {u} pages"),
        )?;
        arrays.push(a);
    }
    let value = |r: u64, k: usize, p: usize, w: usize| {
        (r + 1) * 1_000_000 + k as u64 * 100_000 + p as u64 * 100 + w as u64
    };
    for r in 0..UN_ROUNDS {
        for (k, a) in arrays.iter().enumerate() {
            for p in 0..UN_PAGES {
                // SAFETY: word `me` of page p of allocation k (UN_PAGES pages).
                unsafe { a.add(p * words + me).write_volatile(value(r, k, p, me)) };
            }
        }
        node.barrier().map_err(err)?;
        for (k, a) in arrays.iter().enumerate() {
            for p in 0..UN_PAGES {
                for w in 0..n {
                    // SAFETY: inside allocation k; written before the barrier.
                    let v = unsafe { a.add(p * words + w).read_volatile() };
                    check(v == value(r, k, p, w), || {
                        format!("round {r}: unit {} page {p} word {w} is {v}", units[k])
                    })?;
                }
            }
        }
        node.barrier().map_err(err)?;
    }
    let counter = |k: usize| arrays[k].wrapping_add(UN_PAGES * words);
    for _ in 0..UN_INCS {
        node.lock(LockId(9)).map_err(err)?;
        for k in 0..arrays.len() {
            // SAFETY: the counter word of allocation k, only touched under lock 9.
            unsafe { counter(k).write_volatile(counter(k).read_volatile() + k as u64 + 1) };
        }
        node.unlock(LockId(9)).map_err(err)?;
    }
    node.barrier().map_err(err)?;
    for (k, u) in units.iter().enumerate() {
        // SAFETY: the counter word, read after the barrier that followed every increment.
        let v = unsafe { counter(k).read_volatile() };
        let want = n as u64 * UN_INCS * (k as u64 + 1);
        check(v == want, || {
            format!("counter of unit {u} is {v}, expected {want}")
        })?;
    }
    // Spatial locality: node 0 writes every page, the others read them all.
    if me == 0 {
        for (k, a) in arrays.iter().enumerate() {
            for p in 0..UN_PAGES {
                for w in [0, words / 2, words - 1] {
                    // SAFETY: inside allocation k.
                    unsafe { a.add(p * words + w).write_volatile(value(9, k, p, w)) };
                }
            }
        }
    }
    node.barrier().map_err(err)?;
    for (k, a) in arrays.iter().enumerate() {
        let before = protocol_count(node, "page_fetches");
        for p in 0..UN_PAGES {
            for w in [0, words / 2, words - 1] {
                // SAFETY: inside allocation k, written before the barrier.
                let v = unsafe { a.add(p * words + w).read_volatile() };
                check(v == value(9, k, p, w), || {
                    format!("unit {}: page {p} word {w} is {v}", units[k])
                })?;
            }
        }
        let fetches = protocol_count(node, "page_fetches") - before;
        let most = (UN_PAGES / units[k] as usize) as u64;
        check(fetches <= most, || {
            format!(
                "node {me}: {fetches} fetches to read {UN_PAGES} pages in units of {}, expected at most {most}",
                units[k]
            )
        })?;
        if me != 0 && units[k] > 1 {
            check(fetches > 0, || {
                format!(
                    "node {me}: reading node 0's writes in units of {} fetched nothing",
                    units[k]
                )
            })?;
        }
    }
    node.barrier().map_err(err)
}

/// Allocations larger than the range divided by the nodes, through the Rust API: a collective
/// array of five eighths of the range (160 GiB of the 256 the runner sets: homes blocked), and an `sc`
/// allocation of an eighth with round-robin homes made by the last node alone (its address
/// passed through the array). Every node writes its word in scattered pages of both and checks
/// every other node's; then asking for the whole range is refused with what was asked, what is
/// left and the setting, and the allocations are freed by nodes other than their makers.
fn beyond_share(node: &Node) -> Result<(), String> {
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let range = node.range().1;
    let words = PAGE_SIZE / 8;
    let a_bytes = range / 8 * 5;
    check(a_bytes > range / n, || {
        "the array must exceed a node's share".into()
    })?;
    let a = node
        .alloc_array_collective::<u64>(a_bytes / 8, Placement::Blocked)
        .map_err(err)?;
    let b_bytes = range / 8;
    if me == n - 1 {
        let p = node
            .alloc_policy(
                b_bytes,
                Policy::new(
                    ProtocolKind::Sc,
                    false,
                    Placement::RoundRobin { block_pages: 5 },
                ),
            )
            .map_err(err)?;
        a.set(0, p as u64);
    }
    node.barrier().map_err(err)?;
    let b = a.get(0) as usize as *mut u64;
    let (a_pages, b_pages) = (a_bytes / PAGE_SIZE, b_bytes / PAGE_SIZE);
    // The k-th page node r writes (never page 0, which carries b's address).
    let page = |r: usize, k: usize, pages: usize| {
        1 + (r * 7919 + k * 104_729).wrapping_mul(2_654_435_761) % (pages - 1)
    };
    const TOUCHES: usize = 200;
    for k in 0..TOUCHES {
        let p = page(me, k, a_pages);
        a.set(p * words + me, (p * 16 + me) as u64 + 1);
        let q = page(me, k, b_pages);
        // SAFETY: q < b_pages, inside the allocation of b_bytes.
        unsafe {
            b.add(q * words + me)
                .write_volatile((q * 16 + me) as u64 + 2)
        };
    }
    node.barrier().map_err(err)?;
    for r in 0..n {
        for k in 0..TOUCHES {
            let p = page(r, k, a_pages);
            let v = a.get(p * words + r);
            check(v == (p * 16 + r) as u64 + 1, || {
                format!("page {p} of the array: node {r}'s word is {v}")
            })?;
            let q = page(r, k, b_pages);
            // SAFETY: as above.
            let v = unsafe { b.add(q * words + r).read_volatile() };
            check(v == (q * 16 + r) as u64 + 2, || {
                format!(
                    "page {q} of node {}'s allocation: node {r}'s word is {v}",
                    n - 1
                )
            })?;
        }
    }
    node.barrier().map_err(err)?;
    if me == 0 || me == n - 1 {
        let e = match node.alloc(range) {
            Ok(_) => return Err("an allocation of the whole range succeeded".into()),
            Err(e) => e.to_string(),
        };
        check(
            e.contains("asked")
                && e.contains("left in the global part")
                && e.contains("SQUALL_HEAP_SIZE"),
            || format!("the refusal does not say what was asked, what is left, the fix: {e}"),
        )?;
    }
    node.barrier().map_err(err)?;
    if me == 0 {
        node.free(b as *mut u8).map_err(err)?;
    }
    if me == n - 1 {
        node.free(a.as_ptr() as *mut u8).map_err(err)?;
    }
    node.barrier().map_err(err)
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("mixed_policies", mixed_policies, &["hlrc", "sc"]),
    ("big_sc", big_sc, &["hlrc"]),
    ("beyond_share", beyond_share, &["hlrc", "sc"]),
    (
        "update_beside_invalidate",
        update_beside_invalidate,
        &["hlrc", "hlrc+push"],
    ),
    ("free_reuse", free_reuse, &["hlrc"]),
    ("units_beside_pages", units_beside_pages, &["hlrc", "sc"]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_matrix(SCENARIOS, &args, Axes::ALL, |label, _, mut spec| {
        // Big enough a range to have a global part (nothing is committed up front).
        if label.starts_with("beyond_share/") {
            spec.extra_env
                .push(("SQUALL_HEAP_SIZE".into(), "256G".into()));
        }
        run_case(label, &spec)
    })
}

//! Lock read-ahead (2-node jobs): a grant lends the idle tokens of the locks the requester
//! took next last time. Checked here: exact counters under the locks, the knowledge model (a
//! thread taking a lent lock sees the lock's last write), lends happening at all (and few
//! remote acquires on a Water-like sweep), overtaken hinted requests dropped in both manager
//! placements, and no lending on 3 or more nodes or when disabled.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rand::{Rng, SeedableRng};
use squall_sync::{BarrierCount, Outcome};

/// A Water-like sweep: each thread adds 1 to the counter of every lock in `order` (one
/// critical section each, with an interleaving point between read and write), then meets the
/// others at a per-node barrier; `rounds` times.
fn sweeper(order: Vec<u64>, rounds: usize, per_node: u32) -> impl Program {
    let mut round = 0;
    let mut pos = 0;
    let mut phase = 0;
    let mut tmp = 0;
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if let Some(r) = &last {
            assert!(matches!(r, Ok(Outcome::Done | Outcome::Serial)), "{r:?}");
        }
        if round == rounds {
            return None;
        }
        if pos == order.len() {
            pos = 0;
            round += 1;
            return Some(Op::Barrier(9, BarrierCount::PerNode { local: per_node }));
        }
        let l = order[pos];
        phase += 1;
        match phase {
            1 => Some(Op::Lock(l)),
            2 => {
                tmp = sh.get(&format!("c{l}"));
                Some(Op::Yield)
            }
            _ => {
                sh.set(&format!("c{l}"), tmp + 1);
                phase = 0;
                pos += 1;
                Some(Op::Unlock(l))
            }
        }
    })
}

struct Totals {
    remote: u64,
    lent: u64,
    lends: u64,
    unasked: u64,
    overtaken: u64,
}

fn totals(w: &World) -> Totals {
    let sum = |f: fn(&squall_sync::SyncStats) -> u64| w.cores.iter().map(|c| f(c.stats())).sum();
    Totals {
        remote: sum(|s| s.lock_acquires_remote),
        lent: sum(|s| s.lock_acquires_lent),
        lends: sum(|s| s.lock_lends),
        unasked: sum(|s| s.lock_lends_unasked),
        overtaken: sum(|s| s.lock_requests_overtaken),
    }
}

/// After a run no request is in flight, so no read-ahead wish may be left unanswered (a wish
/// left behind would keep its locks out of later hints).
fn assert_no_wishes_left(w: &World) {
    for (i, c) in w.cores.iter().enumerate() {
        assert_eq!(
            c.read_ahead_outstanding(),
            0,
            "seed {}: node {i} has unanswered read-ahead wishes",
            w.seed
        );
    }
}

/// Two nodes, one thread each, sweeping 512 locks from opposite halves (Water's pattern): once
/// the order is learned (round 1) and probing found it (a few dozen requests), almost every
/// acquire takes a lent token; every counter is exact (the knowledge model is checked by the
/// random runs below; here it would cost more than the rest).
#[test]
fn water_like_sweep_mostly_takes_lent_tokens() {
    let n = 512u64;
    let rounds = 4;
    for seed in seeds(10) {
        let mut w = World::new(seed, 2, [0.0, 0.5, 1.0][(seed % 3) as usize]);
        w.spawn(0, sweeper((0..n).collect(), rounds, 1));
        w.spawn(
            1,
            sweeper((0..n).map(|i| (i + n / 2) % n).collect(), rounds, 1),
        );
        w.run(5_000_000);
        for l in 0..n {
            assert_eq!(
                w.shared.get(&format!("c{l}")),
                2 * rounds as i64,
                "seed {seed}"
            );
        }
        assert_no_wishes_left(&w);
        let t = totals(&w);
        let acquires = 2 * n * rounds as u64;
        assert!(t.lends > 0 && t.lent > 0, "seed {seed}: nothing lent");
        assert!(
            t.remote * 4 < acquires,
            "seed {seed}: {} of {acquires} acquires were remote",
            t.remote
        );
    }
}

/// Random runs on 2 nodes with several threads per node: sweeps over a shared lock order from
/// random starting points, some with a nested lock held across (in a fixed global order), some
/// trylocks; release completion delayed at random; lender-side order off on some seeds.
/// Counters exact, the knowledge model holds, no read-ahead wish is left unanswered, and over
/// all seeds lends (asked and by the lender's order) and overtaken requests happen.
#[test]
fn random_runs_on_two_nodes_keep_counts_and_consistency() {
    let mut all = Totals {
        remote: 0,
        lent: 0,
        lends: 0,
        unasked: 0,
        overtaken: 0,
    };
    let n_seeds = seeds(150).count() as u64;
    for seed in seeds(150) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xa11ce);
        let locks = rng.gen_range(3..12u64);
        let per_node = rng.gen_range(1..4usize);
        let mut w = World::new(seed, 2, [0.0, 0.4, 0.9][(seed % 3) as usize]);
        w.deliver_bias = [0.2, 0.5, 0.8][(seed / 3 % 3) as usize];
        w.set_model();
        if seed % 5 == 4 {
            for c in &mut w.cores {
                c.set_lock_lender_order(false);
            }
        }
        let mut expect = vec![0i64; locks as usize];
        for node in 0..2 {
            for _ in 0..per_node {
                let mut ops = Vec::new();
                let start = rng.gen_range(0..locks);
                for k in 0..rng.gen_range(5..30u64) {
                    let l = (start + k) % locks;
                    if rng.gen_bool(0.15) {
                        // A trylock: counted only if it succeeds, so not part of the totals.
                        ops.push(Op::TryLock(l));
                        continue;
                    }
                    // The "hold" lock is the highest id, taken after l (global order).
                    let nested = l + 1 < locks && rng.gen_bool(0.2);
                    ops.push(Op::Lock(l));
                    if nested {
                        ops.push(Op::Lock(locks - 1));
                        ops.push(Op::Yield);
                        ops.push(Op::Unlock(locks - 1));
                    }
                    ops.push(Op::Yield);
                    ops.push(Op::Unlock(l));
                    expect[l as usize] += 1;
                    if nested {
                        expect[locks as usize - 1] += 1;
                    }
                }
                w.spawn(node, counting(ops));
            }
        }
        w.run(5_000_000);
        for (l, e) in expect.iter().enumerate() {
            assert_eq!(w.shared.get(&format!("c{l}")), *e, "seed {seed} lock {l}");
        }
        assert_no_wishes_left(&w);
        let t = totals(&w);
        all.remote += t.remote;
        all.lent += t.lent;
        all.lends += t.lends;
        all.unasked += t.unasked;
        all.overtaken += t.overtaken;
    }
    assert!(all.lends > 0 && all.lent > 0, "no lends in {n_seeds} seeds");
    assert!(all.unasked > 0, "no lender-order lends in {n_seeds} seeds");
    if n_seeds >= 100 {
        assert!(all.overtaken > 0, "no overtaken request in {n_seeds} seeds");
    }
}

/// A script whose `Lock`/`Unlock` pairs count: every critical section adds 1 to its lock's
/// counter (a trylock that succeeds is released at once without counting).
fn counting(ops: Vec<Op>) -> impl Program {
    let mut pos = 0;
    let mut tmp: Vec<(u64, i64)> = Vec::new();
    let mut unlocking_try = false;
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if std::mem::take(&mut unlocking_try) {
            assert_eq!(last, Some(Ok(Outcome::Done)));
        } else if let Some(r) = &last {
            match (ops[pos - 1], r) {
                (Op::Lock(l), Ok(Outcome::Done)) => tmp.push((l, sh.get(&format!("c{l}")))),
                (Op::TryLock(l), Ok(Outcome::Done)) => {
                    // Got it without waiting: give it back at once.
                    unlocking_try = true;
                    return Some(Op::Unlock(l));
                }
                (Op::TryLock(_), Ok(Outcome::Busy)) | (_, Ok(Outcome::Done)) => {}
                (op, r) => panic!("{op:?} -> {r:?}"),
            }
        }
        let op = ops.get(pos).copied()?;
        pos += 1;
        if let Op::Unlock(l) = op {
            let i = tmp.iter().position(|(x, _)| *x == l).unwrap();
            let (_, v) = tmp.remove(i);
            sh.set(&format!("c{l}"), v + 1);
        }
        Some(op)
    })
}

/// Three or more nodes never lend (the manager could not tell a lender's positions apart), and
/// `set_lock_read_ahead(0)` turns lending off on two.
#[test]
fn no_lends_on_three_nodes_or_when_disabled() {
    let n = 16u64;
    for (nodes, disable) in [(3u16, false), (4, false), (2, true)] {
        let mut w = World::new(7, nodes, 0.3);
        w.set_model();
        if disable {
            for c in &mut w.cores {
                c.set_lock_read_ahead(0);
            }
        }
        for node in 0..nodes {
            let off = n * u64::from(node) / u64::from(nodes);
            w.spawn(node, sweeper((0..n).map(|i| (i + off) % n).collect(), 3, 1));
        }
        w.run(5_000_000);
        for l in 0..n {
            assert_eq!(w.shared.get(&format!("c{l}")), 3 * i64::from(nodes));
        }
        let t = totals(&w);
        assert_eq!(t.lends, 0, "{nodes} nodes, disabled {disable}");
        assert_eq!(t.lent, 0);
    }
}

/// Hand-driven: node 0 learned the order x, y; both tokens are on node 1. Thread a of node 0
/// locks x (the request hints y); before the grant comes, thread b of node 0 locks y (a request
/// marked `hinted`). Node 1 grants x and lends y, then meets b's request (y managed by node 1)
/// or its forward (y managed by node 0) and drops it; b takes y from the lend.
#[test]
fn overtaken_hinted_request_is_dropped_for_either_manager() {
    for (x, y) in [(2u64, 3u64), (2, 4)] {
        let mut w = World::new(11, 2, 0.0);
        w.set_model();
        // Only the requester's own order here (the warm-up requests would use up the probe).
        for c in &mut w.cores {
            c.set_lock_lender_order(false);
        }
        let a = w.spawn(0, idle());
        let b = w.spawn(0, idle());
        let c = w.spawn(1, idle());
        for t in [a, c] {
            for l in [x, y] {
                w.issue(t, Op::Lock(l));
                w.quiesce();
                w.issue(t, Op::Unlock(l));
                w.quiesce();
            }
        }
        let before = w.msgs_total();
        w.issue(a, Op::Lock(x));
        w.issue(b, Op::Lock(y));
        assert!(w.is_blocked(a) && w.is_blocked(b));
        // Node 0 → node 1: x's request or forward (hinting y), then y's (marked hinted).
        assert!(w.deliver(0, 1));
        assert!(w.deliver(0, 1));
        assert_eq!(w.cores[1].stats().lock_requests_overtaken, 1, "x {x} y {y}");
        assert_eq!(w.cores[1].stats().lock_lends, 1);
        assert!(w.deliver(1, 0), "the grant of x lending y");
        w.quiesce();
        assert_eq!(w.last(a), Some(&Ok(Outcome::Done)));
        assert_eq!(w.last(b), Some(&Ok(Outcome::Done)));
        assert_eq!(
            w.msgs_total() - before,
            3,
            "request/forward, hinted request, grant"
        );
        // The queues are right afterwards: node 1 gets both back, then node 0 again.
        w.issue(c, Op::Lock(y));
        w.quiesce();
        assert!(w.is_blocked(c));
        w.issue(b, Op::Unlock(y));
        w.quiesce();
        assert_eq!(w.last(c), Some(&Ok(Outcome::Done)));
        w.issue(c, Op::Unlock(y));
        w.quiesce();
        w.issue(a, Op::Unlock(x));
        w.quiesce();
        for t in [c, a, b] {
            w.issue(t, Op::Lock(y));
            w.quiesce();
            assert_eq!(w.last(t), Some(&Ok(Outcome::Done)));
            w.issue(t, Op::Unlock(y));
            w.quiesce();
        }
        assert_eq!(w.in_flight(), 0);
    }
}

/// Lender-side order in Water's first time step: node 1 sweeps the locks first and node 0
/// follows over the same order, so node 0's requests know no order yet while node 1 has
/// learned it. With lender-side order node 1 lends the tokens it took after the requested
/// lock, and node 0's remote acquires fall well below those without it; counters exact and
/// the knowledge model holds.
#[test]
fn lender_order_serves_a_requester_without_an_order() {
    let n = 256u64;
    let mut remote = [0u64; 2];
    for (k, on) in [false, true].into_iter().enumerate() {
        for seed in seeds(8) {
            let mut w = World::new(seed, 2, [0.0, 0.5][(seed % 2) as usize]);
            w.set_model();
            for c in &mut w.cores {
                c.set_lock_lender_order(on);
            }
            // Node 1 runs first over the whole order, then node 0 follows.
            let sweep = || {
                counting(
                    (0..n)
                        .flat_map(|l| [Op::Lock(l), Op::Yield, Op::Unlock(l)])
                        .collect(),
                )
            };
            w.spawn(1, sweep());
            w.run(5_000_000);
            let before = w.cores[0].stats().lock_acquires_remote;
            w.spawn(0, sweep());
            w.run(5_000_000);
            for l in 0..n {
                assert_eq!(w.shared.get(&format!("c{l}")), 2, "seed {seed}");
            }
            assert_no_wishes_left(&w);
            remote[k] += w.cores[0].stats().lock_acquires_remote - before;
            if on {
                assert!(w.cores[1].stats().lock_lends_unasked > 0, "seed {seed}");
            } else {
                assert_eq!(w.cores[1].stats().lock_lends_unasked, 0, "seed {seed}");
            }
        }
    }
    assert!(
        remote[1] * 4 < remote[0],
        "remote acquires of the follower: {} with lender order, {} without",
        remote[1],
        remote[0]
    );
}

/// Hand-driven: node 1 took x then y and holds both tokens idle; node 0 never took them, so its
/// request for x names nothing but leaves the choice to the lender (`more`). Before the grant
/// comes, thread b of node 0 locks y: an unmarked request (y is in no hint list). Node 1 grants
/// x, lends y by its own order, and drops b's request (y managed by node 1) or its forward (y
/// managed by node 0) when it arrives; b takes y from the lend. The queues stay right.
#[test]
fn request_overtaken_by_an_unasked_lend_is_dropped_for_either_manager() {
    for (x, y) in [(2u64, 3u64), (2, 4)] {
        let mut w = World::new(12, 2, 0.0);
        w.set_model();
        let a = w.spawn(0, idle());
        let b = w.spawn(0, idle());
        let c = w.spawn(1, idle());
        for l in [x, y] {
            w.issue(c, Op::Lock(l));
            w.quiesce();
            w.issue(c, Op::Unlock(l));
            w.quiesce();
        }
        let before = w.msgs_total();
        w.issue(a, Op::Lock(x));
        w.issue(b, Op::Lock(y));
        assert!(w.is_blocked(a) && w.is_blocked(b));
        // Node 0 → node 1: x's forward (node 0 manages x), then y's request or forward.
        assert!(w.deliver(0, 1));
        assert_eq!(w.cores[1].stats().lock_lends_unasked, 1, "x {x} y {y}");
        assert!(w.deliver(0, 1));
        assert_eq!(w.cores[1].stats().lock_requests_overtaken, 1, "x {x} y {y}");
        assert!(w.deliver(1, 0), "the grant of x lending y");
        w.quiesce();
        assert_eq!(w.last(a), Some(&Ok(Outcome::Done)));
        assert_eq!(w.last(b), Some(&Ok(Outcome::Done)));
        assert_eq!(
            w.msgs_total() - before,
            3,
            "forward, request/forward, grant"
        );
        assert_eq!(w.cores[0].read_ahead_outstanding(), 0);
        // The queues are right afterwards: node 1 gets both back, then node 0 again.
        for (t, l) in [(a, x), (b, y)] {
            w.issue(c, Op::Lock(l));
            w.quiesce();
            assert!(w.is_blocked(c));
            w.issue(t, Op::Unlock(l));
            w.quiesce();
            assert_eq!(w.last(c), Some(&Ok(Outcome::Done)));
            w.issue(c, Op::Unlock(l));
            w.quiesce();
        }
        for t in [a, b, c] {
            for l in [y, x] {
                w.issue(t, Op::Lock(l));
                w.quiesce();
                assert_eq!(w.last(t), Some(&Ok(Outcome::Done)));
                w.issue(t, Op::Unlock(l));
                w.quiesce();
            }
        }
        assert_eq!(w.in_flight(), 0);
        assert_no_wishes_left(&w);
    }
}

//! Distributed queue locks: mutual exclusion, progress, FIFO across nodes, exact message counts,
//! consistency hook order, trylock, and misuse errors. DSM/IP §3.2.1.3 / §4 (lock_test) and
//! Tempest §4.3.1 (message-passing locks: ≤ 4 messages per lock/unlock pair).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_sync::{Outcome, SyncError};

/// Issues `op` on thread `t`, delivers until nothing moves, and returns `t`'s last outcome.
fn step(w: &mut World, t: usize, op: Op) -> Option<&OpResult> {
    w.issue(t, op);
    w.quiesce();
    w.last(t)
}

/// DSM/IP lock_test: every thread increments one counter under one lock, with an interleaving
/// point between the read and the write; the final count is exact.
fn lock_test(seed: u64, nodes: u16, per_node: usize, iters: i64, async_release: f64) {
    let mut w = World::new(seed, nodes, async_release);
    w.deliver_bias = [0.2, 0.5, 0.9][(seed / 3 % 3) as usize];
    for node in 0..nodes {
        for _ in 0..per_node {
            let mut i = 0;
            let mut tmp = 0;
            let mut phase = 0;
            w.spawn(
                node,
                Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
                    if let Some(r) = &last {
                        assert_eq!(r, &Ok(Outcome::Done));
                    }
                    phase += 1;
                    match phase {
                        1 => {
                            if i == iters {
                                return None;
                            }
                            Some(Op::Lock(7))
                        }
                        2 => {
                            tmp = sh.get("counter");
                            Some(Op::Yield)
                        }
                        _ => {
                            sh.set("counter", tmp + 1);
                            i += 1;
                            phase = 0;
                            Some(Op::Unlock(7))
                        }
                    }
                }),
            );
        }
    }
    w.run(5_000_000);
    let total = i64::from(nodes) * per_node as i64 * iters;
    assert_eq!(w.shared.get("counter"), total, "seed {seed}");
    let local: u64 = w.cores.iter().map(|c| c.stats().lock_acquires_local).sum();
    let remote: u64 = w.cores.iter().map(|c| c.stats().lock_acquires_remote).sum();
    assert_eq!(local + remote, total as u64, "seed {seed}");
}

#[test]
fn lock_test_many_seeds_and_shapes() {
    for seed in seeds(60) {
        let nodes = 1 + (seed % 5) as u16;
        let per_node = 1 + (seed % 3) as usize;
        let async_release = [0.0, 0.5, 1.0][(seed % 3) as usize];
        lock_test(seed, nodes, per_node, 20, async_release);
    }
}

#[test]
fn lock_test_eight_nodes_four_threads() {
    lock_test(4242, 8, 4, 25, 0.3);
}

/// Random mixes of several locks, trylocks and nested locking in a fixed global order.
#[test]
fn random_lock_scripts_never_deadlock() {
    for seed in seeds(60) {
        let nodes = 2 + (seed % 4) as u16;
        let mut w = World::new(seed, nodes, 0.4);
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed * 31 + 7);
        for node in 0..nodes {
            for _ in 0..2 {
                let mut ops = Vec::new();
                for _ in 0..15 {
                    use rand::Rng;
                    let a = rng.gen_range(0..4u64);
                    let b = rng.gen_range(0..4u64);
                    let (lo, hi) = (a.min(b), a.max(b));
                    ops.push(Op::Lock(lo));
                    if hi != lo {
                        ops.push(Op::Lock(hi));
                        ops.push(Op::Yield);
                        ops.push(Op::Unlock(hi));
                    }
                    ops.push(Op::Unlock(lo));
                }
                w.spawn(node, Script::new(ops));
            }
        }
        w.run(2_000_000);
    }
}

/// Tempest §4.3.1: an uncontended remote acquire + release is request → forward → grant (3
/// messages), the unlock costs nothing, and re-acquiring on the same node costs nothing.
#[test]
fn message_counts_remote_and_local() {
    for async_release in [0.0, 1.0] {
        let mut w = World::new(1, 3, async_release);
        let a = w.spawn(1, idle());
        let b = w.spawn(2, idle());
        // Lock 0 is managed by node 0 and its token starts there.
        assert_eq!(step(&mut w, a, Op::Lock(0)), Some(&Ok(Outcome::Done)));
        // Node 1 asked node 0 (manager, token holder): request + grant.
        assert_eq!(w.msgs_total(), 2);
        step(&mut w, a, Op::Unlock(0));
        assert_eq!(w.msgs_total(), 2, "unlock sends nothing");
        step(&mut w, a, Op::Lock(0));
        step(&mut w, a, Op::Unlock(0));
        assert_eq!(w.msgs_total(), 2, "local re-acquire sends nothing");
        // Node 2 now: request to manager 0, forward to node 1, grant from node 1 to node 2.
        assert_eq!(step(&mut w, b, Op::Lock(0)), Some(&Ok(Outcome::Done)));
        assert_eq!(w.msgs_total(), 5);
        assert_eq!(w.msgs_of("lock_request"), 2);
        assert_eq!(w.msgs_of("lock_forward"), 1);
        assert_eq!(w.msgs_of("lock_grant"), 2);
        for _ in 0..10 {
            step(&mut w, b, Op::Unlock(0));
            step(&mut w, b, Op::Lock(0));
        }
        assert_eq!(
            w.msgs_total(),
            5,
            "repeated local lock/unlock pairs send nothing"
        );
        assert_eq!(w.cores[2].stats().lock_acquires_remote, 1);
        assert_eq!(w.cores[2].stats().lock_acquires_local, 10);
    }
}

/// Contended remote pairs: every lock/unlock pair that moves the lock costs at most 4 messages.
#[test]
fn contended_pairs_cost_at_most_four_messages() {
    for seed in seeds(30) {
        let nodes = 2 + (seed % 5) as u16;
        let mut w = World::new(seed, nodes, 0.5);
        let iters = 10;
        for node in 0..nodes {
            let mut ops = Vec::new();
            for _ in 0..iters {
                ops.push(Op::Lock(3));
                ops.push(Op::Unlock(3));
            }
            w.spawn(node, Script::new(ops));
        }
        w.run(1_000_000);
        let pairs = u64::from(nodes) * iters;
        let remote: u64 = w.cores.iter().map(|c| c.stats().lock_acquires_remote).sum();
        assert!(
            w.msgs_total() <= 3 * remote,
            "seed {seed}: {} messages for {remote} remote acquires",
            w.msgs_total()
        );
        assert!(w.msgs_total() <= 4 * pairs);
    }
}

/// FIFO across nodes: nodes get the lock in the order the manager received their requests,
/// whatever the order the messages were sent in.
#[test]
fn fifo_across_nodes_in_manager_order() {
    // Lock 1 is managed by node 1; node 2 holds it first.
    let mut w = World::new(9, 4, 0.0);
    let t2 = w.spawn(2, idle());
    let t3 = w.spawn(3, idle());
    let t0 = w.spawn(0, idle());
    let t1 = w.spawn(1, idle());
    assert_eq!(step(&mut w, t2, Op::Lock(1)), Some(&Ok(Outcome::Done)));
    // Requests sent in the order 0, 3, then the manager's own; delivered to the manager 3 first.
    w.issue(t0, Op::Lock(1));
    w.issue(t3, Op::Lock(1));
    assert!(w.deliver(3, 1));
    assert!(w.deliver(0, 1));
    step(&mut w, t1, Op::Lock(1));
    for t in [t3, t0, t1] {
        assert!(w.is_blocked(t));
    }
    let order_start = w.lock_order.len();
    for holder in [t2, t3, t0, t1] {
        step(&mut w, holder, Op::Unlock(1));
    }
    let order: Vec<usize> = w.lock_order[order_start..]
        .iter()
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(order, vec![t3, t0, t1]);
}

/// Random runs: with one thread per node (none on the manager), the token visits the nodes in
/// exactly the order the manager received their requests.
#[test]
fn fifo_across_nodes_random_runs() {
    use squall_sync::message::Msg;
    for seed in seeds(60) {
        let nodes = 3 + (seed % 4) as u16;
        let mut w = World::new(seed, nodes, 0.5);
        w.deliver_bias = [0.3, 0.6, 0.9][(seed % 3) as usize];
        let lock = 0; // managed by node 0, which runs no thread
        let mut node_of = Vec::new();
        for node in 1..nodes {
            let ops = (0..8)
                .flat_map(|_| [Op::Lock(lock), Op::Yield, Op::Unlock(lock)])
                .collect();
            w.spawn(node, Script::new(ops));
            node_of.push(node);
        }
        w.run(1_000_000);
        let requests: Vec<u16> = w
            .deliveries
            .iter()
            .filter(|(_, to, m)| {
                *to == 0
                    && matches!(
                        Msg::decode(squall_core::NodeId(0), m),
                        Ok(Msg::LockRequest { .. })
                    )
            })
            .map(|(from, _, _)| *from)
            .collect();
        // A node re-acquires locally while nobody else asked: collapse those repeats.
        let mut grants: Vec<u16> = w.lock_order.iter().map(|(_, t)| node_of[*t]).collect();
        grants.dedup();
        assert_eq!(requests, grants, "seed {seed}");
    }
}

/// Threads of one node that queued before another node's request reached the holder go first;
/// a thread that queued after it waits behind the other node without cohort passes, and goes
/// first with them (`set_lock_cohort`).
#[test]
fn local_batch_then_successor() {
    for cohort in [0, 1] {
        let mut w = World::new(3, 2, 0.0);
        w.cores[0].set_lock_cohort(cohort);
        let a = w.spawn(0, idle());
        let b = w.spawn(0, idle());
        let c = w.spawn(0, idle());
        let r = w.spawn(1, idle());
        w.issue(a, Op::Lock(0));
        w.issue(b, Op::Lock(0)); // queued locally, no message
        w.quiesce();
        assert_eq!(w.msgs_total(), 0);
        w.issue(r, Op::Lock(0));
        w.quiesce(); // node 1's request reached the manager/holder node 0
        w.issue(c, Op::Lock(0)); // after the successor is known
        w.quiesce();
        let start = w.lock_order.len();
        step(&mut w, a, Op::Unlock(0));
        step(&mut w, b, Op::Unlock(0));
        if cohort == 0 {
            w.issue(r, Op::Unlock(0));
        } else {
            w.issue(c, Op::Unlock(0));
        }
        w.quiesce();
        let order: Vec<usize> = w.lock_order[start..].iter().map(|(_, t)| *t).collect();
        let want = if cohort == 0 {
            vec![b, r, c]
        } else {
            vec![b, c, r]
        };
        assert_eq!(order, want, "cohort bound {cohort}");
        assert_eq!(w.cores[0].stats().lock_cohort_passes, u64::from(cohort));
    }
}

/// The hooks happen in the documented order: acquire_info on the acquirer, begin_release on the
/// releaser (and its completion), grant_info(acquirer's info) there, apply_grant on the acquirer
/// before its thread wakes.
#[test]
fn consistency_hooks_in_documented_order() {
    for async_release in [0.0, 1.0] {
        let mut w = World::new(5, 3, async_release);
        let holder = w.spawn(1, idle());
        let acq = w.spawn(2, idle());
        step(&mut w, holder, Op::Lock(0));
        step(&mut w, holder, Op::Unlock(0));
        w.trace.borrow_mut().clear();
        step(&mut w, acq, Op::Lock(0));
        let tr = w.trace.borrow().clone();
        let acq_info = match &tr[0] {
            (2, Ev::AcquireInfo(i)) => i.clone(),
            other => panic!("first hook must be acquire_info on node 2, got {other:?}"),
        };
        let mut rest = tr[1..].iter();
        let (n, ev) = rest.next().unwrap();
        assert_eq!(*n, 1);
        let Ev::BeginRelease { token, done } = ev else {
            panic!("{ev:?}")
        };
        if !done {
            assert_eq!(rest.next().unwrap(), &(1, Ev::ReleaseDone(*token)));
        }
        let (n, ev) = rest.next().unwrap();
        assert_eq!(*n, 1);
        let Ev::GrantInfo { acquirer, out } = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(acquirer, &acq_info);
        assert_eq!(rest.next().unwrap(), &(2, Ev::ApplyGrant(out.clone())));
        let (n, ev) = rest.next().unwrap();
        assert_eq!(*n, 2);
        assert!(matches!(ev, Ev::Wake { thread, result: Ok(Outcome::Done), .. } if *thread == acq));
        assert!(rest.next().is_none());
    }
}

/// Over random runs: every remote grant is applied before the woken thread runs, and every
/// grant_info follows a completed begin_release on that node.
#[test]
fn hooks_order_holds_in_random_runs() {
    for seed in seeds(20) {
        lock_test(seed, 4, 2, 10, 0.5);
    }
    let mut w = World::new(77, 4, 0.7);
    for node in 0..4 {
        let ops = (0..10).flat_map(|_| [Op::Lock(5), Op::Unlock(5)]).collect();
        w.spawn(node, Script::new(ops));
    }
    w.run(1_000_000);
    let tr = w.trace.borrow();
    let mut released: std::collections::HashSet<(u16, u64)> = Default::default();
    let mut pending: std::collections::HashSet<(u16, u64)> = Default::default();
    let mut grants_seen = 0;
    for (node, ev) in tr.iter() {
        match ev {
            Ev::BeginRelease { token, done: true } => {
                released.insert((*node, *token));
            }
            Ev::BeginRelease { token, done: false } => {
                pending.insert((*node, *token));
            }
            Ev::ReleaseDone(token) => {
                assert!(pending.remove(&(*node, *token)));
                released.insert((*node, *token));
            }
            Ev::GrantInfo { .. } => {
                grants_seen += 1;
                assert!(
                    released.len() >= grants_seen,
                    "grant_info before its release completed"
                );
            }
            _ => {}
        }
    }
}

#[test]
fn trylock_semantics() {
    let mut w = World::new(2, 2, 0.0);
    let a = w.spawn(0, idle());
    let b = w.spawn(0, idle());
    let r = w.spawn(1, idle());
    // Token of lock 0 is on node 0: trylock succeeds without messages.
    assert_eq!(step(&mut w, a, Op::TryLock(0)), Some(&Ok(Outcome::Done)));
    // Held locally: busy, no message.
    assert_eq!(step(&mut w, b, Op::TryLock(0)), Some(&Ok(Outcome::Busy)));
    assert_eq!(w.msgs_total(), 0);
    // Re-trylock by the holder itself: busy (it holds it).
    assert_eq!(step(&mut w, a, Op::TryLock(0)), Some(&Ok(Outcome::Busy)));
    // Node 1: token elsewhere: busy at once, but the token is fetched once node 0 unlocks.
    w.issue(r, Op::TryLock(0));
    w.drain();
    assert_eq!(w.last(r), Some(&Ok(Outcome::Busy)));
    w.quiesce();
    step(&mut w, a, Op::Unlock(0));
    assert_eq!(step(&mut w, r, Op::TryLock(0)), Some(&Ok(Outcome::Done)));
    // Now node 0 trylocks: busy (token on node 1).
    assert_eq!(step(&mut w, b, Op::TryLock(0)), Some(&Ok(Outcome::Busy)));
    step(&mut w, r, Op::Unlock(0));
    // The fetch from node 0's busy trylock brought the token back.
    assert_eq!(step(&mut w, b, Op::TryLock(0)), Some(&Ok(Outcome::Done)));
    assert_eq!(
        w.cores[0].stats().trylock_busy + w.cores[1].stats().trylock_busy,
        4
    );
}

#[test]
fn misuse_is_a_typed_error() {
    let mut w = World::new(2, 2, 0.0);
    let a = w.spawn(0, idle());
    let b = w.spawn(0, idle());
    let r = w.spawn(1, idle());
    // Unlock of a never-locked lock.
    step(&mut w, a, Op::Unlock(4));
    assert!(matches!(w.last(a), Some(Err(SyncError::NotHolder { .. }))));
    step(&mut w, a, Op::Lock(4));
    // Unlock by another thread of the same node, and by a thread of another node.
    step(&mut w, b, Op::Unlock(4));
    let e = w.last(b).unwrap().clone().unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiter 1 on node 0 unlocked lock 4, which it does not hold"
    );
    step(&mut w, r, Op::Unlock(4));
    assert!(matches!(w.last(r), Some(Err(SyncError::NotHolder { .. }))));
    // Relock by the holder.
    step(&mut w, a, Op::Lock(4));
    assert!(matches!(w.last(a), Some(Err(SyncError::Deadlock { .. }))));
    // Destroy of a held lock, then of a lock someone waits for, then of a free one.
    step(&mut w, b, Op::DestroyLock(4));
    assert!(matches!(w.last(b), Some(Err(SyncError::LockInUse { .. }))));
    assert_eq!(step(&mut w, a, Op::Unlock(4)), Some(&Ok(Outcome::Done)));
    assert_eq!(
        step(&mut w, b, Op::DestroyLock(4)),
        Some(&Ok(Outcome::Done))
    );
    // Unknown release token.
    let e = w.cores[0]
        .release_done(&mut w.cons[0], 999_999)
        .unwrap_err();
    assert!(matches!(
        e,
        SyncError::UnknownRelease { token: 999_999, .. }
    ));
}

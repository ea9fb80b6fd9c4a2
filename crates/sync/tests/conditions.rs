//! Condition variables (Mesa): producer/consumer over a bounded buffer, broadcast, no lost
//! wake-ups, signal without waiter is a no-op, misuse errors. CableS §2.3.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_sync::{Outcome, SyncError};

const LOCK: u64 = 10;
const NOT_EMPTY: u64 = 21;
const NOT_FULL: u64 = 22;
const CAP: i64 = 2;

/// Producer (`dir = 1`) or consumer (`dir = -1`) of `items` items; `broadcast` picks the wake-up.
fn worker(dir: i64, items: i64, broadcast: bool) -> impl Program {
    let mut done = 0;
    let mut state = 0;
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if let Some(r) = &last {
            assert_eq!(r, &Ok(Outcome::Done));
        }
        match state {
            0 => {
                if done == items {
                    return None;
                }
                state = 1;
                Some(Op::Lock(LOCK))
            }
            1 => {
                // Holding the lock (after lock or after a wait): Mesa — re-check.
                let buf = sh.get("buf");
                let blocked = if dir > 0 { buf >= CAP } else { buf <= 0 };
                if blocked {
                    let c = if dir > 0 { NOT_FULL } else { NOT_EMPTY };
                    return Some(Op::CondWait(c, LOCK));
                }
                sh.set("buf", buf + dir);
                assert!((0..=CAP).contains(&(buf + dir)));
                sh.add(if dir > 0 { "produced" } else { "consumed" }, 1);
                done += 1;
                state = 2;
                let c = if dir > 0 { NOT_EMPTY } else { NOT_FULL };
                Some(if broadcast {
                    Op::Broadcast(c)
                } else {
                    Op::Signal(c)
                })
            }
            _ => {
                state = 0;
                Some(Op::Unlock(LOCK))
            }
        }
    })
}

#[test]
fn producer_consumer_many_seeds() {
    for seed in seeds(60) {
        let nodes = 1 + (seed % 4) as u16;
        let mut w = World::new(seed, nodes, 0.3);
        w.deliver_bias = [0.2, 0.5, 0.9][(seed / 2 % 3) as usize];
        let producers = 1 + (seed % 3) as i64;
        let consumers = 1 + ((seed / 3) % 3) as i64;
        let items = 12 * consumers; // divisible among producers? give each producer its share
        let per_producer = items;
        let per_consumer = items * producers / consumers;
        let broadcast = seed % 2 == 1;
        for p in 0..producers {
            w.spawn((p as u16) % nodes, worker(1, per_producer, broadcast));
        }
        for c in 0..consumers {
            w.spawn(
                ((c + 1) as u16) % nodes,
                worker(-1, per_consumer, broadcast),
            );
        }
        w.run(5_000_000);
        assert_eq!(w.shared.get("produced"), items * producers, "seed {seed}");
        assert_eq!(w.shared.get("consumed"), items * producers, "seed {seed}");
        assert_eq!(w.shared.get("buf"), 0);
        let waits: u64 = w.cores.iter().map(|c| c.stats().cond_waits).sum();
        let signals: u64 = w.cores.iter().map(|c| c.stats().cond_signals).sum();
        assert_eq!(signals as i64, 2 * items * producers);
        assert!(waits <= signals * 8);
    }
}

#[test]
fn signal_without_waiter_is_lost_and_broadcast_wakes_all() {
    let mut w = World::new(1, 3, 0.0);
    let s = w.spawn(0, idle());
    let a = w.spawn(1, idle());
    let b = w.spawn(2, idle());
    let c = w.spawn(2, idle());
    // Signal before anyone waits: no effect.
    w.issue(s, Op::Signal(NOT_EMPTY));
    w.quiesce();
    assert_eq!(w.last(s), Some(&Ok(Outcome::Done)));
    for t in [a, b, c] {
        w.issue(t, Op::Lock(LOCK));
        w.quiesce();
        w.issue(t, Op::CondWait(NOT_EMPTY, LOCK));
        w.quiesce();
        assert!(w.is_blocked(t), "a signal before the wait must not wake it");
    }
    // One signal wakes exactly the oldest waiter, which gets the lock back.
    w.issue(s, Op::Signal(NOT_EMPTY));
    w.quiesce();
    assert_eq!(w.last(a), Some(&Ok(Outcome::Done)));
    assert!(w.cores[1].holds(squall_core::LockId(LOCK), squall_sync::Waiter(a as u64)));
    assert!(w.is_blocked(b) && w.is_blocked(c));
    // Broadcast while the lock is held: both wake in turn once the lock is released.
    w.issue(a, Op::Broadcast(NOT_EMPTY));
    w.quiesce();
    assert!(
        w.is_blocked(b) && w.is_blocked(c),
        "they still need the lock"
    );
    w.issue(a, Op::Unlock(LOCK));
    w.quiesce();
    let woken: Vec<usize> = [b, c].into_iter().filter(|t| !w.is_blocked(*t)).collect();
    assert_eq!(woken.len(), 1);
    w.issue(woken[0], Op::Unlock(LOCK));
    w.quiesce();
    assert!(!w.is_blocked(b) && !w.is_blocked(c));
}

#[test]
fn condition_misuse() {
    let mut w = World::new(1, 2, 0.0);
    let a = w.spawn(0, idle());
    let b = w.spawn(0, idle());
    // Wait without holding the lock.
    w.issue(a, Op::CondWait(1, 5));
    assert!(matches!(w.last(a), Some(Err(SyncError::NotHolder { .. }))));
    // Wait with a different lock than other waiters of this node.
    w.issue(a, Op::Lock(5));
    w.quiesce();
    w.issue(a, Op::CondWait(1, 5));
    w.quiesce();
    w.issue(b, Op::Lock(6));
    w.quiesce();
    w.issue(b, Op::CondWait(1, 6));
    let e = w.last(b).unwrap().clone().unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiter 1 on node 0 waited on condition 1 with lock 6 while other threads wait on it with lock 5"
    );
    // Destroying a condition with waiters, and the lock its waiters will re-acquire.
    w.issue(b, Op::DestroyCond(1));
    assert!(matches!(w.last(b), Some(Err(SyncError::CondInUse { .. }))));
    w.issue(b, Op::DestroyLock(5));
    assert!(matches!(w.last(b), Some(Err(SyncError::LockInUse { .. }))));
    w.issue(b, Op::Broadcast(1));
    w.quiesce();
    assert_eq!(w.last(a), Some(&Ok(Outcome::Done)));
    w.issue(b, Op::DestroyCond(1));
    assert_eq!(w.last(b), Some(&Ok(Outcome::Done)));
}

//! The node-local lock cache against the core, step by step on two nodes: what gets cached,
//! how a remote request or a local waiter takes a cached lock back (at once when idle, at the
//! holder's unlock when held), that the release before the token leaves comes after the last
//! cached critical section, and that misuse is still detected; and cohort passes (threads of a
//! node handing the lock among them, bounded, while another node waits).
#![allow(clippy::unwrap_used)]

use squall_core::{Consistency, LockId, NodeId};
use squall_sync::{Action, Outcome, SyncCore, SyncError, Waiter};

/// Counts releases (complete at once).
#[derive(Default)]
struct Rec {
    releases: u32,
}

impl Consistency for Rec {
    fn acquire_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn grant_info(&mut self, _: &[u8]) -> Vec<u8> {
        Vec::new()
    }
    fn apply_grant(&mut self, _: &[u8]) {}
    fn begin_release(&mut self, _: u64) -> bool {
        self.releases += 1;
        true
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn apply_barrier(&mut self, _: &[Vec<u8>]) {}
}

/// Lock 2 is managed by node 0 (`2 % 2`): its token starts there.
const L: u64 = 2;

struct Two {
    cores: [SyncCore; 2],
    cons: [Rec; 2],
    /// Wakes seen, per node: (waiter, result).
    woken: [Vec<(u64, Result<Outcome, SyncError>)>; 2],
}

impl Two {
    fn new() -> Two {
        Two {
            cores: [SyncCore::new(NodeId(0), 2), SyncCore::new(NodeId(1), 2)],
            cons: [Rec::default(), Rec::default()],
            woken: [Vec::new(), Vec::new()],
        }
    }

    /// Deliver every message until both cores are quiet; returns the messages delivered.
    fn run(&mut self) -> usize {
        let mut n = 0;
        loop {
            let mut sent = Vec::new();
            for i in 0..2 {
                while let Some(a) = self.cores[i].poll_action() {
                    match a {
                        Action::Send { to, msg } => sent.push((i, to, msg)),
                        Action::Wake { waiter, result } => self.woken[i].push((waiter.0, result)),
                        Action::ProtocolError { error } => panic!("{error}"),
                    }
                }
            }
            if sent.is_empty() {
                return n;
            }
            for (from, to, msg) in sent {
                n += 1;
                let j = usize::from(to.0);
                self.cores[j]
                    .handle_message(&mut self.cons[j], NodeId(from as u16), &msg)
                    .unwrap();
            }
        }
    }

    fn lock(&mut self, node: usize, w: u64) {
        self.cores[node].lock(&mut self.cons[node], LockId(L), Waiter(w));
        self.run();
    }

    fn unlock(&mut self, node: usize, w: u64) {
        self.cores[node].unlock(&mut self.cons[node], LockId(L), Waiter(w));
        self.run();
    }

    fn took(&mut self, node: usize, w: u64) -> bool {
        let i = self.woken[node].iter().position(|(x, _)| *x == w);
        i.map(|i| self.woken[node].remove(i).1) == Some(Ok(Outcome::Done))
    }
}

#[test]
fn an_idle_cached_lock_leaves_at_once_for_a_remote_request() {
    let mut t = Two::new();
    let fast = t.cores[0].fast_locks();
    assert!(
        !fast.try_lock(L, 1),
        "nothing is cached before the first unlock"
    );
    t.lock(0, 1);
    assert!(t.took(0, 1));
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    assert!(fast.is_idle(L), "the idle token is cached");
    for _ in 0..10 {
        assert!(fast.try_lock(L, 1));
        assert!(fast.try_unlock(L, 1));
    }
    assert_eq!(t.cores[0].stats_now().lock_acquires_local_fast, 10);
    assert_eq!(t.cores[0].stats().lock_acquires_local, 1);
    assert_eq!(t.cons[0].releases, 0, "local re-acquires need no release");
    t.lock(1, 7);
    assert!(t.took(1, 7), "the idle cached token went to node 1");
    assert_eq!(t.cons[0].releases, 1);
    assert!(!fast.try_lock(L, 1), "not cached any more");
    // Node 0 asks again: queued behind node 1, served at its unlock.
    t.lock(0, 1);
    assert!(!t.took(0, 1));
    t.unlock(1, 7);
    assert!(t.took(1, 7));
    assert!(t.took(0, 1));
    assert_eq!(t.cores[1].stats_now().lock_acquires_local_fast, 0);
}

#[test]
fn a_held_cached_lock_goes_at_its_holders_unlock_after_the_critical_section() {
    let mut t = Two::new();
    let fast = t.cores[0].fast_locks();
    t.lock(0, 1);
    t.unlock(0, 1);
    t.woken[0].clear();
    assert!(fast.try_lock(L, 1));
    // Node 1 asks while thread 1 of node 0 is inside its critical section.
    t.lock(1, 7);
    assert!(!t.took(1, 7), "granted while held");
    assert_eq!(t.cons[0].releases, 0, "released while held");
    assert_eq!(fast.holder(L), Some(1));
    assert!(
        !fast.try_unlock(L, 1),
        "the flagged lock's unlock must go through the core"
    );
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    assert_eq!(t.cons[0].releases, 1, "the release came at the unlock");
    assert!(t.took(1, 7));
    // The local re-acquire now waits for node 1 (no starvation of the remote node).
    assert!(!fast.try_lock(L, 1));
    t.lock(0, 1);
    assert!(!t.took(0, 1));
    t.unlock(1, 7);
    assert!(t.took(0, 1));
}

#[test]
fn a_local_waiter_gets_the_lock_from_a_cached_holder() {
    let mut t = Two::new();
    let fast = t.cores[0].fast_locks();
    t.lock(0, 1);
    t.unlock(0, 1);
    t.woken[0].clear();
    assert!(fast.try_lock(L, 1));
    t.lock(0, 2);
    assert!(!t.took(0, 2));
    assert!(!fast.try_unlock(L, 1));
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    assert!(t.took(0, 2));
    assert!(t.cores[0].holds(LockId(L), Waiter(2)));
    assert_eq!(
        t.run(),
        0,
        "no message for a hand-over between threads of a node"
    );
    assert_eq!(t.cons[0].releases, 0);
    // Its unlock puts the lock back in the cache.
    t.unlock(0, 2);
    assert!(t.took(0, 2));
    assert!(fast.is_idle(L));
}

#[test]
fn misuse_of_a_cached_lock_is_detected() {
    let mut t = Two::new();
    let fast = t.cores[0].fast_locks();
    t.lock(0, 1);
    t.unlock(0, 1);
    t.woken[0].clear();
    assert!(fast.try_lock(L, 1));
    assert!(t.cores[0].holds(LockId(L), Waiter(1)));
    assert!(!fast.try_lock(L, 1), "relock through the cache");
    t.lock(0, 1);
    assert!(matches!(
        t.woken[0].pop(),
        Some((1, Err(SyncError::Deadlock { .. })))
    ));
    assert!(!fast.try_unlock(L, 3));
    t.unlock(0, 3);
    assert!(matches!(
        t.woken[0].pop(),
        Some((3, Err(SyncError::NotHolder { .. })))
    ));
    t.cores[0].destroy_lock(LockId(L), Waiter(3));
    t.run();
    assert!(matches!(
        t.woken[0].pop(),
        Some((3, Err(SyncError::LockInUse { .. })))
    ));
    // The holder's unlock through the core (it took the slow path after the relock attempt).
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    t.cores[0].destroy_lock(LockId(L), Waiter(3));
    t.run();
    assert!(t.took(0, 3), "destroy of an idle cached lock");
    t.unlock(0, 1);
    assert!(matches!(
        t.woken[0].pop(),
        Some((1, Err(SyncError::NotHolder { .. })))
    ));
}

#[test]
fn the_cache_can_be_turned_off() {
    let mut t = Two::new();
    t.cores[0].set_lock_cache(false);
    let fast = t.cores[0].fast_locks();
    t.lock(0, 1);
    t.unlock(0, 1);
    assert!(!fast.try_lock(L, 1));
    t.lock(0, 1);
    t.unlock(0, 1);
    assert_eq!(t.cores[0].stats().lock_acquires_local, 2);
    assert_eq!(t.cores[0].stats_now().lock_acquires_local_fast, 0);
}

/// Cohort passes: threads of node 0 that queue after node 1's request came still go first,
/// at most the cohort bound in a row, each without a release or message; then the lock
/// leaves, and the next local thread waits for node 1.
#[test]
fn local_threads_pass_the_lock_before_it_leaves_up_to_the_cohort_bound() {
    let mut t = Two::new();
    t.cores[0].set_lock_cohort(2);
    t.lock(0, 1);
    assert!(t.took(0, 1));
    t.lock(1, 7);
    assert!(!t.took(1, 7), "held on node 0");
    t.lock(0, 2);
    t.lock(0, 3);
    assert!(!t.took(0, 2) && !t.took(0, 3));
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    assert!(t.took(0, 2), "a cohort pass");
    assert!(!t.took(1, 7));
    assert_eq!(
        t.cons[0].releases, 0,
        "a pass within the node needs no release"
    );
    t.lock(0, 4);
    t.unlock(0, 2);
    assert!(t.took(0, 2));
    assert!(t.took(0, 3), "the second pass");
    assert!(!t.took(1, 7));
    t.unlock(0, 3);
    assert!(t.took(0, 3));
    assert!(
        t.took(1, 7),
        "the bound reached, the lock leaves for node 1"
    );
    assert!(!t.took(0, 4), "thread 4 waits for node 1");
    assert_eq!(t.cons[0].releases, 1);
    assert_eq!(t.cores[0].stats().lock_cohort_passes, 2);
    t.unlock(1, 7);
    assert!(t.took(1, 7));
    assert!(t.took(0, 4), "node 0 asked again for its queued thread");
    t.unlock(0, 4);
    assert!(t.took(0, 4));
}

/// A cohort bound of 0 keeps the strict order: a thread that queues after another node's
/// request waits for that node.
#[test]
fn a_cohort_bound_of_zero_hands_the_lock_over_in_request_order() {
    let mut t = Two::new();
    t.cores[0].set_lock_cohort(0);
    t.lock(0, 1);
    assert!(t.took(0, 1));
    t.lock(1, 7);
    t.lock(0, 2);
    t.unlock(0, 1);
    assert!(t.took(0, 1));
    assert!(t.took(1, 7));
    assert!(!t.took(0, 2));
    t.unlock(1, 7);
    assert!(t.took(1, 7));
    assert!(t.took(0, 2));
    assert_eq!(t.cores[0].stats().lock_cohort_passes, 0);
}

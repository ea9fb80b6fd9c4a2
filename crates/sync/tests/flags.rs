//! Flags: waiters block (no spinning) until set; set is a release and a wait an acquire.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_sync::Outcome;

#[test]
fn waiters_wake_only_after_set_and_apply_the_setters_info() {
    for async_release in [0.0, 1.0] {
        let mut w = World::new(3, 3, async_release);
        let setter = w.spawn(1, idle());
        let waiters: Vec<usize> = [0, 0, 1, 2, 2]
            .iter()
            .map(|n| w.spawn(*n, idle()))
            .collect();
        for t in &waiters {
            w.issue(*t, Op::FlagWait(5));
        }
        w.quiesce();
        assert!(waiters.iter().all(|t| w.is_blocked(*t)));
        // One wait message per node at most (manager is node 2: only nodes 0 and 1 send).
        assert_eq!(w.msgs_of("flag_wait"), 2);
        w.trace.borrow_mut().clear();
        w.issue(setter, Op::FlagSet(5));
        w.quiesce();
        assert_eq!(w.last(setter), Some(&Ok(Outcome::Done)));
        assert!(waiters
            .iter()
            .all(|t| w.last(*t) == Some(&Ok(Outcome::Done))));
        // Order: release on the setter, grant_info(&[]), apply on remote waiting nodes before wakes.
        let tr = w.trace.borrow().clone();
        let gi = tr
            .iter()
            .position(|(n, e)| {
                *n == 1 && matches!(e, Ev::GrantInfo { acquirer, .. } if acquirer.is_empty())
            })
            .unwrap();
        let br = tr
            .iter()
            .position(|(n, e)| *n == 1 && matches!(e, Ev::BeginRelease { .. }))
            .unwrap();
        assert!(br < gi);
        for node in [0u16, 2] {
            let apply = tr
                .iter()
                .position(|(n, e)| *n == node && matches!(e, Ev::ApplyGrant(_)))
                .unwrap();
            let wake = tr
                .iter()
                .position(|(n, e)| *n == node && matches!(e, Ev::Wake { .. }))
                .unwrap();
            assert!(gi < apply && apply < wake, "node {node}");
        }
        // The setter's own node does not apply its own info.
        assert!(!tr
            .iter()
            .any(|(n, e)| *n == 1 && matches!(e, Ev::ApplyGrant(_))));
        // Set: a new wait returns at once; after a clear it blocks until the next set.
        w.issue(waiters[0], Op::FlagWait(5));
        w.quiesce();
        assert_eq!(w.last(waiters[0]), Some(&Ok(Outcome::Done)));
        w.issue(setter, Op::FlagClear(5));
        w.quiesce();
        w.issue(waiters[0], Op::FlagWait(5));
        w.issue(waiters[3], Op::FlagWait(5));
        w.quiesce();
        assert!(w.is_blocked(waiters[0]) && w.is_blocked(waiters[3]));
        w.issue(setter, Op::FlagSet(5));
        w.quiesce();
        assert!(!w.is_blocked(waiters[0]) && !w.is_blocked(waiters[3]));
    }
}

/// Random runs: a producer writes data then sets the flag; consumers everywhere wait and must
/// see the data; then a second round after a clear.
#[test]
fn flag_handoff_random_runs() {
    for seed in seeds(40) {
        let nodes = 1 + (seed % 5) as u16;
        let mut w = World::new(seed, nodes, 0.5);
        let mut step = 0;
        w.spawn(
            (seed % u64::from(nodes)) as u16,
            Prog(move |sh: &mut Shared, _me: Me, _last: Option<OpResult>| {
                step += 1;
                match step {
                    1 => {
                        sh.set("data", 42);
                        Some(Op::FlagSet(9))
                    }
                    _ => None,
                }
            }),
        );
        for node in 0..nodes {
            for _ in 0..2 {
                let mut waited = false;
                w.spawn(
                    node,
                    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
                        if waited {
                            assert_eq!(last, Some(Ok(Outcome::Done)));
                            assert_eq!(sh.get("data"), 42, "seed {seed}: woke before the set");
                            sh.add("seen", 1);
                            return None;
                        }
                        waited = true;
                        Some(Op::FlagWait(9))
                    }),
                );
            }
        }
        w.run(1_000_000);
        assert_eq!(w.shared.get("seen"), 2 * i64::from(nodes));
        let waits: u64 = w.cores.iter().map(|c| c.stats().flag_waits).sum();
        assert_eq!(waits, 2 * u64::from(nodes));
    }
}

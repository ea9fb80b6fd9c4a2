//! Barriers: DSM/IP barrier_test (10^4 episodes), exactly 2(N−1) messages per per-node episode,
//! total-count barriers with uneven threads per node, one serial thread per episode, hooks order.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_sync::{BarrierCount, Outcome, SyncError};

/// A thread that passes `episodes` barriers, checking that nobody leaves an episode before all
/// `total` threads arrived at it.
fn barrier_thread(b: u64, count: BarrierCount, total: i64, episodes: i64) -> impl Program {
    let mut i = 0;
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if let Some(r) = last {
            match r {
                Ok(Outcome::Serial) => {
                    sh.add("serial", 1);
                }
                Ok(Outcome::Done) => {}
                other => panic!("barrier result {other:?}"),
            }
            let arrived = sh.get("arrived");
            assert!(
                arrived >= (i + 1) * total,
                "left episode {i} with {arrived} arrivals"
            );
            i += 1;
        }
        if i == episodes {
            return None;
        }
        let arrived = sh.add("arrived", 1);
        assert!(
            arrived <= (i + 1) * total,
            "arrival {arrived} ran ahead into episode {}",
            i + 1
        );
        Some(Op::Barrier(b, count))
    })
}

/// DSM/IP barrier_test: 10^4 barriers; each episode costs exactly 2(N−1) messages.
#[test]
fn barrier_test_ten_thousand_episodes() {
    let (nodes, per_node, episodes) = (4u16, 2u32, 10_000i64);
    let mut w = World::new(11, nodes, 0.3);
    w.deliver_bias = 0.7;
    let total = i64::from(nodes) * i64::from(per_node);
    for node in 0..nodes {
        for _ in 0..per_node {
            w.spawn(
                node,
                barrier_thread(
                    1,
                    BarrierCount::PerNode { local: per_node },
                    total,
                    episodes,
                ),
            );
        }
    }
    w.run(50_000_000);
    assert_eq!(w.shared.get("arrived"), total * episodes);
    assert_eq!(w.shared.get("serial"), episodes);
    assert_eq!(w.msgs_total(), 2 * u64::from(nodes - 1) * episodes as u64);
    for c in &w.cores {
        assert_eq!(c.stats().barrier_episodes, episodes as u64);
    }
}

/// Per-node counts that differ between nodes, many seeds and job sizes.
#[test]
fn per_node_barriers_many_seeds() {
    for seed in seeds(40) {
        let nodes = 1 + (seed % 6) as u16;
        let episodes = 30;
        let mut w = World::new(seed, nodes, [0.0, 0.5, 1.0][(seed % 3) as usize]);
        let counts: Vec<u32> = (0..nodes)
            .map(|n| 1 + ((seed + u64::from(n)) % 3) as u32)
            .collect();
        let total: i64 = counts.iter().map(|c| i64::from(*c)).sum();
        for node in 0..nodes {
            let local = counts[node as usize];
            for _ in 0..local {
                w.spawn(
                    node,
                    barrier_thread(seed, BarrierCount::PerNode { local }, total, episodes),
                );
            }
        }
        w.run(5_000_000);
        assert_eq!(w.shared.get("serial"), episodes, "seed {seed}");
        assert_eq!(
            w.msgs_total(),
            2 * u64::from(nodes - 1) * episodes as u64,
            "seed {seed}"
        );
    }
}

/// pthread_barrier_init(count): `total` threads anywhere, some nodes with none.
#[test]
fn total_count_barriers_with_uneven_nodes() {
    for seed in seeds(40) {
        let nodes = 2 + (seed % 4) as u16;
        let episodes = 25i64;
        let mut w = World::new(seed, nodes, 0.5);
        let per: Vec<u32> = (0..nodes)
            .map(|n| ((seed * 7 + u64::from(n) * 3) % 4) as u32)
            .collect();
        let mut per = per;
        if per.iter().all(|c| *c == 0) {
            per[0] = 2;
        }
        let total: u32 = per.iter().sum();
        let barrier = seed * 13 + 1;
        let mgr = (barrier % u64::from(nodes)) as usize;
        for node in 0..nodes {
            for _ in 0..per[node as usize] {
                w.spawn(
                    node,
                    barrier_thread(
                        barrier,
                        BarrierCount::Total { total },
                        i64::from(total),
                        episodes,
                    ),
                );
            }
        }
        w.run(5_000_000);
        assert_eq!(w.shared.get("serial"), episodes, "seed {seed}");
        // Episode 0 (no prediction): one count per remote thread, a collect round. Later
        // episodes: a remote node with p threads sends p-1 counts and one eager count + info;
        // only nodes without threads are collected.
        let remote = |f: &dyn Fn(u32) -> u64| -> u64 {
            (0..nodes as usize)
                .filter(|&n| n != mgr)
                .map(|n| f(per[n]))
                .sum()
        };
        let remote_threads = u64::from(total - per[mgr]);
        let ep = episodes as u64;
        let n1 = u64::from(nodes - 1);
        let later = ep - 1;
        let idle = remote(&|p| u64::from(p == 0));
        assert_eq!(
            w.msgs_of("barrier_count"),
            remote_threads + remote(&|p| u64::from(p.saturating_sub(1))) * later,
            "seed {seed}"
        );
        assert_eq!(
            w.msgs_of("barrier_eager"),
            remote(&|p| u64::from(p > 0)) * later,
            "seed {seed}"
        );
        assert_eq!(w.msgs_of("barrier_collect"), n1 + idle * later);
        assert_eq!(w.msgs_of("barrier_info"), n1 + idle * later);
        assert_eq!(w.msgs_of("barrier_depart"), n1 * ep);
        assert_eq!(w.msgs_of("barrier_arrive"), 0);
        let late: u64 = w.cores.iter().map(|c| c.stats().barrier_late).sum();
        assert_eq!(
            late, 0,
            "seed {seed}: steady SPMD episodes have no late threads"
        );
    }
}

/// Every node releases, then calls barrier_info, before its arrival; every node applies all
/// nodes' infos (rank order) before its threads leave.
#[test]
fn barrier_hooks_order_and_infos() {
    for (seed, count) in [
        (1, BarrierCount::PerNode { local: 1 }),
        (2, BarrierCount::Total { total: 3 }),
    ] {
        let nodes = 3u16;
        let mut w = World::new(seed, nodes, 0.5);
        for node in 0..nodes {
            w.spawn(node, barrier_thread(0, count, 3, 20));
        }
        w.run(1_000_000);
        let tr = w.trace.borrow();
        let mut infos: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nodes as usize];
        let mut episode = vec![0usize; nodes as usize];
        let mut released = vec![false; nodes as usize];
        let mut pending: Vec<Option<u64>> = vec![None; nodes as usize];
        let mut applied = vec![false; nodes as usize];
        let mut applies = 0;
        for (node, ev) in tr.iter() {
            let n = *node as usize;
            match ev {
                Ev::BeginRelease { done, token } => {
                    released[n] = *done;
                    pending[n] = (!done).then_some(*token);
                }
                Ev::ReleaseDone(t) => {
                    assert_eq!(pending[n], Some(*t));
                    released[n] = true;
                }
                Ev::BarrierInfo(i) => {
                    assert!(
                        released[n],
                        "barrier_info on node {n} before its release completed"
                    );
                    released[n] = false;
                    infos[n].push(i.clone());
                }
                Ev::ApplyBarrier(all) => {
                    let k = episode[n];
                    episode[n] += 1;
                    let want: Vec<Vec<u8>> = infos.iter().map(|i| i[k].clone()).collect();
                    assert_eq!(
                        all, &want,
                        "apply_barrier must get every node's info of episode {k} in rank order"
                    );
                    applied[n] = true;
                    applies += 1;
                }
                Ev::Wake { .. } => {
                    assert!(applied[n], "thread on node {n} left before apply_barrier");
                    applied[n] = false;
                }
                _ => {}
            }
        }
        assert_eq!(applies, 20 * nodes as usize);
    }
}

#[test]
fn barrier_misuse() {
    let mut w = World::new(1, 2, 0.0);
    let a = w.spawn(0, idle());
    let b = w.spawn(0, idle());
    let r = w.spawn(1, idle());
    w.issue(a, Op::Barrier(3, BarrierCount::PerNode { local: 0 }));
    assert!(matches!(
        w.last(a),
        Some(Err(SyncError::ZeroParticipants { .. }))
    ));
    w.issue(a, Op::Barrier(3, BarrierCount::PerNode { local: 2 }));
    w.issue(b, Op::Barrier(3, BarrierCount::PerNode { local: 3 }));
    let e = w.last(b).unwrap().clone().unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiter 1 on node 0 arrived at barrier 3 with 3 threads on every node while this episode uses 2 threads on every node"
    );
    w.issue(b, Op::Barrier(3, BarrierCount::PerNode { local: 2 }));
    w.quiesce();
    assert!(w.is_blocked(a) && w.is_blocked(b));
    w.issue(r, Op::Barrier(3, BarrierCount::PerNode { local: 1 }));
    w.quiesce();
    assert!(!w.is_blocked(a) && !w.is_blocked(b) && !w.is_blocked(r));
    assert_eq!(w.msgs_total(), 2);
}

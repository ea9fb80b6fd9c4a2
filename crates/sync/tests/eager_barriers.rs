//! Total-count barriers with per-node prediction (one round trip in steady SPMD episodes):
//! exact message counts, late threads (episode still open / already departed), threads
//! carried into the next episode, changing participation, nodes without participants, the
//! manager taking part or not, 2–4 nodes.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_sync::{BarrierCount, Outcome};
use std::rc::Rc;

/// A thread passing `episodes` episodes of a total-count barrier, checking that nobody
/// leaves an episode before all `total` threads arrived at it.
fn spmd(b: u64, total: u32, episodes: i64) -> impl Program {
    let mut i = 0i64;
    let total_i = i64::from(total);
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if let Some(r) = last {
            match r {
                Ok(Outcome::Serial) => {
                    sh.add("serial", 1);
                }
                Ok(Outcome::Done) => {}
                other => panic!("barrier result {other:?}"),
            }
            assert!(
                sh.get("arrived") >= (i + 1) * total_i,
                "left episode {i} early"
            );
            i += 1;
        }
        if i == episodes {
            return None;
        }
        let arrived = sh.add("arrived", 1);
        assert!(
            arrived <= (i + 1) * total_i,
            "ran ahead into episode {}",
            i + 1
        );
        Some(Op::Barrier(b, BarrierCount::Total { total }))
    })
}

fn stat(w: &World, f: impl Fn(&squall_sync::SyncStats) -> u64) -> u64 {
    w.cores.iter().map(|c| f(c.stats())).sum()
}

/// 2 nodes x 1 thread, manager taking part: episode 0 uses the collect round, every later
/// episode exactly one eager count + info and one departure.
#[test]
fn two_nodes_one_thread_one_round_trip() {
    for seed in 0..8 {
        let episodes = 100i64;
        let mut w = World::new(seed, 2, [0.0, 0.5, 1.0][(seed % 3) as usize]);
        w.deliver_bias = [0.3, 0.7][(seed % 2) as usize];
        for node in 0..2 {
            w.spawn(node, spmd(4, 2, episodes));
        }
        w.run(10_000_000);
        let later = episodes as u64 - 1;
        assert_eq!(w.shared.get("serial"), episodes);
        assert_eq!(w.msgs_of("barrier_count"), 1, "seed {seed}");
        assert_eq!(w.msgs_of("barrier_collect"), 1);
        assert_eq!(w.msgs_of("barrier_info"), 1);
        assert_eq!(w.msgs_of("barrier_eager"), later);
        assert_eq!(w.msgs_of("barrier_depart"), episodes as u64);
        assert_eq!(w.msgs_total(), 3 + 2 * later + 1);
        assert_eq!(stat(&w, |s| s.barrier_late), 0);
        assert_eq!(stat(&w, |s| s.barrier_carried), 0);
        // Both nodes released eagerly in every later episode (the manager locally).
        assert_eq!(stat(&w, |s| s.barrier_eager), 2 * later);
    }
}

/// The manager takes no part (its node has no threads): it collects only itself (no message);
/// 3 and 4 nodes, several threads per node.
#[test]
fn manager_without_threads_and_more_nodes() {
    for (nodes, per) in [(3u16, 1u32), (3, 2), (4, 2), (4, 3)] {
        let episodes = 40i64;
        let barrier = u64::from(nodes - 1); // managed by the last node, which has no threads
        let total = per * u32::from(nodes - 1);
        let mut w = World::new(u64::from(nodes) * 10 + u64::from(per), nodes, 0.5);
        for node in 0..nodes - 1 {
            for _ in 0..per {
                w.spawn(node, spmd(barrier, total, episodes));
            }
        }
        w.run(10_000_000);
        let later = episodes as u64 - 1;
        let workers = u64::from(nodes - 1);
        assert_eq!(w.shared.get("serial"), episodes);
        assert_eq!(
            w.msgs_of("barrier_count"),
            u64::from(total) + workers * u64::from(per - 1) * later
        );
        assert_eq!(w.msgs_of("barrier_eager"), workers * later);
        assert_eq!(w.msgs_of("barrier_collect"), workers);
        assert_eq!(w.msgs_of("barrier_info"), workers);
        assert_eq!(w.msgs_of("barrier_depart"), workers * episodes as u64);
        // The manager node collected itself each episode, locally (and the workers once).
        let mgr = &w.cores[usize::from(nodes - 1)];
        assert_eq!(mgr.stats().barrier_collects, workers + episodes as u64);
        assert_eq!(stat(&w, |s| s.barrier_late), 0);
    }
}

/// Prediction too low: a thread arrives after its node's eager info and belongs to the open
/// episode. The manager counts it there, collects that node again, and departs with the
/// new info.
#[test]
fn late_thread_in_the_open_episode_recollects() {
    let mut w = World::new(1, 2, 0.0);
    // Barrier 0: manager node 0. Total 3.
    let (a, b) = (w.spawn(1, idle()), w.spawn(1, idle()));
    let (c, d) = (w.spawn(0, idle()), w.spawn(0, idle()));
    let bar = |w: &mut World, t| w.issue(t, Op::Barrier(0, BarrierCount::Total { total: 3 }));
    // Episode 0: a on node 1, c and d on node 0.
    for t in [a, c, d] {
        bar(&mut w, t);
    }
    w.quiesce();
    for t in [a, c, d] {
        assert!(!w.is_blocked(t));
    }
    let m0 = w.msgs_total();
    // Episode 1: node 1 predicts 1 thread, node 0 two; a, b on node 1 and c on node 0 take part.
    bar(&mut w, a); // eager release at once: eager count + info queued
    assert_eq!(w.cores[1].stats().barrier_eager, 1);
    bar(&mut w, b); // late: reported after the eager message
    assert_eq!(w.cores[1].stats().barrier_late, 1);
    bar(&mut w, c); // node 0: 1 of its 2 predicted: counted at once
    assert!(w.is_blocked(a) && w.is_blocked(b) && w.is_blocked(c));
    w.quiesce();
    for t in [a, b, c] {
        assert!(
            matches!(w.last(t), Some(Ok(Outcome::Done | Outcome::Serial))),
            "thread {t}: {:?}",
            w.last(t)
        );
    }
    let serials = [a, b, c]
        .iter()
        .filter(|&&t| w.last(t) == Some(&Ok(Outcome::Serial)))
        .count();
    assert_eq!(serials, 1);
    assert_eq!(w.cores[1].stats().barrier_recollects, 1);
    // eager, late count, collect (node 1 again), info, departure.
    assert_eq!(w.msgs_total() - m0, 5);
    // Node 0 applied node 1's second info, taken after b arrived.
    let tr = w.trace.borrow();
    let last_info_1 = tr
        .iter()
        .rev()
        .filter(|(n, _)| *n == 1)
        .filter_map(|(_, e)| match e {
            Ev::BarrierInfo(i) => Some(i.clone()),
            _ => None,
        })
        .next()
        .unwrap();
    let applied_0 = tr
        .iter()
        .rev()
        .filter(|(n, _)| *n == 0)
        .filter_map(|(_, e)| match e {
            Ev::ApplyBarrier(all) => Some(all.clone()),
            _ => None,
        })
        .next()
        .unwrap();
    assert_eq!(applied_0[1], last_info_1);
}

/// A thread of the next episode arrives on a node whose eager info was sent while the
/// manager has departed the episode already: it is counted in the next one, the node wakes
/// only the thread counted in the departed episode and carries the other, already reported.
#[test]
fn late_thread_after_the_departure_is_carried() {
    let mut w = World::new(2, 2, 0.0);
    let (a, b) = (w.spawn(1, idle()), w.spawn(1, idle()));
    let c = w.spawn(0, idle());
    let bar = |w: &mut World, t| w.issue(t, Op::Barrier(0, BarrierCount::Total { total: 2 }));
    bar(&mut w, a);
    bar(&mut w, c);
    w.quiesce();
    assert!(!w.is_blocked(a) && !w.is_blocked(c));
    // Episode 1.
    bar(&mut w, a); // node 1: eager (queued to node 0)
    bar(&mut w, c); // node 0: eager locally, count 1 of 2
    assert!(w.deliver(1, 0)); // node 1's eager: count 2, all fresh: departure
    assert!(!w.is_blocked(c), "node 0 woke its thread");
    assert!(w.is_blocked(a), "departure still on its way to node 1");
    bar(&mut w, b); // node 1, eager sent: late, reported for episode 1
    assert_eq!(w.cores[1].stats().barrier_late, 1);
    assert!(w.deliver(1, 0)); // late count: episode 1 is over, counts in episode 2
    assert!(w.deliver(0, 1)); // departure of episode 1: counted 1 of node 1's 2
    assert!(!w.is_blocked(a));
    assert!(w.is_blocked(b), "b belongs to episode 2");
    assert_eq!(w.cores[1].stats().barrier_carried, 1);
    // b alone reaches node 1's prediction (1): its eager info (count 0) goes at once.
    assert_eq!(w.cores[1].stats().barrier_eager, 2);
    w.quiesce();
    assert!(w.is_blocked(b), "episode 2 needs c as well");
    bar(&mut w, c);
    w.quiesce();
    assert!(!w.is_blocked(b) && !w.is_blocked(c));
    let serials = [b, c]
        .iter()
        .filter(|&&t| w.last(t) == Some(&Ok(Outcome::Serial)))
        .count();
    assert_eq!(serials, 1);
    assert_eq!(stat(&w, |s| s.barrier_recollects), 0);
    for core in &w.cores {
        assert_eq!(core.stats().barrier_episodes, 3);
    }
}

/// Changing participation: each episode a seeded subset of `total` threads (of more) takes
/// part; a thread joining episode e waits until some thread left episode e-1 (so it may
/// arrive on a node that has not seen that departure yet: a late thread of the next episode).
/// Checks: nobody leaves an episode before its `total` participants arrived, no episode gets
/// more, one serial thread per episode, everybody finishes.
#[test]
fn changing_participation_many_seeds() {
    let (mut late, mut carried, mut recollects, mut eager) = (0, 0, 0, 0);
    for seed in seeds(150) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xba6);
        let nodes = 2 + (seed % 3) as u16;
        let threads: Vec<u16> = (0..nodes * 2 + rng.gen_range(0..3))
            .map(|_| rng.gen_range(0..nodes))
            .collect();
        let nthreads = threads.len();
        let total = rng.gen_range(1..=nthreads as u32);
        let episodes = 25usize;
        // Participants per episode: mostly the same set (so predictions mostly hold).
        let mut sets: Vec<Vec<bool>> = Vec::new();
        let mut cur: Vec<usize> = (0..nthreads).collect();
        for _ in 0..episodes {
            if sets.is_empty() || rng.gen_bool(0.3) {
                for i in (1..cur.len()).rev() {
                    let j = rng.gen_range(0..=i);
                    cur.swap(i, j);
                }
            }
            let mut s = vec![false; nthreads];
            for &t in &cur[..total as usize] {
                s[t] = true;
            }
            sets.push(s);
        }
        let sets = Rc::new(sets);
        let barrier = rng.gen_range(0..8u64);
        let mut w = World::new(seed, nodes, [0.0, 0.5, 1.0][(seed % 3) as usize]);
        w.deliver_bias = [0.2, 0.5, 0.8][(seed % 3) as usize];
        // Knowledge model: each arrival writes; a thread leaving must see every write made
        // at an arrival before its own (a stale eager info would miss a late thread's).
        w.set_model();
        for (t, &node) in threads.iter().enumerate() {
            let sets = sets.clone();
            let mut e = 0usize;
            let mut waiting = false;
            w.spawn(
                node,
                Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
                    if waiting {
                        let r = last.unwrap();
                        let k = format!("arr{e}");
                        assert_eq!(
                            sh.get(&k),
                            i64::from(total),
                            "seed {seed}: thread {t} left episode {e} early"
                        );
                        match r {
                            Ok(Outcome::Serial) => {
                                sh.add(&format!("serial{e}"), 1);
                            }
                            Ok(Outcome::Done) => {}
                            other => panic!("seed {seed}: thread {t}: {other:?}"),
                        }
                        if sh.get("left") < e as i64 + 1 {
                            sh.set("left", e as i64 + 1);
                        }
                        waiting = false;
                        e += 1;
                    }
                    while e < episodes && !sets[e][t] {
                        e += 1;
                    }
                    if e == episodes {
                        return None;
                    }
                    if sh.get("left") < e as i64 {
                        return Some(Op::Yield); // episode e-1 is not over yet
                    }
                    let n = sh.add(&format!("arr{e}"), 1);
                    assert!(
                        n <= i64::from(total),
                        "seed {seed}: episode {e} got more than {total}"
                    );
                    waiting = true;
                    Some(Op::Barrier(barrier, BarrierCount::Total { total }))
                }),
            );
        }
        w.run(20_000_000);
        for e in 0..episodes {
            assert_eq!(
                w.shared.get(&format!("serial{e}")),
                1,
                "seed {seed}: episode {e}"
            );
        }
        for c in &w.cores {
            assert_eq!(c.stats().barrier_episodes, episodes as u64, "seed {seed}");
        }
        assert!(w.barrier_checks > 0);
        late += stat(&w, |s| s.barrier_late);
        carried += stat(&w, |s| s.barrier_carried);
        recollects += stat(&w, |s| s.barrier_recollects);
        eager += stat(&w, |s| s.barrier_eager);
    }
    println!("eager {eager} late {late} carried {carried} recollects {recollects}");
    if seeds(150).count() >= 150 {
        // Every new path ran.
        assert!(eager > 0 && late > 0 && carried > 0 && recollects > 0);
    }
}

/// `set_barrier_eager_cap`: `Some(0)` is the collect round every episode; `Some(1)` with two
/// threads per node makes the second thread late every episode (counted in the open episode,
/// the node collected again).
#[test]
fn eager_cap_off_and_one() {
    for cap in [0u32, 1] {
        let episodes = 30i64;
        let mut w = World::new(u64::from(cap) + 7, 2, 0.5);
        for c in &mut w.cores {
            c.set_barrier_eager_cap(Some(cap));
        }
        for node in 0..2 {
            for _ in 0..2 {
                w.spawn(node, spmd(0, 4, episodes));
            }
        }
        w.run(10_000_000);
        let ep = episodes as u64;
        let later = ep - 1;
        assert_eq!(w.shared.get("serial"), episodes);
        assert_eq!(w.msgs_of("barrier_depart"), ep);
        if cap == 0 {
            assert_eq!(w.msgs_of("barrier_count"), 2 * ep);
            assert_eq!(w.msgs_of("barrier_collect"), ep);
            assert_eq!(w.msgs_of("barrier_info"), ep);
            assert_eq!(stat(&w, |s| s.barrier_eager), 0);
        } else {
            // Node 1: an eager count + info for its first thread, a late count for the second,
            // a collect and its answer.
            assert_eq!(w.msgs_of("barrier_eager"), later);
            assert_eq!(w.msgs_of("barrier_count"), 2 + later);
            assert_eq!(w.msgs_of("barrier_collect"), ep);
            assert_eq!(w.msgs_of("barrier_info"), ep);
            assert_eq!(stat(&w, |s| s.barrier_late), 2 * later);
            assert_eq!(w.cores[1].stats().barrier_recollects, later);
        }
    }
}

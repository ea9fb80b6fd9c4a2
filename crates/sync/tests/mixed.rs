//! Locks, barriers, conditions and flags used together (the SPLASH-2 pattern: a phase of locked
//! updates, then a barrier, then a check; a flag hand-off per phase), with releases completing
//! late and in random order so several releases of one node are pending at once.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_sync::{BarrierCount, Outcome};

fn phase_worker(per_node: u32, total: i64, rounds: i64, leader: bool) -> impl Program {
    let mut round = 0;
    let mut state = 0;
    Prog(move |sh: &mut Shared, _me: Me, last: Option<OpResult>| {
        if let Some(r) = &last {
            assert!(
                matches!(r, Ok(Outcome::Done) | Ok(Outcome::Serial)),
                "{r:?}"
            );
        }
        loop {
            state += 1;
            match state {
                1 => {
                    if round == rounds {
                        return None;
                    }
                    return Some(Op::Lock(1));
                }
                2 => {
                    sh.add("sum", 1);
                    return Some(Op::Unlock(1));
                }
                3 => return Some(Op::Barrier(2, BarrierCount::PerNode { local: per_node })),
                4 => {
                    assert_eq!(sh.get("sum"), (round + 1) * total, "barrier passed early");
                    if leader {
                        sh.set("phase", round + 1);
                        return Some(Op::FlagSet(100 + round as u64));
                    }
                    return Some(Op::FlagWait(100 + round as u64));
                }
                5 => {
                    assert_eq!(
                        sh.get("phase"),
                        round + 1,
                        "flag wait returned before the set"
                    );
                    return Some(Op::Barrier(
                        3,
                        BarrierCount::Total {
                            total: total as u32,
                        },
                    ));
                }
                _ => {
                    round += 1;
                    state = 0;
                }
            }
        }
    })
}

#[test]
fn phases_of_locks_barriers_and_flags() {
    for seed in seeds(40) {
        let nodes = 1 + (seed % 5) as u16;
        let per_node = 1 + (seed % 2) as u32;
        let total = i64::from(nodes) * i64::from(per_node);
        let mut w = World::new(seed, nodes, 0.6);
        w.deliver_bias = [0.3, 0.7][(seed % 2) as usize];
        for node in 0..nodes {
            for i in 0..per_node {
                let leader = node == (seed % u64::from(nodes)) as u16 && i == 0;
                w.spawn(node, phase_worker(per_node, total, 12, leader));
            }
        }
        w.run(5_000_000);
        assert_eq!(w.shared.get("sum"), 12 * total);
        let episodes: u64 = w.cores.iter().map(|c| c.stats().barrier_episodes).sum();
        assert_eq!(episodes, 2 * 12 * u64::from(nodes));
    }
}

#[test]
fn stats_serialize_for_the_runtime_report() {
    let mut w = World::new(5, 3, 0.0);
    for node in 0..3 {
        w.spawn(node, phase_worker(1, 3, 2, node == 0));
    }
    w.run(100_000);
    let s = w.cores[1].stats().clone();
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["barrier_episodes"], 4);
    assert_eq!(json["messages_sent"].as_array().unwrap().len(), 17);
    let back: squall_sync::SyncStats = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
    // Node 1 manages neither barrier 2 (node 2) nor barrier 3 (node 0): it only arrives.
    assert_eq!(s.messages_of("barrier_arrive"), 2);
    // Barrier 3 (total count): a collect answer in round 0, then an eager count + info.
    assert_eq!(s.messages_of("barrier_info"), 1);
    assert_eq!(s.messages_of("barrier_eager"), 1);
    assert_eq!(s.messages_of("barrier_depart"), 0);
}

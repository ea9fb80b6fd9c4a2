//! Fuzz target: the synchronization cores (locks, barriers, conditions, flags) of a small job
//! driven by a script of application calls and deliveries of real, corrupted and made-up
//! messages. No input may panic a core: bad messages are typed errors or protocol-error
//! actions.
#![no_main]
use libfuzzer_sys::fuzz_target;
use squall_core::{LockId, NoConsistency, NodeId};
use squall_sync::{Action, BarrierCount, BarrierId, SyncCore, Waiter};
use std::collections::{BTreeMap, VecDeque};

#[path = "common/script.rs"]
mod script;
use script::Script;

fuzz_target!(|data: &[u8]| {
    let mut s = Script::new(data);
    let nodes = 2 + u16::from(s.u8() % 3);
    let mut cores: Vec<SyncCore> = (0..nodes)
        .map(|n| SyncCore::new(NodeId(n), nodes))
        .collect();
    let mut queues: BTreeMap<(u16, u16), VecDeque<Vec<u8>>> = BTreeMap::new();
    let mut cons = NoConsistency;
    let mut steps = 0;
    while !s.done() && steps < 2_000 {
        steps += 1;
        let n = u16::from(s.u8()) % nodes;
        let c = &mut cores[usize::from(n)];
        let waiter = Waiter(u64::from(s.u8() % 4));
        match s.u8() % 8 {
            0 => c.lock(&mut cons, LockId(s.below(4)), waiter),
            1 => c.unlock(&mut cons, LockId(s.below(4)), waiter),
            2 => c.trylock(&mut cons, LockId(s.below(4)), waiter),
            3 => {
                let count = if s.u8() % 2 == 0 {
                    BarrierCount::PerNode {
                        local: 1 + u32::from(s.u8() % 2),
                    }
                } else {
                    BarrierCount::Total {
                        total: 1 + u32::from(s.u8() % 6),
                    }
                };
                c.barrier(&mut cons, BarrierId(s.below(2)), waiter, count)
            }
            4..=6 => {
                let from = u16::from(s.u8()) % nodes;
                let how = s.u8();
                let m = if how % 3 == 0 {
                    Some(s.bytes(48))
                } else {
                    queues
                        .get_mut(&(from, n))
                        .and_then(|q| q.pop_front())
                        .map(|mut m| {
                            if how % 3 == 1 && !m.is_empty() {
                                let at = usize::from(s.u16()) % m.len();
                                m[at] ^= s.u8() | 1;
                            }
                            m
                        })
                };
                if let Some(m) = m {
                    let _ = c.handle_message(&mut cons, NodeId(from), &m);
                }
            }
            _ => {
                let _ = c.handle_message(&mut cons, NodeId(s.u16()), &s.bytes(16));
            }
        }
        for m in 0..nodes {
            while let Some(a) = cores[usize::from(m)].poll_action() {
                if let Action::Send { to, msg } = a {
                    if to.0 < nodes {
                        queues.entry((m, to.0)).or_default().push_back(msg);
                    }
                }
            }
        }
    }
});

//! Arbitrary bytes and arbitrary (well-formed but protocol-breaking) messages from any node
//! never panic a SyncCore: they are typed errors or `Action::ProtocolError`.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use squall_core::{LockId, NoConsistency, NodeId};
use squall_sync::message::{Msg, ReadAhead};
use squall_sync::{Action, BarrierCount, BarrierId, CondId, FlagId, SyncCore, SyncError, Waiter};

fn arb_msg() -> impl Strategy<Value = Msg> {
    let id = 0u64..4;
    let node = (0u16..5).prop_map(NodeId);
    let bytes = proptest::collection::vec(any::<u8>(), 0..6);
    let ids = proptest::collection::vec(0u64..4, 0..3);
    let read_ahead =
        (any::<bool>(), ids.clone(), 0u16..3).prop_map(|(hinted, ahead, more)| ReadAhead {
            hinted,
            ahead,
            more,
        });
    prop_oneof![
        (id.clone(), read_ahead.clone(), bytes.clone()).prop_map(|(lock, read_ahead, info)| {
            Msg::LockRequest {
                lock,
                read_ahead,
                info,
            }
        }),
        (id.clone(), node.clone(), read_ahead, bytes.clone()).prop_map(
            |(lock, requester, read_ahead, info)| Msg::LockForward {
                lock,
                requester,
                read_ahead,
                info,
            }
        ),
        (id.clone(), ids.clone(), bytes.clone()).prop_map(|(lock, lent, info)| Msg::LockGrant {
            lock,
            lent,
            info
        }),
        id.clone().prop_map(|cond| Msg::CondRegister { cond }),
        id.clone().prop_map(|cond| Msg::CondRegistered { cond }),
        (id.clone(), any::<bool>()).prop_map(|(cond, all)| Msg::CondSignal { cond, all }),
        (id.clone(), 0u32..4).prop_map(|(cond, count)| Msg::CondWake { cond, count }),
        (id.clone(), 0u64..3, 1u8..4, node.clone(), bytes.clone()).prop_map(
            |(barrier, epoch, hops, from, info)| Msg::BarrierArrive {
                barrier,
                epoch,
                hops,
                infos: vec![(from.0, info)],
            }
        ),
        (id.clone(), 0u64..3, 0u32..4, 0u32..4, any::<bool>()).prop_map(
            |(barrier, epoch, total, count, late)| Msg::BarrierCount {
                barrier,
                epoch,
                total,
                count,
                late,
            }
        ),
        (id.clone(), 0u64..3, 0u32..4, 0u32..4, bytes.clone()).prop_map(
            |(barrier, epoch, total, count, info)| Msg::BarrierEager {
                barrier,
                epoch,
                total,
                count,
                info,
            }
        ),
        (id.clone(), 0u64..3).prop_map(|(barrier, epoch)| Msg::BarrierCollect { barrier, epoch }),
        (id.clone(), 0u64..3, bytes.clone()).prop_map(|(barrier, epoch, info)| Msg::BarrierInfo {
            barrier,
            epoch,
            info
        }),
        (
            id.clone(),
            0u64..3,
            node.clone(),
            0u32..4,
            1u8..5,
            proptest::collection::vec(bytes.clone(), 0..5)
        )
            .prop_map(|(barrier, epoch, serial, counted, hops, infos)| {
                Msg::BarrierDepart {
                    barrier,
                    epoch,
                    serial,
                    counted,
                    hops,
                    infos,
                }
            }),
        (id.clone(), bytes.clone()).prop_map(|(flag, info)| Msg::FlagSet { flag, info }),
        id.clone().prop_map(|flag| Msg::FlagClear { flag }),
        id.clone().prop_map(|flag| Msg::FlagWait { flag }),
        (id, node, bytes).prop_map(|(flag, setter, info)| Msg::FlagReady { flag, setter, info }),
    ]
}

/// A local operation of one of a few threads.
fn arb_local() -> impl Strategy<Value = (u8, u64, u64)> {
    (0u8..10, 0u64..4, 0u64..4)
}

fn apply_local(core: &mut SyncCore, (op, a, t): (u8, u64, u64)) {
    let mut c = NoConsistency;
    let w = Waiter(t);
    match op {
        0 => core.lock(&mut c, LockId(a), w),
        1 => core.unlock(&mut c, LockId(a), w),
        2 => core.trylock(&mut c, LockId(a), w),
        3 => core.barrier(&mut c, BarrierId(a), w, BarrierCount::PerNode { local: 2 }),
        4 => core.barrier(&mut c, BarrierId(a), w, BarrierCount::Total { total: 3 }),
        5 => core.cond_wait(&mut c, CondId(a), LockId(a), w),
        6 => core.cond_signal(&mut c, CondId(a), w),
        7 => core.flag_set(&mut c, FlagId(a), w),
        8 => core.flag_wait(&mut c, FlagId(a), w),
        _ => core.flag_clear(FlagId(a), w),
    }
}

fn drain(core: &mut SyncCore) {
    while let Some(a) = core.poll_action() {
        if let Action::Send { to, .. } = a {
            assert_ne!(to, core.node());
            assert!(to.0 < core.nodes());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_are_refused_without_panic(
        from in 0u16..6,
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut core = SyncCore::new(NodeId(0), 3);
        let r = core.handle_message(&mut NoConsistency, NodeId(from), &bytes);
        if from == 0 || from >= 3 {
            let malformed = matches!(r, Err(SyncError::Malformed { .. }));
            prop_assert!(malformed, "{:?}", r);
        }
        drain(&mut core);
    }

    #[test]
    fn random_message_sequences_never_panic(
        me in 0u16..3,
        steps in proptest::collection::vec(
            prop_oneof![
                (1u16..3, arb_msg()).prop_map(|(f, m)| (Some((f, m)), None)),
                arb_local().prop_map(|l| (None, Some(l))),
            ],
            0..40,
        ),
    ) {
        let mut core = SyncCore::new(NodeId(me), 3);
        for (msg, local) in steps {
            if let Some((f, m)) = msg {
                let from = NodeId((me + f) % 3);
                let _ = core.handle_message(&mut NoConsistency, from, &m.encode());
            }
            if let Some(l) = local {
                apply_local(&mut core, l);
            }
            drain(&mut core);
        }
    }
}

#[test]
fn a_core_that_refused_garbage_still_works() {
    let mut a = SyncCore::new(NodeId(0), 2);
    let mut b = SyncCore::new(NodeId(1), 2);
    let mut c = NoConsistency;
    assert!(matches!(
        a.handle_message(&mut c, NodeId(1), &[3, 0, 0]),
        Err(SyncError::Malformed { .. })
    ));
    // A grant nobody asked for is refused and changes nothing.
    let bogus = Msg::LockGrant {
        lock: 1,
        lent: vec![],
        info: vec![],
    }
    .encode();
    let e = a.handle_message(&mut c, NodeId(1), &bogus).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node 1 sent a sync message about lock 1 that node 0 is not in a state to accept: \
         a grant came but this node did not ask for the lock"
    );
    // Lock 1 is managed by node 1: node 0 requests it, node 1 grants.
    a.lock(&mut c, LockId(1), Waiter(0));
    let Some(Action::Send { to, msg }) = a.poll_action() else {
        panic!("request expected")
    };
    assert_eq!(to, NodeId(1));
    b.handle_message(&mut c, NodeId(0), &msg).unwrap();
    let Some(Action::Send { to, msg }) = b.poll_action() else {
        panic!("grant expected")
    };
    assert_eq!(to, NodeId(0));
    a.handle_message(&mut c, NodeId(1), &msg).unwrap();
    assert_eq!(
        a.poll_action(),
        Some(Action::Wake {
            waiter: Waiter(0),
            result: Ok(squall_sync::Outcome::Done)
        })
    );
}

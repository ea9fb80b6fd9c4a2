//! The core never panics on bad input: random and truncated messages from any sender, and
//! misuse of the API, are typed errors. Plus a two-node MSI hand-off driven by hand.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::NodeId;
use squall_objects::{
    Action, Completion, ElemKind, Engine, Msg, MsiState, ObjError, ObjectSpec, ObjectsCore, Step,
};

fn spec(engine: Engine) -> ObjectSpec {
    ObjectSpec {
        kind: ElemKind::Int,
        len: 8,
        seg_elems: 2,
        engine,
    }
}

#[test]
fn random_bytes_are_errors_not_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..20_000 {
        let mut c = ObjectsCore::new(NodeId(1), 3);
        for e in [Engine::Ou, Engine::Msi, Engine::Nc] {
            c.create(spec(e)).expect("create");
        }
        let len = rng.gen_range(0..40);
        let mut b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if !b.is_empty() {
            b[0] = rng.gen_range(0..10);
        }
        if len > 4 {
            b[1] = rng.gen_range(0..4);
            b[2..5].fill(0);
        }
        let _ = c.on_message(NodeId(rng.gen_range(0..4)), &b);
        while c.poll_action().is_some() {}
    }
}

#[test]
fn misuse_is_typed() {
    let mut c = ObjectsCore::new(NodeId(0), 2);
    let id = c.create(spec(Engine::Msi)).expect("create");
    assert!(matches!(c.read(id, 8, 1), Err(ObjError::OutOfRange { .. })));
    assert!(matches!(
        c.write_begin(id, 0, &[1, 2], 1),
        Err(ObjError::BadValue { .. })
    ));
    assert!(matches!(c.write_step(9), Err(ObjError::NoWrite(9))));
    let bad = ObjectSpec {
        kind: ElemKind::Record(0),
        ..spec(Engine::Ou)
    };
    assert!(matches!(c.create(bad), Err(ObjError::BadSpec(_))));
    // A data copy nobody asked for is an incoherence, not a panic.
    let m = Msg::MsiData {
        obj: id,
        seg: 0,
        data: vec![0; 8],
    };
    assert!(matches!(
        c.on_message(NodeId(1), &m.encode()),
        Err(ObjError::Incoherent(_))
    ));
}

/// Deliver every send between the two cores until quiet; returns the completions.
fn pump(cores: &mut [ObjectsCore; 2]) -> Vec<(u64, Completion)> {
    let mut done = Vec::new();
    loop {
        let mut moved = false;
        for i in 0..2 {
            while let Some(a) = cores[i].poll_action() {
                moved = true;
                match a {
                    Action::Send { to, msg, .. } => cores[to.index()]
                        .on_message(NodeId(i as u16), &msg)
                        .expect("deliver"),
                    Action::Complete { waiter, how } => done.push((waiter, how)),
                }
            }
        }
        if !moved {
            return done;
        }
    }
}

#[test]
fn msi_write_then_remote_read_with_the_figure_7_race() {
    let mut c = [
        ObjectsCore::new(NodeId(0), 2),
        ObjectsCore::new(NodeId(1), 2),
    ];
    let id = c[0].create(spec(Engine::Msi)).expect("create");
    c[1].create(spec(Engine::Msi)).expect("create");
    // Node 0 takes segment 0 in M.
    c[0].write_begin(id, 0, &5i32.to_le_bytes(), 10)
        .expect("begin");
    assert_eq!(c[0].write_step(10), Ok(Step::Pending));
    let done = pump(&mut c);
    assert_eq!(done, vec![(10, Completion::Retry)]);
    assert_eq!(c[0].write_step(10), Ok(Step::Ready(())));
    assert_eq!(c[0].msi_state(id, 0).map(|s| s.0), Some(MsiState::Modified));
    // Node 0 begins another write (flag set) and, before it steps, node 1's read upgrade
    // arrives: the handler completes the flagged write before downgrading (Figure 7).
    c[0].write_begin(id, 1, &9i32.to_le_bytes(), 11)
        .expect("begin");
    assert!(matches!(c[1].read(id, 1, 20), Ok(Step::Pending)));
    let done = pump(&mut c);
    assert_eq!(
        done,
        vec![(20, Completion::Value(9i32.to_le_bytes().to_vec()))]
    );
    assert_eq!(c[0].stats().flag_completions, 1);
    // The write step now finds its write done; it must not write again in S.
    assert_eq!(c[0].write_step(11), Ok(Step::Ready(())));
    assert_eq!(c[0].msi_state(id, 0).map(|s| s.0), Some(MsiState::Shared));
    assert_eq!(
        c[1].msi_state(id, 0).map(|s| (s.0, s.1)),
        Some((MsiState::Shared, 2))
    );
}

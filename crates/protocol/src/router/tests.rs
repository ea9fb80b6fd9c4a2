//! Router unit tests: announcements, routing by tag and page, framed sync info, releases
//! that wait for every engaged core.

use super::*;
use crate::{Hlrc, Sc};
use squall_core::{Access, PageMemory, Placement, PAGE_SIZE};

use crate::test_mem::Mem;

const LAYOUT: HeapLayout = HeapLayout {
    nodes: 2,
    total_pages: 64,
};

fn hlrc_default() -> Coherence {
    Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch).coherence()
}

fn router(me: u16) -> (Router, Mem) {
    let mem = Mem::default();
    let cores: Vec<Box<dyn Protocol>> = vec![
        Box::new(Hlrc::new(mem.clone(), NodeId(me), LAYOUT)),
        Box::new(Sc::new(mem.clone(), NodeId(me), LAYOUT)),
    ];
    let r = Router::new(NodeId(me), LAYOUT, hlrc_default(), cores).expect("router");
    (r, mem)
}

/// Deliver every message between the routers until both are quiet; the other actions.
fn settle(rs: &mut [Router]) -> Vec<(usize, Action)> {
    let mut other = Vec::new();
    loop {
        let mut moved = false;
        for i in 0..rs.len() {
            while let Some(a) = rs[i].poll_action() {
                moved = true;
                match a {
                    Action::Send { to, msg } => rs[to.index()]
                        .handle_message(NodeId(i as u16), &msg)
                        .expect("message"),
                    a => other.push((i, a)),
                }
            }
        }
        if !moved {
            return other;
        }
    }
}

#[test]
fn an_allocation_under_another_policy_is_announced_before_it_completes() {
    let (r0, _) = router(0);
    let (r1, _) = router(1);
    let mut rs = vec![r0, r1];
    let sc = Policy::new(ProtocolKind::Sc, false, Placement::Node(NodeId(0)));
    let alloc = AllocInfo {
        first: PageId(3),
        pages: 4,
        placement: sc.placement,
    };
    assert_eq!(rs[0].register_with(alloc, &sc, 9), Ok(false));
    assert_eq!(rs[1].coherence_of(PageId(4)).protocol, ProtocolKind::Hlrc);
    let done = settle(&mut rs);
    assert_eq!(done, vec![(0, Action::Announced { token: 9 })]);
    for r in &rs {
        assert_eq!(r.coherence_of(PageId(3)).protocol, ProtocolKind::Sc);
        assert_eq!(r.coherence_of(PageId(6)).protocol, ProtocolKind::Sc);
        assert_eq!(r.coherence_of(PageId(7)), hlrc_default());
    }
    // The default policy needs no announcement.
    let h = Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch);
    let a2 = AllocInfo {
        first: PageId(8),
        pages: 1,
        placement: h.placement,
    };
    assert_eq!(rs[0].register_with(a2, &h, 10), Ok(true));
    assert!(settle(&mut rs).is_empty());
    // A refused policy is an error, nothing is sent.
    let bad = Policy {
        unit_pages: 3,
        ..sc
    };
    assert!(rs[0].register_with(a2, &bad, 11).is_err());
    assert!(rs[0].poll_action().is_none());
}

#[test]
fn faults_reach_the_core_of_their_page_and_sc_writes_cross_nodes() {
    let (r0, m0) = router(0);
    let (r1, m1) = router(1);
    let mut rs = vec![r0, r1];
    let sc = Policy::new(ProtocolKind::Sc, false, Placement::Node(NodeId(0)));
    let alloc = AllocInfo {
        first: PageId(0),
        pages: 2,
        placement: sc.placement,
    };
    assert_eq!(rs[0].register_with(alloc, &sc, 1), Ok(false));
    settle(&mut rs);
    // Node 1 writes page 1 under sc: it becomes the single writer.
    rs[1].handle_fault(PageId(1), true).expect("fault");
    let out = settle(&mut rs);
    assert!(
        out.contains(&(1, Action::Resume { page: PageId(1) })),
        "{out:?}"
    );
    assert_eq!(m1.access(PageId(1)), Access::ReadWrite);
    m1.write_bytes(PageId(1), 0, &[42]);
    // Node 0 reads it: sc hands the page over with no synchronization at all.
    rs[0].handle_fault(PageId(1), false).expect("fault");
    settle(&mut rs);
    let mut buf = vec![0; PAGE_SIZE];
    m0.read_page(PageId(1), &mut buf);
    assert_eq!(buf[0], 42);
    // Node 1's hlrc core (the default) has nothing to release; sc releases at once.
    assert!(rs[1].begin_release(5));
    assert_eq!(rs[1].stats().sent.get("router.announce"), None);
    assert_eq!(
        rs[0]
            .stats()
            .sent
            .get("router.announce")
            .map(|c| c.messages),
        Some(1)
    );
}

#[test]
fn sync_info_carries_one_part_per_engaged_core() {
    let (mut r0, _) = router(0);
    let (mut r1, _) = router(1);
    // Only the default core (hlrc) is engaged: one part.
    let info = r0.acquire_info();
    let parts = split_infos(&info, 2).expect("framed");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].0, 0, "the hlrc core");
    // An sc allocation engages node 0's sc core, which has nothing to say: still one part.
    let sc = Policy::new(ProtocolKind::Sc, false, Placement::FirstTouch);
    let a = AllocInfo {
        first: PageId(0),
        pages: 1,
        placement: sc.placement,
    };
    assert_eq!(r0.register_with(a, &sc, 1), Ok(false));
    let g = r0.grant_info(&r1.acquire_info());
    assert_eq!(split_infos(&g, 2).map(|p| p.len()), Some(1));
    r1.apply_grant(&g);
    assert_eq!(split_infos(&r1.barrier_info(), 2).map(|p| p.len()), Some(1));
    // Garbage is counted, not applied.
    r1.apply_grant(&[0, 9, 0, 0, 0]);
    assert_eq!(r1.stats().malformed_sync_info, 1);
}

#[test]
fn messages_with_unknown_tags_are_refused() {
    let (mut r0, _) = router(0);
    assert!(r0.handle_message(NodeId(1), &[]).is_err());
    assert!(r0.handle_message(NodeId(1), &[7, 1, 2]).is_err());
    assert!(r0.handle_message(NodeId(1), &[ROUTER_TAG, 2, 0]).is_err());
    // An ack of nothing.
    let ack = RouterMsg::Ack { token: 3 }.encode();
    assert!(r0.handle_message(NodeId(1), &ack).is_err());
    // An announcement of pages outside the sender's arena.
    let bad = RouterMsg::Announce {
        token: 1,
        first: PageId(1),
        pages: 1,
        coherence: hlrc_default(),
    }
    .encode();
    assert!(matches!(
        r0.handle_message(NodeId(1), &bad),
        Err(ProtoError::Unexpected { .. })
    ));
}

#[test]
fn a_claim_of_the_global_part_reaches_every_node_before_it_completes() {
    use squall_core::STRIPE_PAGES;
    // 1 TiB over 4 nodes: the global part's stripes are managed by every node in turn.
    let big = HeapLayout {
        nodes: 4,
        total_pages: 1 << 28,
    };
    let make = |me: u16| {
        let mem = Mem::default();
        let cores: Vec<Box<dyn Protocol>> = vec![
            Box::new(Hlrc::new(mem.clone(), NodeId(me), big)),
            Box::new(Sc::new(mem.clone(), NodeId(me), big)),
        ];
        let r = Router::new(NodeId(me), big, hlrc_default(), cores).expect("router");
        (r, mem)
    };
    let (mut rs, mems): (Vec<Router>, Vec<Mem>) = (0..4).map(make).unzip();
    let g = big.global_start().0;
    // 600 GiB from node 1, under the default policy (hlrc, first touch) and then under sc
    // with blocked homes: both are sent to every node.
    let hl = Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch);
    let a = AllocInfo {
        first: PageId(g),
        pages: 600 * STRIPE_PAGES,
        placement: hl.placement,
    };
    assert_eq!(rs[1].register_claim(a, &hl, 7), Ok(false));
    assert_eq!(settle(&mut rs), vec![(1, Action::Announced { token: 7 })]);
    let sc = Policy::new(ProtocolKind::Sc, false, Placement::Blocked);
    let b = AllocInfo {
        first: PageId(g + a.pages),
        pages: 200 * STRIPE_PAGES,
        placement: sc.placement,
    };
    assert_eq!(rs[1].register_claim(b, &sc, 8), Ok(false));
    assert_eq!(settle(&mut rs), vec![(1, Action::Announced { token: 8 })]);
    for r in &rs {
        assert_eq!(r.coherence_of(PageId(g + 5)), hlrc_default());
        assert_eq!(r.coherence_of(b.first).protocol, ProtocolKind::Sc);
    }
    // Node 2 writes a page of each in node 3's stripes (neither the claimant's nor its own):
    // node 3 knows the allocation and answers for it.
    let pa = PageId(g + 3 * STRIPE_PAGES + 11);
    let pb = PageId(b.first.0 + 4 * STRIPE_PAGES - 1);
    for p in [pa, pb] {
        assert_eq!(big.manager_of(p), NodeId(3));
        rs[2].handle_fault(p, true).expect("fault");
        let out = settle(&mut rs);
        assert!(out.contains(&(2, Action::Resume { page: p })), "{out:?}");
        assert_eq!(mems[2].access(p), Access::ReadWrite);
    }
    // A claim outside the global part is refused by its receiver.
    let bad = RouterMsg::Claim {
        token: 1,
        first: PageId(5),
        pages: 1,
        coherence: hlrc_default(),
        placement: Placement::FirstTouch,
    }
    .encode();
    assert!(rs[0].handle_message(NodeId(1), &bad).is_err());
}

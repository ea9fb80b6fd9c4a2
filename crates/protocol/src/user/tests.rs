//! User-protocol unit tests: a user core in the router (announcement, routing by page and
//! tag, releases, refusals) and the message codec's checks.

use super::*;
use crate::{Hlrc, Policy, Router, Sc};
use squall_core::Placement;

use crate::test_mem::Mem;

const LAYOUT: HeapLayout = HeapLayout {
    nodes: 2,
    total_pages: 64,
};

/// Fetch-on-fault from the page's manager, one copy read-only; a release waits for one ack
/// from node 0.
#[derive(Default)]
struct Fetcher {
    releasing: Option<u64>,
}

impl UserProtocol for Fetcher {
    fn name(&self) -> &'static str {
        "fetcher"
    }
    fn fault(&mut self, m: &mut Mechanisms<'_>, page: PageId, _w: bool) -> Result<(), ProtoError> {
        let home = m.manager_of(page);
        m.send(home, MsgWriter::new(1).page(page).finish());
        Ok(())
    }
    fn message(
        &mut self,
        m: &mut Mechanisms<'_>,
        from: NodeId,
        msg: &[u8],
    ) -> Result<(), ProtoError> {
        let mut r = MsgReader::new(from, msg);
        match r.u8()? {
            1 => {
                let page = r.page(m)?;
                r.end()?;
                let bytes = m.read_page(page);
                m.send(from, MsgWriter::new(2).page(page).bytes(&bytes).finish());
            }
            2 => {
                let page = r.page(m)?;
                let b = r.bytes()?;
                r.end()?;
                m.write_page(page, 0, b)?;
                m.set_access(page, Access::Read);
                m.resume(page);
            }
            3 => m.send(from, MsgWriter::new(4).finish()),
            4 => {
                if let Some(t) = self.releasing.take() {
                    m.release_done(t);
                }
            }
            k => return Err(r.err(format!("kind {k}"))),
        }
        Ok(())
    }
    fn release(&mut self, m: &mut Mechanisms<'_>, token: u64) -> bool {
        if m.me() == NodeId(0) {
            return true;
        }
        self.releasing = Some(token);
        m.send(NodeId(0), MsgWriter::new(3).finish());
        false
    }
}

fn router(me: u16, users: usize) -> (Router, Mem) {
    let mem = Mem::default();
    let mut cores: Vec<Box<dyn Protocol>> = vec![
        Box::new(Hlrc::new(mem.clone(), NodeId(me), LAYOUT)),
        Box::new(Sc::new(mem.clone(), NodeId(me), LAYOUT)),
    ];
    for _ in 0..users {
        cores.push(Box::new(UserCore::new(
            mem.clone(),
            NodeId(me),
            LAYOUT,
            Box::new(Fetcher::default()),
        )));
    }
    let default = Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch).coherence();
    (
        Router::new(NodeId(me), LAYOUT, default, cores).expect("router"),
        mem,
    )
}

/// Deliver every message between the two routers until both are quiet; other actions out.
fn pump(rs: &mut [Router; 2]) -> Vec<(usize, Action)> {
    let mut out = Vec::new();
    loop {
        let mut moved = false;
        for n in 0..2 {
            while let Some(a) = rs[n].poll_action() {
                moved = true;
                match a {
                    Action::Send { to, msg } => rs[to.index()]
                        .handle_message(NodeId(n as u16), &msg)
                        .expect("message"),
                    other => out.push((n, other)),
                }
            }
        }
        if !moved {
            return out;
        }
    }
}

#[test]
fn a_user_core_serves_its_allocation_beside_the_builtin_ones() {
    let (r0, m0) = router(0, 1);
    let (r1, m1) = router(1, 1);
    let mut rs = [r0, r1];
    let user = Policy::new(ProtocolKind::User(0), false, Placement::FirstTouch);
    let alloc = AllocInfo {
        first: PageId(3),
        pages: 2,
        placement: Placement::FirstTouch,
    };
    assert!(!rs[0].register_with(alloc, &user, 9).expect("registered"));
    assert_eq!(pump(&mut rs), vec![(0, Action::Announced { token: 9 })]);
    assert_eq!(
        rs[1].coherence_of(PageId(4)).protocol,
        ProtocolKind::User(0)
    );
    // Node 0's copy of page 4 holds a value; node 1 faults and the user core fetches it.
    m0.write_bytes(PageId(4), 8, &[7, 7]);
    rs[1].handle_fault(PageId(4), false).expect("fault");
    assert_eq!(pump(&mut rs), vec![(1, Action::Resume { page: PageId(4) })]);
    let mut buf = vec![0; PAGE_SIZE];
    m1.read_page(PageId(4), &mut buf);
    assert_eq!(
        (&buf[8..10], m1.access(PageId(4))),
        (&[7u8, 7][..], Access::Read)
    );
    // Node 1's release waits for the user core (engaged by the fault), and completes.
    assert!(!rs[1].begin_release(5));
    assert_eq!(pump(&mut rs), vec![(1, Action::ReleaseDone { token: 5 })]);
    let s = rs[1].stats();
    assert_eq!((s.read_faults, s.messages_of("fetcher")), (1, 2));
    // Atomics on its pages are refused.
    assert!(matches!(
        rs[1].atomic(PageId(4), 0, crate::AtomicOp::FetchAdd(1).into(), 1),
        Err(ProtoError::Unsupported {
            protocol: "fetcher",
            ..
        })
    ));
}

#[test]
fn unregistered_and_default_user_protocols_are_refused() {
    let (mut r0, _) = router(0, 1);
    let alloc = AllocInfo {
        first: PageId(3),
        pages: 1,
        placement: Placement::FirstTouch,
    };
    let missing = Policy::new(ProtocolKind::User(1), false, Placement::FirstTouch);
    assert!(matches!(
        r0.register_with(alloc, &missing, 1),
        Err(ProtoError::BadPolicy { .. })
    ));
    // A node that has no such core refuses an announcement naming it.
    let (mut with, _) = router(0, 1);
    let (mut without, _) = router(1, 0);
    let user = Policy::new(ProtocolKind::User(0), false, Placement::FirstTouch);
    assert!(!with.register_with(alloc, &user, 2).expect("registered"));
    let Some(Action::Send { msg, .. }) = with.poll_action() else {
        panic!("no announcement");
    };
    assert!(matches!(
        without.handle_message(NodeId(0), &msg),
        Err(ProtoError::Unexpected { .. })
    ));
    let user_default = Policy::new(ProtocolKind::User(0), false, Placement::FirstTouch);
    let mem = Mem::default();
    let cores: Vec<Box<dyn Protocol>> = vec![
        Box::new(Hlrc::new(mem.clone(), NodeId(0), LAYOUT)),
        Box::new(Sc::new(mem, NodeId(0), LAYOUT)),
    ];
    assert!(Router::new(NodeId(0), LAYOUT, user_default.coherence(), cores).is_err());
}

#[test]
fn the_message_codec_rejects_bad_input() {
    let mut actions = VecDeque::new();
    let mut stats = ProtoStats::default();
    let mem = Mem::default();
    let m = Mechanisms {
        me: NodeId(0),
        layout: LAYOUT,
        name: "t",
        mem: &mem,
        actions: &mut actions,
        stats: &mut stats,
    };
    let msg = MsgWriter::new(5)
        .page(PageId(3))
        .node(NodeId(1))
        .bytes(&[1, 2, 3])
        .u64(9)
        .finish();
    let mut r = MsgReader::new(NodeId(1), &msg);
    assert_eq!(r.u8(), Ok(5));
    assert_eq!(r.page(&m), Ok(PageId(3)));
    assert_eq!(r.node(&m), Ok(NodeId(1)));
    assert_eq!(r.bytes(), Ok(&[1u8, 2, 3][..]));
    assert!(r.end().is_err(), "a u64 is left");
    assert_eq!(r.u64(), Ok(9));
    assert!(r.end().is_ok());
    for cut in 0..msg.len() {
        let mut r = MsgReader::new(NodeId(1), &msg[..cut]);
        let whole = r.u8().and_then(|_| r.page(&m)).and_then(|_| r.node(&m));
        let whole = whole.and_then(|_| r.bytes()).and_then(|_| r.u64());
        assert!(whole.is_err(), "cut at {cut}");
    }
    let far = MsgWriter::new(1).page(PageId(64)).node(NodeId(2)).finish();
    let mut r = MsgReader::new(NodeId(1), &far);
    r.u8().expect("kind");
    assert!(r.page(&m).is_err());
    assert!(r.node(&m).is_err());
    let mut mm = m;
    assert!(mm.write_page(PageId(1), PAGE_SIZE - 1, &[1, 2]).is_err());
}

//! Fuzz target: the page-protocol cores (`hlrc` in several tunings, `sc`, and the router that
//! runs both side by side as the runtime does) driven by a script
//! that mixes faults, releases, barriers, atomics and the delivery of real messages with
//! corrupted, truncated and made-up ones. No input may panic a core, and a core never touches a
//! page outside the job's range (the runtime's backdoor would fault there).
#![no_main]
use libfuzzer_sys::fuzz_target;
use squall_core::{
    Access, AllocInfo, HeapLayout, NodeId, PageId, PageMemory, Placement, PAGE_SIZE,
};
use squall_protocol::{
    Action, AtomicCall, AtomicOp, Coherence, Hlrc, Protocol, ProtocolKind, Router, Sc,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

#[path = "common/script.rs"]
mod script;
use script::Script;

/// A node's pages; panics (fails the run) when a core names a page outside the range.
#[derive(Clone)]
struct Mem {
    total: u64,
    pages: Rc<RefCell<BTreeMap<u64, Vec<u8>>>>,
    access: Rc<RefCell<BTreeMap<u64, Access>>>,
}

impl Mem {
    fn check(&self, page: PageId) {
        assert!(page.0 < self.total, "core touched {page} outside the range");
    }
}

impl PageMemory for Mem {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        self.check(page);
        match self.pages.borrow().get(&page.0) {
            Some(p) => out.copy_from_slice(p),
            None => out.fill(0),
        }
    }
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        self.check(page);
        assert!(offset + data.len() <= PAGE_SIZE, "write past the page end");
        let mut pages = self.pages.borrow_mut();
        let p = pages.entry(page.0).or_insert_with(|| vec![0; PAGE_SIZE]);
        p[offset..offset + data.len()].copy_from_slice(data);
    }
    fn set_access(&self, page: PageId, access: Access) {
        self.check(page);
        self.access.borrow_mut().insert(page.0, access);
    }
    fn access(&self, page: PageId) -> Access {
        self.check(page);
        self.access
            .borrow()
            .get(&page.0)
            .copied()
            .unwrap_or(Access::None)
    }
}

fn core(kind: u8, mem: Mem, me: NodeId, layout: HeapLayout) -> Box<dyn Protocol> {
    if kind % 8 >= 6 {
        // The router the runtime ships: hlrc and sc side by side, either one the default.
        let cores: Vec<Box<dyn Protocol>> = vec![
            Box::new(Hlrc::new(mem.clone(), me, layout)),
            Box::new(Sc::new(mem, me, layout)),
        ];
        let default = Coherence {
            protocol: if kind % 8 == 6 {
                ProtocolKind::Hlrc
            } else {
                ProtocolKind::Sc
            },
            unit_pages: 1,
            updates: false,
        };
        match Router::new(me, layout, default, cores) {
            Ok(r) => return Box::new(r),
            Err(e) => panic!("the router refused its own cores: {e}"),
        }
    }
    if kind % 8 == 5 {
        return Box::new(Sc::new(mem, me, layout));
    }
    let mut h = Hlrc::new(mem, me, layout);
    h.set_exclusive_mode(kind % 6 == 1);
    h.set_migrate_after(if kind % 6 == 2 { 1 } else { 0 });
    h.set_read_ahead(kind % 6 == 3);
    h.set_push_updates(kind % 6 == 4);
    if kind & 0x80 != 0 {
        h.set_notice_budget(1);
    }
    Box::new(h)
}

fuzz_target!(|data: &[u8]| {
    let mut s = Script::new(data);
    let kind = s.u8();
    let nodes = 2 + u16::from(s.u8() % 3);
    let layout = HeapLayout {
        nodes,
        total_pages: u64::from(nodes) * 8,
    };
    let mems: Vec<Mem> = (0..nodes)
        .map(|_| Mem {
            total: layout.total_pages,
            pages: Rc::default(),
            access: Rc::default(),
        })
        .collect();
    let mut cores: Vec<Box<dyn Protocol>> = (0..nodes)
        .map(|n| core(kind, mems[usize::from(n)].clone(), NodeId(n), layout))
        .collect();
    // Node n allocates its first four pages, homed by the fuzzer's choice.
    for n in 0..nodes {
        let placement = match s.u8() % 5 {
            0 => Placement::Node(NodeId(n)),
            1 => Placement::Node(NodeId(u16::from(s.u8()) % nodes)),
            2 => Placement::RoundRobin {
                block_pages: 1 + s.below(3),
            },
            3 => Placement::Blocked,
            _ => Placement::FirstTouch,
        };
        cores[usize::from(n)].register_allocation(AllocInfo {
            first: PageId(u64::from(n) * 8),
            pages: 4,
            placement,
        });
    }
    let mut queues: BTreeMap<(u16, u16), VecDeque<Vec<u8>>> = BTreeMap::new();
    let mut token = 0u64;
    let mut steps = 0;
    while !s.done() && steps < 2_000 {
        steps += 1;
        let n = u16::from(s.u8()) % nodes;
        let op = s.u8() % 10;
        let c = &mut cores[usize::from(n)];
        match op {
            0 | 1 => {
                let page = PageId(s.below(layout.total_pages));
                let _ = c.handle_fault(page, op == 1);
            }
            2..=4 => {
                // Deliver the oldest message of a pair, maybe corrupted or truncated.
                let from = u16::from(s.u8()) % nodes;
                let how = s.u8();
                if let Some(mut m) = queues.get_mut(&(from, n)).and_then(|q| q.pop_front()) {
                    if how % 4 == 1 && !m.is_empty() {
                        let at = usize::from(s.u16()) % m.len();
                        m[at] ^= s.u8() | 1;
                    } else if how % 4 == 2 {
                        let cut = usize::from(s.u16()) % (m.len() + 1);
                        m.truncate(cut);
                    }
                    let _ = c.handle_message(NodeId(from), &m);
                }
            }
            5 => {
                let from = u16::from(s.u8()) % nodes;
                let m = s.bytes(64);
                let _ = c.handle_message(NodeId(from), &m);
            }
            6 => {
                token += 1;
                let _ = c.begin_release(token);
            }
            7 => {
                let info = c.acquire_info();
                let other = u16::from(s.u8()) % nodes;
                let grant = cores[usize::from(other)].grant_info(&info);
                let grant = if s.u8() % 4 == 0 { s.bytes(32) } else { grant };
                cores[usize::from(n)].apply_grant(&grant);
            }
            8 => {
                let infos: Vec<Vec<u8>> = (0..nodes)
                    .map(|m| cores[usize::from(m)].barrier_info())
                    .collect();
                for m in 0..nodes {
                    cores[usize::from(m)].apply_barrier(&infos);
                }
            }
            _ => {
                token += 1;
                let page = PageId(s.below(layout.total_pages));
                let width = [1u8, 2, 4, 8, 3][usize::from(s.u8()) % 5];
                let offset = usize::from(s.u16()) % (PAGE_SIZE + 8);
                let op = match s.u8() % 4 {
                    0 => AtomicOp::FetchAdd(s.u64()),
                    1 => AtomicOp::Swap(s.u64()),
                    2 => AtomicOp::Load,
                    _ => AtomicOp::CompareSwap {
                        expected: s.u64(),
                        new: s.u64(),
                    },
                };
                let call = AtomicCall {
                    op,
                    width,
                    acquire: s.u8() % 2 == 0,
                    release: None,
                };
                let _ = c.atomic(page, offset, call, token);
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

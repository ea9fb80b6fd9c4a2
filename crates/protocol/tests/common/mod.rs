//! A tiny hand-driven cluster of protocol cores for tests: messages wait in per-pair FIFO
//! queues until the test delivers them, so races can be staged exactly.
#![allow(dead_code)]

use squall_core::{
    Access, AllocInfo, HeapLayout, NodeId, PageId, PageMemory, Placement, PAGE_SIZE,
};
use squall_protocol::{Action, Hlrc, ProtoStats, Protocol, Sc};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

#[derive(Default)]
pub struct Mem {
    pages: RefCell<BTreeMap<u64, Vec<u8>>>,
    access: RefCell<BTreeMap<u64, Access>>,
    /// Stores of an application thread that land only when their page is write-protected
    /// (`Cluster::store_at_protect`): (page, offset, value).
    late: RefCell<Vec<(u64, usize, u64)>>,
}

#[derive(Clone)]
pub struct MemH(pub Rc<Mem>);

impl PageMemory for MemH {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        match self.0.pages.borrow().get(&page.0) {
            Some(p) => out.copy_from_slice(p),
            None => out.fill(0),
        }
    }
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        let mut pages = self.0.pages.borrow_mut();
        let p = pages.entry(page.0).or_insert_with(|| vec![0; PAGE_SIZE]);
        p[offset..offset + data.len()].copy_from_slice(data);
    }
    fn set_access(&self, page: PageId, access: Access) {
        if access != Access::ReadWrite {
            // The last moment a thread's store to a writable page can land.
            let mut late = self.0.late.borrow_mut();
            for (_, offset, v) in late.iter().filter(|l| l.0 == page.0) {
                self.write_bytes(page, *offset, &v.to_le_bytes());
            }
            late.retain(|l| l.0 != page.0);
        }
        self.0.access.borrow_mut().insert(page.0, access);
    }
    fn access(&self, page: PageId) -> Access {
        self.0
            .access
            .borrow()
            .get(&page.0)
            .copied()
            .unwrap_or(Access::None)
    }
}

pub struct Cluster {
    pub cores: Vec<Box<dyn Protocol>>,
    pub mems: Vec<MemH>,
    pub queues: BTreeMap<(u16, u16), VecDeque<Vec<u8>>>,
    pub resumed: Vec<(u16, PageId)>,
    pub released: Vec<(u16, u64)>,
    pub atomics: Vec<(u16, u64, u64)>,
    /// The release infos each completed atomic brought back: (node, token, infos).
    pub atomic_infos: Vec<(u16, u64, Vec<Vec<u8>>)>,
}

pub const LAYOUT: HeapLayout = HeapLayout {
    nodes: 4,
    total_pages: 64,
};

impl Cluster {
    /// `nodes` cores of `kind` ("hlrc" without migration or exclusive mode, "hlrc-excl" with
    /// exclusive mode, "hlrc-migrate" with migration threshold 1, "hlrc-small" with a notice
    /// budget of 1, "hlrc-ahead" with read-ahead (off in the others), "hlrc-push" with push
    /// updates (off in the others), "hlrc-nobfetch" like "hlrc" without barrier fetches, "sc"); node 0
    /// allocates pages 0..4 homed at node 0.
    pub fn new(kind: &str, nodes: u16) -> Self {
        let layout = HeapLayout {
            nodes,
            total_pages: u64::from(nodes) * 16,
        };
        let mut cores: Vec<Box<dyn Protocol>> = Vec::new();
        let mut mems = Vec::new();
        for n in 0..nodes {
            let m = MemH(Rc::new(Mem::default()));
            let core: Box<dyn Protocol> = match kind {
                "sc" => Box::new(Sc::new(m.clone(), NodeId(n), layout)),
                "hlrc-excl" => {
                    let mut h = Hlrc::new(m.clone(), NodeId(n), layout);
                    h.set_push_updates(kind == "hlrc-push");
                    h.set_migrate_after(0);
                    h.set_read_ahead(false);
                    Box::new(h)
                }
                "hlrc-ahead" | "hlrc-ahead2" => {
                    let mut h = Hlrc::new(m.clone(), NodeId(n), layout);
                    h.set_push_updates(kind == "hlrc-push");
                    h.set_exclusive_mode(false);
                    h.set_migrate_after(0);
                    if kind == "hlrc-ahead2" {
                        h.set_lost_run(2);
                    }
                    Box::new(h)
                }
                "hlrc-small" => {
                    let mut h = Hlrc::new(m.clone(), NodeId(n), layout);
                    h.set_push_updates(kind == "hlrc-push");
                    h.set_exclusive_mode(false);
                    h.set_migrate_after(0);
                    h.set_notice_budget(1);
                    h.set_read_ahead(false);
                    Box::new(h)
                }
                "hlrc-migrate" => {
                    let mut h = Hlrc::new(m.clone(), NodeId(n), layout);
                    h.set_push_updates(kind == "hlrc-push");
                    h.set_exclusive_mode(false);
                    h.set_migrate_after(1);
                    h.set_read_ahead(false);
                    Box::new(h)
                }
                _ => {
                    let mut h = Hlrc::new(m.clone(), NodeId(n), layout);
                    h.set_push_updates(kind == "hlrc-push");
                    h.set_exclusive_mode(false);
                    h.set_migrate_after(0);
                    h.set_read_ahead(false);
                    if kind == "hlrc-nobfetch" {
                        h.set_barrier_fetch(0);
                    }
                    Box::new(h)
                }
            };
            cores.push(core);
            mems.push(m);
        }
        cores[0].register_allocation(AllocInfo {
            first: PageId(0),
            pages: 4,
            placement: Placement::Node(NodeId(0)),
        });
        Cluster {
            cores,
            mems,
            queues: BTreeMap::new(),
            resumed: Vec::new(),
            released: Vec::new(),
            atomics: Vec::new(),
            atomic_infos: Vec::new(),
        }
    }

    pub fn drain(&mut self, n: u16) {
        while let Some(a) = self.cores[usize::from(n)].poll_action() {
            match a {
                Action::Send { to, msg } => {
                    self.queues.entry((n, to.0)).or_default().push_back(msg)
                }
                Action::Resume { page } => self.resumed.push((n, page)),
                Action::ReleaseDone { token } => self.released.push((n, token)),
                Action::AtomicDone { token, old, infos } => {
                    self.atomics.push((n, token, old));
                    self.atomic_infos.push((n, token, infos));
                }
                Action::Announced { token } => {
                    panic!("node {n}: announcement {token} from a lone core")
                }
            }
        }
    }

    pub fn fault(&mut self, n: u16, page: u64, write: bool) {
        self.cores[usize::from(n)]
            .handle_fault(PageId(page), write)
            .expect("fault accepted");
        self.drain(n);
    }

    /// Deliver the oldest message from `from` to `to`; false if none is waiting.
    pub fn deliver(&mut self, from: u16, to: u16) -> bool {
        let Some(msg) = self.queues.get_mut(&(from, to)).and_then(|q| q.pop_front()) else {
            return false;
        };
        self.cores[usize::from(to)]
            .handle_message(NodeId(from), &msg)
            .expect("message accepted");
        self.drain(to);
        true
    }

    pub fn pending(&self, from: u16, to: u16) -> usize {
        self.queues.get(&(from, to)).map_or(0, |q| q.len())
    }

    /// Deliver everything, pair by pair in a fixed order, until quiet.
    pub fn settle(&mut self) {
        loop {
            let pairs: Vec<(u16, u16)> = self
                .queues
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            if pairs.is_empty() {
                return;
            }
            for (f, t) in pairs {
                self.deliver(f, t);
            }
        }
    }

    pub fn store(&self, n: u16, page: u64, offset: usize, v: u64) {
        assert_eq!(
            self.mems[usize::from(n)].access(PageId(page)),
            Access::ReadWrite,
            "node {n} stores without write access"
        );
        self.mems[usize::from(n)].write_bytes(PageId(page), offset, &v.to_le_bytes());
    }

    /// A store by one of node `n`'s threads that lands while the core is working: just
    /// before the page is next write-protected (the runtime's threads write while its
    /// service thread runs the core).
    pub fn store_at_protect(&self, n: u16, page: u64, offset: usize, v: u64) {
        assert_eq!(self.access(n, page), Access::ReadWrite);
        self.mems[usize::from(n)]
            .0
            .late
            .borrow_mut()
            .push((page, offset, v));
    }

    pub fn load(&self, n: u16, page: u64, offset: usize) -> u64 {
        assert_ne!(
            self.mems[usize::from(n)].access(PageId(page)),
            Access::None,
            "node {n} loads without access"
        );
        let mut buf = vec![0u8; PAGE_SIZE];
        self.mems[usize::from(n)].read_page(PageId(page), &mut buf);
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[offset..offset + 8]);
        u64::from_le_bytes(w)
    }

    pub fn access(&self, n: u16, page: u64) -> Access {
        self.mems[usize::from(n)].access(PageId(page))
    }

    /// Hand a lock from `from` to `to` through the Consistency hooks (release already done).
    pub fn handoff(&mut self, from: u16, to: u16) {
        let info = self.cores[usize::from(to)].acquire_info();
        let g = self.cores[usize::from(from)].grant_info(&info);
        self.cores[usize::from(to)].apply_grant(&g);
        self.drain(to);
    }

    /// Like `handoff`, but through a grant that names no acquirer (`grant_info(&[])`, as a
    /// flag or a spawn carries): the notices only, no pages pushed with them.
    pub fn notify(&mut self, from: u16, to: u16) {
        let g = self.cores[usize::from(from)].grant_info(&[]);
        self.cores[usize::from(to)].apply_grant(&g);
        self.drain(to);
    }

    /// Release on `n` and deliver until it completes.
    pub fn release(&mut self, n: u16, token: u64) {
        if !self.cores[usize::from(n)].begin_release(token) {
            self.drain(n);
            self.settle();
            assert!(
                self.released.contains(&(n, token)),
                "release {token} of node {n} did not complete"
            );
        }
        self.drain(n);
    }

    pub fn total_stats(&self) -> ProtoStats {
        let mut s = ProtoStats::default();
        for c in &self.cores {
            s.merge(&c.stats());
        }
        s
    }
}

//! The simulator's `PageMemory`: a page table of byte arrays and access states per node.
//!
//! Owns: one node's copy of the global pages, and the stores of its threads that have not
//! landed yet (late stores, below). Must not touch: protocol decisions. The same table is
//! shared (by `Rc`) between the node's protocol core (the backdoor) and the simulated
//! application threads, which must check `access` before every load and store, like the MMU.
//!
//! **Late stores.** In the runtime, a node's application threads keep writing their writable
//! pages while the service thread runs the protocol core (a release comparing a page with its
//! snapshot, a fetch reading a page to serve it). A store made with [`SimMemory::store_late`]
//! models that: it lands between two backdoor operations of the core on its page (before the
//! `fuse`-th one), or just before its page loses write access (the last moment the real store
//! could land), or when its thread takes its next step ([`SimMemory::land`]), whichever comes
//! first.

use squall_core::{Access, PageId, PageMemory, PAGE_SIZE};
use std::cell::RefCell;
use std::rc::Rc;

/// A store not landed yet.
#[derive(Debug)]
struct Late {
    thread: usize,
    page: PageId,
    offset: usize,
    value: u64,
    /// It lands before the `fuse`-th backdoor operation on its page from now.
    fuse: u32,
}

#[derive(Debug)]
struct Table {
    pages: Vec<Option<Box<[u8]>>>,
    access: Vec<Access>,
    late: Vec<Late>,
}

impl Table {
    fn put(&mut self, page: PageId, offset: usize, data: &[u8]) {
        let p = self.pages[page.0 as usize].get_or_insert_with(|| vec![0u8; PAGE_SIZE].into());
        p[offset..offset + data.len()].copy_from_slice(data);
    }

    /// Land the late stores `which` selects, in the order they were made.
    fn land_where(&mut self, which: impl Fn(&Late) -> bool) {
        if self.late.is_empty() {
            return;
        }
        let (now, later): (Vec<Late>, Vec<Late>) =
            std::mem::take(&mut self.late).into_iter().partition(which);
        self.late = later;
        for s in now {
            self.put(s.page, s.offset, &s.value.to_le_bytes());
        }
    }

    /// A backdoor operation of the core on `page` is about to run: late stores to the page
    /// whose fuse burns out land first.
    fn tick(&mut self, page: PageId) {
        let mut due = false;
        for s in self.late.iter_mut().filter(|s| s.page == page) {
            s.fuse = s.fuse.saturating_sub(1);
            due |= s.fuse == 0;
        }
        if due {
            self.land_where(|s| s.fuse == 0);
        }
    }
}

/// One node's page table (cheap to clone: clones share the table).
#[derive(Debug, Clone)]
pub struct SimMemory(Rc<RefCell<Table>>);

impl SimMemory {
    pub fn new(total_pages: u64) -> Self {
        let n = total_pages as usize;
        SimMemory(Rc::new(RefCell::new(Table {
            pages: (0..n).map(|_| None).collect(),
            access: vec![Access::None; n],
            late: Vec::new(),
        })))
    }

    /// Load the `u64` at `offset` (the caller checked the access, as the MMU would).
    pub fn load(&self, page: PageId, offset: usize) -> u64 {
        let t = self.0.borrow();
        match &t.pages[page.0 as usize] {
            Some(p) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&p[offset..offset + 8]);
                u64::from_le_bytes(w)
            }
            None => 0,
        }
    }

    /// Store the `u64` at `offset` (the caller checked the access).
    pub fn store(&self, page: PageId, offset: usize, v: u64) {
        self.0.borrow_mut().put(page, offset, &v.to_le_bytes());
    }

    /// `thread` stores the `u64` at `offset` of a writable page, landing late: before the
    /// `fuse`-th backdoor operation of the core on the page, before the page loses write
    /// access, or at the thread's next step, whichever comes first (see the module docs).
    pub fn store_late(&self, thread: usize, page: PageId, offset: usize, v: u64, fuse: u32) {
        let mut t = self.0.borrow_mut();
        debug_assert_eq!(t.access[page.0 as usize], Access::ReadWrite);
        t.late.push(Late {
            thread,
            page,
            offset,
            value: v,
            fuse: fuse.max(1),
        });
    }

    /// `thread` takes its next step: its late stores land (program order).
    pub fn land(&self, thread: usize) {
        self.0.borrow_mut().land_where(|s| s.thread == thread);
    }
}

impl PageMemory for SimMemory {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        let mut t = self.0.borrow_mut();
        t.tick(page);
        match &t.pages[page.0 as usize] {
            Some(p) => out.copy_from_slice(p),
            None => out.fill(0),
        }
    }

    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        let mut t = self.0.borrow_mut();
        t.tick(page);
        t.put(page, offset, data);
    }

    fn set_access(&self, page: PageId, access: Access) {
        let mut t = self.0.borrow_mut();
        t.tick(page);
        if access != Access::ReadWrite {
            // The last moment a store to this page could still land.
            t.land_where(|s| s.page == page);
        }
        t.access[page.0 as usize] = access;
    }

    fn access(&self, page: PageId) -> Access {
        self.0.borrow().access[page.0 as usize]
    }
}

//! The simulator's `PageMemory`: a page table of byte arrays and access states per node.
//!
//! Owns: one node's copy of the global pages. Must not touch: protocol decisions. The same
//! table is shared (by `Rc`) between the node's protocol core (the backdoor) and the simulated
//! application threads, which must check `access` before every load and store, like the MMU.

use squall_core::{Access, PageId, PageMemory, PAGE_SIZE};
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Debug)]
struct Table {
    pages: Vec<Option<Box<[u8]>>>,
    access: Vec<Access>,
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
        self.write_bytes(page, offset, &v.to_le_bytes());
    }
}

impl PageMemory for SimMemory {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        let t = self.0.borrow();
        match &t.pages[page.0 as usize] {
            Some(p) => out.copy_from_slice(p),
            None => out.fill(0),
        }
    }

    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        let mut t = self.0.borrow_mut();
        let p = t.pages[page.0 as usize].get_or_insert_with(|| vec![0u8; PAGE_SIZE].into());
        p[offset..offset + data.len()].copy_from_slice(data);
    }

    fn set_access(&self, page: PageId, access: Access) {
        self.0.borrow_mut().access[page.0 as usize] = access;
    }

    fn access(&self, page: PageId) -> Access {
        self.0.borrow().access[page.0 as usize]
    }
}

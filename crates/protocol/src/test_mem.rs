//! A page memory for the crate's unit tests: a map of page number to contents and access, no
//! real protection (tests read the recorded access instead). Test builds only.
use squall_core::{Access, PageId, PageMemory, PAGE_SIZE};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Page number → (contents, access).
type Pages = HashMap<u64, (Vec<u8>, Access)>;

/// Shared by clones, so a test keeps a handle on what a core wrote.
#[derive(Clone, Default)]
pub(crate) struct Mem(pub(crate) Rc<RefCell<Pages>>);

impl PageMemory for Mem {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        match self.0.borrow().get(&page.0) {
            Some((d, _)) => out.copy_from_slice(d),
            None => out.fill(0),
        }
    }
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        let mut m = self.0.borrow_mut();
        let e = m
            .entry(page.0)
            .or_insert_with(|| (vec![0; PAGE_SIZE], Access::None));
        e.0[offset..offset + data.len()].copy_from_slice(data);
    }
    fn set_access(&self, page: PageId, access: Access) {
        let mut m = self.0.borrow_mut();
        m.entry(page.0)
            .or_insert_with(|| (vec![0; PAGE_SIZE], Access::None))
            .1 = access;
    }
    fn access(&self, page: PageId) -> Access {
        self.0.borrow().get(&page.0).map_or(Access::None, |e| e.1)
    }
}

//! The allocator of the global part of the range: the pages above the per-node arenas
//! ([`HeapLayout::global_start`] on), from which allocations too large for an arena are
//! claimed. One instance decides for the whole job (node 0's: the runtime sends every claim
//! there), so two nodes never get the same pages; the claimant then announces the claim to
//! every node, which registers it with its protocol before the address is returned.
//!
//! Policy: page ranges come from a bump pointer (aligned as asked) and are **never handed out
//! twice**, as in the arenas (see the `heap` module): a freed range could meet stale copies or
//! homes decided under another placement on other nodes. A free releases the range's physical
//! memory on the caller's side and counts the pages as freed.
//!
//! Owns: the bookkeeping of which global-part pages are claimed. Must not touch: memory
//! contents, access rights, the network. Not thread-safe by itself.

use crate::error::AllocError;
use squall_core::{HeapLayout, PageId, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet};

/// The claims of the global part (see the module docs).
#[derive(Debug)]
pub struct GlobalPart {
    layout: HeapLayout,
    base: usize,
    next_page: u64,
    /// Live claims: first page → pages.
    live: BTreeMap<u64, u64>,
    freed: BTreeSet<u64>,
    freed_pages: u64,
}

impl GlobalPart {
    /// The global part of `layout` in a range starting at address `base` (empty when the range
    /// is too small to have one).
    pub fn new(layout: HeapLayout, base: usize) -> Self {
        GlobalPart {
            layout,
            base,
            next_page: layout.global_start().0,
            live: BTreeMap::new(),
            freed: BTreeSet::new(),
            freed_pages: 0,
        }
    }

    /// Bytes never claimed (the largest allocation that can still succeed, before alignment).
    pub fn left(&self) -> u64 {
        self.layout.total_pages.saturating_sub(self.next_page) * PAGE_SIZE as u64
    }

    /// Bytes claimed and since freed (their pages are not handed out again).
    pub fn freed_bytes(&self) -> u64 {
        self.freed_pages * PAGE_SIZE as u64
    }

    fn oom(&self, size: usize, align: usize) -> AllocError {
        let page = PAGE_SIZE as u64;
        AllocError::GlobalFull {
            size,
            align,
            left: self.left(),
            global: (self.layout.total_pages - self.layout.global_start().0) * page,
            arena: self.layout.pages_per_node() * page,
            range: self.layout.total_pages * page,
            nodes: self.layout.nodes,
            max_range: crate::space::max_range(self.base) as u64,
        }
    }

    /// Claim whole pages for `size` bytes aligned to `align` (a power of two, 0 for a page;
    /// at least a page): their first page and count.
    pub fn claim(&mut self, size: usize, align: usize) -> Result<(PageId, u64), AllocError> {
        if !align.is_power_of_two() && align != 0 {
            return Err(AllocError::BadAlign { align });
        }
        let align = align.max(PAGE_SIZE);
        let pages = size.max(1).div_ceil(PAGE_SIZE) as u64;
        let addr = self.base + self.next_page as usize * PAGE_SIZE;
        let aligned = addr
            .checked_next_multiple_of(align)
            .ok_or_else(|| self.oom(size, align))?;
        let first = self.next_page + ((aligned - addr) / PAGE_SIZE) as u64;
        let end = first
            .checked_add(pages)
            .filter(|&e| e <= self.layout.total_pages)
            .ok_or_else(|| self.oom(size, align))?;
        self.next_page = end;
        self.live.insert(first, pages);
        Ok((PageId(first), pages))
    }

    fn page_at(&self, addr: usize) -> Option<u64> {
        let off = addr.checked_sub(self.base)?;
        (off % PAGE_SIZE == 0).then_some((off / PAGE_SIZE) as u64)
    }

    /// Free the claim starting at `addr`; returns its pages (to release their memory).
    pub fn free(&mut self, addr: usize) -> Result<(PageId, u64), AllocError> {
        let first = self
            .page_at(addr)
            .ok_or(AllocError::NotAllocated { addr, node: 0 })?;
        match self.live.remove(&first) {
            Some(pages) => {
                self.freed.insert(first);
                self.freed_pages += pages;
                Ok((PageId(first), pages))
            }
            None if self.freed.contains(&first) => Err(AllocError::DoubleFree { addr }),
            None => Err(AllocError::NotAllocated { addr, node: 0 }),
        }
    }

    /// Usable bytes of the live claim starting at `addr`.
    pub fn size_of(&self, addr: usize) -> Option<usize> {
        let first = self.page_at(addr)?;
        self.live
            .get(&first)
            .map(|&pages| pages as usize * PAGE_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: usize = 0x100_0000_0000;

    fn layout(nodes: u16, gib: u64) -> HeapLayout {
        HeapLayout {
            nodes,
            total_pages: gib << 18,
        }
    }

    #[test]
    fn claims_more_than_one_arena_and_refuses_past_the_free_part() {
        // 1 TiB over 2 nodes: arenas of 64 GiB, a global part of 896 GiB.
        let l = layout(2, 1024);
        let mut g = GlobalPart::new(l, BASE);
        assert_eq!(g.left(), 896 << 30);
        let a = g.claim(700 << 30, 0).expect("700 GiB fit");
        assert_eq!(a, (l.global_start(), 700 << 18));
        assert_eq!(
            g.size_of(BASE + a.0 .0 as usize * PAGE_SIZE),
            Some(700 << 30)
        );
        let e = g.claim(300 << 30, 0).expect_err("300 GiB do not fit");
        let msg = e.to_string();
        assert!(msg.contains("300G asked"), "{msg}");
        assert!(msg.contains("196G left in the global part"), "{msg}");
        assert!(msg.contains("SQUALL_HEAP_SIZE"), "{msg}");
        let b = g.claim(100 << 30, 1 << 30).expect("100 GiB fit");
        assert_eq!((BASE + b.0 .0 as usize * PAGE_SIZE) % (1 << 30), 0);
        assert!(b.0 .0 >= a.0 .0 + a.1);
    }

    #[test]
    fn free_returns_the_pages_once_and_never_hands_them_out_again() {
        let l = layout(4, 1024);
        let mut g = GlobalPart::new(l, BASE);
        let a = g.claim(5 << 30, 0).expect("fits");
        let addr = BASE + a.0 .0 as usize * PAGE_SIZE;
        assert_eq!(g.free(addr), Ok(a));
        assert_eq!(g.free(addr), Err(AllocError::DoubleFree { addr }));
        assert_eq!(g.freed_bytes(), 5 << 30);
        let b = g.claim(PAGE_SIZE, 0).expect("fits");
        assert!(b.0 .0 >= a.0 .0 + a.1);
        assert!(g.free(addr + PAGE_SIZE).is_err());
    }

    #[test]
    fn a_small_range_has_no_global_part() {
        let l = layout(2, 1);
        let mut g = GlobalPart::new(l, BASE);
        assert_eq!(g.left(), 0);
        assert!(g.claim(PAGE_SIZE, 0).is_err());
    }
}

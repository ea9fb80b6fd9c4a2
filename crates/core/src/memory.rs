//! What coherence protocols see of memory: page access rights, page contents through a
//! backdoor that never faults, the static layout of the global range, and placement policies.

use crate::{NodeId, PageId, PAGE_SIZE};
use serde::{Deserialize, Serialize};

/// Access the application has to its node's copy of a page.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    /// Any access faults (the copy is invalid or absent).
    None,
    /// Reads proceed, writes fault.
    Read,
    /// Reads and writes proceed.
    ReadWrite,
}

/// A node's copy of the global pages, as the service thread sees it. Reads and writes here go
/// through a view that never faults and never changes the application's access; only
/// `set_access` changes what application threads may do (and wakes threads waiting on a fault
/// of that page when it grants the access they need). Implemented by `squall-memory` in the
/// runtime and by a plain page table in the simulator.
pub trait PageMemory {
    /// Copy the node's copy of `page` into `out` (`out.len() == PAGE_SIZE`).
    fn read_page(&self, page: PageId, out: &mut [u8]);
    /// Whether the node's copy of `page` equals `data` (`data.len() == PAGE_SIZE`): a release
    /// compares a home page with its snapshot this way, without copying the page.
    fn page_equals(&self, page: PageId, data: &[u8]) -> bool {
        let mut cur = vec![0u8; data.len()];
        self.read_page(page, &mut cur);
        cur == data
    }
    /// Overwrite `len(data)` bytes of the node's copy of `page` starting at `offset`.
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]);
    /// Change the application's access to `page`.
    fn set_access(&self, page: PageId, access: Access);
    /// Change the application's access to the `count` pages from `first` (one kernel call per
    /// run where the implementation can).
    fn set_access_run(&self, first: PageId, count: u64, access: Access) {
        for p in first.0..first.0 + count {
            self.set_access(PageId(p), access);
        }
    }
    /// The application's current access to `page`.
    fn access(&self, page: PageId) -> Access;
}

/// A shared handle to a page memory is a page memory (the runtime shares its address space
/// between the protocol core and the fault thread).
impl<T: PageMemory + ?Sized> PageMemory for std::sync::Arc<T> {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        (**self).read_page(page, out)
    }
    fn page_equals(&self, page: PageId, data: &[u8]) -> bool {
        (**self).page_equals(page, data)
    }
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        (**self).write_bytes(page, offset, data)
    }
    fn set_access(&self, page: PageId, access: Access) {
        (**self).set_access(page, access)
    }
    fn set_access_run(&self, first: PageId, count: u64, access: Access) {
        (**self).set_access_run(first, count, access)
    }
    fn access(&self, page: PageId) -> Access {
        (**self).access(page)
    }
}

/// The simulator shares one node's memory between the core and its simulated threads.
impl<T: PageMemory + ?Sized> PageMemory for std::rc::Rc<T> {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        (**self).read_page(page, out)
    }
    fn page_equals(&self, page: PageId, data: &[u8]) -> bool {
        (**self).page_equals(page, data)
    }
    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        (**self).write_bytes(page, offset, data)
    }
    fn set_access(&self, page: PageId, access: Access) {
        (**self).set_access(page, access)
    }
    fn set_access_run(&self, first: PageId, count: u64, access: Access) {
        (**self).set_access_run(first, count, access)
    }
    fn access(&self, page: PageId) -> Access {
        (**self).access(page)
    }
}

/// Overwrite a whole page.
pub fn write_page(mem: &dyn PageMemory, page: PageId, data: &[u8]) {
    debug_assert_eq!(data.len(), PAGE_SIZE);
    mem.write_bytes(page, 0, data);
}

/// Static layout of the global range. A large range (at least [`SPLIT_MIN_PAGES`] pages per
/// node) is cut in two:
///
/// * the **local part**, the bottom eighth ([`HeapLayout::local_pages`]), split evenly into
///   one arena per node: a node allocates small and ordinary objects only inside its own arena
///   with no message, so it is the manager of every page it allocated there (it knows the
///   allocation's placement and answers home look-ups for it);
/// * the **global part**, the rest ([`HeapLayout::global_start`] on), from which node 0 hands
///   out allocations too large for an arena (any size up to the free part of the global part,
///   see `squall-memory`'s `GlobalPart`). Its pages are managed in stripes of
///   [`STRIPE_PAGES`] pages dealt to the nodes in turn, so the manager of every page is still
///   a function of its address (no directory on the fault path) and the home look-ups of one
///   big allocation are spread over every node; every node registers a big allocation (its
///   placement) when it is announced, before anyone can touch it.
///
/// A small range (tests, the simulator) has no global part: the arenas cover all of it.
///
/// Adopted regions (a program's `SQUALL_GLOBAL` section, see `squall-memory`'s
/// `AddressSpace::adopt_region`) are managed by node 0: their pages are taken from the top of
/// node 0's arena ([`HeapLayout::adopted_first`]), and any page number at or past
/// `total_pages` is also managed by node 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapLayout {
    /// Number of nodes in the job.
    pub nodes: u16,
    /// Total pages in the global range.
    pub total_pages: u64,
}

/// Pages per node from which the range gets a global part (8 GiB of 4 KiB pages per node:
/// the default 64 GiB range up to 8 nodes, any range of a terabyte).
pub const SPLIT_MIN_PAGES: u64 = 1 << 21;

/// Pages of one manager stripe of the global part (1 GiB).
pub const STRIPE_PAGES: u64 = 1 << 18;

impl HeapLayout {
    fn n(&self) -> u64 {
        u64::from(self.nodes.max(1))
    }
    /// Whether the range has a global part (it is large enough to split).
    pub fn has_global_part(&self) -> bool {
        self.total_pages / self.n() >= SPLIT_MIN_PAGES
    }
    /// Pages of the local part (all the arenas): the bottom eighth of a large range, rounded
    /// down to whole arenas; the whole range otherwise.
    pub fn local_pages(&self) -> u64 {
        if self.has_global_part() {
            self.total_pages / 8 / self.n() * self.n()
        } else {
            self.total_pages
        }
    }
    /// First page of the global part (`total_pages` when there is none).
    pub fn global_start(&self) -> PageId {
        PageId(self.local_pages())
    }
    /// Whether `page` lies in the global part.
    pub fn in_global_part(&self, page: PageId) -> bool {
        page.0 >= self.local_pages() && page.0 < self.total_pages
    }
    /// Pages in each node's arena.
    pub fn pages_per_node(&self) -> u64 {
        self.local_pages() / self.n()
    }
    /// The node that manages `page` (answers home look-ups for it): the owner of the arena
    /// holding it, or of its stripe in the global part.
    pub fn manager_of(&self, page: PageId) -> NodeId {
        if page.0 >= self.total_pages {
            return NodeId(0);
        }
        let local = self.local_pages();
        if page.0 >= local {
            return NodeId((((page.0 - local) / STRIPE_PAGES) % self.n()) as u16);
        }
        let per = self.pages_per_node().max(1);
        let n = (page.0 / per).min(self.n() - 1);
        NodeId(n as u16)
    }
    /// First page of `node`'s arena.
    pub fn arena_start(&self, node: NodeId) -> PageId {
        PageId(u64::from(node.0) * self.pages_per_node())
    }
    /// One past the last page of `node`'s arena (the last node's arena also holds the
    /// remainder of the division).
    pub fn arena_end(&self, node: NodeId) -> PageId {
        if u32::from(node.0) + 1 >= u32::from(self.nodes.max(1)) {
            PageId(self.local_pages())
        } else {
            PageId(self.arena_start(node).0 + self.pages_per_node())
        }
    }
    /// First page of an adopted region of `pages` pages: the top `pages` pages of node 0's
    /// arena, so that node 0 manages them and every node numbers them alike. `None` if node 0's
    /// arena is smaller than that.
    pub fn adopted_first(&self, pages: u64) -> Option<PageId> {
        let end = self.arena_end(NodeId(0)).0;
        end.checked_sub(pages).map(PageId)
    }
}

/// Where the home of each page of an allocation is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Placement {
    /// The first node to touch a page becomes its home (default).
    FirstTouch,
    /// Pages dealt to nodes in turn, `block_pages` at a time.
    RoundRobin { block_pages: u64 },
    /// The allocation cut into `nodes` contiguous blocks, block i homed at node i.
    Blocked,
    /// Every page homed at this node.
    Node(NodeId),
}

/// One allocation, as registered with the protocol on the allocating (manager) node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocInfo {
    pub first: PageId,
    pub pages: u64,
    pub placement: Placement,
}

impl AllocInfo {
    /// The home this allocation's placement gives `page`, or `None` for first touch (decided
    /// by whoever touches first) or a page outside the allocation.
    pub fn static_home(&self, page: PageId, nodes: u16) -> Option<NodeId> {
        if page.0 < self.first.0 || page.0 >= self.first.0 + self.pages {
            return None;
        }
        let i = page.0 - self.first.0;
        let n = u64::from(nodes.max(1));
        match self.placement {
            Placement::FirstTouch => None,
            Placement::RoundRobin { block_pages } => {
                Some(NodeId(((i / block_pages.max(1)) % n) as u16))
            }
            Placement::Blocked => {
                let per = self.pages.div_ceil(n).max(1);
                Some(NodeId((i / per).min(n - 1) as u16))
            }
            Placement::Node(node) => Some(node),
        }
    }
}

/// `1.5G`-style byte counts (binary units), as the settings and error messages print them.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, m) in UNITS {
        if bytes >= m {
            return if bytes.is_multiple_of(m) {
                format!("{}{u}", bytes / m)
            } else {
                format!("{:.1}{u}", bytes as f64 / m as f64)
            };
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_and_round_robin_homes() {
        let a = AllocInfo {
            first: PageId(10),
            pages: 8,
            placement: Placement::Blocked,
        };
        let homes: Vec<u16> = (10..18)
            .map(|p| a.static_home(PageId(p), 4).map(|n| n.0).unwrap_or(99))
            .collect();
        assert_eq!(homes, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        let r = AllocInfo {
            first: PageId(0),
            pages: 6,
            placement: Placement::RoundRobin { block_pages: 2 },
        };
        let homes: Vec<u16> = (0..6)
            .map(|p| r.static_home(PageId(p), 2).map(|n| n.0).unwrap_or(99))
            .collect();
        assert_eq!(homes, vec![0, 0, 1, 1, 0, 0]);
        assert_eq!(a.static_home(PageId(18), 4), None);
    }

    #[test]
    fn manager_partition() {
        let l = HeapLayout {
            nodes: 4,
            total_pages: 400,
        };
        assert_eq!(l.manager_of(PageId(0)), NodeId(0));
        assert_eq!(l.manager_of(PageId(100)), NodeId(1));
        assert_eq!(l.manager_of(PageId(399)), NodeId(3));
        assert_eq!(l.arena_start(NodeId(2)), PageId(200));
    }

    #[test]
    fn adopted_pages_are_managed_by_node_zero() {
        let l = HeapLayout {
            nodes: 4,
            total_pages: 402,
        };
        // Past the heap: node 0.
        assert_eq!(l.manager_of(PageId(402)), NodeId(0));
        assert_eq!(l.manager_of(PageId(u64::MAX)), NodeId(0));
        // The last node keeps the remainder.
        assert_eq!(l.manager_of(PageId(401)), NodeId(3));
        assert_eq!(l.arena_end(NodeId(3)), PageId(402));
        assert_eq!(l.arena_end(NodeId(0)), PageId(100));
        // An adopted region sits at the top of node 0's arena and node 0 manages it.
        let first = l.adopted_first(3).unwrap_or(PageId(u64::MAX));
        assert_eq!(first, PageId(97));
        for p in first.0..first.0 + 3 {
            assert_eq!(l.manager_of(PageId(p)), NodeId(0));
        }
        assert_eq!(l.adopted_first(101), None);
        let one = HeapLayout {
            nodes: 1,
            total_pages: 10,
        };
        assert_eq!(one.adopted_first(2), Some(PageId(8)));
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn a_small_range_is_all_arenas() {
        let l = HeapLayout {
            nodes: 4,
            total_pages: 64,
        };
        assert!(!l.has_global_part());
        assert_eq!(l.global_start(), PageId(64));
        assert_eq!(l.manager_of(PageId(15)), NodeId(0));
        assert_eq!(l.manager_of(PageId(16)), NodeId(1));
        assert_eq!(l.manager_of(PageId(63)), NodeId(3));
        assert_eq!(l.arena_end(NodeId(3)), PageId(64));
        assert!(!l.in_global_part(PageId(63)));
    }

    #[test]
    fn a_large_range_has_arenas_below_a_global_part_managed_in_stripes() {
        // 1 TiB over 2 nodes: arenas of 64 GiB, then 896 GiB in 1 GiB stripes.
        let l = HeapLayout {
            nodes: 2,
            total_pages: 1 << 28,
        };
        assert!(l.has_global_part());
        assert_eq!(l.local_pages(), 1 << 25);
        assert_eq!(l.pages_per_node(), 1 << 24);
        assert_eq!(l.arena_end(NodeId(1)), PageId(1 << 25));
        let g = l.global_start().0;
        assert_eq!(l.manager_of(PageId(g - 1)), NodeId(1));
        assert_eq!(l.manager_of(PageId(g)), NodeId(0));
        assert_eq!(l.manager_of(PageId(g + STRIPE_PAGES)), NodeId(1));
        assert_eq!(l.manager_of(PageId(g + 2 * STRIPE_PAGES + 5)), NodeId(0));
        assert_eq!(l.manager_of(PageId(1 << 28)), NodeId(0));
        assert!(l.in_global_part(PageId(g)) && !l.in_global_part(PageId(1 << 28)));
        assert_eq!(l.adopted_first(1), Some(PageId((1 << 24) - 1)));
    }
}

//! The shared-heap allocator of one node: hands out global addresses from the node's arena
//! (pages `layout.arena_start(node) ..` for `layout.pages_per_node()` pages; the last node also
//! gets the remainder pages), so the allocating node is the manager of every page it allocates.
//! Allocations too large for an arena come from the global part instead (`crate::global`).
//!
//! Policy:
//! * Objects smaller than half a page are packed into **size-class pages**, one pool per
//!   (size class, placement, pool tag); freed chunks are reused within their pool. The caller
//!   gives objects that must never share a page different tags (the runtime: one per
//!   coherence policy, so a page follows one protocol). A chunk is aligned to
//!   the largest power of two dividing its class size (at least 16); larger alignments go to the
//!   page path. A reused chunk is not zero: [`Allocation::fresh`] tells the caller (for calloc).
//! * Everything else gets whole pages, page aligned (or aligned to a larger power of two if
//!   asked). Page ranges come from a bump pointer and are **never reused** after a free: the
//!   virtual arena is huge, and a reused range could meet stale copies or a home chosen under a
//!   different placement on other nodes. Freed whole pages are reported so the caller gives
//!   their physical memory back ([`crate::AddressSpace::release_pages`]).
//! * Every page that becomes part of the heap (a new size-class page or a page allocation) is
//!   reported once as an [`AllocInfo`], for registration with the coherence protocol.
//!
//! Owns: the bookkeeping of which global addresses are live. Must not touch: memory contents,
//! access rights, the network. Not thread-safe by itself (the runtime calls it on the service
//! thread).

use crate::error::AllocError;
use squall_core::{AllocInfo, HeapLayout, NodeId, PageId, Placement, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Size classes for objects packed into shared pages.
const CLASSES: &[usize] = &[
    16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1360, 2048,
];

/// Smallest alignment every allocation gets (as malloc's).
pub const MIN_ALIGN: usize = 16;

fn class_align(class: usize) -> usize {
    1usize << class.trailing_zeros()
}

/// What `alloc` handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Global address of the first byte.
    pub addr: usize,
    /// Bytes usable at `addr` (at least the size asked for).
    pub usable: usize,
    /// The memory has never been handed out before, so it is zero on every node.
    pub fresh: bool,
    /// Pages that just became part of the heap: register them with the protocol.
    pub new_pages: Option<AllocInfo>,
}

/// What `free` released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRecord {
    /// Global address that was freed.
    pub addr: usize,
    /// Bytes that were usable there.
    pub usable: usize,
    /// Whole pages (a page allocation) whose physical memory should now be given back.
    pub released: Option<AllocInfo>,
}

/// Counters of one heap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Live allocations.
    pub live: u64,
    /// Usable bytes of live allocations.
    pub live_bytes: u64,
    /// Pages taken from the arena so far (never returned to the bump pointer).
    pub pages_used: u64,
    /// Of which size-class pages.
    pub small_pages: u64,
}

struct SmallPage {
    class: usize,
    placement: Placement,
    tag: u32,
    /// One bit per slot: live.
    live: Vec<u64>,
    live_count: usize,
    /// Slots below this index have been handed out at least once.
    high_water: usize,
    /// Freed slots available for reuse.
    free_slots: Vec<u16>,
}

impl SmallPage {
    fn slots(&self) -> usize {
        PAGE_SIZE / self.class
    }
    fn has_room(&self) -> bool {
        !self.free_slots.is_empty() || self.high_water < self.slots()
    }
    fn is_live(&self, i: usize) -> bool {
        self.live[i / 64] & (1 << (i % 64)) != 0
    }
    fn set_live(&mut self, i: usize, v: bool) {
        if v {
            self.live[i / 64] |= 1 << (i % 64);
        } else {
            self.live[i / 64] &= !(1 << (i % 64));
        }
    }
}

struct Large {
    pages: u64,
    placement: Placement,
}

/// One node's shared-heap allocator (see the module docs for the policy).
pub struct Heap {
    node: NodeId,
    base: usize,
    arena_start: u64,
    /// The range's split over the nodes (for the out-of-memory message).
    layout: HeapLayout,
    next_page: u64,
    end_page: u64,
    large: BTreeMap<usize, Large>,
    freed_large: BTreeSet<usize>,
    small: HashMap<usize, SmallPage>,
    pools: HashMap<(usize, Placement, u32), Vec<usize>>,
    stats: HeapStats,
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("node", &self.node)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Heap {
    /// The heap of `node`'s arena in a global range starting at address `base`.
    pub fn new(layout: HeapLayout, node: NodeId, base: usize) -> Self {
        let start = layout.arena_start(node).0;
        let end = layout.arena_end(node).0;
        Heap {
            node,
            base,
            arena_start: start,
            layout,
            next_page: start,
            end_page: end.max(start),
            large: BTreeMap::new(),
            freed_large: BTreeSet::new(),
            small: HashMap::new(),
            pools: HashMap::new(),
            stats: HeapStats::default(),
        }
    }

    /// Take the top `pages` pages of this arena away from the allocator (for an adopted region,
    /// see `AddressSpace::adopt_region`); returns the first of them. Fails if the bump pointer
    /// already passed them.
    pub fn reserve_top(&mut self, pages: u64) -> Result<PageId, AllocError> {
        let size = pages as usize * PAGE_SIZE;
        let first = self
            .end_page
            .checked_sub(pages)
            .filter(|&f| f >= self.next_page)
            .ok_or_else(|| self.oom(size, PAGE_SIZE))?;
        self.end_page = first;
        Ok(PageId(first))
    }

    /// The layout of the range this heap's arena is part of.
    pub fn layout(&self) -> HeapLayout {
        self.layout
    }

    /// The node whose arena this is.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Whether `addr` lies in this node's arena (frees of other addresses belong to the node
    /// whose arena holds them: `HeapLayout::manager_of`).
    pub fn arena_contains(&self, addr: usize) -> bool {
        addr >= self.base
            && ((addr - self.base) / PAGE_SIZE) as u64 >= self.arena_start
            && (((addr - self.base) / PAGE_SIZE) as u64) < self.end_page
    }

    /// Counters so far.
    pub fn stats(&self) -> HeapStats {
        self.stats
    }

    fn page_addr(&self, p: u64) -> usize {
        self.base + p as usize * PAGE_SIZE
    }

    fn page_index(&self, addr: usize) -> u64 {
        ((addr - self.base) / PAGE_SIZE) as u64
    }

    /// Allocate `size` bytes aligned to `align` (a power of two; 0 means [`MIN_ALIGN`]) with
    /// home placement `placement` for any new pages.
    pub fn alloc(
        &mut self,
        size: usize,
        align: usize,
        placement: Placement,
    ) -> Result<Allocation, AllocError> {
        self.alloc_tagged(size, align, placement, 0)
    }

    /// [`Heap::alloc`] from the pools of `tag`: small objects of different tags never share
    /// a page.
    pub fn alloc_tagged(
        &mut self,
        size: usize,
        align: usize,
        placement: Placement,
        tag: u32,
    ) -> Result<Allocation, AllocError> {
        let align = if align == 0 { MIN_ALIGN } else { align };
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlign { align });
        }
        let size = size.max(1);
        let class = CLASSES
            .iter()
            .position(|&c| c >= size && class_align(c) >= align.max(MIN_ALIGN));
        match class {
            Some(ci) => self.alloc_small(ci, placement, tag),
            None => self.alloc_pages(size, align, placement),
        }
    }

    fn oom(&self, size: usize, align: usize) -> AllocError {
        let page = PAGE_SIZE as u64;
        AllocError::OutOfMemory {
            size,
            align,
            node: self.node.0,
            left: self.end_page.saturating_sub(self.next_page) * page,
            arena: (self
                .layout
                .arena_end(self.node)
                .0
                .saturating_sub(self.arena_start))
                * page,
            range: self.layout.total_pages * page,
            nodes: self.layout.nodes,
            max_range: crate::space::max_range(self.base) as u64,
        }
    }

    /// Take `pages` fresh pages from the bump pointer, the first aligned to `align` bytes.
    fn take_pages(&mut self, pages: u64, align: usize, size: usize) -> Result<u64, AllocError> {
        let old = self.next_page;
        let mut first = old;
        if align > PAGE_SIZE {
            let addr = self.page_addr(first);
            let aligned = addr
                .checked_next_multiple_of(align)
                .ok_or_else(|| self.oom(size, align))?;
            first += ((aligned - addr) / PAGE_SIZE) as u64;
        }
        let end = first
            .checked_add(pages)
            .ok_or_else(|| self.oom(size, align))?;
        if end > self.end_page {
            return Err(self.oom(size, align));
        }
        self.next_page = end;
        self.stats.pages_used += end - old;
        Ok(first)
    }

    fn alloc_pages(
        &mut self,
        size: usize,
        align: usize,
        placement: Placement,
    ) -> Result<Allocation, AllocError> {
        let pages = size.div_ceil(PAGE_SIZE) as u64;
        let first = self.take_pages(pages, align, size)?;
        let addr = self.page_addr(first);
        self.large.insert(addr, Large { pages, placement });
        let usable = pages as usize * PAGE_SIZE;
        self.stats.live += 1;
        self.stats.live_bytes += usable as u64;
        Ok(Allocation {
            addr,
            usable,
            fresh: true,
            new_pages: Some(AllocInfo {
                first: PageId(first),
                pages,
                placement,
            }),
        })
    }

    fn alloc_small(
        &mut self,
        ci: usize,
        placement: Placement,
        tag: u32,
    ) -> Result<Allocation, AllocError> {
        let class = CLASSES[ci];
        let key = (class, placement, tag);
        let mut new_pages = None;
        let page_addr = loop {
            match self.pools.get_mut(&key).and_then(|v| v.last().copied()) {
                Some(pa) if self.small.get(&pa).is_some_and(SmallPage::has_room) => break pa,
                Some(_) => {
                    // Full page at the top of the pool: drop it from the pool.
                    if let Some(v) = self.pools.get_mut(&key) {
                        v.pop();
                    }
                }
                None => {
                    let p = self.take_pages(1, PAGE_SIZE, class)?;
                    let pa = self.page_addr(p);
                    let slots = PAGE_SIZE / class;
                    self.small.insert(
                        pa,
                        SmallPage {
                            class,
                            placement,
                            tag,
                            live: vec![0; slots.div_ceil(64)],
                            live_count: 0,
                            high_water: 0,
                            free_slots: Vec::new(),
                        },
                    );
                    self.pools.entry(key).or_default().push(pa);
                    self.stats.small_pages += 1;
                    new_pages = Some(AllocInfo {
                        first: PageId(p),
                        pages: 1,
                        placement,
                    });
                    break pa;
                }
            }
        };
        let sp = self
            .small
            .get_mut(&page_addr)
            .expect("pool pages are always in the small-page map");
        let (slot, fresh) = match sp.free_slots.pop() {
            Some(s) => (s as usize, false),
            None => {
                sp.high_water += 1;
                (sp.high_water - 1, true)
            }
        };
        sp.set_live(slot, true);
        sp.live_count += 1;
        self.stats.live += 1;
        self.stats.live_bytes += class as u64;
        Ok(Allocation {
            addr: page_addr + slot * class,
            usable: class,
            fresh,
            new_pages,
        })
    }

    fn not_allocated(&self, addr: usize) -> AllocError {
        AllocError::NotAllocated {
            addr,
            node: self.node.0,
        }
    }

    /// Free the allocation starting at `addr`. Freeing an address twice, or one that is not
    /// the start of a live allocation of this heap, is an error naming the address.
    pub fn free(&mut self, addr: usize) -> Result<AllocRecord, AllocError> {
        if let Some(l) = self.large.remove(&addr) {
            self.freed_large.insert(addr);
            let usable = l.pages as usize * PAGE_SIZE;
            self.stats.live -= 1;
            self.stats.live_bytes -= usable as u64;
            return Ok(AllocRecord {
                addr,
                usable,
                released: Some(AllocInfo {
                    first: PageId(self.page_index(addr)),
                    pages: l.pages,
                    placement: l.placement,
                }),
            });
        }
        if self.freed_large.contains(&addr) {
            return Err(AllocError::DoubleFree { addr });
        }
        if addr < self.base {
            return Err(self.not_allocated(addr));
        }
        let page_addr = addr - (addr - self.base) % PAGE_SIZE;
        let Some(sp) = self.small.get_mut(&page_addr) else {
            return Err(self.not_allocated(addr));
        };
        let off = addr - page_addr;
        let slot = off / sp.class;
        if !off.is_multiple_of(sp.class) || slot >= sp.slots() || slot >= sp.high_water {
            return Err(AllocError::NotAllocated {
                addr,
                node: self.node.0,
            });
        }
        if !sp.is_live(slot) {
            return Err(AllocError::DoubleFree { addr });
        }
        sp.set_live(slot, false);
        sp.live_count -= 1;
        let was_full = !sp.has_room();
        sp.free_slots.push(slot as u16);
        let (class, placement, tag) = (sp.class, sp.placement, sp.tag);
        if was_full {
            self.pools
                .entry((class, placement, tag))
                .or_default()
                .push(page_addr);
        }
        self.stats.live -= 1;
        self.stats.live_bytes -= class as u64;
        Ok(AllocRecord {
            addr,
            usable: class,
            released: None,
        })
    }

    /// Usable bytes of the live allocation starting at `addr` (for `realloc`: a new size up to
    /// this fits in place), or `None` if `addr` does not start a live allocation.
    pub fn size_of(&self, addr: usize) -> Option<usize> {
        if let Some(l) = self.large.get(&addr) {
            return Some(l.pages as usize * PAGE_SIZE);
        }
        if addr < self.base {
            return None;
        }
        let page_addr = addr - (addr - self.base) % PAGE_SIZE;
        let sp = self.small.get(&page_addr)?;
        let off = addr - page_addr;
        let slot = off / sp.class;
        (off.is_multiple_of(sp.class) && slot < sp.slots() && sp.is_live(slot)).then_some(sp.class)
    }

    /// The page allocation or size-class page holding `addr` with its placement, if `addr` lies
    /// inside live heap memory of this node.
    pub fn placement_of(&self, addr: usize) -> Option<Placement> {
        if let Some((&start, l)) = self.large.range(..=addr).next_back() {
            if addr < start + l.pages as usize * PAGE_SIZE {
                return Some(l.placement);
            }
        }
        if addr < self.base {
            return None;
        }
        let page_addr = addr - (addr - self.base) % PAGE_SIZE;
        self.small.get(&page_addr).map(|sp| sp.placement)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BASE: usize = 0x5000_0000_0000;

    fn layout() -> HeapLayout {
        HeapLayout {
            nodes: 4,
            total_pages: 4 * 1024,
        }
    }

    #[test]
    fn small_objects_share_pages_and_are_reused() {
        let mut h = Heap::new(layout(), NodeId(1), BASE);
        let a = h.alloc(24, 0, Placement::FirstTouch).unwrap();
        assert_eq!(a.usable, 32);
        assert!(a.fresh);
        let info = a.new_pages.unwrap();
        assert_eq!(info.first, PageId(1024));
        assert_eq!(info.pages, 1);
        assert_eq!(a.addr, BASE + 1024 * PAGE_SIZE);
        let b = h.alloc(30, 0, Placement::FirstTouch).unwrap();
        assert_eq!(b.addr, a.addr + 32);
        assert_eq!(b.new_pages, None);
        let rec = h.free(a.addr).unwrap();
        assert_eq!(rec.usable, 32);
        assert_eq!(rec.released, None);
        let c = h.alloc(17, 0, Placement::FirstTouch).unwrap();
        assert_eq!(c.addr, a.addr);
        assert!(!c.fresh, "a reused chunk must be reported as not fresh");
        assert_eq!(h.size_of(c.addr), Some(32));
        assert_eq!(h.size_of(c.addr + 1), None);
    }

    #[test]
    fn reserved_top_pages_are_never_handed_out() {
        let l = layout();
        let mut h = Heap::new(l, NodeId(0), BASE);
        let first = h.reserve_top(3).unwrap();
        assert_eq!(Some(first), l.adopted_first(3));
        assert!(!h.arena_contains(BASE + first.0 as usize * PAGE_SIZE));
        // The rest of the arena is still usable, up to the reserved pages and no further.
        let rest = (first.0 - l.arena_start(NodeId(0)).0) as usize * PAGE_SIZE;
        let a = h.alloc(rest, 0, Placement::FirstTouch).unwrap();
        assert_eq!(a.addr + rest, BASE + first.0 as usize * PAGE_SIZE);
        assert!(h.alloc(PAGE_SIZE, 0, Placement::FirstTouch).is_err());
        // Pages already handed out cannot be reserved.
        assert!(h.reserve_top(1).is_err());
    }

    #[test]
    fn placements_get_separate_pages() {
        let mut h = Heap::new(layout(), NodeId(0), BASE);
        let a = h.alloc(64, 0, Placement::FirstTouch).unwrap();
        let b = h.alloc(64, 0, Placement::Node(NodeId(2))).unwrap();
        assert!(b.new_pages.is_some());
        assert_ne!(a.addr / PAGE_SIZE, b.addr / PAGE_SIZE);
        assert_eq!(h.placement_of(b.addr + 3), Some(Placement::Node(NodeId(2))));
    }

    #[test]
    fn tags_get_separate_pages_and_a_freed_chunk_stays_in_its_tag() {
        let mut h = Heap::new(layout(), NodeId(0), BASE);
        let a = h.alloc_tagged(64, 0, Placement::FirstTouch, 0).unwrap();
        let b = h.alloc_tagged(64, 0, Placement::FirstTouch, 1).unwrap();
        assert!(b.new_pages.is_some());
        assert_ne!(a.addr / PAGE_SIZE, b.addr / PAGE_SIZE);
        h.free(b.addr).unwrap();
        // Tag 0 never gets tag 1's freed chunk (nor its page); tag 1 does.
        let c = h.alloc_tagged(64, 0, Placement::FirstTouch, 0).unwrap();
        assert_eq!(c.addr / PAGE_SIZE, a.addr / PAGE_SIZE);
        let d = h.alloc_tagged(64, 0, Placement::FirstTouch, 1).unwrap();
        assert_eq!(d.addr, b.addr);
    }

    #[test]
    fn page_allocations_are_aligned_and_never_reused() {
        let mut h = Heap::new(layout(), NodeId(2), BASE);
        assert!(h.arena_contains(BASE + 2048 * PAGE_SIZE));
        assert!(h.arena_contains(BASE + 3072 * PAGE_SIZE - 1));
        assert!(!h.arena_contains(BASE + 3072 * PAGE_SIZE));
        assert!(!h.arena_contains(BASE + 2047 * PAGE_SIZE));
        let a = h.alloc(3 * PAGE_SIZE + 1, 0, Placement::Blocked).unwrap();
        assert_eq!(a.addr % PAGE_SIZE, 0);
        assert_eq!(a.usable, 4 * PAGE_SIZE);
        let info = a.new_pages.unwrap();
        assert_eq!((info.first, info.pages), (PageId(2048), 4));
        assert_eq!(info.placement, Placement::Blocked);
        let rec = h.free(a.addr).unwrap();
        assert_eq!(rec.released, Some(info));
        let b = h.alloc(PAGE_SIZE, 0, Placement::Blocked).unwrap();
        assert!(
            b.addr >= a.addr + 4 * PAGE_SIZE,
            "freed pages are not reused"
        );
        let big = h.alloc(PAGE_SIZE, 1 << 20, Placement::FirstTouch).unwrap();
        assert_eq!(big.addr % (1 << 20), 0);
        let mid = h.alloc(100, 4096, Placement::FirstTouch).unwrap();
        assert_eq!(mid.addr % 4096, 0);
    }

    #[test]
    fn errors_name_the_address() {
        let mut h = Heap::new(layout(), NodeId(0), BASE);
        let a = h.alloc(5000, 0, Placement::FirstTouch).unwrap();
        h.free(a.addr).unwrap();
        let e = h.free(a.addr).unwrap_err();
        assert_eq!(e, AllocError::DoubleFree { addr: a.addr });
        assert!(e.to_string().contains(&format!("{:#x}", a.addr)));
        let s = h.alloc(8, 0, Placement::FirstTouch).unwrap();
        assert!(matches!(
            h.free(s.addr + 8),
            Err(AllocError::NotAllocated { .. })
        ));
        h.free(s.addr).unwrap();
        assert_eq!(h.free(s.addr), Err(AllocError::DoubleFree { addr: s.addr }));
        assert!(matches!(
            h.free(12),
            Err(AllocError::NotAllocated { addr: 12, .. })
        ));
        assert_eq!(
            h.alloc(8, 3, Placement::FirstTouch),
            Err(AllocError::BadAlign { align: 3 })
        );
    }

    #[test]
    fn out_of_memory_is_reported() {
        let mut h = Heap::new(layout(), NodeId(3), BASE);
        let e = h
            .alloc(2000 * PAGE_SIZE, 0, Placement::FirstTouch)
            .unwrap_err();
        assert!(matches!(e, AllocError::OutOfMemory { node: 3, .. }), "{e}");
        let a = h.alloc(1024 * PAGE_SIZE, 0, Placement::FirstTouch).unwrap();
        assert_eq!(a.new_pages.unwrap().first, PageId(3072));
        assert!(h.alloc(1, 0, Placement::FirstTouch).is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc {
            size: usize,
            align_log: u32,
            placement: u8,
        },
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (prop_oneof![1usize..3000, 1usize..20000], 0u32..14, 0u8..3)
                .prop_map(|(size, align_log, placement)| Op::Alloc { size, align_log, placement }),
            2 => any::<usize>().prop_map(Op::Free),
        ]
    }

    proptest! {
        #[test]
        fn random_alloc_free_sequences(ops in proptest::collection::vec(op(), 1..300)) {
            let l = HeapLayout { nodes: 2, total_pages: 2 * 4096 };
            let mut h = Heap::new(l, NodeId(1), BASE);
            let arena = (BASE + 4096 * PAGE_SIZE)..(BASE + 8192 * PAGE_SIZE);
            // live: addr -> (usable, placement)
            let mut live: BTreeMap<usize, (usize, u8)> = BTreeMap::new();
            let mut freed: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc { size, align_log, placement } => {
                        let align = 1usize << align_log;
                        let pl = match placement {
                            0 => Placement::FirstTouch,
                            1 => Placement::Node(NodeId(0)),
                            _ => Placement::RoundRobin { block_pages: 2 },
                        };
                        let Ok(a) = h.alloc(size, align, pl) else { continue };
                        prop_assert!(a.usable >= size);
                        prop_assert_eq!(a.addr % align.max(MIN_ALIGN), 0);
                        prop_assert!(arena.contains(&a.addr) && a.addr + a.usable <= arena.end);
                        if size >= PAGE_SIZE {
                            prop_assert_eq!(a.addr % PAGE_SIZE, 0);
                        }
                        // No overlap with any live allocation.
                        if let Some((&s, &(u, _))) = live.range(..=a.addr).next_back() {
                            prop_assert!(s + u <= a.addr, "overlap {:#x}", a.addr);
                        }
                        if let Some((&s, _)) = live.range(a.addr..).next() {
                            prop_assert!(a.addr + a.usable <= s, "overlap {:#x}", a.addr);
                        }
                        // Pages are placed consistently: everything in a page has one placement.
                        prop_assert_eq!(h.placement_of(a.addr), Some(pl));
                        if let Some(info) = a.new_pages {
                            prop_assert!(a.fresh);
                            prop_assert_eq!(info.placement, pl);
                        }
                        live.insert(a.addr, (a.usable, placement));
                        freed.retain(|&f| f != a.addr);
                    }
                    Op::Free(pick) => {
                        if live.is_empty() || pick % 5 == 0 {
                            // Free something that is not live: must be an error.
                            let addr = freed.last().copied().unwrap_or(arena.start + 8);
                            if !live.contains_key(&addr) {
                                prop_assert!(h.free(addr).is_err());
                            }
                            continue;
                        }
                        let k = *live.keys().nth(pick % live.len()).unwrap();
                        let (usable, _) = live.remove(&k).unwrap();
                        prop_assert_eq!(h.size_of(k), Some(usable));
                        let rec = h.free(k).unwrap();
                        prop_assert_eq!(rec.usable, usable);
                        prop_assert_eq!(h.size_of(k), None);
                        freed.push(k);
                    }
                }
                prop_assert_eq!(h.stats().live, live.len() as u64);
                prop_assert_eq!(
                    h.stats().live_bytes,
                    live.values().map(|v| v.0 as u64).sum::<u64>()
                );
            }
        }
    }
}

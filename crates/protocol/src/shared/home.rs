//! The page home directory: who is the home of each page, as far as this node knows.
//!
//! Owns: the allocations registered on this (manager) node, the manager's authoritative record
//! of first-touch and migrated homes, and this node's cache of homes with their migration epoch.
//! Must not touch: page contents, access rights, messages (callers do the sending).
//!
//! A home is always named with an epoch: the number of migrations the page had when that node
//! became its home. Newer epochs win, so stale information is never taken over fresh.

use crate::ProtoError;
use squall_core::{AllocInfo, HeapLayout, NodeId, PageId, Placement};
use std::collections::BTreeMap;

/// `page` must lie inside the shared heap.
pub(crate) fn check_page(layout: &HeapLayout, page: PageId) -> Result<(), ProtoError> {
    if page.0 >= layout.total_pages {
        return Err(ProtoError::NotAllocated { page });
    }
    Ok(())
}

/// What [`HomeDirectory::resolve`] came to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The home was in this node's cache.
    Known(HomeRef),
    /// A query for the page's home is out already: the work waits for its answer.
    Waiting,
    /// This node is the page's manager and decided (or knew) the home; now cached.
    Managed(HomeRef),
    /// The work waits for the answer to a home query the caller must send to this manager.
    Ask(NodeId),
}

/// A page's home and the migration epoch at which it became home.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HomeRef {
    pub node: NodeId,
    pub epoch: u32,
}

/// Home knowledge of one node.
#[derive(Debug)]
pub struct HomeDirectory {
    me: NodeId,
    layout: HeapLayout,
    /// Registered allocations by first page (they never overlap).
    allocs: BTreeMap<u64, AllocInfo>,
    /// Manager side: homes decided by first touch or moved by migration.
    assigned: BTreeMap<PageId, HomeRef>,
    /// This node's cache of homes.
    cache: BTreeMap<PageId, HomeRef>,
    /// Allocations with a static placement that other managers told this node about (in
    /// their home replies), by first page: the first home of their pages is computed here.
    placed: BTreeMap<u64, AllocInfo>,
    /// Allocations whose coherence unit is several pages: first page → (one past the last,
    /// pages per unit). Every page of a unit has the home of the unit's first page.
    units: BTreeMap<u64, (u64, u32)>,
}

impl HomeDirectory {
    pub fn new(me: NodeId, layout: HeapLayout) -> Self {
        HomeDirectory {
            me,
            layout,
            allocs: BTreeMap::new(),
            assigned: BTreeMap::new(),
            cache: BTreeMap::new(),
            placed: BTreeMap::new(),
            units: BTreeMap::new(),
        }
    }

    /// Pages `first .. first + pages` are kept in units of `unit` pages (counted from `first`).
    pub fn set_unit(&mut self, first: PageId, pages: u64, unit: u32) {
        if unit > 1 {
            self.units
                .insert(first.0, (first.0.saturating_add(pages), unit));
        }
    }

    /// The coherence unit of `page`: its first page and its length in pages (the last unit
    /// of an allocation may be shorter; a page of no multi-page allocation is its own unit).
    pub fn unit_of(&self, page: PageId) -> (PageId, u64) {
        match self
            .units
            .range(..=page.0)
            .next_back()
            .filter(|(_, (end, _))| page.0 < *end)
        {
            Some((&first, &(end, unit))) => {
                let unit = u64::from(unit);
                let start = first + (page.0 - first) / unit * unit;
                (PageId(start), unit.min(end - start))
            }
            None => (page, 1),
        }
    }

    /// Whether `page` belongs to a unit of several pages.
    pub fn in_unit(&self, page: PageId) -> bool {
        self.unit_of(page).1 > 1
    }

    pub fn layout(&self) -> HeapLayout {
        self.layout
    }

    /// The node that answers home look-ups for `page`.
    pub fn manager_of(&self, page: PageId) -> NodeId {
        self.layout.manager_of(page)
    }

    pub fn register(&mut self, alloc: AllocInfo) {
        self.allocs.insert(alloc.first.0, alloc);
    }

    /// An allocation with a static placement another node manages (learned from its home
    /// reply): `first_home` computes its pages' first homes from now on.
    pub fn learn_placement(&mut self, alloc: AllocInfo) {
        if alloc.placement != Placement::FirstTouch && alloc.pages > 0 {
            self.placed.insert(alloc.first.0, alloc);
        }
    }

    /// The allocation holding `page` among those registered here or learned, if any.
    fn alloc_of(&self, page: PageId) -> Option<AllocInfo> {
        let find = |m: &BTreeMap<u64, AllocInfo>| {
            m.range(..=page.0)
                .next_back()
                .map(|(_, a)| *a)
                .filter(|a| page.0 < a.first.0 + a.pages)
        };
        find(&self.allocs).or_else(|| find(&self.placed))
    }

    /// The home `page` had when it was allocated, when its placement gives it (static
    /// placements of an allocation registered here or learned from a manager): epoch 0. The
    /// caller decides whether the page may have moved since.
    pub fn first_home(&self, page: PageId) -> Option<HomeRef> {
        let start = self.unit_of(page).0;
        self.alloc_of(page)
            .and_then(|a| a.static_home(start, self.layout.nodes))
            .map(|node| HomeRef { node, epoch: 0 })
    }

    /// Manager side: the allocation of `page` if its placement is static (sent along with a
    /// home reply, so the asker computes its own homes in it from then on).
    pub fn manager_placement(&self, page: PageId) -> Option<AllocInfo> {
        self.allocs
            .range(..=page.0)
            .next_back()
            .map(|(_, a)| *a)
            .filter(|a| page.0 < a.first.0 + a.pages && a.placement != Placement::FirstTouch)
    }

    /// Cached home of `page`, if known.
    pub fn cached(&self, page: PageId) -> Option<HomeRef> {
        self.cache.get(&page).copied()
    }

    /// Learn a home; ignored if the cache already holds a newer epoch.
    pub fn learn(&mut self, page: PageId, home: HomeRef) {
        match self.cache.get(&page) {
            Some(old) if old.epoch > home.epoch => {}
            _ => {
                self.cache.insert(page, home);
            }
        }
    }

    /// Manager side: the home of `page` for a node asking about it; first touch assigns the
    /// asker. `None` when the page is in no allocation registered here.
    pub fn manager_lookup(&mut self, page: PageId, asker: NodeId) -> Option<HomeRef> {
        if let Some(h) = self.assigned.get(&page) {
            return Some(*h);
        }
        let (_, alloc) = self
            .allocs
            .range(..=page.0)
            .next_back()
            .filter(|(_, a)| page.0 < a.first.0 + a.pages)?;
        // A unit's pages share the home of its first page: decided for all of them at once.
        let (start, len) = self.unit_of(page);
        if let Some(h) = self.assigned.get(&start).copied() {
            self.assigned.insert(page, h);
            return Some(h);
        }
        let node = alloc.static_home(start, self.layout.nodes).unwrap_or(asker);
        let h = HomeRef { node, epoch: 0 };
        for q in start.0..start.0 + len {
            self.assigned.entry(PageId(q)).or_insert(h);
        }
        Some(h)
    }

    /// Manager side: the homes of the pages from `first` on that are already decided (first
    /// touch done, migrated, or placed statically), up to `max` of them, stopping at the first
    /// page that is not (a look-up never decides a first touch for a page nobody touched).
    pub fn manager_known_run(&self, first: PageId, max: usize) -> Vec<HomeRef> {
        let mut out = Vec::new();
        let mut p = first.0;
        while out.len() < max && p < self.layout.total_pages {
            let page = PageId(p);
            let h = match self.assigned.get(&page) {
                Some(h) => *h,
                None => {
                    let node = self
                        .allocs
                        .range(..=p)
                        .next_back()
                        .filter(|(_, a)| p < a.first.0 + a.pages)
                        .and_then(|(_, a)| a.static_home(self.unit_of(page).0, self.layout.nodes));
                    match node {
                        Some(node) => HomeRef { node, epoch: 0 },
                        None => break,
                    }
                }
            };
            out.push(h);
            p += 1;
        }
        out
    }

    /// Manager side: a migration moved the home (ignored if older than what is recorded).
    pub fn manager_moved(&mut self, page: PageId, home: HomeRef) {
        match self.assigned.get(&page) {
            Some(old) if old.epoch >= home.epoch => {}
            _ => {
                self.assigned.insert(page, home);
            }
        }
    }

    /// Whether this node is the manager of `page`.
    pub fn is_manager(&self, page: PageId) -> bool {
        self.manager_of(page) == self.me
    }

    /// Find the home of `page`, or queue `work` (a protocol's deferred step) in `resolving`
    /// until the home is known. Sends nothing: on [`Lookup::Ask`] the caller sends the query.
    pub(crate) fn resolve<W>(
        &mut self,
        resolving: &mut BTreeMap<PageId, Vec<W>>,
        page: PageId,
        work: W,
    ) -> Result<Lookup, ProtoError> {
        if let Some(h) = self.cached(page) {
            return Ok(Lookup::Known(h));
        }
        if let Some(list) = resolving.get_mut(&page) {
            list.push(work);
            return Ok(Lookup::Waiting);
        }
        if self.is_manager(page) {
            let h = self
                .manager_lookup(page, self.me)
                .ok_or(ProtoError::NotAllocated { page })?;
            self.learn(page, h);
            return Ok(Lookup::Managed(h));
        }
        resolving.insert(page, vec![work]);
        Ok(Lookup::Ask(self.manager_of(page)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_touch_assigns_first_asker_and_epochs_order_updates() {
        let layout = HeapLayout {
            nodes: 2,
            total_pages: 8,
        };
        let mut d = HomeDirectory::new(NodeId(0), layout);
        d.register(AllocInfo {
            first: PageId(0),
            pages: 2,
            placement: Placement::FirstTouch,
        });
        d.register(AllocInfo {
            first: PageId(2),
            pages: 2,
            placement: Placement::Node(NodeId(1)),
        });
        assert_eq!(
            d.manager_lookup(PageId(1), NodeId(1)).map(|h| h.node),
            Some(NodeId(1))
        );
        assert_eq!(
            d.manager_lookup(PageId(1), NodeId(0)).map(|h| h.node),
            Some(NodeId(1))
        );
        assert_eq!(
            d.manager_lookup(PageId(2), NodeId(0)).map(|h| h.node),
            Some(NodeId(1))
        );
        assert_eq!(
            d.manager_lookup(PageId(3), NodeId(0)).map(|h| h.node),
            Some(NodeId(1))
        );
        assert_eq!(d.manager_lookup(PageId(5), NodeId(0)), None);
        d.manager_moved(
            PageId(1),
            HomeRef {
                node: NodeId(0),
                epoch: 1,
            },
        );
        d.manager_moved(
            PageId(1),
            HomeRef {
                node: NodeId(1),
                epoch: 0,
            },
        );
        assert_eq!(
            d.manager_lookup(PageId(1), NodeId(1)).map(|h| h.node),
            Some(NodeId(0))
        );
        d.learn(
            PageId(1),
            HomeRef {
                node: NodeId(0),
                epoch: 2,
            },
        );
        d.learn(
            PageId(1),
            HomeRef {
                node: NodeId(1),
                epoch: 1,
            },
        );
        assert_eq!(d.cached(PageId(1)).map(|h| h.node), Some(NodeId(0)));
    }

    #[test]
    fn a_claim_of_the_global_part_is_managed_by_stripes_with_its_placement() {
        use squall_core::STRIPE_PAGES;
        // 1 TiB over 4 nodes: arenas in the bottom eighth, stripes of 1 GiB above.
        let layout = HeapLayout {
            nodes: 4,
            total_pages: 1 << 28,
        };
        let g = layout.global_start().0;
        // 600 GiB claimed by node 1, starting in the middle of node 0's first stripe.
        let first = g + STRIPE_PAGES / 2;
        let pages = 600 * STRIPE_PAGES;
        for placement in [
            Placement::Blocked,
            Placement::RoundRobin { block_pages: 3 },
            Placement::FirstTouch,
            Placement::Node(NodeId(2)),
        ] {
            let alloc = AllocInfo {
                first: PageId(first),
                pages,
                placement,
            };
            let mut dirs: Vec<HomeDirectory> = (0..4)
                .map(|n| {
                    let mut d = HomeDirectory::new(NodeId(n), layout);
                    d.register(alloc);
                    d
                })
                .collect();
            // Pages all over the claim, each asked of its stripe's manager by node 3.
            for i in [
                0,
                1,
                STRIPE_PAGES,
                5 * STRIPE_PAGES + 7,
                pages / 2,
                pages - 1,
            ] {
                let page = PageId(first + i);
                let m = layout.manager_of(page);
                assert_eq!(m.0 as u64, ((page.0 - g) / STRIPE_PAGES) % 4);
                assert!(dirs[m.index()].is_manager(page));
                let want = alloc.static_home(page, 4).unwrap_or(NodeId(3));
                let got = dirs[m.index()].manager_lookup(page, NodeId(3));
                assert_eq!(got.map(|h| h.node), Some(want), "{placement:?} page {i}");
            }
            // Blocked: a quarter of the claim each, whoever manages the page.
            if placement == Placement::Blocked {
                let last = PageId(first + pages - 1);
                assert_eq!(alloc.static_home(last, 4), Some(NodeId(3)));
            }
        }
    }
}

//! `hlrc` coherence units of several pages (Shasta's variable granularity, per allocation):
//! a fault on any page of a unit is served for the whole unit (one fetch naming the unit's
//! first page, one `page_run` reply carrying every page of it, access set on the unit in one
//! call); the home serves the unit whole; write notices name the unit and invalidate it whole.
//!
//! The units of an allocation are counted from its first page (`HomeDirectory::unit_of`); a
//! unit's pages share the home of its first page, decided once (`HomeDirectory`), and never
//! migrate, are never held exclusively, never pushed and never read ahead page by page (the
//! allocation's `Tuning`, `Hlrc::set_page_policy`). So on a node other than the home the
//! pages of a unit are all without access or all readable (some perhaps writable with a twin):
//! they are installed together and invalidated together. Twins and diffs stay per page.
//!
//! Owns: the unit paths of faults, serving and installing. Must not touch: the page paths
//! (`fault`, `serve`), release and diffs (`release`), which a unit uses per page.

use super::msg::{Msg, RunBuf};
use super::state::{keep_limit, Deferred, FetchState};
use super::Hlrc;
use crate::shared::access::set_access_runs;
use crate::{Action, ProtoError};
use squall_core::{Access, NodeId, PageId, PageMemory, PAGE_SIZE};

impl<M: PageMemory> Hlrc<M> {
    /// The pages of `page`'s unit.
    fn unit_pages(&self, page: PageId) -> Vec<PageId> {
        let (first, n) = self.dir.unit_of(page);
        (first.0..first.0 + n).map(PageId).collect()
    }

    fn resume_unit(&mut self, pages: &[PageId]) {
        for &q in pages {
            self.actions.push_back(Action::Resume { page: q });
        }
    }

    /// A fault on `page`, a page of a unit of several pages, that its access does not allow:
    /// serve the unit (every page of it resumed).
    pub(super) fn fault_unit(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        let pages = self.unit_pages(page);
        let first = pages[0];
        if self.pages.get(&first).is_some_and(|st| st.fetch.is_some()) {
            // The unit is being fetched: this fault waits for it.
            for &q in &pages {
                if let Some(f) = self.st(q).fetch.as_mut() {
                    f.write |= write;
                    f.demand = true;
                }
            }
            return Ok(());
        }
        let Some(home) = self.resolve(first, Deferred::Fault { write })? else {
            return Ok(());
        };
        for &q in &pages {
            self.dir.learn(q, home);
        }
        if home.node == self.me {
            // The home's copy is current: grant the access the fault needs on the unit.
            let mut grant = Vec::new();
            for &q in &pages {
                let acc = self.mem.access(q);
                if write && acc != Access::ReadWrite {
                    let st = self.st(q);
                    if st.idle_releases > keep_limit(st.refaults) {
                        st.refaults = st.refaults.saturating_add(1);
                    }
                    st.idle_releases = 0;
                    self.dirty.insert(q);
                    grant.push(q);
                } else if acc == Access::None {
                    grant.push(q);
                }
            }
            let access = if write {
                Access::ReadWrite
            } else {
                Access::Read
            };
            set_access_runs(&self.mem, &grant, access);
            self.resume_unit(&pages);
            return Ok(());
        }
        let held = pages.iter().all(|&q| self.mem.access(q) != Access::None);
        if held {
            // A readable copy of the unit: a write twins the pages not yet writable.
            let mut up = Vec::new();
            if write {
                for &q in &pages {
                    if self.mem.access(q) != Access::Read {
                        continue;
                    }
                    let twin = self.read(q);
                    let st = self.st(q);
                    st.twin = Some(twin);
                    if st.idle_releases > keep_limit(st.refaults) {
                        st.refaults = st.refaults.saturating_add(1);
                    }
                    st.idle_releases = 0;
                    st.used = true;
                    self.stats.twins += 1;
                    self.dirty.insert(q);
                    up.push(q);
                }
            }
            set_access_runs(&self.mem, &up, Access::ReadWrite);
            self.resume_unit(&pages);
            return Ok(());
        }
        for &q in &pages {
            self.st(q).fetch = Some(FetchState {
                write,
                sent: true,
                stale: false,
                demand: true,
                barrier: None,
            });
        }
        self.stats.page_fetches += 1;
        if let Some(p) = self.prof() {
            p.fetch(first);
        }
        // No own diff of the unit can be on its way through another node (its home never
        // moves): the fetch is FIFO behind them at the home.
        self.send(
            home.node,
            Msg::Fetch {
                page: first,
                write,
                epoch: home.epoch,
                behind: 0,
                ahead: 0,
            },
        );
        Ok(())
    }

    /// Home side: hand out the unit whose first page is `first` to `from`, in one `page_run`.
    pub(super) fn serve_unit(&mut self, from: NodeId, first: PageId) {
        let pages = self.unit_pages(first);
        let mut run = RunBuf::new(pages[0]);
        for &q in &pages {
            // Never exclusive (the allocation's tuning): a read copy of each page.
            self.share_grant(from, q, false, false);
            run.push(&self.mem, q);
            if self.dirty.contains(&q) {
                let served = run.last_page().to_vec();
                self.note_served(q, &served);
            }
        }
        self.send_run(from, run);
    }

    /// A unit fetched from `from` arrived (`data`: its pages from `first` on): install it
    /// whole, writable with twins if a thread faulted writing, and resume every page; if a
    /// notice overtook the fetch, fetch it again when a thread waits.
    pub(super) fn on_unit_run(
        &mut self,
        from: NodeId,
        first: PageId,
        data: &[u8],
    ) -> Result<(), ProtoError> {
        let pages: Vec<PageId> = (0..(data.len() / PAGE_SIZE) as u64)
            .map(|i| PageId(first.0 + i))
            .collect();
        let mut fetches = Vec::with_capacity(pages.len());
        for &q in &pages {
            match self.st(q).fetch.take() {
                Some(f) => fetches.push(f),
                None => {
                    return Err(ProtoError::Unexpected {
                        from,
                        page: q,
                        why: "unit data without a fetch".into(),
                    })
                }
            }
        }
        let write = fetches.iter().any(|f| f.write);
        let demand = fetches.iter().any(|f| f.demand);
        if fetches.iter().any(|f| f.stale) {
            // A notice overtook the unit: fetch it again (FIFO behind the notice's diffs).
            if demand {
                self.fault(first, write)?;
            }
            return Ok(());
        }
        let mut installed = Vec::with_capacity(pages.len());
        for (&q, chunk) in pages.iter().zip(data.chunks_exact(PAGE_SIZE)) {
            if self.mem.access(q) != Access::None {
                // Kept: a unit is installed and invalidated whole, so this copy is current.
                continue;
            }
            self.fresh_copy(q, demand);
            self.mem.write_bytes(q, 0, chunk);
            if write {
                self.st(q).twin = Some(chunk.to_vec());
                self.stats.twins += 1;
                self.dirty.insert(q);
            }
            installed.push(q);
        }
        let access = if write {
            Access::ReadWrite
        } else {
            Access::Read
        };
        set_access_runs(&self.mem, &installed, access);
        if demand {
            self.resume_unit(&pages);
        }
        Ok(())
    }
}

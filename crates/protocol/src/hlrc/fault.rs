//! `hlrc` faults and fetches, requester side: a fault is served locally (home page, twin of
//! a read copy) or by a fetch to the home, whose home is first looked up at the page's
//! manager; the copies that come back (`page_data`, `page_run`, `no_page`, `redirect`) are
//! installed and the waiting threads resumed.
//!
//! Owns: `resolve` (home look-up) and the fetch state of each page. Must not touch: the home
//! side of a fetch (`serve`), what else a fetch brings (`readahead` decides).

use super::msg::Msg;
use super::state::{keep_limit, Deferred, FetchState, Held, HOME_RUN};
use super::Hlrc;
use crate::shared::access::set_access_runs;
use crate::shared::home::{HomeRef, Lookup};
use crate::{Action, ProtoError};
use squall_core::{Access, AllocInfo, NodeId, PageId, PageMemory, PAGE_SIZE};

impl<M: PageMemory> Hlrc<M> {
    /// Manager side: answer a home look-up (with the decided homes of the following pages).
    pub(super) fn on_home_query(&mut self, from: NodeId, page: PageId) {
        let home = self.dir.manager_lookup(page, from);
        let more = match home {
            Some(_) => self.dir.manager_known_run(PageId(page.0 + 1), HOME_RUN),
            None => Vec::new(),
        };
        let alloc = self.dir.manager_placement(page);
        self.send(
            from,
            Msg::HomeReply {
                page,
                home,
                more,
                alloc,
            },
        );
    }

    /// Manager side: a page's old home tells where the home moved.
    pub(super) fn on_home_moved(&mut self, page: PageId, home: HomeRef) {
        self.dir.manager_moved(page, home);
    }

    /// The manager's answer to this node's home look-up: learn the homes and run the work that
    /// waited.
    pub(super) fn on_home_reply(
        &mut self,
        page: PageId,
        home: Option<HomeRef>,
        more: Vec<HomeRef>,
        alloc: Option<AllocInfo>,
    ) -> Result<(), ProtoError> {
        if let Some(a) = alloc {
            self.dir.learn_placement(a);
        }
        let work = self.resolving.remove(&page).unwrap_or_default();
        let Some(h) = home else {
            return Err(ProtoError::NotAllocated { page });
        };
        if h.node == self.me && h.epoch > 0 && !self.is_home(page) {
            // The home is migrating here and the manager knew before this node did:
            // the old home's handover is still on its way. Taking the page as home
            // now would treat its twin as a home snapshot (dropping the writes since
            // the last release) and serve a copy that lacks the old home's data. The
            // work waits for the handover (`become_home` runs it).
            self.resolving.insert(page, work);
            return Ok(());
        }
        self.dir.learn(page, h);
        for (q, h) in (page.0 + 1..).zip(more) {
            if q < self.layout.total_pages {
                self.learn_third_party(PageId(q), h);
            }
        }
        self.run_deferred(page, work)?;
        Ok(())
    }

    /// The home declined a read-ahead page: fetch it on demand if a thread waits for it.
    pub(super) fn on_no_page(&mut self, page: PageId) -> Result<(), ProtoError> {
        if let Some(f) = self.st(page).fetch.take() {
            if f.demand {
                self.fault(page, f.write)?;
            }
        }
        Ok(())
    }

    /// The home's copy of a page this node fetched: install it (exclusive, twinned for a write,
    /// readable or a probe) and resume.
    pub(super) fn on_page_data(
        &mut self,
        from: NodeId,
        page: PageId,
        data: Vec<u8>,
        exclusive: bool,
    ) -> Result<(), ProtoError> {
        let Some(f) = self.st(page).fetch.take() else {
            return Err(ProtoError::Unexpected {
                from,
                page,
                why: "page data without a fetch".into(),
            });
        };
        if f.stale {
            // A notice overtook this copy: fetch again (FIFO behind the notice's diff)
            // if a thread waits for it.
            if f.demand {
                self.fault(page, f.write)?;
            }
            return Ok(());
        }
        self.fresh_copy(page, f.demand);
        self.mem.write_bytes(page, 0, &data);
        if exclusive {
            // Sole copy: written in place, no twin, no diff, no notice.
            self.st(page).exclusive = true;
            self.mem.set_access(page, Access::ReadWrite);
        } else if f.write {
            self.st(page).twin = Some(data);
            self.stats.twins += 1;
            self.dirty.insert(page);
            self.mem.set_access(page, Access::ReadWrite);
            self.want_home(page);
        } else if self.barrier_copy_readable(page, f) {
            self.mem.set_access(page, Access::Read);
        }
        if f.demand {
            self.actions.push_back(Action::Resume { page });
        }
        Ok(())
    }

    /// The node a fetch went to is no longer the home: learn the new one and fetch again if a
    /// thread waits.
    pub(super) fn on_fetch_redirect(
        &mut self,
        page: PageId,
        home: HomeRef,
    ) -> Result<(), ProtoError> {
        self.dir.learn(page, home);
        if let Some(f) = self.st(page).fetch.take() {
            if f.demand {
                self.fault(page, f.write)?;
            }
        }
        Ok(())
    }

    /// Learn `page`'s home from a manager's run of known homes (not from the page's own home).
    /// That this node is a home at a migration epoch is never learned this way: a migration to
    /// it may still be in flight (it becomes the home with the handover). Its first home
    /// (epoch 0: static placement or a first touch) is: no migration is in flight then, and
    /// had the home moved away since, this node would know (its forward pointer, and a newer
    /// epoch in its cache, which `learn` keeps). Without this, under blocked placement every
    /// page of a node's own block that another node manages cost a home query of its own.
    fn learn_third_party(&mut self, page: PageId, h: HomeRef) {
        let mine_first = h.node == self.me
            && h.epoch == 0
            && self.pages.get(&page).is_none_or(|st| st.forward.is_none());
        if h.node != self.me || mine_first {
            self.dir.learn(page, h);
        }
    }

    /// Whether this node can take itself as `page`'s home without asking the manager: the
    /// page's static placement (an allocation registered here, or learned from a manager's
    /// home reply) puts it here at epoch 0, and it has not moved away since (this node would
    /// hold a forward pointer, and a newer home in its cache). Nothing is in flight then: a
    /// migration away starts at this node. Under blocked placement a node otherwise asked the
    /// manager about the pages of its own block (one query per `HOME_RUN` pages at best).
    fn own_first_home(&self, page: PageId) -> Option<HomeRef> {
        self.dir
            .first_home(page)
            .filter(|h| h.node == self.me)
            .filter(|_| self.pages.get(&page).is_none_or(|st| st.forward.is_none()))
    }

    /// Find the home of `page`, or start looking it up (`work` waits for the answer).
    pub(super) fn resolve(
        &mut self,
        page: PageId,
        work: Deferred,
    ) -> Result<Option<HomeRef>, ProtoError> {
        if self.dir.cached(page).is_none() && !self.resolving.contains_key(&page) {
            if let Some(h) = self.own_first_home(page) {
                self.dir.learn(page, h);
                self.stats.homes_computed += 1;
                return Ok(Some(h));
            }
        }
        match self.dir.resolve(&mut self.resolving, page, work)? {
            Lookup::Known(h) => Ok(Some(h)),
            Lookup::Waiting => Ok(None),
            Lookup::Managed(_) => {
                // Like a `home_reply`'s `more`: the decided homes of the following pages, so the
                // manager reads ahead too (a main thread reading data its workers initialised).
                let more = self.dir.manager_known_run(PageId(page.0 + 1), HOME_RUN);
                for (q, h) in (page.0 + 1..).zip(more) {
                    self.learn_third_party(PageId(q), h);
                }
                Ok(self.dir.cached(page))
            }
            Lookup::Ask(mgr) => {
                self.send(mgr, Msg::HomeQuery { page });
                Ok(None)
            }
        }
    }

    pub(super) fn fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        let acc = self.mem.access(page);
        if acc == Access::ReadWrite || (acc == Access::Read && !write) {
            self.actions.push_back(Action::Resume { page });
            return Ok(());
        }
        if self.dir.in_unit(page) {
            return self.fault_unit(page, write);
        }
        if let Some(f) = self.st(page).fetch.as_mut() {
            f.write |= write;
            f.demand = true;
            if f.barrier.is_some() {
                // A page of a barrier fetch is read: so is the rest of its run, probably.
                self.read_probes_around(page);
            }
            return Ok(());
        }
        let st = self.st(page);
        let acc = if acc == Access::None && st.probe {
            // A probed copy (pushed, or from a barrier fetch) is read: it is current, grant it
            // here, with the run of probed pages around it (the node reads the data they
            // hold too, as a rule: one fault per run instead of one per page).
            self.read_probes_around(page);
            self.st(page).used = true;
            self.stats.push_probe_hits += 1;
            if !write {
                self.actions.push_back(Action::Resume { page });
                return Ok(());
            }
            Access::Read
        } else {
            acc
        };
        let Some(home) = self.resolve(page, Deferred::Fault { write })? else {
            return Ok(());
        };
        if home.node == self.me {
            if self.hold_for_recall(page, Held::LocalFault(write)) {
                return Ok(());
            }
            if write {
                let st = self.st(page);
                if st.idle_releases > keep_limit(st.refaults) {
                    st.refaults = st.refaults.saturating_add(1);
                }
                st.idle_releases = 0;
                let unsnapped = st.twin.is_none();
                if unsnapped && self.profile.is_some() {
                    let data = self.read(page);
                    if let Some(p) = self.prof() {
                        p.home_write_fault(page, data);
                    }
                }
                self.dirty.insert(page);
                self.mem.set_access(page, Access::ReadWrite);
            } else {
                self.mem.set_access(page, Access::Read);
            }
            self.actions.push_back(Action::Resume { page });
        } else if write && acc == Access::Read {
            let twin = self.read(page);
            let st = self.st(page);
            st.twin = Some(twin);
            if st.idle_releases > keep_limit(st.refaults) {
                // Written again after it was left write-protected for being idle: keep it
                // writable longer next time.
                st.refaults = st.refaults.saturating_add(1);
            }
            st.idle_releases = 0;
            st.used = true;
            self.stats.twins += 1;
            self.dirty.insert(page);
            self.mem.set_access(page, Access::ReadWrite);
            self.actions.push_back(Action::Resume { page });
            self.want_home(page);
        } else {
            self.st(page).fetch = Some(FetchState {
                write,
                sent: false,
                stale: false,
                demand: true,
                barrier: None,
            });
            self.stats.page_fetches += 1;
            if let Some(p) = self.prof() {
                p.fetch(page);
            }
            self.send_fetch(page);
        }
        Ok(())
    }

    /// Send the page's pending fetch unless own diffs of the page are still unacked.
    pub(super) fn send_fetch(&mut self, page: PageId) {
        if self.diffs.per_page.get(&page).is_some_and(|&n| n > 0) {
            return;
        }
        let Some(home) = self.dir.cached(page) else {
            return;
        };
        let Some(f) = self.st(page).fetch.as_mut() else {
            return;
        };
        if f.sent {
            return;
        }
        f.sent = true;
        f.stale = false;
        let write = f.write;
        let (behind, ahead) = self.read_ahead(page, home);
        self.send(
            home.node,
            Msg::Fetch {
                page,
                write,
                epoch: home.epoch,
                behind,
                ahead,
            },
        );
    }

    /// A fresh copy of `page` arrived (a thread waits for it if `demand`): its copy state
    /// starts over (not lost, not a probe, no push history, got at this barrier count).
    pub(super) fn fresh_copy(&mut self, page: PageId, demand: bool) {
        let now = self.barriers;
        let st = self.st(page);
        st.lost = false;
        st.had_copy = true;
        st.used |= demand;
        st.pushed = None;
        st.pushes = 0;
        st.probe = false;
        st.got_at = now;
    }

    /// A `page_run` (read-ahead or barrier fetch copies) from `from`: install each page whose
    /// fetch is still current, straight from the received bytes.
    pub(super) fn on_page_run(
        &mut self,
        from: NodeId,
        first: PageId,
        data: &[u8],
    ) -> Result<(), ProtoError> {
        let mut grant = Vec::new();
        for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let q = PageId(first.0 + i as u64);
            let Some(f) = self.st(q).fetch.take() else {
                return Err(ProtoError::Unexpected {
                    from,
                    page: q,
                    why: "page data without a fetch".into(),
                });
            };
            if f.stale {
                if f.demand {
                    self.fault(q, f.write)?;
                }
                continue;
            }
            self.fresh_copy(q, f.demand);
            self.mem.write_bytes(q, 0, chunk);
            if f.write {
                self.st(q).twin = Some(chunk.to_vec());
                self.stats.twins += 1;
                self.dirty.insert(q);
                self.mem.set_access(q, Access::ReadWrite);
                self.want_home(q);
            } else if !self.barrier_copy_readable(q, f) {
                // A probe: stays without access until a thread reads it.
            } else {
                grant.push(q);
            }
            if f.demand {
                self.actions.push_back(Action::Resume { page: q });
            }
        }
        set_access_runs(&self.mem, &grant, Access::Read);
        Ok(())
    }

    /// Run the work that waited for `page`'s home to be known.
    pub(super) fn run_deferred(
        &mut self,
        page: PageId,
        work: Vec<Deferred>,
    ) -> Result<(), ProtoError> {
        for w in work {
            match w {
                Deferred::Fault { write } => self.fault(page, write)?,
                Deferred::Atomic {
                    offset,
                    call,
                    token,
                } => self.start_atomic(page, offset, call, token)?,
            }
        }
        Ok(())
    }
}

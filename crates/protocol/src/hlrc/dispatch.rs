//! `hlrc` inputs: the `Protocol` and `Consistency` entry points and the message dispatcher.
//! Every message is decoded here and routed to the handler of its concern; nothing else
//! happens here.
//!
//! Owns: the routing. Must not touch: protocol state directly (handlers do).

use super::msg::{decode_run, decode_sync, encode_sync, Msg};
use super::state::{keep_limit, Held, HomeStatus, HOME_RUN};
use super::Hlrc;
use crate::shared::atomic::check_atomic;
use crate::shared::codec::Reader;
use crate::shared::diff::make_diff;
use crate::Action;
use crate::AtomicCall;
use crate::ProtoError;
use crate::ProtoStats;
use crate::Protocol;
use squall_core::Access;
use squall_core::AllocInfo;
use squall_core::Consistency;
use squall_core::NodeId;
use squall_core::PageId;
use squall_core::PageMemory;
use squall_core::PAGE_SIZE;

impl<M: PageMemory> Hlrc<M> {
    pub(super) fn on_message(&mut self, from: NodeId, msg: Msg) -> Result<(), ProtoError> {
        match msg {
            Msg::HomeQuery { page } => {
                let home = self.dir.manager_lookup(page, from);
                let more = match home {
                    Some(_) => self.dir.manager_known_run(PageId(page.0 + 1), HOME_RUN),
                    None => Vec::new(),
                };
                self.send(from, Msg::HomeReply { page, home, more });
            }
            Msg::HomeReply { page, home, more } => {
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
                    // Never learn from a third party that this node is a home: a migration
                    // to it may still be in flight (it becomes the home with the handover).
                    if q < self.layout.total_pages && h.node != self.me {
                        self.dir.learn(PageId(q), h);
                    }
                }
                self.run_deferred(page, work)?;
            }
            Msg::HomeMoved { page, home } => self.dir.manager_moved(page, home),
            Msg::Fetch {
                page,
                write,
                epoch,
                behind,
                ahead,
            } => {
                match self.home_status(page, epoch) {
                    HomeStatus::Serve => {
                        let msg = Msg::Fetch {
                            page,
                            write,
                            epoch,
                            behind: 0,
                            ahead: 0,
                        };
                        let st = self.st(page);
                        // The holder dropped its grant as stale and asks again (unless a
                        // recall is out: then the fetch waits for the recall's answer).
                        let again = st.excl_holder == Some(from) && !st.recalling;
                        if again || !self.hold_for_recall(page, Held::Remote(from, msg)) {
                            self.serve_copy(from, page, write, again);
                        }
                    }
                    HomeStatus::Redirect(home) => self.send(
                        from,
                        Msg::Redirect {
                            page,
                            atomic_token: None,
                            home,
                        },
                    ),
                    HomeStatus::Park => {
                        let msg = Msg::Fetch {
                            page,
                            write,
                            epoch,
                            behind: 0,
                            ahead: 0,
                        };
                        self.park(page, from, msg)
                    }
                }
                // Read-ahead pages (after the page itself, so it arrives first): served as
                // plain read copies when this node is their home at the requester's epoch and
                // nobody holds them exclusively; otherwise declined (the requester fetches them
                // on demand).
                let before = page.0 - u64::from(behind)..page.0;
                let after = page.0 + 1..page.0 + 1 + u64::from(ahead);
                self.serve_read_ahead(from, epoch, before);
                self.serve_read_ahead(from, epoch, after);
            }
            Msg::PageRun { first, data } => self.on_page_run(from, first, &data)?,
            Msg::NoPage { page } => {
                if let Some(f) = self.st(page).fetch.take() {
                    if f.demand {
                        self.fault(page, f.write)?;
                    }
                }
            }
            Msg::PageData {
                page,
                data,
                exclusive,
            } => {
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
            }
            Msg::Redirect {
                page,
                atomic_token,
                home,
            } => {
                self.dir.learn(page, home);
                match atomic_token {
                    Some(token) => {
                        let (p, offset, call) =
                            self.atomics_out.remove(&token).ok_or_else(|| {
                                ProtoError::Unexpected {
                                    from,
                                    page,
                                    why: format!("redirect of unknown atomic {token}"),
                                }
                            })?;
                        self.start_atomic(p, offset, call, token)?;
                    }
                    None => {
                        if let Some(f) = self.st(page).fetch.take() {
                            if f.demand {
                                self.fault(page, f.write)?;
                            }
                        }
                    }
                }
            }
            Msg::Diff {
                page,
                origin,
                id,
                epoch,
                diff,
            } => match self.home_status(page, epoch) {
                HomeStatus::Serve => {
                    if self
                        .pages
                        .get(&page)
                        .is_some_and(|s| s.excl_holder.is_some())
                    {
                        let msg = Msg::Diff {
                            page,
                            origin,
                            id,
                            epoch,
                            diff,
                        };
                        self.hold_for_recall(page, Held::Remote(from, msg));
                        return Ok(());
                    }
                    self.home_apply_diff(from, page, origin, id, &diff)?
                }
                HomeStatus::Redirect(home) => {
                    let fwd = Msg::Diff {
                        page,
                        origin,
                        id,
                        epoch: home.epoch,
                        diff,
                    };
                    self.send(home.node, fwd);
                }
                HomeStatus::Park => self.park(
                    page,
                    from,
                    Msg::Diff {
                        page,
                        origin,
                        id,
                        epoch,
                        diff,
                    },
                ),
            },
            Msg::DiffAck { page, id, migrate } => self.on_diff_ack(page, id, migrate)?,
            Msg::Recall { page } => {
                let st = self.st(page);
                let data = if st.exclusive {
                    st.exclusive = false;
                    // Keep a read-only copy; later writes twin as usual.
                    if self.mem.access(page) == Access::ReadWrite {
                        self.mem.set_access(page, Access::Read);
                    }
                    Some(self.read(page))
                } else {
                    None
                };
                self.send(from, Msg::RecallReply { page, data });
            }
            Msg::RecallReply { page, data } => {
                let st = self.st(page);
                if st.excl_holder != Some(from) || !st.recalling {
                    return Err(ProtoError::Unexpected {
                        from,
                        page,
                        why: "recall reply without a recall".into(),
                    });
                }
                st.excl_holder = None;
                st.recalling = false;
                let held = std::mem::take(&mut st.held);
                if let Some(d) = data {
                    self.mem.write_bytes(page, 0, &d);
                }
                for item in held {
                    match item {
                        Held::Remote(f, m) => self.on_message(f, m)?,
                        Held::LocalFault(write) => self.fault(page, write)?,
                        Held::LocalAtomic {
                            offset,
                            call,
                            token,
                        } => self.start_atomic(page, offset, call, token)?,
                    }
                }
            }
            Msg::Atomic {
                page,
                offset,
                call,
                token,
                epoch,
            } => {
                check_atomic(page, usize::from(offset), call.width)?;
                match self.home_status(page, epoch) {
                    HomeStatus::Serve => {
                        let msg = Msg::Atomic {
                            page,
                            offset,
                            call: call.clone(),
                            token,
                            epoch,
                        };
                        if self.hold_for_recall(page, Held::Remote(from, msg)) {
                            return Ok(());
                        }
                        let (old, infos) = self.home_atomic(page, usize::from(offset), &call, from);
                        self.send(from, Msg::AtomicReply { token, old, infos });
                    }
                    HomeStatus::Redirect(home) => self.send(
                        from,
                        Msg::Redirect {
                            page,
                            atomic_token: Some(token),
                            home,
                        },
                    ),
                    HomeStatus::Park => self.park(
                        page,
                        from,
                        Msg::Atomic {
                            page,
                            offset,
                            call,
                            token,
                            epoch,
                        },
                    ),
                }
            }
            Msg::Dropped { pages } => {
                for page in pages {
                    if self.is_home(page) {
                        let st = self.st(page);
                        if !st.copyset_all && st.excl_holder != Some(from) {
                            st.copyset.remove(&from);
                        }
                    }
                }
            }
            Msg::Handovers { first, items } => self.on_handovers(first, items)?,
            Msg::Push {
                first,
                interval,
                data,
            } => self.on_push(from, first, interval, &data),
            Msg::AtomicReply { token, old, infos } => {
                if self.atomics_out.remove(&token).is_none() {
                    return Err(ProtoError::Malformed {
                        from,
                        why: format!("reply to unknown atomic {token}"),
                    });
                }
                self.actions
                    .push_back(Action::AtomicDone { token, old, infos });
            }
        }
        Ok(())
    }
}

impl<M: PageMemory> Consistency for Hlrc<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        encode_sync(&self.vt, &[])
    }

    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        let theirs = decode_sync(self.me, self.layout.nodes, acquirer_info)
            .map(|(vt, _)| vt)
            .unwrap_or_else(|| vec![0; self.vt.len()]);
        let lacking: Vec<_> = self
            .notices
            .iter()
            .filter(|((n, i), _)| *i > theirs[usize::from(*n)])
            .collect();
        encode_sync(&self.vt, &lacking)
    }

    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.grants_since_barrier = self.grants_since_barrier.saturating_add(1);
        match self.apply_notices(grant_info, None) {
            Some(theirs) => {
                for (mine, t) in self.vt.iter_mut().zip(theirs) {
                    *mine = (*mine).max(t);
                }
            }
            None => self.stats.malformed_sync_info += 1,
        }
    }

    fn begin_release(&mut self, token: u64) -> bool {
        let dirty = std::mem::take(&mut self.dirty);
        let flushed = std::mem::take(&mut self.flushed);
        let mut written = Vec::new();
        let mut home_written = Vec::new();
        let mut keep = Vec::new();
        for page in dirty {
            if self.is_home(page) {
                let me = self.me;
                let st = self.st(page);
                st.streak = None;
                if !st.copyset_all && st.copyset.iter().all(|&n| n == me) {
                    // No other node holds a copy: nobody needs a notice, and the page stays
                    // writable (no write fault per interval). A later fetch write-protects it
                    // before handing out the current contents (see `Msg::Fetch`). Its old
                    // snapshot (below) would not show the writes made meanwhile: dropped.
                    st.twin = None;
                    continue;
                }
                // A shared home page: its writes need a notice. Written lately, it stays
                // writable with a snapshot (`twin`; a home page never has a diff twin) that
                // the next release compares to, instead of a write fault per interval.
                // Compared in place, and the snapshot refreshed in its own buffer: most
                // kept pages are unchanged in most intervals (CG's vectors: 2 of 3).
                let served = std::mem::take(&mut self.st(page).served_dirty);
                let (changed, cur) = match self.st(page).twin.take() {
                    Some(t) if !served && self.mem.page_equals(page, &t) => (false, t),
                    Some(mut t) => {
                        self.mem.read_page(page, &mut t);
                        (true, t)
                    }
                    None => (true, self.read(page)),
                };
                let st = self.st(page);
                st.idle_releases = if changed {
                    0
                } else {
                    st.idle_releases.saturating_add(1)
                };
                if st.idle_releases <= keep_limit(st.refaults) {
                    st.twin = Some(cur);
                    self.dirty.insert(page);
                } else if self.mem.access(page) == Access::ReadWrite {
                    self.mem.set_access(page, Access::Read);
                }
                if changed {
                    written.push(page);
                    home_written.push(page);
                }
                continue;
            }
            let twin = self.st(page).twin.take();
            // Flushed early by an invalidation during this interval: noticed in any case.
            let mut wrote = flushed.contains(&page);
            match twin {
                Some(twin) => {
                    let st = self.st(page);
                    // Written lately, so likely written again: the page stays writable with a
                    // fresh twin instead of taking a write fault in the next interval. It is
                    // not write-protected while its diff is taken: a byte another thread of
                    // this node writes meanwhile is either in this diff or (differing from
                    // the fresh twin) in the next one; such a write is not ordered by this
                    // release anyway. This keeps a release free of page-table changes.
                    let stays = st.idle_releases.saturating_add(1) <= keep_limit(st.refaults);
                    if !stays {
                        // Write-protect first so no thread writes while the diff is taken.
                        self.mem.set_access(page, Access::Read);
                    }
                    let cur = self.read(page);
                    let d = make_diff(&twin, &cur);
                    let changed = !d.is_empty();
                    if changed {
                        let _ = self.send_diff(page, d);
                        wrote = true;
                    }
                    let st = self.st(page);
                    st.idle_releases = if changed {
                        0
                    } else {
                        st.idle_releases.saturating_add(1)
                    };
                    if st.idle_releases <= keep_limit(st.refaults) {
                        st.twin = Some(cur);
                        if stays {
                            self.dirty.insert(page);
                        } else {
                            keep.push(page);
                        }
                    }
                }
                None => wrote = true,
            }
            if wrote {
                written.push(page);
            }
        }
        if !written.is_empty() {
            self.own_interval += 1;
            self.unpublished
                .push_back((self.next_diff, self.own_interval, written));
        }
        for page in keep {
            self.mem.set_access(page, Access::ReadWrite);
            self.dirty.insert(page);
        }
        self.check_releases();
        if self.push_updates {
            self.push_pending.extend(home_written);
        }
        if self
            .outstanding
            .first()
            .is_some_and(|&id| id < self.next_diff)
        {
            self.releases.push_back((token, self.next_diff));
            false
        } else {
            true
        }
    }

    fn barrier_info(&mut self) -> Vec<u8> {
        self.send_pushes();
        let all: Vec<_> = self.notices.iter().collect();
        encode_sync(&self.vt, &all)
    }

    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        let mut max = self.vt.clone();
        let mut refetch = Vec::new();
        for info in all {
            match self.apply_notices(info, Some(&mut refetch)) {
                Some(theirs) => {
                    for (m, t) in max.iter_mut().zip(theirs) {
                        *m = (*m).max(t);
                    }
                }
                None => self.stats.malformed_sync_info += 1,
            }
        }
        self.vt = max.clone();
        // Every node applied the previous barrier before it sent its info for this one, so
        // every vector time in the job is now at least the previous barrier's: notices up to
        // it are never needed again. (Notices up to this barrier are kept one more episode: a
        // node that has not applied this barrier yet may still be granted a lock meanwhile,
        // and nodes may go on creating intervals while a barrier with a thread count is out.)
        let floor = std::mem::replace(&mut self.barrier_vt, max);
        self.notices
            .retain(|(n, i), _| floor.get(usize::from(*n)).is_none_or(|f| *i > *f));
        // After the `dropped` batches above (FIFO: the home adds this node back to the
        // copysets with these fetches).
        let locks_used = std::mem::take(&mut self.grants_since_barrier) > 0;
        if self.barrier_fetch > 0 && !self.ending && !locks_used && !refetch.is_empty() {
            refetch.sort_unstable();
            refetch.dedup();
            self.barrier_fetch(&refetch);
        }
        self.barriers = self.barriers.wrapping_add(1);
    }
}

impl<M: PageMemory> Protocol for Hlrc<M> {
    fn name(&self) -> &'static str {
        "hlrc"
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        self.check_page(page)?;
        self.stats.count_fault(write);
        self.fault(page, write)
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        if msg.first() == Some(&15) {
            // A page run is installed from the received bytes (no copy of the pages).
            let mut r = Reader::new(from, msg);
            r.u8()?;
            let first = r.page(self.layout.total_pages)?;
            let data = decode_run(&mut r, first, self.layout.total_pages, "bad page run")?;
            r.end()?;
            return self.on_page_run(from, first, data);
        }
        let m = Msg::decode(from, self.layout, msg)?;
        self.on_message(from, m)
    }

    fn register_allocation(&mut self, alloc: AllocInfo) {
        self.dir.register(alloc);
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        self.check_page(page)?;
        check_atomic(page, offset, call.width)?;
        self.stats.atomics += 1;
        self.start_atomic(page, offset, call, token)
    }

    fn observe_atomic(&mut self, page: PageId, offset: usize, value: &[u8]) {
        if page.0 >= self.layout.total_pages
            || offset + value.len() > PAGE_SIZE
            || self.is_home(page)
            || self.mem.access(page) == Access::None
        {
            // The home's copy is the one the atomic changed; without a copy, the next access
            // fetches the current one.
            return;
        }
        // Into the copy and its twin alike: the word is no write of this node, so it must not
        // show in this node's next diff (which would put it back over later atomics).
        self.mem.write_bytes(page, offset, value);
        if let Some(twin) = self.st(page).twin.as_mut() {
            twin[offset..offset + value.len()].copy_from_slice(value);
        }
    }

    fn stats(&self) -> ProtoStats {
        self.stats.clone()
    }

    fn set_ending(&mut self, ending: bool) {
        self.ending = ending;
    }
}

//! `hlrc` home migration (Cashmere): a writer asks for the home (`want_home`), a home hands
//! a page over to a sole writer with its copyset, runs of following pages go at once
//! (`handovers`), and the new home takes over (merging its own unacked diffs and twin).
//!
//! Owns: the forward pointers, streaks and `handed` runs. Must not touch: diff application
//! (`release` applies, this module only decides and hands over).

use super::msg::{Handover, Msg};
use super::state::{RunHandover, MAX_RUN, WANT_HOME_EPOCHS};
use super::Hlrc;
use crate::shared::diff::{apply_diff, make_diff};
use crate::shared::home::HomeRef;
use crate::ProtoError;
use squall_core::{Access, NodeId, PageId, PageMemory};

impl<M: PageMemory> Hlrc<M> {
    /// Home side: whether a writer's `want_home` for `page` is granted: unless this node is
    /// writing the page (Cashmere: the home migrates if it is not actively modifying it).
    pub(super) fn grants_want_home(&self, page: PageId) -> bool {
        let epoch = self.dir.cached(page).map_or(0, |h| h.epoch);
        self.tuning_for(page).migrate_after > 0
            && epoch < WANT_HOME_EPOCHS
            && !self.atomic_infos.holds(page)
            && !self.dirty.contains(&page)
            && (self.mem.access(page) != Access::ReadWrite || self.watched.contains(&page))
            && !self.parked.contains_key(&page)
    }

    /// Home side, before a watched page (`watched`) may migrate: write-protect it and
    /// compare it to its snapshot. Unchanged (and no copy handed out since differs from
    /// it), it leaves the watch as if it had been write-protected when first shared, and
    /// `false` is returned. Changed, the home has been writing it: it goes back to writable
    /// and into `dirty` (its next release notices it), and `true` says it must not move.
    /// Not watched: `false`.
    pub(super) fn settle_watch(&mut self, page: PageId) -> bool {
        if !self.watched.remove(&page) {
            return false;
        }
        self.mem.set_access(page, Access::Read);
        let st = self.st(page);
        let (snapshot, served) = (st.twin.take(), st.served_dirty);
        let unchanged = !served
            && snapshot
                .as_ref()
                .is_some_and(|t| self.mem.page_equals(page, t));
        if unchanged {
            return false;
        }
        self.st(page).twin = snapshot;
        self.mem.set_access(page, Access::ReadWrite);
        self.dirty.insert(page);
        true
    }

    /// Home side, after applying a diff of `page` from `origin`: count `origin`'s streak of
    /// diffs (with no home write in between) and say whether the home now moves to it.
    pub(super) fn migrates_after_diff(&mut self, page: PageId, origin: NodeId) -> bool {
        let migrate_after = self.tuning_for(page).migrate_after;
        let st = self.st(page);
        let streak = match st.streak {
            Some((n, c)) if n == origin => c + 1,
            _ => 1,
        };
        st.streak = Some((origin, streak));
        migrate_after > 0
            && streak >= migrate_after
            && !self.atomic_infos.holds(page)
            && !self.dirty.contains(&page)
            && !self.parked.contains_key(&page)
    }

    /// Home side: ack `origin`'s diff `id` of `page`, handing the home over with the ack if
    /// `migrate`; a granted `want_home` (`want`) may bring the run of following pages too.
    pub(super) fn ack_diff(
        &mut self,
        page: PageId,
        origin: NodeId,
        id: u64,
        want: bool,
        migrate: bool,
    ) {
        let migrate = if migrate {
            Some(self.hand_over(page, origin))
        } else {
            None
        };
        let granted = migrate.is_some();
        self.send(origin, Msg::DiffAck { page, id, migrate });
        if want && granted && self.tuning_for(page).run_handover != RunHandover::Off {
            self.hand_over_run(page, origin);
        }
    }

    /// A write fault made a twin of a copy: ask the home to move here (see
    /// [`WANT_HOME_EPOCHS`]), once per home epoch.
    pub(super) fn want_home(&mut self, page: PageId) {
        if self.tuning_for(page).migrate_after == 0 {
            return;
        }
        let Some(home) = self.dir.cached(page) else {
            return;
        };
        if home.node == self.me || home.epoch >= WANT_HOME_EPOCHS {
            return;
        }
        let st = self.st(page);
        if st.want_sent == Some(home.epoch) {
            return;
        }
        st.want_sent = Some(home.epoch);
        // The home is known, so this cannot fail.
        let _ = self.send_diff(page, Vec::new());
    }

    /// Home side: make `origin` the home of `page` at the next epoch (forwarding pointer, the
    /// manager told) and drop this node's copy; returns what the new home needs.
    pub(super) fn hand_over(&mut self, page: PageId, origin: NodeId) -> Handover {
        let cur = self.dir.cached(page).map_or(0, |h| h.epoch);
        let new = HomeRef {
            node: origin,
            epoch: cur + 1,
        };
        self.dir.learn(page, new);
        let st = self.st(page);
        st.forward = Some(new);
        st.streak = None;
        self.stats.home_migrations += 1;
        if let Some(p) = self.prof() {
            p.migrate(page);
        }
        let mgr = self.dir.manager_of(page);
        if mgr == self.me {
            self.dir.manager_moved(page, new);
        } else if mgr != origin {
            self.send(mgr, Msg::HomeMoved { page, home: new });
        }
        // This node drops its copy (its next access fetches from the new home), so the
        // new home knows exactly who may hold one: the nodes this home served.
        let st = self.st(page);
        let copyset = if st.copyset_all {
            None
        } else {
            Some(
                st.copyset
                    .iter()
                    .copied()
                    .filter(|&n| n != origin)
                    .collect(),
            )
        };
        st.copyset.clear();
        st.copyset_all = false;
        // No copy is left here: not even a probe (a pushed copy this node held before it
        // became the home, which a fault would otherwise grant locally, stale).
        st.probe = false;
        st.pushed = None;
        if self.mem.access(page) != Access::None {
            self.mem.set_access(page, Access::None);
            self.stats.invalidations += 1;
            if let Some(p) = self.prof() {
                p.invalidate(page);
            }
        }
        Handover {
            epoch: new.epoch,
            data: self.read(page),
            copyset,
        }
    }

    /// Home side, after granting `origin`'s `want_home` for `page`: if `origin` asked for the
    /// page right before this one too (it is writing through an array this node initialised),
    /// hand over at once the run of following pages that `origin` holds a copy of and nobody
    /// else does, that this node is not writing and that have not moved yet (one
    /// `handovers` message instead of a write fault, a `want_home` and an ack per page).
    pub(super) fn hand_over_run(&mut self, page: PageId, origin: NodeId) {
        let sequential = self.tuning_for(page).run_handover == RunHandover::Always
            || self.handed.get(&origin) == Some(&page.0);
        let mut items = Vec::new();
        if sequential {
            while items.len() < MAX_RUN {
                let q = PageId(page.0 + 1 + items.len() as u64);
                if !self.can_hand_over(q, origin) || self.settle_watch(q) {
                    break;
                }
                items.push(self.hand_over(q, origin));
            }
        }
        let next = page.0 + 1 + items.len() as u64;
        self.handed.insert(origin, next);
        if !items.is_empty() {
            self.send(
                origin,
                Msg::Handovers {
                    first: PageId(page.0 + 1),
                    items,
                },
            );
        }
    }

    /// Whether `q` may go to `origin` in a run handover (see [`Self::hand_over_run`]).
    pub(super) fn can_hand_over(&self, q: PageId, origin: NodeId) -> bool {
        if q.0 >= self.layout.total_pages
            || self.dir.in_unit(q)
            || !self
                .dir
                .cached(q)
                .is_some_and(|h| h.node == self.me && h.epoch < WANT_HOME_EPOCHS)
            || self.dirty.contains(&q)
            || self.atomic_infos.holds(q)
            || (self.mem.access(q) == Access::ReadWrite && !self.watched.contains(&q))
            || self.parked.contains_key(&q)
            || self.diffs.per_page.contains_key(&q)
            || self.resolving.contains_key(&q)
        {
            return false;
        }
        self.pages.get(&q).is_some_and(|st| {
            st.excl_holder.is_none()
                && !st.recalling
                && st.held.is_empty()
                && !st.copyset_all
                && st.copyset.contains(&origin)
                && st.copyset.iter().all(|&n| n == origin || n == self.me)
        })
    }

    /// A run of pages handed over with [`Msg::Handovers`]: become their home; a page nobody
    /// else holds becomes writable at once (an unshared home page needs no write fault: its
    /// writes need no notice).
    pub(super) fn on_handovers(
        &mut self,
        first: PageId,
        items: Vec<Handover>,
    ) -> Result<(), ProtoError> {
        for (i, h) in items.into_iter().enumerate() {
            let q = PageId(first.0 + i as u64);
            let unshared = h.copyset.as_ref().is_some_and(|c| c.is_empty());
            self.become_home(q, h)?;
            let st = self.st(q);
            if unshared && st.fetch.is_none() && st.copyset.is_empty() && !st.copyset_all {
                self.dirty.insert(q);
                if self.mem.access(q) != Access::ReadWrite {
                    self.mem.set_access(q, Access::ReadWrite);
                }
            }
        }
        Ok(())
    }

    /// The old home handed this node the page (Cashmere home migration).
    pub(super) fn become_home(&mut self, page: PageId, h: Handover) -> Result<(), ProtoError> {
        let Handover {
            epoch,
            mut data,
            copyset,
        } = h;
        // Our diffs still in flight to the old home will come back here: merge them now.
        for (_, (p, d)) in self.diffs.unacked.iter() {
            if *p == page {
                // Diffs we made ourselves are well formed.
                let _ = apply_diff(&mut data, d);
            }
        }
        let twin = self.st(page).twin.take();
        if twin.is_some() && self.profile.is_some() {
            // Profiling: this node's writes since its write fault become the new home's
            // writes of this interval (see `Profiler::home_release`).
            let snap = data.clone();
            if let Some(p) = self.prof() {
                p.home_write_fault(page, snap);
            }
        }
        if let Some(twin) = twin {
            // Written again since the release: merge our new writes over the home's copy.
            self.mem.set_access(page, Access::Read);
            let cur = self.read(page);
            let local = make_diff(&twin, &cur);
            // A diff we just made is well formed.
            let _ = apply_diff(&mut data, &local);
            self.mem.write_bytes(page, 0, &data);
            self.mem.set_access(page, Access::ReadWrite);
        } else {
            self.mem.write_bytes(page, 0, &data);
        }
        let me = HomeRef {
            node: self.me,
            epoch,
        };
        self.dir.learn(page, me);
        if self.dir.is_manager(page) {
            self.dir.manager_moved(page, me);
        }
        let st = self.st(page);
        st.forward = None;
        st.streak = None;
        st.exclusive = false;
        // The home's copy is current: no push history, no probe.
        st.probe = false;
        st.pushed = None;
        match copyset {
            Some(cs) => {
                st.copyset = cs.into_iter().collect();
                st.copyset_all = false;
            }
            None => st.copyset_all = true,
        }
        if let Some(parked) = self.parked.remove(&page) {
            for (from, msg) in parked {
                self.on_message(from, msg)?;
            }
        }
        // Work that learned from the manager that the home was moving here.
        let work = self.resolving.remove(&page).unwrap_or_default();
        self.run_deferred(page, work)
    }
}

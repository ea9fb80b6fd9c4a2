//! `hlrc` releases and diffs: closing an interval (diffs of written copies to their homes,
//! snapshots of shared home pages), diff acks, diffs held back behind a former home, and the
//! home applying a diff.
//!
//! Owns: `DiffLog` (`Hlrc::diffs`: diffs in flight, waiting releases, unpublished
//! intervals) and the twins of written pages. Other modules only read `diffs.per_page`
//! (whether a page has diffs in flight) and `diffs.unacked` (`migrate` merges them into a
//! page it becomes the home of). Must not touch: whether a home migrates (`migrate`
//! decides), notices of other nodes.

use super::msg::{Handover, Msg};
use super::state::{keep_limit, Held, HomeStatus};
use super::Hlrc;
use crate::profile;
use crate::shared::diff::{apply_diff, diff_payload, for_each_run, make_diff};
use crate::shared::home::HomeRef;
use crate::{Action, ProtoError};
use squall_core::{Access, NodeId, PageId, PageMemory};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// This node's diffs on their way to homes and the intervals they close: a release is
/// complete, and its interval's notices published, once every diff it sent is acked.
#[derive(Debug, Default)]
pub(super) struct DiffLog {
    /// Id of the next diff this node sends.
    pub(super) next_id: u64,
    /// Ids of the diffs sent and not acked yet.
    pub(super) outstanding: BTreeSet<u64>,
    /// Unacked diffs of this node per page.
    pub(super) per_page: BTreeMap<PageId, u32>,
    /// The node this node's unacked diffs of a page were sent to.
    pub(super) sent_to: BTreeMap<PageId, NodeId>,
    /// Diffs of a page held back (ids, in order) while earlier ones are on their way to
    /// another node (a former home that forwards them): sent once those are acked, so a home
    /// never applies an older diff of one writer over a newer one.
    pub(super) held: BTreeMap<PageId, Vec<u64>>,
    /// Copies of unacked diffs: if the home migrates here meanwhile, they come back to this
    /// node and must be merged into the copy the old home sends.
    pub(super) unacked: BTreeMap<u64, (PageId, Vec<u8>)>,
    /// Releases waiting for acks: (token, diff ids below this must be acked).
    pub(super) releases: VecDeque<(u64, u64)>,
    /// Last interval this node closed (`vt[me]` is the last one published).
    pub(super) own_interval: u32,
    /// Closed intervals whose diffs are not all acked yet: (diff ids below this, interval,
    /// pages). Their notices are handed out only once published, or an acquirer could fetch
    /// a page from its home before the diff arrived there and take the notice as seen.
    pub(super) unpublished: VecDeque<(u64, u32, Vec<PageId>)>,
}

impl<M: PageMemory> Hlrc<M> {
    /// `Consistency::begin_release`: close this node's interval (diffs of written copies to
    /// their homes, snapshots of shared home pages); `true` if it completed at once.
    pub(super) fn release(&mut self, token: u64) -> bool {
        let mut dirty = std::mem::take(&mut self.dirty);
        let flushed = std::mem::take(&mut self.flushed);
        // Watched home pages are compared to their snapshots as written ones are; one the
        // home wrote this interval is in `dirty` as well, and leaves the watch.
        let watched: BTreeSet<PageId> = std::mem::take(&mut self.watched)
            .into_iter()
            .filter(|p| !dirty.contains(p))
            .collect();
        dirty.extend(watched.iter().copied());
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
                    self.profile_home_release(page);
                    continue;
                }
                // A shared home page: its writes need a notice. Written lately, it stays
                // writable with a snapshot (`twin`; a home page never has a diff twin) that
                // the next release compares to, instead of a write fault per interval.
                // Compared in place, and the snapshot refreshed in its own buffer: most
                // kept pages are unchanged in most intervals (CG's vectors: 2 of 3).
                let served = std::mem::take(&mut self.st(page).served_dirty);
                let (mut changed, cur) = match self.st(page).twin.take() {
                    Some(t) if !served && self.mem.page_equals(page, &t) => (false, t),
                    Some(mut t) => {
                        if self.profile.is_some() {
                            // The home's own writes of this interval: the snapshot holds
                            // every other writer's diff, so what differs is the home's.
                            let cur = self.read(page);
                            let blocks = profile::changed_blocks(&t, &cur);
                            let me = self.me;
                            if let Some(p) = self.prof() {
                                p.home_write(page, me, blocks, 0);
                            }
                        }
                        self.mem.read_page(page, &mut t);
                        (true, t)
                    }
                    None => {
                        self.profile_home_release(page);
                        (true, self.read(page))
                    }
                };
                let st = self.st(page);
                st.idle_releases = if changed {
                    0
                } else {
                    st.idle_releases.saturating_add(1)
                };
                if st.idle_releases <= keep_limit(st.refaults) {
                    st.twin = Some(cur);
                    if changed || !watched.contains(&page) {
                        self.dirty.insert(page);
                    } else {
                        self.watched.insert(page);
                    }
                } else if self.mem.access(page) == Access::ReadWrite {
                    // Idle long enough: write-protect it and drop the snapshot. The
                    // comparison above ran while this node's threads could still write the
                    // page; a write that landed after it and before the protection would
                    // never be noticed (the page leaves `dirty`, and the next write fault
                    // starts a new interval). Compare again now that nobody can write.
                    self.mem.set_access(page, Access::Read);
                    if !changed && !self.mem.page_equals(page, &cur) {
                        changed = true;
                    }
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
        // A unit of several pages is named once, by its first page.
        // (`written` is ascending, so are the units' first pages.)
        let mut written: Vec<PageId> = written.into_iter().map(|p| self.dir.unit_of(p).0).collect();
        written.dedup();
        if !written.is_empty() {
            self.diffs.own_interval += 1;
            self.diffs.unpublished.push_back((
                self.diffs.next_id,
                self.diffs.own_interval,
                written,
            ));
        }
        for page in keep {
            self.mem.set_access(page, Access::ReadWrite);
            self.dirty.insert(page);
        }
        self.check_releases();
        for page in home_written {
            if self.tuning_for(page).push_updates {
                self.push_pending.insert(page);
            }
        }
        if self
            .diffs
            .outstanding
            .first()
            .is_some_and(|&id| id < self.diffs.next_id)
        {
            self.diffs.releases.push_back((token, self.diffs.next_id));
            false
        } else {
            true
        }
    }

    /// Home side: a diff (or a `want_home`) for `page`: apply it, hold it for a recall, forward it
    /// to a newer home or park it until this node becomes the home.
    pub(super) fn on_diff(
        &mut self,
        from: NodeId,
        page: PageId,
        origin: NodeId,
        id: u64,
        epoch: u32,
        diff: Vec<u8>,
    ) -> Result<(), ProtoError> {
        match self.home_status(page, epoch) {
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
        }
        Ok(())
    }

    /// Profiling: the home's own writes to `page` since its write fault, at its release.
    fn profile_home_release(&mut self, page: PageId) {
        if self
            .profile
            .as_deref()
            .is_some_and(|p| p.has_snapshot(page))
        {
            let cur = self.read(page);
            let me = self.me;
            if let Some(p) = self.prof() {
                p.home_release(page, me, &cur);
            }
        }
    }

    pub(super) fn send_diff(&mut self, page: PageId, diff: Vec<u8>) -> Result<(), ProtoError> {
        let home = self.dir.cached(page).ok_or(ProtoError::Unexpected {
            from: self.me,
            page,
            why: "dirty page with unknown home".into(),
        })?;
        let id = self.diffs.next_id;
        self.diffs.next_id += 1;
        self.diffs.outstanding.insert(id);
        *self.diffs.per_page.entry(page).or_default() += 1;
        self.diffs.unacked.insert(id, (page, diff.clone()));
        if let Some(p) = self.profile.as_deref_mut() {
            p.own_diff(page, self.me, profile::diff_blocks(&diff));
        }
        if !diff.is_empty() {
            self.stats.diffs_created += 1;
            self.stats.diff_bytes += diff_payload(&diff).unwrap_or(0) as u64;
        }
        let held = self.diffs.held.get(&page).is_some_and(|v| !v.is_empty());
        if held
            || self
                .diffs
                .sent_to
                .get(&page)
                .is_some_and(|&n| n != home.node)
        {
            self.diffs.held.entry(page).or_default().push(id);
            return Ok(());
        }
        self.post_diff(page, home, id, diff);
        Ok(())
    }

    /// Send diff `id` of `page` to `home` (noting where this page's unacked diffs went).
    pub(super) fn post_diff(&mut self, page: PageId, home: HomeRef, id: u64, diff: Vec<u8>) {
        self.diffs.sent_to.insert(page, home.node);
        self.send(
            home.node,
            Msg::Diff {
                page,
                origin: self.me,
                id,
                epoch: home.epoch,
                diff,
            },
        );
    }

    pub(super) fn check_releases(&mut self) {
        while let Some((below, _, _)) = self.diffs.unpublished.front() {
            if self.diffs.outstanding.first().is_some_and(|id| id < below) {
                break;
            }
            if let Some((_, interval, pages)) = self.diffs.unpublished.pop_front() {
                self.wn.notices.insert((self.me.0, interval), pages);
                self.compact_notices();
                self.wn.vt[self.me.index()] = interval;
            }
        }
        while let Some(&(token, below)) = self.diffs.releases.front() {
            if self.diffs.outstanding.first().is_some_and(|&id| id < below) {
                break;
            }
            self.diffs.releases.pop_front();
            self.actions.push_back(Action::ReleaseDone { token });
        }
    }

    /// Home side: apply `origin`'s diff `id` of `page` in place (an empty diff is a
    /// `want_home`) and ack it, handing the home over if `migrate` decides so.
    pub(super) fn home_apply_diff(
        &mut self,
        from: NodeId,
        page: PageId,
        origin: NodeId,
        id: u64,
        diff: &[u8],
    ) -> Result<(), ProtoError> {
        if origin == self.me {
            // A diff of ours came back through a forwarding chain after the home migrated
            // here: `become_home` already merged it into this copy.
            return self.on_diff_ack(page, id, None);
        }
        // Only the diff's runs are written, in place: this node's own threads may be writing
        // other bytes of the page right now (multiple writers), and a read-modify-write of
        // the whole page would put back the old value of whatever they wrote meanwhile.
        let migrate = if diff.is_empty() {
            // A writer asks for the home.
            self.grants_want_home(page) && !self.settle_watch(page)
        } else {
            let mem = &self.mem;
            for_each_run(diff, |off, bytes| mem.write_bytes(page, off, bytes)).ok_or_else(
                || ProtoError::Malformed {
                    from,
                    why: format!("bad diff for {page}"),
                },
            )?;
            self.stats.diffs_applied += 1;
            if let Some(p) = self.profile.as_deref_mut() {
                let bytes = diff_payload(diff).unwrap_or(0) as u64;
                p.home_write(page, origin, profile::diff_blocks(diff), bytes);
                p.home_applied(page, diff);
            }
            let st = self.st(page);
            if let Some(snapshot) = st.twin.as_mut() {
                // The home's snapshot tells its own writes since the last release from the
                // rest: it takes the other writers' diffs too. Otherwise a home write that
                // put back the snapshot's bytes over a diff applied meanwhile would look like
                // no change and go without a notice (a reader keeps the diff's value).
                // The diff is well formed (applied just above).
                let _ = apply_diff(snapshot, diff);
            }
            self.migrates_after_diff(page, origin) && !self.settle_watch(page)
        };
        self.ack_diff(page, origin, id, diff.is_empty(), migrate);
        Ok(())
    }

    pub(super) fn on_diff_ack(
        &mut self,
        page: PageId,
        id: u64,
        migrate: Option<Handover>,
    ) -> Result<(), ProtoError> {
        self.diffs.unacked.remove(&id);
        if self.diffs.outstanding.remove(&id) {
            if let Some(n) = self.diffs.per_page.get_mut(&page) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.diffs.per_page.remove(&page);
                    self.diffs.sent_to.remove(&page);
                }
            }
        }
        if let Some(h) = migrate {
            self.become_home(page, h)?;
        }
        self.send_held_diffs(page)?;
        if !self.diffs.per_page.contains_key(&page) {
            if self.is_home(page) {
                // A fetch waiting for our diffs: this node became the home meanwhile.
                if let Some(f) = self.st(page).fetch.filter(|f| !f.sent) {
                    self.st(page).fetch = None;
                    self.fault(page, f.write)?;
                }
            } else {
                self.send_fetch(page);
            }
        }
        self.check_releases();
        Ok(())
    }

    /// Send the diffs of `page` held back while earlier ones were on their way to another
    /// node, once all of those are acked (to the current home; if that is this node now,
    /// `become_home` merged them and they are acked here).
    pub(super) fn send_held_diffs(&mut self, page: PageId) -> Result<(), ProtoError> {
        let held = self.diffs.held.get(&page).map_or(0, |v| v.len() as u32);
        if held == 0 || self.diffs.per_page.get(&page).copied().unwrap_or(0) > held {
            return Ok(());
        }
        self.diffs.sent_to.remove(&page);
        for id in self.diffs.held.remove(&page).unwrap_or_default() {
            let Some((_, diff)) = self.diffs.unacked.get(&id).cloned() else {
                continue;
            };
            let home = self.dir.cached(page).ok_or(ProtoError::Unexpected {
                from: self.me,
                page,
                why: "held diff with unknown home".into(),
            })?;
            if home.node == self.me {
                self.on_diff_ack(page, id, None)?;
            } else {
                self.post_diff(page, home, id, diff);
            }
        }
        Ok(())
    }
}

//! `hlrc` write notices: the vector time, the notice store (compacted beyond its budget,
//! trimmed at barriers), the sync info handed out at grants and barriers and applied at
//! acquires, and invalidating the copies a notice names.
//!
//! Owns: `NoticeLog` (`Hlrc::wn`: vector time, notices, the last barrier's vector time,
//! dropped copies to report); `release` adds this node's own intervals to it when they are
//! published. Must not touch: diffs (a dirty copy a notice names is flushed through
//! `release`'s `send_diff`), the home side.

use super::grantpush::{encode_acquire, encode_grant, split_acquire, split_grant, GRANT_PUSH_TAG};
use super::msg::{decode_sync, encode_sync, Msg};
use super::state::{BARRIER_FETCH_AGE, KEEP_RECENT};
use super::Hlrc;
use crate::shared::access::set_access_runs;
use crate::shared::diff::make_diff;
use squall_core::{Access, NodeId, PageId, PageMemory};
use std::collections::{BTreeMap, BTreeSet};

/// This node's vector time and the write notices it knows, with what a barrier trims.
#[derive(Debug)]
pub(super) struct NoticeLog {
    /// Vector time: last interval of each node whose notices this node has applied.
    pub(super) vt: Vec<u32>,
    /// Known write notices by (node, interval), kept for transitive propagation until a barrier.
    pub(super) notices: BTreeMap<(u16, u32), Vec<PageId>>,
    /// Vector time of the last barrier (notices up to it go at the next barrier).
    pub(super) barrier_vt: Vec<u32>,
    /// Copies invalidated while applying notices, by home: sent as `Dropped` batches.
    pub(super) dropped: BTreeMap<NodeId, Vec<PageId>>,
}

impl NoticeLog {
    pub(super) fn new(nodes: u16) -> Self {
        NoticeLog {
            vt: vec![0; usize::from(nodes)],
            notices: BTreeMap::new(),
            barrier_vt: vec![0; usize::from(nodes)],
            dropped: BTreeMap::new(),
        }
    }
}

impl<M: PageMemory> Hlrc<M> {
    /// `Consistency::apply_barrier`: apply every node's notices, trim the store below the
    /// previous barrier, and fetch the copies worth fetching again.
    pub(super) fn apply_barrier_notices(&mut self, all: &[Vec<u8>]) {
        let mut max = self.wn.vt.clone();
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
        self.wn.vt = max.clone();
        // Every node applied the previous barrier before it sent its info for this one, so
        // every vector time in the job is now at least the previous barrier's: notices up to
        // it are never needed again. (Notices up to this barrier are kept one more episode: a
        // node that has not applied this barrier yet may still be granted a lock meanwhile,
        // and nodes may go on creating intervals while a barrier with a thread count is out.)
        let floor = std::mem::replace(&mut self.wn.barrier_vt, max);
        self.wn
            .notices
            .retain(|(n, i), _| floor.get(usize::from(*n)).is_none_or(|f| *i > *f));
        // After the `dropped` batches above (FIFO: the home adds this node back to the
        // copysets with these fetches).
        let locks_used = std::mem::take(&mut self.grants_since_barrier) > 0;
        if self.tuning.barrier_fetch > 0 && !self.ending && !locks_used && !refetch.is_empty() {
            refetch.sort_unstable();
            refetch.dedup_by_key(|(p, _)| *p);
            self.barrier_fetch(&refetch);
        }
        self.barriers = self.barriers.wrapping_add(1);
    }

    /// `Consistency::barrier_info`: send this barrier's pushes, then all notices held.
    pub(super) fn barrier_notices(&mut self) -> Vec<u8> {
        self.send_pushes();
        let all: Vec<_> = self.wn.notices.iter().collect();
        encode_sync(&self.wn.vt, &all)
    }

    /// `Consistency::merge_barrier_infos`: one info saying what all of `infos` say: the
    /// element-wise maximum of their vector times and the union of their notices (a notice
    /// named by several infos keeps the union of their pages: after compaction two nodes may
    /// key different page sets by the same interval; invalidating the union is a superset, as
    /// compaction already allows). `None` if any info is malformed (then nothing is merged).
    pub(super) fn merge_barrier_notices(&self, infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        let nodes = self.layout.nodes;
        let mut vt = vec![0u32; usize::from(nodes)];
        let mut all: BTreeMap<(u16, u32), BTreeSet<PageId>> = BTreeMap::new();
        for info in infos {
            let (theirs, notices) = decode_sync(self.me, nodes, info)?;
            for (m, t) in vt.iter_mut().zip(theirs) {
                *m = (*m).max(t);
            }
            for (key, pages) in notices {
                all.entry(key).or_default().extend(pages);
            }
        }
        let lists: Vec<((u16, u32), Vec<PageId>)> = all
            .into_iter()
            .map(|(k, pages)| (k, pages.into_iter().collect()))
            .collect();
        let refs: Vec<_> = lists.iter().map(|(k, p)| (k, p)).collect();
        Some(encode_sync(&vt, &refs))
    }

    /// `Consistency::apply_grant`: take the pages pushed with the grant (`grantpush`), apply
    /// the granter's notices and merge its vector time.
    pub(super) fn apply_grant_notices(&mut self, grant_info: &[u8]) {
        let sync = if grant_info.first() == Some(&GRANT_PUSH_TAG) {
            match split_grant(grant_info) {
                Some((from, sync, pushes)) => {
                    // The pushed pages are as current as a fetch at the granter when it
                    // granted: enough only if this node has seen nothing the granter had not
                    // (another grant applied meanwhile may have brought newer notices).
                    let covered =
                        decode_sync(self.me, self.layout.nodes, sync).is_some_and(|(theirs, _)| {
                            self.wn.vt.iter().zip(&theirs).all(|(mine, t)| mine <= t)
                        });
                    if covered {
                        self.take_grant_pushes(from, &pushes);
                    }
                    sync
                }
                None => {
                    self.stats.malformed_sync_info += 1;
                    return;
                }
            }
        } else {
            grant_info
        };
        match self.apply_notices(sync, None) {
            Some(theirs) => {
                for (mine, t) in self.wn.vt.iter_mut().zip(theirs) {
                    *mine = (*mine).max(t);
                }
            }
            None => self.stats.malformed_sync_info += 1,
        }
        self.grant_kept.clear();
    }

    /// `Consistency::grant_info`: this node's vector time and the notices the acquirer lacks,
    /// with the pages this node is the home of that they name (`grantpush`).
    pub(super) fn grant_notices(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        let (to, acquirer_info) = split_acquire(acquirer_info);
        let theirs = decode_sync(self.me, self.layout.nodes, acquirer_info)
            .map(|(vt, _)| vt)
            .unwrap_or_else(|| vec![0; self.wn.vt.len()]);
        let lacking: Vec<_> = self
            .wn
            .notices
            .iter()
            .filter(|((n, i), _)| *i > theirs[usize::from(*n)])
            .collect();
        let sync = encode_sync(&self.wn.vt, &lacking);
        let Some(to) = to else {
            return sync;
        };
        let named: BTreeSet<PageId> = lacking
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let pushes = self.grant_pushes(to, &named);
        if pushes.is_empty() {
            sync
        } else {
            encode_grant(self.me, &sync, &pushes)
        }
    }

    /// `Consistency::acquire_info`: this node's vector time, naming this node.
    pub(super) fn acquire_notices(&mut self) -> Vec<u8> {
        encode_acquire(self.me, &encode_sync(&self.wn.vt, &[]))
    }

    /// Bound the notice store without barriers: all but the newest few notices of each node
    /// are merged into one notice keyed by the newest merged interval, naming the union of
    /// their pages. An acquirer that lacks any merged interval gets the union: it may
    /// invalidate pages it did not have to (extra misses), never fewer.
    pub(super) fn compact_notices(&mut self) {
        if self.wn.notices.len() <= self.tuning.notice_budget {
            return;
        }
        for n in 0..self.layout.nodes {
            let keys: Vec<(u16, u32)> = self
                .wn
                .notices
                .range((n, 0)..=(n, u32::MAX))
                .map(|(k, _)| *k)
                .collect();
            if keys.len() <= KEEP_RECENT + 1 {
                continue;
            }
            let old = &keys[..keys.len() - KEEP_RECENT];
            let mut union = BTreeSet::new();
            for k in old {
                if let Some(pages) = self.wn.notices.remove(k) {
                    union.extend(pages);
                }
            }
            if let Some(last) = old.last() {
                self.wn.notices.insert(*last, union.into_iter().collect());
            }
        }
        self.stats.notice_compactions += 1;
    }

    /// Write notices currently held (bounded: cleared at every barrier, compacted beyond the
    /// budget).
    pub fn notices_held(&self) -> usize {
        self.wn.notices.len()
    }

    /// A write notice names `page`: drop this node's copy (keeping its own modifications). A
    /// copy with no own writes is only pushed to `unmap` (the caller removes access in runs).
    /// A readable copy this node used lately is also pushed to `refetch` when given (a
    /// barrier: see `set_barrier_fetch`), and so is a writable one with no writes since its
    /// twin was taken (marked `true`: it comes back writable).
    pub(super) fn invalidate(
        &mut self,
        page: PageId,
        unmap: &mut Vec<PageId>,
        refetch: Option<&mut Vec<(PageId, bool)>>,
    ) {
        if self.is_home(page) || self.pages.get(&page).is_some_and(|s| s.exclusive) {
            // Home copies are current; an exclusive copy is newer than any notice (nobody else
            // held the page when it was granted).
            return;
        }
        let acc = self.mem.access(page);
        let now = self.barriers;
        let st = self.st(page);
        // Used lately: worth fetching again at a barrier if it is a readable copy, or a
        // writable one unchanged since its twin was taken (below).
        let recent = st.used
            && !st.probe
            && st.fetch.is_none()
            && now.saturating_sub(st.got_at) <= BARRIER_FETCH_AGE;
        let mut again = acc == Access::Read && st.twin.is_none();
        if let Some(f) = st.fetch.as_mut() {
            f.stale = true;
        }
        st.pushed = None;
        st.granted = false;
        let probed = std::mem::take(&mut st.probe);
        let twin = st.twin.take();
        let written = twin.is_some();
        let held = probed || written || acc != Access::None;
        if held {
            let st = self.st(page);
            st.lost = st.used;
            // Tell the home (batched, after the diff below: FIFO) that this copy is gone.
            if let Some(h) = self.dir.cached(page) {
                self.wn.dropped.entry(h.node).or_default().push(page);
            }
        }
        if let Some(twin) = twin {
            // Own writes of the current interval go to the home first; the next fetch is FIFO
            // behind this diff, so it comes back with them.
            self.mem.set_access(page, Access::None);
            let cur = self.read(page);
            let d = make_diff(&twin, &cur);
            // A copy kept writable with a twin (written lately, `release`) and not written
            // since comes back writable with a fresh twin: the node will likely write it again
            // (two nodes writing disjoint parts of one page at every step, as Gauss's cyclic
            // rows do, otherwise cost a fetch round trip and a twin fault per page and step).
            // With a diff sent, its unacked diff holds the fetch back (`can_read_ahead`).
            again = acc == Access::ReadWrite && d.is_empty();
            if !d.is_empty() {
                // The home is known for a dirty page, so this cannot fail.
                let _ = self.send_diff(page, d);
                self.flushed.insert(page);
            }
            self.stats.invalidations += 1;
            if let Some(p) = self.prof() {
                p.invalidate(page);
            }
        } else if acc != Access::None {
            unmap.push(page);
            self.stats.invalidations += 1;
            if let Some(p) = self.prof() {
                p.invalidate(page);
            }
        }
        if let Some(refetch) = refetch {
            if recent && again {
                refetch.push((page, written));
            }
        }
    }

    /// Apply notices; returns the vector time they carried. At a barrier, `refetch` collects
    /// the copies worth fetching again at once (see `invalidate`).
    pub(super) fn apply_notices(
        &mut self,
        info: &[u8],
        mut refetch: Option<&mut Vec<(PageId, bool)>>,
    ) -> Option<Vec<u32>> {
        let (their_vt, notices) = decode_sync(self.me, self.layout.nodes, info)?;
        // Page -> whether some notice requires invalidating it (a copy a push of node `n`
        // brought up to interval `i` or later already holds that notice's writes).
        let mut named: BTreeMap<PageId, bool> = BTreeMap::new();
        for ((n, i), pages) in notices {
            if i <= self.wn.vt[usize::from(n)] || self.wn.notices.contains_key(&(n, i)) {
                continue;
            }
            for p in &pages {
                let covered = self
                    .pages
                    .get(p)
                    .and_then(|s| s.pushed)
                    .is_some_and(|(pn, pi)| pn.0 == n && i <= pi);
                *named.entry(*p).or_insert(false) |= !covered;
            }
            self.wn.notices.insert((n, i), pages);
            self.compact_notices();
        }
        // A notice names a unit (by any of its pages): the unit is invalidated whole.
        let mut units: BTreeMap<PageId, bool> = BTreeMap::new();
        for (p, must) in named {
            let (first, n) = self.dir.unit_of(p);
            for q in first.0..first.0 + n {
                *units.entry(PageId(q)).or_insert(false) |= must;
            }
        }
        let mut unmap = Vec::new();
        for (p, must) in units {
            if must && !self.grant_kept.contains(&p) {
                self.invalidate(p, &mut unmap, refetch.as_deref_mut());
            } else {
                self.stats.push_kept += 1;
            }
        }
        set_access_runs(&self.mem, &unmap, Access::None);
        for (home, pages) in std::mem::take(&mut self.wn.dropped) {
            if home != self.me {
                self.send(home, Msg::Dropped { pages });
            }
        }
        Some(their_vt)
    }
}

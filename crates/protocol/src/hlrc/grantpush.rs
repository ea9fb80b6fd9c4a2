//! `hlrc` pages pushed with a lock grant: a releaser that is the home of pages the grant's
//! notices name sends their current contents inside the grant, and the acquirer updates its
//! copy of them in place instead of invalidating it and fetching it again at its next access
//! (the hand-off's page round trip).
//!
//! Granter (`grant_pushes`): at most [`GRANT_PUSH_PAGES`] pages a notice the acquirer lacks
//! names, not part of a unit. The home of a page pushes its home copy when the acquirer is in
//! its copyset and nobody holds the page exclusively (recorded as served, `note_served`).
//! Any other granter pushes its own copy when it is clean (`clean_copy`): readable, not
//! exclusive, no fetch pending, no diff of it in flight (its last diff acknowledged by the
//! home before the grant), and no write since its last release. Such a copy holds every
//! write of the granter's vector time (a notice this node applies invalidates its copy) and
//! nothing the home lacks.
//!
//! Acquirer (`take_grant_pushes`): the pushes are taken only if the granter's vector time in
//! the grant covers this node's (a grant applied meanwhile, e.g. of another lock, may have
//! brought newer notices and a newer copy: the pushed bytes would then be older than what this
//! node must see) and this node's own released writes are all published (no diff in flight,
//! no unpublished interval: they are then in the granter's vector time, so in the copy). A
//! push only updates, in place, a copy this node holds: a read-only copy, or a writable one
//! whose contents still equal its twin (no writes since its last release; compared with the
//! page made inaccessible, so no thread of this node writes meanwhile); no fetch, recall or
//! migration pending. A request for the home to move here (`want_home`) is pending only while
//! its empty diff is unacked (`diffs.outstanding`): `PageState::want_sent` stays set for the
//! home's epoch after the answer, so it says nothing about a pending migration (testing it
//! refused every page the acquirer had written: 0 pushes taken in the runtime). Nor does a
//! forward pointer (`PageState::forward`): a former home keeps it for good to redirect stale
//! requests; its copy, fetched since, is an ordinary copy (a handover to this node still in
//! flight overwrites it with the home's contents when it arrives). A page this node has no copy of (never fetched, or dropped: its
//! `Dropped` may be crossing the grant) is ignored, so the home's copyset stays exact: the
//! copy exists before and after. The twin becomes the pushed bytes (later writes diff
//! against them). Such pages are then kept through the grant's notices (`grant_kept`); any
//! other pushed page is ignored and the notices invalidate the copy as usual.
//!
//! Wire: a grant info with pushes is `[GRANT_PUSH_TAG][granter u16][sync len u32][sync
//! info][count u16]([page u64][PAGE_SIZE bytes])*`; without pushes it is the plain sync info.
//!
//! Owns: the grant info's push section, `Hlrc::grant_kept` and `PageState::granted` (cleared by
//! `invalidate`, read by `on_push`). Must not touch: notices (the
//! caller applies them), the home's copyset (only read).

use super::Hlrc;
use squall_core::{Access, NodeId, PageId, PageMemory, PAGE_SIZE};
use std::collections::BTreeSet;

/// Most pages one lock grant carries (32 KiB): the pages a critical section wrote at the
/// home, beyond which the acquirer fetches on demand as before.
pub const GRANT_PUSH_PAGES: usize = 8;

/// Whether a granter that is not a page's home pushes its own clean copy (`clean_copy`).
/// Off for now. Measured on: `bench lock --contended --nodes 4` fetches per hand-off 0.45-0.73
/// -> 0.005 and hand-off time 0.63x (medians of 3 alternating runs), 1.0 page pushed and 0.75
/// taken per hand-off (the rest went to the page's home, which never takes one); the
/// simulator passes with it on (19,000 seeds: hlrc, --long, --wide, mixed). Six core tests
/// of `tests/hlrc.rs` still count pushes and invalidations as if it were off.
const PUSH_CLEAN_COPIES: bool = false;

/// First byte of a grant info carrying pushed pages (a plain sync info starts with
/// `msg::SYNC_TAG`).
pub(super) const GRANT_PUSH_TAG: u8 = 0x5b;

/// First byte of an acquire info naming the acquirer: `[ACQUIRE_TAG][node u16][sync info]`
/// (the granter pushes only pages the acquirer holds copies of).
pub(super) const ACQUIRE_TAG: u8 = 0x5c;

/// An acquire info naming `me`.
pub(super) fn encode_acquire(me: NodeId, sync: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(3 + sync.len());
    b.push(ACQUIRE_TAG);
    b.extend_from_slice(&me.0.to_le_bytes());
    b.extend_from_slice(sync);
    b
}

/// The acquirer and sync info of an acquire info (a plain sync info names nobody).
pub(super) fn split_acquire(info: &[u8]) -> (Option<NodeId>, &[u8]) {
    match info {
        [ACQUIRE_TAG, a, b, sync @ ..] => (Some(NodeId(u16::from_le_bytes([*a, *b]))), sync),
        _ => (None, info),
    }
}

/// The pages of a grant info with pushes: (granter, sync info, pushed pages).
type Split<'a> = (NodeId, &'a [u8], Vec<(PageId, &'a [u8])>);

/// A grant info with pushes (see the module doc).
pub(super) fn encode_grant(me: NodeId, sync: &[u8], pushes: &[(PageId, Vec<u8>)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(9 + sync.len() + pushes.len() * (8 + PAGE_SIZE));
    b.push(GRANT_PUSH_TAG);
    b.extend_from_slice(&me.0.to_le_bytes());
    b.extend_from_slice(&(sync.len() as u32).to_le_bytes());
    b.extend_from_slice(sync);
    b.extend_from_slice(&(pushes.len() as u16).to_le_bytes());
    for (p, data) in pushes {
        b.extend_from_slice(&p.0.to_le_bytes());
        b.extend_from_slice(data);
    }
    b
}

/// Split a grant info with pushes; `None` if malformed (a plain sync info is not one).
pub(super) fn split_grant(info: &[u8]) -> Option<Split<'_>> {
    let (&tag, rest) = info.split_first()?;
    if tag != GRANT_PUSH_TAG {
        return None;
    }
    let (from, rest) = rest.split_at_checked(2)?;
    let from = NodeId(u16::from_le_bytes(from.try_into().ok()?));
    let (len, rest) = rest.split_at_checked(4)?;
    let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
    let (sync, rest) = rest.split_at_checked(len)?;
    let (count, mut rest) = rest.split_at_checked(2)?;
    let count = u16::from_le_bytes(count.try_into().ok()?);
    let mut pages = Vec::with_capacity(usize::from(count).min(GRANT_PUSH_PAGES));
    for _ in 0..count {
        let (p, r) = rest.split_at_checked(8)?;
        let (data, r) = r.split_at_checked(PAGE_SIZE)?;
        pages.push((PageId(u64::from_le_bytes(p.try_into().ok()?)), data));
        rest = r;
    }
    rest.is_empty().then_some((from, sync, pages))
}

impl<M: PageMemory> Hlrc<M> {
    /// Granter: the pages to push to `to` with a grant whose notices name `named`, with their
    /// current contents (see the module doc), at most [`GRANT_PUSH_PAGES`].
    pub(super) fn grant_pushes(
        &mut self,
        to: NodeId,
        named: &BTreeSet<PageId>,
    ) -> Vec<(PageId, Vec<u8>)> {
        let mut out = Vec::new();
        for &p in named {
            if out.len() == GRANT_PUSH_PAGES {
                break;
            }
            if to == self.me || self.dir.in_unit(p) {
                continue;
            }
            let data = if self.is_home(p) {
                let fits = self.pages.get(&p).is_some_and(|st| {
                    (st.copyset_all || st.copyset.contains(&to))
                        && st.excl_holder.is_none()
                        && !st.recalling
                });
                if !fits {
                    continue;
                }
                let data = self.read(p);
                self.note_served(p, &data);
                data
            } else if PUSH_CLEAN_COPIES {
                match self.clean_copy(p) {
                    Some(data) => data,
                    None => continue,
                }
            } else {
                continue;
            };
            out.push((p, data));
        }
        self.stats.grant_pages_pushed += out.len() as u64;
        out
    }

    /// Granter, not the home of `p`: its copy when that copy holds exactly what the home
    /// has acknowledged from this node and every notice of this node's vector time: a readable
    /// copy (invalidated by any notice this node applied, so it was fetched or kept since),
    /// not held exclusively, no fetch pending, no diff of it in flight or held back, and no
    /// write since this node's last release (a writable copy equals its twin).
    fn clean_copy(&mut self, p: PageId) -> Option<Vec<u8>> {
        if self.diffs.per_page.contains_key(&p)
            || self.diffs.held.contains_key(&p)
            || self.flushed.contains(&p)
        {
            return None;
        }
        let st = self.pages.get(&p)?;
        if st.exclusive || st.probe || st.fetch.is_some() {
            return None;
        }
        let has_twin = st.twin.is_some();
        match (self.mem.access(p), has_twin, self.dirty.contains(&p)) {
            (Access::Read, false, false) => Some(self.read(p)),
            (Access::ReadWrite, true, true) => {
                let data = self.read(p);
                let st = self.pages.get(&p)?;
                (st.twin.as_deref() == Some(data.as_slice())).then_some(data)
            }
            _ => None,
        }
    }

    /// Acquirer: update this node's copies with the pages `from` pushed along with its grant
    /// where they may be (see the module doc); the updated pages go to `grant_kept`.
    pub(super) fn take_grant_pushes(&mut self, from: NodeId, pushes: &[(PageId, &[u8])]) {
        // This node's own released writes must all be published (in its vector time, so in
        // the granter's, which covers it): a pushed copy then holds them.
        if from == self.me
            || !self.diffs.outstanding.is_empty()
            || !self.diffs.unpublished.is_empty()
        {
            return;
        }
        for &(p, data) in pushes {
            let fits = !self.is_home(p)
                && self.dir.cached(p).is_some()
                && !self.dir.in_unit(p)
                && !self.diffs.per_page.contains_key(&p)
                && !self.flushed.contains(&p)
                && self
                    .pages
                    .get(&p)
                    .is_some_and(|st| st.fetch.is_none() && !st.exclusive && !st.probe);
            if !fits {
                continue;
            }
            let acc = self.mem.access(p);
            let has_twin = self.pages.get(&p).is_some_and(|st| st.twin.is_some());
            match (acc, has_twin) {
                (Access::Read, false) if !self.dirty.contains(&p) => {
                    // Read-only: no thread of this node writes it; it stays readable.
                    self.mem.write_bytes(p, 0, data);
                }
                (Access::ReadWrite, true) if self.dirty.contains(&p) => {
                    // No thread of this node writes while the page is compared and replaced.
                    self.mem.set_access(p, Access::None);
                    let clean = self
                        .pages
                        .get(&p)
                        .and_then(|st| st.twin.as_deref())
                        .is_some_and(|t| self.mem.page_equals(p, t));
                    if clean {
                        self.mem.write_bytes(p, 0, data);
                        self.st(p).twin = Some(data.to_vec());
                    }
                    self.mem.set_access(p, Access::ReadWrite);
                    if !clean {
                        continue;
                    }
                }
                _ => continue,
            }
            let st = self.st(p);
            st.pushed = None;
            st.pushes = 0;
            st.granted = true;
            self.grant_kept.insert(p);
            self.stats.grant_pushes_taken += 1;
        }
    }
}

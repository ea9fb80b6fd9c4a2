//! `hlrc` pages pushed with a lock grant: a releaser that is the home of pages the grant's
//! notices name sends their current contents inside the grant, and the acquirer updates its
//! copy of them in place instead of invalidating it and fetching it again at its next access
//! (the hand-off's page round trip).
//!
//! Granter (`grant_pushes`): a page is pushed when this node is its home, the acquirer is in its
//! copyset (it holds a copy the home knows of: so no `Dropped` of it can be in flight — a copy
//! fetched after a drop is FIFO behind that drop — and the home keeps noticing its writes to
//! it), nobody holds it exclusively, it is not part of a unit, and a notice the acquirer lacks
//! names it; at most [`GRANT_PUSH_PAGES`] per grant. What is pushed is what a fetch would get
//! now (a home copy holds every published diff), recorded as served (`note_served`).
//!
//! Acquirer (`take_grant_pushes`): the pushes are taken only if the granter's vector time in
//! the grant covers this node's (a grant applied meanwhile, e.g. of another lock, may have
//! brought newer notices and a newer copy: the pushed bytes would then be older than what this
//! node must see). A pushed page replaces the copy only if that copy came
//! from the granter as its home and holds no writes of this node the home has not seen: a
//! read-only copy, or a writable one whose contents still equal its twin (no writes since
//! its last release; compared with the page made inaccessible, so no thread of this node
//! writes meanwhile) with no diff in flight; no fetch, recall or migration pending. The
//! twin becomes the pushed bytes (later writes diff against them). Such pages are then kept
//! through the grant's notices (`grant_kept`); any other pushed page is ignored and the
//! notices invalidate the copy as usual.
//!
//! Wire: a grant info with pushes is `[GRANT_PUSH_TAG][granter u16][sync len u32][sync
//! info][count u16]([page u64][PAGE_SIZE bytes])*`; without pushes it is the plain sync info.
//!
//! Owns: the grant info's push section and `Hlrc::grant_kept`. Must not touch: notices (the
//! caller applies them), the home's copyset (only read).

use super::Hlrc;
use squall_core::{Access, NodeId, PageId, PageMemory, PAGE_SIZE};
use std::collections::BTreeSet;

/// Most pages one lock grant carries (32 KiB): the pages a critical section wrote at the
/// home, beyond which the acquirer fetches on demand as before.
pub const GRANT_PUSH_PAGES: usize = 8;

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
            let fits = to != self.me
                && self.is_home(p)
                && !self.dir.in_unit(p)
                && self.pages.get(&p).is_some_and(|st| {
                    (st.copyset_all || st.copyset.contains(&to))
                        && st.excl_holder.is_none()
                        && !st.recalling
                });
            if !fits {
                continue;
            }
            let data = self.read(p);
            self.note_served(p, &data);
            out.push((p, data));
        }
        self.stats.grant_pages_pushed += out.len() as u64;
        out
    }

    /// Acquirer: update this node's copies with the pages `from` pushed along with its grant
    /// where they may be (see the module doc); the updated pages go to `grant_kept`.
    pub(super) fn take_grant_pushes(&mut self, from: NodeId, pushes: &[(PageId, &[u8])]) {
        for &(p, data) in pushes {
            let fits = from != self.me
                && !self.is_home(p)
                && self.dir.cached(p).is_some_and(|h| h.node == from)
                && !self.dir.in_unit(p)
                && !self.diffs.per_page.contains_key(&p)
                && !self.flushed.contains(&p)
                && self.pages.get(&p).is_some_and(|st| {
                    st.fetch.is_none()
                        && !st.exclusive
                        && !st.probe
                        && st.forward.is_none()
                        && st.want_sent.is_none()
                });
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
            self.grant_kept.insert(p);
            self.stats.grant_pushes_taken += 1;
        }
    }
}

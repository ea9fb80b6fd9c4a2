//! `hlrc` serving copies, home side: answering fetches (the page, then its read-ahead runs),
//! the copyset and exclusive mode (grant, recall, recall reply), `dropped` copies, and
//! requests that arrive for a page whose home is not here (redirect or park).
//!
//! Owns: the home-side copyset and exclusive-holder fields of `PageState`. Must not touch:
//! the requester side (`fault`), diffs (`release`).

use super::msg::{Kind, Msg, RunBuf};
use super::state::{Held, HomeStatus, MAX_RUN};
use super::Hlrc;
use crate::shared::home::HomeRef;
use crate::{Action, ProtoError};
use squall_core::{Access, NodeId, PageId, PageMemory};

impl<M: PageMemory> Hlrc<M> {
    /// Home side: a fetch of `page` by `from` at home epoch `epoch`, with `behind` and `ahead`
    /// read-ahead pages.
    pub(super) fn on_fetch(
        &mut self,
        from: NodeId,
        page: PageId,
        write: bool,
        epoch: u32,
        behind: u16,
        ahead: u16,
    ) {
        if self.dir.in_unit(page) {
            if let HomeStatus::Serve = self.home_status(page, epoch) {
                self.serve_unit(from, page);
                return;
            }
        }
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

    /// The home wants this node's exclusive copy back: send it, keeping a read-only copy.
    pub(super) fn on_recall(&mut self, from: NodeId, page: PageId) {
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

    /// Home side: the exclusive copy came back; run the work held for it.
    pub(super) fn on_recall_reply(
        &mut self,
        from: NodeId,
        page: PageId,
        data: Option<Vec<u8>>,
    ) -> Result<(), ProtoError> {
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
        Ok(())
    }

    /// Home side: `from` invalidated its copies of `pages`; take it out of their copysets.
    pub(super) fn on_dropped(&mut self, from: NodeId, pages: Vec<PageId>) {
        for page in pages {
            if self.is_home(page) {
                let st = self.st(page);
                if !st.copyset_all && st.excl_holder != Some(from) {
                    st.copyset.remove(&from);
                }
            }
        }
    }

    /// At the home: if the page is held exclusively elsewhere, keep `item` until the copy is
    /// back (starting the recall); returns whether it was kept.
    pub(super) fn hold_for_recall(&mut self, page: PageId, item: Held) -> bool {
        let st = self.st(page);
        let Some(holder) = st.excl_holder else {
            return false;
        };
        st.held.push(item);
        if !st.recalling {
            st.recalling = true;
            self.stats.recalls += 1;
            self.send(holder, Msg::Recall { page });
        }
        true
    }

    /// Home side: hand out the home's copy of `page` to `from` (a fetch).
    pub(super) fn serve_copy(&mut self, from: NodeId, page: PageId, write: bool, again: bool) {
        let (data, exclusive) = self.share_copy(from, page, write, again);
        self.send(
            from,
            Msg::PageData {
                page,
                data,
                exclusive,
            },
        );
    }

    /// Home side: the read-ahead pages `pages` of a fetch by `from` at home epoch `epoch`:
    /// runs of consecutive servable pages as `page_run`s of at most `MAX_RUN` pages, and
    /// `no_page` for each page this node cannot serve now (not its home at that epoch, held
    /// exclusively, recall out).
    pub(super) fn serve_read_ahead(
        &mut self,
        from: NodeId,
        epoch: u32,
        pages: std::ops::Range<u64>,
    ) {
        let mut run: Option<RunBuf> = None;
        for q in pages {
            let q = PageId(q);
            let servable = q.0 < self.layout.total_pages
                && matches!(self.home_status(q, epoch), HomeStatus::Serve)
                && self
                    .pages
                    .get(&q)
                    .is_none_or(|s| s.excl_holder.is_none() && !s.recalling);
            if !servable {
                if let Some(r) = run.take() {
                    self.send_run(from, r);
                }
                self.send(from, Msg::NoPage { page: q });
                continue;
            }
            if run.as_ref().is_some_and(|r| r.count >= MAX_RUN) {
                if let Some(r) = run.take() {
                    self.send_run(from, r);
                }
            }
            self.share_grant(from, q, false, false);
            let r = run.get_or_insert_with(|| RunBuf::new(q));
            r.push(&self.mem, q);
            if self.dirty.contains(&q) || self.watched.contains(&q) {
                let served = r.last_page().to_vec();
                self.note_served(q, &served);
            }
        }
        if let Some(r) = run {
            self.send_run(from, r);
        }
    }

    pub(super) fn send_run(&mut self, to: NodeId, run: RunBuf) {
        let bytes = run.finish();
        self.stats.count_send(Kind::PageRun.name(), bytes.len());
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    /// Home side: record that `from` gets a copy of `page` and return it, with whether it is
    /// granted in exclusive mode.
    pub(super) fn share_copy(
        &mut self,
        from: NodeId,
        page: PageId,
        write: bool,
        again: bool,
    ) -> (Vec<u8>, bool) {
        let exclusive = self.share_grant(from, page, write, again);
        let data = self.read(page);
        self.note_served(page, &data);
        (data, exclusive)
    }

    /// Home side: `data`, the bytes of `page` just handed out, left this node while it may be
    /// writing the page (`dirty`). Unless they equal the snapshot of its last release (the
    /// copy is then exactly what that release published), the next release notices the page
    /// even if it then equals the snapshot (a later write may have put back the snapshot's
    /// bytes over what the copy holds). Comparing the bytes served, not the page before
    /// reading it, keeps this right while a thread writes meanwhile. Without the comparison
    /// every copy fetched from a page kept writable was noticed again at the next release,
    /// fetched again at that barrier and noticed again, for as long as the page stayed
    /// writable (CG: its vector `p` fetched at each of the 3 barriers of an iteration).
    ///
    /// A page `watched` since this serve takes `data` as its snapshot.
    pub(super) fn note_served(&mut self, page: PageId, data: &[u8]) {
        let watched = self.watched.contains(&page);
        if !self.dirty.contains(&page) && !watched {
            return;
        }
        let st = self.st(page);
        if watched && st.twin.is_none() && !st.served_dirty {
            st.twin = Some(data.to_vec());
        } else if st.twin.as_deref() != Some(data) {
            st.served_dirty = true;
        }
    }

    /// Home side: record that `from` gets a copy of `page` (the caller reads it after this:
    /// the page may be write-protected here first); returns whether it is granted in
    /// exclusive mode.
    pub(super) fn share_grant(
        &mut self,
        from: NodeId,
        page: PageId,
        write: bool,
        again: bool,
    ) -> bool {
        let dirty = self.dirty.contains(&page);
        let unused_here = self.mem.access(page) == Access::None;
        let enabled = self.tuning_for(page).exclusive_mode;
        let me = self.me;
        let st = self.st(page);
        let exclusive = again
            || (write
                && enabled
                && !dirty
                && unused_here
                && !st.copyset_all
                && st.copyset.iter().all(|&n| n == from));
        let first_sharer = !st.copyset_all && st.copyset.iter().all(|&n| n == me);
        st.copyset.insert(from);
        if first_sharer
            && !dirty
            && self.is_home(page)
            && self.mem.access(page) == Access::ReadWrite
        {
            // An unshared home page kept writable across releases: from now on its writes
            // must be noticed. Kept writable, the bytes handed out (`note_served`) are its
            // snapshot for the next releases to compare to; or write-protected, to catch
            // the next write.
            if self.tuning_for(page).watch_shared && !self.dir.in_unit(page) {
                let st = self.st(page);
                st.twin = None;
                st.idle_releases = 0;
                self.watched.insert(page);
            } else {
                self.mem.set_access(page, Access::Read);
            }
        }
        let st = self.st(page);
        if exclusive && !again {
            st.excl_holder = Some(from);
            self.stats.exclusive_grants += 1;
        }
        exclusive
    }

    pub(super) fn home_status(&mut self, page: PageId, epoch: u32) -> HomeStatus {
        if self.is_home(page) {
            return HomeStatus::Serve;
        }
        let fwd = self.pages.get(&page).and_then(|s| s.forward);
        match fwd {
            Some(f) if f.epoch > epoch => HomeStatus::Redirect(f),
            None if epoch == 0 => {
                // The requester learned from the manager that this node is the page's first
                // home; this node just has not looked it up itself yet.
                self.dir.learn(
                    page,
                    HomeRef {
                        node: self.me,
                        epoch: 0,
                    },
                );
                HomeStatus::Serve
            }
            _ => HomeStatus::Park,
        }
    }

    pub(super) fn park(&mut self, page: PageId, from: NodeId, msg: Msg) {
        self.parked.entry(page).or_default().push((from, msg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;
    use squall_core::{AllocInfo, HeapLayout, PAGE_SIZE};

    const LAYOUT: HeapLayout = HeapLayout {
        nodes: 2,
        total_pages: 600,
    };

    #[test]
    fn long_read_ahead_runs_are_split_into_page_runs_that_decode() {
        // A home serving 200 pages behind a fetch sends runs of at most `MAX_RUN` pages,
        // each of which the requester decodes.
        #[derive(Clone)]
        struct Flat;
        impl PageMemory for Flat {
            fn read_page(&self, page: PageId, out: &mut [u8]) {
                out.fill(page.0 as u8);
            }
            fn write_bytes(&self, _: PageId, _: usize, _: &[u8]) {}
            fn set_access(&self, _: PageId, _: Access) {}
            fn access(&self, _: PageId) -> Access {
                Access::Read
            }
        }
        let mut h = Hlrc::new(Flat, NodeId(0), LAYOUT);
        h.register_allocation(AllocInfo {
            first: PageId(0),
            pages: 300,
            placement: squall_core::Placement::Node(NodeId(0)),
        });
        let m = Msg::Fetch {
            page: PageId(250),
            write: false,
            epoch: 0,
            behind: 200,
            ahead: 0,
        };
        h.handle_message(NodeId(1), &m.encode()).expect("served");
        let mut pages = Vec::new();
        let mut first_kind = None;
        while let Some(a) = h.poll_action() {
            let Action::Send { to, msg } = a else {
                continue;
            };
            assert_eq!(to, NodeId(1));
            match Msg::decode(NodeId(0), LAYOUT, &msg).expect("decodes") {
                Msg::PageData { page, .. } => {
                    first_kind.get_or_insert("page_data");
                    assert_eq!(page, PageId(250));
                }
                Msg::PageRun { first, data } => {
                    first_kind.get_or_insert("page_run");
                    assert!(data.len() <= MAX_RUN * PAGE_SIZE);
                    // Built in place by the home, byte for byte the message's encoding.
                    let again = Msg::PageRun {
                        first,
                        data: data.clone(),
                    };
                    assert_eq!(again.encode(), msg);
                    for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
                        let q = first.0 + i as u64;
                        assert_eq!(chunk[0], q as u8);
                        pages.push(q);
                    }
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
        assert_eq!(first_kind, Some("page_data"));
        assert_eq!(pages, (50..250).collect::<Vec<u64>>());
    }
}

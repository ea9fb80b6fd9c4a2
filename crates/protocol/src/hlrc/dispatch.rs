//! `hlrc` inputs: the `Protocol` and `Consistency` entry points and the message dispatcher.
//! Every message is decoded here and routed to the handler of its concern; nothing else
//! happens here.
//!
//! Owns: the routing. Must not touch: protocol state directly (handlers do).

use super::msg::{decode_page_run, Kind, Msg};
use super::Hlrc;
use crate::shared::atomic::check_atomic;
use crate::{Action, AtomicCall, Coherence, ProtoError, ProtoStats, Protocol};
use squall_core::{AllocInfo, Consistency, NodeId, PageId, PageMemory};

impl<M: PageMemory> Hlrc<M> {
    /// Route a decoded message to the handler of its concern (nothing else happens here).
    pub(super) fn on_message(&mut self, from: NodeId, msg: Msg) -> Result<(), ProtoError> {
        match msg {
            Msg::HomeQuery { page } => self.on_home_query(from, page),
            Msg::HomeReply {
                page,
                home,
                more,
                alloc,
            } => self.on_home_reply(page, home, more, alloc)?,
            Msg::HomeMoved { page, home } => self.on_home_moved(page, home),
            Msg::Fetch {
                page,
                write,
                epoch,
                behind,
                ahead,
            } => self.on_fetch(from, page, write, epoch, behind, ahead),
            Msg::PageRun { first, data } => self.on_page_run(from, first, &data)?,
            Msg::NoPage { page } => self.on_no_page(page)?,
            Msg::PageData {
                page,
                data,
                exclusive,
            } => self.on_page_data(from, page, data, exclusive)?,
            Msg::Redirect {
                page,
                atomic_token: None,
                home,
            } => self.on_fetch_redirect(page, home)?,
            Msg::Redirect {
                page,
                atomic_token: Some(token),
                home,
            } => self.on_atomic_redirect(from, page, token, home)?,
            Msg::Diff {
                page,
                origin,
                id,
                epoch,
                diff,
            } => self.on_diff(from, page, origin, id, epoch, diff)?,
            Msg::DiffAck { page, id, migrate } => self.on_diff_ack(page, id, migrate)?,
            Msg::Recall { page } => self.on_recall(from, page),
            Msg::RecallReply { page, data } => self.on_recall_reply(from, page, data)?,
            Msg::Atomic {
                page,
                offset,
                call,
                token,
                epoch,
            } => self.on_atomic(from, page, offset, call, token, epoch)?,
            Msg::AtomicReply { token, old, infos } => {
                self.on_atomic_reply(from, token, old, infos)?
            }
            Msg::Dropped { pages } => self.on_dropped(from, pages),
            Msg::Handovers { first, items } => self.on_handovers(first, items)?,
            Msg::Push {
                first,
                interval,
                data,
            } => self.on_push(from, first, interval, &data),
        }
        Ok(())
    }
}

impl<M: PageMemory> Consistency for Hlrc<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        self.acquire_notices()
    }

    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        self.grant_notices(acquirer_info)
    }

    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.grants_since_barrier = self.grants_since_barrier.saturating_add(1);
        self.apply_grant_notices(grant_info)
    }

    fn begin_release(&mut self, token: u64) -> bool {
        self.release(token)
    }

    fn barrier_info(&mut self) -> Vec<u8> {
        self.barrier_notices()
    }

    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        self.apply_barrier_notices(all)
    }

    fn merge_barrier_infos(&mut self, infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        self.merge_barrier_notices(infos)
    }
}

impl<M: PageMemory> Protocol for Hlrc<M> {
    fn name(&self) -> &'static str {
        "hlrc"
    }

    fn set_profiling(&mut self) {
        if self.profile.is_none() {
            self.profile = Some(Box::default());
        }
    }

    fn sharing_profile(&self) -> Option<crate::SharingProfile> {
        self.profile.as_ref().map(|p| p.snapshot())
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        self.check_page(page)?;
        self.stats.count_fault(write);
        if let Some(p) = self.prof() {
            p.fault(page, write);
        }
        self.fault(page, write)
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        if msg.first() == Some(&Kind::PageRun.tag()) {
            // A page run is installed from the received bytes (no copy of the pages).
            let (first, data) = decode_page_run(from, self.layout, msg)?;
            if self.dir.in_unit(first) {
                return self.on_unit_run(from, first, data);
            }
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
        self.observe_atomic_value(page, offset, value)
    }

    fn holds_writes_for_home(&self, page: PageId) -> bool {
        // A home's writes are in place; a copy's go by diff: held while it is dirty (with a
        // twin, or flushed early), on their way until acked.
        self.diffs.per_page.contains_key(&page)
            || self.diffs.held.contains_key(&page)
            || (!self.is_home(page) && (self.dirty.contains(&page) || self.flushed.contains(&page)))
    }

    fn apply_atomic_grant(&mut self, info: &[u8]) {
        // The same notices, not counted in `grants_since_barrier`.
        self.apply_grant_notices(info)
    }

    fn stats(&self) -> ProtoStats {
        self.stats.clone()
    }

    fn set_ending(&mut self, ending: bool) {
        self.ending = ending;
    }

    fn apply_policy(&mut self, first: PageId, pages: u64, coherence: Coherence) {
        self.set_page_policy(first, pages, coherence)
    }
}

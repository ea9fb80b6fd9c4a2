//! `hlrc` glue for home-executed atomics (the operations themselves are in
//! `shared::atomic`): sending an atomic to the page's home, executing it there as a write of
//! the home, its reply and redirect, and an atomic's value observed into a local copy.
//!
//! Owns: `atomics_out`, `atomic_infos`. Must not touch: the operations' semantics.

use super::msg::Msg;
use super::state::{Deferred, Held};
use super::Hlrc;
use crate::Action;
use crate::AtomicCall;
use crate::ProtoError;
use squall_core::NodeId;
use squall_core::PageId;
use squall_core::PageMemory;

impl<M: PageMemory> Hlrc<M> {
    pub(super) fn start_atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        let Some(home) = self.resolve(
            page,
            Deferred::Atomic {
                offset,
                call: call.clone(),
                token,
            },
        )?
        else {
            return Ok(());
        };
        if home.node == self.me {
            if self.hold_for_recall(
                page,
                Held::LocalAtomic {
                    offset,
                    call: call.clone(),
                    token,
                },
            ) {
                return Ok(());
            }
            let me = self.me;
            let (old, infos) = self.home_atomic(page, offset, &call, me);
            self.actions
                .push_back(Action::AtomicDone { token, old, infos });
        } else {
            self.atomics_out.insert(token, (page, offset, call.clone()));
            self.send(
                home.node,
                Msg::Atomic {
                    page,
                    offset: offset as u16,
                    call,
                    token,
                    epoch: home.epoch,
                },
            );
        }
        Ok(())
    }

    /// The home executes an atomic for `from`: its own write if the word changed (noticed at
    /// its next release). Returns the old value and, for an acquire, the location's infos.
    pub(super) fn home_atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: &AtomicCall,
        from: NodeId,
    ) -> (u64, Vec<Vec<u8>>) {
        let (old, changed, infos) = self.atomic_infos.exec(&self.mem, page, offset, call, from);
        if changed {
            self.dirty.insert(page);
            self.st(page).streak = None;
        }
        (old, infos)
    }
}

//! `hlrc` glue for home-executed atomics (the operations themselves are in
//! `shared::atomic`): sending an atomic to the page's home, executing it there as a write of
//! the home, its reply and redirect, and an atomic's value observed into a local copy.
//!
//! Owns: `atomics_out`, `atomic_infos`. Must not touch: the operations' semantics.

use super::msg::Msg;
use super::state::{Deferred, Held, HomeStatus};
use super::Hlrc;
use crate::shared::atomic::check_atomic;
use crate::shared::home::HomeRef;
use crate::{Action, AtomicCall, ProtoError};
use squall_core::{Access, NodeId, PageId, PageMemory, PAGE_SIZE};

impl<M: PageMemory> Hlrc<M> {
    /// `Protocol::observe_atomic`: put an atomic's result into this node's copy and twin.
    pub(super) fn observe_atomic_value(&mut self, page: PageId, offset: usize, value: &[u8]) {
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

    /// Home side: execute `from`'s atomic, or redirect or park it.
    pub(super) fn on_atomic(
        &mut self,
        from: NodeId,
        page: PageId,
        offset: u16,
        call: AtomicCall,
        token: u64,
        epoch: u32,
    ) -> Result<(), ProtoError> {
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
        Ok(())
    }

    /// The home executed this node's atomic `token`.
    pub(super) fn on_atomic_reply(
        &mut self,
        from: NodeId,
        token: u64,
        old: u64,
        infos: Vec<Vec<u8>>,
    ) -> Result<(), ProtoError> {
        if self.atomics_out.remove(&token).is_none() {
            return Err(ProtoError::Malformed {
                from,
                why: format!("reply to unknown atomic {token}"),
            });
        }
        self.actions
            .push_back(Action::AtomicDone { token, old, infos });
        Ok(())
    }

    /// The node an atomic went to is no longer the home: learn the new one and send it again.
    pub(super) fn on_atomic_redirect(
        &mut self,
        from: NodeId,
        page: PageId,
        token: u64,
        home: HomeRef,
    ) -> Result<(), ProtoError> {
        self.dir.learn(page, home);
        let (p, offset, call) =
            self.atomics_out
                .remove(&token)
                .ok_or_else(|| ProtoError::Unexpected {
                    from,
                    page,
                    why: format!("redirect of unknown atomic {token}"),
                })?;
        self.start_atomic(p, offset, call, token)
    }

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

//! Distributed queue locks: the node side (token, local queue, successor) and the manager side
//! (queue tail per lock).
//!
//! Owns: `lock`, `trylock`, `unlock`, `destroy_lock` and the lock messages. Must not touch:
//! condition, barrier or flag state (conditions re-acquire through `acquire`).
//!
//! The token of lock `l` starts on its manager `l % nodes`. A node with the token and no holder
//! keeps it (lazy release) until a successor is forwarded to it; only then does it call
//! `begin_release`, and after completion `grant_info(successor's acquire_info)`, and sends the
//! grant. The acquirer calls `apply_grant` before any of its threads takes the lock.
//!
//! `trylock` semantics: succeeds (`Outcome::Done`) iff the token is on this node, no thread of
//! this node holds it and no other node is waiting for it; otherwise it returns
//! `Outcome::Busy` at once without queueing the thread. A busy `trylock` on a node without the
//! token and without a request in flight also asks the manager for the token (one request, as
//! for `lock`), so that a later `trylock` on this node can succeed once the token arrived; a
//! token fetched this way stays on the node until another node asks for it.
use crate::core::{PendingRelease, SyncCore};
use crate::error::SyncError;
use crate::ids::Waiter;
use crate::message::Msg;
use crate::Outcome;
use squall_core::{Consistency, LockId, NodeId};
use std::collections::VecDeque;

/// This node's view of one lock.
#[derive(Debug, Default)]
pub(crate) struct NodeLock {
    /// The lock token is on this node.
    token: bool,
    /// The local thread holding the lock.
    holder: Option<Waiter>,
    /// Local threads waiting, in `lock` call order.
    queue: VecDeque<Waiter>,
    /// A request of this node is at the manager / on its way; a grant will come.
    requested: bool,
    /// The node to hand the token to next, with its `acquire_info`.
    next: Option<(NodeId, Vec<u8>)>,
    /// How many of `queue`'s first entries go before `next` (queued before its forward came).
    local_batch: usize,
    /// A release for handing the token to `next` is in progress.
    handing_off: bool,
    /// The token just arrived from another node and no thread has taken it yet.
    fresh: bool,
}

impl NodeLock {
    fn free_here(&self) -> bool {
        self.token && self.holder.is_none() && !self.handing_off && self.next.is_none()
    }
}

impl SyncCore {
    fn lock_state(&mut self, lock: u64) -> &mut NodeLock {
        let token = self.manager(lock) == self.me;
        self.locks.entry(lock).or_insert_with(|| NodeLock {
            token,
            ..NodeLock::default()
        })
    }

    /// Whether `waiter` holds `lock` on this node.
    pub fn holds(&self, lock: LockId, waiter: Waiter) -> bool {
        self.locks
            .get(&lock.0)
            .is_some_and(|l| l.holder == Some(waiter))
    }

    /// Acquire `lock` for `waiter`; woken with `Ok(Done)` once held. Locking a lock the waiter
    /// already holds is `SyncError::Deadlock` (error-checking mutex semantics).
    pub fn lock(&mut self, cons: &mut dyn Consistency, lock: LockId, waiter: Waiter) {
        if self.holds(lock, waiter) {
            let e = SyncError::Deadlock {
                node: self.me,
                lock,
                waiter,
            };
            self.wake(waiter, Err(e));
            return;
        }
        self.acquire(cons, lock.0, waiter);
    }

    /// Queue `waiter` for `lock` (also used by condition waits re-acquiring their lock).
    pub(crate) fn acquire(&mut self, cons: &mut dyn Consistency, lock: u64, waiter: Waiter) {
        let st = self.lock_state(lock);
        if st.free_here() {
            st.holder = Some(waiter);
            let fresh = std::mem::take(&mut st.fresh);
            self.count_acquire(fresh);
            self.wake_ok(waiter);
            return;
        }
        st.queue.push_back(waiter);
        if !st.token && !st.requested {
            self.send_lock_request(cons, lock);
        }
    }

    /// Take `lock` only if that needs no waiting (see the module doc for exact semantics).
    pub fn trylock(&mut self, cons: &mut dyn Consistency, lock: LockId, waiter: Waiter) {
        let st = self.lock_state(lock.0);
        if st.free_here() {
            st.holder = Some(waiter);
            let fresh = std::mem::take(&mut st.fresh);
            self.count_acquire(fresh);
            self.wake_ok(waiter);
            return;
        }
        let fetch = !st.token && !st.requested;
        self.stats.trylock_busy += 1;
        self.wake(waiter, Ok(Outcome::Busy));
        if fetch {
            self.send_lock_request(cons, lock.0);
        }
    }

    /// Release `lock` held by `waiter` (woken at once). Unlocking a lock the waiter does not
    /// hold is `SyncError::NotHolder`. No message is sent unless another node waits for it.
    pub fn unlock(&mut self, cons: &mut dyn Consistency, lock: LockId, waiter: Waiter) {
        if !self.holds(lock, waiter) {
            let e = SyncError::NotHolder {
                node: self.me,
                lock,
                waiter,
            };
            self.wake(waiter, Err(e));
            return;
        }
        self.wake_ok(waiter);
        self.release_lock(cons, lock.0);
    }

    /// Check that `lock` may be destroyed: no thread of this node holds it, waits for it, or
    /// waits on a condition bound to it (else `SyncError::LockInUse`). The token stays where it
    /// is, so the id may be used again.
    pub fn destroy_lock(&mut self, lock: LockId, waiter: Waiter) {
        let busy_lock = self
            .locks
            .get(&lock.0)
            .is_some_and(|l| l.holder.is_some() || !l.queue.is_empty());
        let busy_cond = self.conds.values().any(|c| c.uses_lock(lock.0));
        if busy_lock || busy_cond {
            let e = SyncError::LockInUse {
                node: self.me,
                lock,
                waiter,
            };
            self.wake(waiter, Err(e));
        } else {
            self.wake_ok(waiter);
        }
    }

    /// Drop the local holder of `lock` and let the next local thread or node have it.
    pub(crate) fn release_lock(&mut self, cons: &mut dyn Consistency, lock: u64) {
        self.lock_state(lock).holder = None;
        self.lock_progress(cons, lock);
    }

    fn count_acquire(&mut self, remote: bool) {
        if remote {
            self.stats.lock_acquires_remote += 1;
        } else {
            self.stats.lock_acquires_local += 1;
        }
    }

    /// The token is here and nobody holds it: serve the local batch, or hand it to the successor.
    fn lock_progress(&mut self, cons: &mut dyn Consistency, lock: u64) {
        let st = self.lock_state(lock);
        if !st.token || st.holder.is_some() || st.handing_off {
            return;
        }
        if st.next.is_some() && st.local_batch == 0 {
            st.handing_off = true;
            if self.begin_release(cons, PendingRelease::LockHandoff(lock)) {
                self.finish_handoff(cons, lock);
            }
        } else if let Some(w) = st.queue.pop_front() {
            st.local_batch = st.local_batch.saturating_sub(1);
            st.holder = Some(w);
            let fresh = std::mem::take(&mut st.fresh);
            self.count_acquire(fresh);
            self.wake_ok(w);
        }
    }

    /// The release before a hand-off completed: send the token to the successor.
    pub(crate) fn finish_handoff(&mut self, cons: &mut dyn Consistency, lock: u64) {
        let st = self.lock_state(lock);
        st.handing_off = false;
        let Some((to, acquirer_info)) = st.next.take() else {
            return;
        };
        st.token = false;
        st.fresh = false;
        st.local_batch = 0;
        let again = !st.queue.is_empty();
        let info = cons.grant_info(&acquirer_info);
        self.send(to, Msg::LockGrant { lock, info });
        if again {
            self.send_lock_request(cons, lock);
        }
    }

    fn send_lock_request(&mut self, cons: &mut dyn Consistency, lock: u64) {
        self.lock_state(lock).requested = true;
        let info = cons.acquire_info();
        let mgr = self.manager(lock);
        if mgr == self.me {
            // The manager's own request cannot be refused: this node is not the tail (it has
            // neither the token nor a request in flight).
            let me = self.me;
            if let Err(e) = self.mgr_lock_request(cons, lock, me, info) {
                self.internal_error(e);
            }
        } else {
            self.send(mgr, Msg::LockRequest { lock, info });
        }
    }

    /// Manager: `from` wants `lock`; append it to the queue and tell the previous tail.
    pub(crate) fn mgr_lock_request(
        &mut self,
        cons: &mut dyn Consistency,
        lock: u64,
        from: NodeId,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let me = self.me;
        let prev = *self.lock_tails.get(&lock).unwrap_or(&me);
        if prev == from {
            return Err(self.unexpected(
                from,
                format!("lock {lock}"),
                "the requester is already the last node in the lock's queue".into(),
            ));
        }
        self.lock_tails.insert(lock, from);
        if prev == me {
            self.on_lock_forward(cons, me, lock, from, info)
        } else {
            self.send(
                prev,
                Msg::LockForward {
                    lock,
                    requester: from,
                    info,
                },
            );
            Ok(())
        }
    }

    /// The manager says `requester` comes after this node for `lock`.
    pub(crate) fn on_lock_forward(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        lock: u64,
        requester: NodeId,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let me = self.me;
        let nodes = self.nodes;
        let st = self.lock_state(lock);
        let why = if requester == me || requester.0 >= nodes {
            Some(format!("cannot hand the lock to {requester}"))
        } else if st.next.is_some() {
            Some("a successor is already known".to_string())
        } else if !st.token && !st.requested {
            Some("this node neither has the token nor asked for it".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, LockId(lock).to_string(), why));
        }
        st.next = Some((requester, info));
        st.local_batch = st.queue.len();
        self.lock_progress(cons, lock);
        Ok(())
    }

    /// The lock token arrived.
    pub(crate) fn on_lock_grant(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        lock: u64,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let st = self.lock_state(lock);
        if st.token || !st.requested {
            return Err(self.unexpected(
                from,
                LockId(lock).to_string(),
                "a grant came but this node did not ask for the lock".into(),
            ));
        }
        st.token = true;
        st.requested = false;
        st.fresh = true;
        cons.apply_grant(&info);
        self.lock_progress(cons, lock);
        Ok(())
    }
}

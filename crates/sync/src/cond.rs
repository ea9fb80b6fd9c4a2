//! Condition variables bound to a lock, with Mesa semantics.
//!
//! Owns: `cond_wait`, `cond_signal`, `cond_broadcast`, `destroy_cond` and the condition
//! messages; the manager's FIFO of registered waiters. Must not touch: the lock protocol except
//! through `acquire` / `release_lock`.
//!
//! Semantics: `cond_wait(c, l, w)` requires `w` to hold `l`. The wait is first registered at the
//! condition's manager (`c % nodes`; a register/ack round trip when the manager is remote) while
//! `w` still holds `l`; only then is `l` released. So any thread that takes `l` afterwards and
//! signals is guaranteed to find `w` registered (no lost wake-up). A signal wakes the oldest
//! registered waiter of the whole job, a broadcast wakes every waiter registered before it; a
//! signal with no waiter does nothing. A woken waiter re-acquires `l` (queueing like `lock`)
//! and resumes with `Ok(Done)` once it holds `l` again — Mesa semantics: the condition may be
//! false again by then, so callers re-check it in a loop. Signal and broadcast never block
//! and need not hold the lock (but only signals by lock holders are ordered with waits).
use crate::core::SyncCore;
use crate::error::SyncError;
use crate::ids::{CondId, Waiter};
use crate::message::Msg;
use squall_core::{Consistency, LockId, NodeId};
use std::collections::VecDeque;

/// This node's waiters on one condition.
#[derive(Debug, Default)]
pub(crate) struct NodeCond {
    /// The lock the current waiters use.
    bound: Option<u64>,
    /// Local waiters in registration order; `true` once the manager acknowledged them.
    waiters: VecDeque<(Waiter, bool)>,
}

impl NodeCond {
    pub(crate) fn uses_lock(&self, lock: u64) -> bool {
        !self.waiters.is_empty() && self.bound == Some(lock)
    }
}

impl SyncCore {
    /// Wait on `cond`, releasing `lock` (held by `waiter`) and re-acquiring it after a signal.
    /// Errors: `NotHolder` if `waiter` does not hold `lock`; `CondLockMismatch` if other
    /// threads of this node wait on `cond` with another lock.
    pub fn cond_wait(
        &mut self,
        cons: &mut dyn Consistency,
        cond: CondId,
        lock: LockId,
        waiter: Waiter,
    ) {
        self.materialize(lock.0, waiter);
        if !self.holds(lock, waiter) {
            let e = SyncError::NotHolder {
                node: self.me,
                lock,
                waiter,
            };
            self.wake(waiter, Err(e));
            return;
        }
        let c = self.conds.entry(cond.0).or_default();
        if let Some(bound) = c.bound.filter(|b| !c.waiters.is_empty() && *b != lock.0) {
            let e = SyncError::CondLockMismatch {
                node: self.me,
                cond,
                lock,
                bound: LockId(bound),
                waiter,
            };
            self.wake(waiter, Err(e));
            return;
        }
        c.bound = Some(lock.0);
        c.waiters.push_back((waiter, false));
        let mgr = self.manager(cond.0);
        if mgr == self.me {
            let me = self.me;
            if let Err(e) = self.mgr_cond_register(cons, cond.0, me) {
                self.internal_error(e);
            }
        } else {
            self.send(mgr, Msg::CondRegister { cond: cond.0 });
        }
    }

    /// Wake the oldest waiter on `cond`, if any. `waiter` resumes at once.
    pub fn cond_signal(&mut self, cons: &mut dyn Consistency, cond: CondId, waiter: Waiter) {
        self.signal(cons, cond, waiter, false);
    }

    /// Wake every waiter currently registered on `cond`. `waiter` resumes at once.
    pub fn cond_broadcast(&mut self, cons: &mut dyn Consistency, cond: CondId, waiter: Waiter) {
        self.signal(cons, cond, waiter, true);
    }

    /// Check that `cond` may be destroyed: no thread of this node waits on it
    /// (else `SyncError::CondInUse`).
    pub fn destroy_cond(&mut self, cond: CondId, waiter: Waiter) {
        if self
            .conds
            .get(&cond.0)
            .is_some_and(|c| !c.waiters.is_empty())
        {
            let e = SyncError::CondInUse {
                node: self.me,
                cond,
                waiter,
            };
            self.wake(waiter, Err(e));
        } else {
            self.wake_ok(waiter);
        }
    }

    fn signal(&mut self, cons: &mut dyn Consistency, cond: CondId, waiter: Waiter, all: bool) {
        self.stats.cond_signals += 1;
        self.wake_ok(waiter);
        let mgr = self.manager(cond.0);
        if mgr == self.me {
            if let Err(e) = self.mgr_cond_signal(cons, cond.0, all) {
                self.internal_error(e);
            }
        } else {
            self.send(mgr, Msg::CondSignal { cond: cond.0, all });
        }
    }

    /// Manager: one more waiting thread on `from`.
    pub(crate) fn mgr_cond_register(
        &mut self,
        cons: &mut dyn Consistency,
        cond: u64,
        from: NodeId,
    ) -> Result<(), SyncError> {
        self.cond_queues.entry(cond).or_default().push_back(from);
        if from == self.me {
            let me = self.me;
            self.on_cond_registered(cons, me, cond)
        } else {
            self.send(from, Msg::CondRegistered { cond });
            Ok(())
        }
    }

    /// Manager: wake one / all registered waiters, one message per node.
    pub(crate) fn mgr_cond_signal(
        &mut self,
        cons: &mut dyn Consistency,
        cond: u64,
        all: bool,
    ) -> Result<(), SyncError> {
        let q = self.cond_queues.entry(cond).or_default();
        let n = if all { q.len() } else { q.len().min(1) };
        let mut per_node: Vec<(NodeId, u32)> = Vec::new();
        for node in q.drain(..n) {
            match per_node.iter_mut().find(|(m, _)| *m == node) {
                Some((_, c)) => *c += 1,
                None => per_node.push((node, 1)),
            }
        }
        let me = self.me;
        let mut local = None;
        for (node, count) in per_node {
            if node == me {
                local = Some(count);
            } else {
                self.send(node, Msg::CondWake { cond, count });
            }
        }
        match local {
            Some(count) => self.on_cond_wake(cons, me, cond, count),
            None => Ok(()),
        }
    }

    /// The manager recorded this node's oldest unacknowledged waiter: release its lock now.
    pub(crate) fn on_cond_registered(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        cond: u64,
    ) -> Result<(), SyncError> {
        let found = self.conds.get_mut(&cond).and_then(|c| {
            let lock = c.bound?;
            let entry = c.waiters.iter_mut().find(|(_, registered)| !registered)?;
            entry.1 = true;
            Some((lock, entry.0))
        });
        let Some((lock, waiter)) = found else {
            return Err(self.unexpected(
                from,
                CondId(cond).to_string(),
                "an acknowledgement came but no waiter of this node is unacknowledged".into(),
            ));
        };
        self.materialize(lock, waiter);
        if self.holds(LockId(lock), waiter) {
            self.release_lock(cons, lock);
        }
        Ok(())
    }

    /// The manager woke `count` of this node's waiters: they re-acquire their lock.
    pub(crate) fn on_cond_wake(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        cond: u64,
        count: u32,
    ) -> Result<(), SyncError> {
        let n = count as usize;
        let ok = self.conds.get(&cond).is_some_and(|c| {
            c.waiters.len() >= n && c.waiters.iter().take(n).all(|(_, registered)| *registered)
        });
        let lock = self.conds.get(&cond).and_then(|c| c.bound);
        let (true, Some(lock)) = (ok, lock) else {
            return Err(self.unexpected(
                from,
                CondId(cond).to_string(),
                format!("told to wake {count} waiters this node does not have"),
            ));
        };
        let woken: Vec<Waiter> = match self.conds.get_mut(&cond) {
            Some(c) => c.waiters.drain(..n).map(|(w, _)| w).collect(),
            None => Vec::new(),
        };
        for w in woken {
            self.stats.cond_waits += 1;
            self.acquire(cons, lock, w);
        }
        Ok(())
    }
}

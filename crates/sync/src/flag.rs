//! Flags: set / wait / clear, with waiters blocked on the service thread instead of spinning on
//! shared memory.
//!
//! Owns: `flag_set`, `flag_wait`, `flag_clear` and the flag messages; the manager's (`flag %
//! nodes`) set state and waiting nodes. Must not touch: locks, conditions, barriers.
//!
//! Setting is a release: the setter's node calls `begin_release`, then `grant_info(&[])`
//! ("everything this node knows"), and sends both to the manager, which keeps the info while the
//! flag stays set. A wait is an acquire: it completes when the flag is (or becomes) set; the
//! waiting node calls `apply_grant(info)` (skipped when the setter is the node itself, whose
//! threads already see its memory) before waking all of its waiters on that flag. One wait
//! message per node is in flight at a time. `flag_clear` resets the flag at the manager; waits
//! after it block until the next set (a clear from one node is ordered after that node's earlier
//! set; sets and clears by different nodes race as they would in memory).
use crate::core::{PendingRelease, SyncCore};
use crate::error::SyncError;
use crate::ids::{FlagId, Waiter};
use crate::message::Msg;
use squall_core::{Consistency, NodeId};

/// This node's waiters on one flag.
#[derive(Debug, Default)]
pub(crate) struct NodeFlag {
    waiters: Vec<Waiter>,
    /// A wait message (or local registration) is outstanding at the manager.
    asked: bool,
}

/// The manager's state of one flag.
#[derive(Debug, Default)]
pub(crate) struct MgrFlag {
    /// Set by this node, with its grant info.
    pub(crate) set: Option<(NodeId, Vec<u8>)>,
    /// Nodes waiting for the next set.
    waiting: Vec<NodeId>,
}

impl SyncCore {
    /// Set `flag` (a release); `waiter` resumes once the release is done and the set is sent.
    pub fn flag_set(&mut self, cons: &mut dyn Consistency, flag: FlagId, waiter: Waiter) {
        if self.begin_release(cons, PendingRelease::FlagSet(flag.0, waiter)) {
            self.finish_flag_set(cons, flag.0, waiter);
        }
    }

    /// Clear `flag`; `waiter` resumes at once.
    pub fn flag_clear(&mut self, flag: FlagId, waiter: Waiter) {
        let mgr = self.manager(flag.0);
        if mgr == self.me {
            self.flag_mgr.entry(flag.0).or_default().set = None;
        } else {
            self.send(mgr, Msg::FlagClear { flag: flag.0 });
        }
        self.wake_ok(waiter);
    }

    /// Wait until `flag` is set (an acquire); `waiter` resumes with `Ok(Done)`.
    pub fn flag_wait(&mut self, cons: &mut dyn Consistency, flag: FlagId, waiter: Waiter) {
        let f = self.flags.entry(flag.0).or_default();
        f.waiters.push(waiter);
        if f.asked {
            return;
        }
        f.asked = true;
        let mgr = self.manager(flag.0);
        if mgr == self.me {
            let me = self.me;
            self.mgr_flag_wait(cons, flag.0, me);
        } else {
            self.send(mgr, Msg::FlagWait { flag: flag.0 });
        }
    }

    pub(crate) fn finish_flag_set(
        &mut self,
        cons: &mut dyn Consistency,
        flag: u64,
        waiter: Waiter,
    ) {
        let info = cons.grant_info(&[]);
        let mgr = self.manager(flag);
        if mgr == self.me {
            let me = self.me;
            self.mgr_flag_set(cons, flag, me, info);
        } else {
            self.send(mgr, Msg::FlagSet { flag, info });
        }
        self.wake_ok(waiter);
    }

    /// Manager: the flag is set by `setter`; answer every waiting node.
    pub(crate) fn mgr_flag_set(
        &mut self,
        cons: &mut dyn Consistency,
        flag: u64,
        setter: NodeId,
        info: Vec<u8>,
    ) {
        let f = self.flag_mgr.entry(flag).or_default();
        f.set = Some((setter, info.clone()));
        let waiting = std::mem::take(&mut f.waiting);
        for n in waiting {
            self.flag_ready_to(cons, flag, n, setter, info.clone());
        }
    }

    /// Manager: `from` waits for the flag.
    pub(crate) fn mgr_flag_wait(&mut self, cons: &mut dyn Consistency, flag: u64, from: NodeId) {
        let f = self.flag_mgr.entry(flag).or_default();
        match f.set.clone() {
            Some((setter, info)) => self.flag_ready_to(cons, flag, from, setter, info),
            None => {
                if !f.waiting.contains(&from) {
                    f.waiting.push(from);
                }
            }
        }
    }

    fn flag_ready_to(
        &mut self,
        cons: &mut dyn Consistency,
        flag: u64,
        to: NodeId,
        setter: NodeId,
        info: Vec<u8>,
    ) {
        if to == self.me {
            if let Err(e) = self.on_flag_ready(cons, None, FlagId(flag), setter, info) {
                self.internal_error(e);
            }
        } else {
            self.send(to, Msg::FlagReady { flag, setter, info });
        }
    }

    /// The flag is set: apply the setter's info and wake this node's waiters on it.
    pub(crate) fn on_flag_ready(
        &mut self,
        cons: &mut dyn Consistency,
        from: Option<NodeId>,
        flag: FlagId,
        setter: NodeId,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let f = self.flags.entry(flag.0).or_default();
        if !f.asked {
            let from = from.unwrap_or(self.me);
            return Err(self.unexpected(
                from,
                flag.to_string(),
                "the flag is reported set but this node is not waiting for it".into(),
            ));
        }
        f.asked = false;
        let waiters = std::mem::take(&mut f.waiters);
        if setter != self.me {
            cons.apply_grant(&info);
        }
        self.stats.flag_waits += waiters.len() as u64;
        for w in waiters {
            self.wake_ok(w);
        }
        Ok(())
    }
}

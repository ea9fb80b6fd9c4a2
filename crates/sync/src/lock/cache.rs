//! The core's side of the node-local lock cache (see the lock module doc and `fast.rs`): what
//! goes into the cache, and taking it back when the core needs a lock.
//!
//! Owns: the `cached` flag of each lock and its agreement with the `FastLocks` table. Must
//! not touch: the lock queue, successors and grants (`lock.rs` decides those).
use crate::fast::{Install, Revoke};
use crate::ids::Waiter;
use crate::SyncCore;

impl SyncCore {
    /// `waiter` holds cached `lock` through the lock cache and calls the core about it (a
    /// slow unlock, a condition wait): the core takes the lock back with `waiter` as holder.
    pub(crate) fn materialize(&mut self, lock: u64, waiter: Waiter) {
        if let Some(st) = self.locks.get_mut(&lock) {
            if st.cached && self.fast.take_held(lock, waiter.0) {
                st.cached = false;
                st.holder = Some(waiter);
            }
        }
    }

    /// The core needs cached `lock` (a local waiter or a successor node): `true` once it is
    /// not cached (it was idle), `false` if a thread of this node holds it through the cache
    /// (flagged: its unlock comes through the core).
    pub(super) fn settle(&mut self, lock: u64) -> bool {
        match self.locks.get_mut(&lock) {
            Some(st) if st.cached => {
                if self.fast.revoke(lock) == Revoke::Gone {
                    st.cached = false;
                    true
                } else {
                    false
                }
            }
            _ => true,
        }
    }

    /// Uncache `lock` if it is cached idle (no flag if it is held).
    pub(super) fn try_uncache(&mut self, lock: u64) {
        if let Some(st) = self.locks.get_mut(&lock) {
            if st.cached && self.fast.try_revoke(lock) {
                st.cached = false;
            }
        }
    }

    /// The token of `lock` is here and nobody holds or wants it: put it in the lock cache,
    /// unless it arrived from another node and no thread took it yet (those acquires are
    /// counted by the core: remote, lent).
    pub(super) fn maybe_cache(&mut self, lock: u64) {
        if !self.fast_on {
            return;
        }
        let Some(st) = self.locks.get_mut(&lock) else {
            return;
        };
        if !st.free_here() || !st.queue.is_empty() || st.fresh || st.lent_in {
            return;
        }
        match self.fast.install(lock) {
            Install::Cached => st.cached = true,
            Install::Evicted(old) => {
                st.cached = true;
                if let Some(o) = self.locks.get_mut(&old) {
                    o.cached = false;
                }
            }
            Install::Full => {}
        }
    }

    /// A hand-off of `lock` begins its release: the tokens it may lend along that sit idle in
    /// the lock cache leave the cache now, so every later use of them goes through the core
    /// (and counts as an unlock after this release began: not lendable, see `lendable`).
    pub(super) fn uncache_lend_candidates(&mut self, lock: u64) {
        if self.nodes != 2 || self.read_ahead_max == 0 {
            return;
        }
        let Some(next) = self.locks.get(&lock).and_then(|s| s.next.as_ref()) else {
            return;
        };
        let ahead: Vec<u64> = next
            .read_ahead
            .ahead
            .iter()
            .take(self.read_ahead_max)
            .copied()
            .collect();
        let more = next.read_ahead.more > 0;
        for l in ahead {
            self.try_uncache(l);
        }
        if self.lender_order && more {
            let mut cur = lock;
            for _ in 0..2 * self.read_ahead_max {
                let Some(&n) = self.lock_after.get(&cur) else {
                    break;
                };
                if n == lock {
                    break;
                }
                cur = n;
                self.try_uncache(n);
            }
        }
    }
}

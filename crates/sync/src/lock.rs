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
//!
//! ## The lock cache (`fast.rs`)
//!
//! When the token is here and nobody holds or wants it (`lock_progress` finds nothing to do;
//! not for a token that arrived and no thread took yet, whose first acquire the core counts),
//! the core puts the lock in the node's [`FastLocks`](crate::FastLocks) table (`cached`): the
//! node's threads then take and release it there with one compare-and-swap each, never
//! calling the core. The core takes it back whenever it needs the lock: for a successor node
//! (`on_lock_forward` -> `lock_progress`), a thread queueing here (`acquire`), a `trylock`
//! through the core, or a lend. An idle cached lock is uncached at once; a held one is flagged
//! `WANTED`, its holder's fast unlock fails, and the holder's `unlock` through the core
//! (`materialize`: the core records it as holder) releases it as any unlock, so the hand-off's
//! release begins after every critical section run here. `holds`, `cond_wait` and
//! `destroy_lock` see holders in the cache. Lending: a cached token may have been used after
//! the release of a hand-off began, which the core cannot see, so the candidates of a
//! hand-off's lends are uncached when its release begins (later uses go through the core and
//! count as unlocks after it) and cached tokens are never lent.
//!
//! ## Cohort passes (hand the lock among the node's threads before it leaves)
//!
//! When the successor's forward comes, the threads already queued here go first
//! (`local_batch`). A thread of this node that queues later, while the lock is still held here,
//! may also go before the successor: each local release with such a thread queued hands the
//! lock to it (one wake, no message, no release: the node's threads share its copy of memory,
//! and the core's service lock orders the two critical sections), at most
//! `SyncCore::cohort_max` times per successor (default [`DEFAULT_LOCK_COHORT`]), so the
//! successor waits for at most that many extra critical sections (fairness). A hand-off between
//! nodes costs a release and a message on the critical path; a pass costs a thread wake-up.
//! `SyncStats::lock_cohort_passes` counts them. Threads taking the lock through the lock cache
//! are flagged off it once a successor is known (`settle`), so they queue here too.
//!
//! ## Lock read-ahead (lending idle tokens along with a grant; 2-node jobs)
//!
//! A node remembers, per lock, which lock its threads took right after it last time
//! (`lock_after`). A request for lock `x` carries its wishes (`ReadAhead`): `ahead`, the next
//! locks along that chain whose tokens this node neither has nor asked for, and `more`, how
//! many further tokens the holder may choose itself. Together they fill the window: 1, 2, 4,
//! ... up to `set_lock_read_ahead`, default 64, growing while lent tokens get used, halved by
//! each lent token that leaves unused, and none but an occasional probe of 1 while too few lent
//! tokens got used (see `READ_AHEAD_START`). Each `ahead` lock is marked `hint_pending` until
//! `x`'s grant arrives. The holder, when it grants `x`, also hands over the tokens of those
//! `ahead` locks that are idle on it (no holder, no local waiter, no successor, no hand-off,
//! and no unlock since the release of this hand-off began), then up to `more` idle tokens
//! along ITS OWN chain after `x` (lender-side order: in Water's first time step the requester
//! has not been past `x` yet but the holder has), listing them all in the grant's `lent`:
//!
//! ```text
//! A: lock(x)  --LockRequest{x, ahead=[y], more=1}-->  manager of x
//!             --LockForward{x, A, ahead=[y], more=1}-->  B
//! B: begin_release .. release done; grant_info(A's info); B's chain after x: z
//! B --LockGrant{x, lent=[y,z], info}--> A: apply_grant(info); x, y, z are here
//! A: lock(y), lock(z): local, no message
//! ```
//!
//! Consistency: the grant's `info` is taken after a release that began after B's last unlock
//! of every lent lock (asked for or chosen by B alike), so it covers every release of them; A
//! applies it before any thread takes one. Manager view: lending needs the manager's queue tail
//! of the lent lock `y` to become A. Only 2-node jobs lend, so the manager is B or A. If B
//! manages `y` (its tail is B since nobody is queued after B) it sets the tail to A; if A
//! manages it, A does so when the grant arrives (the tail is B then).
//!
//! Overtaken requests: a request A sent for a lent lock before the lend arrived crosses it; A
//! takes the lent token as its grant and B, which remembers `lent_to` until it gets the token
//! back, drops that request (B manages `y`) or its forward (A manages `y`) when it arrives.
//! Per-pair FIFO puts it before anything A sends after the lend, and A asks for a lock only
//! while its token is away, so until the token comes back to B every request of A for it
//! that B meets is one sent before the lend. For a lend A asked for, only a request sent
//! while `y` was `hint_pending` can cross it: such requests are marked `hinted` (and carry no
//! wishes of their own), and B drops only marked ones. For a lend B chose (`lent_unasked`) any
//! request of A can cross it, and B drops any; A forgets the wishes of a request it sees
//! overtaken (nobody will answer them). With more nodes a third node's request could be
//! forwarded to B while the lent token is on its way to A, and B may ask again before that
//! forward arrives; the manager cannot tell the two positions of B apart, so jobs of 3 or more
//! nodes do not lend.

use crate::core::{PendingRelease, SyncCore};
use crate::error::SyncError;
use crate::ids::Waiter;
use crate::message::{Msg, ReadAhead};
use crate::Outcome;
use squall_core::{Consistency, LockId, NodeId};
use std::collections::VecDeque;

mod cache;

/// Most tokens one grant lends along (the read-ahead window grows 1, 2, 4, ... up to this).
pub const DEFAULT_LOCK_READ_AHEAD: usize = 64;

/// Cohort bound: most local acquisitions that may go before a successor node already waiting,
/// beyond the threads queued before its forward came (see "Cohort passes" in the module doc).
pub const DEFAULT_LOCK_COHORT: u32 = 8;

/// Lent tokens taken in a row (misses halve the count) before requests hint at all; below it
/// only every [`READ_AHEAD_PROBE`]-th request hints one lock, to find a pattern. A node whose
/// lent tokens mostly go unused (threads taking locks in no stable order) so stops lending:
/// it keeps lending only while more than about 3 in 5 lent tokens get used.
const READ_AHEAD_START: usize = 3;

/// See [`READ_AHEAD_START`].
const READ_AHEAD_PROBE: u32 = 8;

/// The node to hand the token to next.
#[derive(Debug)]
struct Successor {
    node: NodeId,
    /// Its `acquire_info`.
    info: Vec<u8>,
    /// The tokens it would like lent along if idle here.
    read_ahead: ReadAhead,
}

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
    /// The node to hand the token to next.
    next: Option<Successor>,
    /// How many of `queue`'s first entries go before `next` (queued before its forward came).
    local_batch: usize,
    /// A release for handing the token to `next` is in progress.
    handing_off: bool,
    /// The token just arrived from another node and no thread has taken it yet.
    fresh: bool,
    /// The token arrived lent along with another lock's grant and no thread has taken it yet.
    lent_in: bool,
    /// This lock is in the `ahead` list of one of this node's unanswered requests.
    hint_pending: bool,
    /// This node lent the token to that node and has not had it back since: a request or
    /// forward of that node marked `hinted` was overtaken by the lend (dropped on arrival).
    lent_to: Option<NodeId>,
    /// The lend to `lent_to` was chosen by this node's own order (not asked for): any request
    /// or forward of that node for this lock was overtaken by it, hinted or not.
    lent_unasked: bool,
    /// Cohort passes since `next` was set (local acquisitions that went before it beyond
    /// `local_batch`; at most `SyncCore::cohort_max`).
    cohort_run: u32,
    /// `SyncCore::release_seq` at this lock's latest local unlock.
    last_release: u64,
    /// `SyncCore::release_seq` when the release of the current hand-off began.
    handoff_seq: u64,
    /// The idle token is in the node-local lock cache (`SyncCore::fast`): threads of this
    /// node take and release it there without the core, so `holder` is `None` and the cache
    /// knows the holder. Implies `token` and no hand-off in progress.
    cached: bool,
}

impl NodeLock {
    fn free_here(&self) -> bool {
        self.token
            && self.holder.is_none()
            && !self.cached
            && !self.handing_off
            && self.next.is_none()
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

    /// Whether `waiter` holds `lock` on this node (through the core or the lock cache).
    pub fn holds(&self, lock: LockId, waiter: Waiter) -> bool {
        self.locks.get(&lock.0).is_some_and(|l| {
            l.holder == Some(waiter) || (l.cached && self.fast.holder(lock.0) == Some(waiter.0))
        })
    }

    /// Lock read-ahead: lend at most `max` idle tokens along with a grant (0 disables; the
    /// default is [`DEFAULT_LOCK_READ_AHEAD`]). Only 2-node jobs lend (see the module doc).
    pub fn set_lock_read_ahead(&mut self, max: usize) {
        self.read_ahead_max = max;
    }

    /// Requests of this node whose read-ahead wishes are not answered yet (by their grant, or
    /// by the lend that overtook them). 0 whenever no lock request of this node is in flight.
    pub fn read_ahead_outstanding(&self) -> usize {
        self.hints_out.len()
    }

    /// Lender-side order (default on): this node's requests let the holder choose tokens to
    /// lend by the holder's own learned order when this node's order names too few
    /// (`ReadAhead::more`), and this node, as a holder, honours such requests of others.
    pub fn set_lock_lender_order(&mut self, on: bool) {
        self.lender_order = on;
    }

    /// Cohort bound: at most `max` local acquisitions go before a successor node already
    /// waiting for a lock held here, beyond the threads queued before its forward came (the
    /// default is [`DEFAULT_LOCK_COHORT`]; 0: strict FIFO between nodes).
    pub fn set_lock_cohort(&mut self, max: u32) {
        self.cohort_max = max;
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
        // Learn the order this node's threads take locks in (for read-ahead hints).
        if let Some(prev) = self.last_lock.insert(waiter, lock.0) {
            if prev != lock.0 {
                self.lock_after.insert(prev, lock.0);
            }
        }
        self.acquire(cons, lock.0, waiter);
    }

    /// Queue `waiter` for `lock` (also used by condition waits re-acquiring their lock).
    pub(crate) fn acquire(&mut self, cons: &mut dyn Consistency, lock: u64, waiter: Waiter) {
        self.lock_state(lock);
        self.settle(lock);
        let st = self.lock_state(lock);
        if st.free_here() {
            self.take_token(lock, waiter);
            return;
        }
        st.queue.push_back(waiter);
        if !st.token && !st.requested {
            self.send_lock_request(cons, lock);
        }
    }

    /// The token is here and free: `waiter` holds the lock now.
    fn take_token(&mut self, lock: u64, waiter: Waiter) {
        let st = self.lock_state(lock);
        st.holder = Some(waiter);
        let fresh = std::mem::take(&mut st.fresh);
        let lent = std::mem::take(&mut st.lent_in);
        if fresh {
            self.stats.lock_acquires_remote += 1;
        } else {
            self.stats.lock_acquires_local += 1;
        }
        if lent {
            self.stats.lock_acquires_lent += 1;
            self.read_ahead_streak = self.read_ahead_streak.saturating_add(1);
        }
        self.wake_ok(waiter);
    }

    /// Take `lock` only if that needs no waiting (see the module doc for exact semantics).
    pub fn trylock(&mut self, cons: &mut dyn Consistency, lock: LockId, waiter: Waiter) {
        self.lock_state(lock.0);
        self.try_uncache(lock.0);
        let st = self.lock_state(lock.0);
        if st.free_here() {
            self.take_token(lock.0, waiter);
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
        self.wake_ok(waiter);
        self.release_lock(cons, lock.0);
    }

    /// Check that `lock` may be destroyed: no thread of this node holds it, waits for it, or
    /// waits on a condition bound to it (else `SyncError::LockInUse`). The token stays where it
    /// is, so the id may be used again.
    pub fn destroy_lock(&mut self, lock: LockId, waiter: Waiter) {
        let busy_lock = self.locks.get(&lock.0).is_some_and(|l| {
            l.holder.is_some()
                || !l.queue.is_empty()
                || (l.cached && self.fast.holder(lock.0).is_some())
        });
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
        self.release_seq += 1;
        let seq = self.release_seq;
        let st = self.lock_state(lock);
        st.holder = None;
        st.last_release = seq;
        self.lock_progress(cons, lock);
    }

    /// The token is here and nobody holds it: serve the local batch, or hand it to the successor.
    fn lock_progress(&mut self, cons: &mut dyn Consistency, lock: u64) {
        let seq = self.release_seq;
        let st = self.lock_state(lock);
        if !st.token || st.holder.is_some() || st.handing_off {
            return;
        }
        if st.cached {
            if st.next.is_none() && st.queue.is_empty() {
                return;
            }
            if !self.settle(lock) {
                // A thread holds it through the cache: its unlock comes here (flagged).
                return;
            }
        }
        let cohort_max = self.cohort_max;
        let st = self.lock_state(lock);
        // A thread of this node queued after the successor's forward came may still go first
        // (a cohort pass: no message, no release), at most `cohort_max` times per successor.
        let cohort = st.next.is_some()
            && st.local_batch == 0
            && !st.queue.is_empty()
            && st.cohort_run < cohort_max;
        if cohort {
            st.cohort_run += 1;
            self.stats.lock_cohort_passes += 1;
            let st = self.lock_state(lock);
            if let Some(w) = st.queue.pop_front() {
                self.take_token(lock, w);
            }
            return;
        }
        let st = self.lock_state(lock);
        if st.next.is_some() && st.local_batch == 0 {
            st.handing_off = true;
            // Every unlock so far happened before this release began: its writes are covered.
            st.handoff_seq = seq;
            self.uncache_lend_candidates(lock);
            if self.begin_release(cons, PendingRelease::LockHandoff(lock)) {
                self.finish_handoff(cons, lock);
            }
        } else if let Some(w) = st.queue.pop_front() {
            st.local_batch = st.local_batch.saturating_sub(1);
            self.take_token(lock, w);
        } else {
            self.maybe_cache(lock);
        }
    }

    /// The release before a hand-off completed: send the token to the successor, lending the
    /// idle tokens of the locks it expects to take next.
    pub(crate) fn finish_handoff(&mut self, cons: &mut dyn Consistency, lock: u64) {
        let st = self.lock_state(lock);
        st.handing_off = false;
        let Some(next) = st.next.take() else {
            return;
        };
        let handoff_seq = st.handoff_seq;
        self.give_token(lock);
        let again = !self.lock_state(lock).queue.is_empty();
        let lent = self.choose_lends(lock, next.node, &next.read_ahead, handoff_seq);
        let info = cons.grant_info(&next.info);
        self.send(next.node, Msg::LockGrant { lock, lent, info });
        if again {
            self.send_lock_request(cons, lock);
        }
    }

    /// Lend along with the grant of `lock` to `to`: first the idle tokens of the requester's
    /// `ahead`, then up to `more` idle tokens this node's threads took after `lock` (by
    /// `lock_after`, the lender-side order). The lent tokens leave this node.
    fn choose_lends(
        &mut self,
        lock: u64,
        to: NodeId,
        wish: &ReadAhead,
        handoff_seq: u64,
    ) -> Vec<u64> {
        let mut lent = Vec::new();
        for &other in wish.ahead.iter().take(self.read_ahead_max) {
            if other != lock && self.lendable(other, to, handoff_seq) {
                self.lend(other, to, false);
                lent.push(other);
            }
        }
        let more = usize::from(wish.more).min(self.read_ahead_max.saturating_sub(lent.len()));
        if self.lender_order && more > 0 {
            let mut own = 0;
            let mut cur = lock;
            for _ in 0..2 * self.read_ahead_max {
                let Some(&n) = self.lock_after.get(&cur) else {
                    break;
                };
                if n == lock {
                    break;
                }
                cur = n;
                if wish.ahead.contains(&n) || lent.contains(&n) {
                    continue;
                }
                if self.lendable(n, to, handoff_seq) {
                    self.lend(n, to, true);
                    lent.push(n);
                    own += 1;
                    if own == more {
                        break;
                    }
                }
            }
            self.stats.lock_lends_unasked += own as u64;
        }
        self.stats.lock_lends += lent.len() as u64;
        lent
    }

    /// The idle token of `lock` goes to `to` along with a grant.
    fn lend(&mut self, lock: u64, to: NodeId, unasked: bool) {
        self.give_token(lock);
        let st = self.lock_state(lock);
        st.lent_to = Some(to);
        st.lent_unasked = unasked;
        if self.manager(lock) == self.me {
            // This node (the manager) was the queue's tail: now the borrower is.
            self.lock_tails.insert(lock, to);
        }
    }

    /// Whether the token of `lock` is on this node (also for locks it never touched).
    fn token_here(&self, lock: u64) -> bool {
        self.locks
            .get(&lock)
            .map_or(self.manager(lock) == self.me, |s| s.token)
    }

    /// The token of `lock` leaves this node.
    fn give_token(&mut self, lock: u64) {
        let st = self.lock_state(lock);
        debug_assert!(!st.cached, "the token of a cached lock leaves");
        st.token = false;
        st.fresh = false;
        st.local_batch = 0;
        if std::mem::take(&mut st.lent_in) {
            self.stats.lock_lends_unused += 1;
            self.read_ahead_streak /= 2;
        }
    }

    /// Whether the token of `lock` may go to `to` along with a grant whose release began at
    /// `handoff_seq`: it is here, idle, wanted by nobody, its last unlock is covered by that
    /// release, and the manager's queue stays right (see the module doc).
    fn lendable(&mut self, lock: u64, to: NodeId, handoff_seq: u64) -> bool {
        if self.nodes != 2 {
            return false;
        }
        let me = self.me;
        let mgr = self.manager(lock);
        let tail_here = *self.lock_tails.get(&lock).unwrap_or(&me) == me;
        let st = self.lock_state(lock);
        st.token
            && st.holder.is_none()
            && !st.cached
            && st.queue.is_empty()
            && !st.handing_off
            && st.next.is_none()
            && !st.requested
            && st.last_release <= handoff_seq
            && (if mgr == me { tail_here } else { mgr == to })
    }

    /// The read-ahead wishes of a request for `lock`: the locks this node expects to take
    /// after it (by the order its threads took them before), whose tokens are neither here nor
    /// asked for, marked `hint_pending`; and, if those are fewer than the window, how many
    /// more the holder may choose by its own order.
    fn read_ahead(&mut self, lock: u64) -> ReadAhead {
        if self.nodes != 2 || self.read_ahead_max == 0 {
            return ReadAhead::none();
        }
        // Probing (below the start) counts only requests that have a candidate to hint.
        let probing = self.read_ahead_streak < READ_AHEAD_START;
        let window = if probing {
            1
        } else {
            (self.read_ahead_streak - READ_AHEAD_START + 1)
                .checked_next_power_of_two()
                .unwrap_or(usize::MAX)
                .min(self.read_ahead_max)
        };
        let mut ahead = Vec::new();
        let mut cur = lock;
        for _ in 0..2 * self.read_ahead_max {
            let Some(&n) = self.lock_after.get(&cur) else {
                break;
            };
            if n == lock || ahead.contains(&n) {
                break;
            }
            cur = n;
            let st = self.lock_state(n);
            if !st.token && !st.requested && !st.hint_pending {
                ahead.push(n);
                if ahead.len() == window {
                    break;
                }
            }
        }
        let mut more = if self.lender_order {
            window.saturating_sub(ahead.len())
        } else {
            0
        };
        if probing && (!ahead.is_empty() || more > 0) {
            self.read_ahead_probe = self.read_ahead_probe.wrapping_add(1);
            if self.read_ahead_probe % READ_AHEAD_PROBE != 1 {
                ahead.clear();
                more = 0;
            }
        }
        for &n in &ahead {
            self.lock_state(n).hint_pending = true;
        }
        let wish = ReadAhead {
            hinted: false,
            ahead,
            more: u16::try_from(more).unwrap_or(u16::MAX),
        };
        if !wish.ahead.is_empty() || wish.more > 0 {
            self.hints_out.insert(lock, wish.clone());
        }
        wish
    }

    fn send_lock_request(&mut self, cons: &mut dyn Consistency, lock: u64) {
        let st = self.lock_state(lock);
        st.requested = true;
        // A request for a lock this node hinted at may be overtaken by a lend: it is marked,
        // and carries no hints of its own (if it is dropped, nobody answers them).
        let read_ahead = if st.hint_pending {
            ReadAhead {
                hinted: true,
                ..ReadAhead::none()
            }
        } else {
            self.read_ahead(lock)
        };
        let info = cons.acquire_info();
        let mgr = self.manager(lock);
        if mgr == self.me {
            // The manager's own request cannot be refused: this node is not the tail (it has
            // neither the token nor a request in flight).
            let me = self.me;
            if let Err(e) = self.mgr_lock_request(cons, lock, me, read_ahead, info) {
                self.internal_error(e);
            }
        } else {
            self.send(
                mgr,
                Msg::LockRequest {
                    lock,
                    read_ahead,
                    info,
                },
            );
        }
    }

    /// Manager: `from` wants `lock`; append it to the queue and tell the previous tail.
    pub(crate) fn mgr_lock_request(
        &mut self,
        cons: &mut dyn Consistency,
        lock: u64,
        from: NodeId,
        read_ahead: ReadAhead,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let me = self.me;
        if from != me && self.overtaken(lock, from, read_ahead.hinted) {
            // Overtaken by the token this node lent to `from`: it took that as its grant.
            return Ok(());
        }
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
            self.on_lock_forward(cons, me, lock, from, read_ahead, info)
        } else {
            self.send(
                prev,
                Msg::LockForward {
                    lock,
                    requester: from,
                    read_ahead,
                    info,
                },
            );
            Ok(())
        }
    }

    /// Whether a request (or its forward) of `from` for `lock` was overtaken by the token this
    /// node lent to `from` (which took the lend as its grant): per-pair FIFO puts such a request
    /// before anything `from` sends after the lend arrived, so while the token has not come
    /// back, a request of `from` is the overtaken one if it could have been: marked `hinted`
    /// (the lend was asked for) or the lend was unasked (then any request of `from` could be).
    /// An overtaken request is consumed (counted, `lent_to` cleared).
    fn overtaken(&mut self, lock: u64, from: NodeId, hinted: bool) -> bool {
        let st = self.lock_state(lock);
        if st.lent_to == Some(from) && !st.token && (hinted || st.lent_unasked) {
            st.lent_to = None;
            st.lent_unasked = false;
            self.stats.lock_requests_overtaken += 1;
            true
        } else {
            false
        }
    }

    /// The manager says `requester` comes after this node for `lock`.
    pub(crate) fn on_lock_forward(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        lock: u64,
        requester: NodeId,
        read_ahead: ReadAhead,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let me = self.me;
        let nodes = self.nodes;
        if requester != me && self.overtaken(lock, requester, read_ahead.hinted) {
            // The manager forwarded a request that the token this node lent to `requester`
            // overtook: nothing to hand over.
            return Ok(());
        }
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
        st.next = Some(Successor {
            node: requester,
            info,
            read_ahead,
        });
        st.local_batch = st.queue.len();
        st.cohort_run = 0;
        self.lock_progress(cons, lock);
        Ok(())
    }

    /// The lock token arrived, with the tokens lent along.
    pub(crate) fn on_lock_grant(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        lock: u64,
        lent: Vec<u64>,
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
        let none = ReadAhead::none();
        let wish = self.hints_out.get(&lock).unwrap_or(&none);
        let mut unasked = 0u16;
        for (i, l) in lent.iter().enumerate() {
            let asked = wish.ahead.contains(l) || {
                unasked += 1;
                unasked <= wish.more
            };
            let ok = l != &lock && asked && !lent[..i].contains(l) && !self.token_here(*l);
            if !ok {
                return Err(self.unexpected(
                    from,
                    LockId(lock).to_string(),
                    format!(
                        "the grant lends {} which this node did not ask for",
                        LockId(*l)
                    ),
                ));
            }
        }
        self.forget_hints(lock);
        let st = self.lock_state(lock);
        st.token = true;
        st.requested = false;
        st.fresh = true;
        st.lent_to = None;
        cons.apply_grant(&info);
        let me = self.me;
        for &l in &lent {
            if self.lock_state(l).requested {
                // A request of ours for it was overtaken: this is its grant, and the request
                // is dropped where it meets the lender, so nobody answers its own wishes.
                self.forget_hints(l);
            }
            let st = self.lock_state(l);
            st.requested = false;
            st.token = true;
            st.lent_in = true;
            st.lent_to = None;
            if self.manager(l) == me && self.lock_tails.get(&l).is_some_and(|&t| t == from) {
                self.lock_tails.insert(l, me);
            }
        }
        self.stats.lock_lends_received += lent.len() as u64;
        self.lock_progress(cons, lock);
        for l in lent {
            self.lock_progress(cons, l);
        }
        Ok(())
    }

    /// The request for `lock` is answered (or dropped): its hinted locks are free to hint again.
    fn forget_hints(&mut self, lock: u64) {
        if let Some(wish) = self.hints_out.remove(&lock) {
            for l in wish.ahead {
                self.lock_state(l).hint_pending = false;
            }
        }
    }
}

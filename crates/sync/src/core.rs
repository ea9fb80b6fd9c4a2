//! `SyncCore`: the per-node state machine that the lock, condition, barrier and flag modules
//! extend; message dispatch, release-token bookkeeping and the action queue.
//!
//! Owns: the action queue, statistics, release tokens, and dispatch of decoded messages.
//! Must not touch: sockets, clocks, threads; the meaning of consistency bytes.
use crate::barrier::{MgrBarrier, NodeBarrier};
use crate::cond::NodeCond;
use crate::error::SyncError;
use crate::fast::FastLocks;
use crate::flag::{MgrFlag, NodeFlag};
use crate::ids::{FlagId, Waiter};
use crate::lock::NodeLock;
use crate::message::{Msg, ReadAhead};
use crate::stats::SyncStats;
use crate::{manager_of, Action, Outcome};
use squall_core::{Consistency, NodeId};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// What a release started with `Consistency::begin_release(token)` was for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PendingRelease {
    /// The lock token leaves this node once the release is complete.
    LockHandoff(u64),
    /// This node's barrier arrival, eager count + info, or collect answer is sent once the
    /// release is complete.
    Barrier(u64),
    /// The flag is set once the release is complete; then `waiter` resumes.
    FlagSet(u64, Waiter),
}

/// One node's synchronization core. See the crate documentation for the contract.
///
/// Locks: a distributed queue lock per `LockId` whose manager (`manager_of`) keeps only the
/// queue's tail node. A request goes to the manager, which forwards it to the previous tail;
/// that node grants the token directly to the requester when its threads are done
/// (request → forward → grant: at most 3 messages per remote acquire, and none for the unlock;
/// none at all when the token is already on this node and nobody else asked for it).
/// Fairness: nodes are served in the order the manager received their requests (FIFO across
/// nodes); on one node threads are served in the order they called `lock`. When a successor
/// node is known, the threads that were already queued on this node when the successor's
/// forward arrived are served first, then the token leaves and later local threads queue again
/// at the manager (so no node can starve another).
#[derive(Debug)]
pub struct SyncCore {
    pub(crate) me: NodeId,
    pub(crate) nodes: u16,
    actions: VecDeque<Action>,
    pub(crate) stats: SyncStats,
    next_token: u64,
    pub(crate) releases: HashMap<u64, PendingRelease>,
    pub(crate) locks: HashMap<u64, NodeLock>,
    /// Manager side: the tail node of each managed lock's queue.
    pub(crate) lock_tails: HashMap<u64, NodeId>,
    pub(crate) conds: HashMap<u64, NodeCond>,
    /// Manager side: one entry per registered waiting thread, in registration order.
    pub(crate) cond_queues: HashMap<u64, VecDeque<NodeId>>,
    pub(crate) barriers: HashMap<u64, NodeBarrier>,
    pub(crate) barrier_mgr: HashMap<u64, MgrBarrier>,
    pub(crate) flags: HashMap<u64, NodeFlag>,
    pub(crate) flag_mgr: HashMap<u64, MgrFlag>,
    /// Lock read-ahead: the lock this node's threads took right after each lock, last time.
    pub(crate) lock_after: HashMap<u64, u64>,
    /// The lock each thread of this node locked last.
    pub(crate) last_lock: HashMap<Waiter, u64>,
    /// The read-ahead wishes of each unanswered request of this node, by requested lock.
    pub(crate) hints_out: HashMap<u64, ReadAhead>,
    /// Local unlocks so far (orders unlocks against the releases of hand-offs).
    pub(crate) release_seq: u64,
    /// Most tokens lent along with one grant (0: no read-ahead).
    pub(crate) read_ahead_max: usize,
    /// Lent tokens taken since the last one that left unused (halved by each such miss):
    /// the read-ahead window is the next power of two above it.
    pub(crate) read_ahead_streak: usize,
    /// Requests made while the streak was below the start (every few of them probe).
    pub(crate) read_ahead_probe: u32,
    /// Lender-side order: requests may let the holder choose tokens by its own order.
    pub(crate) lender_order: bool,
    /// Cohort bound: most local acquisitions that may go before a waiting successor node
    /// beyond the local batch (0: strict FIFO between nodes and threads).
    pub(crate) cohort_max: u32,
    /// Total-count barriers: most participants a node predicts (None: no cap; 0: no eager
    /// infos, every episode uses the collect round).
    pub(crate) barrier_eager_cap: Option<u32>,
    /// The node-local lock cache (see `fast.rs`): idle tokens this node's threads take and
    /// release without the core.
    pub(crate) fast: Arc<FastLocks>,
    /// Whether idle tokens go into `fast` (on by default).
    pub(crate) fast_on: bool,
}

impl SyncCore {
    /// The core of node `me` in a job of `nodes` nodes (`me.0 < nodes`). Every node of the job
    /// must create its core with the same `nodes`: managers are `id % nodes`.
    pub fn new(me: NodeId, nodes: u16) -> Self {
        SyncCore {
            me,
            nodes: nodes.max(1),
            actions: VecDeque::new(),
            stats: SyncStats::default(),
            next_token: 1,
            releases: HashMap::new(),
            locks: HashMap::new(),
            lock_tails: HashMap::new(),
            conds: HashMap::new(),
            cond_queues: HashMap::new(),
            barriers: HashMap::new(),
            barrier_mgr: HashMap::new(),
            flags: HashMap::new(),
            flag_mgr: HashMap::new(),
            lock_after: HashMap::new(),
            last_lock: HashMap::new(),
            hints_out: HashMap::new(),
            release_seq: 0,
            read_ahead_max: crate::lock::DEFAULT_LOCK_READ_AHEAD,
            read_ahead_streak: 0,
            read_ahead_probe: 0,
            lender_order: true,
            cohort_max: crate::lock::DEFAULT_LOCK_COHORT,
            barrier_eager_cap: None,
            fast: Arc::new(FastLocks::default()),
            fast_on: true,
        }
    }

    /// The node-local lock cache, for the node's threads: `FastLocks::try_lock` /
    /// `try_unlock` before calling `lock` / `unlock` (see the lock module doc).
    pub fn fast_locks(&self) -> Arc<FastLocks> {
        self.fast.clone()
    }

    /// Turn the node-local lock cache on (the default) or off (every acquire goes through the
    /// core). Takes effect for locks cached from now on.
    pub fn set_lock_cache(&mut self, on: bool) {
        self.fast_on = on;
    }

    /// Total-count barriers: cap the participants this node predicts per episode (`None`, the
    /// default: its threads counted in the previous episode; `Some(0)`: never send an eager
    /// count + info, always the collect round; `Some(k)`: predict at most k, so a node with
    /// more threads reports the others late and is collected again, for tests).
    pub fn set_barrier_eager_cap(&mut self, cap: Option<u32>) {
        self.barrier_eager_cap = cap;
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.me
    }

    /// Number of nodes in the job.
    pub fn nodes(&self) -> u16 {
        self.nodes
    }

    /// Counters so far (without `lock_acquires_local_fast`, which [`SyncCore::stats_now`]
    /// adds).
    pub fn stats(&self) -> &SyncStats {
        &self.stats
    }

    /// Counters so far, with the fast acquires of the lock cache counted in.
    /// Lock acquisitions so far whose token came from another node (the profile's transfers).
    pub fn remote_acquires(&self) -> u64 {
        self.stats.lock_acquires_remote
    }

    pub fn stats_now(&self) -> SyncStats {
        let mut s = self.stats.clone();
        s.lock_acquires_local_fast = self.fast.fast_acquires();
        s
    }

    /// Next action, or `None` when there is nothing to do until the next input.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// A message another node's SyncCore sent. Errors name the sender; the core's state is
    /// unchanged by a message that is malformed or that it cannot accept.
    pub fn handle_message(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        msg: &[u8],
    ) -> Result<(), SyncError> {
        if from.0 >= self.nodes || from == self.me {
            return Err(SyncError::Malformed {
                from,
                why: format!(
                    "sender is not another node of this job of {} nodes ({} is this node)",
                    self.nodes, self.me
                ),
            });
        }
        match Msg::decode(from, msg)? {
            Msg::LockRequest {
                lock,
                read_ahead,
                info,
            } => {
                self.expect_manager(from, lock, "lock")?;
                self.mgr_lock_request(cons, lock, from, read_ahead, info)
            }
            Msg::LockForward {
                lock,
                requester,
                read_ahead,
                info,
            } => self.on_lock_forward(cons, from, lock, requester, read_ahead, info),
            Msg::LockGrant { lock, lent, info } => self.on_lock_grant(cons, from, lock, lent, info),
            Msg::CondRegister { cond } => {
                self.expect_manager(from, cond, "condition")?;
                self.mgr_cond_register(cons, cond, from)
            }
            Msg::CondRegistered { cond } => self.on_cond_registered(cons, from, cond),
            Msg::CondSignal { cond, all } => {
                self.expect_manager(from, cond, "condition")?;
                self.mgr_cond_signal(cons, cond, all)
            }
            Msg::CondWake { cond, count } => self.on_cond_wake(cons, from, cond, count),
            Msg::BarrierArrive {
                barrier,
                epoch,
                hops,
                infos,
            } => self.on_tree_arrive(cons, from, barrier, epoch, hops, infos),
            Msg::BarrierCount {
                barrier,
                epoch,
                total,
                count,
                late,
            } => {
                self.expect_manager(from, barrier, "barrier")?;
                if late {
                    self.mgr_barrier_late(cons, from, barrier, epoch, total, count)
                } else {
                    self.mgr_barrier_count(cons, from, barrier, epoch, total, count)
                }
            }
            Msg::BarrierEager {
                barrier,
                epoch,
                total,
                count,
                info,
            } => {
                self.expect_manager(from, barrier, "barrier")?;
                self.mgr_barrier_eager(cons, from, barrier, epoch, total, count, info)
            }
            Msg::BarrierCollect { barrier, epoch } => {
                self.on_barrier_collect(cons, from, barrier, epoch)
            }
            Msg::BarrierInfo {
                barrier,
                epoch,
                info,
            } => {
                self.expect_manager(from, barrier, "barrier")?;
                self.mgr_barrier_info(cons, from, barrier, epoch, info)
            }
            Msg::BarrierDepart {
                barrier,
                epoch,
                serial,
                counted,
                hops,
                infos,
            } => self.on_barrier_depart(cons, from, barrier, epoch, serial, counted, hops, infos),
            Msg::FlagSet { flag, info } => {
                self.expect_manager(from, flag, "flag")?;
                self.mgr_flag_set(cons, flag, from, info);
                Ok(())
            }
            Msg::FlagClear { flag } => {
                self.expect_manager(from, flag, "flag")?;
                self.flag_mgr.entry(flag).or_default().set = None;
                Ok(())
            }
            Msg::FlagWait { flag } => {
                self.expect_manager(from, flag, "flag")?;
                self.mgr_flag_wait(cons, flag, from);
                Ok(())
            }
            Msg::FlagReady { flag, setter, info } => {
                self.on_flag_ready(cons, Some(from), FlagId(flag), setter, info)
            }
        }
    }

    /// The coherence protocol completed the release this core started with
    /// `begin_release(token)` (which had returned `false`). Tokens this core chooses count up
    /// from 1 and never have the top bit set, so a driver may use that bit for its own
    /// releases. An unknown token is `SyncError::UnknownRelease`.
    pub fn release_done(
        &mut self,
        cons: &mut dyn Consistency,
        token: u64,
    ) -> Result<(), SyncError> {
        match self.releases.remove(&token) {
            None => Err(SyncError::UnknownRelease {
                node: self.me,
                token,
            }),
            Some(PendingRelease::LockHandoff(lock)) => {
                self.finish_handoff(cons, lock);
                Ok(())
            }
            Some(PendingRelease::Barrier(b)) => {
                self.finish_barrier_release(cons, b);
                Ok(())
            }
            Some(PendingRelease::FlagSet(flag, waiter)) => {
                self.finish_flag_set(cons, flag, waiter);
                Ok(())
            }
        }
    }

    /// Start a release for `what`; returns `true` if it completed at once (the caller then
    /// finishes the operation itself), `false` if `release_done` will report it.
    pub(crate) fn begin_release(
        &mut self,
        cons: &mut dyn Consistency,
        what: PendingRelease,
    ) -> bool {
        let token = self.next_token;
        self.next_token += 1;
        if cons.begin_release(token) {
            true
        } else {
            self.releases.insert(token, what);
            false
        }
    }

    pub(crate) fn manager(&self, id: u64) -> NodeId {
        manager_of(id, self.nodes)
    }

    fn expect_manager(&self, from: NodeId, id: u64, what: &str) -> Result<(), SyncError> {
        if self.manager(id) == self.me {
            Ok(())
        } else {
            Err(self.unexpected(
                from,
                format!("{what} {id}"),
                format!("this node is not its manager ({} is)", self.manager(id)),
            ))
        }
    }

    pub(crate) fn unexpected(&self, from: NodeId, what: String, why: String) -> SyncError {
        SyncError::Unexpected {
            node: self.me,
            from,
            what,
            why,
        }
    }

    pub(crate) fn send(&mut self, to: NodeId, msg: Msg) {
        if to == self.me || to.0 >= self.nodes {
            let e = self.unexpected(
                self.me,
                msg.kind_name().to_string(),
                format!("this node was about to send it to {to}"),
            );
            self.internal_error(e);
            return;
        }
        let bytes = msg.encode();
        self.stats.messages_sent[msg.kind()] += 1;
        self.stats.bytes_sent += bytes.len() as u64;
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    pub(crate) fn wake(&mut self, waiter: Waiter, result: Result<Outcome, SyncError>) {
        self.actions.push_back(Action::Wake { waiter, result });
    }

    /// A step on this node's own behalf was refused: only possible after a peer sent messages
    /// that contradict the protocol. Reported to the driver, which should end the job.
    pub(crate) fn internal_error(&mut self, e: SyncError) {
        self.actions.push_back(Action::ProtocolError { error: e });
    }

    pub(crate) fn wake_ok(&mut self, waiter: Waiter) {
        self.wake(waiter, Ok(Outcome::Done));
    }
}

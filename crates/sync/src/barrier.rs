//! Barriers across all threads of all nodes: local gathering, one arrival per node, one
//! departure per node carrying everyone's consistency information.
//!
//! Owns: `barrier` and the barrier messages; the node's episode state and, on the manager
//! (`barrier % nodes`), the total-count episode's arrivals. Must not touch: locks, conditions,
//! flags; the tree of per-node episodes (`tree.rs`).
//!
//! Per-node mode (`BarrierCount::PerNode`): when this node's `local` threads have arrived, the
//! node calls `begin_release`, then `barrier_info()`, and its info goes up a binomial tree
//! rooted at the manager (`tree.rs`), merged on the way when the protocol merges; the root
//! sends one departure with the (merged) infos to every other node: 2(N−1) messages and
//! ⌈log2 N⌉+1 one-way hops per episode. Every node calls `apply_barrier(&all)` before waking
//! its threads. In both modes exactly one thread of the job is woken with `Outcome::Serial`.
//! Total mode stays flat (2 hops in the steady state, 4 with a collect round); its departure
//! carries the infos merged into one when the protocol merges.
//!
//! Total mode (`BarrierCount::Total`), message sequence. Each node predicts its participants
//! in an episode: the number of its threads the previous departure counted (`predict`; 0 in
//! the first episode or when it had none).
//! - Without a (reached) prediction, each arriving thread is counted at the manager at once
//!   (`BarrierCount`, none on the manager node). With prediction p > 0, the first p−1 threads
//!   are counted that way; when the p-th arrives the node starts its release at once and, when
//!   it completes, sends ONE `BarrierEager` (its uncounted threads + its info). Steady SPMD
//!   with one thread per node: one eager message and one departure per non-manager node.
//! - The manager records counts and infos. When `total` threads are counted it sends
//!   `BarrierCollect` only to nodes without a fresh info (no participants, no prediction,
//!   prediction not reached, or stale); they release and answer `BarrierInfo`. When the count
//!   is `total`, every info is fresh and none is awaited, it departs: `BarrierDepart` with all
//!   infos and, per node, `counted` = how many of that node's threads the episode counted.
//! - Late threads: a thread arriving after its node's eager release began cannot tell whether
//!   it belongs to this episode (prediction too low) or the next. Reported as `BarrierCount
//!   { late: true }` right after the eager message (never before it: the info was taken after
//!   the release began, so it may miss the late thread's writes). The manager counts late
//!   threads in its open episode while it is not full (that node's info is then stale: it is
//!   collected again once the count is full, and the node, in the eager-sent state, releases
//!   again and answers), else (full, or departed already) in the next episode (`overflow`).
//! - A node wakes the `counted` oldest of its reported threads (the first one with `Serial`
//!   if the departure names it) and keeps the rest, already reported, for the next episode.
//!   Threads arriving after the node got a collect belong to the next episode (the count is
//!   full) and are replayed there. On the manager node, its own eager count is taken at once
//!   and the manager awaits its info instead of collecting it.
//!
//! Why this is exact (total mode). (1) Every thread is reported exactly once (a count, an eager
//! message, a late count, or its replay after a departure), in the node's arrival order,
//! over one FIFO channel; the manager adds each reported thread to exactly one episode, in
//! report order: the open one while it is not full, else the next (a late count tagged e
//! reaches the manager at e or e+1 only: e+1 cannot depart before this node's info for e+1,
//! sent after it got e's departure, after the late count). So per node the manager counts
//! consecutive runs of its report sequence, and `counted` tells the node the length of the
//! run: it wakes exactly the threads the manager put into episode e, none of a later one, and
//! the carried rest are counted in later episodes, never twice, never lost. (2) A departure
//! needs `total` counted threads and a fresh info from every node: an info is fresh when it
//! was taken after the release that followed every arrival counted in e on that node (late
//! counts mark it stale; collect answers and eager infos clear that). (3) The manager names
//! one serial node with counted > 0, which wakes its first counted thread with `Serial`; the
//! others wake none with it. (4) `ZeroParticipants` and `BarrierMismatch` (different counts
//! on one node in one episode) are checked at arrival as before; a non-late count (or eager
//! count) that would exceed `total` is refused ("more than total": an `Unexpected` error
//! from a remote node, a `BarrierMismatch` for a thread of the manager node). A thread that
//! does not take part in an episode may still arrive early for the next one: as before it
//! belongs there only if it arrives after its node left the previous episode or, new, after
//! its node sent its eager info.
use crate::core::{PendingRelease, SyncCore};
use crate::error::SyncError;
use crate::ids::{BarrierId, Waiter};
use crate::message::Msg;
use crate::tree::UpArrival;
use crate::{BarrierCount, Outcome};
use squall_core::{Consistency, NodeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    /// Threads arrive; nothing sent for the episode's release yet.
    #[default]
    Gathering,
    /// `begin_release` called for the arrival (per-node mode) or the collect answer (total
    /// mode), waiting for its completion.
    Releasing,
    /// Arrival / collect answer sent, waiting for the departure.
    Sent,
    /// Total mode: the predicted participants arrived; `begin_release` called for the eager
    /// count + info, waiting for its completion.
    EagerReleasing,
    /// Total mode: eager count + info sent, waiting for the departure (or for a collect, when
    /// a late thread made the info stale).
    EagerSent,
}

/// This node's state of one barrier.
#[derive(Debug, Default)]
pub(crate) struct NodeBarrier {
    /// Episodes completed on this node.
    pub(crate) epoch: u64,
    /// The count the current episode's local threads passed.
    pub(crate) mode: Option<BarrierCount>,
    /// The current episode's threads in arrival order. Total mode: in the order they were
    /// reported to the manager; threads a departure did not count stay at the front.
    waiters: Vec<Waiter>,
    /// Total mode: how many of `waiters` the manager was told about (counted or on the way).
    reported: usize,
    /// Total mode: `waiters.len()` when the eager release began (the eager message reports
    /// the threads up to there; later ones are reported late).
    eager_upto: usize,
    /// Total mode: participants predicted for this episode (this node's threads counted in
    /// the previous episode; 0: no prediction, the collect protocol).
    predict: u32,
    /// Total mode: the manager asked for this episode's info (the episode is full): threads
    /// arriving from now on belong to the next episode.
    collected: bool,
    /// Arrivals for the next episode, in arrival order.
    next: Vec<(Waiter, BarrierCount)>,
    pub(crate) phase: Phase,
    /// Per-node mode: this node's info, taken when its release completed, waiting for the
    /// arrivals of its children in the tree.
    pub(crate) own: Option<Vec<u8>>,
    /// Per-node mode: arrivals from this node's children (this episode's or the next one's).
    pub(crate) up: Vec<UpArrival>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MgrMode {
    Total(u32),
}

/// The manager's state of one barrier's current episode.
#[derive(Debug)]
pub(crate) struct MgrBarrier {
    epoch: u64,
    mode: Option<MgrMode>,
    infos: Vec<Option<Vec<u8>>>,
    /// Total mode: the node's info predates threads of it counted later in this episode.
    stale: Vec<bool>,
    /// Total mode: an info of the node is on its way (a collect was sent to it, or this
    /// manager node's own eager release is running); it is not collected (again).
    awaiting: Vec<bool>,
    /// Total mode: threads counted per node.
    counts: Vec<u32>,
    /// Total mode: late threads reported while this episode was full; they count in the next.
    overflow: Vec<u32>,
    /// Nodes (per-node mode) or threads (total mode) arrived.
    arrived: u32,
    /// Total mode: `total` threads counted; collects sent to the nodes without a fresh info.
    collecting: bool,
    /// Total mode: a collect went to another node (the episode's longest chain is then count,
    /// collect, info, departure: 4 hops instead of 2).
    collected_remote: bool,
}

impl MgrBarrier {
    fn new(nodes: u16) -> Self {
        let n = usize::from(nodes);
        MgrBarrier {
            epoch: 0,
            mode: None,
            infos: vec![None; n],
            stale: vec![false; n],
            awaiting: vec![false; n],
            counts: vec![0; n],
            overflow: vec![0; n],
            arrived: 0,
            collecting: false,
            collected_remote: false,
        }
    }

    fn fresh(&self, i: usize) -> bool {
        self.infos[i].is_some() && !self.stale[i]
    }

    /// Total mode: count `count` more threads of `from` in this episode.
    fn count(&mut self, from: NodeId, total: u32, count: u32) {
        self.mode = Some(MgrMode::Total(total));
        self.counts[from.index()] += count;
        self.arrived += count;
    }

    /// Total mode: `from`'s info, taken after all its counted threads arrived.
    fn fresh_info(&mut self, from: NodeId, info: Vec<u8>) {
        self.infos[from.index()] = Some(info);
        self.stale[from.index()] = false;
    }
}

impl SyncCore {
    /// `waiter` arrives at `barrier`; it resumes with `Ok(Done)` or `Ok(Serial)` when the
    /// episode is complete. Errors: `ZeroParticipants`, `BarrierMismatch` (another thread of
    /// this node passed a different count for the same episode, or more than `total` threads
    /// arrived at one total-count episode).
    pub fn barrier(
        &mut self,
        cons: &mut dyn Consistency,
        barrier: BarrierId,
        waiter: Waiter,
        count: BarrierCount,
    ) {
        if matches!(
            count,
            BarrierCount::PerNode { local: 0 } | BarrierCount::Total { total: 0 }
        ) {
            let e = SyncError::ZeroParticipants {
                node: self.me,
                barrier,
                waiter,
            };
            self.wake(waiter, Err(e));
            return;
        }
        let b = self.barriers.entry(barrier.0).or_default();
        let late = matches!(b.phase, Phase::EagerReleasing | Phase::EagerSent)
            && !b.collected
            && b.mode == Some(count);
        if late {
            // After this node's eager info: this episode's (prediction too low) or the next
            // one's; the manager decides. Reported now, or right after the eager message.
            b.waiters.push(waiter);
            if b.phase == Phase::EagerSent {
                self.report_late(cons, barrier.0);
            }
            return;
        }
        if b.phase != Phase::Gathering {
            b.next.push((waiter, count));
            return;
        }
        if let Some(expected) = b.mode.filter(|m| *m != count) {
            let e = SyncError::BarrierMismatch {
                node: self.me,
                barrier,
                waiter,
                got: count.to_string(),
                expected: expected.to_string(),
            };
            self.wake(waiter, Err(e));
            return;
        }
        b.mode = Some(count);
        b.waiters.push(waiter);
        match count {
            BarrierCount::PerNode { local } => {
                if b.waiters.len() >= local as usize {
                    self.start_barrier_release(cons, barrier.0, Phase::Releasing);
                }
            }
            BarrierCount::Total { total } => {
                if b.predict > 0 && b.waiters.len() >= b.predict as usize {
                    self.start_eager(cons, barrier.0, total);
                } else {
                    self.report_count(cons, barrier.0, total, waiter);
                }
            }
        }
    }

    /// Total mode, no (reached) prediction: count `waiter` at the manager now.
    fn report_count(
        &mut self,
        cons: &mut dyn Consistency,
        barrier: u64,
        total: u32,
        waiter: Waiter,
    ) {
        let mgr = self.manager(barrier);
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        let epoch = b.epoch;
        b.reported += 1;
        if mgr != self.me {
            self.send(
                mgr,
                Msg::BarrierCount {
                    barrier,
                    epoch,
                    total,
                    count: 1,
                    late: false,
                },
            );
            return;
        }
        let me = self.me;
        if let Err(e) = self.mgr_barrier_count(cons, me, barrier, epoch, total, 1) {
            self.refuse(barrier, waiter, total, &e);
        }
    }

    /// More threads than `total` in one episode (misuse): refuse `waiter`, which was the last
    /// to arrive and is not counted.
    fn refuse(&mut self, barrier: u64, waiter: Waiter, total: u32, e: &SyncError) {
        if let Some(b) = self.barriers.get_mut(&barrier) {
            if let Some(i) = b.waiters.iter().position(|w| *w == waiter) {
                b.waiters.remove(i);
                b.reported = b.reported.min(b.waiters.len());
                b.eager_upto = b.eager_upto.min(b.waiters.len());
            }
        }
        let e = SyncError::BarrierMismatch {
            node: self.me,
            barrier: BarrierId(barrier),
            waiter,
            got: BarrierCount::Total { total }.to_string(),
            expected: format!("a full episode ({e})"),
        };
        self.wake(waiter, Err(e));
    }

    /// Total mode: this node's predicted participants arrived: release now and send their
    /// count with the info in one message. On the manager node the count is taken at once
    /// (the manager then waits for its own info instead of collecting it).
    fn start_eager(&mut self, cons: &mut dyn Consistency, barrier: u64, total: u32) {
        let mgr = self.manager(barrier);
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        let epoch = b.epoch;
        let count = (b.waiters.len() - b.reported) as u32;
        b.eager_upto = b.waiters.len();
        b.phase = Phase::EagerReleasing;
        self.stats.barrier_eager += 1;
        if mgr == self.me {
            b.reported = b.waiters.len();
            let unreported: Vec<Waiter> = b.waiters[b.waiters.len() - count as usize..].to_vec();
            let me = self.me;
            if let Err(e) = self.mgr_eager_count(cons, me, barrier, epoch, total, count) {
                self.stats.barrier_eager -= 1;
                if let Some(b) = self.barriers.get_mut(&barrier) {
                    b.phase = Phase::Gathering;
                }
                for w in unreported {
                    self.refuse(barrier, w, total, &e);
                }
                return;
            }
        }
        if self.begin_release(cons, PendingRelease::Barrier(barrier)) {
            self.finish_barrier_release(cons, barrier);
        }
    }

    /// Total mode: report the threads that arrived after the eager message as late.
    fn report_late(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let mgr = self.manager(barrier);
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        let count = (b.waiters.len() - b.reported) as u32;
        let Some(BarrierCount::Total { total }) = b.mode else {
            return;
        };
        if count == 0 {
            return;
        }
        b.reported = b.waiters.len();
        let epoch = b.epoch;
        self.stats.barrier_late += u64::from(count);
        if mgr == self.me {
            let me = self.me;
            if let Err(e) = self.mgr_barrier_late(cons, me, barrier, epoch, total, count) {
                self.internal_error(e);
            }
        } else {
            self.send(
                mgr,
                Msg::BarrierCount {
                    barrier,
                    epoch,
                    total,
                    count,
                    late: true,
                },
            );
        }
    }

    fn start_barrier_release(&mut self, cons: &mut dyn Consistency, barrier: u64, phase: Phase) {
        if let Some(b) = self.barriers.get_mut(&barrier) {
            b.phase = phase;
        }
        if self.begin_release(cons, PendingRelease::Barrier(barrier)) {
            self.finish_barrier_release(cons, barrier);
        }
    }

    /// This node's release for the episode completed: send the arrival, the eager count + info
    /// or the collect answer.
    pub(crate) fn finish_barrier_release(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let b = self.barriers.entry(barrier).or_default();
        if b.phase == Phase::EagerReleasing {
            self.finish_eager(cons, barrier);
            return;
        }
        b.phase = Phase::Sent;
        let per_node = matches!(b.mode, Some(BarrierCount::PerNode { .. }));
        let epoch = b.epoch;
        let info = cons.barrier_info();
        if per_node {
            self.tree_own_info(cons, barrier, info);
        } else {
            self.send_info(cons, barrier, epoch, info);
        }
    }

    /// Total-mode collect answer, to the manager.
    fn send_info(&mut self, cons: &mut dyn Consistency, barrier: u64, epoch: u64, info: Vec<u8>) {
        let mgr = self.manager(barrier);
        if mgr == self.me {
            let me = self.me;
            if let Err(e) = self.mgr_barrier_info(cons, me, barrier, epoch, info) {
                self.internal_error(e);
            }
        } else {
            self.send(
                mgr,
                Msg::BarrierInfo {
                    barrier,
                    epoch,
                    info,
                },
            );
        }
    }

    /// The eager release completed: send count + info, then the late threads (their writes
    /// are not all in this info), then, if a collect crossed the release, the same info as
    /// its answer.
    fn finish_eager(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let mgr = self.manager(barrier);
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        b.phase = Phase::EagerSent;
        let epoch = b.epoch;
        let total = match b.mode {
            Some(BarrierCount::Total { total }) => total,
            _ => 0,
        };
        let count = (b.eager_upto - b.reported.min(b.eager_upto)) as u32;
        b.reported = b.reported.max(b.eager_upto);
        let collected = b.collected;
        let info = cons.barrier_info();
        let answer = collected.then(|| info.clone());
        let me = self.me;
        if mgr == me {
            if let Err(e) = self.mgr_eager_info(cons, barrier, epoch, info) {
                self.internal_error(e);
            }
        } else {
            self.send(
                mgr,
                Msg::BarrierEager {
                    barrier,
                    epoch,
                    total,
                    count,
                    info,
                },
            );
        }
        // The manager's own info may have completed the episode: nothing more then.
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        if b.epoch != epoch {
            return;
        }
        self.report_late(cons, barrier);
        if let Some(info) = answer {
            if let Some(b) = self.barriers.get_mut(&barrier) {
                if b.epoch == epoch && b.phase == Phase::EagerSent {
                    b.phase = Phase::Sent;
                    self.send_info(cons, barrier, epoch, info);
                }
            }
        }
    }

    /// Manager: a per-node episode `epoch` ended at the tree's root (this node). The flat
    /// manager state must move past it too: the same barrier may run its next episode with a
    /// total count (an OpenMP team of another shape), whose arrivals name the next episode.
    pub(crate) fn mgr_tree_departed(&mut self, barrier: u64, epoch: u64) {
        let nodes = self.nodes;
        let m = self.mgr_state(barrier);
        if m.epoch <= epoch {
            *m = MgrBarrier::new(nodes);
            m.epoch = epoch + 1;
        }
    }

    fn mgr_state(&mut self, barrier: u64) -> &mut MgrBarrier {
        let nodes = self.nodes;
        self.barrier_mgr
            .entry(barrier)
            .or_insert_with(|| MgrBarrier::new(nodes))
    }

    fn check_episode(
        &self,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        want: MgrMode,
    ) -> Result<(), SyncError> {
        let (cur_epoch, mode) = match self.barrier_mgr.get(&barrier) {
            Some(m) => (m.epoch, m.mode),
            None => (0, None),
        };
        let why = if epoch != cur_epoch {
            Some(format!(
                "episode {epoch} while the manager is at episode {cur_epoch}"
            ))
        } else if mode.is_some_and(|m| m != want) {
            Some(format!("{want:?} arrival in a {mode:?} episode"))
        } else {
            None
        };
        match why {
            Some(why) => Err(self.unexpected(from, BarrierId(barrier).to_string(), why)),
            None => Ok(()),
        }
    }

    /// Manager (total mode): may `count` more threads of `from` be counted in this episode?
    fn check_count(
        &self,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
    ) -> Result<(), SyncError> {
        self.check_episode(from, barrier, epoch, MgrMode::Total(total))?;
        if let Some(m) = self.barrier_mgr.get(&barrier) {
            if count > 0 && (m.collecting || m.arrived.saturating_add(count) > total) {
                let why = format!("more than {total} threads arrived in episode {epoch}");
                return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
            }
        }
        Ok(())
    }

    /// Manager (total mode): `count` more threads of `from` arrived.
    pub(crate) fn mgr_barrier_count(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
    ) -> Result<(), SyncError> {
        self.check_count(from, barrier, epoch, total, count)?;
        self.mgr_state(barrier).count(from, total, count);
        self.mgr_progress(cons, barrier)
    }

    /// Manager (total mode): this manager node's own eager count; its info follows when its
    /// release completes (`mgr_eager_info`).
    fn mgr_eager_count(
        &mut self,
        cons: &mut dyn Consistency,
        me: NodeId,
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
    ) -> Result<(), SyncError> {
        self.check_count(me, barrier, epoch, total, count)?;
        // Checked: the count below passes the same check and the info is then awaited.
        self.mgr_state(barrier).awaiting[me.index()] = true;
        self.mgr_barrier_count(cons, me, barrier, epoch, total, count)
    }

    /// Manager (total mode): this manager node's own eager info.
    fn mgr_eager_info(
        &mut self,
        cons: &mut dyn Consistency,
        barrier: u64,
        epoch: u64,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let me = self.me;
        let m = self.mgr_state(barrier);
        if m.epoch != epoch || !m.awaiting[me.index()] {
            let why = format!("own eager info for episode {epoch} that was not awaited");
            return Err(self.unexpected(me, BarrierId(barrier).to_string(), why));
        }
        m.fresh_info(me, info);
        m.awaiting[me.index()] = false;
        self.mgr_progress(cons, barrier)
    }

    /// Manager (total mode): `from`'s eager count + info.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mgr_barrier_eager(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        self.check_count(from, barrier, epoch, total, count)?;
        if self
            .barrier_mgr
            .get(&barrier)
            .is_some_and(|m| m.infos[from.index()].is_some())
        {
            let why = format!("second eager info from the same node in episode {epoch}");
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        let m = self.mgr_state(barrier);
        m.count(from, total, count);
        m.fresh_info(from, info);
        // `awaiting` stays: a collect that crossed this message gets its own answer.
        self.mgr_progress(cons, barrier)
    }

    /// Manager (total mode): `count` threads of `from` that arrived after its eager message
    /// for `epoch`. Counted in this episode while it is open (that node's info is then stale),
    /// else in the next one.
    pub(crate) fn mgr_barrier_late(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
    ) -> Result<(), SyncError> {
        let (cur, mode) = match self.barrier_mgr.get(&barrier) {
            Some(m) => (m.epoch, m.mode),
            None => (0, None),
        };
        let why = if epoch != cur && epoch.wrapping_add(1) != cur {
            Some(format!(
                "late threads of episode {epoch} while the manager is at episode {cur}"
            ))
        } else if mode.is_some_and(|m| m != MgrMode::Total(total)) {
            Some(format!(
                "late threads of {total} in total in a {mode:?} episode"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        let m = self.mgr_state(barrier);
        m.mode = Some(MgrMode::Total(total));
        let now = if m.collecting {
            0
        } else {
            count.min(total.saturating_sub(m.arrived))
        };
        m.count(from, total, now);
        m.overflow[from.index()] += count - now;
        if now > 0 && epoch == cur {
            m.stale[from.index()] = true;
        }
        self.mgr_progress(cons, barrier)
    }

    /// Manager (total mode): when `total` threads are counted, collect the nodes without a
    /// fresh info (once); when every info is fresh and none is awaited, depart.
    fn mgr_progress(&mut self, cons: &mut dyn Consistency, barrier: u64) -> Result<(), SyncError> {
        let me = self.me;
        let m = self.mgr_state(barrier);
        let Some(MgrMode::Total(total)) = m.mode else {
            return Ok(());
        };
        if m.arrived < total {
            return Ok(());
        }
        let mut collect = Vec::new();
        if !m.collecting {
            m.collecting = true;
            for i in 0..m.infos.len() {
                if !m.fresh(i) && !m.awaiting[i] {
                    m.awaiting[i] = true;
                    collect.push(NodeId(i as u16));
                }
            }
        }
        let epoch = m.epoch;
        let ready = (0..m.infos.len()).all(|i| m.fresh(i) && !m.awaiting[i]);
        if ready {
            self.mgr_depart(cons, barrier);
            return Ok(());
        }
        self.stats.barrier_collects += collect.len() as u64;
        if collect.iter().any(|n| *n != me) {
            self.mgr_state(barrier).collected_remote = true;
        }
        let mut local = false;
        for n in collect {
            if n == me {
                local = true;
            } else {
                self.send(n, Msg::BarrierCollect { barrier, epoch });
            }
        }
        if local {
            self.on_barrier_collect(cons, me, barrier, epoch)?;
        }
        Ok(())
    }

    /// The manager asks this node (total mode) to release and send its info.
    pub(crate) fn on_barrier_collect(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
    ) -> Result<(), SyncError> {
        let b = self.barriers.entry(barrier).or_default();
        let why = if b.epoch != epoch {
            Some(format!(
                "collect for episode {epoch} while this node is at {}",
                b.epoch
            ))
        } else if matches!(b.mode, Some(BarrierCount::PerNode { .. })) {
            Some("collect in a per-node episode".to_string())
        } else if b.collected || matches!(b.phase, Phase::Releasing | Phase::Sent) {
            Some("second collect for the episode".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        b.collected = true;
        match b.phase {
            // The eager message is the answer's first half; the answer follows it.
            Phase::EagerReleasing => {}
            Phase::EagerSent => {
                self.stats.barrier_recollects += 1;
                self.start_barrier_release(cons, barrier, Phase::Releasing);
            }
            _ => self.start_barrier_release(cons, barrier, Phase::Releasing),
        }
        Ok(())
    }

    /// Manager (total mode): `from`'s info for the episode, answering its collect.
    pub(crate) fn mgr_barrier_info(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        info: Vec<u8>,
    ) -> Result<(), SyncError> {
        let mode = match self.barrier_mgr.get(&barrier) {
            Some(m) if m.collecting && m.awaiting[from.index()] => m.mode,
            _ => None,
        };
        let Some(mode) = mode else {
            let why = "barrier info without a collect".to_string();
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        };
        self.check_episode(from, barrier, epoch, mode)?;
        let m = self.mgr_state(barrier);
        m.fresh_info(from, info);
        m.awaiting[from.index()] = false;
        self.mgr_progress(cons, barrier)
    }

    /// Manager: everyone arrived; send the departures and start the next episode (total
    /// mode: with the late threads that overflowed this one already counted).
    fn mgr_depart(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let me = self.me;
        let nodes = self.nodes;
        let m = self.mgr_state(barrier);
        let epoch = m.epoch;
        let mode = m.mode;
        let serial = match mode {
            Some(MgrMode::Total(_)) => m
                .counts
                .iter()
                .position(|c| *c > 0)
                .map_or(me, |i| NodeId(i as u16)),
            _ => me,
        };
        let counted = std::mem::take(&mut m.counts);
        let overflow = std::mem::take(&mut m.overflow);
        let hops = if m.collected_remote { 4 } else { 2 };
        let mut infos: Vec<Vec<u8>> = m
            .infos
            .iter_mut()
            .map(|i| i.take().unwrap_or_default())
            .collect();
        *m = MgrBarrier::new(nodes);
        m.epoch = epoch + 1;
        if let Some(MgrMode::Total(total)) = mode {
            if overflow.iter().any(|c| *c > 0) {
                m.mode = mode;
                for (i, c) in overflow.into_iter().enumerate() {
                    let now = c.min(total - m.arrived.min(total));
                    m.count(NodeId(i as u16), total, now);
                    m.overflow[i] = c - now;
                }
            }
        }
        // One merged info instead of N when the protocol merges (no O(N²) bytes).
        if let Some(one) = cons.merge_barrier_infos(&infos) {
            infos = vec![one];
        }
        let hops = if nodes > 1 { hops } else { 0 };
        let counted_of = |n: NodeId| match mode {
            Some(MgrMode::Total(_)) => counted.get(n.index()).copied().unwrap_or(0),
            _ => 0,
        };
        for n in 0..nodes {
            let n = NodeId(n);
            if n != me {
                self.send(
                    n,
                    Msg::BarrierDepart {
                        barrier,
                        epoch,
                        serial,
                        counted: counted_of(n),
                        hops,
                        infos: infos.clone(),
                    },
                );
            }
        }
        if let Err(e) = self.on_barrier_depart(
            cons,
            me,
            barrier,
            epoch,
            serial,
            counted_of(me),
            hops,
            infos,
        ) {
            self.internal_error(e);
        }
        // The next episode may be full already (overflow): collect it.
        if let Err(e) = self.mgr_progress(cons, barrier) {
            self.internal_error(e);
        }
    }

    /// The episode is over: apply everyone's info, wake this node's threads counted in it
    /// (total mode: the oldest `counted`; the rest stay for the next episode, already
    /// reported), replay arrivals that came for the next episode.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_barrier_depart(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        serial: NodeId,
        counted: u32,
        hops: u8,
        infos: Vec<Vec<u8>>,
    ) -> Result<(), SyncError> {
        let nodes = usize::from(self.nodes);
        let b = self.barriers.entry(barrier).or_default();
        let per_node = matches!(b.mode, Some(BarrierCount::PerNode { .. }));
        let why = if b.epoch != epoch {
            Some(format!(
                "departure for episode {epoch} while this node is at {}",
                b.epoch
            ))
        } else if !matches!(b.phase, Phase::Sent | Phase::EagerSent) {
            Some("departure before this node arrived".to_string())
        } else if infos.is_empty() || infos.len() > nodes {
            Some(format!(
                "departure with {} infos for {nodes} nodes",
                infos.len()
            ))
        } else if !per_node && counted as usize > b.reported {
            Some(format!(
                "departure counting {counted} threads of this node, which reported {}",
                b.reported
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        let mut waiters = std::mem::take(&mut b.waiters);
        let wake_n = if per_node {
            waiters.len()
        } else {
            counted as usize
        };
        let mut carry = waiters.split_off(wake_n);
        // Threads the manager was not told about yet (only on the manager node: held while
        // its own eager info completed the episode) arrive again in the next episode.
        let unreported = carry.split_off(b.reported.saturating_sub(wake_n).min(carry.len()));
        let mode = b.mode;
        let mut early: Vec<(Waiter, BarrierCount)> = match mode {
            Some(m) if !per_node => unreported.into_iter().map(|w| (w, m)).collect(),
            _ => Vec::new(),
        };
        early.append(&mut b.next);
        b.epoch += 1;
        if carry.is_empty() {
            b.mode = None;
        }
        b.phase = Phase::Gathering;
        b.reported = carry.len();
        b.eager_upto = 0;
        b.collected = false;
        b.predict = match (per_node, self.barrier_eager_cap) {
            (true, _) => 0,
            (false, Some(cap)) => counted.min(cap),
            (false, None) => counted,
        };
        self.stats.barrier_carried += carry.len() as u64;
        b.waiters = carry;
        cons.apply_barrier(&infos);
        self.stats.barrier_episodes += 1;
        self.stats.barrier_hops += u64::from(hops);
        for (i, w) in waiters.into_iter().enumerate() {
            let outcome = if i == 0 && serial == self.me {
                Outcome::Serial
            } else {
                Outcome::Done
            };
            self.wake(w, Ok(outcome));
        }
        for (w, count) in early {
            self.barrier(cons, BarrierId(barrier), w, count);
        }
        // Threads carried over may already reach the prediction: their info goes eagerly.
        if let Some(b) = self.barriers.get(&barrier) {
            if let (Phase::Gathering, Some(BarrierCount::Total { total })) = (b.phase, b.mode) {
                if b.predict > 0 && b.waiters.len() >= b.predict as usize {
                    self.start_eager(cons, barrier, total);
                }
            }
        }
        Ok(())
    }
}

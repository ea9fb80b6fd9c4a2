//! Barriers across all threads of all nodes: local gathering, one arrival per node, one
//! departure per node carrying everyone's consistency information.
//!
//! Owns: `barrier` and the barrier messages; the node's episode state and, on the manager
//! (`barrier % nodes`), the episode's arrivals. Must not touch: locks, conditions, flags.
//!
//! Per-node mode (`BarrierCount::PerNode`): when this node's `local` threads have arrived, the
//! node calls `begin_release`, then `barrier_info()`, and sends one arrival to the manager.
//! When all N nodes arrived, the manager sends one departure with all infos (rank order) to
//! every other node: 2(N−1) messages per episode. Every node calls `apply_barrier(&all)` before
//! waking its threads. Total mode (`BarrierCount::Total`): each arriving thread is counted at
//! the manager (one count message when the manager is remote); when `total` threads have
//! arrived the manager asks every node (also those without participants) to release and send
//! its info, then departs as above. In both modes exactly one thread of the job is woken with
//! `Outcome::Serial`. A thread arriving while its node is already releasing / waiting for the
//! departure belongs to the next episode.
use crate::core::{PendingRelease, SyncCore};
use crate::error::SyncError;
use crate::ids::{BarrierId, Waiter};
use crate::message::Msg;
use crate::{BarrierCount, Outcome};
use squall_core::{Consistency, NodeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Threads arrive; nothing sent for the episode's release yet.
    #[default]
    Gathering,
    /// `begin_release` called, waiting for its completion.
    Releasing,
    /// Arrival / info sent, waiting for the departure.
    Sent,
}

/// This node's state of one barrier.
#[derive(Debug, Default)]
pub(crate) struct NodeBarrier {
    /// Episodes completed on this node.
    epoch: u64,
    /// The count the current episode's local threads passed.
    mode: Option<BarrierCount>,
    waiters: Vec<Waiter>,
    /// Arrivals for the next episode, in arrival order.
    next: Vec<(Waiter, BarrierCount)>,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MgrMode {
    PerNode,
    Total(u32),
}

/// The manager's state of one barrier's current episode.
#[derive(Debug)]
pub(crate) struct MgrBarrier {
    epoch: u64,
    mode: Option<MgrMode>,
    infos: Vec<Option<Vec<u8>>>,
    /// Total mode: threads counted per node.
    counts: Vec<u32>,
    /// Nodes (per-node mode) or threads (total mode) arrived.
    arrived: u32,
    collecting: bool,
}

impl MgrBarrier {
    fn new(nodes: u16) -> Self {
        MgrBarrier {
            epoch: 0,
            mode: None,
            infos: vec![None; usize::from(nodes)],
            counts: vec![0; usize::from(nodes)],
            arrived: 0,
            collecting: false,
        }
    }
}

impl SyncCore {
    /// `waiter` arrives at `barrier`; it resumes with `Ok(Done)` or `Ok(Serial)` when the
    /// episode is complete. Errors: `ZeroParticipants`, `BarrierMismatch` (another thread of
    /// this node passed a different count for the same episode).
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
        let epoch = b.epoch;
        match count {
            BarrierCount::PerNode { local } => {
                if b.waiters.len() >= local as usize {
                    self.start_barrier_release(cons, barrier.0);
                }
            }
            BarrierCount::Total { total } => {
                let mgr = self.manager(barrier.0);
                if mgr == self.me {
                    let me = self.me;
                    if let Err(e) = self.mgr_barrier_count(cons, me, barrier.0, epoch, total, 1) {
                        // More threads than `total` in one episode (misuse): refuse this one.
                        if let Some(b) = self.barriers.get_mut(&barrier.0) {
                            b.waiters.retain(|w| *w != waiter);
                        }
                        let e = SyncError::BarrierMismatch {
                            node: self.me,
                            barrier,
                            waiter,
                            got: count.to_string(),
                            expected: format!("a full episode ({e})"),
                        };
                        self.wake(waiter, Err(e));
                    }
                } else {
                    self.send(
                        mgr,
                        Msg::BarrierCount {
                            barrier: barrier.0,
                            epoch,
                            total,
                            count: 1,
                        },
                    );
                }
            }
        }
    }

    fn start_barrier_release(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        if let Some(b) = self.barriers.get_mut(&barrier) {
            b.phase = Phase::Releasing;
        }
        if self.begin_release(cons, PendingRelease::Barrier(barrier)) {
            self.finish_barrier_release(cons, barrier);
        }
    }

    /// This node's release for the episode completed: send the arrival (or collect answer).
    pub(crate) fn finish_barrier_release(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let b = self.barriers.entry(barrier).or_default();
        b.phase = Phase::Sent;
        let per_node = matches!(b.mode, Some(BarrierCount::PerNode { .. }));
        let epoch = b.epoch;
        let info = cons.barrier_info();
        let mgr = self.manager(barrier);
        if mgr == self.me {
            let me = self.me;
            if let Err(e) = self.mgr_barrier_info(cons, me, barrier, epoch, info, per_node) {
                self.internal_error(e);
            }
        } else if per_node {
            self.send(
                mgr,
                Msg::BarrierArrive {
                    barrier,
                    epoch,
                    info,
                },
            );
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
        self.check_episode(from, barrier, epoch, MgrMode::Total(total))?;
        let m = self.mgr_state(barrier);
        if m.collecting || m.arrived.saturating_add(count) > total {
            let why = format!("more than {total} threads arrived in episode {epoch}");
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        m.mode = Some(MgrMode::Total(total));
        m.counts[from.index()] += count;
        m.arrived += count;
        if m.arrived < total {
            return Ok(());
        }
        m.collecting = true;
        let me = self.me;
        for n in 0..self.nodes {
            let n = NodeId(n);
            if n != me {
                self.send(n, Msg::BarrierCollect { barrier, epoch });
            }
        }
        self.on_barrier_collect(cons, me, barrier, epoch)
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
        } else if b.phase != Phase::Gathering {
            Some("collect while this node already released".to_string())
        } else if matches!(b.mode, Some(BarrierCount::PerNode { .. })) {
            Some("collect in a per-node episode".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        self.start_barrier_release(cons, barrier);
        Ok(())
    }

    /// Manager: `from`'s info for the episode (its arrival in per-node mode, its collect
    /// answer in total mode).
    pub(crate) fn mgr_barrier_info(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        info: Vec<u8>,
        per_node: bool,
    ) -> Result<(), SyncError> {
        let nodes = u32::from(self.nodes);
        let mode = if per_node {
            MgrMode::PerNode
        } else {
            let m = self.mgr_state(barrier);
            match (m.mode, m.collecting) {
                (Some(t @ MgrMode::Total(_)), true) => t,
                _ => {
                    let why = "barrier info without a collect".to_string();
                    return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
                }
            }
        };
        self.check_episode(from, barrier, epoch, mode)?;
        let m = self.mgr_state(barrier);
        if m.infos[from.index()].is_some() {
            let why = format!("second arrival from the same node in episode {epoch}");
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        m.mode = Some(mode);
        m.infos[from.index()] = Some(info);
        if per_node {
            m.arrived += 1;
        }
        if m.infos.iter().filter(|i| i.is_some()).count() as u32 == nodes {
            self.mgr_depart(cons, barrier);
        }
        Ok(())
    }

    /// Manager: everyone arrived; send the departures and start the next episode.
    fn mgr_depart(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let me = self.me;
        let nodes = self.nodes;
        let m = self.mgr_state(barrier);
        let epoch = m.epoch;
        let serial = match m.mode {
            Some(MgrMode::Total(_)) => m
                .counts
                .iter()
                .position(|c| *c > 0)
                .map_or(me, |i| NodeId(i as u16)),
            _ => me,
        };
        let infos: Vec<Vec<u8>> = m
            .infos
            .iter_mut()
            .map(|i| i.take().unwrap_or_default())
            .collect();
        *m = MgrBarrier::new(nodes);
        m.epoch = epoch + 1;
        for n in 0..nodes {
            let n = NodeId(n);
            if n != me {
                self.send(
                    n,
                    Msg::BarrierDepart {
                        barrier,
                        epoch,
                        serial,
                        infos: infos.clone(),
                    },
                );
            }
        }
        if let Err(e) = self.on_barrier_depart(cons, me, barrier, epoch, serial, infos) {
            self.internal_error(e);
        }
    }

    /// The episode is over: apply everyone's info, wake this node's threads, replay arrivals
    /// that came early for the next episode.
    pub(crate) fn on_barrier_depart(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        serial: NodeId,
        infos: Vec<Vec<u8>>,
    ) -> Result<(), SyncError> {
        let nodes = usize::from(self.nodes);
        let b = self.barriers.entry(barrier).or_default();
        let why = if b.epoch != epoch {
            Some(format!(
                "departure for episode {epoch} while this node is at {}",
                b.epoch
            ))
        } else if b.phase != Phase::Sent {
            Some("departure before this node arrived".to_string())
        } else if infos.len() != nodes {
            Some(format!(
                "departure with {} infos for {nodes} nodes",
                infos.len()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        let waiters = std::mem::take(&mut b.waiters);
        let early = std::mem::take(&mut b.next);
        b.epoch += 1;
        b.mode = None;
        b.phase = Phase::Gathering;
        cons.apply_barrier(&infos);
        self.stats.barrier_episodes += 1;
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
        Ok(())
    }
}

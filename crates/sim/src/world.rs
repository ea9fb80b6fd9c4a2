//! The simulated world: N nodes (protocol core + page table), simulated application threads,
//! a seeded virtual network and the synchronization oracle, driven by one event queue in
//! virtual time.
//!
//! Owns: the event loop, thread execution, the reference memory and the checks. Must not touch:
//! real I/O, clocks or threads; protocol internals (cores are driven only through `Protocol`).

use crate::lossy::{LossyNet, TY_SYNC};
use crate::memory::SimMemory;
use crate::oracle::{BarrierOracle, LockOracle};
use crate::program::{Check, Op, Program};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::{Access, NodeId, PageId, PageMemory};
use squall_core::{Consistency, LockId};
use squall_example_protocols::{Migratory, WriteUpdate};
use squall_protocol::hlrc::{DEFAULT_BARRIER_FETCH, DEFAULT_LOST_RUN};
use squall_protocol::{
    Action, AtomicOp, Hlrc, Policy, ProtoStats, Protocol, ProtocolKind, Router, RunHandover, Sc,
    UserCore,
};
use squall_sync::{BarrierCount, BarrierId, SyncCore, Waiter};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Why a simulated run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("thread {thread} on {node} read {got:#x} from page {page:#x}+{offset}, the reference execution has {want:#x} (op {pc})")]
    WrongRead {
        thread: usize,
        node: NodeId,
        page: u64,
        offset: usize,
        got: u64,
        want: u64,
        pc: usize,
    },
    #[error(
        "litmus {name}: outcome {got:?} is not sequentially consistent (allowed: {allowed:?})"
    )]
    NotSc {
        name: &'static str,
        got: Vec<u64>,
        allowed: Vec<Vec<u64>>,
    },
    #[error("atomic fetch-add on var {var} returned {got:?}, expected each of 0..{n} once")]
    Atomic { var: usize, got: Vec<u64>, n: usize },
    #[error("deadlock: no event pending but threads {0:?} are not done")]
    Deadlock(Vec<usize>),
    #[error("livelock: {0} events without finishing")]
    Livelock(u64),
    #[error("setting up the allocations: {0}")]
    Setup(String),
    #[error("protocol error on {node}: {err}")]
    Protocol {
        node: NodeId,
        err: squall_protocol::ProtoError,
    },
    #[error("reliable-datagram layer of {node}: {err}")]
    Net { node: NodeId, err: String },
    #[error("sync core of {node}: {err}")]
    Sync { node: NodeId, err: String },
    #[error(
        "final copies differ: {node} has {got:#x} at page {page:#x}+{offset}, expected {want:#x}"
    )]
    FinalMemory {
        node: NodeId,
        page: u64,
        offset: usize,
        got: u64,
        want: u64,
    },
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The protocol of allocations the program gives no policy of their own.
    pub protocol: ProtocolKind,
    /// The program mixes policies (its allocations name theirs): every `hlrc` core gets
    /// random knobs even when the default is `sc`.
    pub mixed: bool,
    pub seed: u64,
    pub trace: bool,
    pub max_events: u64,
    /// Synchronize through `squall-sync`'s real distributed managers (`SyncCore` per node,
    /// messages over the virtual network) instead of the oracle.
    pub sync_cores: bool,
    /// Run every message through `squall-net`'s reliable-datagram core over a network that
    /// loses and duplicates datagrams with these probabilities.
    pub lossy: Option<(f64, f64)>,
    /// With `sync_cores`: barriers count all threads of the job (`BarrierCount::Total`, the
    /// pthread barrier) instead of each node's (`PerNode`).
    pub barrier_total: bool,
    /// With `barrier_total`: `SyncCore::set_barrier_eager_cap` of every node (`Some(1)` makes
    /// nodes with several threads report late threads and be collected again).
    pub barrier_eager_cap: Option<u32>,
    /// With `sync_cores`: the node-local lock cache is on, and threads try it first
    /// (`FastLocks::try_lock` / `try_unlock`, as the runtime does) before calling the core.
    pub lock_cache: bool,
    /// `hlrc` cores keep the runtime's knobs (`Hlrc::new`'s defaults: migration after
    /// `DEFAULT_MIGRATE_AFTER` sole-writer diffs, exclusive mode, read-ahead, barrier fetches,
    /// push updates off; grant pushes are always on) instead of random ones; only the
    /// migration threshold varies (1-3, mostly the default) and push updates are on for
    /// some seeds (`SQUALL_PUSH_UPDATES`).
    pub runtime_tuning: bool,
    /// Half of the threads' stores to writable pages land late (`SimMemory::store_late`):
    /// while the node's core runs a release or serves the page, as the runtime's threads
    /// write while its service thread works.
    pub late_stores: bool,
}

/// How often the total-count barrier's paths ran (summed over nodes; see `squall-sync`'s
/// `barrier.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BarrierPaths {
    /// Runs with total-count barriers through the real sync cores.
    pub runs: u64,
    /// Barrier episodes completed (per node).
    pub episodes: u64,
    /// Eager releases (count + info in one message, or the manager's own).
    pub eager: u64,
    /// Collects sent or done locally by managers.
    pub collects: u64,
    /// Threads reported late.
    pub late: u64,
    /// Collects answered after an eager info had gone stale.
    pub recollects: u64,
    /// Threads carried into the next episode.
    pub carried: u64,
}

impl BarrierPaths {
    /// Add another run's counts.
    pub fn merge(&mut self, o: &BarrierPaths) {
        self.runs += o.runs;
        self.episodes += o.episodes;
        self.eager += o.eager;
        self.collects += o.collects;
        self.late += o.late;
        self.recollects += o.recollects;
        self.carried += o.carried;
    }
}

/// Deliver the routers' messages among themselves until they are quiet: the announcement of
/// an allocation and its acks, before the run starts (as the runtime completes an allocation
/// only once every node has recorded it).
fn announce(routers: &mut [Router]) -> Result<(), SimError> {
    loop {
        let mut moved = false;
        for i in 0..routers.len() {
            while let Some(a) = routers[i].poll_action() {
                moved = true;
                match a {
                    Action::Send { to, msg } => {
                        let from = NodeId(i as u16);
                        routers
                            .get_mut(to.index())
                            .ok_or_else(|| SimError::Setup(format!("a message to {to}")))?
                            .handle_message(from, &msg)
                            .map_err(|err| SimError::Protocol { node: to, err })?
                    }
                    Action::Announced { .. } => {}
                    other => {
                        return Err(SimError::Setup(format!(
                            "node {i} acted before the run: {other:?}"
                        )))
                    }
                }
            }
        }
        if !moved {
            return Ok(());
        }
    }
}

/// Lends a protocol core to a `SyncCore` as its `Consistency`.
struct Cons<'a>(&'a mut dyn Protocol);

impl Consistency for Cons<'_> {
    fn acquire_info(&mut self) -> Vec<u8> {
        self.0.acquire_info()
    }
    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        self.0.grant_info(acquirer_info)
    }
    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.0.apply_grant(grant_info)
    }
    fn begin_release(&mut self, token: u64) -> bool {
        self.0.begin_release(token)
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        self.0.barrier_info()
    }
    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        self.0.apply_barrier(all)
    }
    fn merge_barrier_infos(&mut self, infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        self.0.merge_barrier_infos(infos)
    }
}

/// What a finished run reports.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    pub events: u64,
    pub end_time: u64,
    pub stats: ProtoStats,
    pub program_kind: String,
    /// Lossy mode: datagrams the reliable-datagram layer had to send again.
    pub retransmissions: u64,
    /// Total-count barrier paths taken (zero unless `barrier_total`).
    pub barrier_paths: BarrierPaths,
    /// Lock acquires by the sync cores: through the lock cache, and through the core.
    pub lock_acquires_fast: u64,
    pub lock_acquires_core: u64,
    /// Each node's sync core statistics (empty without `sync_cores`).
    pub sync_stats: Vec<squall_sync::SyncStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TState {
    Ready,
    Fault(PageId),
    WaitLock,
    WaitRelease,
    WaitBarrier,
    WaitAtomic,
    Done,
}

#[derive(Debug)]
pub(crate) enum Event {
    Step(usize),
    Datagram {
        to: NodeId,
        data: Vec<u8>,
    },
    NetTimer {
        node: NodeId,
    },
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: Vec<u8>,
        sync: bool,
    },
    LockRequest {
        lock: u64,
        thread: usize,
        info: Vec<u8>,
    },
    LockGrant {
        thread: usize,
        info: Option<Vec<u8>>,
    },
    BarrierArrive {
        node: NodeId,
        info: Vec<u8>,
    },
    BarrierDepart {
        node: NodeId,
        all: Vec<Vec<u8>>,
    },
}

/// Completion of a release started by `begin_release`.
#[derive(Debug, Clone, Copy)]
enum ReleaseFor {
    Unlock { thread: usize, lock: u64 },
    Barrier { node: NodeId },
}

pub struct World {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    prog: Program,
    cores: Vec<Box<dyn Protocol>>,
    /// The real synchronization managers, when `cfg.sync_cores`.
    sync: Option<Vec<SyncCore>>,
    lossy: Option<LossyNet>,
    /// Lossy mode: the earliest timer event scheduled per node.
    timer_at: Vec<Option<u64>>,
    /// Time of the last thread step or message delivery (lossy mode deadlock detection).
    last_progress: u64,
    mems: Vec<SimMemory>,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    /// Per-pair FIFO: last delivery time scheduled from → to.
    last_delivery: BTreeMap<(NodeId, NodeId, bool), u64>,
    pcs: Vec<usize>,
    /// Per thread: the value an `Add` loaded and has not stored yet.
    loaded: Vec<Option<u64>>,
    states: Vec<TState>,
    reference: Vec<u64>,
    observed: Vec<Vec<u64>>,
    atomic_olds: BTreeMap<usize, Vec<u64>>,
    next_token: u64,
    releases: BTreeMap<u64, ReleaseFor>,
    atomics: BTreeMap<u64, (usize, usize)>,
    locks: LockOracle,
    barrier: BarrierOracle,
    /// Threads of each node waiting at the current barrier.
    at_barrier: Vec<usize>,
    events_run: u64,
    /// Which stores land late, and when (its own stream: the world's `rng` draws are unchanged).
    late_rng: ChaCha8Rng,
}

impl World {
    pub fn new(cfg: SimConfig, prog: Program, rng: ChaCha8Rng) -> Result<Self, SimError> {
        let nodes = prog.layout.nodes;
        let mut mems = Vec::new();
        let mut routers: Vec<Router> = Vec::new();
        let mut r2 = rng.clone();
        let default = Policy::new(cfg.protocol, false, squall_core::Placement::FirstTouch);
        for n in 0..nodes {
            let mem = SimMemory::new(prog.layout.total_pages);
            let mut h = Hlrc::new(mem.clone(), NodeId(n), prog.layout);
            if cfg.runtime_tuning {
                h.set_migrate_after(match r2.gen_range(0..10) {
                    0 | 1 => 1,
                    2 => 3,
                    _ => squall_protocol::hlrc::DEFAULT_MIGRATE_AFTER,
                });
                h.set_push_updates(r2.gen_bool(0.2));
            } else if cfg.protocol == ProtocolKind::Hlrc || cfg.mixed {
                h.set_migrate_after(r2.gen_range(0..=3));
                h.set_exclusive_mode(r2.gen_bool(0.7));
                h.set_read_ahead(r2.gen_bool(0.8));
                // Short caps now and then, so runs of lost copies get cut on both sides.
                h.set_lost_run(if r2.gen_bool(0.3) {
                    r2.gen_range(0..=3)
                } else {
                    DEFAULT_LOST_RUN
                });
                h.set_push_updates(r2.gen_bool(0.7));
                h.set_push_probe(r2.gen_range(0..=2));
                // Barrier fetches: off, a short cap (runs cut), or the default.
                h.set_barrier_fetch(match r2.gen_range(0..4) {
                    0 => 0,
                    1 => r2.gen_range(1..=3),
                    _ => DEFAULT_BARRIER_FETCH,
                });
                h.set_run_handover(match r2.gen_range(0..4) {
                    0 => RunHandover::Off,
                    1 => RunHandover::Sequential,
                    _ => RunHandover::Always,
                });
                if r2.gen_bool(0.3) {
                    h.set_notice_budget(r2.gen_range(1..6));
                }
                h.set_watch_shared(r2.gen_bool(0.8));
            }
            // The two example user protocols after the built-in cores, as
            // `ProtocolKind::User(0)` and `User(1)` (a program registers them in this order).
            let cores: Vec<Box<dyn Protocol>> = vec![
                Box::new(h),
                Box::new(Sc::new(mem.clone(), NodeId(n), prog.layout)),
                Box::new(UserCore::new(
                    mem.clone(),
                    NodeId(n),
                    prog.layout,
                    Box::new(Migratory::new()),
                )),
                Box::new(UserCore::new(
                    mem.clone(),
                    NodeId(n),
                    prog.layout,
                    Box::new(WriteUpdate::new()),
                )),
            ];
            let router = Router::new(NodeId(n), prog.layout, default.coherence(), cores)
                .map_err(|e| SimError::Setup(e.to_string()))?;
            mems.push(mem);
            routers.push(router);
        }
        for (i, (node, a)) in prog.allocs.iter().enumerate() {
            let c = prog
                .policies
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(default.coherence());
            let policy = Policy {
                protocol: c.protocol,
                unit_pages: c.unit_pages,
                updates: c.updates,
                placement: a.placement,
            };
            let done = routers[node.index()]
                .register_with(*a, &policy, i as u64)
                .map_err(|e| SimError::Setup(e.to_string()))?;
            if !done {
                announce(&mut routers)?;
            }
        }
        let cores: Vec<Box<dyn Protocol>> = routers
            .into_iter()
            .map(|r| Box::new(r) as Box<dyn Protocol>)
            .collect();
        let threads = prog.ops.len();
        let sync = cfg.sync_cores.then(|| {
            (0..nodes)
                .map(|n| {
                    let mut s = SyncCore::new(NodeId(n), nodes);
                    s.set_barrier_eager_cap(cfg.barrier_eager_cap);
                    s.set_lock_cache(cfg.lock_cache);
                    // Cohort passes off, bounded at 1, or the default, by seed (no RNG draw).
                    s.set_lock_cohort(
                        [0, 1, squall_sync::DEFAULT_LOCK_COHORT][(cfg.seed % 3) as usize],
                    );
                    s
                })
                .collect()
        });
        let lossy = cfg.lossy.map(|(loss, dup)| LossyNet::new(nodes, loss, dup));
        Ok(World {
            rng: r2,
            cores,
            sync,
            lossy,
            timer_at: vec![None; usize::from(nodes)],
            last_progress: 0,
            mems,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            last_delivery: BTreeMap::new(),
            pcs: vec![0; threads],
            loaded: vec![None; threads],
            states: vec![TState::Ready; threads],
            reference: vec![0; prog.vars.len()],
            observed: vec![Vec::new(); threads],
            atomic_olds: BTreeMap::new(),
            next_token: 1,
            releases: BTreeMap::new(),
            atomics: BTreeMap::new(),
            locks: LockOracle::default(),
            barrier: BarrierOracle::new(nodes),
            at_barrier: vec![0; usize::from(nodes)],
            events_run: 0,
            late_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x1a7e_5707_0000_0000),
            prog,
            cfg,
        })
    }

    fn barrier_paths(&self) -> BarrierPaths {
        let mut p = BarrierPaths::default();
        if let (true, Some(s)) = (self.cfg.barrier_total, &self.sync) {
            p.runs = 1;
            for c in s {
                let st = c.stats();
                p.episodes += st.barrier_episodes;
                p.eager += st.barrier_eager;
                p.collects += st.barrier_collects;
                p.late += st.barrier_late;
                p.recollects += st.barrier_recollects;
                p.carried += st.barrier_carried;
            }
        }
        p
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.cfg.trace {
            println!("[t={:>6}] {}", self.now, what());
        }
    }

    pub(crate) fn schedule(&mut self, delay: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + delay, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn net_delay(&mut self) -> u64 {
        if self.rng.gen_bool(0.05) {
            self.rng.gen_range(50..200)
        } else {
            self.rng.gen_range(1..20)
        }
    }

    /// Sync messages travel like any other message (no FIFO needed: the oracle orders them).
    pub(crate) fn sync_delay(&mut self) -> u64 {
        self.rng.gen_range(1..25)
    }

    /// Per-pair FIFO for protocol and for sync messages separately (so the two streams also
    /// overtake each other).
    fn send(&mut self, from: NodeId, to: NodeId, msg: Vec<u8>, sync: bool) {
        if let Some(net) = self.lossy.as_mut() {
            // Errors here are impossible for valid ranks; keep going if one appears.
            let _ = net.send(self.now, from, to, sync, msg);
            self.pump_net(from);
            return;
        }
        let d = self.net_delay();
        let at = self.now + d;
        let key = (from, to, sync);
        let last = self.last_delivery.get(&key).copied().unwrap_or(0);
        let at = at.max(last + 1);
        self.last_delivery.insert(key, at);
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(
            self.seq,
            Event::Deliver {
                from,
                to,
                msg,
                sync,
            },
        );
    }

    /// Lossy mode: put `node`'s datagrams on the wire (losing, duplicating, reordering them)
    /// and keep its timer scheduled.
    fn pump_net(&mut self, node: NodeId) {
        let mut out = Vec::new();
        let mut timer = None;
        if let Some(net) = self.lossy.as_mut() {
            while let Some(t) = net.poll_transmit(node) {
                out.push(t);
            }
            timer = net.next_timer(node);
        }
        let (loss, dup) = self.lossy.as_ref().map_or((0.0, 0.0), |n| (n.loss, n.dup));
        for t in out {
            if self.rng.gen_bool(loss) {
                continue;
            }
            let copies = if self.rng.gen_bool(dup) { 2 } else { 1 };
            for _ in 0..copies {
                let d = self.net_delay();
                self.schedule(
                    d,
                    Event::Datagram {
                        to: t.to,
                        data: t.data.clone(),
                    },
                );
            }
        }
        if let Some(at) = timer {
            let at = at.max(self.now + 1);
            let slot = &mut self.timer_at[node.index()];
            if slot.is_none_or(|s| at < s) {
                *slot = Some(at);
                let d = at - self.now;
                self.schedule(d, Event::NetTimer { node });
            }
        }
    }

    fn step_delay(&mut self) -> u64 {
        self.rng.gen_range(1..4)
    }

    /// Run to completion and check the outcome.
    pub fn run(mut self) -> Result<SimReport, SimError> {
        for t in 0..self.prog.ops.len() {
            let d = self.step_delay();
            self.schedule(d, Event::Step(t));
        }
        while let Some(Reverse((time, seq))) = self.queue.pop() {
            self.events_run += 1;
            if self.events_run > self.cfg.max_events {
                return Err(SimError::Livelock(self.events_run));
            }
            self.now = time;
            if self.lossy.is_some() {
                // Timers never stop: finish when the threads do, fail when nothing moves.
                if self.states.iter().all(|s| *s == TState::Done) {
                    break;
                }
                if self.now > self.last_progress + 200_000 {
                    break;
                }
            }
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            self.handle(ev)?;
        }
        let undone: Vec<usize> = (0..self.states.len())
            .filter(|&t| self.states[t] != TState::Done)
            .collect();
        if !undone.is_empty() {
            return Err(SimError::Deadlock(undone));
        }
        self.final_checks()?;
        let mut stats = ProtoStats::default();
        for c in &self.cores {
            stats.merge(&c.stats());
        }
        Ok(SimReport {
            events: self.events_run,
            end_time: self.now,
            stats,
            retransmissions: self.lossy.as_ref().map_or(0, |n| n.retransmissions()),
            barrier_paths: self.barrier_paths(),
            sync_stats: self
                .sync
                .iter()
                .flatten()
                .map(|c| c.stats().clone())
                .collect(),
            lock_acquires_fast: self
                .sync
                .iter()
                .flatten()
                .map(|c| c.stats_now().lock_acquires_local_fast)
                .sum(),
            lock_acquires_core: self
                .sync
                .iter()
                .flatten()
                .map(|c| c.stats().lock_acquires_local + c.stats().lock_acquires_remote)
                .sum(),
            program_kind: match &self.prog.check {
                Check::Reference => "drf".to_string(),
                Check::Outcomes { name, .. } => name.to_string(),
            },
        })
    }

    fn final_checks(&self) -> Result<(), SimError> {
        match &self.prog.check {
            Check::Reference => {}
            Check::Outcomes { name, allowed } => {
                let got: Vec<u64> = self.observed.concat();
                if !allowed.contains(&got) {
                    return Err(SimError::NotSc {
                        name,
                        got,
                        allowed: allowed.iter().cloned().collect(),
                    });
                }
            }
        }
        for (&var, olds) in &self.atomic_olds {
            let mut sorted = olds.clone();
            sorted.sort_unstable();
            if sorted.iter().enumerate().any(|(i, &v)| v != i as u64) {
                return Err(SimError::Atomic {
                    var,
                    got: olds.clone(),
                    n: olds.len(),
                });
            }
        }
        // Every node that can still read a var sees the reference value (no stale valid copy).
        if matches!(self.prog.check, Check::Reference) {
            for (n, mem) in self.mems.iter().enumerate() {
                for (v, var) in self.prog.vars.iter().enumerate() {
                    if self.atomic_olds.contains_key(&v) {
                        continue;
                    }
                    // After the final barrier (DRF programs end with a read-only phase) no
                    // node may hold a readable copy that is stale, under either protocol.
                    if mem.access(var.page) != Access::None {
                        let got = mem.load(var.page, var.offset);
                        if got != self.reference[v] {
                            return Err(SimError::FinalMemory {
                                node: NodeId(n as u16),
                                page: var.page.0,
                                offset: var.offset,
                                got,
                                want: self.reference[v],
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn handle(&mut self, ev: Event) -> Result<(), SimError> {
        match ev {
            Event::Step(t) => {
                self.last_progress = self.now;
                self.step(t)?
            }
            Event::Datagram { to, data } => {
                let mut delivered = Vec::new();
                if let Some(net) = self.lossy.as_mut() {
                    net.datagram(self.now, to, &data);
                    while let Some(ev) = net.poll_event(to) {
                        delivered.push(ev);
                    }
                }
                self.pump_net(to);
                for ev in delivered {
                    match ev {
                        squall_net::udp_core::CoreEvent::Deliver {
                            src, ty, payload, ..
                        } => {
                            self.handle(Event::Deliver {
                                from: src,
                                to,
                                msg: payload.to_vec(),
                                sync: ty.0 == TY_SYNC,
                            })?;
                        }
                        other => {
                            return Err(SimError::Net {
                                node: to,
                                err: format!("{other:?}"),
                            })
                        }
                    }
                }
            }
            Event::NetTimer { node } => {
                if self.timer_at[node.index()] == Some(self.now) {
                    self.timer_at[node.index()] = None;
                }
                let mut due = false;
                if let Some(net) = self.lossy.as_mut() {
                    if net.next_timer(node).is_some_and(|t| t <= self.now) {
                        net.timeout(self.now, node);
                        due = true;
                    }
                }
                if due || self.timer_at[node.index()].is_none() {
                    self.pump_net(node);
                }
            }
            Event::Deliver {
                from,
                to,
                msg,
                sync,
            } => {
                self.last_progress = self.now;
                self.trace(|| {
                    // Protocol messages carry their core's index first (0: hlrc).
                    let what = match msg.split_first() {
                        Some((0, rest)) if !sync => {
                            squall_protocol::hlrc::describe(from, self.prog.layout, rest)
                        }
                        _ => format!("tag {}", msg.first().copied().unwrap_or(0)),
                    };
                    format!(
                        "{from} -> {to}: {} {} bytes, {what}",
                        if sync { "sync" } else { "protocol" },
                        msg.len(),
                    )
                });
                if sync {
                    let (cores, syncs) = (&mut self.cores, &mut self.sync);
                    if let Some(s) = syncs {
                        s[to.index()]
                            .handle_message(&mut Cons(cores[to.index()].as_mut()), from, &msg)
                            .map_err(|e| SimError::Sync {
                                node: to,
                                err: e.to_string(),
                            })?;
                    }
                } else {
                    self.cores[to.index()]
                        .handle_message(from, &msg)
                        .map_err(|err| SimError::Protocol { node: to, err })?;
                }
                self.drain(to)?;
            }
            Event::LockRequest { lock, thread, info } => {
                self.trace(|| format!("lock {lock} requested by thread {thread}"));
                if let Some((t, grant)) = self.locks.request(lock, thread, info, &mut self.cores) {
                    let d = self.sync_delay();
                    self.schedule(
                        d,
                        Event::LockGrant {
                            thread: t,
                            info: grant,
                        },
                    );
                }
            }
            Event::LockGrant { thread, info } => {
                let node = self.prog.threads[thread];
                self.trace(|| format!("lock granted to thread {thread} on {node}"));
                if let Some(info) = info {
                    self.cores[node.index()].apply_grant(&info);
                }
                self.drain(node)?;
                self.resume(thread);
            }
            Event::BarrierArrive { node, info } => {
                self.trace(|| format!("barrier arrival of {node}"));
                if let Some(all) = self.barrier.arrive(node, info) {
                    for n in 0..self.prog.layout.nodes {
                        let d = self.sync_delay();
                        self.schedule(
                            d,
                            Event::BarrierDepart {
                                node: NodeId(n),
                                all: all.clone(),
                            },
                        );
                    }
                }
            }
            Event::BarrierDepart { node, all } => {
                self.trace(|| format!("barrier departure at {node}"));
                self.cores[node.index()].apply_barrier(&all);
                self.drain(node)?;
                self.at_barrier[node.index()] = 0;
                for t in 0..self.states.len() {
                    if self.prog.threads[t] == node && self.states[t] == TState::WaitBarrier {
                        self.resume(t);
                    }
                }
            }
        }
        Ok(())
    }

    /// With the lock cache on: take (`lock`) or release lock `l` for thread `t` on `node`
    /// through the node's lock cache; `false` if that needs the core.
    fn fast_lock(&self, node: NodeId, t: usize, l: u64, lock: bool) -> bool {
        let Some(s) = self.sync.as_ref().filter(|_| self.cfg.lock_cache) else {
            return false;
        };
        let fast = s[node.index()].fast_locks();
        if lock {
            fast.try_lock(l, t as u64)
        } else {
            fast.try_unlock(l, t as u64)
        }
    }

    fn resume(&mut self, t: usize) {
        self.pcs[t] += 1;
        self.states[t] = TState::Ready;
        let d = self.step_delay();
        self.schedule(d, Event::Step(t));
    }

    /// Carry out the node's protocol (and sync) cores' actions until both are quiet.
    fn drain(&mut self, node: NodeId) -> Result<(), SimError> {
        loop {
            let mut busy = self.drain_protocol(node)?;
            if let Some(s) = self.sync.as_mut() {
                let actions: Vec<squall_sync::Action> =
                    std::iter::from_fn(|| s[node.index()].poll_action()).collect();
                for a in actions {
                    busy = true;
                    match a {
                        squall_sync::Action::Send { to, msg } => self.send(node, to, msg, true),
                        squall_sync::Action::Wake { waiter, result } => {
                            result.map_err(|e| SimError::Sync {
                                node,
                                err: e.to_string(),
                            })?;
                            let t = waiter.0 as usize;
                            self.trace(|| format!("sync wakes thread {t} on {node}"));
                            self.resume(t);
                        }
                        squall_sync::Action::ProtocolError { error } => {
                            return Err(SimError::Sync {
                                node,
                                err: error.to_string(),
                            })
                        }
                    }
                }
            }
            if !busy {
                return Ok(());
            }
        }
    }

    /// Carry out the protocol core's actions; true if there were any.
    ///
    /// (`Action::Announced` never comes here: allocations are announced before the run.)
    fn drain_protocol(&mut self, node: NodeId) -> Result<bool, SimError> {
        let mut any = false;
        while let Some(a) = self.cores[node.index()].poll_action() {
            any = true;
            match a {
                Action::Send { to, msg } => self.send(node, to, msg, false),
                Action::Resume { page } => {
                    for t in 0..self.states.len() {
                        if self.prog.threads[t] == node && self.states[t] == TState::Fault(page) {
                            // Retry the same op.
                            self.states[t] = TState::Ready;
                            let d = self.step_delay();
                            self.schedule(d, Event::Step(t));
                        }
                    }
                }
                Action::ReleaseDone { token } => {
                    let (cores, syncs) = (&mut self.cores, &mut self.sync);
                    if let Some(s) = syncs {
                        s[node.index()]
                            .release_done(&mut Cons(cores[node.index()].as_mut()), token)
                            .map_err(|e| SimError::Sync {
                                node,
                                err: e.to_string(),
                            })?;
                        continue;
                    }
                    let Some(r) = self.releases.remove(&token) else {
                        continue;
                    };
                    self.release_done(r)?;
                }
                Action::AtomicDone { token, old, .. } => {
                    if let Some((t, var)) = self.atomics.remove(&token) {
                        self.atomic_olds.entry(var).or_default().push(old);
                        self.resume(t);
                    }
                }
                Action::Announced { token } => {
                    return Err(SimError::Setup(format!(
                        "allocation {token} announced during the run"
                    )))
                }
            }
        }
        Ok(any)
    }

    fn release_done(&mut self, r: ReleaseFor) -> Result<(), SimError> {
        match r {
            ReleaseFor::Unlock { thread, lock } => {
                let node = self.prog.threads[thread];
                self.trace(|| format!("thread {thread} released lock {lock}"));
                if let Some((t, grant)) = self.locks.release(lock, node, &mut self.cores) {
                    let d = self.sync_delay();
                    self.schedule(
                        d,
                        Event::LockGrant {
                            thread: t,
                            info: grant,
                        },
                    );
                }
                self.resume(thread);
            }
            ReleaseFor::Barrier { node } => {
                let info = self.cores[node.index()].barrier_info();
                let d = self.sync_delay();
                self.schedule(d, Event::BarrierArrive { node, info });
            }
        }
        Ok(())
    }

    /// Thread `t` read `got` from var `v`, which the reference execution does not have there.
    fn wrong_read(&self, t: usize, v: usize, got: u64) -> SimError {
        let var = self.prog.vars[v];
        SimError::WrongRead {
            thread: t,
            node: self.prog.threads[t],
            page: var.page.0,
            offset: var.offset,
            got,
            want: self.reference[v],
            pc: self.pcs[t],
        }
    }

    fn fault(&mut self, t: usize, page: PageId, write: bool) -> Result<(), SimError> {
        let node = self.prog.threads[t];
        self.trace(|| {
            format!(
                "thread {t} on {node} {} fault on {page}",
                if write { "write" } else { "read" }
            )
        });
        self.states[t] = TState::Fault(page);
        self.cores[node.index()]
            .handle_fault(page, write)
            .map_err(|err| SimError::Protocol { node, err })?;
        self.drain(node)
    }

    /// Thread `t`'s store to a writable page: at once, or (`late_stores`) landing late; then
    /// the extra delay of the thread's next step (a late store's thread was held up before it:
    /// releases of the node's other threads may run meanwhile).
    fn store(&mut self, mem: &SimMemory, t: usize, page: PageId, offset: usize, x: u64) -> u64 {
        if !self.cfg.late_stores || !self.late_rng.gen_bool(0.5) {
            mem.store(page, offset, x);
            return 0;
        }
        // Now and then no fuse: it lands only when the page loses write access, or at the
        // thread's next step.
        let fuse = if self.late_rng.gen_bool(0.3) {
            u32::MAX
        } else {
            self.late_rng.gen_range(1..4)
        };
        self.trace(|| format!("thread {t}'s store to {page} lands late (fuse {fuse})"));
        mem.store_late(t, page, offset, x, fuse);
        self.late_rng.gen_range(0..40)
    }

    fn step(&mut self, t: usize) -> Result<(), SimError> {
        if self.states[t] != TState::Ready {
            return Ok(());
        }
        let node = self.prog.threads[t];
        self.mems[node.index()].land(t);
        let Some(&op) = self.prog.ops[t].get(self.pcs[t]) else {
            self.states[t] = TState::Done;
            return Ok(());
        };
        let mem = self.mems[node.index()].clone();
        match op {
            Op::Read(v) | Op::Observe(v) | Op::Peek(v) | Op::SpinUntil(v, _) => {
                let var = self.prog.vars[v];
                if mem.access(var.page) == Access::None {
                    return self.fault(t, var.page, false);
                }
                let got = mem.load(var.page, var.offset);
                self.trace(|| format!("thread {t} on {node} reads {got:#x} from var {v}"));
                match op {
                    Op::Read(_)
                        if matches!(self.prog.check, Check::Reference)
                            && got != self.reference[v] =>
                    {
                        return Err(self.wrong_read(t, v, got));
                    }
                    Op::Observe(_) => self.observed[t].push(got),
                    Op::SpinUntil(_, want) if got != want => {
                        // Spin: try again a little later.
                        let d = self.step_delay() + 3;
                        self.schedule(d, Event::Step(t));
                        return Ok(());
                    }
                    _ => {}
                }
                self.pcs[t] += 1;
                let d = self.step_delay();
                self.schedule(d, Event::Step(t));
            }
            Op::Add(v, d) => {
                let var = self.prog.vars[v];
                let mut late = 0;
                match self.loaded[t] {
                    None => {
                        if mem.access(var.page) == Access::None {
                            return self.fault(t, var.page, false);
                        }
                        let got = mem.load(var.page, var.offset);
                        self.trace(|| format!("thread {t} on {node} loads {got:#x} from var {v}"));
                        if got != self.reference[v] {
                            return Err(self.wrong_read(t, v, got));
                        }
                        self.loaded[t] = Some(got);
                    }
                    Some(got) => {
                        if mem.access(var.page) != Access::ReadWrite {
                            return self.fault(t, var.page, true);
                        }
                        let x = got.wrapping_add(d);
                        self.trace(|| format!("thread {t} on {node} stores {x:#x} to var {v}"));
                        late = self.store(&mem, t, var.page, var.offset, x);
                        self.reference[v] = x;
                        self.loaded[t] = None;
                        self.pcs[t] += 1;
                    }
                }
                let d = self.step_delay() + late;
                self.schedule(d, Event::Step(t));
            }
            Op::Write(v, x) => {
                let var = self.prog.vars[v];
                if mem.access(var.page) != Access::ReadWrite {
                    return self.fault(t, var.page, true);
                }
                self.trace(|| format!("thread {t} on {node} writes {x:#x} to var {v}"));
                let late = self.store(&mem, t, var.page, var.offset, x);
                self.reference[v] = x;
                self.pcs[t] += 1;
                let d = self.step_delay() + late;
                self.schedule(d, Event::Step(t));
            }
            Op::Lock(l) if self.sync.is_some() => {
                self.states[t] = TState::WaitLock;
                if self.fast_lock(node, t, l, true) {
                    self.trace(|| format!("thread {t} on {node} takes lock {l} from the cache"));
                    self.resume(t);
                    return Ok(());
                }
                let (cores, syncs) = (&mut self.cores, &mut self.sync);
                if let Some(s) = syncs {
                    let cons = &mut Cons(cores[node.index()].as_mut());
                    s[node.index()].lock(cons, LockId(l), Waiter(t as u64));
                }
                self.drain(node)?;
            }
            Op::Unlock(l) if self.sync.is_some() => {
                self.states[t] = TState::WaitRelease;
                if self.fast_lock(node, t, l, false) {
                    self.trace(|| format!("thread {t} on {node} puts lock {l} back in the cache"));
                    self.resume(t);
                    return Ok(());
                }
                let (cores, syncs) = (&mut self.cores, &mut self.sync);
                if let Some(s) = syncs {
                    let cons = &mut Cons(cores[node.index()].as_mut());
                    s[node.index()].unlock(cons, LockId(l), Waiter(t as u64));
                }
                self.drain(node)?;
            }
            Op::Barrier if self.sync.is_some() => {
                self.states[t] = TState::WaitBarrier;
                let local = self.prog.threads.iter().filter(|&&n| n == node).count() as u32;
                let count = if self.cfg.barrier_total {
                    BarrierCount::Total {
                        total: self.prog.threads.len() as u32,
                    }
                } else {
                    BarrierCount::PerNode { local }
                };
                let (cores, syncs) = (&mut self.cores, &mut self.sync);
                if let Some(s) = syncs {
                    let cons = &mut Cons(cores[node.index()].as_mut());
                    s[node.index()].barrier(cons, BarrierId(0), Waiter(t as u64), count);
                }
                self.drain(node)?;
            }
            Op::Lock(l) => {
                self.states[t] = TState::WaitLock;
                let info = self.cores[node.index()].acquire_info();
                let d = self.sync_delay();
                self.schedule(
                    d,
                    Event::LockRequest {
                        lock: l,
                        thread: t,
                        info,
                    },
                );
            }
            Op::Unlock(l) => {
                self.states[t] = TState::WaitRelease;
                let token = self.next_token;
                self.next_token += 1;
                self.releases
                    .insert(token, ReleaseFor::Unlock { thread: t, lock: l });
                if self.cores[node.index()].begin_release(token) {
                    self.releases.remove(&token);
                    self.release_done(ReleaseFor::Unlock { thread: t, lock: l })?;
                }
                self.drain(node)?;
            }
            Op::Barrier => {
                self.states[t] = TState::WaitBarrier;
                self.at_barrier[node.index()] += 1;
                let local = self.prog.threads.iter().filter(|&&n| n == node).count();
                if self.at_barrier[node.index()] == local {
                    let token = self.next_token;
                    self.next_token += 1;
                    self.releases.insert(token, ReleaseFor::Barrier { node });
                    if self.cores[node.index()].begin_release(token) {
                        self.releases.remove(&token);
                        self.release_done(ReleaseFor::Barrier { node })?;
                    }
                    self.drain(node)?;
                }
            }
            Op::FetchAdd(v) => {
                self.states[t] = TState::WaitAtomic;
                let var = self.prog.vars[v];
                let token = self.next_token;
                self.next_token += 1;
                self.atomics.insert(token, (t, v));
                self.cores[node.index()]
                    .atomic(var.page, var.offset, AtomicOp::FetchAdd(1).into(), token)
                    .map_err(|err| SimError::Protocol { node, err })?;
                self.drain(node)?;
            }
        }
        Ok(())
    }
}

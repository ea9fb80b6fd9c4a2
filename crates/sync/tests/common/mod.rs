//! Deterministic, seeded test harness: N `SyncCore`s, a recording fake `Consistency` per node,
//! a message queue per ordered node pair (FIFO per pair, random delivery order across pairs),
//! releases that complete at once or later (randomly), and application threads written as
//! small state machines (`Program`). A bounded `run` fails with the seed on deadlock/livelock.
#![allow(dead_code, clippy::unwrap_used)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::{Consistency, LockId, NodeId};
use squall_sync::{
    Action, BarrierCount, BarrierId, CondId, FlagId, Outcome, SyncCore, SyncError, Waiter,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

/// One operation a thread asks its node's core for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lock(u64),
    TryLock(u64),
    Unlock(u64),
    DestroyLock(u64),
    Barrier(u64, BarrierCount),
    CondWait(u64, u64),
    Signal(u64),
    Broadcast(u64),
    DestroyCond(u64),
    FlagSet(u64),
    FlagWait(u64),
    FlagClear(u64),
    /// Not a sync operation: the thread just lets others run (an interleaving point).
    Yield,
}

pub type OpResult = Result<Outcome, SyncError>;

/// Shared "memory" the threads' programs read and write inside their critical sections.
#[derive(Debug, Default)]
pub struct Shared {
    pub vars: BTreeMap<String, i64>,
    pub log: Vec<String>,
}

impl Shared {
    pub fn get(&self, k: &str) -> i64 {
        *self.vars.get(k).unwrap_or(&0)
    }
    pub fn set(&mut self, k: &str, v: i64) {
        self.vars.insert(k.to_string(), v);
    }
    pub fn add(&mut self, k: &str, d: i64) -> i64 {
        let v = self.get(k) + d;
        self.set(k, v);
        v
    }
}

/// Who is running a program step.
#[derive(Debug, Clone, Copy)]
pub struct Me {
    pub thread: usize,
    pub node: u16,
}

/// An application thread as a state machine: given the result of its previous operation
/// (`None` at the start), return the next operation, or `None` when finished.
pub trait Program {
    fn step(&mut self, shared: &mut Shared, me: Me, last: Option<OpResult>) -> Option<Op>;
}

/// A program from a closure.
pub struct Prog<F>(pub F);
impl<F: FnMut(&mut Shared, Me, Option<OpResult>) -> Option<Op>> Program for Prog<F> {
    fn step(&mut self, shared: &mut Shared, me: Me, last: Option<OpResult>) -> Option<Op> {
        (self.0)(shared, me, last)
    }
}

/// A fixed list of operations; every result must be `Ok(Done)` unless listed in `expect`.
pub struct Script {
    pub ops: Vec<Op>,
    pub pos: usize,
    pub results: Rc<RefCell<Vec<(usize, Op, OpResult)>>>,
}

impl Script {
    /// A script of `ops`, run in order, with a fresh results log.
    pub fn new(ops: Vec<Op>) -> Self {
        Script {
            ops,
            pos: 0,
            results: Rc::new(RefCell::new(Vec::new())),
        }
    }
}

/// A thread that does nothing until the test issues its operations one by one.
pub fn idle() -> Script {
    Script::new(vec![])
}

impl Program for Script {
    fn step(&mut self, _shared: &mut Shared, me: Me, last: Option<OpResult>) -> Option<Op> {
        if let Some(r) = last {
            self.results
                .borrow_mut()
                .push((me.thread, self.ops[self.pos - 1], r));
        }
        let op = self.ops.get(self.pos).copied();
        self.pos += 1;
        op
    }
}

/// What happened, in global order: consistency hooks and wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    AcquireInfo(Vec<u8>),
    GrantInfo {
        acquirer: Vec<u8>,
        out: Vec<u8>,
    },
    ApplyGrant(Vec<u8>),
    BeginRelease {
        token: u64,
        done: bool,
    },
    ReleaseDone(u64),
    BarrierInfo(Vec<u8>),
    ApplyBarrier(Vec<Vec<u8>>),
    Wake {
        thread: usize,
        op: Op,
        result: OpResult,
    },
}

pub type Trace = Rc<RefCell<Vec<(u16, Ev)>>>;

/// A fake protocol that records every hook call and returns recognisable bytes.
pub struct RecCons {
    node: u16,
    trace: Trace,
    rng: ChaCha8Rng,
    /// Probability that a release completes later instead of at once.
    pub async_release: f64,
    pub pending: Vec<u64>,
    n: u64,
    /// Knowledge model (`World::model`): sync info carries the set of writes the sender knows
    /// (minus its own writes no release has captured yet), instead of recognisable tags.
    pub model: bool,
    /// Writes (ids) visible on this node.
    pub known: std::collections::BTreeSet<u64>,
    /// This node's own writes not captured by a release yet.
    pub unreleased: std::collections::BTreeSet<u64>,
}

impl RecCons {
    fn export(&self) -> Vec<u8> {
        let ids: Vec<String> = self
            .known
            .difference(&self.unreleased)
            .map(|i| i.to_string())
            .collect();
        format!("m:{}", ids.join(",")).into_bytes()
    }
    fn import(&mut self, info: &[u8]) {
        let s = std::str::from_utf8(info).unwrap();
        let ids = s.strip_prefix("m:").unwrap();
        self.known.extend(
            ids.split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.parse::<u64>().unwrap()),
        );
    }
}

impl RecCons {
    fn tag(&mut self, what: &str) -> Vec<u8> {
        self.n += 1;
        format!("{what}:{}:{}", self.node, self.n).into_bytes()
    }
    fn rec(&self, ev: Ev) {
        self.trace.borrow_mut().push((self.node, ev));
    }
}

impl Consistency for RecCons {
    fn acquire_info(&mut self) -> Vec<u8> {
        let v = self.tag("acq");
        self.rec(Ev::AcquireInfo(v.clone()));
        v
    }
    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        let v = if self.model {
            self.export()
        } else {
            self.tag("grant")
        };
        self.rec(Ev::GrantInfo {
            acquirer: acquirer_info.to_vec(),
            out: v.clone(),
        });
        v
    }
    fn apply_grant(&mut self, grant_info: &[u8]) {
        if self.model {
            self.import(grant_info);
        }
        self.rec(Ev::ApplyGrant(grant_info.to_vec()));
    }
    fn begin_release(&mut self, token: u64) -> bool {
        // The release captures every write made so far (grant_info comes after it completed).
        self.unreleased.clear();
        let done = !self.rng.gen_bool(self.async_release);
        if !done {
            self.pending.push(token);
        }
        self.rec(Ev::BeginRelease { token, done });
        done
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        let v = if self.model {
            self.export()
        } else {
            self.tag("bar")
        };
        self.rec(Ev::BarrierInfo(v.clone()));
        v
    }
    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        if self.model {
            for info in all {
                self.import(info);
            }
        }
        self.rec(Ev::ApplyBarrier(all.to_vec()));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TState {
    Ready,
    Blocked(Op),
    Done,
}

struct Thread {
    node: u16,
    prog: Box<dyn Program>,
    state: TState,
    last: Option<OpResult>,
}

/// The simulated job.
pub struct World {
    pub seed: u64,
    pub n: u16,
    pub cores: Vec<SyncCore>,
    pub cons: Vec<RecCons>,
    pub queues: BTreeMap<(u16, u16), VecDeque<Vec<u8>>>,
    threads: Vec<Thread>,
    pub shared: Shared,
    rng: ChaCha8Rng,
    pub trace: Trace,
    /// Which harness thread holds each lock (checked on every grant: mutual exclusion).
    holders: HashMap<u64, usize>,
    /// (lock, thread) in the order threads were granted locks.
    pub lock_order: Vec<(u64, usize)>,
    pub steps: u64,
    /// Prefer delivering messages over running threads with this probability.
    pub deliver_bias: f64,
    /// Every delivered message (from, to, bytes), in delivery order.
    pub deliveries: Vec<(u16, u16, Vec<u8>)>,
    /// Check lock consistency (`set_model`): every critical section writes once at its unlock;
    /// a thread taking a lock must see the lock's last write.
    model: bool,
    next_write: u64,
    last_write: HashMap<u64, u64>,
    /// Lock acquisitions checked against the model.
    pub model_checks: u64,
    /// Model: one write per barrier arrival, in arrival order (made just before it).
    barrier_writes: Vec<u64>,
    /// Model: per blocked barrier thread, how many barrier writes preceded its arrival (all
    /// of them must be visible on its node when it leaves: they were made in its episode or
    /// an earlier one).
    barrier_seen: HashMap<usize, usize>,
    /// Barrier departures checked against the model.
    pub barrier_checks: u64,
}

impl World {
    pub fn new(seed: u64, n: u16, async_release: f64) -> World {
        let trace: Trace = Rc::new(RefCell::new(Vec::new()));
        World {
            seed,
            n,
            cores: (0..n).map(|i| SyncCore::new(NodeId(i), n)).collect(),
            cons: (0..n)
                .map(|i| RecCons {
                    node: i,
                    trace: trace.clone(),
                    rng: ChaCha8Rng::seed_from_u64(seed ^ (u64::from(i) << 32) ^ 0x5eed),
                    async_release,
                    pending: Vec::new(),
                    n: 0,
                    model: false,
                    known: Default::default(),
                    unreleased: Default::default(),
                })
                .collect(),
            queues: BTreeMap::new(),
            threads: Vec::new(),
            shared: Shared::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            trace,
            holders: HashMap::new(),
            lock_order: Vec::new(),
            steps: 0,
            deliver_bias: 0.5,
            deliveries: Vec::new(),
            model: false,
            next_write: 1,
            last_write: HashMap::new(),
            model_checks: 0,
            barrier_writes: Vec::new(),
            barrier_seen: HashMap::new(),
            barrier_checks: 0,
        }
    }

    /// Turn on the knowledge model (before any operation).
    pub fn set_model(&mut self) {
        self.model = true;
        for c in &mut self.cons {
            c.model = true;
        }
    }

    /// Add a thread on `node`; returns its index (also its `Waiter` number).
    pub fn spawn(&mut self, node: u16, prog: impl Program + 'static) -> usize {
        self.threads.push(Thread {
            node,
            prog: Box::new(prog),
            state: TState::Ready,
            last: None,
        });
        self.threads.len() - 1
    }

    pub fn msgs_total(&self) -> u64 {
        self.cores.iter().map(|c| c.stats().messages_total()).sum()
    }

    pub fn msgs_of(&self, kind: &str) -> u64 {
        self.cores.iter().map(|c| c.stats().messages_of(kind)).sum()
    }

    pub fn in_flight(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }

    pub fn all_done(&self) -> bool {
        self.threads.iter().all(|t| t.state == TState::Done)
    }

    /// Make thread `t` issue `op` now (for hand-driven tests; its program is not consulted).
    pub fn issue(&mut self, t: usize, op: Op) {
        let node = self.threads[t].node as usize;
        let w = Waiter(t as u64);
        if let Op::Unlock(l) | Op::CondWait(_, l) = op {
            // The critical section's write, made just before its lock is released.
            if self.model && self.holders.get(&l) == Some(&t) {
                let id = self.next_write;
                self.next_write += 1;
                let cons = &mut self.cons[node];
                cons.known.insert(id);
                cons.unreleased.insert(id);
                self.last_write.insert(l, id);
            }
        }
        if let (true, Op::Barrier(..)) = (self.model, op) {
            let id = self.next_write;
            self.next_write += 1;
            let cons = &mut self.cons[node];
            cons.known.insert(id);
            cons.unreleased.insert(id);
            self.barrier_seen.insert(t, self.barrier_writes.len());
            self.barrier_writes.push(id);
        }
        if let Op::CondWait(_, lock) = op {
            if self.holders.get(&lock) == Some(&t) {
                self.holders.remove(&lock);
            }
        }
        let core = &mut self.cores[node];
        let cons = &mut self.cons[node];
        match op {
            Op::Lock(l) => core.lock(cons, LockId(l), w),
            Op::TryLock(l) => core.trylock(cons, LockId(l), w),
            Op::Unlock(l) => core.unlock(cons, LockId(l), w),
            Op::DestroyLock(l) => core.destroy_lock(LockId(l), w),
            Op::Barrier(b, c) => core.barrier(cons, BarrierId(b), w, c),
            Op::CondWait(c, l) => core.cond_wait(cons, CondId(c), LockId(l), w),
            Op::Signal(c) => core.cond_signal(cons, CondId(c), w),
            Op::Broadcast(c) => core.cond_broadcast(cons, CondId(c), w),
            Op::DestroyCond(c) => core.destroy_cond(CondId(c), w),
            Op::FlagSet(f) => core.flag_set(cons, FlagId(f), w),
            Op::FlagWait(f) => core.flag_wait(cons, FlagId(f), w),
            Op::FlagClear(f) => core.flag_clear(FlagId(f), w),
            Op::Yield => {
                self.threads[t].state = TState::Ready;
                self.threads[t].last = Some(Ok(Outcome::Done));
                return;
            }
        }
        self.threads[t].state = TState::Blocked(op);
        self.drain();
    }

    /// Collect every core's actions (sends into the queues, wakes into the threads).
    pub fn drain(&mut self) {
        for node in 0..self.n {
            while let Some(a) = self.cores[node as usize].poll_action() {
                match a {
                    Action::Send { to, msg } => {
                        assert_ne!(to.0, node, "seed {}: send to self", self.seed);
                        assert!(to.0 < self.n, "seed {}: send to {to}", self.seed);
                        self.queues.entry((node, to.0)).or_default().push_back(msg);
                    }
                    Action::Wake { waiter, result } => self.on_wake(node, waiter, result),
                    Action::ProtocolError { error } => {
                        panic!("seed {}: node {node} reported {error}", self.seed)
                    }
                }
            }
        }
    }

    fn on_wake(&mut self, node: u16, waiter: Waiter, result: OpResult) {
        let seed = self.seed;
        let t = waiter.0 as usize;
        assert_eq!(
            self.threads[t].node, node,
            "seed {seed}: thread {t} woken on the wrong node"
        );
        let TState::Blocked(op) = self.threads[t].state else {
            panic!("seed {seed}: thread {t} woken while not blocked ({result:?})");
        };
        self.trace.borrow_mut().push((
            node,
            Ev::Wake {
                thread: t,
                op,
                result: result.clone(),
            },
        ));
        match (op, &result) {
            (Op::Lock(l) | Op::TryLock(l) | Op::CondWait(_, l), Ok(Outcome::Done)) => {
                if self.model {
                    if let Some(w) = self.last_write.get(&l) {
                        assert!(
                            self.cons[node as usize].known.contains(w),
                            "seed {seed}: thread {t} on node {node} took lock {l} without seeing \
                             its last write {w}"
                        );
                    }
                    self.model_checks += 1;
                }
                if let Some(other) = self.holders.insert(l, t) {
                    panic!(
                        "seed {seed}: mutual exclusion broken on lock {l}: threads {other} and {t}"
                    );
                }
                self.lock_order.push((l, t));
            }
            (Op::Barrier(..), Ok(_)) if self.model => {
                let upto = self.barrier_seen.remove(&t).unwrap_or(0);
                let known = &self.cons[node as usize].known;
                if let Some(w) = self.barrier_writes[..upto]
                    .iter()
                    .find(|w| !known.contains(w))
                {
                    panic!(
                        "seed {seed}: thread {t} on node {node} left a barrier without seeing \
                         write {w}, made at an arrival before its own"
                    );
                }
                self.barrier_checks += 1;
            }
            (Op::Unlock(l), Ok(_)) => {
                assert_eq!(
                    self.holders.remove(&l),
                    Some(t),
                    "seed {seed}: unlock by non-holder accepted"
                );
            }
            _ => {}
        }
        let th = &mut self.threads[t];
        th.state = TState::Ready;
        th.last = Some(result);
    }

    /// One random step; returns false when nothing can happen.
    pub fn step(&mut self) -> bool {
        self.drain();
        let ready: Vec<usize> = (0..self.threads.len())
            .filter(|&t| self.threads[t].state == TState::Ready)
            .collect();
        let pairs: Vec<(u16, u16)> = self
            .queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        let releases: Vec<u16> = (0..self.n)
            .filter(|&i| !self.cons[i as usize].pending.is_empty())
            .collect();
        if ready.is_empty() && pairs.is_empty() && releases.is_empty() {
            return false;
        }
        self.steps += 1;
        let net = !pairs.is_empty() || !releases.is_empty();
        let use_net = net && (ready.is_empty() || self.rng.gen_bool(self.deliver_bias));
        if !use_net {
            let t = ready[self.rng.gen_range(0..ready.len())];
            let me = Me {
                thread: t,
                node: self.threads[t].node,
            };
            let last = self.threads[t].last.take();
            match self.threads[t].prog.step(&mut self.shared, me, last) {
                Some(op) => self.issue(t, op),
                None => self.threads[t].state = TState::Done,
            }
        } else if !pairs.is_empty()
            && (releases.is_empty()
                || self.rng.gen_range(0..pairs.len() + releases.len()) < pairs.len())
        {
            let (from, to) = pairs[self.rng.gen_range(0..pairs.len())];
            let msg = self
                .queues
                .get_mut(&(from, to))
                .unwrap()
                .pop_front()
                .unwrap();
            self.deliveries.push((from, to, msg.clone()));
            let r = self.cores[to as usize].handle_message(
                &mut self.cons[to as usize],
                NodeId(from),
                &msg,
            );
            if let Err(e) = r {
                panic!(
                    "seed {}: node {to} refused a message from node {from}: {e}",
                    self.seed
                );
            }
        } else {
            let node = releases[self.rng.gen_range(0..releases.len())] as usize;
            let p = &mut self.cons[node].pending;
            let token = p.remove(self.rng.gen_range(0..p.len()));
            self.trace
                .borrow_mut()
                .push((node as u16, Ev::ReleaseDone(token)));
            let r = self.cores[node].release_done(&mut self.cons[node], token);
            if let Err(e) = r {
                panic!(
                    "seed {}: release_done({token}) on node {node}: {e}",
                    self.seed
                );
            }
        }
        self.drain();
        true
    }

    /// Run until every thread finished; fail with the seed on deadlock or after `max_steps`.
    pub fn run(&mut self, max_steps: u64) {
        while !self.all_done() {
            assert!(
                self.steps < max_steps,
                "seed {}: livelock: {max_steps} steps without finishing",
                self.seed
            );
            if !self.step() {
                let blocked: Vec<String> = self
                    .threads
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| match t.state {
                        TState::Blocked(op) => {
                            Some(format!("thread {i} on node {}: {op:?}", t.node))
                        }
                        _ => None,
                    })
                    .collect();
                panic!("seed {}: deadlock, blocked: {blocked:?}", self.seed);
            }
        }
        // Let trailing messages (none should be needed) drain.
        while self.step() {}
        assert_eq!(self.in_flight(), 0);
    }

    /// Run until no step is possible (for tests that expect threads to stay blocked).
    pub fn settle(&mut self) {
        while self.step() {
            assert!(
                self.steps < 10_000_000,
                "seed {}: settle did not settle",
                self.seed
            );
        }
    }

    /// Deliver the oldest message from `from` to `to`; false if there is none.
    pub fn deliver(&mut self, from: u16, to: u16) -> bool {
        let Some(msg) = self.queues.get_mut(&(from, to)).and_then(|q| q.pop_front()) else {
            return false;
        };
        self.deliveries.push((from, to, msg.clone()));
        let r =
            self.cores[to as usize].handle_message(&mut self.cons[to as usize], NodeId(from), &msg);
        if let Err(e) = r {
            panic!("node {to} refused a message from node {from}: {e}");
        }
        self.drain();
        true
    }

    /// Deliver messages in pair order and complete releases until nothing is left (no threads run).
    pub fn quiesce(&mut self) {
        loop {
            self.drain();
            let pair = self
                .queues
                .iter()
                .find(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k);
            if let Some((f, t)) = pair {
                self.deliver(f, t);
                continue;
            }
            let node = (0..self.n as usize).find(|&i| !self.cons[i].pending.is_empty());
            if let Some(node) = node {
                let token = self.cons[node].pending.remove(0);
                self.trace
                    .borrow_mut()
                    .push((node as u16, Ev::ReleaseDone(token)));
                self.cores[node]
                    .release_done(&mut self.cons[node], token)
                    .unwrap();
                continue;
            }
            break;
        }
        self.drain();
    }

    /// The last result of thread `t` (None while blocked or before its first operation).
    pub fn last(&self, t: usize) -> Option<&OpResult> {
        self.threads[t].last.as_ref()
    }

    pub fn is_blocked(&self, t: usize) -> bool {
        matches!(self.threads[t].state, TState::Blocked(_))
    }

    pub fn is_done(&self, t: usize) -> bool {
        self.threads[t].state == TState::Done
    }
}

/// Seeds to run: `SYNC_SEEDS` (count) overrides the default.
pub fn seeds(default: u64) -> impl Iterator<Item = u64> {
    let n = std::env::var("SYNC_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    0..n
}

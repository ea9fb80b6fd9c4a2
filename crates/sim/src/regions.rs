//! The CRL region protocol (`squall-regions`) in the simulator: N region cores over the
//! virtual network, simulated application threads running random bracket programs, checked
//! against a sequential reference.
//!
//! The check is the model's own rule: at every moment a region has either one write bracket
//! open in the whole job and no read bracket, or any number of read brackets and no writer;
//! every bracket, when it starts, sees exactly the bytes the last ended write bracket left
//! (the reference copy). Writers fill the whole region with a pattern of their own, so a
//! stale or torn copy anywhere is caught.
//!
//! The core assumes exactly-once FIFO delivery per pair (the backbone's guarantee): seeds run
//! either over per-pair FIFO delivery with random delays (pairs overtake each other), or over
//! `squall-net`'s real reliable-datagram core on a network that loses, duplicates and
//! reorders datagrams (`crate::lossy`). Messages a node sends itself go through a local FIFO,
//! as the real endpoint's do. Owns this world; must not touch the page protocols.

use crate::lossy::LossyNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::NodeId;
use squall_regions::{Action, RegionId, RegionMemory, Regions};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Why a seed failed.
#[derive(Debug, thiserror::Error)]
pub enum RegionSimError {
    #[error("node {node}: protocol error: {err}")]
    Protocol { node: u16, err: String },
    #[error("node {node} thread {thread}: {what}")]
    Check {
        node: u16,
        thread: usize,
        what: String,
    },
    #[error("deadlock: threads not done when the network went quiet ({0})")]
    Deadlock(String),
    #[error("livelock: over {0} events")]
    Livelock(u64),
}

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct RegionSimReport {
    pub events: u64,
    pub messages: u64,
    pub read_misses: u64,
    pub write_misses: u64,
    pub invalidations: u64,
    pub recalls: u64,
    pub retransmissions: u64,
}

/// The node's copies (what the runtime's buffers are).
#[derive(Default)]
struct Mem {
    copies: HashMap<RegionId, Vec<u8>>,
}

impl RegionMemory for Mem {
    fn ensure(&mut self, rid: RegionId, size: usize) {
        self.copies.entry(rid).or_insert_with(|| vec![0; size]);
    }
    fn install(&mut self, rid: RegionId, data: &[u8]) {
        if let Some(c) = self.copies.get_mut(&rid) {
            c.copy_from_slice(data);
        }
    }
    fn read_into(&self, rid: RegionId, out: &mut [u8]) {
        if let Some(c) = self.copies.get(&rid) {
            out.copy_from_slice(c);
        }
    }
    fn forget(&mut self, rid: RegionId) {
        self.copies.remove(&rid);
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Read(usize),
    Write(usize),
    Flush(usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Waiting for the map of every region.
    Mapping,
    Idle,
    /// Waiting for a bracket to start.
    Starting,
    /// Inside a bracket.
    Inside,
    Done,
}

struct Thread {
    node: u16,
    ops: Vec<Op>,
    next: usize,
    phase: Phase,
    maps_left: usize,
}

enum Event {
    Step(usize),
    Deliver { from: u16, to: u16, msg: Vec<u8> },
    Datagram { to: NodeId, data: Vec<u8> },
    NetTimer(u16),
}

/// Run one seed of the region world.
pub fn run_seed(seed: u64, trace: bool) -> Result<RegionSimReport, RegionSimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x2e61_0000_c71e_0000);
    let nodes: u16 = rng.gen_range(2..=4);
    let lossy = rng
        .gen_bool(0.5)
        .then(|| (rng.gen_range(0.0..0.2), rng.gen_range(0.0..0.1)));
    let nregions = rng.gen_range(1..=3);
    let mut w = World {
        rng,
        trace,
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        last: HashMap::new(),
        cores: (0..nodes).map(|n| Regions::new(NodeId(n), nodes)).collect(),
        mems: (0..nodes).map(|_| Mem::default()).collect(),
        net: lossy.map(|(l, d)| LossyNet::new(nodes, l, d)),
        timer_at: vec![None; usize::from(nodes)],
        threads: Vec::new(),
        rids: Vec::new(),
        reference: Vec::new(),
        readers: Vec::new(),
        writer: Vec::new(),
        events_run: 0,
        last_progress: 0,
    };
    for _ in 0..nregions {
        let home = w.rng.gen_range(0..nodes);
        let size = match w.rng.gen_range(0..4) {
            0 => w.rng.gen_range(1..8),
            1 | 2 => w.rng.gen_range(8..200),
            _ => w.rng.gen_range(1000..5000),
        };
        let rid = w.cores[usize::from(home)].create(size);
        w.rids.push(rid);
        w.reference.push(vec![0; size]);
        w.readers.push(0);
        w.writer.push(None);
    }
    for n in 0..nodes {
        for _ in 0..w.rng.gen_range(1..=2) {
            let len = w.rng.gen_range(3..12);
            let ops = (0..len)
                .map(|_| {
                    let r = w.rng.gen_range(0..nregions);
                    match w.rng.gen_range(0..10) {
                        0..=4 => Op::Read(r),
                        5..=8 => Op::Write(r),
                        _ => Op::Flush(r),
                    }
                })
                .collect();
            w.threads.push(Thread {
                node: n,
                ops,
                next: 0,
                phase: Phase::Mapping,
                maps_left: nregions,
            });
        }
    }
    w.run()
}

struct World {
    rng: ChaCha8Rng,
    trace: bool,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Event>,
    /// Last delivery time per (from, to): per-pair FIFO.
    last: HashMap<(u16, u16), u64>,
    cores: Vec<Regions>,
    mems: Vec<Mem>,
    net: Option<LossyNet>,
    timer_at: Vec<Option<u64>>,
    threads: Vec<Thread>,
    rids: Vec<RegionId>,
    reference: Vec<Vec<u8>>,
    /// Read brackets open per region, job-wide.
    readers: Vec<u32>,
    /// The thread with the region's write bracket open.
    writer: Vec<Option<usize>>,
    events_run: u64,
    last_progress: u64,
}

const MAX_EVENTS: u64 = 400_000;

impl World {
    fn schedule(&mut self, delay: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + delay, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn run(mut self) -> Result<RegionSimReport, RegionSimError> {
        // Every thread maps every region first (waiter = thread index).
        for t in 0..self.threads.len() {
            let node = usize::from(self.threads[t].node);
            for i in 0..self.rids.len() {
                let rid = self.rids[i];
                self.cores[node].map(t as u64, rid, &mut self.mems[node]);
            }
            self.drain(node as u16)?;
        }
        while let Some(Reverse((time, seq))) = self.queue.pop() {
            self.events_run += 1;
            if self.events_run > MAX_EVENTS {
                return Err(RegionSimError::Livelock(self.events_run));
            }
            self.now = time;
            if self.threads.iter().all(|t| t.phase == Phase::Done) {
                break;
            }
            if self.net.is_some() && self.now > self.last_progress + 200_000 {
                break;
            }
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            self.handle(ev)?;
        }
        if let Some(t) = self.threads.iter().position(|t| t.phase != Phase::Done) {
            let th = &self.threads[t];
            return Err(RegionSimError::Deadlock(format!(
                "thread {t} of node {} at op {} {:?} ({:?})",
                th.node,
                th.next,
                th.ops.get(th.next),
                th.phase
            )));
        }
        let mut r = RegionSimReport {
            events: self.events_run,
            retransmissions: self.net.as_ref().map_or(0, |n| n.retransmissions()),
            ..Default::default()
        };
        for c in &self.cores {
            let s = c.stats();
            r.messages += s.messages_sent;
            r.read_misses += s.read_misses;
            r.write_misses += s.write_misses;
            r.invalidations += s.invalidations;
            r.recalls += s.recalls;
        }
        Ok(r)
    }

    fn handle(&mut self, ev: Event) -> Result<(), RegionSimError> {
        match ev {
            Event::Step(t) => self.step(t),
            Event::Deliver { from, to, msg } => {
                self.last_progress = self.now;
                if self.trace {
                    println!(
                        "{:>8} {from} -> {to}: {:?}",
                        self.now,
                        squall_regions::Msg::decode(NodeId(from), &msg)
                    );
                }
                let n = usize::from(to);
                self.cores[n]
                    .on_message(NodeId(from), &msg, &mut self.mems[n])
                    .map_err(|e| RegionSimError::Protocol {
                        node: to,
                        err: e.to_string(),
                    })?;
                self.drain(to)
            }
            Event::Datagram { to, data } => {
                let mut got = Vec::new();
                if let Some(net) = self.net.as_mut() {
                    net.datagram(self.now, to, &data);
                    while let Some(ev) = net.poll_event(to) {
                        got.push(ev);
                    }
                }
                self.pump_net(to.0);
                for ev in got {
                    match ev {
                        squall_net::udp_core::CoreEvent::Deliver { src, payload, .. } => self
                            .handle(Event::Deliver {
                                from: src.0,
                                to: to.0,
                                msg: payload.to_vec(),
                            })?,
                        other => {
                            return Err(RegionSimError::Protocol {
                                node: to.0,
                                err: format!("network: {other:?}"),
                            })
                        }
                    }
                }
                Ok(())
            }
            Event::NetTimer(node) => {
                let i = usize::from(node);
                if self.timer_at[i] == Some(self.now) {
                    self.timer_at[i] = None;
                }
                let mut due = false;
                if let Some(net) = self.net.as_mut() {
                    if net.next_timer(NodeId(node)).is_some_and(|t| t <= self.now) {
                        net.timeout(self.now, NodeId(node));
                        due = true;
                    }
                }
                if due || self.timer_at[i].is_none() {
                    self.pump_net(node);
                }
                Ok(())
            }
        }
    }

    /// Send one message: to oneself through a local FIFO; to others per-pair FIFO with random
    /// delays, or through the reliable-datagram layer over the lossy network.
    fn send(&mut self, from: u16, to: u16, msg: Vec<u8>) {
        if from != to {
            if let Some(net) = self.net.as_mut() {
                let _ = net.send(self.now, NodeId(from), NodeId(to), false, msg);
                self.pump_net(from);
                return;
            }
        }
        let d = self.rng.gen_range(1..20);
        let last = self.last.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now + d).max(last + 1);
        self.last.insert((from, to), at);
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events
            .insert(self.seq, Event::Deliver { from, to, msg });
    }

    fn pump_net(&mut self, node: u16) {
        let mut out = Vec::new();
        let mut timer = None;
        let (mut loss, mut dup) = (0.0, 0.0);
        if let Some(net) = self.net.as_mut() {
            while let Some(t) = net.poll_transmit(NodeId(node)) {
                out.push(t);
            }
            timer = net.next_timer(NodeId(node));
            (loss, dup) = (net.loss, net.dup);
        }
        for t in out {
            if self.rng.gen_bool(loss) {
                continue;
            }
            let copies = if self.rng.gen_bool(dup) { 2 } else { 1 };
            for _ in 0..copies {
                let d = self.rng.gen_range(1..20);
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
            let slot = &mut self.timer_at[usize::from(node)];
            if slot.is_none_or(|s| at < s) {
                *slot = Some(at);
                let d = at - self.now;
                self.schedule(d, Event::NetTimer(node));
            }
        }
    }

    /// Carry out `node`'s core actions.
    fn drain(&mut self, node: u16) -> Result<(), RegionSimError> {
        while let Some(a) = self.cores[usize::from(node)].poll_action() {
            match a {
                Action::Send { to, msg } => self.send(node, to.0, msg),
                Action::Complete { waiter, result } => {
                    let t = waiter as usize;
                    if let Err(e) = result {
                        return Err(self.fail(t, format!("call failed: {e}")));
                    }
                    self.completed(t)?;
                }
            }
        }
        Ok(())
    }

    fn fail(&self, t: usize, what: String) -> RegionSimError {
        RegionSimError::Check {
            node: self.threads[t].node,
            thread: t,
            what,
        }
    }

    /// A call of thread `t` completed.
    fn completed(&mut self, t: usize) -> Result<(), RegionSimError> {
        self.last_progress = self.now;
        match self.threads[t].phase {
            Phase::Mapping => {
                self.threads[t].maps_left -= 1;
                if self.threads[t].maps_left == 0 {
                    self.threads[t].phase = Phase::Idle;
                    let d = self.rng.gen_range(1..10);
                    self.schedule(d, Event::Step(t));
                }
                Ok(())
            }
            Phase::Starting => {
                let op = self.threads[t].ops[self.threads[t].next];
                let (Op::Read(r) | Op::Write(r)) = op else {
                    return Err(self.fail(t, "a flush completed as a bracket".into()));
                };
                let node = usize::from(self.threads[t].node);
                if self.writer[r].is_some() {
                    return Err(self.fail(
                        t,
                        format!("{op:?} started while thread {:?} writes", self.writer[r]),
                    ));
                }
                if matches!(op, Op::Write(_)) {
                    if self.readers[r] > 0 {
                        return Err(
                            self.fail(t, format!("write started while {} read", self.readers[r]))
                        );
                    }
                    self.writer[r] = Some(t);
                } else {
                    self.readers[r] += 1;
                }
                let got = self.mems[node].copies.get(&self.rids[r]);
                if got != Some(&self.reference[r]) {
                    return Err(self.fail(
                        t,
                        format!(
                            "{op:?} saw a copy other than the last write's (first bytes {:?}, want {:?})",
                            got.map(|g| &g[..g.len().min(8)]),
                            &self.reference[r][..self.reference[r].len().min(8)]
                        ),
                    ));
                }
                self.threads[t].phase = Phase::Inside;
                let d = self.rng.gen_range(1..30);
                self.schedule(d, Event::Step(t));
                Ok(())
            }
            other => Err(self.fail(t, format!("completion while {other:?}"))),
        }
    }

    fn step(&mut self, t: usize) -> Result<(), RegionSimError> {
        self.last_progress = self.now;
        let node = self.threads[t].node;
        let n = usize::from(node);
        let next = self.threads[t].next;
        match self.threads[t].phase {
            Phase::Idle => {
                let Some(&op) = self.threads[t].ops.get(next) else {
                    self.threads[t].phase = Phase::Done;
                    return Ok(());
                };
                match op {
                    Op::Read(r) | Op::Write(r) => {
                        self.threads[t].phase = Phase::Starting;
                        let rid = self.rids[r];
                        if matches!(op, Op::Read(_)) {
                            self.cores[n].start_read(t as u64, rid, &mut self.mems[n]);
                        } else {
                            self.cores[n].start_write(t as u64, rid, &mut self.mems[n]);
                        }
                    }
                    Op::Flush(r) => {
                        // Busy (another thread of the node is in a bracket) is a valid answer.
                        let _ = self.cores[n].flush(self.rids[r], &mut self.mems[n]);
                        self.threads[t].next += 1;
                        let d = self.rng.gen_range(1..10);
                        self.schedule(d, Event::Step(t));
                    }
                }
                self.drain(node)
            }
            Phase::Inside => {
                let op = self.threads[t].ops[next];
                let rid;
                match op {
                    Op::Write(r) => {
                        rid = self.rids[r];
                        let stamp = (self.now as u8) ^ (t as u8).wrapping_mul(31);
                        let copy = self.mems[n].copies.get_mut(&rid).ok_or_else(|| {
                            RegionSimError::Check {
                                node,
                                thread: t,
                                what: "no copy inside a write bracket".into(),
                            }
                        })?;
                        for (i, b) in copy.iter_mut().enumerate() {
                            *b = stamp.wrapping_add(i as u8);
                        }
                        self.reference[r] = copy.clone();
                        self.writer[r] = None;
                        self.cores[n].end_write(rid, &mut self.mems[n])
                    }
                    Op::Read(r) => {
                        rid = self.rids[r];
                        self.readers[r] -= 1;
                        self.cores[n].end_read(rid, &mut self.mems[n])
                    }
                    Op::Flush(_) => return Err(self.fail(t, "inside a flush".into())),
                }
                .map_err(|e| RegionSimError::Protocol {
                    node,
                    err: e.to_string(),
                })?;
                self.threads[t].next += 1;
                self.threads[t].phase = Phase::Idle;
                let d = self.rng.gen_range(1..10);
                self.schedule(d, Event::Step(t));
                self.drain(node)
            }
            other => Err(self.fail(t, format!("stepped while {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_few_seeds() {
        for s in 0..300 {
            if let Err(e) = super::run_seed(s, false) {
                panic!("seed {s}: {e}");
            }
        }
    }
}

//! The one-sided engine (`squall-gptr`) in the simulator: N engines over the lossy network
//! (the real reliable-datagram core under loss, duplication, delay and reordering: the engine
//! relies on the backbone's exactly-once FIFO delivery per pair, as in a real node), running a
//! random Split-C style program checked against a sequential reference.
//!
//! The program runs in phases; each phase every node issues random puts (single and bulk),
//! one-way stores, gets, remote atomic adds and operations on addresses that are not
//! symmetric, then `sync()` and `all_store_sync()`. A race-free program by construction: in
//! phase p the 4-word blocks of region A with `(block + p)` even are written, each by one
//! owner per target, and those with `(block + p)` odd are only read; region B takes atomic
//! adds from everyone. So the reference is sequential: every write applied at issue time,
//! every get expects the reference value at issue time, every stray operation expects a
//! refusal naming the target and the address, and at the end every node's memory must equal
//! the reference. Owns this world; must not touch the page protocols.
use crate::lossy::LossyNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::NodeId;
use squall_gptr::{
    Action, AtomicKind, Engine, GptrError, OpId, Outcome, SymHeap, SymMemory, Width,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const BASE: u64 = 0x5800_0000_0000;
/// Region A: words written by puts and stores, read by gets.
const A_WORDS: usize = 32;
/// Region B: words taking atomic adds.
const B_WORDS: usize = 8;
const ARENA: usize = 512;
const A_OFF: u64 = 0;
const B_OFF: u64 = 256;
/// An address inside the arena that no allocation covers.
const STRAY: u64 = BASE + 400;

/// What one seed did.
#[derive(Debug, Default, Clone)]
pub struct GptrReport {
    pub nodes: u16,
    pub events: u64,
    pub ops: u64,
    pub refused: u64,
    pub retransmissions: u64,
}

struct Mem {
    bytes: Vec<u8>,
    heap: SymHeap,
}

impl Mem {
    fn new() -> Self {
        let mut heap = SymHeap::new(ARENA as u64);
        // The same allocations on every node, as shmem_malloc would make them.
        let a = heap.alloc(A_WORDS as u64 * 8, 16);
        let b = heap.alloc(B_WORDS as u64 * 8, 256);
        debug_assert_eq!((a, b), (Ok(A_OFF), Ok(B_OFF)));
        Mem {
            bytes: vec![0; ARENA],
            heap,
        }
    }
    fn range(&self, addr: u64, len: u64) -> Result<std::ops::Range<usize>, String> {
        let off = addr.checked_sub(BASE).ok_or("below the arena")?;
        if !self.heap.contains(off, len) {
            return Err(format!(
                "no live allocation covers {len} bytes at {addr:#x}"
            ));
        }
        Ok(off as usize..(off + len) as usize)
    }
    fn word(&self, off: u64) -> u64 {
        let o = off as usize;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[o..o + 8]);
        u64::from_le_bytes(b)
    }
}

impl SymMemory for Mem {
    fn check(&mut self, addr: u64, len: u64) -> Result<(), String> {
        self.range(addr, len).map(drop)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), String> {
        let r = self.range(addr, out.len() as u64)?;
        out.copy_from_slice(&self.bytes[r]);
        Ok(())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        let r = self.range(addr, data.len() as u64)?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
    fn atomic(
        &mut self,
        addr: u64,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> Result<u64, String> {
        let r = self.range(addr, width.bytes())?;
        let n = r.len();
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&self.bytes[r.clone()]);
        let old = u64::from_le_bytes(w);
        self.bytes[r].copy_from_slice(&kind.apply(width, old, a, b).to_le_bytes()[..n]);
        Ok(old)
    }
}

/// One operation of the program.
#[derive(Debug, Clone)]
enum Op {
    Put {
        to: u16,
        word: usize,
        vals: Vec<u64>,
    },
    Store {
        to: u16,
        word: usize,
        vals: Vec<u64>,
    },
    Get {
        from: u16,
        word: usize,
        len: usize,
    },
    Add {
        to: u16,
        word: usize,
        v: u64,
    },
    Stray {
        to: u16,
        kind: u8,
    },
}

/// One node's operations in one phase, each with the data a get must return.
type Phase = Vec<(Op, Option<Vec<u64>>)>;

/// What a completion must be.
enum Expect {
    Done,
    Data(Vec<u64>),
    /// An atomic's old value: recorded, checked per word at the end (all distinct).
    Old(u16, usize),
    Refused(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Issue,
    Sync(u64),
    AllStore(u64),
    Finished,
}

struct SimNode {
    engine: Engine,
    mem: Mem,
    phase: usize,
    next: usize,
    stage: Stage,
    expect: HashMap<OpId, Expect>,
    stray_stores: u64,
}

enum Ev {
    Step(u16),
    Datagram { to: NodeId, data: Vec<u8> },
    Timer(NodeId),
}

/// Run seed `seed`; `Err` describes the first wrong outcome.
pub fn run_gptr_seed(seed: u64, trace: bool) -> Result<GptrReport, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6770_7472);
    let n: u16 = rng.gen_range(2..=4);
    let phases = rng.gen_range(2..=5);
    let loss = if rng.gen_bool(0.5) {
        rng.gen_range(0.0..0.25)
    } else {
        0.0
    };
    let dup = rng.gen_range(0.0..0.1);
    // The program and the reference.
    let mut reference_a = vec![vec![0u64; A_WORDS]; usize::from(n)];
    let mut reference_b = vec![vec![0u64; B_WORDS]; usize::from(n)];
    let mut programs: Vec<Vec<Phase>> = vec![Vec::new(); usize::from(n)];
    for p in 0..phases {
        // Issue order within a phase is per node; the reference applies each node's writes
        // in its own order (no two nodes write one word in a phase).
        for me in 0..n {
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(0..=14) {
                let t = rng.gen_range(0..n);
                let blocks = A_WORDS / 4;
                let op = match rng.gen_range(0..10) {
                    0..=4 => {
                        // A writable block of t this node owns in phase p, if any.
                        let mine: Vec<usize> = (0..blocks)
                            .filter(|b| {
                                (b + p) % 2 == 0
                                    && (b + usize::from(t) + p) % usize::from(n) == usize::from(me)
                            })
                            .collect();
                        if mine.is_empty() {
                            continue;
                        }
                        let b = mine[rng.gen_range(0..mine.len())];
                        let start = rng.gen_range(0..4);
                        let len = rng.gen_range(1..=4 - start);
                        let vals: Vec<u64> = (0..len).map(|_| rng.gen()).collect();
                        let word = b * 4 + start;
                        if rng.gen_bool(0.5) {
                            Op::Put { to: t, word, vals }
                        } else {
                            Op::Store { to: t, word, vals }
                        }
                    }
                    5..=6 => {
                        let frozen: Vec<usize> = (0..blocks).filter(|b| (b + p) % 2 == 1).collect();
                        let b = frozen[rng.gen_range(0..frozen.len())];
                        let start = rng.gen_range(0..4);
                        Op::Get {
                            from: t,
                            word: b * 4 + start,
                            len: rng.gen_range(1..=4 - start),
                        }
                    }
                    7..=8 => Op::Add {
                        to: t,
                        word: rng.gen_range(0..B_WORDS),
                        v: rng.gen_range(1..1000),
                    },
                    _ => Op::Stray {
                        to: t,
                        kind: rng.gen_range(0..3),
                    },
                };
                let expect = match &op {
                    Op::Put { to, word, vals } | Op::Store { to, word, vals } => {
                        reference_a[usize::from(*to)][*word..*word + vals.len()]
                            .copy_from_slice(vals);
                        None
                    }
                    Op::Get { from, word, len } => {
                        Some(reference_a[usize::from(*from)][*word..*word + *len].to_vec())
                    }
                    Op::Add { to, word, v } => {
                        reference_b[usize::from(*to)][*word] += v;
                        None
                    }
                    Op::Stray { .. } => None,
                };
                ops.push((op, expect));
            }
            programs[usize::from(me)].push(ops);
        }
    }
    // Gets expect the values at the start of their phase plus nothing written in it: the
    // reference above was updated in program order across nodes, so recompute the expected
    // values per phase from the writes of earlier phases only.
    let mut snapshot = vec![vec![0u64; A_WORDS]; usize::from(n)];
    for p in 0..phases {
        for prog in programs.iter_mut() {
            for (op, exp) in prog[p].iter_mut() {
                if let Op::Get { from, word, len } = op {
                    *exp = Some(snapshot[usize::from(*from)][*word..*word + *len].to_vec());
                }
            }
        }
        for prog in &programs {
            for (op, _) in &prog[p] {
                if let Op::Put { to, word, vals } | Op::Store { to, word, vals } = op {
                    snapshot[usize::from(*to)][*word..*word + vals.len()].copy_from_slice(vals);
                }
            }
        }
    }

    let mut net = LossyNet::new(n, loss, dup);
    let mut nodes: Vec<SimNode> = (0..n)
        .map(|i| SimNode {
            engine: Engine::new(NodeId(i), n),
            mem: Mem::new(),
            phase: 0,
            next: 0,
            stage: Stage::Issue,
            expect: HashMap::new(),
            stray_stores: 0,
        })
        .collect();
    let mut olds: HashMap<(u16, usize), Vec<u64>> = HashMap::new();
    let mut queue: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut events: HashMap<u64, Ev> = HashMap::new();
    let mut seq = 0u64;
    let mut report = GptrReport {
        nodes: n,
        ..Default::default()
    };
    let mut now = 0u64;
    let mut timer_at: Vec<Option<u64>> = vec![None; usize::from(n)];
    macro_rules! schedule {
        ($d:expr, $ev:expr) => {{
            seq += 1;
            queue.push(Reverse((now + $d, seq)));
            events.insert(seq, $ev);
        }};
    }
    for i in 0..n {
        schedule!(rng.gen_range(1..5), Ev::Step(i));
    }
    while let Some(Reverse((t, s))) = queue.pop() {
        now = t;
        report.events += 1;
        if report.events > 2_000_000 {
            return Err(format!(
                "seed {seed}: no end after {} events",
                report.events
            ));
        }
        let Some(ev) = events.remove(&s) else {
            continue;
        };
        // Messages to put on the wire, from which node.
        let mut touched: Vec<u16> = Vec::new();
        match ev {
            Ev::Step(i) => {
                let nd = &mut nodes[usize::from(i)];
                match nd.stage {
                    Stage::Issue => {
                        if let Some((op, exp)) =
                            programs[usize::from(i)][nd.phase].get(nd.next).cloned()
                        {
                            nd.next += 1;
                            report.ops += 1;
                            if trace {
                                println!("t={now} {i} phase {} {op:?}", nd.phase);
                            }
                            let m = &mut nd.mem;
                            let e = &mut nd.engine;
                            let addr_a = |w: usize| BASE + A_OFF + 8 * w as u64;
                            let bytes = |v: &[u64]| {
                                v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
                            };
                            let r: Result<Option<(OpId, Expect)>, GptrError> = match &op {
                                Op::Put { to, word, vals } => e
                                    .put(m, NodeId(*to), addr_a(*word), &bytes(vals))
                                    .map(|o| Some((o, Expect::Done))),
                                Op::Store { to, word, vals } => e
                                    .store(m, NodeId(*to), addr_a(*word), &bytes(vals))
                                    .map(|()| None),
                                Op::Get { from, word, len } => e
                                    .get(m, NodeId(*from), addr_a(*word), 8 * *len as u64)
                                    .map(|o| {
                                        Some((o, Expect::Data(exp.clone().unwrap_or_default())))
                                    }),
                                Op::Add { to, word, v } => e
                                    .atomic(
                                        m,
                                        NodeId(*to),
                                        BASE + B_OFF + 8 * *word as u64,
                                        Width::W8,
                                        AtomicKind::Add,
                                        *v,
                                        0,
                                    )
                                    .map(|o| Some((o, Expect::Old(*to, *word)))),
                                Op::Stray { to, kind: 0 } => e
                                    .put(m, NodeId(*to), STRAY, &[1, 2, 3])
                                    .map(|o| Some((o, Expect::Refused(*to)))),
                                Op::Stray { to, kind: 1 } => e
                                    .get(m, NodeId(*to), STRAY, 16)
                                    .map(|o| Some((o, Expect::Refused(*to)))),
                                Op::Stray { to, .. } => {
                                    // A store to a wrong address: refused at the target and
                                    // reported at the issuer's next sync (at once if local).
                                    match e.store(m, NodeId(*to), STRAY, &[9; 8]) {
                                        Ok(()) => {
                                            nd.stray_stores += 1;
                                            Ok(None)
                                        }
                                        Err(GptrError::Refused { node, addr, .. })
                                            if node.0 == i && addr == STRAY =>
                                        {
                                            Ok(None)
                                        }
                                        Err(x) => Err(x),
                                    }
                                }
                            };
                            match r {
                                Ok(Some((o, x))) => {
                                    nd.expect.insert(o, x);
                                }
                                Ok(None) => {}
                                Err(x) => {
                                    return Err(format!(
                                        "seed {seed}: node {i} could not issue {op:?}: {x}"
                                    ))
                                }
                            }
                        } else {
                            nd.stage = Stage::Sync(nd.engine.watermark());
                        }
                        touched.push(i);
                        schedule!(rng.gen_range(1..4), Ev::Step(i));
                    }
                    _ => touched.push(i),
                }
            }
            Ev::Datagram { to, data } => {
                net.datagram(now, to, &data);
                while let Some(ev) = net.poll_event(to) {
                    match ev {
                        squall_net::udp_core::CoreEvent::Deliver { src, payload, .. } => {
                            let nd = &mut nodes[to.index()];
                            nd.engine
                                .on_message(&mut nd.mem, src, &payload)
                                .map_err(|x| format!("seed {seed}: node {to}: {x}"))?;
                        }
                        other => return Err(format!("seed {seed}: network of {to}: {other:?}")),
                    }
                }
                touched.push(to.0);
            }
            Ev::Timer(node) => {
                if timer_at[node.index()] == Some(now) {
                    timer_at[node.index()] = None;
                }
                if net.next_timer(node).is_some_and(|x| x <= now) {
                    net.timeout(now, node);
                }
                touched.push(node.0);
            }
        }
        // Drive every touched node: its actions, its stage, its datagrams and timer.
        while let Some(i) = touched.pop() {
            let nd = &mut nodes[usize::from(i)];
            while let Some(a) = nd.engine.poll_action() {
                match a {
                    Action::Send { to, bytes } => {
                        net.send(now, NodeId(i), to, false, bytes)
                            .map_err(|x| format!("seed {seed}: {x}"))?;
                    }
                    Action::StoresChanged => {}
                    Action::Complete { op, outcome } => {
                        let want = nd.expect.remove(&op).ok_or_else(|| {
                            format!("seed {seed}: node {i}: unexpected completion {op:?}")
                        })?;
                        match (want, outcome) {
                            (Expect::Done, Outcome::Done) => {}
                            (Expect::Data(w), Outcome::Data(d)) => {
                                let got: Vec<u64> = d
                                    .chunks_exact(8)
                                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                                    .collect();
                                if got != w {
                                    return Err(format!("seed {seed}: node {i} phase {} got {got:?}, reference {w:?}", nd.phase));
                                }
                            }
                            (Expect::Old(t, w), Outcome::Value(v)) => {
                                olds.entry((t, w)).or_default().push(v)
                            }
                            (
                                Expect::Refused(t),
                                Outcome::Failed(GptrError::Refused { node, addr, .. }),
                            ) if node.0 == t && addr == STRAY => {
                                report.refused += 1;
                            }
                            (_, o) => {
                                return Err(format!("seed {seed}: node {i}: wrong outcome {o:?}"))
                            }
                        }
                    }
                }
            }
            let mut again = false;
            match nd.stage {
                Stage::Sync(w) if nd.engine.sync_ready(w) => {
                    nd.stage = Stage::AllStore(nd.engine.all_store_sync());
                    again = true;
                }
                Stage::AllStore(e) if nd.engine.all_store_done(e) => {
                    let errs = nd.engine.take_errors();
                    let bad = errs
                        .iter()
                        .filter(|x| !matches!(x, GptrError::Refused { addr, .. } if *addr == STRAY))
                        .count();
                    if bad > 0 || errs.len() as u64 != nd.stray_stores {
                        return Err(format!(
                            "seed {seed}: node {i} phase {}: store refusals {errs:?}, expected {}",
                            nd.phase, nd.stray_stores
                        ));
                    }
                    report.refused += nd.stray_stores;
                    nd.stray_stores = 0;
                    if !nd.expect.is_empty() {
                        return Err(format!(
                            "seed {seed}: node {i}: {} operations outstanding after sync",
                            nd.expect.len()
                        ));
                    }
                    nd.phase += 1;
                    nd.next = 0;
                    if nd.phase == phases {
                        nd.stage = Stage::Finished;
                    } else {
                        nd.stage = Stage::Issue;
                        schedule!(rng.gen_range(1..4), Ev::Step(i));
                    }
                }
                _ => {}
            }
            if again {
                touched.push(i);
            }
            // The node's datagrams onto the lossy wire; its retransmission timer.
            while let Some(tx) = net.poll_transmit(NodeId(i)) {
                if rng.gen_bool(net.loss) {
                    continue;
                }
                let copies = if rng.gen_bool(net.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let d = if rng.gen_bool(0.05) {
                        rng.gen_range(50..200)
                    } else {
                        rng.gen_range(1..20)
                    };
                    schedule!(
                        d,
                        Ev::Datagram {
                            to: tx.to,
                            data: tx.data.clone()
                        }
                    );
                }
            }
            if let Some(at) = net.next_timer(NodeId(i)) {
                let at = at.max(now + 1);
                let slot = &mut timer_at[usize::from(i)];
                if slot.is_none_or(|s| at < s) {
                    *slot = Some(at);
                    schedule!(at - now, Ev::Timer(NodeId(i)));
                }
            }
        }
        if nodes.iter().all(|nd| nd.stage == Stage::Finished) {
            break;
        }
    }
    if let Some((i, nd)) = nodes
        .iter()
        .enumerate()
        .find(|(_, nd)| nd.stage != Stage::Finished)
    {
        return Err(format!(
            "seed {seed}: node {i} stuck in phase {} at {:?}",
            nd.phase, nd.stage
        ));
    }
    // Final memory against the reference.
    for (i, nd) in nodes.iter().enumerate() {
        for (w, want) in reference_a[i].iter().enumerate() {
            let got = nd.mem.word(A_OFF + 8 * w as u64);
            if got != *want {
                return Err(format!(
                    "seed {seed}: node {i} word {w} is {got:#x}, reference {want:#x}"
                ));
            }
        }
        for (w, want) in reference_b[i].iter().enumerate() {
            let got = nd.mem.word(B_OFF + 8 * w as u64);
            if got != *want {
                return Err(format!(
                    "seed {seed}: node {i} atomic word {w} is {got}, reference {want}"
                ));
            }
        }
        if nd.mem.bytes[(STRAY - BASE) as usize] != 0 {
            return Err(format!(
                "seed {seed}: node {i}: a refused operation wrote its stray address"
            ));
        }
    }
    // Every atomic add saw a different old value (they are serialised at the target).
    for ((t, w), mut v) in olds {
        let len = v.len();
        v.sort_unstable();
        v.dedup();
        if v.len() != len {
            return Err(format!(
                "seed {seed}: node {t} atomic word {w}: two adds saw the same old value"
            ));
        }
    }
    report.retransmissions = net.retransmissions();
    Ok(report)
}

/// The command that replays `seed` with a trace.
pub fn replay_command(seed: u64) -> String {
    format!("cargo run --release -p squall-sim -- --model gptr --seed {seed} --trace")
}

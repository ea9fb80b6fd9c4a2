//! DSM/IP shared objects in the simulator: N `squall-objects` cores, each with 1–2 simulated
//! application threads running random `Read()`/`Write()` programs on a few small objects
//! (random element counts and segment sizes), checked against a sequential reference.
//!
//! OU and MSI messages go through the reliable-datagram layer (`lossy.rs`: the real
//! `UdpCore` over datagrams that are lost, duplicated, delayed and reordered), because those
//! engines need exactly-once FIFO delivery, as the seed's backbone gives them. NC notices are
//! sent as raw datagrams on the same lossy network with no repair, as the seed's NC disables
//! guaranteed delivery.
//!
//! Checks (OU and MSI): every access the cores perform (their trace of the points where reads
//! and writes take effect) is applied, in simulation order, to one reference memory; every read
//! must return the reference's value at that point (so the execution is sequentially
//! consistent, with each access inside its call); every write is performed exactly once and
//! each call completes with the value performed. At the end every MSI copy in `S` or `M` and
//! every OU owner's copy equals the reference, and the nodes' directory information (sharer
//! count, owner) agrees. A write step is a separate event from its begin and from its wake-up,
//! so upgrade handlers run in between: the interrupted-write race of the seed's Figure 6 occurs
//! (counted in `flag_completions`) and must be handled. NC: only what it promises — a node's
//! read of an element only it writes returns its own last write, and no read returns a value
//! nobody wrote.
//!
//! Owns: this world and its checks. Must not touch: the cores' internals.

use crate::lossy::LossyNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_core::NodeId;
use squall_net::udp_core::CoreEvent;
use squall_objects::{
    Action, Completion, ElemKind, Engine, MsiState, ObjectId, ObjectSpec, ObjectStats, ObjectsCore,
    Step,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What went wrong in a run.
#[derive(Debug, thiserror::Error)]
pub enum ObjSimError {
    #[error("node {node}: core error: {err}")]
    Core { node: u16, err: String },
    #[error("not sequentially consistent: {0}")]
    NotSc(String),
    #[error("NC promise broken: {0}")]
    Nc(String),
    #[error("stuck after {0} events: threads did not finish: {1}")]
    Stuck(u64, String),
    #[error("final state: {0}")]
    Final(String),
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct ObjSimReport {
    pub engine: &'static str,
    pub events: u64,
    pub ops: u64,
    pub stats: ObjectStats,
    pub retransmissions: u64,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Read { obj: usize, idx: u64 },
    Write { obj: usize, idx: u64, value: u32 },
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Datagram { to: u16, data: Vec<u8> },
    Raw { from: u16, to: u16, data: Vec<u8> },
    Timer { node: u16 },
    Step { node: u16, thread: usize },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Idle,
    /// Write begun; the next event steps it.
    Begun,
    /// Parked on a completion.
    Parked,
    Done,
}

struct Thread {
    waiter: u64,
    ops: Vec<Op>,
    pc: usize,
    phase: Phase,
    /// Trace events seen for the current op.
    performed: u32,
    /// Value the current read was performed with (from the trace).
    read_value: Option<Vec<u8>>,
}

/// The engine a seed uses: OU and MSI on the first two thirds of the seeds' objects, NC alone.
pub fn engine_for(seed: u64) -> Engine {
    match seed % 3 {
        0 => Engine::Ou,
        1 => Engine::Msi,
        _ => Engine::Nc,
    }
}

/// Run one seed (engine by `engine_for`, or the one given).
pub fn run_objects_seed(
    seed: u64,
    engine: Option<Engine>,
    trace: bool,
) -> Result<ObjSimReport, ObjSimError> {
    let engine = engine.unwrap_or_else(|| engine_for(seed));
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b1e_c700_0000_0000);
    let nodes: u16 = rng.gen_range(2..=4);
    let threads: usize = rng.gen_range(1..=2);
    let nobj = rng.gen_range(1..=3);
    let specs: Vec<ObjectSpec> = (0..nobj)
        .map(|_| ObjectSpec {
            kind: if rng.gen_bool(0.7) {
                ElemKind::Int
            } else {
                ElemKind::Record(8)
            },
            len: rng.gen_range(1..=8),
            seg_elems: rng.gen_range(0..=3),
            engine,
        })
        .collect();
    let (loss, dup) = if rng.gen_bool(0.5) {
        (rng.gen_range(0.0..0.2), rng.gen_range(0.0..0.1))
    } else {
        (0.0, 0.0)
    };
    let mut net = LossyNet::new(nodes, loss, dup);
    let mut cores: Vec<ObjectsCore> = (0..nodes)
        .map(|n| {
            let mut c = ObjectsCore::new(NodeId(n), nodes);
            c.set_trace(true);
            c
        })
        .collect();
    let mut ids = Vec::new();
    for c in cores.iter_mut() {
        ids.clear();
        for s in &specs {
            let id = c.create(*s).map_err(|e| ObjSimError::Core {
                node: c.rank().0,
                err: e.to_string(),
            })?;
            ids.push(id);
        }
    }
    // NC: each element is written by one node only (its promise is about a node's own writes).
    let nc_writer = |obj: usize, idx: u64| ((obj as u64 + idx) % u64::from(nodes)) as u16;
    let mut next_value = 1u32;
    let mut threads_of: Vec<Vec<Thread>> = (0..nodes)
        .map(|n| {
            (0..threads)
                .map(|t| {
                    let nops = rng.gen_range(1..=12);
                    let ops = (0..nops)
                        .map(|_| {
                            let obj = rng.gen_range(0..specs.len());
                            let mut idx = rng.gen_range(0..specs[obj].len);
                            if rng.gen_bool(0.5) {
                                let mut tries = 0;
                                while engine == Engine::Nc && nc_writer(obj, idx) != n && tries < 16
                                {
                                    idx = rng.gen_range(0..specs[obj].len);
                                    tries += 1;
                                }
                                if engine != Engine::Nc || nc_writer(obj, idx) == n {
                                    next_value += 1;
                                    return Op::Write {
                                        obj,
                                        idx,
                                        value: next_value,
                                    };
                                }
                            }
                            Op::Read { obj, idx }
                        })
                        .collect();
                    Thread {
                        waiter: u64::from(n) * 100 + t as u64 + 1,
                        ops,
                        pc: 0,
                        phase: Phase::Idle,
                        performed: 0,
                        read_value: None,
                    }
                })
                .collect()
        })
        .collect();
    let total_ops: u64 = threads_of
        .iter()
        .flatten()
        .map(|t| t.ops.len() as u64)
        .sum();
    let elem_bytes = |obj: usize, v: u32| -> Vec<u8> {
        let mut b = vec![0u8; specs[obj].kind.size()];
        b[..4].copy_from_slice(&v.to_le_bytes());
        b
    };
    // Reference memory per (object index, element).
    let mut reference: HashMap<(ObjectId, u64), Vec<u8>> = HashMap::new();
    // NC: each node's own last write per element it owns.
    let mut nc_own: HashMap<(u16, ObjectId, u64), Vec<u8>> = HashMap::new();
    let written: std::collections::HashSet<Vec<u8>> = threads_of
        .iter()
        .flatten()
        .flat_map(|t| t.ops.iter())
        .filter_map(|o| match *o {
            Op::Write { obj, value, .. } => Some(elem_bytes(obj, value)),
            _ => None,
        })
        .collect();
    let waiter_at: HashMap<u64, (u16, usize)> = threads_of
        .iter()
        .enumerate()
        .flat_map(|(n, ts)| {
            ts.iter()
                .enumerate()
                .map(move |(t, th)| (th.waiter, (n as u16, t)))
        })
        .collect();

    let mut queue: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<Reverse<(u64, u64, Ev)>>, at: u64, e: Ev| {
        seq += 1;
        q.push(Reverse((at, seq, e)));
    };
    for n in 0..nodes {
        for t in 0..threads {
            let at = rng.gen_range(0..5);
            push(&mut queue, at, Ev::Step { node: n, thread: t });
        }
    }
    let mut events = 0u64;
    let mut now = 0u64;
    // Reliable messages handed to the network and delivered (the run ends when they agree).
    let (mut sent, mut delivered) = (0u64, 0u64);
    // The earliest timer event queued per node.
    let mut timer_at: Vec<Option<u64>> = vec![None; usize::from(nodes)];
    let max_events = 400_000u64;
    let core_err = |n: u16, e: squall_objects::ObjError| ObjSimError::Core {
        node: n,
        err: e.to_string(),
    };
    while let Some(Reverse((at, _, ev))) = queue.pop() {
        events += 1;
        if events > max_events {
            return Err(ObjSimError::Stuck(events, stuck_threads(&threads_of)));
        }
        now = now.max(at);
        let node = match &ev {
            Ev::Datagram { to, .. } | Ev::Raw { to, .. } => *to,
            Ev::Timer { node } | Ev::Step { node, .. } => *node,
        };
        if trace {
            println!("t={now} {ev:?}");
        }
        let mut ready: Option<(usize, Option<Vec<u8>>)> = None;
        match ev {
            Ev::Datagram { to, data } => {
                net.datagram(now, NodeId(to), &data);
                while let Some(e) = net.poll_event(NodeId(to)) {
                    if let CoreEvent::Deliver { src, payload, .. } = e {
                        delivered += 1;
                        if trace {
                            println!(
                                "  {src} -> {to}: {:?}",
                                squall_objects::Msg::decode(src, &payload)
                            );
                        }
                        cores[usize::from(to)]
                            .on_message(src, &payload)
                            .map_err(|e| core_err(to, e))?;
                    }
                }
            }
            Ev::Raw { from, to, data } => {
                cores[usize::from(to)]
                    .on_message(NodeId(from), &data)
                    .map_err(|e| core_err(to, e))?;
            }
            Ev::Timer { node } => {
                if timer_at[usize::from(node)] == Some(at) {
                    timer_at[usize::from(node)] = None;
                }
                net.timeout(now, NodeId(node));
                while let Some(e) = net.poll_event(NodeId(node)) {
                    if let CoreEvent::PeerLost { peer, reason } = e {
                        return Err(ObjSimError::Core {
                            node,
                            err: format!("peer {peer} lost: {reason}"),
                        });
                    }
                }
            }
            Ev::Step { node, thread } => {
                let c = &mut cores[usize::from(node)];
                let th = &mut threads_of[usize::from(node)][thread];
                if trace {
                    println!(
                        "  thread {} {:?} op {:?}",
                        th.waiter,
                        th.phase,
                        th.ops.get(th.pc)
                    );
                }
                match th.phase {
                    Phase::Done | Phase::Parked => {}
                    Phase::Idle => {
                        if th.pc >= th.ops.len() {
                            th.phase = Phase::Done;
                        } else {
                            th.performed = 0;
                            th.read_value = None;
                            match th.ops[th.pc] {
                                Op::Read { obj, idx } => {
                                    match c
                                        .read(ids[obj], idx, th.waiter)
                                        .map_err(|e| core_err(node, e))?
                                    {
                                        Step::Ready(v) => {
                                            th.phase = Phase::Parked;
                                            ready = Some((thread, Some(v)));
                                        }
                                        Step::Pending => th.phase = Phase::Parked,
                                    }
                                }
                                Op::Write { obj, idx, value } => {
                                    c.write_begin(
                                        ids[obj],
                                        idx,
                                        &elem_bytes(obj, value),
                                        th.waiter,
                                    )
                                    .map_err(|e| core_err(node, e))?;
                                    th.phase = Phase::Begun;
                                    push(
                                        &mut queue,
                                        now + rng.gen_range(0..3),
                                        Ev::Step { node, thread },
                                    );
                                }
                            }
                        }
                    }
                    Phase::Begun => match c.write_step(th.waiter).map_err(|e| core_err(node, e))? {
                        Step::Ready(()) => {
                            th.phase = Phase::Parked;
                            ready = Some((thread, None));
                        }
                        Step::Pending => th.phase = Phase::Parked,
                    },
                }
            }
        }
        // Apply the trace of the node that ran, in order, to the reference.
        for a in cores[usize::from(node)].take_trace() {
            let Some(&(wn, wt)) = waiter_at.get(&a.waiter) else {
                return Err(ObjSimError::NotSc(format!(
                    "access by unknown waiter {}",
                    a.waiter
                )));
            };
            let th = &mut threads_of[usize::from(wn)][wt];
            th.performed += 1;
            let key = (a.obj, a.idx);
            let elem = a.value.len();
            if engine == Engine::Nc {
                if a.write {
                    nc_own.insert((node, a.obj, a.idx), a.value.clone());
                } else {
                    th.read_value = Some(a.value.clone());
                    if a.value.iter().any(|&b| b != 0) && !written.contains(&a.value) {
                        return Err(ObjSimError::Nc(format!(
                            "read of {key:?} returned {:?}, never written",
                            a.value
                        )));
                    }
                    if let Some(own) = nc_own.get(&(node, a.obj, a.idx)) {
                        if *own != a.value {
                            return Err(ObjSimError::Nc(format!(
                                "node {node} read {:?} at {key:?} after writing {own:?}",
                                a.value
                            )));
                        }
                    }
                }
                continue;
            }
            let cur = reference.entry(key).or_insert_with(|| vec![0; elem]);
            if a.write {
                *cur = a.value;
            } else {
                if *cur != a.value {
                    return Err(ObjSimError::NotSc(format!(
                        "node {node}: read of {key:?} by waiter {} returned {:?}, reference holds {:?} (t={now})",
                        a.waiter, a.value, cur
                    )));
                }
                th.read_value = Some(a.value);
            }
        }
        if let Some((thread, v)) = ready {
            let th = &mut threads_of[usize::from(node)][thread];
            match v {
                Some(v) => finish_read(th, &v, node)?,
                None => finish_write(th, node)?,
            }
            push(
                &mut queue,
                now + rng.gen_range(0..3),
                Ev::Step { node, thread },
            );
        }
        // Drive every node's actions and transmissions.
        for n in 0..nodes {
            while let Some(a) = cores[usize::from(n)].poll_action() {
                match a {
                    Action::Send { to, msg, reliable } => {
                        if reliable {
                            sent += 1;
                            net.send(now, NodeId(n), to, false, msg)
                                .map_err(|e| ObjSimError::Core { node: n, err: e })?;
                        } else if !rng.gen_bool(loss) {
                            let d = rng.gen_range(1..20);
                            push(
                                &mut queue,
                                now + d,
                                Ev::Raw {
                                    from: n,
                                    to: to.0,
                                    data: msg,
                                },
                            );
                        }
                    }
                    Action::Complete { waiter, how } => {
                        let Some(&(wn, wt)) = waiter_at.get(&waiter) else {
                            return Err(ObjSimError::NotSc(format!(
                                "completion for unknown waiter {waiter}"
                            )));
                        };
                        let th = &mut threads_of[usize::from(wn)][wt];
                        if th.phase != Phase::Parked {
                            return Err(ObjSimError::NotSc(format!(
                                "completion {how:?} for waiter {waiter} not parked"
                            )));
                        }
                        let d = rng.gen_range(0..4);
                        match how {
                            Completion::Value(v) => finish_read(th, &v, wn)?,
                            Completion::Written => finish_write(th, wn)?,
                            Completion::Retry => th.phase = Phase::Begun,
                            Completion::Found(_) => {
                                return Err(ObjSimError::NotSc(
                                    "unexpected look-up completion".into(),
                                ))
                            }
                        }
                        push(
                            &mut queue,
                            now + d,
                            Ev::Step {
                                node: wn,
                                thread: wt,
                            },
                        );
                    }
                }
            }
            let mut out = Vec::new();
            while let Some(t) = net.poll_transmit(NodeId(n)) {
                out.push(t);
            }
            for t in out {
                if rng.gen_bool(net.loss) {
                    continue;
                }
                let copies = if rng.gen_bool(net.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let d = rng.gen_range(1..20);
                    push(
                        &mut queue,
                        now + d,
                        Ev::Datagram {
                            to: t.to.0,
                            data: t.data.clone(),
                        },
                    );
                }
            }
            if let Some(at) = net.next_timer(NodeId(n)) {
                let running = threads_of.iter().flatten().any(|t| t.phase != Phase::Done);
                let busy = running || delivered < sent;
                let at = at.max(now + 1);
                if busy && !matches!(timer_at[usize::from(n)], Some(t) if t <= at) {
                    timer_at[usize::from(n)] = Some(at);
                    push(&mut queue, at, Ev::Timer { node: n });
                }
            }
        }
    }
    let unfinished = threads_of.iter().flatten().any(|t| t.phase != Phase::Done);
    if unfinished {
        return Err(ObjSimError::Stuck(events, stuck_threads(&threads_of)));
    }
    let mut stats = ObjectStats::default();
    for c in &cores {
        stats.merge(&c.stats());
    }
    if trace {
        println!("end: {sent} reliable messages sent, {delivered} delivered, t={now}");
    }
    if engine != Engine::Nc {
        final_check(&cores, &ids, &specs, &reference, engine)?;
    }
    Ok(ObjSimReport {
        engine: engine.name(),
        events,
        ops: total_ops,
        stats,
        retransmissions: net.retransmissions(),
    })
}

fn stuck_threads(ts: &[Vec<Thread>]) -> String {
    ts.iter()
        .flatten()
        .filter(|t| t.phase != Phase::Done)
        .map(|t| format!("waiter {} {:?} at {:?}", t.waiter, t.phase, t.ops.get(t.pc)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn finish_read(th: &mut Thread, v: &[u8], node: u16) -> Result<(), ObjSimError> {
    if th.performed != 1 || th.read_value.as_deref() != Some(v) {
        return Err(ObjSimError::NotSc(format!(
            "node {node} waiter {}: read returned {v:?}, performed {} time(s) with {:?}",
            th.waiter, th.performed, th.read_value
        )));
    }
    th.pc += 1;
    th.phase = Phase::Idle;
    Ok(())
}

fn finish_write(th: &mut Thread, node: u16) -> Result<(), ObjSimError> {
    if th.performed != 1 {
        return Err(ObjSimError::NotSc(format!(
            "node {node} waiter {}: write performed {} times (must be exactly once)",
            th.waiter, th.performed
        )));
    }
    th.pc += 1;
    th.phase = Phase::Idle;
    Ok(())
}

fn final_check(
    cores: &[ObjectsCore],
    ids: &[ObjectId],
    specs: &[ObjectSpec],
    reference: &HashMap<(ObjectId, u64), Vec<u8>>,
    engine: Engine,
) -> Result<(), ObjSimError> {
    let nodes = cores.len() as u64;
    for (k, &id) in ids.iter().enumerate() {
        let spec = specs[k];
        let se = spec.segment_elems();
        for idx in 0..spec.len {
            let want = reference
                .get(&(id, idx))
                .cloned()
                .unwrap_or_else(|| vec![0; spec.kind.size()]);
            let seg = idx / se;
            for c in cores {
                let holds = match engine {
                    Engine::Ou => (u64::from(id.0) + seg) % nodes == u64::from(c.rank().0),
                    _ => c
                        .msi_state(id, seg)
                        .is_some_and(|(s, _, _)| s != MsiState::Invalid),
                };
                let got = c
                    .peek(id, idx)
                    .map_err(|e| ObjSimError::Final(e.to_string()))?;
                if holds && got != want {
                    return Err(ObjSimError::Final(format!(
                        "node {} holds {id:?}[{idx}] = {got:?}, reference {want:?}",
                        c.rank().0
                    )));
                }
            }
            if engine == Engine::Msi {
                let dirs: Vec<_> = cores
                    .iter()
                    .filter_map(|c| c.msi_state(id, seg).map(|(_, s, o)| (s, o)))
                    .collect();
                if dirs.windows(2).any(|w| w[0] != w[1]) {
                    return Err(ObjSimError::Final(format!(
                        "directory information disagrees for segment {seg} of {id:?}: {dirs:?}"
                    )));
                }
                let m = cores
                    .iter()
                    .filter(|c| matches!(c.msi_state(id, seg), Some((MsiState::Modified, _, _))))
                    .count();
                let s = cores
                    .iter()
                    .filter(|c| matches!(c.msi_state(id, seg), Some((MsiState::Shared, _, _))))
                    .count();
                if (m > 1) || (m == 1 && s > 0) || (m == 0 && s == 0) {
                    return Err(ObjSimError::Final(format!(
                        "MSI invariants broken for segment {seg} of {id:?}: {m} in M, {s} in S"
                    )));
                }
            }
        }
    }
    Ok(())
}

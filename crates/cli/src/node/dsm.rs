//! Node sides of the shared-memory benches (`squall bench fault|lock|barrier|thread`): each
//! starts the full runtime with `squall::init()`, measures on node 0 (or every node) and prints
//! one result line. Owns these measurements; must not touch protocol internals (it reads only
//! the public statistics).
use super::NodeError;
use crate::bench::report::emit_result;
use clap::Args;
use serde_json::{json, Value};
use squall::{BarrierCount, BarrierId, LockId, Node, NodeId, Placement, PAGE_SIZE};
use squall_wire::MsgType;
use std::ffi::c_void;
use std::time::Instant;

/// Raw request/reply of one page on the same transport (the fault bench's baseline).
const FETCH: MsgType = MsgType(0xF010);

fn dsm(e: squall::SquallError) -> NodeError {
    NodeError::Check(e.to_string())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// A small request/reply round trip between node 0 and node 1 in microseconds (median), the
/// unit the lock and barrier benches report in.
fn rtt_us(node: &Node, iters: usize) -> Result<f64, NodeError> {
    let mut s = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        node.endpoint().request(NodeId(1), FETCH, vec![0u8; 8])?;
        s.push(us(t));
    }
    Ok(median(&mut s))
}

/// Every node answers FETCH with `len` bytes (len in the request's first 8 bytes, default a page).
fn serve_fetch(node: &Node) {
    node.endpoint().register(FETCH, |ep, m| {
        let page = vec![7u8; PAGE_SIZE];
        if let Err(e) = ep.reply(&m, page) {
            eprintln!("fetch reply failed: {e}");
        }
    });
}

fn protocol_count(node: &Node, key: &str) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn messages_sent(node: &Node) -> u64 {
    node.stats()
        .counts
        .get("net")
        .and_then(|p| p.get("messages_sent"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

#[derive(Args, Debug)]
pub struct FaultNodeArgs {
    /// Pages faulted per repetition.
    #[arg(long, default_value_t = 200)]
    pub pages: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

/// Node 0 faults on pages homed at node 1: remote read faults, write faults on read-only
/// copies (twin), write misses (fetch + twin); beside a raw one-page request/reply.
pub fn fault(a: FaultNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let (mut read, mut twin, mut miss, mut raw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let words = PAGE_SIZE / 8;
    for _ in 0..a.reps {
        let r1 = node
            .alloc_array_collective::<u64>(a.pages * words, Placement::Node(NodeId(1)))
            .map_err(dsm)?;
        let r2 = node
            .alloc_array_collective::<u64>(a.pages * words, Placement::Node(NodeId(1)))
            .map_err(dsm)?;
        if node.rank() == NodeId(1) {
            for p in 0..a.pages {
                r1.set(p * words, p as u64);
                r2.set(p * words, p as u64);
            }
        }
        node.barrier().map_err(dsm)?;
        if node.rank() == NodeId(0) {
            let (mut rr, mut tt, mut mm, mut ww) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for p in 0..a.pages {
                let t = Instant::now();
                let v = r1.get(p * words);
                rr.push(us(t));
                if v != p as u64 {
                    return Err(NodeError::Check(format!("page {p} read {v}")));
                }
                let t = Instant::now();
                r1.set(p * words + 1, 1);
                tt.push(us(t));
                let t = Instant::now();
                r2.set(p * words + 1, 1);
                mm.push(us(t));
                let t = Instant::now();
                node.endpoint().request(NodeId(1), FETCH, vec![0u8; 8])?;
                ww.push(us(t));
            }
            read.push(median(&mut rr));
            twin.push(median(&mut tt));
            miss.push(median(&mut mm));
            raw.push(median(&mut ww));
        }
        node.barrier().map_err(dsm)?;
    }
    if node.rank() == NodeId(0) {
        emit_result(&json!({
            "read_fault_us": read, "write_fault_twin_us": twin,
            "write_miss_us": miss, "raw_req_us": raw,
            "page_fetches": protocol_count(&node, "page_fetches"),
        }));
    }
    node.finalize().map_err(dsm)
}

#[derive(Args, Debug)]
pub struct SyncNodeArgs {
    /// Operations per repetition.
    #[arg(long, default_value_t = 500)]
    pub iters: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

fn sync_count(node: &Node, key: &str) -> u64 {
    node.stats()
        .counts
        .get("sync")
        .and_then(|p| p.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Lock+unlock pairs per timed block of the local uncontended lock (and of its baseline).
const LOCAL_PAIRS: u64 = 100_000;
/// Timed blocks per repetition, alternating Squall and baseline.
const LOCAL_BLOCKS: usize = 20;

/// The local uncontended lock on node 0: lock+unlock pairs of a lock whose token is idle on
/// this node (its lock cache), in blocks alternating with the same pairs of a futex mutex
/// (`std::sync::Mutex`: what glibc's `pthread_mutex_lock` does on its fast path). Returns ns
/// per pair of each block, Squall's and the baseline's, after checking from the statistics
/// that every pair took the lock cache.
fn local_uncontended(node: &Node, l: LockId) -> Result<(Vec<f64>, Vec<f64>), NodeError> {
    let native = std::sync::Mutex::new(0u64);
    node.lock(l).map_err(dsm)?;
    node.unlock(l).map_err(dsm)?;
    let fast0 = sync_count(node, "lock_acquires_local_fast");
    let (mut squall, mut base) = (Vec::new(), Vec::new());
    for _ in 0..LOCAL_BLOCKS {
        let t = Instant::now();
        for _ in 0..LOCAL_PAIRS {
            node.lock(std::hint::black_box(l)).map_err(dsm)?;
            node.unlock(std::hint::black_box(l)).map_err(dsm)?;
        }
        squall.push(t.elapsed().as_secs_f64() * 1e9 / LOCAL_PAIRS as f64);
        let t = Instant::now();
        for _ in 0..LOCAL_PAIRS {
            let mut g = std::hint::black_box(&native)
                .lock()
                .map_err(|_| NodeError::Check("the baseline mutex is poisoned".into()))?;
            *g += 1;
        }
        base.push(t.elapsed().as_secs_f64() * 1e9 / LOCAL_PAIRS as f64);
    }
    let fast = sync_count(node, "lock_acquires_local_fast") - fast0;
    let want = LOCAL_PAIRS * LOCAL_BLOCKS as u64;
    if fast != want {
        return Err(NodeError::Check(format!(
            "{fast} acquires took the lock cache, expected all {want} timed ones"
        )));
    }
    Ok((squall, base))
}

/// Locks: uncontended remote acquire (the lock's token is on the other node each time: nodes
/// 0 and 1 take turns, separated by barriers excluded from the timing) and the local
/// uncontended lock (its token idle on node 0) beside a futex mutex.
pub fn lock(a: SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let me = node.rank().0;
    let (mut remote, mut msgs, mut rtt) = (Vec::new(), Vec::new(), Vec::new());
    let (mut fast, mut native) = (Vec::new(), Vec::new());
    let turns = a.iters.clamp(2, 200);
    for rep in 0..a.reps {
        // A lock managed by node 1, so node 0's acquires go through the manager too.
        let l = LockId(1 + 2 * rep as u64 + 2);
        let mut times = Vec::new();
        let mut sent = 0u64;
        for turn in 0..turns {
            if usize::from(me) == turn % 2 {
                let m0 = messages_sent(&node);
                let t = Instant::now();
                node.lock(l).map_err(dsm)?;
                times.push(us(t));
                node.unlock(l).map_err(dsm)?;
                sent += messages_sent(&node) - m0;
            }
            node.barrier().map_err(dsm)?;
        }
        if me == 0 {
            remote.push(median(&mut times));
            msgs.push(sent as f64 / times.len().max(1) as f64);
            let (f, n) = local_uncontended(&node, LockId(2000 + 2 * rep as u64))?;
            fast.extend(f);
            native.extend(n);
            rtt.push(rtt_us(&node, 200)?);
        }
        node.barrier().map_err(dsm)?;
    }
    if me == 0 {
        emit_result(
            &json!({"remote_acquire_us": remote, "messages_per_acquire_node0": msgs,
                            "rtt_us": rtt,
                            "local_fast_pair_ns": fast, "native_pair_ns": native,
                            "local_fast_pairs_checked": LOCAL_PAIRS * (LOCAL_BLOCKS * a.reps) as u64}),
        );
    }
    node.finalize().map_err(dsm)
}

/// Barriers: time per episode across all nodes (one thread per node).
pub fn barrier(a: SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let (mut per, mut rtt) = (Vec::new(), Vec::new());
    for _ in 0..a.reps {
        let t = Instant::now();
        for _ in 0..a.iters {
            node.barrier_with(BarrierId(7), BarrierCount::PerNode { local: 1 })
                .map_err(dsm)?;
        }
        per.push(us(t) / a.iters as f64);
        if node.rank() == NodeId(0) {
            rtt.push(rtt_us(&node, 200)?);
        }
        node.barrier().map_err(dsm)?;
    }
    if node.rank() == NodeId(0) {
        emit_result(&json!({"barrier_us": per, "rtt_us": rtt}));
    }
    node.finalize().map_err(dsm)
}

extern "C" fn empty_thread(arg: *mut c_void) -> *mut c_void {
    arg
}

/// Threads: create an empty thread on node 1 and join it, from node 0; and the same locally.
pub fn thread(a: SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    let iters = a.iters.clamp(1, 200);
    if node.rank() == NodeId(0) {
        for _ in 0..a.reps {
            let (mut r, mut l) = (Vec::new(), Vec::new());
            for i in 0..iters {
                let t = Instant::now();
                let tid = node
                    .spawn_on(Some(NodeId(1)), empty_thread, i as *mut c_void)
                    .map_err(dsm)?;
                let ret = node.join(tid).map_err(dsm)?;
                r.push(us(t));
                if ret as usize != i {
                    return Err(NodeError::Check(format!(
                        "remote thread returned {ret:?}, sent {i}"
                    )));
                }
                let t = Instant::now();
                let tid = node
                    .spawn_on(Some(NodeId(0)), empty_thread, i as *mut c_void)
                    .map_err(dsm)?;
                node.join(tid).map_err(dsm)?;
                l.push(us(t));
            }
            remote.push(median(&mut r));
            local.push(median(&mut l));
        }
        emit_result(&json!({"remote_create_join_us": remote, "local_create_join_us": local}));
    }
    node.finalize().map_err(dsm)
}

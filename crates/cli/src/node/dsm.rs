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

pub(super) fn dsm(e: squall::SquallError) -> NodeError {
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
pub(super) fn rtt_us(node: &Node, iters: usize) -> Result<f64, NodeError> {
    let mut s = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        node.endpoint().request(NodeId(1), FETCH, vec![0u8; 8])?;
        s.push(us(t));
    }
    Ok(median(&mut s))
}

/// Every node answers FETCH with `len` bytes (len in the request's first 8 bytes, default a page).
pub(super) fn serve_fetch(node: &Node) {
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

#[derive(Args, Debug)]
pub struct FaultNodeArgs {
    /// Pages faulted per repetition.
    #[arg(long, default_value_t = 200)]
    pub pages: usize,
    /// Pages of the sequential scan per repetition.
    #[arg(long, default_value_t = 512)]
    pub scan_pages: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Also time the service thread's share of each fault (see `since_stall_us`).
    #[arg(long)]
    pub breakdown: bool,
}

/// A protocol counter's total over the message types it sends (`sent.<kind>.messages`).
fn protocol_sent(node: &Node, kind: &str) -> u64 {
    node.stats()
        .counts
        .get("protocol")
        .and_then(|p| p.get("sent"))
        .and_then(|p| p.get(kind))
        .and_then(|k| k.get("messages"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn memory_faults(node: &Node) -> u64 {
    node.stats()
        .counts
        .get("memory")
        .and_then(|p| p.get("faults"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Microseconds of data stall since `s0` (`Node::data_stall`, read just before the timed
/// operation): the service thread's share of the fault the operation took; the rest of its
/// latency is the fault's capture and the thread wake-ups. The thread may run again a little
/// before the service thread counts its fault: wait for the count to move (bounded).
fn since_stall_us(s0: (u64, u64), node: &Node) -> f64 {
    let t = Instant::now();
    let mut now = node.data_stall();
    while now.0 == s0.0 && t.elapsed() < std::time::Duration::from_millis(50) {
        std::hint::spin_loop();
        now = node.data_stall();
    }
    now.1.saturating_sub(s0.1) as f64 / 1e3
}

/// The counters a fault measurement is checked against.
#[derive(Clone, Copy)]
struct FaultCounts {
    faults: u64,
    fetches: u64,
    prefetched: u64,
    fetch_msgs: u64,
}

impl FaultCounts {
    fn now(node: &Node) -> Self {
        FaultCounts {
            faults: memory_faults(node),
            fetches: protocol_count(node, "page_fetches"),
            prefetched: protocol_count(node, "pages_prefetched"),
            fetch_msgs: protocol_sent(node, "fetch"),
        }
    }
    fn since(self, node: &Node) -> Self {
        let n = Self::now(node);
        FaultCounts {
            faults: n.faults - self.faults,
            fetches: n.fetches - self.fetches,
            prefetched: n.prefetched - self.prefetched,
            fetch_msgs: n.fetch_msgs - self.fetch_msgs,
        }
    }
}

/// A permutation of `0..n` (a fixed multiplicative scramble, so that no two consecutive
/// touches are neighbours: nothing for a sequential read-ahead to find).
fn scattered(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// Node 0 faults on pages homed at node 1, beside a one-page request/reply on the same
/// endpoint, and every measurement is checked against the statistics (faults taken, fetches
/// sent, pages read ahead):
/// - cold read faults: the pages of an allocation placed round-robin by single pages, so a
///   page's neighbours have the other home and read-ahead has nothing to bring; node 0 reads
///   node 1's pages in a scattered order: one fault and one 4 KiB fetch each;
/// - a write fault on such a read copy (a twin, no fetch);
/// - write misses (a fetch for writing and a twin) on a second such allocation;
/// - with `--breakdown`, for each of those three the service thread's time per fault (from
///   taking it to resuming the thread, the data stall of the statistics): the rest of a
///   fault's latency is its capture and the thread wake-ups;
/// - a sequential scan of `scan_pages` pages all homed at node 1, with read-ahead: time,
///   pages per fetch.
pub fn fault(a: FaultNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let (mut read, mut twin, mut miss, mut raw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut scan_s, mut scan_fetches) = (Vec::new(), 0u64);
    // Per fault: the service thread's time (taking the fault to resuming the thread).
    let (mut read_svc, mut twin_svc, mut miss_svc) = (Vec::new(), Vec::new(), Vec::new());
    let words = PAGE_SIZE / 8;
    let spread = Placement::RoundRobin { block_pages: 1 };
    let check = |what: &str, ok: bool, c: FaultCounts, want: usize| -> Result<(), NodeError> {
        if ok {
            return Ok(());
        }
        Err(NodeError::Check(format!(
            "{what}: {want} touches took {} faults, {} fetches ({} fetch messages), {} pages \
             read ahead: the bench did not measure what it names",
            c.faults, c.fetches, c.fetch_msgs, c.prefetched
        )))
    };
    for _ in 0..a.reps {
        // One page more, node 0's: the next allocation's first page is not a neighbour of
        // the same home.
        let r1 = node
            .alloc_array_collective::<u64>((2 * a.pages + 1) * words, spread)
            .map_err(dsm)?;
        let r2 = node
            .alloc_array_collective::<u64>((2 * a.pages + 1) * words, spread)
            .map_err(dsm)?;
        let r3 = node
            .alloc_array_collective::<u64>(a.scan_pages * words, Placement::Node(NodeId(1)))
            .map_err(dsm)?;
        if node.rank() == NodeId(1) {
            // Node 1's pages of r1 and r2 are the odd ones.
            for p in 0..a.pages {
                r1.set((2 * p + 1) * words, p as u64);
                r2.set((2 * p + 1) * words, p as u64);
            }
            for p in 0..a.scan_pages {
                r3.set(p * words, p as u64);
            }
        }
        node.barrier().map_err(dsm)?;
        if node.rank() == NodeId(0) {
            let order = scattered(a.pages);
            let c0 = FaultCounts::now(&node);
            for &p in &order {
                let i = (2 * p + 1) * words;
                let s0 = node.data_stall();
                let t = Instant::now();
                let v = r1.get(i);
                read.push(us(t));
                if a.breakdown {
                    read_svc.push(since_stall_us(s0, &node));
                }
                if v != p as u64 {
                    return Err(NodeError::Check(format!("page {p} read {v}")));
                }
                let t = Instant::now();
                node.endpoint().request(NodeId(1), FETCH, vec![0u8; 8])?;
                raw.push(us(t));
            }
            let c = c0.since(&node);
            let n = a.pages as u64;
            check(
                "cold read faults",
                c.faults >= n && c.fetches == n && c.fetch_msgs == n && c.prefetched == 0,
                c,
                a.pages,
            )?;
            let c0 = FaultCounts::now(&node);
            for &p in &order {
                let i = (2 * p + 1) * words + 1;
                let s0 = node.data_stall();
                let t = Instant::now();
                r1.set(i, 1);
                twin.push(us(t));
                if a.breakdown {
                    twin_svc.push(since_stall_us(s0, &node));
                }
                let s0 = node.data_stall();
                let t = Instant::now();
                r2.set(i, 1);
                miss.push(us(t));
                if a.breakdown {
                    miss_svc.push(since_stall_us(s0, &node));
                }
            }
            let c = c0.since(&node);
            check(
                "write faults",
                c.faults >= 2 * n && c.fetches == n && c.prefetched == 0,
                c,
                2 * a.pages,
            )?;
            let c0 = FaultCounts::now(&node);
            let t = Instant::now();
            for p in 0..a.scan_pages {
                let v = r3.get(p * words);
                if v != p as u64 {
                    return Err(NodeError::Check(format!("scan page {p} read {v}")));
                }
            }
            scan_s.push(t.elapsed().as_secs_f64());
            let c = c0.since(&node);
            check(
                "sequential scan",
                c.fetches >= 1 && c.fetches + c.prefetched == a.scan_pages as u64,
                c,
                a.scan_pages,
            )?;
            scan_fetches += c.fetches;
        }
        node.barrier().map_err(dsm)?;
    }
    if node.rank() == NodeId(0) {
        emit_result(&json!({
            "read_fault_us": read, "write_fault_twin_us": twin,
            "write_miss_us": miss, "squall_req_us": raw,
            "read_fault_service_us": read_svc, "write_fault_twin_service_us": twin_svc,
            "write_miss_service_us": miss_svc,
            "scan_s": scan_s, "scan_pages": a.scan_pages,
            "scan_fetches": scan_fetches,
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
    /// Threads per node (`bench-lock-contended` only).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Busy microseconds outside the lock between two acquires (`bench-lock-contended` only).
    #[arg(long, default_value_t = 0)]
    pub think_us: u64,
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
    let mut acquires = 0u64;
    let turns = a.iters.clamp(2, 200);
    // Node 1's lock messages and remote acquires of each rep, for node 0 to add up.
    let theirs = node
        .alloc_array_collective::<u64>(2, Placement::Node(NodeId(0)))
        .map_err(dsm)?;
    for rep in 0..a.reps {
        // A lock managed by node 1, so node 0's acquires go through the manager too.
        let l = LockId(1 + 2 * rep as u64 + 2);
        let remote0 = sync_count(&node, "lock_acquires_remote");
        let msgs0 = lock_messages(&node);
        let mut mine = 0u64;
        for turn in 0..turns {
            if usize::from(me) == turn % 2 {
                let t = Instant::now();
                node.lock(l).map_err(dsm)?;
                remote.push(us(t));
                node.unlock(l).map_err(dsm)?;
                mine += 1;
            }
            node.barrier().map_err(dsm)?;
        }
        let took = sync_count(&node, "lock_acquires_remote") - remote0;
        if took != mine {
            return Err(NodeError::Check(format!(
                "node {me}: {took} of its {mine} timed acquires were remote: the lock did not \
                 move between the nodes"
            )));
        }
        let sent = lock_messages(&node) - msgs0;
        if me == 1 {
            theirs.set(0, sent);
            theirs.set(1, took);
        }
        node.barrier().map_err(dsm)?;
        if me == 0 {
            let (all_sent, all_took) = (sent + theirs.get(0), took + theirs.get(1));
            msgs.push(all_sent as f64 / all_took.max(1) as f64);
            acquires += took;
            let (f, n) = local_uncontended(&node, LockId(2000 + 2 * rep as u64))?;
            fast.extend(f);
            native.extend(n);
            rtt.push(rtt_us(&node, 200)?);
        }
        node.barrier().map_err(dsm)?;
    }
    if me == 0 {
        emit_result(
            &json!({"remote_acquire_us": remote, "messages_per_acquire": msgs,
                            "remote_acquires_checked": acquires,
                            "rtt_us": rtt,
                            "local_fast_pair_ns": fast, "native_pair_ns": native,
                            "local_fast_pairs_checked": LOCAL_PAIRS * (LOCAL_BLOCKS * a.reps) as u64}),
        );
    }
    node.finalize().map_err(dsm)
}

/// Lock messages (request, forward, grant) this node's synchronization core sent.
fn lock_messages(node: &Node) -> u64 {
    let st = node.stats();
    let sent = st
        .counts
        .get("sync")
        .and_then(|p| p.get("messages_sent"))
        .and_then(Value::as_array);
    // `squall_sync::message::KIND_NAMES`: lock_request, lock_forward, lock_grant first.
    sent.map_or(0, |a| a.iter().take(3).filter_map(Value::as_u64).sum())
}

/// Barrier messages (arrive, count, collect, info, depart, eager) this node's core sent.
fn barrier_messages(node: &Node) -> u64 {
    let st = node.stats();
    let sent = st
        .counts
        .get("sync")
        .and_then(|p| p.get("messages_sent"))
        .and_then(Value::as_array);
    // `squall_sync::message::KIND_NAMES`: barrier_arrive..barrier_depart are 7..=11,
    // barrier_eager is 16.
    sent.map_or(0, |a| {
        a.iter()
            .enumerate()
            .filter(|(i, _)| (7..=11).contains(i) || *i == 16)
            .filter_map(|(_, v)| v.as_u64())
            .sum()
    })
}

/// Barriers: time of each episode across all nodes (one thread per node), checked against
/// the episodes the statistics counted; every node reports the barrier messages it sent and
/// the hops its episodes took (statistics), over the timed barriers only.
pub fn barrier(a: SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    serve_fetch(&node);
    node.barrier().map_err(dsm)?;
    let (mut per, mut rtt) = (Vec::new(), Vec::new());
    let mut episodes = 0u64;
    let (mut msgs, mut hops) = (0u64, 0u64);
    for _ in 0..a.reps {
        let e0 = sync_count(&node, "barrier_episodes");
        let m0 = barrier_messages(&node);
        let h0 = sync_count(&node, "barrier_hops");
        for _ in 0..a.iters {
            let t = Instant::now();
            node.barrier_with(BarrierId(7), BarrierCount::PerNode { local: 1 })
                .map_err(dsm)?;
            per.push(us(t));
        }
        let took = sync_count(&node, "barrier_episodes") - e0;
        msgs += barrier_messages(&node) - m0;
        hops += sync_count(&node, "barrier_hops") - h0;
        if took < a.iters as u64 {
            return Err(NodeError::Check(format!(
                "{took} barrier episodes counted for {} timed barriers",
                a.iters
            )));
        }
        episodes += took;
        if node.rank() == NodeId(0) {
            rtt.push(rtt_us(&node, 200)?);
        }
        node.barrier().map_err(dsm)?;
    }
    if node.rank() == NodeId(0) {
        emit_result(
            &json!({"barrier_us": per, "rtt_us": rtt, "episodes_checked": episodes,
                            "barrier_msgs": msgs, "barrier_hops": hops}),
        );
    } else {
        emit_result(&json!({"episodes_checked": episodes, "barrier_msgs": msgs,
                            "barrier_hops": hops}));
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
            remote.extend(r);
            local.extend(l);
        }
        emit_result(&json!({"remote_create_join_us": remote, "local_create_join_us": local}));
    }
    node.finalize().map_err(dsm)
}

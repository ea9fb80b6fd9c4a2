//! Multi-node tests of the one-sided operations through the Rust API (`Node::gptr`,
//! `GlobalPtr`, `SpreadArray`): every scenario runs as 2 and 4 node processes over tcp and udp.
//!
//! Run: `cargo test -p squall --test gptr` (add `-- NAME` to filter).
use squall::{ActiveSet, AtomicKind, Cmp, GlobalPtr, Node, NodeId, ReduceOp, SpreadArray, Width};

mod common;
use common::{check, launched_as_node, node_exit, run_transports, Scenario};

fn e(x: squall::SquallError) -> String {
    x.to_string()
}

/// A spread array: local fill, blocking reads, split-phase gets and puts with sync.
fn spread(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let (me, n) = (node.rank(), node.size() as usize);
    const LEN: usize = 2000;
    let a = SpreadArray::<u64>::alloc(g, LEN, 5).map_err(e)?;
    let f = |i: usize| (i as u64) * 3 + 1;
    for i in a.indices_of(me).collect::<Vec<_>>() {
        a.ptr(i).write(g, f(i)).map_err(e)?;
    }
    node.barrier().map_err(e)?;
    for i in (0..LEN).step_by(97) {
        let v = a.ptr(i).read(g).map_err(e)?;
        check(v == f(i), || format!("read {i}: {v}"))?;
    }
    let pending: Vec<_> = (0..LEN)
        .map(|i| a.ptr(i).get(g))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    g.sync().map_err(e)?;
    for (i, p) in pending.iter().enumerate() {
        let v = p.value().map_err(e)?;
        check(v == f(i), || format!("get {i}: {v}"))?;
    }
    node.barrier().map_err(e)?;
    for i in (me.0 as usize..LEN).step_by(n) {
        a.ptr(i).put(g, f(i) * 2).map_err(e)?;
    }
    // A barrier completes this node's puts first.
    node.barrier().map_err(e)?;
    for i in a.indices_of(me).collect::<Vec<_>>() {
        let v = a.ptr(i).read(g).map_err(e)?;
        check(v == f(i) * 2, || format!("put {i}: {v}"))?;
    }
    // Bulk: the whole first block of the right neighbour.
    let right = NodeId(((me.0 as usize + 1) % n) as u16);
    let first = a.ptr(0).on(right);
    let blk = first.get_bulk(g, 5).map_err(e)?;
    g.sync().map_err(e)?;
    let want: Vec<u64> = (0..5).map(|k| f(right.0 as usize * 5 + k) * 2).collect();
    check(blk.value().map_err(e)? == want, || "bulk get".into())?;
    node.barrier().map_err(e)?;
    a.free(g).map_err(e)
}

/// Bulk gets issued four at a time from other nodes, each group completed by `sync` and
/// checked at once, while the other nodes do the same (a sync used to return while the data
/// of the last reply were still being copied outside the lock: apps/mm/mm_splitc.c).
fn get_pipeline(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let me = node.rank();
    const BLOCK: usize = 16 * 1024;
    const BLOCKS: usize = 16;
    const AT_ONCE: usize = 4;
    let a = SpreadArray::<u64>::alloc(g, BLOCK * BLOCKS, BLOCK).map_err(e)?;
    let f = |i: usize| (i as u64) * 7 + 3;
    for i in a.indices_of(me).collect::<Vec<_>>() {
        a.ptr(i).write(g, f(i)).map_err(e)?;
    }
    node.barrier().map_err(e)?;
    let remote: Vec<usize> = (0..BLOCKS).filter(|b| a.owner(b * BLOCK) != me).collect();
    for round in 0..100 {
        let blocks: Vec<usize> = (0..AT_ONCE)
            .map(|k| remote[(round * AT_ONCE + k) % remote.len()])
            .collect();
        let pending = blocks
            .iter()
            .map(|b| a.ptr(b * BLOCK).get_bulk(g, BLOCK))
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        g.sync().map_err(e)?;
        for (b, p) in blocks.iter().zip(pending) {
            let v = p
                .value()
                .map_err(|err| format!("round {round}, block {b}: {err}"))?;
            check(
                v.iter().enumerate().all(|(k, x)| *x == f(b * BLOCK + k)),
                || format!("round {round}: block {b} has other data"),
            )?;
        }
    }
    node.barrier().map_err(e)?;
    a.free(g).map_err(e)
}

/// The byte at `i` of node `t`'s pattern in [`landed_gets`].
fn pattern(t: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9) ^ t.wrapping_mul(77)) as u8
}

/// Blocking gets of 0 B to just over 1 MiB (those of 16 KiB and more land straight in the
/// destination on tcp), two threads at once, at odd offsets, from every other node, between
/// puts, stores, atomics and split-phase gets to and from the same peers; every byte checked.
fn landed_gets(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    const SPAN: usize = (1 << 20) + 4096 + 3;
    const SIZES: [usize; 11] = [
        0,
        1,
        8,
        4095,
        16383,
        16384,
        16385,
        65543,
        300_001,
        1 << 20,
        SPAN,
    ];
    let src = g.alloc(SPAN, 64).map_err(e)?;
    let inbox = g.alloc(4096 * n + 64, 64).map_err(e)?;
    let mine: Vec<u8> = (0..SPAN).map(|i| pattern(me, i)).collect();
    g.put(node.rank(), src, &mine).map_err(e)?;
    node.barrier().map_err(e)?;
    let right = NodeId(((me + 1) % n) as u16);
    let worker = |t: usize| -> Result<(), String> {
        for round in 0..3 {
            for (k, &len) in SIZES.iter().enumerate() {
                let peer = (me + 1 + (k + t + round) % (n - 1)) % n;
                let off = (k * 7 + t * 13 + round) % (SPAN - len + 1);
                let mut out = vec![0xEEu8; len];
                g.get(NodeId(peer as u16), src + off, &mut out)
                    .map_err(|x| format!("get {len} B from {peer}: {x}"))?;
                if let Some(i) = (0..len).find(|&i| out[i] != pattern(peer, off + i)) {
                    return Err(format!(
                        "thread {t}: get of {len} B at {off} from {peer}: byte {i} is {}",
                        out[i]
                    ));
                }
                // Other traffic to the same peers between the gets.
                let slot = inbox + 4096 * me + 2048 * t;
                g.put_nb(right, slot, &[(round * 16 + k) as u8; 2048])
                    .map_err(e)?;
                g.store(right, inbox + 4096 * n + 8 * t, &[k as u8; 8])
                    .map_err(e)?;
                g.atomic(
                    NodeId(peer as u16),
                    inbox,
                    Width::W8,
                    AtomicKind::Fetch,
                    0,
                    0,
                )
                .map_err(e)?;
                let small = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
                let into = small.clone();
                g.get_nb(
                    NodeId(peer as u16),
                    src + off / 2,
                    100,
                    Box::new(move |d| {
                        into.lock()
                            .unwrap_or_else(|x| x.into_inner())
                            .extend_from_slice(d)
                    }),
                )
                .map_err(e)?;
                g.sync().map_err(e)?;
                let small = small.lock().unwrap_or_else(|x| x.into_inner()).clone();
                check(
                    small.len() == 100
                        && small
                            .iter()
                            .enumerate()
                            .all(|(i, &b)| b == pattern(peer, off / 2 + i)),
                    || format!("split-phase get from {peer} at {}", off / 2),
                )?;
            }
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let other = s.spawn(|| worker(1));
        let r = worker(0);
        let r2 = other
            .join()
            .unwrap_or_else(|_| Err("worker 1 panicked".into()));
        r.and(r2)
    })?;
    // Over tcp the replies larger than one read (256 KiB) always land: the destination is
    // lent before the request leaves (2 sizes, 3 rounds, 2 threads).
    let landed = g.stats_json()["landed_gets"].as_u64().unwrap_or(0);
    if std::env::var("SQUALL_TRANSPORT").as_deref() == Ok("tcp") {
        check(landed >= 12, || format!("{landed} gets landed"))?;
    }
    node.barrier().map_err(e)?;
    // The puts of the left neighbour arrived whole (their last round).
    let left = (me + n - 1) % n;
    let mut got = vec![0u8; 4096];
    g.get(node.rank(), inbox + 4096 * left, &mut got)
        .map_err(e)?;
    let last = (2 * 16 + SIZES.len() - 1) as u8;
    check(got.iter().all(|&b| b == last), || {
        format!("puts from {left}: {:?}", &got[..8])
    })?;
    node.barrier().map_err(e)?;
    g.free(inbox).map_err(e)?;
    g.free(src).map_err(e)
}

/// One-way stores counted by `store_sync`, then bulk stores completed by `all_store_sync`.
fn stores(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let (me, n) = (node.rank().0 as usize, node.size() as usize);
    let right = NodeId(((me + 1) % n) as u16);
    let left = (me + n - 1) % n;
    let base = g.alloc(4096 * 8, 16).map_err(e)?;
    let buf = GlobalPtr::<i64>::new(node.rank(), base);
    for k in 0..100 {
        buf.on(right)
            .add(k)
            .store(g, (me * 1000 + k) as i64)
            .map_err(e)?;
    }
    g.store_sync(800).map_err(e)?;
    for k in 0..100 {
        let v = buf.add(k).read(g).map_err(e)?;
        check(v == (left * 1000 + k) as i64, || format!("store {k}: {v}"))?;
    }
    node.barrier().map_err(e)?;
    let data: Vec<i64> = (0..3000).map(|k| (me * 7 + k) as i64).collect();
    for p in 0..n {
        // Every node sends every node (itself too) a slice at its own offset.
        buf.on(NodeId(p as u16))
            .add(100 + me)
            .store_bulk(g, &data[me..me + 1])
            .map_err(e)?;
    }
    buf.on(right).add(200).store_bulk(g, &data).map_err(e)?;
    g.all_store_sync().map_err(e)?;
    for p in 0..n {
        let v = buf.add(100 + p).read(g).map_err(e)?;
        check(v == (p * 7 + p) as i64, || format!("from {p}: {v}"))?;
    }
    let mut got = vec![0i64; 3000];
    buf.add(200).read_bulk(g, &mut got).map_err(e)?;
    check(
        got.iter()
            .enumerate()
            .all(|(k, &v)| v == (left * 7 + k) as i64),
        || "bulk store".into(),
    )?;
    node.barrier().map_err(e)?;
    g.free(base).map_err(e)
}

/// Atomics from every node on one word of node 0, then compare-swap, then wait_until.
fn atomics(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let n = node.size() as u64;
    let base = g.alloc(64, 16).map_err(e)?;
    let c = GlobalPtr::<u64>::new(NodeId(0), base);
    for _ in 0..200 {
        c.fetch_add(g, 3).map_err(e)?;
    }
    node.barrier().map_err(e)?;
    let v = c.fetch(g).map_err(e)?;
    check(v == 600 * n, || format!("counter {v}"))?;
    node.barrier().map_err(e)?;
    let old = c.compare_swap(g, 600 * n, 1).map_err(e)?;
    let won = GlobalPtr::<u64>::new(NodeId(0), base + 8);
    won.fetch_add(g, u64::from(old == 600 * n)).map_err(e)?;
    node.barrier().map_err(e)?;
    check(won.fetch(g).map_err(e)? == 1, || {
        "exactly one compare-swap wins".into()
    })?;
    // Node 0 releases everyone through a flag word each waits on locally.
    let flag = base + 16;
    if node.rank() == NodeId(0) {
        for p in 1..node.size() {
            g.atomic_nb(NodeId(p), flag, Width::W8, AtomicKind::Set, 9)
                .map_err(e)?;
        }
        g.sync().map_err(e)?;
    } else {
        let v = g.wait_until(flag, Width::W8, Cmp::Eq, 9).map_err(e)?;
        check(v == 9, || format!("flag {v}"))?;
    }
    node.barrier().map_err(e)?;
    g.free(base).map_err(e)
}

/// Broadcast and sum/max reductions over the whole job and over the even nodes.
fn collectives(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let (me, n) = (node.rank().0 as usize, node.size());
    let psync = g.alloc(64, 16).map_err(e)?;
    let src = g.alloc(800, 16).map_err(e)?;
    let dst = g.alloc(800, 16).map_err(e)?;
    let s = GlobalPtr::<f64>::new(node.rank(), src);
    let d = GlobalPtr::<f64>::new(node.rank(), dst);
    let vals: Vec<f64> = (0..100).map(|i| (me * 100 + i) as f64).collect();
    s.write_bulk(g, &vals).map_err(e)?;
    node.barrier().map_err(e)?;
    g.broadcast(dst, src, 800, n as usize - 1, ActiveSet::world(n), psync)
        .map_err(e)?;
    let mut got = vec![0f64; 100];
    d.read_bulk(g, &mut got).map_err(e)?;
    if me != n as usize - 1 {
        let want: Vec<f64> = (0..100)
            .map(|i| ((n as usize - 1) * 100 + i) as f64)
            .collect();
        check(got == want, || "broadcast".into())?;
    }
    node.barrier().map_err(e)?;
    g.reduce::<f64>(dst, src, 100, ReduceOp::Sum, ActiveSet::world(n), psync)
        .map_err(e)?;
    d.read_bulk(g, &mut got).map_err(e)?;
    for (i, v) in got.iter().enumerate() {
        let want: f64 = (0..n as usize).map(|p| (p * 100 + i) as f64).sum();
        check(*v == want, || format!("sum {i}: {v} want {want}"))?;
    }
    node.barrier().map_err(e)?;
    if me % 2 == 0 {
        let evens = ActiveSet {
            start: 0,
            log_stride: 1,
            size: n.div_ceil(2),
        };
        g.reduce::<f64>(dst, src, 100, ReduceOp::Max, evens, psync)
            .map_err(e)?;
        d.read_bulk(g, &mut got).map_err(e)?;
        let top = (n as usize - 1) / 2 * 2;
        check(got[5] == (top * 100 + 5) as f64, || {
            format!("max {}", got[5])
        })?;
    }
    node.barrier().map_err(e)?;
    for a in [dst, src, psync] {
        g.free(a).map_err(e)?;
    }
    Ok(())
}

/// A wrong address is refused at the target, naming the node and the address; nothing is
/// written and the job goes on.
fn refused(node: &Node) -> Result<(), String> {
    let g = node.gptr().map_err(e)?;
    let n = node.size();
    let right = NodeId((node.rank().0 + 1) % n);
    let (base, size) = g.arena();
    let stray = base + size / 2; // in the arena, never allocated
    let err = GlobalPtr::<u64>::new(right, stray)
        .write(g, 5)
        .err()
        .map(|x| x.to_string());
    let text = err.unwrap_or_default();
    check(
        text.contains(&format!("{right} refused a put of 8 bytes at {stray:#x}")),
        || format!("refusal text: {text:?}"),
    )?;
    let local = 0u64;
    let err = GlobalPtr::<u64>::new(right, &local as *const u64 as usize)
        .read(g)
        .err();
    check(err.is_some(), || {
        "a get of a stack address was not refused".into()
    })?;
    GlobalPtr::<u64>::new(right, stray).put(g, 1).map_err(e)?;
    check(g.sync().is_err(), || {
        "sync did not report the refused put".into()
    })?;
    node.barrier().map_err(e)
}

const SCENARIOS: &[(&str, Scenario, &[&str])] = &[
    ("spread", spread, &["hlrc"]),
    ("get_pipeline", get_pipeline, &["hlrc"]),
    ("landed_gets", landed_gets, &["hlrc"]),
    ("stores", stores, &["hlrc"]),
    ("atomics", atomics, &["hlrc"]),
    ("collectives", collectives, &["hlrc"]),
    ("refused", refused, &["hlrc"]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_transports(SCENARIOS, &args, "")
}

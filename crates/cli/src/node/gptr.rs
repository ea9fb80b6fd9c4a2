//! Node side of `squall bench gptr`: node 0 measures one-sided operations on node 1's
//! symmetric memory beside raw messages of the same shape on the same endpoint, alternating
//! the two so both see the same conditions: an 8-byte get against a small request/reply, a
//! 1 MiB put and get against a raw 1 MiB request with a small reply (and the reverse), and a
//! stream of 8-byte one-way stores against a stream of raw 8-byte sends (each ended by one
//! round trip, which the per-pair FIFO puts behind the stream). Node 0 also reads back the
//! statistics that count the operations. Owns these measurements; must not touch the engine.
use super::NodeError;
use crate::bench::report::emit_result;
use serde_json::{json, Value};
use squall::{Node, NodeId};
use squall_wire::MsgType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Raw baselines: a small request answered with 8 bytes.
const ECHO8: MsgType = MsgType(0xF020);
/// Raw: a request carrying data, answered with nothing (the put baseline).
const BULK_IN: MsgType = MsgType(0xF021);
/// Raw: a request naming a length, answered with that many bytes (the get baseline).
const BULK_OUT: MsgType = MsgType(0xF022);
/// Raw: one-way 8-byte messages, counted (the store baseline).
const FLOOD: MsgType = MsgType(0xF023);

const MIB: usize = 1 << 20;

fn dsm(e: squall::SquallError) -> NodeError {
    NodeError::Check(e.to_string())
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn serve(node: &Node, flood: Arc<AtomicU64>) {
    let ep = node.endpoint();
    ep.register(ECHO8, |ep, m| {
        let _ = ep.reply(&m, vec![1u8; 8]);
    });
    ep.register(BULK_IN, |ep, m| {
        let _ = ep.reply(&m, Vec::new());
    });
    ep.register(BULK_OUT, |ep, m| {
        let n = m
            .payload
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes) as usize;
        let _ = ep.reply(&m, vec![3u8; n.min(64 * MIB)]);
    });
    ep.register(FLOOD, move |_, _| {
        flood.fetch_add(1, Ordering::Relaxed);
    });
}

fn gptr_count(node: &Node, key: &str) -> u64 {
    node.stats()
        .counts
        .get("gptr")
        .and_then(|p| p.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

pub fn bench(a: super::dsm::SyncNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    let flood = Arc::new(AtomicU64::new(0));
    serve(&node, flood.clone());
    let g = node.gptr().map_err(dsm)?;
    let buf = g.alloc(MIB, 4096).map_err(dsm)?;
    node.barrier().map_err(dsm)?;
    let peer = NodeId(1);
    let ep = node.endpoint();
    let bw_iters = (a.iters / 25).clamp(4, 40);
    let stores = a.iters * 20;
    let mut rows: Vec<Value> = Vec::new();
    if node.rank() == NodeId(0) {
        let mut data = vec![5u8; MIB];
        let mut word = [0u8; 8];
        let mut big = vec![0u8; MIB];
        for _ in 0..a.reps {
            // 8-byte get latency beside the small round trip.
            let (mut get, mut raw) = (Vec::new(), Vec::new());
            for _ in 0..a.iters {
                let t = Instant::now();
                g.get(peer, buf, &mut word).map_err(dsm)?;
                get.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                ep.request(peer, ECHO8, vec![0u8; 8])?;
                raw.push(t.elapsed().as_secs_f64() * 1e6);
            }
            // 1 MiB put and get beside raw 1 MiB requests.
            let (mut put_s, mut rawput_s, mut get_s, mut rawget_s) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for it in 0..bw_iters {
                // Each round's bytes differ (set outside the timings): the get below must
                // bring this round's put back, every byte of it.
                let val = 5 + (it % 200) as u8;
                data.fill(val);
                big.fill(0);
                let t = Instant::now();
                g.put(peer, buf, &data).map_err(dsm)?;
                put_s.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                ep.request(peer, BULK_IN, data.clone())?;
                rawput_s.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                g.get(peer, buf, &mut big).map_err(dsm)?;
                get_s.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let r = ep.request(peer, BULK_OUT, (MIB as u64).to_le_bytes().to_vec())?;
                rawget_s.push(t.elapsed().as_secs_f64());
                if r.len() != MIB || big.iter().any(|&b| b != val) {
                    return Err(NodeError::Check("1 MiB transfer came back wrong".into()));
                }
            }
            // One-way 8-byte stores beside raw 8-byte sends, each stream closed by one round
            // trip (FIFO per pair: everything before it has been handled).
            let before = flood.load(Ordering::Relaxed);
            let t = Instant::now();
            for k in 0..stores {
                g.store(peer, buf + 8 * (k % 1024), &word).map_err(dsm)?;
            }
            g.get(peer, buf, &mut word).map_err(dsm)?;
            let store_rate = stores as f64 / t.elapsed().as_secs_f64();
            let t = Instant::now();
            for _ in 0..stores {
                ep.send(peer, FLOOD, vec![0u8; 8])?;
            }
            ep.request(peer, ECHO8, vec![0u8; 8])?;
            let raw_rate = stores as f64 / t.elapsed().as_secs_f64();
            let _ = before;
            let mib_s = |v: &mut Vec<f64>| 1.0 / quantile(v, 0.5);
            rows.push(json!({
                "get8_p50_us": quantile(&mut get.clone(), 0.5),
                "get8_p99_us": quantile(&mut get, 0.99),
                "raw_p50_us": quantile(&mut raw.clone(), 0.5),
                "raw_p99_us": quantile(&mut raw, 0.99),
                "put_mib_s": mib_s(&mut put_s),
                "raw_put_mib_s": mib_s(&mut rawput_s),
                "get_mib_s": mib_s(&mut get_s),
                "raw_get_mib_s": mib_s(&mut rawget_s),
                "store_per_s": store_rate,
                "raw_per_s": raw_rate,
            }));
        }
    }
    node.barrier().map_err(dsm)?;
    if node.rank() == NodeId(0) {
        let reps = a.reps as u64;
        emit_result(&json!({
            "reps": rows,
            "iters": a.iters, "bw_iters": bw_iters, "stores": stores,
            "gets": gptr_count(&node, "gets"), "puts": gptr_count(&node, "puts"),
            "stored": gptr_count(&node, "stores"),
            "want_gets": reps * (a.iters as u64 + bw_iters as u64 + 1),
            "want_puts": reps * bw_iters as u64, "want_stores": reps * stores as u64,
        }));
    } else {
        // The peer's side of the counts: what it served.
        emit_result(&json!({
            "served_gets": gptr_count(&node, "served_gets"),
            "served_puts": gptr_count(&node, "served_puts"),
            "served_stores": gptr_count(&node, "served_stores"),
            "raw_flood": flood.load(Ordering::Relaxed),
        }));
    }
    g.free(buf).map_err(dsm)?;
    node.finalize().map_err(dsm)
}

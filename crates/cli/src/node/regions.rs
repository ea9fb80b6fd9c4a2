//! Node side of `squall bench regions`: node 1 is the home of one CRL region per size and
//! writes it before every sample (which invalidates node 0's copy); node 0 times
//! `start_read` on the invalidated region (a read miss: the home sends the bytes back), and,
//! alternating with it, a raw request/reply of the same size on the same transport (an
//! 8-byte request, a reply of S bytes). Node 0 checks from its region statistics that every
//! timed read was a miss, and prints one result line. Owns these measurements.
use super::NodeError;
use crate::bench::report::emit_result;
use clap::Args;
use serde_json::json;
use squall::{Node, NodeId, RegionId};
use squall_wire::MsgType;
use std::time::Instant;

/// Raw request/reply baseline: the request carries the reply's size (`u64`).
const FETCH_N: MsgType = MsgType(0xF030);

#[derive(Args, Debug)]
pub struct RegionsNodeArgs {
    /// Region sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,4096,65536")]
    pub sizes: Vec<usize>,
    /// Timed read misses per size and repetition.
    #[arg(long, default_value_t = 200)]
    pub iters: usize,
    /// Repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

fn err(e: squall::SquallError) -> NodeError {
    NodeError::Check(e.to_string())
}

pub fn run(a: RegionsNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(err)?;
    node.endpoint().register(FETCH_N, |ep, m| {
        let n = m
            .payload
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes) as usize;
        if let Err(e) = ep.reply(&m, vec![3u8; n]) {
            eprintln!("fetch reply failed: {e}");
        }
    });
    node.barrier().map_err(err)?;
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let rid = if node.rank() == NodeId(1) {
            Some(node.region_create(size).map_err(err)?.0)
        } else {
            None
        };
        let rid = RegionId(node.broadcast_from(NodeId(1), rid)?);
        let r = node.region_map(rid).map_err(err)?;
        let misses0 = node.region_stats().read_misses;
        let (mut miss, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..a.reps {
            for i in 0..a.iters {
                if node.rank() == NodeId(1) {
                    let mut w = r.write().map_err(err)?;
                    w[0] = i as u8;
                }
                node.barrier().map_err(err)?;
                if node.rank() == NodeId(0) {
                    // Alternate which goes first after the barrier, so both see the same
                    // conditions on average.
                    if i % 2 == 1 {
                        raw.push(raw_us(&node, size)?);
                    }
                    let t = Instant::now();
                    let g = r.read().map_err(err)?;
                    let us = t.elapsed().as_secs_f64() * 1e6;
                    if g[0] != i as u8 {
                        return Err(NodeError::Check(format!(
                            "read {i} of {size} bytes saw {}",
                            g[0]
                        )));
                    }
                    drop(g);
                    miss.push(us);
                    if i % 2 == 0 {
                        raw.push(raw_us(&node, size)?);
                    }
                }
                node.barrier().map_err(err)?;
            }
        }
        drop(r);
        if node.rank() == NodeId(0) {
            let misses = node.region_stats().read_misses - misses0;
            let want = (a.reps * a.iters) as u64;
            if misses != want {
                return Err(NodeError::Check(format!(
                    "{size} bytes: {misses} read misses counted for {want} timed reads"
                )));
            }
            rows.push(json!({"size": size, "miss_us": miss, "raw_us": raw, "misses": misses}));
        }
    }
    if node.rank() == NodeId(0) {
        emit_result(&json!({ "rows": rows }));
    }
    node.finalize().map_err(err)
}

/// One raw request/reply of `size` bytes back from node 1, in microseconds.
fn raw_us(node: &Node, size: usize) -> Result<f64, NodeError> {
    let t = Instant::now();
    let reply =
        node.endpoint()
            .request(NodeId(1), FETCH_N, (size as u64).to_le_bytes().to_vec())?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    if reply.len() != size {
        return Err(NodeError::Check("short raw reply".into()));
    }
    Ok(us)
}

trait BroadcastFrom {
    fn broadcast_from(&self, from: NodeId, v: Option<u64>) -> Result<u64, NodeError>;
}

impl BroadcastFrom for Node {
    /// A value from node `from` to every node (through CRL's broadcast).
    fn broadcast_from(&self, from: NodeId, v: Option<u64>) -> Result<u64, NodeError> {
        if self.rank() == from {
            let v = v.ok_or_else(|| NodeError::Check("no value to broadcast".into()))?;
            self.region_bcast_send(&v.to_le_bytes()).map_err(err)?;
            Ok(v)
        } else {
            let b = self.region_bcast_recv(8).map_err(err)?;
            b.try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| NodeError::Check("bad broadcast".into()))
        }
    }
}

//! CRL's global operations beside regions: `rgn_bcast_send`/`rgn_bcast_recv` (any node
//! broadcasts bytes; every other node receives the broadcasts in the order they come) and the
//! reductions `rgn_reduce_dadd`/`dmin`/`dmax` (every node calls; rank 0 combines the values
//! in rank order and sends the result back). They travel as `msg::REGION` messages whose
//! first byte is one of the tags below, never taken by the protocol's kinds. Owns these
//! mailboxes; must not touch the region core.

use crate::error::{Result, SquallError};
use crate::msg;
use crate::Node;
use parking_lot::{Condvar, Mutex};
use squall_core::NodeId;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// A broadcast: the tag, then the bytes.
pub(super) const TAG_BCAST: u8 = 0xB0;
/// A node's reduction value to rank 0: tag, `u64` sequence, `f64`.
pub(super) const TAG_REDUCE: u8 = 0xB1;
/// Rank 0's reduction result: tag, `u64` sequence, `f64`.
pub(super) const TAG_RESULT: u8 = 0xB2;

/// A reduction's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Add,
    Min,
    Max,
}

impl ReduceOp {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceOp::Add => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

#[derive(Default)]
struct Boxes {
    bcasts: VecDeque<Vec<u8>>,
    /// Rank 0: the values received per reduction sequence, by sender.
    values: HashMap<u64, Vec<(NodeId, f64)>>,
    results: HashMap<u64, f64>,
}

/// The mailboxes of one node's broadcasts and reductions.
#[derive(Default)]
pub(crate) struct Collectives {
    boxes: Mutex<Boxes>,
    cv: Condvar,
    seq: AtomicU64,
}

impl Collectives {
    /// Whether `payload` is one of these messages; if so, file it (the handler).
    pub(super) fn on_message(
        &self,
        from: NodeId,
        payload: &[u8],
    ) -> std::result::Result<bool, String> {
        let Some(&tag) = payload.first() else {
            return Ok(false);
        };
        let mut b = self.boxes.lock();
        match tag {
            TAG_BCAST => b.bcasts.push_back(payload[1..].to_vec()),
            TAG_REDUCE | TAG_RESULT => {
                let seq = payload
                    .get(1..9)
                    .and_then(|s| s.try_into().ok())
                    .map(u64::from_le_bytes);
                let v = payload
                    .get(9..17)
                    .and_then(|s| s.try_into().ok())
                    .map(f64::from_le_bytes);
                let (Some(seq), Some(v), 17) = (seq, v, payload.len()) else {
                    return Err(format!("malformed reduction message from {from}"));
                };
                if tag == TAG_REDUCE {
                    b.values.entry(seq).or_default().push((from, v));
                } else {
                    b.results.insert(seq, v);
                }
            }
            _ => return Ok(false),
        }
        self.cv.notify_all();
        Ok(true)
    }
}

fn reduce_msg(tag: u8, seq: u64, v: f64) -> Vec<u8> {
    let mut p = vec![tag];
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&v.to_le_bytes());
    p
}

impl Node {
    fn collectives(&self) -> &Collectives {
        &self.region_service().coll
    }

    /// CRL's `rgn_bcast_send`: send `data` to every other node (each receives it with
    /// [`Node::region_bcast_recv`]).
    pub fn region_bcast_send(&self, data: &[u8]) -> Result<()> {
        let mut p = Vec::with_capacity(data.len() + 1);
        p.push(TAG_BCAST);
        p.extend_from_slice(data);
        for n in 0..self.size() {
            if NodeId(n) != self.rank() {
                self.endpoint().send(NodeId(n), msg::REGION, p.clone())?;
            }
        }
        Ok(())
    }

    /// CRL's `rgn_bcast_recv`: the next broadcast from another node (waits for it); it must
    /// have `len` bytes.
    pub fn region_bcast_recv(&self, len: usize) -> Result<Vec<u8>> {
        let c = self.collectives();
        let mut b = c.boxes.lock();
        loop {
            if let Some(d) = b.bcasts.pop_front() {
                if d.len() != len {
                    return Err(SquallError::Config(format!(
                        "rgn_bcast_recv of {len} bytes received a broadcast of {}",
                        d.len()
                    )));
                }
                return Ok(d);
            }
            c.cv.wait(&mut b);
        }
    }

    /// CRL's reductions (`rgn_reduce_dadd`, `dmin`, `dmax`): every node calls with its
    /// value, every node gets the combination of all (combined in rank order).
    pub fn region_reduce(&self, op: ReduceOp, v: f64) -> Result<f64> {
        let c = self.collectives();
        let seq = c.seq.fetch_add(1, Ordering::Relaxed);
        if self.rank() != NodeId(0) {
            self.endpoint()
                .send(NodeId(0), msg::REGION, reduce_msg(TAG_REDUCE, seq, v))?;
            let mut b = c.boxes.lock();
            loop {
                if let Some(r) = b.results.remove(&seq) {
                    return Ok(r);
                }
                c.cv.wait(&mut b);
            }
        }
        let others = usize::from(self.size()) - 1;
        let mut vals = {
            let mut b = c.boxes.lock();
            loop {
                if b.values.get(&seq).map_or(0, Vec::len) >= others {
                    break b.values.remove(&seq).unwrap_or_default();
                }
                c.cv.wait(&mut b);
            }
        };
        vals.sort_by_key(|(n, _)| *n);
        let r = vals.iter().fold(v, |acc, (_, x)| op.apply(acc, *x));
        for n in 1..self.size() {
            self.endpoint()
                .send(NodeId(n), msg::REGION, reduce_msg(TAG_RESULT, seq, r))?;
        }
        Ok(r)
    }
}

//! Collective calls: every node makes the same sequence of them; rank 0's value reaches
//! everyone. Owns the collective sequence numbers; must not touch the heap or the cores.

use super::Node;
use crate::error::{Result, SquallError};
use crate::msg;
use squall_core::NodeId;
use std::sync::atomic::Ordering;

impl Node {
    /// Collective: rank 0 passes `Some(value)`, everyone gets it back. All nodes must make the
    /// same sequence of collective calls.
    pub fn broadcast(&self, value: Option<u64>) -> Result<u64> {
        let seq = self.inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        if self.rank() == NodeId(0) {
            let v = value.ok_or_else(|| {
                SquallError::Config("broadcast: rank 0 must supply the value".into())
            })?;
            let mut p = seq.to_le_bytes().to_vec();
            p.extend_from_slice(&v.to_le_bytes());
            for n in 1..self.size() {
                self.inner.ep.send(NodeId(n), msg::COLLECTIVE, p.clone())?;
            }
            Ok(v)
        } else {
            Ok(self.inner.coll.take(seq))
        }
    }
}

//! Collective calls: every node makes the same sequence of them; rank 0's value, or rank 0's
//! failure, reaches everyone, so a collective that fails fails on every node with the same
//! error (nobody is left waiting for a value that will never come). Owns the collective
//! sequence numbers and their message; must not touch the heap or the cores.

use super::{CollValue, Node};
use crate::error::{Result, SquallError};
use crate::msg;
use squall_core::NodeId;
use std::sync::atomic::Ordering;

/// Tag of a collective message carrying a value (then the `u64`).
const TAG_VALUE: u8 = 0;
/// Tag of a collective message carrying rank 0's failure (then its text).
const TAG_FAILED: u8 = 1;

impl Node {
    /// Collective: rank 0 passes `Some(value)`, everyone gets it back. All nodes must make the
    /// same sequence of collective calls. If rank 0 passes `None`, every node fails with the
    /// same [`SquallError::Collective`].
    pub fn broadcast(&self, value: Option<u64>) -> Result<u64> {
        self.collective("broadcast", move || {
            value.ok_or_else(|| {
                SquallError::Config("broadcast: rank 0 must supply the value".into())
            })
        })
    }

    /// One collective value: rank 0 computes it with `f` (only rank 0 runs `f`) and sends it,
    /// or its failure, to every node. Every node returns the value, or the same
    /// [`SquallError::Collective`] naming node 0, `what` and the cause.
    pub(super) fn collective(
        &self,
        what: &'static str,
        f: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        let seq = self.inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        let failed = |cause: String| SquallError::Collective {
            what,
            node: NodeId(0),
            cause,
        };
        if self.rank() != NodeId(0) {
            return self.inner.coll.take(seq).map_err(failed);
        }
        let r = f().map_err(|e| e.to_string());
        let p = encode(seq, &r);
        for n in 1..self.size() {
            self.inner.ep.send(NodeId(n), msg::COLLECTIVE, p.clone())?;
        }
        r.map_err(failed)
    }
}

/// A collective message: `u64` sequence, tag, then the `u64` value or the failure's text.
fn encode(seq: u64, r: &CollValue) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    match r {
        Ok(v) => {
            p.push(TAG_VALUE);
            p.extend_from_slice(&v.to_le_bytes());
        }
        Err(text) => {
            p.push(TAG_FAILED);
            p.extend_from_slice(text.as_bytes());
        }
    }
    p
}

/// Decode a collective message: its sequence number and outcome; `None` if malformed.
pub fn decode(p: &[u8]) -> Option<(u64, CollValue)> {
    let seq = u64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
    let rest = p.get(9..)?;
    match *p.get(8)? {
        TAG_VALUE => Some((seq, Ok(u64::from_le_bytes(rest.try_into().ok()?)))),
        TAG_FAILED => Some((seq, Err(String::from_utf8_lossy(rest).into_owned()))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_messages_round_trip_and_reject_garbage() {
        let ok = encode(7, &Ok(0xdead_beef));
        assert_eq!(decode(&ok), Some((7, Ok(0xdead_beef))));
        let failed = encode(8, &Err("allocation on node 0: too big".into()));
        assert_eq!(
            decode(&failed),
            Some((8, Err("allocation on node 0: too big".into())))
        );
        assert_eq!(decode(&ok[..16]), None, "a value cut short");
        assert_eq!(decode(&[1, 2, 3]), None);
        let mut bad = ok.clone();
        bad[8] = 9;
        assert_eq!(decode(&bad), None, "an unknown tag");
    }
}

//! Home-executed atomic operations: what an operation is (`AtomicOp`, `AtomicCall`), its wire
//! encoding, its execution on the home's copy of a page, and the per-location store of release
//! information that lets an atomic location carry consistency like a lock.
//!
//! An atomic location behaves like a lock's release/acquire point: a releasing operation
//! brings its node's synchronization info (`Consistency::grant_info(&[])`, "everything this
//! node knows", as a flag set does) and the home keeps it, the latest per node (a node's later
//! info covers its earlier one). An acquiring operation gets back the infos other nodes left
//! and its node applies them (`Consistency::apply_grant`) before the operation returns.
//! Keeping every node's latest info, not only the last writer's, covers C11 release
//! sequences: an acquire that reads a value written by a chain of read-modify-writes
//! synchronizes with every releasing operation in the chain. Infos are kept per page, not per
//! word: an acquire also synchronizes with releases through other atomics of the same page
//! (stronger than C11, never weaker), and an array of atomics costs one set of infos per page
//! (at most one info per node each) instead of one per element.
//!
//! Owns: the operations' semantics (little-endian words of 1, 2, 4 or 8 bytes), their
//! encoding, the info store. Must not touch: messages other than the op encoding, page access.

use crate::shared::codec::{Reader, Writer};
use crate::ProtoError;
use squall_core::{NodeId, PageId, PageMemory, PAGE_SIZE};
use std::collections::BTreeMap;

/// A remote atomic operation on a little-endian word, executed at the page's home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// `old + v` (wrapping at the word's width).
    FetchAdd(u64),
    /// Store `v`.
    Swap(u64),
    /// Store `new` if the word equals `expected`.
    CompareSwap { expected: u64, new: u64 },
    /// `old & v`.
    And(u64),
    /// `old | v`.
    Or(u64),
    /// `old ^ v`.
    Xor(u64),
    /// `!(old & v)`.
    Nand(u64),
    /// Read the word; nothing is written.
    Load,
}

impl AtomicOp {
    /// The word's new value given its old one (full 64 bits; [`AtomicCall`] truncates).
    pub fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::FetchAdd(v) => old.wrapping_add(v),
            AtomicOp::Swap(v) => v,
            AtomicOp::CompareSwap { expected, new } => {
                if old == expected {
                    new
                } else {
                    old
                }
            }
            AtomicOp::And(v) => old & v,
            AtomicOp::Or(v) => old | v,
            AtomicOp::Xor(v) => old ^ v,
            AtomicOp::Nand(v) => !(old & v),
            AtomicOp::Load => old,
        }
    }

    /// The operation with its operands cut to `width` bytes (so a compare sees the word's
    /// bits only).
    fn masked(self, mask: u64) -> AtomicOp {
        match self {
            AtomicOp::FetchAdd(v) => AtomicOp::FetchAdd(v & mask),
            AtomicOp::Swap(v) => AtomicOp::Swap(v & mask),
            AtomicOp::CompareSwap { expected, new } => AtomicOp::CompareSwap {
                expected: expected & mask,
                new: new & mask,
            },
            AtomicOp::And(v) => AtomicOp::And(v & mask),
            AtomicOp::Or(v) => AtomicOp::Or(v & mask),
            AtomicOp::Xor(v) => AtomicOp::Xor(v & mask),
            AtomicOp::Nand(v) => AtomicOp::Nand(v & mask),
            AtomicOp::Load => AtomicOp::Load,
        }
    }
}

/// One atomic operation as a node asks its page's home for it: the operation, the word's
/// width, and its ordering (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtomicCall {
    pub op: AtomicOp,
    /// 1, 2, 4 or 8 bytes, naturally aligned.
    pub width: u8,
    /// The reply brings the release infos other nodes left at this location.
    pub acquire: bool,
    /// This node's release info, kept at the location for later acquirers (`None`: the
    /// operation is not a release).
    pub release: Option<Vec<u8>>,
}

impl From<AtomicOp> for AtomicCall {
    /// An 8-byte operation without ordering (the C API's `squall_atomic_*` words).
    fn from(op: AtomicOp) -> Self {
        AtomicCall {
            op,
            width: 8,
            acquire: false,
            release: None,
        }
    }
}

impl AtomicCall {
    fn mask(&self) -> u64 {
        match self.width {
            8 => u64::MAX,
            w => (1u64 << (8 * u32::from(w))) - 1,
        }
    }

    /// The word's bytes after this call, given its old value (as the home wrote them).
    pub fn result_bytes(&self, old: u64) -> Vec<u8> {
        let new = self.op.masked(self.mask()).apply(old) & self.mask();
        new.to_le_bytes()[..usize::from(self.width)].to_vec()
    }
}

pub(crate) fn encode_op(w: &mut Writer, op: AtomicOp) {
    match op {
        AtomicOp::FetchAdd(v) => w.u8(0).u64(v),
        AtomicOp::Swap(v) => w.u8(1).u64(v),
        AtomicOp::CompareSwap { expected, new } => w.u8(2).u64(expected).u64(new),
        AtomicOp::And(v) => w.u8(3).u64(v),
        AtomicOp::Or(v) => w.u8(4).u64(v),
        AtomicOp::Xor(v) => w.u8(5).u64(v),
        AtomicOp::Load => w.u8(6),
        AtomicOp::Nand(v) => w.u8(7).u64(v),
    };
}

pub(crate) fn decode_op(r: &mut Reader<'_>) -> Result<AtomicOp, ProtoError> {
    Ok(match r.u8()? {
        0 => AtomicOp::FetchAdd(r.u64()?),
        1 => AtomicOp::Swap(r.u64()?),
        2 => AtomicOp::CompareSwap {
            expected: r.u64()?,
            new: r.u64()?,
        },
        3 => AtomicOp::And(r.u64()?),
        4 => AtomicOp::Or(r.u64()?),
        5 => AtomicOp::Xor(r.u64()?),
        6 => AtomicOp::Load,
        7 => AtomicOp::Nand(r.u64()?),
        b => return Err(r.err(format!("unknown atomic op {b}"))),
    })
}

/// Encode a call (op, width, ordering, release info).
pub(crate) fn encode_call(w: &mut Writer, call: &AtomicCall) {
    encode_op(w, call.op);
    w.u8(call.width).u8(u8::from(call.acquire));
    match &call.release {
        Some(info) => w.u8(1).bytes(info),
        None => w.u8(0),
    };
}

pub(crate) fn decode_call(r: &mut Reader<'_>) -> Result<AtomicCall, ProtoError> {
    let op = decode_op(r)?;
    let width = r.u8()?;
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(r.err(format!("atomic width {width}")));
    }
    let acquire = r.bool()?;
    let release = if r.bool()? {
        Some(r.bytes()?.to_vec())
    } else {
        None
    };
    Ok(AtomicCall {
        op,
        width,
        acquire,
        release,
    })
}

/// Encode the infos an acquiring operation gets back.
pub(crate) fn encode_infos(w: &mut Writer, infos: &[Vec<u8>]) {
    w.u16(infos.len() as u16);
    for i in infos {
        w.bytes(i);
    }
}

pub(crate) fn decode_infos(r: &mut Reader<'_>, nodes: u16) -> Result<Vec<Vec<u8>>, ProtoError> {
    let n = r.u16()?;
    if n > nodes {
        return Err(r.err(format!("{n} release infos from a job of {nodes} nodes")));
    }
    (0..n).map(|_| r.bytes().map(<[u8]>::to_vec)).collect()
}

/// Execute `op` on the word of `width` bytes at `offset` of the node's copy through the
/// backdoor; returns the old value. Writes only when the value changes.
pub(crate) fn exec_atomic(
    mem: &dyn PageMemory,
    page: PageId,
    offset: usize,
    width: u8,
    op: AtomicOp,
) -> (u64, bool) {
    let w = usize::from(width);
    let mut buf = vec![0u8; PAGE_SIZE];
    mem.read_page(page, &mut buf);
    let mut word = [0u8; 8];
    word[..w].copy_from_slice(&buf[offset..offset + w]);
    let old = u64::from_le_bytes(word);
    let mask = AtomicCall {
        op,
        width,
        acquire: false,
        release: None,
    }
    .mask();
    let new = op.masked(mask).apply(old) & mask;
    if new != old {
        mem.write_bytes(page, offset, &new.to_le_bytes()[..w]);
    }
    (old, new != old)
}

/// A word of `width` bytes at `offset` must be naturally aligned and inside the page.
pub(crate) fn check_atomic(page: PageId, offset: usize, width: u8) -> Result<(), ProtoError> {
    let w = usize::from(width);
    if !matches!(width, 1 | 2 | 4 | 8) || !offset.is_multiple_of(w) || offset + w > PAGE_SIZE {
        return Err(ProtoError::BadAtomic {
            page,
            offset,
            width,
        });
    }
    Ok(())
}

/// The release infos kept for the atomics of this home's pages (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct AtomicInfos {
    at: BTreeMap<PageId, BTreeMap<NodeId, Vec<u8>>>,
}

impl AtomicInfos {
    /// Execute `call` from `from` on the home's copy: the old value, whether the word changed,
    /// and (for an acquire) the infos other nodes released through atomics of this page.
    pub(crate) fn exec(
        &mut self,
        mem: &dyn PageMemory,
        page: PageId,
        offset: usize,
        call: &AtomicCall,
        from: NodeId,
    ) -> (u64, bool, Vec<Vec<u8>>) {
        let (old, changed) = exec_atomic(mem, page, offset, call.width, call.op);
        let mut infos = Vec::new();
        if call.acquire {
            if let Some(m) = self.at.get(&page) {
                infos = m
                    .iter()
                    .filter(|(n, _)| **n != from)
                    .map(|(_, i)| i.clone())
                    .collect();
            }
        }
        if let Some(info) = &call.release {
            self.at.entry(page).or_default().insert(from, info.clone());
        }
        (old, changed, infos)
    }

    /// Whether `page` holds infos (such a page must keep its home: the infos do not travel
    /// with a migration).
    pub(crate) fn holds(&self, page: PageId) -> bool {
        self.at.contains_key(&page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_wrap_at_their_width() {
        let call = |op, width| AtomicCall {
            op,
            width,
            acquire: false,
            release: None,
        };
        let c = call(AtomicOp::FetchAdd(1), 1);
        assert_eq!(c.op.masked(c.mask()).apply(0xff) & c.mask(), 0);
        let c = call(AtomicOp::FetchAdd(u64::MAX), 4); // -1 as a u64
        assert_eq!(c.op.masked(c.mask()).apply(5) & c.mask(), 4);
        let c = call(
            AtomicOp::CompareSwap {
                expected: u64::MAX, // (short)-1 sign-extended
                new: 7,
            },
            2,
        );
        assert_eq!(c.op.masked(c.mask()).apply(0xffff) & c.mask(), 7);
        assert_eq!(AtomicOp::And(0b1100).apply(0b1010), 0b1000);
        assert_eq!(AtomicOp::Or(0b1100).apply(0b1010), 0b1110);
        assert_eq!(AtomicOp::Xor(0b1100).apply(0b1010), 0b0110);
        assert_eq!(AtomicOp::Load.apply(9), 9);
        let c = call(AtomicOp::Nand(0xf0), 1);
        assert_eq!(c.op.masked(c.mask()).apply(0xff) & c.mask(), 0x0f);
    }

    #[test]
    fn calls_round_trip() {
        let calls = [
            AtomicCall::from(AtomicOp::Load),
            AtomicCall {
                op: AtomicOp::CompareSwap {
                    expected: 3,
                    new: 4,
                },
                width: 2,
                acquire: true,
                release: Some(vec![1, 2, 3]),
            },
        ];
        for c in calls {
            let mut w = Writer::new(1);
            encode_call(&mut w, &c);
            let b = w.finish();
            let mut r = Reader::new(NodeId(0), &b);
            assert_eq!(r.u8().expect("tag"), 1);
            assert_eq!(decode_call(&mut r).expect("a valid call"), c);
            r.end().expect("nothing after the call");
        }
        let mut w = Writer::new(1);
        w.u8(6).u8(3).u8(0).u8(0);
        let b = w.finish();
        let mut r = Reader::new(NodeId(0), &b);
        r.u8().expect("tag");
        assert!(decode_call(&mut r).is_err(), "width 3 is refused");
    }
}

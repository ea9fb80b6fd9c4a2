//! The compact binary encoding of messages between the SyncCores of different nodes.
//!
//! Owns: `Msg` and its encode/decode. Layout: one kind byte, then fixed little-endian fields
//! (ids u64, node u16, counts u32, epochs u64) and length-prefixed byte strings (u32 length).
//! Decoding never panics on arbitrary bytes: every short read, unknown kind, oversized length or
//! trailing byte is a `SyncError::Malformed`. Must not touch: core state, sockets.
use crate::error::SyncError;
use squall_core::NodeId;

/// One message between two nodes' SyncCores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Requester → lock manager: enqueue me (carries the requester's `acquire_info` and its
    /// lock read-ahead wishes).
    LockRequest {
        lock: u64,
        read_ahead: ReadAhead,
        info: Vec<u8>,
    },
    /// Lock manager → previous tail: when you are done, hand the lock to `requester` (the
    /// request's `read_ahead` travels along).
    LockForward {
        lock: u64,
        requester: NodeId,
        read_ahead: ReadAhead,
        info: Vec<u8>,
    },
    /// Previous holder → requester: the lock token, with the releaser's `grant_info`, and the
    /// idle tokens of `lent` lent along with it (those of the request's `ahead` that were idle,
    /// then at most `more` the holder chose by its own lock order).
    LockGrant {
        lock: u64,
        lent: Vec<u64>,
        info: Vec<u8>,
    },
    /// Waiting node → condition manager: one more waiting thread of mine.
    CondRegister { cond: u64 },
    /// Condition manager → waiting node: your oldest unacknowledged registration is recorded.
    CondRegistered { cond: u64 },
    /// Signalling node → condition manager: wake one waiter (`all == false`) or every waiter.
    CondSignal { cond: u64, all: bool },
    /// Condition manager → waiting node: wake your `count` oldest waiters.
    CondWake { cond: u64, count: u32 },
    /// Node → its parent in the barrier's tree (per-node mode; the root is the manager): all
    /// local participants of my subtree arrived. `infos`: their infos, each tagged with its
    /// node, or with `MERGED` where a node merged several (`Consistency::merge_barrier_infos`).
    /// `hops`: the longest chain of arrivals that led to this one, this one included.
    BarrierArrive {
        barrier: u64,
        epoch: u64,
        hops: u8,
        infos: Vec<(u16, Vec<u8>)>,
    },
    /// Node → barrier manager (total mode): `count` more of my threads arrived. `late`: they
    /// arrived after this node sent its `BarrierEager` for `epoch` (they count in `epoch` if it
    /// is still open at the manager, else in the next episode; see `barrier.rs`).
    BarrierCount {
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
        late: bool,
    },
    /// Barrier manager → node (total mode): the episode is full; release and send your info.
    BarrierCollect { barrier: u64, epoch: u64 },
    /// Node → barrier manager (total mode): my info, answering `BarrierCollect`.
    BarrierInfo {
        barrier: u64,
        epoch: u64,
        info: Vec<u8>,
    },
    /// Barrier manager → node: the episode is over; everyone's info in rank order, or merged
    /// (fewer entries). Total mode: `counted` of the receiver's reported threads (its oldest)
    /// took part in `epoch`; per-node mode: 0 (unused). `hops`: one-way messages on the
    /// longest causal chain of the episode, this departure included.
    BarrierDepart {
        barrier: u64,
        epoch: u64,
        serial: NodeId,
        counted: u32,
        hops: u8,
        infos: Vec<Vec<u8>>,
    },
    /// Setting node → flag manager: the flag is set; the setter's `grant_info(&[])`.
    FlagSet { flag: u64, info: Vec<u8> },
    /// Clearing node → flag manager.
    FlagClear { flag: u64 },
    /// Waiting node → flag manager: tell me when the flag is set.
    FlagWait { flag: u64 },
    /// Flag manager → waiting node: the flag is set by `setter`, with its info.
    FlagReady {
        flag: u64,
        setter: NodeId,
        info: Vec<u8>,
    },
    /// Node → barrier manager (total mode, the node predicted its participants from the last
    /// episode): `count` more of my threads arrived, and my info, taken after a release that
    /// began once they had all arrived (one message instead of count, collect, info).
    BarrierEager {
        barrier: u64,
        epoch: u64,
        total: u32,
        count: u32,
        info: Vec<u8>,
    },
}

/// The node tag of an entry of `Msg::BarrierArrive` that merges several nodes' infos.
pub const MERGED: u16 = u16::MAX;

/// Lock read-ahead wishes of a lock request (2-node jobs; see `lock.rs`): which tokens the
/// holder may lend along with its grant. Travels unchanged from `LockRequest` to `LockForward`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadAhead {
    /// The requester sent this while `lock` was itself in the `ahead` list of one of its
    /// unanswered requests, so a lend it asked for may overtake it. Such a request asks for
    /// nothing itself (`ahead` empty, `more` 0).
    pub hinted: bool,
    /// Locks the requester expects to take next, by the order its own threads took them last
    /// time (the holder lends those of them that are idle on it).
    pub ahead: Vec<u64>,
    /// How many more idle tokens the holder may choose itself, by the order ITS threads took
    /// locks after `lock` (lender-side order: the requester's own order is unknown or short).
    pub more: u16,
}

impl ReadAhead {
    /// Asks for nothing.
    pub fn none() -> Self {
        Self::default()
    }

    fn encode(&self, w: &mut Writer) {
        w.u8(u8::from(self.hinted));
        w.ids(&self.ahead);
        w.u16(self.more);
    }

    fn decode(r: &mut Reader<'_>, what: &str) -> Result<Self, SyncError> {
        Ok(ReadAhead {
            hinted: r.flag(what)?,
            ahead: r.ids()?,
            more: r.u16()?,
        })
    }
}

/// Message kinds, for statistics.
pub const KIND_NAMES: [&str; 17] = [
    "lock_request",
    "lock_forward",
    "lock_grant",
    "cond_register",
    "cond_registered",
    "cond_signal",
    "cond_wake",
    "barrier_arrive",
    "barrier_count",
    "barrier_collect",
    "barrier_info",
    "barrier_depart",
    "flag_set",
    "flag_clear",
    "flag_wait",
    "flag_ready",
    "barrier_eager",
];

impl Msg {
    /// Index of this message's kind in `KIND_NAMES` (also its wire kind byte minus one).
    pub fn kind(&self) -> usize {
        match self {
            Msg::LockRequest { .. } => 0,
            Msg::LockForward { .. } => 1,
            Msg::LockGrant { .. } => 2,
            Msg::CondRegister { .. } => 3,
            Msg::CondRegistered { .. } => 4,
            Msg::CondSignal { .. } => 5,
            Msg::CondWake { .. } => 6,
            Msg::BarrierArrive { .. } => 7,
            Msg::BarrierCount { .. } => 8,
            Msg::BarrierCollect { .. } => 9,
            Msg::BarrierInfo { .. } => 10,
            Msg::BarrierDepart { .. } => 11,
            Msg::FlagSet { .. } => 12,
            Msg::FlagClear { .. } => 13,
            Msg::FlagWait { .. } => 14,
            Msg::FlagReady { .. } => 15,
            Msg::BarrierEager { .. } => 16,
        }
    }

    /// Short name of this message's kind.
    pub fn kind_name(&self) -> &'static str {
        KIND_NAMES[self.kind()]
    }

    /// Encode into a fresh buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(32));
        w.u8(self.kind() as u8 + 1);
        match self {
            Msg::LockRequest {
                lock,
                read_ahead,
                info,
            } => {
                w.u64(*lock);
                read_ahead.encode(&mut w);
                w.bytes(info);
            }
            Msg::LockForward {
                lock,
                requester,
                read_ahead,
                info,
            } => {
                w.u64(*lock);
                w.u16(requester.0);
                read_ahead.encode(&mut w);
                w.bytes(info);
            }
            Msg::LockGrant { lock, lent, info } => {
                w.u64(*lock);
                w.ids(lent);
                w.bytes(info);
            }
            Msg::CondRegister { cond } | Msg::CondRegistered { cond } => w.u64(*cond),
            Msg::CondSignal { cond, all } => {
                w.u64(*cond);
                w.u8(u8::from(*all));
            }
            Msg::CondWake { cond, count } => {
                w.u64(*cond);
                w.u32(*count);
            }
            Msg::BarrierArrive {
                barrier,
                epoch,
                hops,
                infos,
            } => {
                w.u64(*barrier);
                w.u64(*epoch);
                w.u8(*hops);
                w.u32(infos.len() as u32);
                for (node, i) in infos {
                    w.u16(*node);
                    w.bytes(i);
                }
            }
            Msg::BarrierInfo {
                barrier,
                epoch,
                info,
            } => {
                w.u64(*barrier);
                w.u64(*epoch);
                w.bytes(info);
            }
            Msg::BarrierCount {
                barrier,
                epoch,
                total,
                count,
                late,
            } => {
                w.u64(*barrier);
                w.u64(*epoch);
                w.u32(*total);
                w.u32(*count);
                w.u8(u8::from(*late));
            }
            Msg::BarrierEager {
                barrier,
                epoch,
                total,
                count,
                info,
            } => {
                w.u64(*barrier);
                w.u64(*epoch);
                w.u32(*total);
                w.u32(*count);
                w.bytes(info);
            }
            Msg::BarrierCollect { barrier, epoch } => {
                w.u64(*barrier);
                w.u64(*epoch);
            }
            Msg::BarrierDepart {
                barrier,
                epoch,
                serial,
                counted,
                hops,
                infos,
            } => {
                w.u64(*barrier);
                w.u64(*epoch);
                w.u16(serial.0);
                w.u32(*counted);
                w.u8(*hops);
                w.u32(infos.len() as u32);
                for i in infos {
                    w.bytes(i);
                }
            }
            Msg::FlagSet { flag, info } => {
                w.u64(*flag);
                w.bytes(info);
            }
            Msg::FlagClear { flag } | Msg::FlagWait { flag } => w.u64(*flag),
            Msg::FlagReady { flag, setter, info } => {
                w.u64(*flag);
                w.u16(setter.0);
                w.bytes(info);
            }
        }
        w.0
    }

    /// Decode a message sent by `from`. Never panics; any defect is `SyncError::Malformed`.
    pub fn decode(from: NodeId, buf: &[u8]) -> Result<Msg, SyncError> {
        let mut r = Reader { buf, pos: 0, from };
        let kind = r.u8()?;
        let msg = match kind {
            1 => Msg::LockRequest {
                lock: r.u64()?,
                read_ahead: ReadAhead::decode(&mut r, "lock request hint")?,
                info: r.bytes()?,
            },
            2 => Msg::LockForward {
                lock: r.u64()?,
                requester: NodeId(r.u16()?),
                read_ahead: ReadAhead::decode(&mut r, "lock forward hint")?,
                info: r.bytes()?,
            },
            3 => Msg::LockGrant {
                lock: r.u64()?,
                lent: r.ids()?,
                info: r.bytes()?,
            },
            4 => Msg::CondRegister { cond: r.u64()? },
            5 => Msg::CondRegistered { cond: r.u64()? },
            6 => {
                let cond = r.u64()?;
                let all = r.flag("condition signal")?;
                Msg::CondSignal { cond, all }
            }
            7 => Msg::CondWake {
                cond: r.u64()?,
                count: r.u32()?,
            },
            8 => {
                let barrier = r.u64()?;
                let epoch = r.u64()?;
                let hops = r.u8()?;
                let n = r.u32()? as usize;
                // Each entry needs at least its node and 4-byte length: bound n first.
                if n > r.remaining() / 6 {
                    return Err(r.bad(format!("barrier arrival claims {n} entries")));
                }
                let mut infos = Vec::with_capacity(n);
                for _ in 0..n {
                    infos.push((r.u16()?, r.bytes()?));
                }
                Msg::BarrierArrive {
                    barrier,
                    epoch,
                    hops,
                    infos,
                }
            }
            9 => Msg::BarrierCount {
                barrier: r.u64()?,
                epoch: r.u64()?,
                total: r.u32()?,
                count: r.u32()?,
                late: r.flag("barrier count late")?,
            },
            10 => Msg::BarrierCollect {
                barrier: r.u64()?,
                epoch: r.u64()?,
            },
            11 => Msg::BarrierInfo {
                barrier: r.u64()?,
                epoch: r.u64()?,
                info: r.bytes()?,
            },
            12 => {
                let barrier = r.u64()?;
                let epoch = r.u64()?;
                let serial = NodeId(r.u16()?);
                let counted = r.u32()?;
                let hops = r.u8()?;
                let n = r.u32()? as usize;
                // Each entry needs at least its 4-byte length: bound n before allocating.
                if n > r.remaining() / 4 {
                    return Err(r.bad(format!("barrier departure claims {n} entries")));
                }
                let mut infos = Vec::with_capacity(n);
                for _ in 0..n {
                    infos.push(r.bytes()?);
                }
                Msg::BarrierDepart {
                    barrier,
                    epoch,
                    serial,
                    counted,
                    hops,
                    infos,
                }
            }
            13 => Msg::FlagSet {
                flag: r.u64()?,
                info: r.bytes()?,
            },
            14 => Msg::FlagClear { flag: r.u64()? },
            15 => Msg::FlagWait { flag: r.u64()? },
            16 => Msg::FlagReady {
                flag: r.u64()?,
                setter: NodeId(r.u16()?),
                info: r.bytes()?,
            },
            17 => Msg::BarrierEager {
                barrier: r.u64()?,
                epoch: r.u64()?,
                total: r.u32()?,
                count: r.u32()?,
                info: r.bytes()?,
            },
            k => return Err(r.bad(format!("unknown message kind {k}"))),
        };
        if r.remaining() != 0 {
            return Err(r.bad(format!(
                "{} trailing bytes after a {} message",
                r.remaining(),
                msg.kind_name()
            )));
        }
        Ok(msg)
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn ids(&mut self, ids: &[u64]) {
        self.u32(ids.len() as u32);
        for &id in ids {
            self.u64(id);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    from: NodeId,
}

impl Reader<'_> {
    fn bad(&self, why: String) -> SyncError {
        SyncError::Malformed {
            from: self.from,
            why,
        }
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&[u8], SyncError> {
        if self.remaining() < n {
            return Err(self.bad(format!(
                "truncated at byte {}: needed {n} more bytes, {} left",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SyncError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, SyncError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, SyncError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, SyncError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, SyncError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, SyncError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn flag(&mut self, what: &str) -> Result<bool, SyncError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.bad(format!("{what} flag byte {b} is not 0 or 1"))),
        }
    }
    fn ids(&mut self) -> Result<Vec<u64>, SyncError> {
        let n = self.u32()? as usize;
        // Bound n by the bytes left before allocating.
        if n > self.remaining() / 8 {
            return Err(self.bad(format!("a list claims {n} lock ids")));
        }
        (0..n).map(|_| self.u64()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg> {
        vec![
            Msg::LockRequest {
                lock: 7,
                read_ahead: ReadAhead {
                    hinted: false,
                    ahead: vec![8, 9],
                    more: 3,
                },
                info: vec![1, 2],
            },
            Msg::LockForward {
                lock: u64::MAX,
                requester: NodeId(3),
                read_ahead: ReadAhead {
                    hinted: true,
                    ahead: vec![],
                    more: u16::MAX,
                },
                info: vec![],
            },
            Msg::LockGrant {
                lock: 0,
                lent: vec![1, u64::MAX],
                info: vec![9; 300],
            },
            Msg::CondRegister { cond: 5 },
            Msg::CondRegistered { cond: 5 },
            Msg::CondSignal { cond: 5, all: true },
            Msg::CondWake { cond: 5, count: 4 },
            Msg::BarrierArrive {
                barrier: 1,
                epoch: 2,
                hops: 2,
                infos: vec![(3, vec![3]), (MERGED, vec![])],
            },
            Msg::BarrierCount {
                barrier: 1,
                epoch: 2,
                total: 10,
                count: 1,
                late: true,
            },
            Msg::BarrierCollect {
                barrier: 1,
                epoch: 2,
            },
            Msg::BarrierInfo {
                barrier: 1,
                epoch: 2,
                info: vec![],
            },
            Msg::BarrierDepart {
                barrier: 1,
                epoch: 2,
                serial: NodeId(0),
                counted: 3,
                hops: 3,
                infos: vec![vec![], vec![1, 2, 3]],
            },
            Msg::FlagSet {
                flag: 8,
                info: vec![4],
            },
            Msg::FlagClear { flag: 8 },
            Msg::FlagWait { flag: 8 },
            Msg::FlagReady {
                flag: 8,
                setter: NodeId(2),
                info: vec![5, 6],
            },
            Msg::BarrierEager {
                barrier: 1,
                epoch: 2,
                total: 10,
                count: 2,
                info: vec![7, 8],
            },
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for m in samples() {
            let bytes = m.encode();
            assert_eq!(
                Msg::decode(NodeId(1), &bytes),
                Ok(m.clone()),
                "{}",
                m.kind_name()
            );
        }
    }

    #[test]
    fn truncations_and_trailing_bytes_are_malformed() {
        for m in samples() {
            let bytes = m.encode();
            for cut in 0..bytes.len() {
                assert!(
                    matches!(
                        Msg::decode(NodeId(1), &bytes[..cut]),
                        Err(SyncError::Malformed { .. })
                    ),
                    "{} cut at {cut}",
                    m.kind_name()
                );
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(matches!(
                Msg::decode(NodeId(1), &long),
                Err(SyncError::Malformed { .. })
            ));
        }
        let err = Msg::decode(NodeId(4), &[99]).expect_err("kind 99 is unknown");
        assert_eq!(
            err.to_string(),
            "malformed sync message from node 4: unknown message kind 99"
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(m) = Msg::decode(NodeId(0), &bytes) {
                // Whatever decodes must re-encode to the same bytes (the encoding is canonical).
                prop_assert_eq!(m.encode(), bytes);
            }
        }

        #[test]
        fn mutated_valid_messages_never_panic(idx in 0usize..17, pos in 0usize..64, val in any::<u8>()) {
            let mut bytes = samples()[idx].encode();
            if !bytes.is_empty() {
                let p = pos % bytes.len();
                bytes[p] = val;
            }
            let _ = Msg::decode(NodeId(0), &bytes);
        }
    }
}

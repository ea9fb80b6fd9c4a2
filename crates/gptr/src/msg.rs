//! The engine's messages: kinds (the first byte, named in one place) and a bounds-checked
//! little-endian codec. Every short, long or unknown input decodes to a typed
//! [`GptrError::Malformed`] naming the sender; nothing here panics on bad bytes.
//!
//! Owns the wire format of `GPTR` messages. Must not touch engine state.
use crate::atomic::{AtomicKind, Width};
use crate::GptrError;
use squall_core::NodeId;

/// Message kinds (first byte of every `GPTR` message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Read `len` bytes at `addr`; answered by `GetReply` (or `Refused`).
    Get = 1,
    /// The bytes a `Get` read.
    GetReply = 2,
    /// Write the bytes at `addr`; answered by `PutAck` (or `Refused`).
    Put = 3,
    /// A `Put` was applied.
    PutAck = 4,
    /// Write the bytes at `addr`; never answered unless refused (one-way store).
    Store = 5,
    /// Execute an atomic at `addr`; answered by `AtomicReply` (or `Refused`).
    Atomic = 6,
    /// The old value of an atomic's word.
    AtomicReply = 7,
    /// The target refused an operation (op 0: a one-way store).
    Refused = 8,
    /// The sender reached all-store-sync `epoch` having sent `count` stores to the receiver in it.
    StoreDone = 9,
    /// Every store sent to the sender in all-store-sync `epoch` arrived there.
    StoresIn = 10,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Get,
        Kind::GetReply,
        Kind::Put,
        Kind::PutAck,
        Kind::Store,
        Kind::Atomic,
        Kind::AtomicReply,
        Kind::Refused,
        Kind::StoreDone,
        Kind::StoresIn,
    ];

    pub fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// The name statistics and traces show.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::GetReply => "get_reply",
            Kind::Put => "put",
            Kind::PutAck => "put_ack",
            Kind::Store => "store",
            Kind::Atomic => "atomic",
            Kind::AtomicReply => "atomic_reply",
            Kind::Refused => "refused",
            Kind::StoreDone => "store_done",
            Kind::StoresIn => "stores_in",
        }
    }
}

/// A decoded message; data borrows from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg<'a> {
    Get {
        op: u64,
        addr: u64,
        len: u64,
    },
    GetReply {
        op: u64,
        data: &'a [u8],
    },
    Put {
        op: u64,
        addr: u64,
        data: &'a [u8],
    },
    PutAck {
        op: u64,
    },
    Store {
        epoch: u64,
        addr: u64,
        data: &'a [u8],
    },
    Atomic {
        op: u64,
        addr: u64,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    },
    AtomicReply {
        op: u64,
        old: u64,
    },
    Refused {
        op: u64,
        addr: u64,
        len: u64,
        why: &'a str,
    },
    StoreDone {
        epoch: u64,
        count: u64,
    },
    StoresIn {
        epoch: u64,
    },
}

impl Msg<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            Msg::Get { .. } => Kind::Get,
            Msg::GetReply { .. } => Kind::GetReply,
            Msg::Put { .. } => Kind::Put,
            Msg::PutAck { .. } => Kind::PutAck,
            Msg::Store { .. } => Kind::Store,
            Msg::Atomic { .. } => Kind::Atomic,
            Msg::AtomicReply { .. } => Kind::AtomicReply,
            Msg::Refused { .. } => Kind::Refused,
            Msg::StoreDone { .. } => Kind::StoreDone,
            Msg::StoresIn { .. } => Kind::StoresIn,
        }
    }

    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(32 + self.data_len());
        w.push(self.kind() as u8);
        let u64 = |w: &mut Vec<u8>, v: u64| w.extend_from_slice(&v.to_le_bytes());
        match *self {
            Msg::Get { op, addr, len } => {
                u64(&mut w, op);
                u64(&mut w, addr);
                u64(&mut w, len);
            }
            Msg::GetReply { op, data } => {
                u64(&mut w, op);
                w.extend_from_slice(data);
            }
            Msg::Put { op, addr, data } => {
                u64(&mut w, op);
                u64(&mut w, addr);
                w.extend_from_slice(data);
            }
            Msg::PutAck { op } => u64(&mut w, op),
            Msg::Store { epoch, addr, data } => {
                u64(&mut w, epoch);
                u64(&mut w, addr);
                w.extend_from_slice(data);
            }
            Msg::Atomic {
                op,
                addr,
                width,
                kind,
                a,
                b,
            } => {
                u64(&mut w, op);
                u64(&mut w, addr);
                w.push(width.bytes() as u8);
                w.push(kind as u8);
                u64(&mut w, a);
                u64(&mut w, b);
            }
            Msg::AtomicReply { op, old } => {
                u64(&mut w, op);
                u64(&mut w, old);
            }
            Msg::Refused { op, addr, len, why } => {
                u64(&mut w, op);
                u64(&mut w, addr);
                u64(&mut w, len);
                w.extend_from_slice(why.as_bytes());
            }
            Msg::StoreDone { epoch, count } => {
                u64(&mut w, epoch);
                u64(&mut w, count);
            }
            Msg::StoresIn { epoch } => u64(&mut w, epoch),
        }
        w
    }

    /// The bytes of a `Put` that come before its data: `Msg::Put { op, addr, data }.encode()`
    /// is this followed by `data`.
    pub fn put_head(op: u64, addr: u64) -> Vec<u8> {
        let mut w = Vec::with_capacity(17);
        w.push(Kind::Put as u8);
        w.extend_from_slice(&op.to_le_bytes());
        w.extend_from_slice(&addr.to_le_bytes());
        w
    }

    fn data_len(&self) -> usize {
        match self {
            Msg::GetReply { data, .. } | Msg::Put { data, .. } | Msg::Store { data, .. } => {
                data.len()
            }
            Msg::Refused { why, .. } => why.len(),
            _ => 0,
        }
    }
}

/// Bounds-checked reader of one message.
struct Reader<'a> {
    from: NodeId,
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bad(&self, why: impl Into<String>) -> GptrError {
        GptrError::Malformed {
            from: self.from,
            why: why.into(),
        }
    }
    fn u8(&mut self, what: &str) -> Result<u8, GptrError> {
        let (&v, rest) = self
            .buf
            .split_first()
            .ok_or_else(|| self.bad(format!("short message: no {what}")))?;
        self.buf = rest;
        Ok(v)
    }
    fn u64(&mut self, what: &str) -> Result<u64, GptrError> {
        if self.buf.len() < 8 {
            return Err(self.bad(format!("short message: no {what}")));
        }
        let (h, rest) = self.buf.split_at(8);
        self.buf = rest;
        let mut b = [0u8; 8];
        b.copy_from_slice(h);
        Ok(u64::from_le_bytes(b))
    }
    /// The rest of the message.
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    fn end(&self, kind: Kind) -> Result<(), GptrError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.bad(format!(
                "{} extra bytes after a {} message",
                self.buf.len(),
                kind.name()
            )))
        }
    }
}

/// Decode a message from `from`.
pub fn decode(from: NodeId, buf: &[u8]) -> Result<Msg<'_>, GptrError> {
    let mut r = Reader { from, buf };
    let k = r.u8("kind")?;
    let kind = Kind::from_u8(k).ok_or_else(|| r.bad(format!("unknown kind {k}")))?;
    let m = match kind {
        Kind::Get => Msg::Get {
            op: r.u64("op")?,
            addr: r.u64("address")?,
            len: r.u64("length")?,
        },
        Kind::GetReply => Msg::GetReply {
            op: r.u64("op")?,
            data: r.rest(),
        },
        Kind::Put => Msg::Put {
            op: r.u64("op")?,
            addr: r.u64("address")?,
            data: r.rest(),
        },
        Kind::PutAck => Msg::PutAck { op: r.u64("op")? },
        Kind::Store => Msg::Store {
            epoch: r.u64("epoch")?,
            addr: r.u64("address")?,
            data: r.rest(),
        },
        Kind::Atomic => {
            let op = r.u64("op")?;
            let addr = r.u64("address")?;
            let wb = r.u8("width")?;
            let width = Width::from_bytes(u64::from(wb))
                .map_err(|_| r.bad(format!("atomic width {wb}")))?;
            let kb = r.u8("atomic kind")?;
            let kind = AtomicKind::from_u8(kb).ok_or_else(|| r.bad(format!("atomic kind {kb}")))?;
            Msg::Atomic {
                op,
                addr,
                width,
                kind,
                a: r.u64("operand")?,
                b: r.u64("compare operand")?,
            }
        }
        Kind::AtomicReply => Msg::AtomicReply {
            op: r.u64("op")?,
            old: r.u64("old value")?,
        },
        Kind::Refused => {
            let op = r.u64("op")?;
            let addr = r.u64("address")?;
            let len = r.u64("length")?;
            let rest = r.rest();
            let why = std::str::from_utf8(rest).map_err(|_| r.bad("refusal text is not UTF-8"))?;
            Msg::Refused { op, addr, len, why }
        }
        Kind::StoreDone => Msg::StoreDone {
            epoch: r.u64("epoch")?,
            count: r.u64("count")?,
        },
        Kind::StoresIn => Msg::StoresIn {
            epoch: r.u64("epoch")?,
        },
    };
    r.end(kind)?;
    Ok(m)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg<'static>> {
        vec![
            Msg::Get {
                op: 1,
                addr: 0x5000_0000_0000,
                len: 8,
            },
            Msg::GetReply {
                op: 2,
                data: b"abcdefgh",
            },
            Msg::Put {
                op: 3,
                addr: 9,
                data: b"xyz",
            },
            Msg::PutAck { op: 4 },
            Msg::Store {
                epoch: 2,
                addr: 7,
                data: b"",
            },
            Msg::Atomic {
                op: 5,
                addr: 16,
                width: Width::W4,
                kind: AtomicKind::CompareSwap,
                a: 1,
                b: 2,
            },
            Msg::AtomicReply {
                op: 6,
                old: u64::MAX,
            },
            Msg::Refused {
                op: 0,
                addr: 3,
                len: 4,
                why: "not symmetric",
            },
            Msg::StoreDone {
                epoch: 1,
                count: 10,
            },
        ]
    }

    #[test]
    fn round_trip_every_kind() {
        for m in samples() {
            let b = m.encode();
            assert_eq!(decode(NodeId(1), &b).unwrap(), m);
            // Every strict prefix of a fixed-size message is refused; kinds with a data tail
            // accept shorter data, so only cut into their header.
            let header = match m.kind() {
                Kind::GetReply => 9,
                Kind::Put | Kind::Store => 17,
                Kind::Refused => 25,
                _ => b.len(),
            };
            for cut in 0..header {
                assert!(decode(NodeId(1), &b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
        assert!(decode(NodeId(1), &[0]).is_err());
        assert!(decode(NodeId(1), &[200, 0, 0]).is_err());
        let mut long = Msg::PutAck { op: 1 }.encode();
        long.push(0);
        assert!(decode(NodeId(1), &long).is_err());
    }

    #[test]
    fn put_head_is_the_put_before_its_data() {
        for data in [&b""[..], b"q", &[9u8; 300][..]] {
            let whole = Msg::Put {
                op: 77,
                addr: 0x5000_0000_1000,
                data,
            }
            .encode();
            let mut split = Msg::put_head(77, 0x5000_0000_1000);
            split.extend_from_slice(data);
            assert_eq!(split, whole);
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(NodeId(0), &bytes);
        }
    }
}

//! The shared-object messages and their encoding: one tag byte, then little-endian fields.
//!
//! Owns: `Msg` and its bounds-checked decoder (every short or bad input is a typed
//! `ObjError::Malformed` naming the sender). Must not touch: engine state.

use crate::{ElemKind, Engine, ObjError, ObjectId, ObjectSpec};
use squall_core::NodeId;

/// Which permission an MSI upgrade asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Read permission (`S`).
    Shared,
    /// Write permission (`M`).
    Modified,
}

/// One shared-object message.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// An object created by one node (`create_named`): every other node makes its copy.
    Announce {
        id: ObjectId,
        name: String,
        spec: ObjectSpec,
    },
    /// OU: one access to a segment, sent to the segment's owner.
    OuReq {
        req: u64,
        obj: ObjectId,
        idx: u64,
        /// `Some(bytes)`: a write of the element; `None`: a read.
        write: Option<Vec<u8>>,
    },
    /// OU: the owner's answer (the element read, or empty for a write).
    OuReply { req: u64, value: Vec<u8> },
    /// NC: an element written somewhere (one-way, no acknowledgement, no ordering promise).
    NcUpdate {
        obj: ObjectId,
        idx: u64,
        value: Vec<u8>,
    },
    /// MSI: a node asks the segment's manager for a permission.
    MsiGet { obj: ObjectId, seg: u64, want: Want },
    /// MSI: the manager broadcasts one node's upgrade (in manager order, per segment) with
    /// the number of holders that answer the requester.
    MsiUpgrade {
        obj: ObjectId,
        seg: u64,
        want: Want,
        requester: NodeId,
        expected: u16,
    },
    /// MSI: a holder's copy of the segment, to the requester of an upgrade.
    MsiData {
        obj: ObjectId,
        seg: u64,
        data: Vec<u8>,
    },
    /// MSI: the requester has its permission; the manager may start the next upgrade.
    MsiDone { obj: ObjectId, seg: u64 },
}

const ANNOUNCE: u8 = 1;
const OU_REQ: u8 = 2;
const OU_REPLY: u8 = 3;
const NC_UPDATE: u8 = 4;
const MSI_GET: u8 = 5;
const MSI_UPGRADE: u8 = 6;
const MSI_DATA: u8 = 7;
const MSI_DONE: u8 = 8;

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

struct R<'a> {
    from: NodeId,
    buf: &'a [u8],
    pos: usize,
}
impl<'a> R<'a> {
    fn err(&self, why: impl Into<String>) -> ObjError {
        ObjError::Malformed {
            from: self.from,
            why: why.into(),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ObjError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err(format!("short message ({} bytes)", self.buf.len())))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, ObjError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ObjError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, ObjError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, ObjError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, ObjError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn want(&mut self) -> Result<Want, ObjError> {
        match self.u8()? {
            0 => Ok(Want::Shared),
            1 => Ok(Want::Modified),
            w => Err(self.err(format!("bad permission {w}"))),
        }
    }
    fn end(&self) -> Result<(), ObjError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(self.err(format!("{} trailing bytes", self.buf.len() - self.pos)))
        }
    }
}

fn want_byte(w: Want) -> u8 {
    match w {
        Want::Shared => 0,
        Want::Modified => 1,
    }
}

fn put_spec(w: &mut W, s: &ObjectSpec) {
    let (k, rec) = match s.kind {
        ElemKind::Int => (0, 0),
        ElemKind::Long => (1, 0),
        ElemKind::Float => (2, 0),
        ElemKind::Double => (3, 0),
        ElemKind::Record(n) => (4, n),
    };
    let e = match s.engine {
        Engine::Ou => 0,
        Engine::Nc => 1,
        Engine::Msi => 2,
    };
    w.u8(k).u32(rec).u64(s.len).u32(s.seg_elems).u8(e);
}

fn get_spec(r: &mut R<'_>) -> Result<ObjectSpec, ObjError> {
    let k = r.u8()?;
    let rec = r.u32()?;
    let kind = match k {
        0 => ElemKind::Int,
        1 => ElemKind::Long,
        2 => ElemKind::Float,
        3 => ElemKind::Double,
        4 => ElemKind::Record(rec),
        _ => return Err(r.err(format!("bad element kind {k}"))),
    };
    let len = r.u64()?;
    let seg_elems = r.u32()?;
    let engine = match r.u8()? {
        0 => Engine::Ou,
        1 => Engine::Nc,
        2 => Engine::Msi,
        e => return Err(r.err(format!("bad engine {e}"))),
    };
    let spec = ObjectSpec {
        kind,
        len,
        seg_elems,
        engine,
    };
    spec.check().map_err(|e| r.err(e.to_string()))?;
    Ok(spec)
}

impl Msg {
    /// The object the message is about (`None` for OU replies, which name a request).
    pub fn object(&self) -> Option<ObjectId> {
        match self {
            Msg::Announce { .. } | Msg::OuReply { .. } => None,
            Msg::OuReq { obj, .. }
            | Msg::NcUpdate { obj, .. }
            | Msg::MsiGet { obj, .. }
            | Msg::MsiUpgrade { obj, .. }
            | Msg::MsiData { obj, .. }
            | Msg::MsiDone { obj, .. } => Some(*obj),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(32));
        match self {
            Msg::Announce { id, name, spec } => {
                w.u8(ANNOUNCE).u32(id.0).bytes(name.as_bytes());
                put_spec(&mut w, spec);
            }
            Msg::OuReq {
                req,
                obj,
                idx,
                write,
            } => {
                w.u8(OU_REQ).u64(*req).u32(obj.0).u64(*idx);
                match write {
                    Some(v) => w.u8(1).bytes(v),
                    None => w.u8(0),
                };
            }
            Msg::OuReply { req, value } => {
                w.u8(OU_REPLY).u64(*req).bytes(value);
            }
            Msg::NcUpdate { obj, idx, value } => {
                w.u8(NC_UPDATE).u32(obj.0).u64(*idx).bytes(value);
            }
            Msg::MsiGet { obj, seg, want } => {
                w.u8(MSI_GET).u32(obj.0).u64(*seg).u8(want_byte(*want));
            }
            Msg::MsiUpgrade {
                obj,
                seg,
                want,
                requester,
                expected,
            } => {
                w.u8(MSI_UPGRADE)
                    .u32(obj.0)
                    .u64(*seg)
                    .u8(want_byte(*want))
                    .u16(requester.0)
                    .u16(*expected);
            }
            Msg::MsiData { obj, seg, data } => {
                w.u8(MSI_DATA).u32(obj.0).u64(*seg).bytes(data);
            }
            Msg::MsiDone { obj, seg } => {
                w.u8(MSI_DONE).u32(obj.0).u64(*seg);
            }
        }
        w.0
    }

    pub fn decode(from: NodeId, buf: &[u8]) -> Result<Msg, ObjError> {
        let mut r = R { from, buf, pos: 0 };
        let m = match r.u8()? {
            ANNOUNCE => {
                let id = ObjectId(r.u32()?);
                let name = String::from_utf8(r.bytes()?).map_err(|_| r.err("name not UTF-8"))?;
                let spec = get_spec(&mut r)?;
                Msg::Announce { id, name, spec }
            }
            OU_REQ => {
                let req = r.u64()?;
                let obj = ObjectId(r.u32()?);
                let idx = r.u64()?;
                let write = match r.u8()? {
                    0 => None,
                    1 => Some(r.bytes()?),
                    b => return Err(r.err(format!("bad access flag {b}"))),
                };
                Msg::OuReq {
                    req,
                    obj,
                    idx,
                    write,
                }
            }
            OU_REPLY => Msg::OuReply {
                req: r.u64()?,
                value: r.bytes()?,
            },
            NC_UPDATE => Msg::NcUpdate {
                obj: ObjectId(r.u32()?),
                idx: r.u64()?,
                value: r.bytes()?,
            },
            MSI_GET => Msg::MsiGet {
                obj: ObjectId(r.u32()?),
                seg: r.u64()?,
                want: r.want()?,
            },
            MSI_UPGRADE => Msg::MsiUpgrade {
                obj: ObjectId(r.u32()?),
                seg: r.u64()?,
                want: r.want()?,
                requester: NodeId(r.u16()?),
                expected: r.u16()?,
            },
            MSI_DATA => Msg::MsiData {
                obj: ObjectId(r.u32()?),
                seg: r.u64()?,
                data: r.bytes()?,
            },
            MSI_DONE => Msg::MsiDone {
                obj: ObjectId(r.u32()?),
                seg: r.u64()?,
            },
            t => return Err(r.err(format!("unknown message kind {t}"))),
        };
        r.end()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_every_prefix_is_refused() {
        let spec = ObjectSpec {
            kind: ElemKind::Record(12),
            len: 100,
            seg_elems: 4,
            engine: Engine::Msi,
        };
        let msgs = vec![
            Msg::Announce {
                id: ObjectId(0x8001_0002),
                name: "grid".into(),
                spec,
            },
            Msg::OuReq {
                req: 7,
                obj: ObjectId(3),
                idx: 9,
                write: Some(vec![1, 2, 3, 4]),
            },
            Msg::OuReq {
                req: 7,
                obj: ObjectId(3),
                idx: 9,
                write: None,
            },
            Msg::OuReply {
                req: 7,
                value: vec![5; 8],
            },
            Msg::NcUpdate {
                obj: ObjectId(1),
                idx: 2,
                value: vec![9; 4],
            },
            Msg::MsiGet {
                obj: ObjectId(1),
                seg: 3,
                want: Want::Modified,
            },
            Msg::MsiUpgrade {
                obj: ObjectId(1),
                seg: 3,
                want: Want::Shared,
                requester: NodeId(2),
                expected: 3,
            },
            Msg::MsiData {
                obj: ObjectId(1),
                seg: 3,
                data: vec![1; 16],
            },
            Msg::MsiDone {
                obj: ObjectId(1),
                seg: 3,
            },
        ];
        for m in msgs {
            let b = m.encode();
            assert_eq!(Msg::decode(NodeId(1), &b).ok(), Some(m.clone()));
            for cut in 0..b.len() {
                assert!(
                    Msg::decode(NodeId(1), &b[..cut]).is_err(),
                    "{m:?} cut {cut}"
                );
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Msg::decode(NodeId(1), &long).is_err());
        }
    }
}

//! Region protocol messages: the kinds (first byte, named in one place), their encoding and a
//! bounds-checked decoder (every short or bad input is a typed `Malformed` error naming the
//! sender). Owns the wire format only; must not touch region state.

use crate::{RegionError, RegionId};
use squall_core::NodeId;

/// A message kind: the first byte of every region message. First bytes from 0xB0 are not
/// protocol messages: the runtime's CRL broadcasts and reductions travel under the same
/// message type (`squall::regions`), and never reach the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// node → home: what is the size of this region (a first `rgn_map`)?
    MapReq = 1,
    /// home → node: the region's size.
    MapInfo = 2,
    /// node → home: a read copy, please (a read miss).
    ReadReq = 3,
    /// node → home: the exclusive copy, please (a write miss or upgrade).
    WriteReq = 4,
    /// home → node: a read copy (the data).
    ReadData = 5,
    /// home → node: you own it now (with the data, or without when your copy is current).
    WriteGrant = 6,
    /// home → sharer: drop your read copy and acknowledge.
    Inv = 7,
    /// sharer → home: dropped.
    InvAck = 8,
    /// home → owner: send the data back (downgrading to a read copy, or dropping it).
    Recall = 9,
    /// owner → home: the recalled data (or nothing: it was flushed already).
    RecallData = 10,
    /// owner → home: my exclusive copy, I drop it (`rgn_flush`).
    Flush = 11,
    /// sharer → home: I dropped my read copy (`rgn_flush`).
    Drop = 12,
    /// node → home: delete this region.
    Delete = 13,
    /// home → cacher: the region was deleted.
    Gone = 14,
    /// home → node: no such region (answer to a request on an unknown or deleted id).
    Unknown = 15,
}

impl Kind {
    /// Every kind, for decoding and for statistics.
    pub const ALL: [Kind; 15] = [
        Kind::MapReq,
        Kind::MapInfo,
        Kind::ReadReq,
        Kind::WriteReq,
        Kind::ReadData,
        Kind::WriteGrant,
        Kind::Inv,
        Kind::InvAck,
        Kind::Recall,
        Kind::RecallData,
        Kind::Flush,
        Kind::Drop,
        Kind::Delete,
        Kind::Gone,
        Kind::Unknown,
    ];

    /// The kind's name (statistics and traces).
    pub fn name(self) -> &'static str {
        match self {
            Kind::MapReq => "map_req",
            Kind::MapInfo => "map_info",
            Kind::ReadReq => "read_req",
            Kind::WriteReq => "write_req",
            Kind::ReadData => "read_data",
            Kind::WriteGrant => "write_grant",
            Kind::Inv => "inv",
            Kind::InvAck => "inv_ack",
            Kind::Recall => "recall",
            Kind::RecallData => "recall_data",
            Kind::Flush => "flush",
            Kind::Drop => "drop",
            Kind::Delete => "delete",
            Kind::Gone => "gone",
            Kind::Unknown => "unknown",
        }
    }

    fn from_u8(b: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == b)
    }
}

/// One region message (its data borrowed: from the sender's copy when encoding, from the
/// received bytes when decoding, so bulk data is copied once each way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg<'a> {
    pub kind: Kind,
    pub rid: RegionId,
    /// `MapInfo`: the size; `Recall`: 1 for a write recall, 0 for a read recall; else 0.
    pub arg: u64,
    /// `ReadData`, `RecallData`, `Flush`, `WriteGrant`: the region's bytes (`None`: no data).
    pub data: Option<&'a [u8]>,
}

impl<'a> Msg<'a> {
    pub fn new(kind: Kind, rid: RegionId) -> Msg<'a> {
        Msg {
            kind,
            rid,
            arg: 0,
            data: None,
        }
    }

    /// Encoding: kind `u8`, rid `u64`, arg `u64`, has-data `u8`, then the data (to the end).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.data.map_or(0, <[u8]>::len);
        let mut b = Vec::with_capacity(18 + n);
        b.push(self.kind as u8);
        b.extend_from_slice(&self.rid.0.to_le_bytes());
        b.extend_from_slice(&self.arg.to_le_bytes());
        match self.data {
            Some(d) => {
                b.push(1);
                b.extend_from_slice(d);
            }
            None => b.push(0),
        }
        b
    }

    /// Encodes a message carrying `len` bytes of data that `fill` appends (one copy from the
    /// node's buffer straight into the message).
    pub fn encode_from(
        kind: Kind,
        rid: RegionId,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        let mut b = Vec::with_capacity(18 + len);
        b.push(kind as u8);
        b.extend_from_slice(&rid.0.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.push(1);
        fill(&mut b);
        b.resize(18 + len, 0);
        b
    }

    /// Decodes a message from `from`; never panics.
    pub fn decode(from: NodeId, b: &'a [u8]) -> Result<Msg<'a>, RegionError> {
        let bad = |what: &'static str| RegionError::Malformed { from, what };
        let kind = Kind::from_u8(*b.first().ok_or(bad("empty message"))?).ok_or(bad("kind"))?;
        let rid = b
            .get(1..9)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(bad("region id"))?;
        let arg = b
            .get(9..17)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(bad("argument"))?;
        let data = match b.get(17) {
            Some(0) if b.len() == 18 => None,
            Some(1) => b.get(18..),
            _ => return Err(bad("data flag")),
        };
        Ok(Msg {
            kind,
            rid: RegionId(rid),
            arg,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let mut m = Msg::new(Kind::ReadData, RegionId::new(NodeId(3), 9));
        m.data = Some(&[1, 2, 3]);
        let e = m.encode();
        assert_eq!(Msg::decode(NodeId(1), &e), Ok(m.clone()));
        for cut in 0..18 {
            assert!(Msg::decode(NodeId(1), &e[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = e.clone();
        bad[0] = 200;
        assert!(Msg::decode(NodeId(1), &bad).is_err());
        let mut bad = e;
        bad[17] = 7;
        assert!(Msg::decode(NodeId(1), &bad).is_err());
        let none = Msg::new(Kind::Inv, RegionId(5)).encode();
        assert_eq!(Msg::decode(NodeId(0), &none).map(|m| m.data), Ok(None));
        let mut long = none;
        long.push(0);
        assert!(Msg::decode(NodeId(0), &long).is_err());
    }
}

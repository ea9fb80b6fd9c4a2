//! The wire format: a fixed header (job id, type, ranks, sequence, length, fragment info, flags)
//! then the payload. Owns encoding and decoding only; must not touch sockets or clocks.
//!
//! Layout (all integers little-endian, [`HEADER_LEN`] = 52 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `b"SQ"` |
//! | 2 | 1 | version ([`VERSION`]) |
//! | 3 | 1 | reserved, must be 0 |
//! | 4 | 8 | job id |
//! | 12 | 2 | message type |
//! | 14 | 2 | source rank |
//! | 16 | 2 | destination rank |
//! | 18 | 2 | flags ([`Flags`]) |
//! | 20 | 8 | sequence number (0 = unsequenced: pure ack, heartbeat) |
//! | 28 | 8 | cumulative ack (valid when [`Flags::ACK`] is set) |
//! | 36 | 8 | request id (for request/reply; 0 = none) |
//! | 44 | 4 | payload length in bytes |
//! | 48 | 2 | fragment index |
//! | 50 | 2 | fragment count (≥ 1) |
//!
//! The payload follows. A packet with [`Flags::AUTH`] carries a [`AUTH_TRAILER_LEN`]-byte
//! trailer after the payload (`payload_len` does not count it): its authentication sequence
//! number and a keyed-BLAKE3 tag over header, payload and that number ([`auth`]).
#![forbid(unsafe_code)]

pub mod auth;
pub use auth::{AuthKey, ReplayWindow, AUTH_TRAILER_LEN};

use squall_core::{JobId, NodeId};
use std::fmt;

/// First two bytes of every packet.
pub const MAGIC: [u8; 2] = *b"SQ";
/// Wire format version this crate speaks.
pub const VERSION: u8 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 52;

/// A message type: selects the handler on the receiving node.
///
/// Ranges: `0..64` are reserved for the transport and bootstrap ([`MsgType::is_reserved`]);
/// `64..=u16::MAX` belong to the layers above (the runtime documents its sub-ranges).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgType(pub u16);

impl MsgType {
    /// First message type available to layers above the transport.
    pub const FIRST_USER: u16 = 64;

    /// True for types owned by the transport/bootstrap (`< 64`).
    pub fn is_reserved(self) -> bool {
        self.0 < Self::FIRST_USER
    }
}

impl fmt::Display for MsgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "message type {}", self.0)
    }
}

/// Header flag bits.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(pub u16);

impl Flags {
    /// The `ack` field is valid (cumulative acknowledgement).
    pub const ACK: Flags = Flags(1 << 0);
    /// The sender wants an acknowledgement soon.
    pub const ACK_REQUESTED: Flags = Flags(1 << 1);
    /// Negative acknowledgement: the receiver saw a gap after `ack` and asks for a resend.
    pub const NACK: Flags = Flags(1 << 2);
    /// This message answers the request named by `request_id`.
    pub const REPLY: Flags = Flags(1 << 3);
    /// This message is a request; the receiver answers with a `REPLY` carrying the same id.
    pub const REQUEST: Flags = Flags(1 << 4);
    /// Keep-alive sent when a link is idle.
    pub const HEARTBEAT: Flags = Flags(1 << 5);
    /// Orderly goodbye: the sender is leaving the job.
    pub const BYE: Flags = Flags(1 << 6);
    /// The payload is followed by the authentication trailer ([`auth`]).
    pub const AUTH: Flags = Flags(1 << 7);
    /// All defined bits.
    pub const ALL: Flags = Flags(0xff);

    pub const fn empty() -> Flags {
        Flags(0)
    }
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

/// The fixed packet header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub job: JobId,
    pub ty: MsgType,
    pub src: NodeId,
    pub dst: NodeId,
    pub flags: Flags,
    pub seq: u64,
    pub ack: u64,
    pub request_id: u64,
    pub payload_len: u32,
    pub frag_index: u16,
    pub frag_count: u16,
}

impl Header {
    /// A header for a single-fragment message with everything else zero.
    pub fn new(job: JobId, ty: MsgType, src: NodeId, dst: NodeId) -> Header {
        Header {
            job,
            ty,
            src,
            dst,
            flags: Flags::empty(),
            seq: 0,
            ack: 0,
            request_id: 0,
            payload_len: 0,
            frag_index: 0,
            frag_count: 1,
        }
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than [`HEADER_LEN`] (a caller bug, never input-dependent).
    pub fn write_to(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = 0;
        out[4..12].copy_from_slice(&self.job.0.to_le_bytes());
        out[12..14].copy_from_slice(&self.ty.0.to_le_bytes());
        out[14..16].copy_from_slice(&self.src.0.to_le_bytes());
        out[16..18].copy_from_slice(&self.dst.0.to_le_bytes());
        out[18..20].copy_from_slice(&self.flags.0.to_le_bytes());
        out[20..28].copy_from_slice(&self.seq.to_le_bytes());
        out[28..36].copy_from_slice(&self.ack.to_le_bytes());
        out[36..44].copy_from_slice(&self.request_id.to_le_bytes());
        out[44..48].copy_from_slice(&self.payload_len.to_le_bytes());
        out[48..50].copy_from_slice(&self.frag_index.to_le_bytes());
        out[50..52].copy_from_slice(&self.frag_count.to_le_bytes());
    }

    /// Bytes after the header: the payload, and the trailer of an [`Flags::AUTH`] packet.
    pub fn body_len(&self) -> usize {
        let trailer = if self.flags.contains(Flags::AUTH) {
            AUTH_TRAILER_LEN
        } else {
            0
        };
        self.payload_len as usize + trailer
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.write_to(&mut b);
        b
    }
}

/// Why a packet could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated packet: {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    ShortHeader { len: usize },
    #[error("bad magic {found:02x?}: not a squall packet")]
    BadMagic { found: [u8; 2] },
    #[error("unsupported wire version {found} (this node speaks {VERSION})")]
    BadVersion { found: u8 },
    #[error("reserved header byte is {found}, expected 0")]
    BadReserved { found: u8 },
    #[error("unknown flag bits {bits:#06x}")]
    UnknownFlags { bits: u16 },
    #[error("bad fragment {index} of {count}")]
    BadFragment { index: u16, count: u16 },
    #[error("truncated packet: header says {expected} payload bytes, {found} present")]
    Truncated { expected: u32, found: usize },
    #[error("trailing bytes: header says {expected} payload bytes, {found} present")]
    Trailing { expected: u32, found: usize },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes only the fixed header from the front of `bytes` (the payload need not be present:
/// stream transports read the header first, then `payload_len` more bytes).
pub fn decode_header(bytes: &[u8]) -> Result<Header, WireError> {
    if bytes.len() < HEADER_LEN {
        return Err(WireError::ShortHeader { len: bytes.len() });
    }
    let b = &bytes[..HEADER_LEN];
    if b[0..2] != MAGIC {
        return Err(WireError::BadMagic {
            found: [b[0], b[1]],
        });
    }
    if b[2] != VERSION {
        return Err(WireError::BadVersion { found: b[2] });
    }
    if b[3] != 0 {
        return Err(WireError::BadReserved { found: b[3] });
    }
    let flags = Flags(u16_at(b, 18));
    if flags.0 & !Flags::ALL.0 != 0 {
        return Err(WireError::UnknownFlags {
            bits: flags.0 & !Flags::ALL.0,
        });
    }
    let frag_index = u16_at(b, 48);
    let frag_count = u16_at(b, 50);
    if frag_count == 0 || frag_index >= frag_count {
        return Err(WireError::BadFragment {
            index: frag_index,
            count: frag_count,
        });
    }
    Ok(Header {
        job: JobId(u64_at(b, 4)),
        ty: MsgType(u16_at(b, 12)),
        src: NodeId(u16_at(b, 14)),
        dst: NodeId(u16_at(b, 16)),
        flags,
        seq: u64_at(b, 20),
        ack: u64_at(b, 28),
        request_id: u64_at(b, 36),
        payload_len: u32_at(b, 44),
        frag_index,
        frag_count,
    })
}

/// One decoded packet: the header, its encoded bytes (what a tag covers), the payload and,
/// for an [`Flags::AUTH`] packet, the authentication trailer (not yet verified).
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    pub header: Header,
    pub header_bytes: &'a [u8],
    pub payload: &'a [u8],
    pub trailer: Option<&'a [u8]>,
}

/// Decodes one whole packet (a datagram or a complete frame): header, exactly `payload_len`
/// payload bytes, and the trailer when the header has [`Flags::AUTH`]. Never panics,
/// whatever the input.
pub fn decode_packet(bytes: &[u8]) -> Result<Packet<'_>, WireError> {
    let h = decode_header(bytes)?;
    let rest = &bytes[HEADER_LEN..];
    let want = h.body_len();
    // Lengths in the errors count the payload alone.
    let found = rest.len().saturating_sub(want - h.payload_len as usize);
    if rest.len() < want {
        return Err(WireError::Truncated {
            expected: h.payload_len,
            found,
        });
    }
    if rest.len() > want {
        return Err(WireError::Trailing {
            expected: h.payload_len,
            found,
        });
    }
    let (payload, trailer) = rest.split_at(h.payload_len as usize);
    Ok(Packet {
        header: h,
        header_bytes: &bytes[..HEADER_LEN],
        payload,
        trailer: h.flags.contains(Flags::AUTH).then_some(trailer),
    })
}

/// Decodes one whole packet (see [`decode_packet`]) into its header and payload; an
/// authentication trailer is checked for length only.
pub fn decode(bytes: &[u8]) -> Result<(Header, &[u8]), WireError> {
    decode_packet(bytes).map(|p| (p.header, p.payload))
}

/// Encodes `header` (with `payload_len` set from `payload`) followed by `payload`.
///
/// # Panics
/// If `payload` is longer than `u32::MAX` bytes (callers fragment long before that).
pub fn encode(header: &Header, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    encode_into(header, payload, &mut out);
    out
}

/// Appends the encoded packet to `out` (see [`encode`]).
pub fn encode_into(header: &Header, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("payload longer than u32::MAX bytes");
    let mut h = *header;
    h.payload_len = len;
    out.extend_from_slice(&h.to_bytes());
    out.extend_from_slice(payload);
}

/// Appends the packet sealed with `key` to `out`: the header with [`Flags::AUTH`] set, the
/// payload, then the trailer for authentication sequence number `seq`.
pub fn encode_sealed_into(
    header: &Header,
    payload: &[u8],
    key: &AuthKey,
    seq: u64,
    out: &mut Vec<u8>,
) {
    let mut h = *header;
    h.flags.insert(Flags::AUTH);
    let start = out.len();
    encode_into(&h, payload, out);
    let trailer = key.trailer(&out[start..start + HEADER_LEN], payload, seq);
    out.extend_from_slice(&trailer);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            job: JobId(0x0123_4567_89ab_cdef),
            ty: MsgType(70),
            src: NodeId(3),
            dst: NodeId(1),
            flags: Flags::ACK | Flags::REQUEST,
            seq: 42,
            ack: 41,
            request_id: 9,
            payload_len: 0,
            frag_index: 1,
            frag_count: 3,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        let bytes = encode(&h, b"hello");
        let (d, p) = decode(&bytes).expect("decodes");
        assert_eq!(p, b"hello");
        assert_eq!(
            d,
            Header {
                payload_len: 5,
                ..h
            }
        );
    }

    #[test]
    fn sealed_packets_decode_with_their_trailer() {
        let key = AuthKey::from_bytes([9; auth::KEY_LEN]);
        let mut bytes = Vec::new();
        encode_sealed_into(&sample(), b"hello", &key, 3, &mut bytes);
        assert_eq!(bytes.len(), HEADER_LEN + 5 + AUTH_TRAILER_LEN);
        let p = decode_packet(&bytes).expect("decodes");
        assert!(p.header.flags.contains(Flags::AUTH));
        assert_eq!(p.payload, b"hello");
        let t = p.trailer.expect("a trailer");
        assert_eq!(key.verify(p.header_bytes, p.payload, t), Ok(3));
        assert_eq!(p.header.body_len(), 5 + AUTH_TRAILER_LEN);
        // Without its trailer, or with a byte more, it does not decode.
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(WireError::Truncated {
                expected: 5,
                found: 4
            })
        ));
        bytes.push(0);
        assert!(matches!(decode(&bytes), Err(WireError::Trailing { .. })));
        // Unsealed packets have none.
        let plain = encode(&sample(), b"hello");
        assert!(decode_packet(&plain).expect("plain").trailer.is_none());
    }

    #[test]
    fn rejects_truncated_and_trailing() {
        let bytes = encode(&sample(), b"hello");
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(WireError::Truncated { .. })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(decode(&long), Err(WireError::Trailing { .. })));
        assert!(matches!(
            decode(&bytes[..10]),
            Err(WireError::ShortHeader { len: 10 })
        ));
    }

    #[test]
    fn rejects_bad_fragment_and_magic() {
        let mut h = sample();
        h.frag_index = 3;
        assert!(matches!(
            decode(&encode(&h, b"")),
            Err(WireError::BadFragment { index: 3, count: 3 })
        ));
        let mut bytes = encode(&sample(), b"");
        bytes[0] = b'X';
        assert!(matches!(decode(&bytes), Err(WireError::BadMagic { .. })));
    }
}

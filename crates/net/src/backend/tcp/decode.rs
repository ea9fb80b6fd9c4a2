//! Decoding a peer's bytes: the checks of each whole frame (wire header, job, source and
//! destination, length, and with authentication its seal and sequence number), heartbeats and
//! goodbyes consumed, the rest turned into deliveries (a payload sliced from a buffer that goes
//! with it, or copied); and whether a large frame is whole at the head of a buffer. Pure: must
//! not touch sockets, the peer's buffers or landings (that is `recv`).
use super::TcpBackend;
use crate::auth::LinkAuth;
use crate::backend::{BackendEvent, InMsg};
use crate::stats::{DropReason, LinkCounters};
use bytes::Bytes;
use squall_core::{JobId, NodeId};
use squall_wire::{decode_header, Flags, Packet, HEADER_LEN};
use std::net::SocketAddr;
use std::time::Instant;

/// Largest payload a frame may announce (a garbage length must not make us reserve gigabytes).
const MAX_FRAME_PAYLOAD: u32 = 1 << 31;
/// A frame whose payload is at least this large, completed in the peer's buffer, is handed on
/// as a slice of that buffer (which then goes with it) instead of a copy.
const HAND_OVER_PAYLOAD: u32 = 64 * 1024;

impl TcpBackend {
    /// Parses the whole frames at the start of `buf` into events. Returns the bytes consumed
    /// and, if a frame is incomplete, its total length. Err = the connection carries garbage.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn parse_frames(
        job: JobId,
        rank: NodeId,
        (id, addr): (NodeId, Option<SocketAddr>),
        bye_received: &mut bool,
        (buf, owner): (&[u8], Option<&Bytes>),
        counters: &mut LinkCounters,
        mut auth: Option<&mut LinkAuth>,
        out: &mut Vec<BackendEvent>,
    ) -> Result<(usize, Option<usize>), String> {
        let mut pos = 0usize;
        loop {
            let avail = &buf[pos..];
            if avail.len() < HEADER_LEN {
                return Ok((pos, None));
            }
            let h = match decode_header(avail) {
                Ok(h) => h,
                Err(e) => {
                    counters.drop(DropReason::Garbage);
                    return Err(format!("garbage on the connection: {e}"));
                }
            };
            if h.job != job {
                counters.drop(DropReason::ForeignJob);
                return Err(format!("frame of foreign {} on the connection", h.job));
            }
            if h.src != id || h.dst != rank {
                counters.drop(DropReason::BadDest);
                return Err(format!(
                    "frame from {} to {} on the connection",
                    h.src, h.dst
                ));
            }
            if h.payload_len > MAX_FRAME_PAYLOAD {
                counters.drop(DropReason::Garbage);
                return Err(format!(
                    "frame of {} bytes on the connection",
                    h.payload_len
                ));
            }
            let total = HEADER_LEN + h.body_len();
            if avail.len() < total {
                return Ok((pos, Some(total)));
            }
            let start = pos;
            pos += total;
            counters.packets_received += 1;
            let payload_end = HEADER_LEN + h.payload_len as usize;
            let mut plain = None;
            match auth.as_deref_mut() {
                Some(a) => {
                    let pkt = Packet {
                        header: h,
                        header_bytes: &avail[..HEADER_LEN],
                        payload: &avail[HEADER_LEN..payload_end],
                        trailer: h
                            .flags
                            .contains(Flags::AUTH)
                            .then(|| &avail[payload_end..total]),
                    };
                    match a.check(&pkt) {
                        Ok(p) => plain = p,
                        Err(why) => {
                            counters.drop(why);
                            a.warn(Instant::now(), rank, id, addr, why);
                            continue;
                        }
                    }
                }
                None if h.flags.contains(Flags::AUTH) => {
                    // Sealed by a peer with a key while this node has none: cannot check it.
                    counters.drop(DropReason::BadMac);
                    continue;
                }
                None => {}
            }
            if h.ty.0 == crate::endpoint::TY_LINK {
                // A heartbeat: its bytes counted as hearing from the peer.
                continue;
            }
            if h.flags.contains(Flags::BYE) {
                *bye_received = true;
                out.push(BackendEvent::PeerBye(id));
                continue;
            }
            if *bye_received {
                counters.drop(DropReason::AfterBye);
                continue;
            }
            out.push(BackendEvent::Deliver(InMsg {
                src: id,
                ty: h.ty,
                flags: h.flags,
                request_id: h.request_id,
                payload: match (plain, owner) {
                    (Some(p), _) => Bytes::from(p),
                    // `owner` holds the bytes of `buf`: a slice of it, no copy.
                    (None, Some(b)) => b.slice(start + HEADER_LEN..start + payload_end),
                    (None, None) => Bytes::copy_from_slice(&avail[HEADER_LEN..payload_end]),
                },
                placed: 0,
            }));
        }
    }

    /// The length of the whole frame with a large payload `buf` starts with, if any.
    pub(super) fn big_frame_ready(buf: &[u8]) -> Option<usize> {
        if buf.len() < HEADER_LEN {
            return None;
        }
        let h = decode_header(buf).ok()?;
        let total = HEADER_LEN + h.body_len();
        (h.payload_len >= HAND_OVER_PAYLOAD
            && h.payload_len <= MAX_FRAME_PAYLOAD
            && buf.len() >= total)
            .then_some(total)
    }
}

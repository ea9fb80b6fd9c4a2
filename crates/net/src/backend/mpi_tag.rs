//! The MPI backend's headerless messages: what the MPI tag of a message carries when the
//! message travels as its payload alone (MPI already supplies the source rank, the length,
//! exactly-once delivery and per-pair order). Pure encode/decode of the tag and the request-id
//! trailer; owns nothing else (no MPI calls, no frames, no peer state).
//!
//! Tag layout (31 bits: MPI tags are non-negative and at most `MPI_TAG_UB`, which must be
//! at least `2^31 - 1` for this path; else the backend frames every message):
//!
//! | bits | meaning |
//! |---|---|
//! | 30 | 1: headerless (the framed path's tags, `0x5155`/`0x5157`, have it clear) |
//! | 29..20 | job check: 10 bits folded from the job id |
//! | 19 | a MAC trailer follows the payload (reserved for the per-job auth key; refused now) |
//! | 18..16 | kind: 0 plain, 1 request, 2 reply (both end with an 8-byte request id, little endian); others reserved |
//! | 15..0 | message type |
use squall_core::JobId;
use squall_wire::{Flags, MsgType};

/// Bit 30: the message is headerless.
pub(crate) const HEADERLESS: i32 = 1 << 30;
const JOB_SHIFT: u32 = 20;
const JOB_MASK: i32 = 0x3ff << JOB_SHIFT;
/// Bit 19: a MAC trailer follows the payload (not produced yet; received ones are refused).
pub(crate) const AUTH_TRAILER: i32 = 1 << 19;
const KIND_SHIFT: u32 = 16;
const KIND_MASK: i32 = 0x7 << KIND_SHIFT;
const KIND_PLAIN: i32 = 0;
const KIND_REQUEST: i32 = 1;
const KIND_REPLY: i32 = 2;
/// The smallest `MPI_TAG_UB` the headerless path needs (every bit above in use).
pub(crate) const NEEDED_TAG_UB: i32 = i32::MAX;
/// Bytes of the request-id trailer of a request or reply.
pub(crate) const REQUEST_ID_LEN: usize = 8;

/// The 10 job-check bits of `job`, in place (every bit of the id folded in).
pub(crate) fn job_bits(job: JobId) -> i32 {
    let mut x = job.0;
    x ^= x >> 32;
    x ^= x >> 16;
    x = (x ^ (x >> 10) ^ (x >> 20)) & 0x3ff;
    (x as i32) << JOB_SHIFT
}

/// The tag of a headerless message of type `ty` with `flags` from job `job`, and whether it
/// ends with the request-id trailer; None if the flags need the framed path (goodbye, acks).
pub(crate) fn encode(job_bits: i32, ty: MsgType, flags: Flags) -> Option<(i32, bool)> {
    let kind = if flags == Flags::empty() {
        KIND_PLAIN
    } else if flags == Flags::REQUEST {
        KIND_REQUEST
    } else if flags == Flags::REPLY {
        KIND_REPLY
    } else {
        return None;
    };
    let tag = HEADERLESS | job_bits | (kind << KIND_SHIFT) | i32::from(ty.0);
    Some((tag, kind != KIND_PLAIN))
}

/// Why a headerless message is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TagError {
    /// Another job's check bits.
    ForeignJob,
    /// A reserved kind, an auth trailer (not supported yet), or a request/reply shorter than
    /// its trailer.
    Malformed,
}

/// A decoded headerless message: its type, flags, request id and payload length (the
/// payload is the first `payload_len` bytes of the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub ty: MsgType,
    pub flags: Flags,
    pub request_id: u64,
    pub payload_len: usize,
}

/// Decodes the headerless message `data` that arrived with `tag` (bit 30 set) for a job whose
/// check bits are `job_bits`.
pub(crate) fn decode(job_bits: i32, tag: i32, data: &[u8]) -> Result<Decoded, TagError> {
    if tag & JOB_MASK != job_bits {
        return Err(TagError::ForeignJob);
    }
    if tag & AUTH_TRAILER != 0 {
        return Err(TagError::Malformed);
    }
    let ty = MsgType((tag & 0xffff) as u16);
    let flags = match (tag & KIND_MASK) >> KIND_SHIFT {
        KIND_PLAIN => {
            return Ok(Decoded {
                ty,
                flags: Flags::empty(),
                request_id: 0,
                payload_len: data.len(),
            })
        }
        KIND_REQUEST => Flags::REQUEST,
        KIND_REPLY => Flags::REPLY,
        _ => return Err(TagError::Malformed),
    };
    let payload_len = data
        .len()
        .checked_sub(REQUEST_ID_LEN)
        .ok_or(TagError::Malformed)?;
    let mut id = [0u8; REQUEST_ID_LEN];
    id.copy_from_slice(&data[payload_len..]);
    Ok(Decoded {
        ty,
        flags,
        request_id: u64::from_le_bytes(id),
        payload_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_every_kind_and_stay_apart_from_framed_tags() {
        let jb = job_bits(JobId(0x1234_5678_9abc_def0));
        for (flags, trailer) in [
            (Flags::empty(), false),
            (Flags::REQUEST, true),
            (Flags::REPLY, true),
        ] {
            for ty in [0u16, 1, 64, 0x8000, u16::MAX] {
                let (tag, t) = encode(jb, MsgType(ty), flags).expect("headerless");
                assert_eq!(t, trailer);
                assert!(tag >= 0 && tag & HEADERLESS != 0);
                assert_ne!(tag, 0x5155);
                let mut data = vec![7u8; 5];
                if trailer {
                    data.extend_from_slice(&42u64.to_le_bytes());
                }
                let d = decode(jb, tag, &data).expect("decodes");
                assert_eq!(d.ty, MsgType(ty));
                assert_eq!(d.flags, flags);
                assert_eq!(d.payload_len, 5);
                assert_eq!(d.request_id, if trailer { 42 } else { 0 });
            }
        }
        // Framed tags are not headerless.
        assert_eq!(0x5155 & HEADERLESS, 0);
        assert_eq!(0x5157 & HEADERLESS, 0);
    }

    #[test]
    fn other_flags_take_the_framed_path() {
        let jb = job_bits(JobId(1));
        for f in [
            Flags::BYE,
            Flags::ACK,
            Flags::REQUEST | Flags::REPLY,
            Flags::AUTH,
        ] {
            assert_eq!(encode(jb, MsgType(100), f), None);
        }
    }

    #[test]
    fn foreign_jobs_reserved_kinds_auth_and_short_trailers_are_refused() {
        let (a, b) = (job_bits(JobId(1)), job_bits(JobId(2)));
        assert_ne!(a, b);
        let (tag, _) = encode(a, MsgType(100), Flags::empty()).expect("headerless");
        assert_eq!(decode(b, tag, &[1]), Err(TagError::ForeignJob));
        assert_eq!(
            decode(a, tag | AUTH_TRAILER, &[1]),
            Err(TagError::Malformed)
        );
        assert_eq!(
            decode(a, tag | (5 << KIND_SHIFT), &[1]),
            Err(TagError::Malformed)
        );
        let (req, _) = encode(a, MsgType(100), Flags::REQUEST).expect("headerless");
        assert_eq!(decode(a, req, &[0; 7]), Err(TagError::Malformed));
        // An empty plain message and an empty request are fine.
        assert_eq!(decode(a, tag, &[]).map(|d| d.payload_len), Ok(0));
        assert_eq!(decode(a, req, &[0; 8]).map(|d| d.payload_len), Ok(0));
    }

    #[test]
    fn job_bits_use_the_whole_id() {
        // Ids that differ only in high or only in low bits get different check bits.
        let base = job_bits(JobId(0));
        assert_ne!(job_bits(JobId(1 << 63)), base);
        assert_ne!(job_bits(JobId(1 << 40)), base);
        assert_ne!(job_bits(JobId(1)), base);
        assert_eq!(job_bits(JobId(u64::MAX)) & !JOB_MASK, 0);
    }
}

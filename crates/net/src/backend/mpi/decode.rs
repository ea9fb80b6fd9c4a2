//! Decoding what arrived: the checks of a framed message (wire header, job, source and
//! destination, length) and of a headerless one (the tag's job bits and kind), and the
//! payload copied out of a borrowed buffer or kept in the received one. Pure: it may run
//! under the MPI lock on the posted receive's buffer; must not touch MPI, peers or counters.
use super::{COPY_MAX, TAG};
use crate::backend::mpi_tag;
use crate::stats::DropReason;
use bytes::{Buf, Bytes};
use squall_core::{JobId, NodeId};
use squall_wire::{decode_header, Header, HEADER_LEN};

/// Checks one received frame from MPI rank `src` (a whole frame, or a header with its `body`)
/// against this node (`job`, `rank`, `peers` nodes) and returns its header and payload (a
/// whole frame's payload copied out: frames are at most [`RX_MAX`] bytes), or why it is
/// dropped. Pure: it may run under the MPI lock, on the posted receive's buffer.
pub(super) fn decode_frame(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    data: &[u8],
    body: Option<Vec<u8>>,
) -> Result<(Header, Bytes), DropReason> {
    let h = check_frame(job, rank, peers, src, data, body.as_ref().map(Vec::len))?;
    let payload = match body {
        Some(b) => Bytes::from(b),
        None => Bytes::copy_from_slice(&data[HEADER_LEN..]),
    };
    Ok((h, payload))
}

/// The checks of [`decode_frame`] alone: the header of a frame from MPI rank `src` that is
/// whole (`body_len` None: `data` is exactly header + payload) or a header with a body of
/// `body_len` bytes beside it.
fn check_frame(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    data: &[u8],
    body_len: Option<usize>,
) -> Result<Header, DropReason> {
    let src = u16::try_from(src)
        .ok()
        .filter(|s| usize::from(*s) < peers)
        .ok_or(DropReason::BadDest)?;
    let h = decode_header(data).map_err(|_| DropReason::Garbage)?;
    if h.job != job {
        return Err(DropReason::ForeignJob);
    }
    if h.src.0 != src || h.dst != rank {
        return Err(DropReason::BadDest);
    }
    let whole = match body_len {
        Some(b) => data.len() == HEADER_LEN && b == h.payload_len as usize,
        None => data.len() == HEADER_LEN + h.payload_len as usize,
    };
    if !whole {
        return Err(DropReason::Truncated);
    }
    Ok(h)
}

/// Decodes a whole frame held in its own buffer (taken from the posted receive): the payload is
/// that buffer past the header, trimmed to its length (no copy).
pub(super) fn decode_owned(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    mut data: Vec<u8>,
) -> Result<(Header, Bytes), DropReason> {
    let h = check_frame(job, rank, peers, src, &data, None)?;
    // Gives the unused rest of the receive's buffer back (glibc shrinks in place).
    data.shrink_to_fit();
    let mut payload = Bytes::from(data);
    payload.advance(HEADER_LEN);
    Ok((h, payload))
}

/// The checks of a headerless message (a tag with [`mpi_tag::HEADERLESS`]) from MPI rank
/// `src` for this node (`job`, whose check bits are `job_bits`, `rank`, `peers` nodes): a
/// header standing for it (what [`MpiBackend::accept`] reads; nothing is decoded from the
/// bytes but the request-id trailer) and its payload's length (the first bytes of `data`).
fn check_headerless(
    (job_bits, job, rank, peers): (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, usize), DropReason> {
    let src = u16::try_from(src)
        .ok()
        .filter(|s| usize::from(*s) < peers && *s != rank.0)
        .ok_or(DropReason::BadDest)?;
    let d = mpi_tag::decode(job_bits, tag, data).map_err(|e| match e {
        mpi_tag::TagError::ForeignJob => DropReason::ForeignJob,
        mpi_tag::TagError::Malformed => DropReason::Garbage,
    })?;
    let mut h = Header::new(job, d.ty, NodeId(src), rank);
    h.flags = d.flags;
    h.request_id = d.request_id;
    h.payload_len = d.payload_len as u32;
    Ok((h, d.payload_len))
}

/// Decodes a headerless message read in place (the posted receive's buffer): its payload is
/// copied out.
pub(super) fn decode_headerless(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, Bytes), DropReason> {
    let (h, n) = check_headerless(me, src, tag, data)?;
    Ok((h, Bytes::copy_from_slice(&data[..n])))
}

/// Decodes a headerless message held in its own buffer: the buffer becomes the payload.
pub(super) fn decode_headerless_owned(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    mut data: Vec<u8>,
) -> Result<(Header, Bytes), DropReason> {
    let (h, n) = check_headerless(me, src, tag, &data)?;
    data.truncate(n);
    data.shrink_to_fit();
    Ok((h, Bytes::from(data)))
}

/// Decodes a message received into a buffer of its own (`data`; `body` beside a split
/// header) from MPI rank `src` with `tag`, for this node (`me` as in [`check_headerless`], the
/// check bits -1 when headerless messages are off): headerless or framed, a large one keeping
/// its buffer.
pub(super) fn decode_received(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: Vec<u8>,
    body: Option<Vec<u8>>,
) -> Result<(Header, Bytes), DropReason> {
    let (_, job, rank, peers) = me;
    let headerless = me.0 >= 0 && tag & mpi_tag::HEADERLESS != 0;
    match (body, data.len() > COPY_MAX) {
        (None, false) => decode_slice(me, src, tag, &data),
        (None, true) if headerless => decode_headerless_owned(me, src, tag, data),
        (None, true) if tag == TAG => decode_owned(job, rank, peers, src, data),
        (Some(body), _) if !headerless && tag == TAG => {
            decode_frame(job, rank, peers, src, &data, Some(body))
        }
        _ => Err(DropReason::Garbage),
    }
}

/// Decodes a whole message read in place (a ring's bytes), payload copied out: headerless
/// or framed (see [`decode_received`]).
pub(super) fn decode_slice(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, Bytes), DropReason> {
    if me.0 >= 0 && tag & mpi_tag::HEADERLESS != 0 {
        decode_headerless(me, src, tag, data)
    } else if tag != TAG {
        Err(DropReason::Garbage)
    } else {
        decode_frame(me.1, me.2, me.3, src, data, None)
    }
}

//! The tcp reader's landings: a frame whose body goes from the socket straight into a buffer
//! lent by [`crate::Endpoint::receive_into`] instead of the peer's read buffer (a blocking
//! get's reply, read once, by the kernel, into the caller's memory).
//!
//! A landing starts when the frame at the head of a peer's unparsed bytes is incomplete and
//! its header and payload head match an expectation ([`Expects::try_land`]); the bytes of it
//! already read are copied into the buffer, the rest is read into it directly
//! ([`Landing::read`]); once whole it is delivered with the payload head alone and `placed`
//! set. An expectation forgotten while its frame is half-landed ([`Landing::unland`]) puts the
//! frame's bytes so far back into the peer's buffer, where reading goes on as usual.
//! Owns the matching and the landing state; must not touch sockets beyond the one read, or
//! frames other than the landed one. Never used with authentication (frames are sealed).
use super::{BackendEvent, InMsg};
use crate::landing::Dest;
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{decode_header, Flags, Header, MsgType, HEADER_LEN};
use std::io::{self, Read};

/// One expected frame (see [`crate::Endpoint::receive_into`]).
pub(super) struct Expect {
    id: u64,
    from: NodeId,
    ty: MsgType,
    head: Vec<u8>,
    dest: Dest,
}

/// The expectations not yet matched by a frame.
#[derive(Default)]
pub(super) struct Expects(Vec<Expect>);

/// A frame being read into a lent buffer.
pub(super) struct Landing {
    exp: Expect,
    /// The frame's wire header and payload head.
    frame_head: Vec<u8>,
    header: Header,
    /// Bytes of the body in the buffer so far.
    filled: usize,
}

/// What one read of a landing did.
pub(super) enum Step {
    /// Bytes arrived (the landing may be complete: [`Landing::done`]).
    Read(usize),
    /// Nothing more to read now.
    WouldBlock,
    /// The stream ended or failed: [`Landing::unland`] and handle it the usual way.
    Ended(Option<io::Error>),
}

impl Expects {
    pub(super) fn add(&mut self, id: u64, from: NodeId, ty: MsgType, head: &[u8], dest: Dest) {
        self.0.push(Expect {
            id,
            from,
            ty,
            head: head.to_vec(),
            dest,
        });
    }

    /// Drops expectation `id` if it is still waiting; true if it was.
    pub(super) fn forget(&mut self, id: u64) -> bool {
        let before = self.0.len();
        self.0.retain(|e| e.id != id);
        self.0.len() != before
    }

    /// If `bytes` (the start of an incomplete frame from `from`, its header already checked
    /// by the parser) matches an expectation, starts landing it: what of the body is in
    /// `bytes` is copied into the buffer.
    pub(super) fn try_land(&mut self, from: NodeId, bytes: &[u8]) -> Option<Landing> {
        if self.0.is_empty() {
            return None;
        }
        let h = decode_header(bytes).ok()?;
        if h.flags.0 & (Flags::AUTH | Flags::BYE | Flags::REPLY | Flags::REQUEST).0 != 0 {
            return None;
        }
        let i = self.0.iter().position(|e| {
            let split = HEADER_LEN + e.head.len();
            e.from == from
                && e.ty == h.ty
                && h.payload_len as usize == e.head.len() + e.dest.len()
                && bytes.len() >= split
                && bytes[HEADER_LEN..split] == e.head[..]
        })?;
        let mut exp = self.0.swap_remove(i);
        let split = HEADER_LEN + exp.head.len();
        let filled = exp.dest.write_at(0, &bytes[split..]);
        Some(Landing {
            exp,
            frame_head: bytes[..split].to_vec(),
            header: h,
            filled,
        })
    }
}

impl Landing {
    pub(super) fn id(&self) -> u64 {
        self.exp.id
    }

    /// True once the whole body is in the buffer.
    pub(super) fn done(&self) -> bool {
        self.filled == self.exp.dest.len()
    }

    /// One read from `r` into the rest of the buffer.
    pub(super) fn read(&mut self, r: &mut impl Read) -> Step {
        if self.done() {
            return Step::Read(0);
        }
        match self.exp.dest.read_at(self.filled, r) {
            Ok(0) => Step::Ended(None),
            Ok(n) => {
                self.filled += n;
                Step::Read(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::WouldBlock,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Read(0),
            Err(e) => Step::Ended(Some(e)),
        }
    }

    /// The whole landed frame as delivered: the payload head, `placed` = the body's length.
    pub(super) fn deliver(self, src: NodeId, out: &mut Vec<BackendEvent>) {
        out.push(BackendEvent::Deliver(InMsg {
            src,
            ty: self.header.ty,
            flags: self.header.flags,
            request_id: self.header.request_id,
            payload: Bytes::copy_from_slice(&self.frame_head[HEADER_LEN..]),
            placed: self.filled,
        }));
    }

    /// Gives up the buffer: the frame's bytes so far, to go on in the peer's read buffer
    /// (which is empty while a landing runs).
    pub(super) fn unland(mut self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_head.len() + self.exp.dest.len());
        v.extend_from_slice(&self.frame_head);
        v.extend_from_slice(self.exp.dest.prefix(self.filled));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::landing::lend;
    use squall_core::JobId;
    use std::cell::RefCell;

    fn frame(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut h = Header::new(JobId(7), MsgType(ty), NodeId(1), NodeId(0));
        h.payload_len = payload.len() as u32;
        let mut v = vec![0u8; HEADER_LEN];
        h.write_to(&mut v);
        v.extend_from_slice(payload);
        v
    }

    /// A frame matched by its head lands across reads; one of another head, type or length
    /// does not; an expectation forgotten half-way gives back the frame's bytes so far.
    #[test]
    fn frames_land_by_head_and_come_back_when_forgotten() {
        let body: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut payload = b"HEAD".to_vec();
        payload.extend_from_slice(&body);
        let wire = frame(70, &payload);
        let mut buf = vec![0u8; 1000];
        let exps = RefCell::new(Expects::default());
        let delivered = lend(
            &mut buf,
            |d| exps.borrow_mut().add(1, NodeId(1), MsgType(70), b"HEAD", d),
            || {
                let mut x = exps.borrow_mut();
                // Other type, other head, other length: no landing.
                assert!(x.try_land(NodeId(1), &frame(71, &payload)[..300]).is_none());
                assert!(x.try_land(NodeId(2), &wire[..300]).is_none());
                let mut other = b"HEAX".to_vec();
                other.extend_from_slice(&body);
                assert!(x.try_land(NodeId(1), &frame(70, &other)[..300]).is_none());
                assert!(x
                    .try_land(NodeId(1), &frame(70, &payload[..900])[..300])
                    .is_none());
                let mut l = x.try_land(NodeId(1), &wire[..300]).expect("lands");
                let mut rest = &wire[300..];
                while !l.done() {
                    let mut part = &rest[..rest.len().min(123)];
                    let Step::Read(n) = l.read(&mut part) else {
                        panic!("read");
                    };
                    rest = &rest[n..];
                }
                let mut out = Vec::new();
                l.deliver(NodeId(1), &mut out);
                match out.pop() {
                    Some(BackendEvent::Deliver(m)) => (m.payload, m.placed),
                    _ => panic!("no delivery"),
                }
            },
            || {
                exps.borrow_mut().forget(1);
            },
        );
        assert_eq!(delivered, (Bytes::from_static(b"HEAD"), 1000));
        assert_eq!(buf, body);

        let mut buf = vec![0u8; 1000];
        let back = lend(
            &mut buf,
            |d| exps.borrow_mut().add(2, NodeId(1), MsgType(70), b"HEAD", d),
            || {
                let mut l = exps.borrow_mut().try_land(NodeId(1), &wire[..100]);
                let mut more = &wire[100..400];
                if let Some(l) = l.as_mut() {
                    assert!(matches!(l.read(&mut more), Step::Read(300)));
                }
                l.map(Landing::unland)
            },
            || {
                exps.borrow_mut().forget(2);
            },
        );
        assert_eq!(back.as_deref(), Some(&wire[..400]));
    }
}

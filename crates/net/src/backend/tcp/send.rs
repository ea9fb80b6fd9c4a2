//! The send path: a message framed (wire header + payload, sealed with authentication on),
//! written straight to the socket in one `writev` when nothing is queued for the peer
//! ([`TcpBackend::try_write_direct`]), else queued (through the fault delay, if any) in the
//! peer's write buffer and flushed as the socket takes it, with write interest while a
//! remainder waits. Must not read from a socket nor decide when a peer is lost (a failed
//! write is reported to the caller or found by the read side and `peers`).
use super::{token, Peer, TcpBackend};
use crate::auth::LinkAuth;
use crate::backend::OutMsg;
use crate::error::NetError;
use mio::{Interest, Registry};
use squall_core::NodeId;
use squall_wire::{Flags, Header, HEADER_LEN};
use std::io::{self, Write};
use std::time::Instant;

/// Most bytes a batch holds for one peer before it writes them anyway.
const HELD_MAX: usize = 256 << 10;

impl TcpBackend {
    pub(super) fn frame(&mut self, msg: &OutMsg) -> Result<Vec<u8>, NetError> {
        let mut v =
            Vec::with_capacity(HEADER_LEN + msg.payload.len() + squall_wire::AUTH_TRAILER_LEN);
        frame_into(self.auth.as_mut(), self.job, self.rank, msg, &mut v)?;
        Ok(v)
    }

    /// Fast path: nothing queued for the peer and no fault delay, so write header and payload
    /// straight to the socket (one `writev`, no copy); only a remainder is buffered.
    /// `Ok(None)` means the caller must take the queued path.
    /// `body` (borrowed) follows `msg.payload` in the frame; with it non-empty, a link that
    /// authenticates takes the queued path (its trailer is computed over one slice).
    pub(super) fn try_write_direct(
        &mut self,
        msg: &OutMsg,
        body: &[u8],
    ) -> Result<Option<Result<(), NetError>>, NetError> {
        let whole = msg.payload.len() + body.len();
        let len = u32::try_from(whole).map_err(|_| NetError::TooLarge { len: whole })?;
        let registry = self.registry.as_ref();
        let Some(p) = self.peers.get_mut(msg.to.index()).and_then(Option::as_mut) else {
            return Ok(None);
        };
        if !p.open || p.want_write || p.wpos != p.wbuf.len() || p.delay.is_some() {
            return Ok(None);
        }
        if self.auth.is_some() && !body.is_empty() {
            return Ok(None);
        }
        if self.auth.as_ref().is_some_and(LinkAuth::encrypts) {
            // The payload is encrypted into a copy: the queued path makes it.
            return Ok(None);
        }
        let mut h = Header::new(self.job, msg.ty, self.rank, msg.to);
        h.flags = msg.flags;
        h.request_id = msg.request_id;
        h.payload_len = len;
        if self.auth.is_some() {
            h.flags.insert(Flags::AUTH);
        }
        let hb = h.to_bytes();
        let trailer = self
            .auth
            .as_mut()
            .map(|a| a.trailer(msg.to, &hb, &msg.payload));
        let parts: [&[u8]; 4] = [
            &hb,
            &msg.payload,
            body,
            trailer.as_ref().map_or(&[], |t| &t[..]),
        ];
        let total: usize = parts.iter().map(|x| x.len()).sum();
        let mut written = 0usize;
        while written < total {
            let mut bufs = [io::IoSlice::new(&[]); 4];
            let k = rest_of(&parts, written, |i, part| bufs[i] = io::IoSlice::new(part));
            // MSG_NOSIGNAL: a peer gone meanwhile is an error here, not a SIGPIPE that kills
            // a node whose program has SIGPIPE's default action (C programs: std's writes
            // use the flag, a plain writev does not).
            let r = socket2::SockRef::from(&p.stream)
                .send_vectored_with_flags(&bufs[..k], libc::MSG_NOSIGNAL);
            match r {
                Ok(0) => {
                    return Ok(Some(Err(NetError::PeerLost {
                        peer: msg.to,
                        reason: "write failed: connection closed".into(),
                    })))
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Ok(Some(Err(NetError::PeerLost {
                        peer: msg.to,
                        reason: format!("write failed: {e}"),
                    })))
                }
            }
        }
        self.counters.packets_sent += 1;
        p.sent = true;
        if written < total {
            p.wbuf.clear();
            p.wpos = 0;
            let wbuf = &mut p.wbuf;
            rest_of(&parts, written, |_, part| wbuf.extend_from_slice(part));
            Self::set_interest(registry, p, true);
        }
        Ok(Some(Ok(())))
    }

    fn set_interest(registry: Option<&Registry>, p: &mut Peer, want_write: bool) {
        if p.want_write == want_write || !p.open {
            return;
        }
        p.want_write = want_write;
        if let Some(r) = registry {
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            // A failed reregister leaves the old interest; the next write attempt retries.
            let _ = r.reregister(&mut p.stream, token(p.id), interest);
        }
    }

    /// Writes as much of the peer's buffer as the socket takes. Err = the connection is broken.
    pub(super) fn flush(registry: Option<&Registry>, p: &mut Peer) -> io::Result<()> {
        while p.wpos < p.wbuf.len() {
            match p.stream.write(&p.wbuf[p.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => p.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if p.wpos == p.wbuf.len() {
            p.wbuf.clear();
            p.wpos = 0;
            Self::set_interest(registry, p, false);
        } else {
            if p.wpos > 1 << 20 {
                p.wbuf.drain(..p.wpos);
                p.wpos = 0;
            }
            Self::set_interest(registry, p, true);
        }
        Ok(())
    }

    /// Queues a frame of a batch without writing it (unless the peer's buffer has grown past
    /// [`HELD_MAX`]): [`TcpBackend::flush_held`] writes it with the rest of the batch.
    pub(super) fn enqueue_held(&mut self, now: Instant, msg: &OutMsg) -> Result<(), NetError> {
        let to = msg.to;
        match self.peers.get_mut(to.index()).and_then(Option::as_mut) {
            Some(p) if p.open && p.delay.is_none() && p.wbuf.len() < HELD_MAX => {
                // Framed straight into the peer's buffer (no frame of its own).
                frame_into(self.auth.as_mut(), self.job, self.rank, msg, &mut p.wbuf)?;
                p.sent = true;
                p.held = true;
                self.counters.packets_sent += 1;
                self.counters.frames_batched += 1;
                Ok(())
            }
            _ => {
                let frame = self.frame(msg)?;
                self.enqueue(now, to, frame)
            }
        }
    }

    /// Writes what batches hold for every peer (as much as the sockets take; the rest waits
    /// for write readiness as usual).
    pub(super) fn flush_held(&mut self) {
        let registry = self.registry.as_ref();
        for p in self.peers.iter_mut().flatten() {
            if !std::mem::take(&mut p.held) || !p.open || p.want_write {
                continue;
            }
            // A broken connection is found by the read side, which reports the peer lost.
            let _ = Self::flush(registry, p);
        }
    }

    pub(super) fn enqueue(
        &mut self,
        now: Instant,
        to: NodeId,
        frame: Vec<u8>,
    ) -> Result<(), NetError> {
        if self.is_cut(to, now) {
            self.cut_drops += 1;
            return Ok(());
        }
        let registry = self.registry.as_ref();
        let p = match self.peers.get_mut(to.index()).and_then(Option::as_mut) {
            Some(p) if p.open => p,
            _ => return Err(NetError::PeerGone { peer: to }),
        };
        p.sent = true;
        let mut due = Vec::new();
        match p.delay.as_mut() {
            Some(d) => d.submit(now, frame, &mut due),
            None => due.push(frame),
        }
        for f in due {
            p.wbuf.extend_from_slice(&f);
            self.counters.packets_sent += 1;
        }
        if !p.want_write {
            if let Err(e) = Self::flush(registry, p) {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: format!("write failed: {e}"),
                });
            }
        }
        Ok(())
    }

    pub(super) fn is_flushed_writes(&self) -> bool {
        self.peers.iter().flatten().all(|p| {
            !p.open || (p.wpos == p.wbuf.len() && p.delay.as_ref().is_none_or(|d| d.held() == 0))
        })
    }
}

/// Appends `msg`'s frame (header, payload and, with authentication on, the sealed form) to
/// `out`.
fn frame_into(
    auth: Option<&mut LinkAuth>,
    job: squall_core::JobId,
    rank: NodeId,
    msg: &OutMsg,
    out: &mut Vec<u8>,
) -> Result<(), NetError> {
    let len = u32::try_from(msg.payload.len()).map_err(|_| NetError::TooLarge {
        len: msg.payload.len(),
    })?;
    let mut h = Header::new(job, msg.ty, rank, msg.to);
    h.flags = msg.flags;
    h.request_id = msg.request_id;
    h.payload_len = len;
    match auth {
        Some(a) => a.seal_into(&h, &msg.payload, out),
        None => {
            out.extend_from_slice(&h.to_bytes());
            out.extend_from_slice(&msg.payload);
        }
    }
    Ok(())
}

/// Calls `f(i, slice)` for the bytes of `parts` (one frame, in order) from byte `from` on,
/// numbering the non-empty slices from 0; returns how many there were.
fn rest_of<'a>(parts: &[&'a [u8]], from: usize, mut f: impl FnMut(usize, &'a [u8])) -> usize {
    let mut skip = from;
    let mut k = 0;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        f(k, &part[skip..]);
        skip = 0;
        k += 1;
    }
    k
}

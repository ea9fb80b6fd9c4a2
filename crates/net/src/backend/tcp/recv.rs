//! The receive path: reading a peer's connection after a readiness event or a waiter's look
//! ([`TcpBackend::on_readable`]): bytes parsed in place when nothing is buffered, else
//! appended to the peer's read buffer; a large frame's buffer handed on with it; an incomplete
//! frame that matches an expectation continued in a lent buffer (a landing); EOF and errors
//! after the frames before them; a cut-off peer's bytes read and dropped. Must not write to a
//! socket nor check a frame itself (that is `decode`).
use super::{Peer, TcpBackend};
use crate::auth::LinkAuth;
use crate::backend::tcp_land::{Expects, Step};
use crate::backend::BackendEvent;
use crate::stats::LinkCounters;
use bytes::Bytes;
use squall_core::{JobId, NodeId};
use std::io::{self, Read};
use std::time::Instant;

impl TcpBackend {
    /// Parses what is buffered for the peer.
    fn read_frames(
        job: JobId,
        rank: NodeId,
        p: &mut Peer,
        (counters, expects): (&mut LinkCounters, &mut Expects),
        mut auth: Option<&mut LinkAuth>,
        out: &mut Vec<BackendEvent>,
    ) -> Result<(), String> {
        if let Some(total) = Self::big_frame_ready(&p.rbuf[p.rpos..]) {
            // The buffer goes with the frame's payload (sliced to that frame alone); what
            // follows the frame is copied back and parsed below.
            let owned = Bytes::from(std::mem::take(&mut p.rbuf));
            let frame = owned.slice(p.rpos..p.rpos + total);
            Self::parse_frames(
                job,
                rank,
                (p.id, p.addr),
                &mut p.bye_received,
                (&frame, Some(&frame)),
                counters,
                auth.as_deref_mut(),
                out,
            )?;
            p.rbuf.extend_from_slice(&owned[p.rpos + total..]);
            p.rpos = 0;
        }
        let (used, need) = Self::parse_frames(
            job,
            rank,
            (p.id, p.addr),
            &mut p.bye_received,
            (&p.rbuf[p.rpos..], None),
            counters,
            auth.as_deref_mut(),
            out,
        )?;
        p.rpos += used;
        if p.rpos == p.rbuf.len() {
            p.rbuf.clear();
            p.rpos = 0;
        } else if p.rpos > 256 * 1024 {
            p.rbuf.drain(..p.rpos);
            p.rpos = 0;
        }
        if need.is_some() && auth.is_none() && !p.bye_received {
            if let Some(l) = expects.try_land(p.id, &p.rbuf[p.rpos..]) {
                // The incomplete frame is all that is buffered: it goes on in the lent buffer.
                p.landing = Some(l);
                p.rbuf.clear();
                p.rpos = 0;
                return Ok(());
            }
        }
        if let Some(total) = need {
            let want = p.rpos + total;
            if p.rbuf.capacity() < want {
                p.rbuf.reserve(want - p.rbuf.len());
            }
        }
        Ok(())
    }

    /// Takes bytes just read: parsed in place when nothing is buffered (the usual case: whole
    /// frames, no copy into the peer's buffer), else appended to the buffer and parsed there.
    fn ingest(
        job: JobId,
        rank: NodeId,
        p: &mut Peer,
        data: &[u8],
        (counters, expects): (&mut LinkCounters, &mut Expects),
        auth: Option<&mut LinkAuth>,
        out: &mut Vec<BackendEvent>,
    ) -> Result<(), String> {
        if p.rpos != p.rbuf.len() {
            p.rbuf.extend_from_slice(data);
            return Self::read_frames(job, rank, p, (counters, expects), auth, out);
        }
        let sealed = auth.is_some();
        p.rbuf.clear();
        p.rpos = 0;
        let (used, need) = Self::parse_frames(
            job,
            rank,
            (p.id, p.addr),
            &mut p.bye_received,
            (data, None),
            counters,
            auth,
            out,
        )?;
        if used < data.len() {
            if need.is_some() && !sealed && !p.bye_received {
                if let Some(l) = expects.try_land(p.id, &data[used..]) {
                    p.landing = Some(l);
                    return Ok(());
                }
            }
            if let Some(total) = need {
                p.rbuf.reserve(total);
            }
            p.rbuf.extend_from_slice(&data[used..]);
        }
        Ok(())
    }

    pub(super) fn on_readable(&mut self, now: Instant, p_idx: usize, out: &mut Vec<BackendEvent>) {
        if self.is_cut(NodeId(p_idx as u16), now) {
            self.discard_cut(p_idx);
            return;
        }
        let registry = self.registry.as_ref();
        let Some(p) = self.peers.get_mut(p_idx).and_then(Option::as_mut) else {
            return;
        };
        let chunk = &mut self.scratch;
        loop {
            if !p.open {
                return;
            }
            if let Some(l) = p.landing.as_mut() {
                // A frame landing in a lent buffer: its body is read straight into it.
                match l.read(&mut p.stream) {
                    Step::Read(n) => {
                        p.heard |= n > 0;
                        if l.done() {
                            self.counters.packets_received += 1;
                            if let Some(l) = p.landing.take() {
                                l.deliver(p.id, out);
                            }
                        }
                    }
                    Step::WouldBlock => return,
                    Step::Ended(err) => {
                        // The frame goes back to the read buffer; the end is handled below.
                        if let Some(l) = p.landing.take() {
                            p.rbuf = l.unland();
                            p.rpos = 0;
                        }
                        if let Some(e) = err {
                            Self::lost(p, format!("connection error: {e}"), out, registry);
                            return;
                        }
                    }
                }
                continue;
            }
            match p.stream.read(chunk) {
                Ok(0) => {
                    // Frames before EOF first, then the verdict.
                    if let Err(r) = Self::read_frames(
                        self.job,
                        self.rank,
                        p,
                        (&mut self.counters, &mut self.expects),
                        self.auth.as_mut(),
                        out,
                    ) {
                        Self::lost(p, r, out, registry);
                        return;
                    }
                    let reason = "connection closed without goodbye".to_string();
                    Self::lost(p, reason, out, registry);
                    return;
                }
                Ok(n) => {
                    p.heard = true;
                    if let Err(r) = Self::ingest(
                        self.job,
                        self.rank,
                        p,
                        &chunk[..n],
                        (&mut self.counters, &mut self.expects),
                        self.auth.as_mut(),
                        out,
                    ) {
                        Self::lost(p, r, out, registry);
                        return;
                    }
                    if n < chunk.len() {
                        // A short read drained the socket; the next arrival is a new edge.
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = Self::read_frames(
                        self.job,
                        self.rank,
                        p,
                        (&mut self.counters, &mut self.expects),
                        self.auth.as_mut(),
                        out,
                    );
                    Self::lost(p, format!("connection error: {e}"), out, registry);
                    return;
                }
            }
        }
    }

    /// Reads and drops what a cut-off peer sent; its close is not seen either (on a cut
    /// network no FIN arrives): the stream leaves the poll and the silence verdict comes from
    /// [`TcpBackend::tick`].
    fn discard_cut(&mut self, p_idx: usize) {
        let registry = self.registry.as_ref();
        let Some(p) = self.peers.get_mut(p_idx).and_then(Option::as_mut) else {
            return;
        };
        if let Some(l) = p.landing.take() {
            // Its frame is cut off with the rest (the buffer is no longer written).
            drop(l.unland());
            self.cut_drops += 1;
        }
        loop {
            match p.stream.read(&mut self.scratch) {
                Ok(0) => break,
                Ok(_) => self.cut_drops += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => break,
            }
        }
        if let Some(r) = registry {
            let _ = r.deregister(&mut p.stream);
        }
    }
}

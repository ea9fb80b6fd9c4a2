//! The tcp backend: one connection per peer pair, TCP_NODELAY, frames = wire header + payload
//! (the header's `payload_len` is the length prefix). Owns the connected streams, frame
//! buffering and EOF/reset detection; must not touch handlers or requests.
//! Connections are set up by `bootstrap` (lower rank connects to higher) before this runs.
//! With authentication on, every frame is sealed (`AUTH` flag, trailer after the payload) and
//! a received frame whose tag fails or whose sequence number does not increase is dropped and
//! counted ([`LinkAuth`]); the stream stays in step, as the header gives the frame's length.
//! Silence: a connection to a stopped (SIGSTOP) or cut-off peer stays open, so every peer
//! that sent nothing for a quarter of the peer timeout gets a heartbeat (`TY_LINK`, consumed
//! here), and a peer from which no byte came for the peer timeout is lost. The flags behind
//! this are set without a clock read on the data path; a tick every quarter timeout reads them.
//! A fault spec's partition ([`Cut`]) drops every frame to and from one peer.
use super::tcp_land::{Expects, Landing, Step};
use super::{Backend, BackendEvent, InMsg, OutMsg};
use crate::auth::LinkAuth;
use crate::error::NetError;
use crate::faults::{Cut, FaultInjector, FaultSpec};
use crate::stats::{DropReason, LinkCounters};
use bytes::Bytes;
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use squall_core::{JobId, NodeId};
use squall_wire::{decode_header, AuthKey, Flags, Header, MsgType, Packet, HEADER_LEN};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

/// Largest payload a frame may announce (a garbage length must not make us reserve gigabytes).
const MAX_FRAME_PAYLOAD: u32 = 1 << 31;
/// A frame whose payload is at least this large, completed in the peer's buffer, is handed on
/// as a slice of that buffer (which then goes with it) instead of a copy.
const HAND_OVER_PAYLOAD: u32 = 64 * 1024;
/// How long a node that said goodbye keeps reading for peers' EOF before closing.
const LINGER: Duration = Duration::from_millis(300);

struct Peer {
    id: NodeId,
    /// The peer's address (named in warnings about refused frames).
    addr: Option<SocketAddr>,
    stream: TcpStream,
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    want_write: bool,
    open: bool,
    bye_received: bool,
    delay: Option<FaultInjector<Vec<u8>>>,
    /// Bytes came from the peer since the last tick.
    heard: bool,
    /// A frame went to the peer since the last tick.
    sent: bool,
    /// The last tick that found `heard` set (or the start).
    last_heard: Instant,
    /// A frame being read straight into a lent buffer (`rbuf` is empty meanwhile).
    landing: Option<Landing>,
}

pub(crate) struct TcpBackend {
    rank: NodeId,
    job: JobId,
    peers: Vec<Option<Peer>>,
    registry: Option<Registry>,
    counters: LinkCounters,
    shutdown_at: Option<Instant>,
    write_closed: bool,
    scratch: Vec<u8>,
    auth: Option<LinkAuth>,
    /// Silence after which a peer is lost.
    peer_timeout: Duration,
    /// When the heartbeat/silence tick next runs.
    next_tick: Instant,
    /// The partition this node is a side of, if any.
    cut: Option<Cut>,
    /// Frames dropped by the partition.
    cut_drops: u64,
    /// Frames expected into lent buffers ([`Backend::expect_into`]).
    expects: Expects,
}

fn token(peer: NodeId) -> Token {
    Token(peer.index() + 1)
}

impl TcpBackend {
    /// `streams[p]` is the connected stream to peer `p` (None for self).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rank: NodeId,
        job: JobId,
        streams: Vec<Option<std::net::TcpStream>>,
        faults: Option<FaultSpec>,
        auth: Option<AuthKey>,
        encrypt: bool,
        peer_timeout: Duration,
    ) -> Result<TcpBackend, NetError> {
        let start = Instant::now();
        let auth = auth.map(|k| LinkAuth::new(k, streams.len(), true, encrypt));
        let mut peers = Vec::with_capacity(streams.len());
        for (i, s) in streams.into_iter().enumerate() {
            let id = NodeId(i as u16);
            peers.push(match s {
                None => None,
                Some(s) => {
                    s.set_nodelay(true)
                        .map_err(|e| NetError::io(format!("tcp_nodelay to {id}"), e))?;
                    s.set_nonblocking(true)
                        .map_err(|e| NetError::io(format!("nonblocking socket to {id}"), e))?;
                    Some(Peer {
                        id,
                        addr: s.peer_addr().ok(),
                        stream: TcpStream::from_std(s),
                        rbuf: Vec::with_capacity(64 * 1024),
                        rpos: 0,
                        wbuf: Vec::new(),
                        wpos: 0,
                        want_write: false,
                        open: true,
                        bye_received: false,
                        delay: faults
                            .filter(|f| !f.per_packet_noop())
                            .map(|f| FaultInjector::stream(f, (rank.0 as u64) << 16 | i as u64)),
                        heard: false,
                        sent: false,
                        last_heard: start,
                        landing: None,
                    })
                }
            });
        }
        Ok(TcpBackend {
            rank,
            job,
            peers,
            registry: None,
            counters: LinkCounters::default(),
            shutdown_at: None,
            write_closed: false,
            scratch: vec![0u8; 256 * 1024],
            auth,
            peer_timeout,
            next_tick: start + tick_of(peer_timeout),
            cut: Cut::of(faults.as_ref(), rank.0, start),
            cut_drops: 0,
            expects: Expects::default(),
        })
    }

    /// The partition drops what goes to or comes from `peer` now.
    fn is_cut(&self, peer: NodeId, now: Instant) -> bool {
        self.cut.is_some_and(|c| c.drops(peer.0, now))
    }

    /// Every quarter timeout: heartbeats to peers sent nothing since the last tick, and the
    /// verdict on peers heard from by no byte for the peer timeout.
    fn tick(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        if now < self.next_tick {
            return;
        }
        // A tick a whole period late means this node was not running (a machine overloaded
        // for that long starves every node alike): silence over that gap proves nothing, so
        // every peer counts as heard now.
        let starved = now.saturating_duration_since(self.next_tick) > tick_of(self.peer_timeout);
        self.next_tick = now + tick_of(self.peer_timeout);
        let mut beat = Vec::new();
        for i in 0..self.peers.len() {
            let Some(p) = self.peers[i].as_mut() else {
                continue;
            };
            if !p.open || p.bye_received {
                continue;
            }
            if !p.heard && now.saturating_duration_since(p.last_heard) >= self.peer_timeout {
                // Bytes may wait unread (a starved process wakes with its timers due): read
                // them before judging.
                self.on_readable(now, i, out);
            }
            let Some(p) = self.peers[i].as_mut() else {
                continue;
            };
            if !p.open || p.bye_received {
                continue;
            }
            if std::mem::take(&mut p.heard) || starved {
                p.last_heard = now;
            } else if now.saturating_duration_since(p.last_heard) >= self.peer_timeout {
                let reason = format!(
                    "no message or heartbeat over tcp for {} ms",
                    self.peer_timeout.as_millis()
                );
                Self::lost(p, reason, out, self.registry.as_ref());
                continue;
            }
            if !std::mem::take(&mut p.sent) && self.shutdown_at.is_none() {
                beat.push(p.id);
            }
        }
        for to in beat {
            let msg = OutMsg {
                to,
                ty: MsgType(crate::endpoint::TY_LINK),
                flags: Flags::empty(),
                request_id: 0,
                payload: Bytes::new(),
            };
            if let Ok(f) = self.frame(&msg) {
                // A failed write is found by the read side (EOF or error) or the next tick.
                let _ = self.enqueue(now, to, f);
            }
        }
    }

    fn frame(&mut self, msg: &OutMsg) -> Result<Vec<u8>, NetError> {
        let len = u32::try_from(msg.payload.len()).map_err(|_| NetError::TooLarge {
            len: msg.payload.len(),
        })?;
        let mut h = Header::new(self.job, msg.ty, self.rank, msg.to);
        h.flags = msg.flags;
        h.request_id = msg.request_id;
        h.payload_len = len;
        let mut v =
            Vec::with_capacity(HEADER_LEN + msg.payload.len() + squall_wire::AUTH_TRAILER_LEN);
        match self.auth.as_mut() {
            Some(a) => a.seal_into(&h, &msg.payload, &mut v),
            None => {
                v.extend_from_slice(&h.to_bytes());
                v.extend_from_slice(&msg.payload);
            }
        }
        Ok(v)
    }

    /// Fast path: nothing queued for the peer and no fault delay, so write header and payload
    /// straight to the socket (one `writev`, no copy); only a remainder is buffered.
    /// `Ok(None)` means the caller must take the queued path.
    /// `body` (borrowed) follows `msg.payload` in the frame; with it non-empty, a link that
    /// authenticates takes the queued path (its trailer is computed over one slice).
    fn try_write_direct(
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
    fn flush(registry: Option<&Registry>, p: &mut Peer) -> io::Result<()> {
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

    fn enqueue(&mut self, now: Instant, to: NodeId, frame: Vec<u8>) -> Result<(), NetError> {
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

    fn lost(
        p: &mut Peer,
        reason: String,
        out: &mut Vec<BackendEvent>,
        registry: Option<&Registry>,
    ) {
        if !p.open {
            return;
        }
        p.open = false;
        if let Some(r) = registry {
            let _ = r.deregister(&mut p.stream);
        }
        if !p.bye_received {
            out.push(BackendEvent::PeerLost { peer: p.id, reason });
        }
    }

    /// Parses the whole frames at the start of `buf` into events. Returns the bytes consumed
    /// and, if a frame is incomplete, its total length. Err = the connection carries garbage.
    #[allow(clippy::too_many_arguments)]
    fn parse_frames(
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
    fn big_frame_ready(buf: &[u8]) -> Option<usize> {
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

    fn on_readable(&mut self, now: Instant, p_idx: usize, out: &mut Vec<BackendEvent>) {
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
}

impl Backend for TcpBackend {
    fn register(&mut self, registry: &Registry) -> Result<(), NetError> {
        for p in self.peers.iter_mut().flatten() {
            registry
                .register(&mut p.stream, token(p.id), Interest::READABLE)
                .map_err(|e| NetError::io(format!("registering the connection to {}", p.id), e))?;
        }
        self.registry = Some(
            registry
                .try_clone()
                .map_err(|e| NetError::io("cloning the poll registry", e))?,
        );
        Ok(())
    }

    fn send(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
        if self.is_cut(msg.to, now) {
            self.cut_drops += 1;
            return Ok(());
        }
        if let Some(done) = self.try_write_direct(&msg, &[])? {
            return done;
        }
        let frame = self.frame(&msg)?;
        self.enqueue(now, msg.to, frame)
    }

    fn send_split(&mut self, now: Instant, mut msg: OutMsg, body: &[u8]) -> Result<(), NetError> {
        if self.is_cut(msg.to, now) {
            self.cut_drops += 1;
            return Ok(());
        }
        // Straight from the caller's buffer; only what the socket does not take is copied.
        if let Some(done) = self.try_write_direct(&msg, body)? {
            return done;
        }
        msg.payload = super::join(&msg.payload, body);
        let frame = self.frame(&msg)?;
        self.enqueue(now, msg.to, frame)
    }

    fn expect_into(
        &mut self,
        id: u64,
        from: NodeId,
        ty: MsgType,
        head: &[u8],
        dest: crate::landing::Dest,
    ) {
        // Sealed frames are checked whole before anything of them is used: no landing.
        if self.auth.is_none() {
            self.expects.add(id, from, ty, head, dest);
        }
    }

    fn forget_expect(&mut self, id: u64) {
        if self.expects.forget(id) {
            return;
        }
        for p in self.peers.iter_mut().flatten() {
            if p.landing.as_ref().is_some_and(|l| l.id() == id) {
                // Half-landed: the bytes so far go back to the read buffer, reading goes on.
                if let Some(l) = p.landing.take() {
                    p.rbuf = l.unland();
                    p.rpos = 0;
                }
            }
        }
    }

    fn handle_event(&mut self, now: Instant, event: &Event, out: &mut Vec<BackendEvent>) {
        let idx = match event.token().0.checked_sub(1) {
            Some(i) if i < self.peers.len() => i,
            _ => return,
        };
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            self.on_readable(now, idx, out);
        }
        if event.is_writable() {
            let registry = self.registry.as_ref();
            if let Some(p) = self.peers[idx].as_mut() {
                if p.open {
                    if let Err(e) = Self::flush(registry, p) {
                        Self::lost(p, format!("write failed: {e}"), out, registry);
                    }
                }
            }
        }
    }

    fn poll_input(&mut self, now: Instant, from: NodeId, out: &mut Vec<BackendEvent>) -> bool {
        // Only the waited-for peer's connection: one read per look (a short read or
        // `EWOULDBLOCK` ends it, as after a readiness event).
        if from.index() < self.peers.len() {
            self.on_readable(now, from.index(), out);
        }
        true
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        self.tick(now, out);
        let registry = self.registry.as_ref();
        let cut = self.cut;
        for p in self.peers.iter_mut().flatten() {
            if let Some(d) = p.delay.as_mut() {
                let mut due = Vec::new();
                d.release(now, &mut due);
                if due.is_empty() || !p.open {
                    continue;
                }
                if cut.is_some_and(|c| c.drops(p.id.0, now)) {
                    self.cut_drops += due.len() as u64;
                    continue;
                }
                for f in due {
                    p.wbuf.extend_from_slice(&f);
                    self.counters.packets_sent += 1;
                }
                if !p.want_write {
                    if let Err(e) = Self::flush(registry, p) {
                        Self::lost(p, format!("write failed: {e}"), out, registry);
                    }
                }
            }
        }
        if self.shutdown_at.is_some() && !self.write_closed && self.is_flushed_writes() {
            self.write_closed = true;
            for p in self.peers.iter_mut().flatten() {
                let _ = p.stream.shutdown(Shutdown::Write);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self
            .peers
            .iter()
            .flatten()
            .filter_map(|p| p.delay.as_ref().and_then(|d| d.poll_timeout()))
            .chain(std::iter::once(self.next_tick))
            .min();
        if let Some(s) = self.shutdown_at {
            let probe = if self.write_closed {
                s + LINGER
            } else {
                Instant::now() + Duration::from_millis(1)
            };
            t = Some(t.map_or(probe, |x| x.min(probe)));
        }
        t
    }

    fn start_shutdown(&mut self, now: Instant) {
        self.shutdown_at = Some(now);
        for i in 0..self.peers.len() {
            let Some(p) = self.peers[i].as_ref() else {
                continue;
            };
            if !p.open || p.bye_received {
                continue;
            }
            let msg = OutMsg {
                to: p.id,
                ty: MsgType(crate::endpoint::TY_BYE),
                flags: Flags::BYE,
                request_id: 0,
                payload: Bytes::new(),
            };
            if let Ok(f) = self.frame(&msg) {
                let _ = self.enqueue(now, msg.to, f);
            }
        }
    }

    fn is_flushed(&self) -> bool {
        let Some(s) = self.shutdown_at else {
            return self.is_flushed_writes();
        };
        if !self.write_closed {
            return false;
        }
        // After our goodbye: linger until every peer closed too, or the linger time is over.
        let all_closed = self
            .peers
            .iter()
            .flatten()
            .all(|p| !p.open || p.bye_received);
        all_closed || Instant::now() >= s + LINGER
    }

    fn udp_local_addr(&self) -> Option<SocketAddr> {
        None
    }

    fn counters(&self) -> LinkCounters {
        let mut c = self.counters.clone();
        c.authenticated = self.auth.as_ref().map_or(0, |a| a.authenticated);
        c.faults_injected += self.cut_drops;
        c
    }
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

/// How often the heartbeat/silence tick runs: a quarter of the peer timeout (at least 2 ms, at
/// most an hour: an absurd timeout must not overflow the clock).
fn tick_of(peer_timeout: Duration) -> Duration {
    (peer_timeout / 4).clamp(Duration::from_millis(2), Duration::from_secs(3600))
}

impl TcpBackend {
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

    fn is_flushed_writes(&self) -> bool {
        self.peers.iter().flatten().all(|p| {
            !p.open || (p.wpos == p.wbuf.len() && p.delay.as_ref().is_none_or(|d| d.held() == 0))
        })
    }
}

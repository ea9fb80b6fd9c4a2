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
//!
//! The files of this folder, one concern each: this one (the `TcpBackend` and its peers'
//! state, [`TcpBackend::new`] over the streams `bootstrap` connected, the `Backend` impl),
//! `send` (framing, the direct `writev` path, the write buffers and their flushing), `recv`
//! (reading a peer's connection: frames parsed in place or buffered, landings into lent
//! buffers, a cut-off peer's bytes discarded), `decode` (the checks of one frame's header and
//! seal, and what it turns into), `peers` (the partition, the heartbeat/silence tick, a peer
//! lost). Landings themselves are [`super::tcp_land`]'s. Nothing in this folder is unsafe.
mod decode;
mod peers;
mod recv;
mod send;
use super::tcp_land::{Expects, Landing};
use super::{Backend, BackendEvent, OutMsg};
use crate::auth::LinkAuth;
use crate::error::NetError;
use crate::faults::{Cut, FaultInjector, FaultSpec};
use crate::stats::LinkCounters;
use bytes::Bytes;
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use peers::tick_of;
use squall_core::{JobId, NodeId};
use squall_wire::{AuthKey, Flags, MsgType};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

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
    /// `wbuf` holds frames of a batch not written yet (`send_batched`).
    held: bool,
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
                        held: false,
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

    fn send_batched(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
        if self.is_cut(msg.to, now) {
            self.cut_drops += 1;
            return Ok(());
        }
        self.enqueue_held(now, &msg)
    }

    fn flush_batched(&mut self) {
        self.flush_held();
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

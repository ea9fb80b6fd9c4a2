//! The reliable-datagram core (DSM/IP §3.2.1.4–5) as a sans-IO state machine: no sockets, no
//! clocks, no threads — `now` is passed in, datagrams come in as bytes and go out through
//! [`UdpCore::poll_transmit`]. Owns per-peer sequence numbers, cumulative (piggybacked) acks,
//! nacks, retransmission with exponential backoff, duplicate suppression, in-order delivery,
//! fragmentation/reassembly, the per-peer in-flight window, heartbeats and peer timeouts.
//! Must not touch handlers, requests or socket addresses (peers are ranks).
//!
//! Driving order (like quinn-proto): feed inputs (`send`, `handle_datagram`, `handle_timeout`),
//! then drain `poll_transmit` (datagrams to write) and `poll_event` (deliveries, goodbyes, lost
//! peers), and sleep until `poll_timeout`.
//!
//! Sequencing: every data datagram (each fragment) of a message to peer P takes the next
//! sequence number of the pair (from 1); seq 0 marks unsequenced pure acks and heartbeats.
//! Every datagram carries `ack` = the highest sequence received in order from P (flag ACK).
//! A receiver that sees a gap sends a NACK (ack = last in-order seq) so the sender resends the
//! missing datagram without waiting for its timer. Out-of-order datagrams within twice the
//! window are buffered; duplicates (seq already delivered or buffered) are dropped and re-acked.
//!
//! Authentication ([`CoreConfig::auth`]): every datagram (data, ack, nack, heartbeat, goodbye,
//! and each retransmission anew) is sealed with the next authentication sequence number of
//! the pair; a received datagram is checked right after its header (job, ranks), before it
//! can touch any state: a bad tag or a replayed number drops it ([`DropReason::BadMac`],
//! [`DropReason::Replayed`]) without acks, timers or delivery moving.
use crate::auth::LinkAuth;
use crate::error::NetError;
use crate::stats::DropReason;
use bytes::{Bytes, BytesMut};
use squall_core::{JobId, NodeId};
use squall_wire::{decode_packet, encode_into, AuthKey, Flags, Header, MsgType, WireError};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Transport type of goodbyes, heartbeats and pure acks.
const TY_BYE: MsgType = MsgType(crate::endpoint::TY_BYE);
const TY_LINK: MsgType = MsgType(crate::endpoint::TY_LINK);

/// Parameters of the core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    pub rank: NodeId,
    pub size: u16,
    pub job: JobId,
    /// Largest payload per datagram; longer messages are fragmented.
    pub max_payload: usize,
    /// Unacknowledged datagrams in flight per peer.
    pub window: usize,
    /// Silence after which a peer is declared lost.
    pub peer_timeout: Duration,
    /// Idle time after which a heartbeat is sent.
    pub heartbeat: Duration,
    /// Bounds of the retransmission timeout.
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// How long an ack may wait for a datagram to ride on.
    pub ack_delay: Duration,
    /// The job key: every datagram is sealed and checked (None: no authentication).
    pub auth: Option<AuthKey>,
    /// With a key: payloads are encrypted too (ChaCha20-Poly1305).
    pub encrypt: bool,
}

impl CoreConfig {
    /// Defaults for a job: 32 KiB payloads, window 64, heartbeat at a fifth of the timeout.
    pub fn new(rank: NodeId, size: u16, job: JobId, peer_timeout: Duration) -> CoreConfig {
        CoreConfig {
            rank,
            size,
            job,
            max_payload: 32 * 1024,
            window: 64,
            peer_timeout,
            heartbeat: (peer_timeout / 5).max(Duration::from_millis(5)),
            min_rto: Duration::from_millis(4),
            max_rto: Duration::from_millis(400),
            ack_delay: Duration::from_millis(1),
            auth: None,
            encrypt: false,
        }
    }
}

/// One message handed to the core.
#[derive(Debug, Clone)]
pub struct Message {
    pub ty: MsgType,
    pub flags: Flags,
    pub request_id: u64,
    pub payload: Bytes,
}

/// A datagram to write.
#[derive(Debug, Clone)]
pub struct Transmit {
    pub to: NodeId,
    pub data: Vec<u8>,
}

/// What the core reports, in order.
#[derive(Debug, Clone)]
pub enum CoreEvent {
    /// A whole message, exactly once and in order per sender.
    Deliver {
        src: NodeId,
        ty: MsgType,
        flags: Flags,
        request_id: u64,
        payload: Bytes,
    },
    /// The peer said goodbye.
    PeerBye(NodeId),
    /// The peer is silent or stopped acknowledging.
    PeerLost { peer: NodeId, reason: String },
}

/// Counters of the core.
#[derive(Debug, Clone, Default)]
pub struct CoreStats {
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub retransmissions: u64,
    pub drops: BTreeMap<DropReason, u64>,
    /// Datagrams whose tag and authentication sequence number were accepted.
    pub authenticated: u64,
}

#[derive(Debug, Clone)]
struct Frag {
    seq: u64,
    ty: MsgType,
    flags: Flags,
    request_id: u64,
    index: u16,
    count: u16,
    payload: Bytes,
}

#[derive(Debug)]
struct InFlight {
    frag: Frag,
    first_sent: Instant,
    last_sent: Instant,
    next_retx: Instant,
    retries: u32,
    /// Timer expiries (drive the exponential backoff; nack-driven resends do not).
    timeouts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    Up,
    Bye,
    Lost,
}

#[derive(Debug)]
struct Peer {
    state: PeerState,
    next_seq: u64,
    queue: VecDeque<Frag>,
    inflight: VecDeque<InFlight>,
    next_expected: u64,
    ooo: BTreeMap<u64, (Header, Bytes)>,
    reasm: Vec<Bytes>,
    ack_due: Option<Instant>,
    nack_due: bool,
    nacked: Option<(u64, Instant)>,
    unacked_rx: usize,
    last_heard: Instant,
    last_sent: Instant,
    /// Smoothed round trip and its variation, in nanoseconds (integer math: this runs per ack).
    srtt_ns: Option<u64>,
    rttvar_ns: u64,
    /// Retransmission timeout derived from them (recomputed per sample, read per send).
    rto: Duration,
    /// Datagrams up to this seq were in flight during a retransmission: their acks wait behind
    /// the gap, so they give no round-trip samples.
    tainted_upto: u64,
}

impl Peer {
    fn new(now: Instant, rto: Duration) -> Peer {
        Peer {
            state: PeerState::Up,
            next_seq: 1,
            queue: VecDeque::new(),
            inflight: VecDeque::new(),
            next_expected: 1,
            ooo: BTreeMap::new(),
            reasm: Vec::new(),
            ack_due: None,
            nack_due: false,
            nacked: None,
            unacked_rx: 0,
            last_heard: now,
            last_sent: now,
            srtt_ns: None,
            rttvar_ns: 0,
            rto,
            tainted_upto: 0,
        }
    }
}

/// The reliable-datagram state machine of one node.
#[derive(Debug)]
pub struct UdpCore {
    cfg: CoreConfig,
    peers: Vec<Peer>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<CoreEvent>,
    stats: CoreStats,
    closing: bool,
    /// Written datagram buffers handed back by the driver ([`UdpCore::recycle`]), reused so a
    /// datagram costs no allocation.
    spare: Vec<Vec<u8>>,
    auth: Option<LinkAuth>,
}

/// Spare buffers kept at most (a window's worth of datagrams in flight is plenty).
const MAX_SPARE: usize = 64;

impl UdpCore {
    pub fn new(cfg: CoreConfig, now: Instant) -> UdpCore {
        let rto = (cfg.min_rto * 5).clamp(cfg.min_rto, cfg.max_rto.max(cfg.min_rto));
        let peers = (0..cfg.size).map(|_| Peer::new(now, rto)).collect();
        let auth = cfg
            .auth
            .clone()
            .map(|k| LinkAuth::new(k, usize::from(cfg.size), false, cfg.encrypt));
        UdpCore {
            cfg,
            peers,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: CoreStats::default(),
            closing: false,
            spare: Vec::new(),
            auth,
        }
    }

    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &CoreStats {
        &self.stats
    }

    fn count_drop(&mut self, r: DropReason) {
        *self.stats.drops.entry(r).or_insert(0) += 1;
    }

    fn rto(&self, p: usize) -> Duration {
        self.peers[p].rto
    }

    /// Folds one round-trip sample into the estimate (RFC 6298 gains) and the cached timeout.
    fn rtt_sample(&mut self, p: usize, sample: Duration) {
        let s = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        let peer = &mut self.peers[p];
        let (srtt, var) = match peer.srtt_ns {
            None => (s, s / 2),
            Some(x) => (
                x.saturating_mul(7).saturating_add(s) / 8,
                peer.rttvar_ns
                    .saturating_mul(3)
                    .saturating_add(x.abs_diff(s))
                    / 4,
            ),
        };
        peer.srtt_ns = Some(srtt);
        peer.rttvar_ns = var;
        let rto = Duration::from_nanos(srtt.saturating_add(var.saturating_mul(4)));
        peer.rto = rto.clamp(self.cfg.min_rto, self.cfg.max_rto.max(self.cfg.min_rto));
    }

    /// Queues one message of any size to `to` (fragmenting it), sending what the window allows.
    pub fn send(&mut self, now: Instant, to: NodeId, msg: Message) -> Result<(), NetError> {
        if to.0 >= self.cfg.size || to == self.cfg.rank {
            return Err(NetError::BadDestination {
                peer: to,
                size: self.cfg.size,
            });
        }
        match self.peers[to.index()].state {
            PeerState::Up => {}
            PeerState::Bye => return Err(NetError::PeerGone { peer: to }),
            PeerState::Lost => {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: "lost earlier".into(),
                })
            }
        }
        let mp = self.cfg.max_payload.max(1);
        let len = msg.payload.len();
        let count = len.div_ceil(mp).max(1);
        let count16 = u16::try_from(count).map_err(|_| NetError::TooLarge { len })?;
        let peer = &mut self.peers[to.index()];
        for i in 0..count {
            let lo = i * mp;
            let hi = (lo + mp).min(len);
            let seq = peer.next_seq;
            peer.next_seq += 1;
            peer.queue.push_back(Frag {
                seq,
                ty: msg.ty,
                flags: msg.flags,
                request_id: msg.request_id,
                index: i as u16,
                count: count16,
                payload: msg.payload.slice(lo..hi),
            });
        }
        self.pump(now, to.index());
        Ok(())
    }

    /// Sends queued fragments while the window has room.
    fn pump(&mut self, now: Instant, p: usize) {
        if self.peers[p].queue.is_empty() {
            return;
        }
        let rto = self.rto(p);
        while self.peers[p].inflight.len() < self.cfg.window {
            let Some(frag) = self.peers[p].queue.pop_front() else {
                break;
            };
            self.transmit_frag(now, p, &frag);
            self.peers[p].inflight.push_back(InFlight {
                frag,
                first_sent: now,
                last_sent: now,
                next_retx: now + rto,
                retries: 0,
                timeouts: 0,
            });
        }
    }

    fn header(&mut self, p: usize, ty: MsgType, mut flags: Flags) -> Header {
        let peer = &mut self.peers[p];
        flags.insert(Flags::ACK);
        peer.ack_due = None;
        peer.unacked_rx = 0;
        let mut h = Header::new(self.cfg.job, ty, self.cfg.rank, NodeId(p as u16));
        h.flags = flags;
        h.ack = peer.next_expected - 1;
        h
    }

    fn transmit_frag(&mut self, now: Instant, p: usize, f: &Frag) {
        let mut h = self.header(p, f.ty, f.flags);
        h.seq = f.seq;
        h.request_id = f.request_id;
        h.frag_index = f.index;
        h.frag_count = f.count;
        self.peers[p].last_sent = now;
        self.stats.datagrams_sent += 1;
        let data = self.encode(&h, &f.payload);
        self.transmits.push_back(Transmit {
            to: NodeId(p as u16),
            data,
        });
    }

    fn transmit_nack(&mut self, now: Instant, p: usize) {
        let h = self.header(p, TY_LINK, Flags::NACK);
        let peer = &mut self.peers[p];
        peer.nack_due = false;
        let base = h.ack + 2;
        let highest = peer.ooo.last_key_value().map_or(0, |(k, _)| *k);
        let nbits = highest.saturating_sub(base) + 1;
        let mut bitmap = vec![0u8; nbits.div_ceil(8) as usize];
        for seq in peer.ooo.keys() {
            let i = seq - base;
            bitmap[(i / 8) as usize] |= 1 << (i % 8);
        }
        peer.last_sent = now;
        self.stats.datagrams_sent += 1;
        let data = self.encode(&h, &bitmap);
        self.transmits.push_back(Transmit {
            to: NodeId(p as u16),
            data,
        });
    }

    fn transmit_control(&mut self, now: Instant, p: usize, flags: Flags) {
        let h = self.header(p, TY_LINK, flags);
        self.peers[p].last_sent = now;
        self.stats.datagrams_sent += 1;
        let data = self.encode(&h, &[]);
        self.transmits.push_back(Transmit {
            to: NodeId(p as u16),
            data,
        });
    }

    /// Handles one received datagram. Malformed, foreign, misaddressed, duplicate and
    /// out-of-window datagrams are counted and dropped (the reason is returned).
    pub fn handle_datagram(&mut self, now: Instant, bytes: &[u8]) -> Result<(), DropReason> {
        self.stats.datagrams_received += 1;
        let pkt = match decode_packet(bytes) {
            Ok(x) => x,
            Err(WireError::Truncated { .. }) | Err(WireError::ShortHeader { .. })
                if bytes.starts_with(&squall_wire::MAGIC) =>
            {
                self.count_drop(DropReason::Truncated);
                return Err(DropReason::Truncated);
            }
            Err(_) => {
                self.count_drop(DropReason::Garbage);
                return Err(DropReason::Garbage);
            }
        };
        let h = pkt.header;
        if h.job != self.cfg.job {
            self.count_drop(DropReason::ForeignJob);
            return Err(DropReason::ForeignJob);
        }
        if h.dst != self.cfg.rank || h.src.0 >= self.cfg.size || h.src == self.cfg.rank {
            self.count_drop(DropReason::BadDest);
            return Err(DropReason::BadDest);
        }
        let checked = match self.auth.as_mut() {
            Some(a) => a.check(&pkt).map(|p| (p, a.authenticated)),
            None if h.flags.contains(Flags::AUTH) => Err(DropReason::BadMac),
            None => Ok((None, 0)),
        };
        let plain;
        let payload: &[u8] = match checked {
            Ok((p, n)) => {
                self.stats.authenticated = n;
                plain = p;
                plain.as_deref().unwrap_or(pkt.payload)
            }
            Err(why) => {
                self.count_drop(why);
                return Err(why);
            }
        };
        let p = h.src.index();
        if self.peers[p].state == PeerState::Lost {
            self.count_drop(DropReason::AfterBye);
            return Err(DropReason::AfterBye);
        }
        self.peers[p].last_heard = now;
        if h.flags.contains(Flags::ACK) {
            self.on_ack(now, p, h.ack);
        }
        if h.flags.contains(Flags::NACK) && h.seq == 0 {
            self.on_nack(now, p, h.ack, payload);
        }
        if h.seq == 0 {
            return Ok(());
        }
        let payload = Bytes::copy_from_slice(payload);
        let peer = &mut self.peers[p];
        if h.seq < peer.next_expected || peer.ooo.contains_key(&h.seq) {
            // Our ack may have been lost: repeat it now.
            peer.ack_due = Some(now);
            self.count_drop(DropReason::Duplicate);
            return Err(DropReason::Duplicate);
        }
        if h.seq >= peer.next_expected + 2 * self.cfg.window as u64 {
            self.count_drop(DropReason::OutOfWindow);
            return Err(DropReason::OutOfWindow);
        }
        if h.seq > peer.next_expected {
            let highest = peer
                .ooo
                .last_key_value()
                .map_or(peer.next_expected, |(k, _)| *k);
            peer.ooo.insert(h.seq, (h, payload));
            // A gap: tell the sender what is missing (selective nack), when a new hole opens,
            // the first hole moved, or a retransmission time passed.
            let gap = peer.next_expected;
            let fresh = h.seq > highest + 1
                || match peer.nacked {
                    Some((s, at)) => s != gap || now >= at + self.cfg.min_rto,
                    None => true,
                };
            if fresh {
                peer.nacked = Some((gap, now));
                peer.nack_due = true;
            }
            return Ok(());
        }
        self.accept(now, p, h, payload);
        loop {
            let peer = &mut self.peers[p];
            let next = peer.next_expected;
            match peer.ooo.remove(&next) {
                Some((h, b)) => self.accept(now, p, h, b),
                None => break,
            }
        }
        let peer = &mut self.peers[p];
        if !peer.ooo.is_empty() {
            peer.nacked = Some((peer.next_expected, now));
            peer.nack_due = true;
        }
        peer.unacked_rx += 1;
        if peer.unacked_rx >= (self.cfg.window / 4).max(1) || h.flags.contains(Flags::ACK_REQUESTED)
        {
            peer.ack_due = Some(now);
        } else if peer.ack_due.is_none() {
            peer.ack_due = Some(now + self.cfg.ack_delay);
        }
        Ok(())
    }

    /// In-order acceptance of datagram `h.seq == next_expected`.
    fn accept(&mut self, now: Instant, p: usize, h: Header, payload: Bytes) {
        let peer = &mut self.peers[p];
        peer.next_expected += 1;
        if h.flags.contains(Flags::BYE) {
            if peer.state == PeerState::Up {
                peer.state = PeerState::Bye;
                peer.queue.clear();
                peer.inflight.clear();
                peer.ack_due = Some(now);
                self.events.push_back(CoreEvent::PeerBye(h.src));
            }
            return;
        }
        if h.frag_count == 1 {
            self.events.push_back(CoreEvent::Deliver {
                src: h.src,
                ty: h.ty,
                flags: h.flags,
                request_id: h.request_id,
                payload,
            });
            return;
        }
        if usize::from(h.frag_index) != peer.reasm.len() {
            // Cannot happen with in-order delivery from a correct sender; drop the message.
            peer.reasm.clear();
            self.count_drop(DropReason::Garbage);
            return;
        }
        peer.reasm.push(payload);
        if h.frag_index + 1 == h.frag_count {
            let total = peer.reasm.iter().map(Bytes::len).sum();
            let mut whole = BytesMut::with_capacity(total);
            for part in peer.reasm.drain(..) {
                whole.extend_from_slice(&part);
            }
            self.events.push_back(CoreEvent::Deliver {
                src: h.src,
                ty: h.ty,
                flags: h.flags,
                request_id: h.request_id,
                payload: whole.freeze(),
            });
        }
    }

    /// A selective nack: `ack + 1` is missing; bit i of the bitmap says `ack + 2 + i` arrived.
    /// Resends every missing datagram below the highest received one, unless resent within
    /// about a round trip.
    fn on_nack(&mut self, now: Instant, p: usize, ack: u64, bitmap: &[u8]) {
        let min_gap = self.peers[p]
            .srtt_ns
            .map_or(self.cfg.min_rto / 4, Duration::from_nanos)
            .max(self.cfg.min_rto / 8);
        let bits = bitmap.len() as u64 * 8;
        let highest = (0..bits)
            .rev()
            .find(|i| bitmap[(*i / 8) as usize] & (1 << (i % 8)) != 0)
            .map_or(ack + 1, |i| ack + 2 + i);
        let mut resend = Vec::new();
        for (i, f) in self.peers[p].inflight.iter().enumerate() {
            let seq = f.frag.seq;
            if seq <= ack {
                continue;
            }
            if seq > highest {
                break;
            }
            // seq == ack + 1 is always missing; later ones are looked up in the bitmap.
            let received = seq > ack + 1 && {
                let off = seq - ack - 2;
                off < bits && bitmap[(off / 8) as usize] & (1 << (off % 8)) != 0
            };
            if !received && (f.retries == 0 || now >= f.last_sent + min_gap) {
                resend.push(i);
            }
        }
        for i in resend {
            self.retransmit_front(now, p, i, false);
        }
    }

    fn on_ack(&mut self, now: Instant, p: usize, ack: u64) {
        let mut progressed = false;
        while let Some(f) = self.peers[p].inflight.front() {
            if f.frag.seq > ack {
                break;
            }
            let clean = f.retries == 0 && f.frag.seq > self.peers[p].tainted_upto;
            let sample = clean.then(|| now.saturating_duration_since(f.first_sent));
            self.peers[p].inflight.pop_front();
            progressed = true;
            if let Some(s) = sample {
                self.rtt_sample(p, s);
            }
        }
        if progressed {
            let rto = self.rto(p);
            if let Some(f) = self.peers[p].inflight.front_mut() {
                f.next_retx = f.next_retx.max(now + rto);
            }
            self.pump(now, p);
        }
    }

    fn retransmit_front(&mut self, now: Instant, p: usize, i: usize, backoff: bool) {
        let rto = self.rto(p);
        let frag = {
            let Some(f) = self.peers[p].inflight.get_mut(i) else {
                return;
            };
            f.retries += 1;
            f.last_sent = now;
            f.timeouts += u32::from(backoff);
            let wait = rto
                .saturating_mul(1u32 << f.timeouts.min(8))
                .min(self.cfg.max_rto);
            f.next_retx = now + wait;
            f.frag.clone()
        };
        self.stats.retransmissions += 1;
        self.peers[p].tainted_upto = self.peers[p].next_seq;
        self.transmit_frag(now, p, &frag);
    }

    /// Timers: retransmissions, due acks, heartbeats, peer timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        for p in 0..self.peers.len() {
            if p == self.cfg.rank.index() {
                continue;
            }
            let state = self.peers[p].state;
            if state == PeerState::Lost {
                continue;
            }
            if state == PeerState::Up {
                // Only the oldest unacknowledged datagram runs a timer: later ones were most
                // likely received and wait behind the gap (the receiver buffers them).
                if self.peers[p]
                    .inflight
                    .front()
                    .is_some_and(|f| f.next_retx <= now)
                {
                    self.retransmit_front(now, p, 0, true);
                }
                if let Some(f) = self.peers[p].inflight.front() {
                    if f.timeouts >= 6 && now >= f.first_sent + self.cfg.peer_timeout {
                        let reason = format!(
                            "no acknowledgement after {} retransmissions in {} ms",
                            f.retries,
                            self.cfg.peer_timeout.as_millis()
                        );
                        self.lose(p, reason);
                        continue;
                    }
                }
                if now >= self.peers[p].last_heard + self.cfg.peer_timeout {
                    let reason = format!(
                        "no datagram for {} ms",
                        now.saturating_duration_since(self.peers[p].last_heard)
                            .as_millis()
                    );
                    self.lose(p, reason);
                    continue;
                }
            }
            let peer = &mut self.peers[p];
            // A gap that persists: ask again.
            if let Some((gap, at)) = peer.nacked {
                if !peer.ooo.is_empty() && now >= at + self.cfg.min_rto {
                    peer.nacked = Some((gap, now));
                    peer.nack_due = true;
                }
            }
            if peer.nack_due {
                self.transmit_nack(now, p);
            } else if peer.ack_due.is_some_and(|t| t <= now) {
                self.transmit_control(now, p, Flags::empty());
            } else if state == PeerState::Up && now >= peer.last_sent + self.cfg.heartbeat {
                self.transmit_control(now, p, Flags::HEARTBEAT);
            }
        }
    }

    fn lose(&mut self, p: usize, reason: String) {
        let peer = &mut self.peers[p];
        peer.state = PeerState::Lost;
        peer.queue.clear();
        peer.inflight.clear();
        peer.ooo.clear();
        peer.reasm.clear();
        peer.ack_due = None;
        self.events.push_back(CoreEvent::PeerLost {
            peer: NodeId(p as u16),
            reason,
        });
    }

    /// Begins an orderly goodbye: a sequenced BYE to every peer still up.
    pub fn close(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        self.closing = true;
        for p in 0..self.peers.len() {
            if p == self.cfg.rank.index() || self.peers[p].state != PeerState::Up {
                continue;
            }
            let msg = Message {
                ty: TY_BYE,
                flags: Flags::BYE,
                request_id: 0,
                payload: Bytes::new(),
            };
            let _ = self.send(now, NodeId(p as u16), msg);
        }
    }

    /// True when nothing sent to a live peer waits for an acknowledgement.
    pub fn is_flushed(&self) -> bool {
        self.peers.iter().enumerate().all(|(i, p)| {
            i == self.cfg.rank.index()
                || p.state != PeerState::Up
                || (p.queue.is_empty() && p.inflight.is_empty())
        })
    }

    /// Hands back the buffer of a written [`Transmit`] for reuse (optional).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE {
            buf.clear();
            self.spare.push(buf);
        }
    }

    fn encode(&mut self, h: &Header, payload: &[u8]) -> Vec<u8> {
        let mut out = self.spare.pop().unwrap_or_default();
        match self.auth.as_mut() {
            Some(a) => a.seal_into(h, payload, &mut out),
            None => encode_into(h, payload, &mut out),
        }
        out
    }

    /// Warns (rate-limited) that the datagram `bytes` from `addr` was refused for `why` by
    /// authentication ([`DropReason::BadMac`] or [`DropReason::Replayed`]).
    pub fn warn_refused(&mut self, now: Instant, bytes: &[u8], addr: SocketAddr, why: DropReason) {
        let rank = self.cfg.rank;
        if let (Some(a), Ok(h)) = (self.auth.as_mut(), squall_wire::decode_header(bytes)) {
            a.warn(now, rank, h.src, Some(addr), why);
        }
    }

    /// The next datagram to write.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next delivery or peer event.
    pub fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }

    /// When `handle_timeout` next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut best: Option<Instant> = None;
        let mut consider = |t: Instant| {
            best = Some(best.map_or(t, |b| b.min(t)));
        };
        for (i, p) in self.peers.iter().enumerate() {
            if i == self.cfg.rank.index() || p.state == PeerState::Lost {
                continue;
            }
            if let Some(t) = p.ack_due {
                consider(t);
            }
            if p.nack_due {
                consider(p.last_heard.min(p.last_sent));
            }
            if let (Some((_, at)), false) = (p.nacked, p.ooo.is_empty()) {
                consider(at + self.cfg.min_rto);
            }
            if p.state != PeerState::Up {
                continue;
            }
            if let Some(f) = p.inflight.front() {
                consider(f.next_retx);
            }
            consider(p.last_sent + self.cfg.heartbeat);
            consider(p.last_heard + self.cfg.peer_timeout);
        }
        best
    }
}

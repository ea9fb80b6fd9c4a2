//! The udp backend: the sans-IO reliable-datagram core ([`core`]) plus this thin socket driver,
//! which owns the socket, the rank → address table and the optional fault injector. The driver
//! reads datagrams into the core, writes the core's transmits, and forwards its events.
//! A fault spec's partition ([`Cut`]) drops every datagram to and from one peer here, so the
//! core's heartbeats and retransmissions go unanswered and its peer timeout fires.
pub mod core;

use self::core::{CoreConfig, CoreEvent, Message, UdpCore};
use super::{Backend, BackendEvent, InMsg, OutMsg};
use crate::config::NetConfig;
use crate::error::NetError;
use crate::faults::{Cut, FaultInjector};
use crate::stats::{DropReason, LinkCounters};
use mio::event::Event;
use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use squall_core::{JobId, NodeId};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

const TOKEN: Token = Token(1);
/// Kernel socket buffer size requested (loopback bursts of a full window fit).
const SOCKET_BUFFER: usize = 4 << 20;

pub(crate) struct UdpBackend {
    core: UdpCore,
    socket: UdpSocket,
    table: Vec<SocketAddr>,
    faults: Option<FaultInjector<(NodeId, Vec<u8>)>>,
    buf: Vec<u8>,
    send_failures: u64,
    /// A readiness event was answered with one datagram and the socket may hold more: the rest
    /// is read in `handle_timeout`, which the endpoint runs after the handlers (since when).
    undrained: Option<Instant>,
    /// The partition this node is a side of, and the datagrams it dropped.
    cut: Option<Cut>,
    cut_drops: u64,
}

impl UdpBackend {
    pub(crate) fn boxed(
        cfg: &NetConfig,
        job: JobId,
        sock: std::net::UdpSocket,
        table: Vec<SocketAddr>,
    ) -> Result<Box<dyn Backend>, NetError> {
        let s2 = socket2::SockRef::from(&sock);
        let _ = s2.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = s2.set_send_buffer_size(SOCKET_BUFFER);
        sock.set_nonblocking(true)
            .map_err(|e| NetError::io("nonblocking udp socket", e))?;
        let mut ccfg = CoreConfig::new(cfg.rank, cfg.size, job, cfg.peer_timeout);
        ccfg.max_payload = cfg.udp_max_payload.clamp(1, 65_000);
        ccfg.window = cfg.udp_window.max(1);
        ccfg.auth = cfg.auth.clone();
        ccfg.encrypt = cfg.encrypt;
        let faults = cfg
            .faults
            .filter(|f| !f.per_packet_noop())
            .map(|f| FaultInjector::datagrams(f, u64::from(cfg.rank.0)));
        let start = Instant::now();
        Ok(Box::new(UdpBackend {
            core: UdpCore::new(ccfg, start),
            socket: UdpSocket::from_std(sock),
            table,
            faults,
            buf: vec![0u8; 70 * 1024],
            send_failures: 0,
            undrained: None,
            cut: Cut::of(cfg.faults.as_ref(), cfg.rank.0, start),
            cut_drops: 0,
        }))
    }

    fn write(&mut self, now: Instant, to: NodeId, data: &[u8]) {
        if self.cut.is_some_and(|c| c.drops(to.0, now)) {
            self.cut_drops += 1;
            return;
        }
        let Some(addr) = self.table.get(to.index()) else {
            return;
        };
        loop {
            match self.socket.send_to(data, *addr) {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Full buffer or a transient error: the datagram is lost; the core resends it.
                Err(_) => {
                    self.send_failures += 1;
                    return;
                }
            }
        }
    }

    fn flush(&mut self, now: Instant) {
        let mut due = Vec::new();
        while let Some(t) = self.core.poll_transmit() {
            match self.faults.as_mut() {
                Some(f) => f.submit(now, (t.to, t.data), &mut due),
                None => {
                    self.write(now, t.to, &t.data);
                    self.core.recycle(t.data);
                }
            }
        }
        if let Some(f) = self.faults.as_mut() {
            f.release(now, &mut due);
        }
        for (to, d) in due {
            self.write(now, to, &d);
        }
    }

    /// Reads datagrams into the core: at most `limit`, or until the socket is empty. Leaves
    /// `undrained` set if it stopped at the limit.
    fn read(&mut self, now: Instant, limit: Option<usize>) {
        let mut n_read = 0usize;
        loop {
            if limit.is_some_and(|l| n_read >= l) {
                self.undrained = Some(now);
                return;
            }
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    n_read += 1;
                    let cut_peer = self
                        .cut
                        .filter(|c| now >= c.from)
                        .and_then(|c| self.table.get(usize::from(c.peer)));
                    if cut_peer == Some(&from) {
                        self.cut_drops += 1;
                        continue;
                    }
                    let r = self.core.handle_datagram(now, &self.buf[..n]);
                    if let Err(why @ (DropReason::BadMac | DropReason::Replayed)) = r {
                        self.core.warn_refused(now, &self.buf[..n], from, why);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ICMP errors (e.g. port unreachable after a peer exited) surface here; the
                // core's timers decide about peers, not socket errors.
                Err(_) => {}
            }
        }
        self.undrained = None;
    }

    fn drain_events(&mut self, out: &mut Vec<BackendEvent>) {
        while let Some(ev) = self.core.poll_event() {
            out.push(match ev {
                CoreEvent::Deliver {
                    src,
                    ty,
                    flags,
                    request_id,
                    payload,
                } => BackendEvent::Deliver(InMsg {
                    src,
                    ty,
                    flags,
                    request_id,
                    payload,
                    placed: 0,
                }),
                CoreEvent::PeerBye(p) => BackendEvent::PeerBye(p),
                CoreEvent::PeerLost { peer, reason } => BackendEvent::PeerLost { peer, reason },
            });
        }
    }
}

impl Backend for UdpBackend {
    fn register(&mut self, registry: &Registry) -> Result<(), NetError> {
        registry
            .register(&mut self.socket, TOKEN, Interest::READABLE)
            .map_err(|e| NetError::io("registering the udp socket", e))
    }

    fn send(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
        self.core.send(
            now,
            msg.to,
            Message {
                ty: msg.ty,
                flags: msg.flags,
                request_id: msg.request_id,
                payload: msg.payload,
            },
        )?;
        self.flush(now);
        Ok(())
    }

    fn handle_event(&mut self, now: Instant, event: &Event, out: &mut Vec<BackendEvent>) {
        if event.token() != TOKEN {
            return;
        }
        // One datagram now, so its handler (and the reply it sends) runs before the final
        // `recvfrom` that only confirms the socket is empty; `handle_timeout` finishes the
        // drain, which the edge-triggered poll needs before the next sleep.
        self.read(now, Some(1));
        self.flush(now);
        self.drain_events(out);
    }

    fn poll_input(&mut self, now: Instant, _from: NodeId, out: &mut Vec<BackendEvent>) -> bool {
        // One socket for every peer: drained whole (acknowledgements the core owes go out in
        // the flush), as `handle_timeout` finishes a drain.
        self.read(now, None);
        self.flush(now);
        self.drain_events(out);
        true
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        if self.undrained.is_some() {
            self.read(now, None);
        }
        self.core.handle_timeout(now);
        self.flush(now);
        self.drain_events(out);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if let Some(t) = self.undrained {
            return Some(t);
        }
        let a = self.core.poll_timeout();
        let b = self.faults.as_ref().and_then(|f| f.poll_timeout());
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn start_shutdown(&mut self, now: Instant) {
        self.core.close(now);
        self.flush(now);
    }

    fn is_flushed(&self) -> bool {
        self.core.is_flushed() && self.faults.as_ref().is_none_or(|f| f.held() == 0)
    }

    fn udp_local_addr(&self) -> Option<SocketAddr> {
        self.socket.local_addr().ok()
    }

    fn counters(&self) -> LinkCounters {
        let s = self.core.stats();
        let mut c = LinkCounters {
            packets_sent: s.datagrams_sent,
            packets_received: s.datagrams_received,
            retransmissions: s.retransmissions,
            drops: s.drops.clone(),
            faults_injected: self.faults.as_ref().map_or(0, |f| f.injected) + self.cut_drops,
            send_failures: 0,
            frames_batched: 0,
            authenticated: s.authenticated,
        };
        c.send_failures = self.send_failures;
        c
    }
}

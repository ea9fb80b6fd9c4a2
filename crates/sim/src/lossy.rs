//! A lossy virtual network under the real reliable-datagram layer: every node runs
//! `squall-net`'s sans-IO `UdpCore`; its datagrams are dropped, duplicated, delayed and
//! reordered at random, and the core must still deliver each message exactly once, in order
//! per pair, as the protocol cores require.
//!
//! Owns: one `UdpCore` per node and the mapping of virtual time to the `Instant`s the cores
//! take. Must not touch: protocol or sync state (the world dispatches deliveries).

use squall_core::{JobId, NodeId};
use squall_net::udp_core::{CoreConfig, CoreEvent, Message, Transmit, UdpCore};
use squall_net::{Bytes, MsgType};
use std::time::{Duration, Instant};

/// Message type of protocol messages on the virtual wire.
pub const TY_PROTOCOL: u16 = MsgType::FIRST_USER;
/// Message type of sync messages on the virtual wire.
pub const TY_SYNC: u16 = MsgType::FIRST_USER + 1;

/// Virtual microseconds per simulator tick.
const TICK_US: u64 = 100;

/// The reliable-datagram layer of every node.
pub struct LossyNet {
    base: Instant,
    cores: Vec<UdpCore>,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
}

impl LossyNet {
    pub fn new(nodes: u16, loss: f64, dup: f64) -> Self {
        // Only differences to `base` matter: runs stay deterministic.
        let base = Instant::now();
        let cores = (0..nodes)
            .map(|n| {
                let cfg = CoreConfig::new(NodeId(n), nodes, JobId(0x5eed), Duration::from_secs(60));
                UdpCore::new(cfg, base)
            })
            .collect();
        LossyNet {
            base,
            cores,
            loss,
            dup,
        }
    }

    pub fn instant(&self, ticks: u64) -> Instant {
        self.base + Duration::from_micros(ticks * TICK_US)
    }

    /// The tick at or after `at`.
    pub fn ticks(&self, at: Instant) -> u64 {
        let us = at.saturating_duration_since(self.base).as_micros() as u64;
        us.div_ceil(TICK_US)
    }

    /// Hand a message to `from`'s core.
    pub fn send(
        &mut self,
        now: u64,
        from: NodeId,
        to: NodeId,
        sync: bool,
        msg: Vec<u8>,
    ) -> Result<(), String> {
        let at = self.instant(now);
        let ty = MsgType(if sync { TY_SYNC } else { TY_PROTOCOL });
        let m = Message {
            ty,
            flags: squall_wire::Flags(0),
            request_id: 0,
            payload: Bytes::from(msg),
        };
        self.cores[from.index()]
            .send(at, to, m)
            .map_err(|e| e.to_string())
    }

    /// A datagram arrived at `to` (bad or duplicate ones are dropped by the core).
    pub fn datagram(&mut self, now: u64, to: NodeId, data: &[u8]) {
        let at = self.instant(now);
        let _ = self.cores[to.index()].handle_datagram(at, data);
    }

    pub fn timeout(&mut self, now: u64, node: NodeId) {
        let at = self.instant(now);
        self.cores[node.index()].handle_timeout(at);
    }

    pub fn poll_transmit(&mut self, node: NodeId) -> Option<Transmit> {
        self.cores[node.index()].poll_transmit()
    }

    pub fn poll_event(&mut self, node: NodeId) -> Option<CoreEvent> {
        self.cores[node.index()].poll_event()
    }

    /// Next timer of `node`'s core, in ticks.
    pub fn next_timer(&self, node: NodeId) -> Option<u64> {
        self.cores[node.index()]
            .poll_timeout()
            .map(|t| self.ticks(t))
    }

    /// Datagrams retransmitted over all cores.
    pub fn retransmissions(&self) -> u64 {
        self.cores.iter().map(|c| c.stats().retransmissions).sum()
    }
}

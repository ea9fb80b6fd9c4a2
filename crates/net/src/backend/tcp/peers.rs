//! Peers' liveness: the partition ([`crate::faults::Cut`]) that drops what goes to or comes from one peer,
//! the tick every quarter of the peer timeout (a heartbeat to each peer sent nothing since the
//! last, the verdict on a peer no byte came from for the peer timeout), and a peer lost (its
//! stream out of the poll, the event reported). Must not parse frames or write to a socket
//! itself (its heartbeats leave through `send`).
use super::{Peer, TcpBackend};
use crate::backend::{BackendEvent, OutMsg};
use bytes::Bytes;
use mio::Registry;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::time::{Duration, Instant};

impl TcpBackend {
    /// The partition drops what goes to or comes from `peer` now.
    pub(super) fn is_cut(&self, peer: NodeId, now: Instant) -> bool {
        self.cut.is_some_and(|c| c.drops(peer.0, now))
    }

    /// Every quarter timeout: heartbeats to peers sent nothing since the last tick, and the
    /// verdict on peers heard from by no byte for the peer timeout.
    pub(super) fn tick(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
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

    pub(super) fn lost(
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
}

/// How often the heartbeat/silence tick runs: a quarter of the peer timeout (at least 2 ms, at
/// most an hour: an absurd timeout must not overflow the clock).
pub(super) fn tick_of(peer_timeout: Duration) -> Duration {
    (peer_timeout / 4).clamp(Duration::from_millis(2), Duration::from_secs(3600))
}

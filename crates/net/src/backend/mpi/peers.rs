//! Peers' liveness and the goodbye: heartbeats when nothing else was sent, a peer silent for
//! the peer timeout or whose ring stayed full reported lost by name, the `BYE` to every peer,
//! and when the backend counts as flushed (every peer said goodbye, or [`LINGER`] passed: then
//! the progress thread finalises MPI). Must not touch MPI or the rings itself (its frames
//! leave through `send`).
use super::progress::Cmd;
use super::MpiBackend;
use crate::backend::BackendEvent;
use crate::endpoint::{TY_BYE, TY_LINK};
use crate::error::NetError;
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a node that said goodbye waits for its peers' goodbyes before finalising MPI.
const LINGER: Duration = Duration::from_millis(2000);

/// Why a peer whose ring stayed full for `timeout` is lost.
fn ring_stuck_reason(timeout: Duration) -> String {
    format!(
        "its shared-memory ring stayed full for {} ms: the node stopped reading",
        timeout.as_millis()
    )
}

impl MpiBackend {
    /// A send to world rank `to` gave up on its full ring (the ring is unusable from then on):
    /// the next `handle_timeout` reports the peer lost; the error says why.
    pub(super) fn ring_stuck(&self, to: i32) -> NetError {
        self.shared.note_ring_stuck(to);
        NetError::PeerLost {
            peer: NodeId(u16::try_from(to).unwrap_or(u16::MAX)),
            reason: ring_stuck_reason(self.peer_timeout),
        }
    }

    pub(super) fn heartbeat_every(&self) -> Duration {
        self.peer_timeout / 3
    }

    /// Heartbeats, peer timeouts and peers whose ring stayed full (from
    /// [`Backend::handle_timeout`](crate::backend::Backend::handle_timeout), after the receive).
    pub(super) fn check_peers(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        // (A flag first: this runs on every pass of the service loop.)
        let stuck = match self.shared.ring_stuck_any.swap(false, Ordering::AcqRel) {
            true => std::mem::take(&mut *self.shared.ring_stuck.lock()),
            false => Vec::new(),
        };
        for to in stuck {
            if let Some(p) = usize::try_from(to).ok().and_then(|i| self.peers.get_mut(i)) {
                if !p.lost {
                    p.lost = true;
                    out.push(BackendEvent::PeerLost {
                        peer: NodeId(to as u16),
                        reason: ring_stuck_reason(self.peer_timeout),
                    });
                }
            }
        }
        let every = self.heartbeat_every();
        let mut beats = Vec::new();
        for (i, p) in self.peers.iter_mut().enumerate() {
            if i == self.rank.index() || p.lost || p.bye_received {
                continue;
            }
            if now.saturating_duration_since(p.last_heard) >= self.peer_timeout {
                p.lost = true;
                out.push(BackendEvent::PeerLost {
                    peer: NodeId(i as u16),
                    reason: format!(
                        "no message or heartbeat over mpi for {} ms",
                        self.peer_timeout.as_millis()
                    ),
                });
                continue;
            }
            if now.saturating_duration_since(p.last_sent) >= every {
                beats.push(NodeId(i as u16));
            }
        }
        for to in beats {
            if let Ok(f) = self.frame(to, MsgType(TY_LINK), Flags::empty(), 0, &Bytes::new()) {
                let _ = self.send_frame(now, to, f);
            }
        }
    }
    /// [`Backend::start_shutdown`](crate::backend::Backend::start_shutdown): `BYE` to every peer.
    pub(super) fn say_goodbye(&mut self, now: Instant) {
        if self.shutdown_at.is_some() {
            return;
        }
        self.shutdown_at = Some(now);
        for i in 0..self.peers.len() {
            // A peer that already said goodbye still waits for ours before it finalises.
            if i == self.rank.index() || self.peers[i].lost {
                continue;
            }
            let to = NodeId(i as u16);
            if let Ok(f) = self.frame(to, MsgType(TY_BYE), Flags::BYE, 0, &Bytes::new()) {
                let _ = self.send_frame(now, to, f);
            }
        }
    }
    /// [`Backend::is_flushed`](crate::backend::Backend::is_flushed): once every peer said
    /// goodbye (or [`LINGER`] passed), the progress thread is told to finalise MPI.
    pub(super) fn flushed(&self) -> bool {
        let sent = self.shared.in_flight.load(Ordering::Acquire) == 0;
        let Some(s) = self.shutdown_at else {
            return sent;
        };
        if self.shared.finalized.load(Ordering::Acquire) {
            return true;
        }
        if !sent {
            return false;
        }
        let all_gone = self
            .peers
            .iter()
            .enumerate()
            .all(|(i, p)| i == self.rank.index() || p.lost || p.bye_received);
        if all_gone || Instant::now() >= s + LINGER {
            // `is_flushed` takes `&self`; the finalize command is idempotent on the progress
            // thread (it ends its loop once), so sending it more than once is harmless.
            let _ = self.cmds.send(Cmd::Finalize { all_gone });
            self.progress.unpark();
        }
        false
    }
}

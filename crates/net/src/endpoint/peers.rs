//! Peers' states (up, said goodbye, lost) and the peer-lost policy: failing what is pending
//! to a lost peer, telling the other nodes (`TY_LOST_NOTICE`) so every node names the node
//! that failed, then the caller's callback or the default end of the job (status 3). Must not
//! touch the backend's failure detection (the backend reports; this decides).
use super::{Endpoint, TY_LOST_NOTICE};
use crate::error::NetError;
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::sync::atomic::Ordering;

pub(super) type PeerLostFn = Box<dyn FnMut(&Endpoint, NodeId, &str) + Send + 'static>;

pub(super) const PEER_UP: u8 = 0;
pub(super) const PEER_BYE: u8 = 1;
pub(super) const PEER_LOST: u8 = 2;

impl Endpoint {
    /// Ok while `to` has neither said goodbye nor been lost (a send to it may go out).
    pub(super) fn check_peer(&self, to: NodeId) -> Result<(), NetError> {
        match self.shared.peer_state[to.index()].load(Ordering::Acquire) {
            PEER_BYE => return Err(NetError::PeerGone { peer: to }),
            PEER_LOST => {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: "lost earlier".into(),
                })
            }
            _ => {}
        }
        Ok(())
    }

    /// Sets what happens when a peer dies or goes silent (runs on the service thread after the
    /// pending requests to that peer have failed). Default: print
    /// `squall: node R: lost contact with node P (reason); ending the job` and exit with status 3.
    pub fn set_on_peer_lost(&self, f: impl FnMut(&Endpoint, NodeId, &str) + Send + 'static) {
        *self.shared.on_peer_lost.lock() = Some(Box::new(f));
    }

    pub(super) fn peer_lost(&self, peer: NodeId, reason: String) {
        if peer.0 >= self.shared.size {
            return;
        }
        let prev = self.shared.peer_state[peer.index()].swap(PEER_LOST, Ordering::AcqRel);
        if prev != PEER_UP {
            self.shared.peer_state[peer.index()].store(prev, Ordering::Release);
            return;
        }
        self.fail_pending(Some(peer), || NetError::PeerLost {
            peer,
            reason: reason.clone(),
        });
        if self.shared.shutting_down.load(Ordering::Acquire) {
            return;
        }
        // Tell the others first (best effort), so they name the node that failed.
        let mut notice = peer.0.to_le_bytes().to_vec();
        notice.extend_from_slice(reason.as_bytes());
        let notice = Bytes::from(notice);
        for p in (0..self.shared.size).map(NodeId) {
            if p != peer && p != self.shared.rank {
                let _ = self.send_raw(
                    p,
                    MsgType(TY_LOST_NOTICE),
                    Flags::empty(),
                    0,
                    notice.clone(),
                );
            }
        }
        let cb = self.shared.on_peer_lost.lock().take();
        match cb {
            Some(mut f) => {
                f(self, peer, &reason);
                let mut slot = self.shared.on_peer_lost.lock();
                if slot.is_none() {
                    *slot = Some(f);
                }
            }
            None => {
                eprintln!(
                    "squall: node {}: lost contact with node {} ({reason}); ending the job",
                    self.shared.rank.0, peer.0
                );
                std::process::exit(3);
            }
        }
    }
}

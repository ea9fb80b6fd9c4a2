//! The one error enum of the synchronization layer.
//!
//! Owns: error variants and their lowercase messages naming node, lock, barrier and waiter ids.
//! Must not touch: any state.
use crate::ids::{BarrierId, CondId, Waiter};
use squall_core::{LockId, NodeId};

/// Errors returned to a waiter (misuse) or from `handle_message` / `release_done` (protocol).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    #[error("malformed sync message from {from}: {why}")]
    Malformed { from: NodeId, why: String },
    #[error(
        "{from} sent a sync message about {what} that {node} is not in a state to accept: {why}"
    )]
    Unexpected {
        node: NodeId,
        from: NodeId,
        what: String,
        why: String,
    },
    #[error("{waiter} on {node} unlocked {lock}, which it does not hold")]
    NotHolder {
        node: NodeId,
        lock: LockId,
        waiter: Waiter,
    },
    #[error("{waiter} on {node} tried to lock {lock}, which it already holds")]
    Deadlock {
        node: NodeId,
        lock: LockId,
        waiter: Waiter,
    },
    #[error(
        "{waiter} on {node} cannot destroy {lock}: a thread of this node holds or waits for it"
    )]
    LockInUse {
        node: NodeId,
        lock: LockId,
        waiter: Waiter,
    },
    #[error("{waiter} on {node} waited on {cond} with {lock} while other threads wait on it with {bound}")]
    CondLockMismatch {
        node: NodeId,
        cond: CondId,
        lock: LockId,
        bound: LockId,
        waiter: Waiter,
    },
    #[error("{waiter} on {node} cannot destroy {cond}: threads of this node wait on it")]
    CondInUse {
        node: NodeId,
        cond: CondId,
        waiter: Waiter,
    },
    #[error(
        "{waiter} on {node} arrived at {barrier} with {got} while this episode uses {expected}"
    )]
    BarrierMismatch {
        node: NodeId,
        barrier: BarrierId,
        waiter: Waiter,
        got: String,
        expected: String,
    },
    #[error("{waiter} on {node} arrived at {barrier} with a participant count of zero")]
    ZeroParticipants {
        node: NodeId,
        barrier: BarrierId,
        waiter: Waiter,
    },
    #[error("{node} was told that release {token} completed, but no sync release with that token is pending")]
    UnknownRelease { node: NodeId, token: u64 },
}

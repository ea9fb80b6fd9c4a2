//! One-sided remote operations as a sans-IO engine: Split-C global pointers and the
//! OpenSHMEM layer share it.
//!
//! A global pointer is `(node, address)`: an address in the target node's own memory (its
//! symmetric arena or the program's data), not in the coherent DSM range. The engine
//! ([`Engine`]) takes calls from the node (get, put, store, atomic, all-store-sync) and
//! messages from peers, and returns [`Action`]s: messages to send and completions of waiting
//! calls. Remote operations are executed at the target through a [`SymMemory`] the driver
//! passes in, which refuses any address outside what the node made symmetric.
//!
//! Owns: the message kinds and their bounds-checked codec ([`msg`]), the operation
//! bookkeeping (outstanding split-phase operations, store counting, store-sync epochs), atomic
//! semantics ([`atomic`]) and the deterministic symmetric allocator ([`heap`]). Must not
//! touch: sockets, clocks, threads, raw memory (all memory goes through [`SymMemory`]).
#![forbid(unsafe_code)]

pub mod atomic;
pub mod engine;
pub mod heap;
pub mod msg;

pub use atomic::{AtomicKind, Width};
pub use engine::{get_reply_head, Action, Engine, OpId, Outcome, SymMemory, GET_REPLY_HEADER};
pub use heap::{HeapError, SymHeap};
pub use msg::{Kind, Msg};

use squall_core::NodeId;

/// What can go wrong in the engine. Messages are lowercase and name the node and address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GptrError {
    /// A message that does not decode (short, unknown kind, bad field).
    #[error("malformed global-pointer message from {from}: {why}")]
    Malformed { from: NodeId, why: String },
    /// The target refused the operation: the address is not symmetric memory there.
    #[error("{node} refused {what} of {len} bytes at {addr:#x}: {why}")]
    Refused {
        node: NodeId,
        what: &'static str,
        addr: u64,
        len: u64,
        why: String,
    },
    /// A node number outside the job.
    #[error("no node {node} in a job of {nodes} nodes")]
    NoSuchNode { node: u16, nodes: u16 },
    /// A reply for an operation this node does not wait for (a duplicate or a stray).
    #[error("reply from {from} for unknown operation {op}")]
    UnknownOp { from: NodeId, op: u64 },
    /// An argument the engine cannot carry out (bad atomic width, misaligned atomic).
    #[error("{0}")]
    Invalid(String),
}

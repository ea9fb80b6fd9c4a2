//! Coherence protocols as replaceable policies: sans-IO cores that take faults, messages and
//! synchronization events and emit sends, resumes and release completions.
//!
//! Owns: the protocol state machines (`hlrc`, `sc`), their message encodings, the page home
//! directory. Must not touch: sockets, clocks, threads, mmap/userfaultfd. Page contents and
//! access rights are reached only through the `PageMemory` the core was built with.
#![forbid(unsafe_code)]

use squall_core::{AllocInfo, Consistency, NodeId, PageId};

/// What a protocol core asks its driver (the runtime or the simulator) to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these protocol-encoded bytes to a node (delivered exactly once, FIFO per pair).
    Send { to: NodeId, msg: Vec<u8> },
    /// The fault(s) on `page` are served: the access was set; waiting threads may retry.
    Resume { page: PageId },
    /// The release started by `Consistency::begin_release(token)` has completed.
    ReleaseDone { token: u64 },
}

/// Errors a protocol core reports; they name the node and the page.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("malformed protocol message from {from}: {why}")]
    Malformed { from: NodeId, why: String },
    #[error(
        "{from} sent a message about {page} that this node is not in a state to accept: {why}"
    )]
    Unexpected {
        from: NodeId,
        page: PageId,
        why: String,
    },
    #[error("{page} is not part of any allocation")]
    NotAllocated { page: PageId },
}

/// A coherence protocol core. Every method runs on the node's service thread and never blocks.
pub trait Protocol: Consistency {
    /// Short name used on the command line (`hlrc`, `sc`).
    fn name(&self) -> &'static str;
    /// An application thread faulted on `page` (a write if `write`). Concurrent faults on one
    /// page may be reported more than once; the core serves the page once and emits one `Resume`.
    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError>;
    /// A message another node's core sent.
    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError>;
    /// This node (the manager of these pages) allocated them with this placement.
    fn register_allocation(&mut self, alloc: AllocInfo);
    /// Next action, or `None` when there is nothing to do until the next input.
    fn poll_action(&mut self) -> Option<Action>;
}

//! Coherence protocols as replaceable policies: sans-IO cores that take faults, messages and
//! synchronization events and emit sends, resumes and release completions.
//!
//! Owns: the protocol state machines (`hlrc`, `sc`), each with its own message encoding, the
//! `router` that runs them side by side with a policy per allocation, and
//! the helpers they share (`shared`: field codec, atomics, diffs, the page home directory).
//! No protocol module imports another. Must not touch: sockets, clocks, threads,
//! mmap/userfaultfd. Page contents and access rights are reached only through the
//! `PageMemory` the core was built with.
//!
//! See `README.md` in this crate for the message sequence of every protocol action.
#![forbid(unsafe_code)]

pub mod hlrc;
pub mod profile;
pub mod router;
pub mod sc;
mod shared;
pub mod stats;
#[cfg(test)]
mod test_mem;
pub mod user;

pub use shared::{atomic, diff, home};

use squall_core::{AllocInfo, Consistency, NodeId, PageId};

pub use atomic::{AtomicCall, AtomicOp};
pub use hlrc::{Hlrc, RunHandover};
pub use profile::SharingProfile;
pub use router::{Coherence, Policy, Router, MAX_UNIT_PAGES};
pub use sc::Sc;
pub use stats::{MsgCount, ProtoStats};
pub use user::{Mechanisms, MsgReader, MsgWriter, UserCore, UserFactory, UserProtocol};

/// What a protocol core asks its driver (the runtime or the simulator) to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these protocol-encoded bytes to a node (delivered exactly once, FIFO per pair).
    Send { to: NodeId, msg: Vec<u8> },
    /// The fault(s) on `page` are served: the access was set; waiting threads may retry.
    Resume { page: PageId },
    /// The release started by `Consistency::begin_release(token)` has completed.
    ReleaseDone { token: u64 },
    /// The atomic operation started with `Protocol::atomic(.., token)` executed at the page's
    /// home; `old` is the word's value before it; for an acquiring call, `infos` are the
    /// release infos other nodes left at the location (apply each with
    /// `Consistency::apply_grant`).
    AtomicDone {
        token: u64,
        old: u64,
        infos: Vec<Vec<u8>>,
    },
    /// The allocation registered with `Router::register_with(.., token)` was announced to
    /// every node: any node may touch it now.
    Announced { token: u64 },
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
    #[error("atomic operation of {width} bytes on {page} at offset {offset}: the width must be 1, 2, 4 or 8 and the word aligned to it, inside the page")]
    BadAtomic {
        page: PageId,
        offset: usize,
        width: u8,
    },
    #[error("allocation policy refused: {why}")]
    BadPolicy { why: String },
    #[error("unknown protocol {name:?} (expected hlrc or sc)")]
    UnknownProtocol { name: String },
    #[error("protocol {protocol} does not offer {what}")]
    Unsupported {
        protocol: &'static str,
        what: String,
    },
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
    /// Execute `call` on the word at `offset` of `page` at the page's home; completion is
    /// reported as `Action::AtomicDone { token, old, infos }`.
    ///
    /// Ordering: the atomic is sequentially consistent with every other atomic on the same
    /// word (the home executes them one at a time). By itself it is not a release: a caller
    /// that needs its earlier writes visible to whoever acquires through the atomic calls
    /// `begin_release` first, waits for it, and passes `grant_info(&[])` as `call.release`
    /// (the runtime does this for releasing atomics); an acquiring call's `infos` are applied
    /// by the caller. Under `hlrc` the home counts a changing atomic as its own write, so the
    /// page appears in the home's next write notice; see also [`Protocol::observe_atomic`].
    fn atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError>;
    /// An atomic of this node left `value` (the word's bytes) at `offset` of `page` at the
    /// home: put it into this node's copy, so a plain read of the word after the atomic sees
    /// it (or a later value), without refetching the page. Not a write of this node (it must
    /// not appear in its diffs). Default: nothing to do (a protocol whose home-executed
    /// atomics invalidate every copy).
    fn observe_atomic(&mut self, _page: PageId, _offset: usize, _value: &[u8]) {}
    /// Whether writes this node made to `page` may still be on their way to the page's
    /// home, or held for this node's next release (a diff not sent or not acknowledged): the
    /// runtime releases before it frees memory of such a page, so they cannot land over
    /// what the memory's next owner writes. Default: `true` (always release first).
    fn holds_writes_for_home(&self, _page: PageId) -> bool {
        true
    }
    /// At the node of an acquiring atomic: apply one of the `infos` its `AtomicDone`
    /// carried (the writes released through the word) before the caller resumes. Default: as
    /// a lock grant (`Consistency::apply_grant`). `hlrc` applies it the same way but does not
    /// count it as a lock grant: a program that synchronizes with locks between barriers gets
    /// no barrier fetches, one that bumps a C11 atomic counter between them still does.
    fn apply_atomic_grant(&mut self, info: &[u8]) {
        self.apply_grant(info)
    }
    /// This core's counters.
    fn stats(&self) -> ProtoStats;
    /// `ending`: the node has entered its finalization and runs no application thread, so
    /// its last barriers may come next; `false` again when a thread starts here after all.
    /// While ending, the core starts no traffic of its own that nobody waits for (e.g.
    /// `hlrc`'s barrier fetches), since a peer that has passed the last barrier may already
    /// have left the job. Default: nothing to stop.
    fn set_ending(&mut self, _ending: bool) {}
    /// Pages `first .. first + pages` follow `coherence`, not this node's defaults (the
    /// router tells every node about allocations made under a policy other than the job's
    /// default). Default: nothing to adjust (a protocol with no per-page knobs).
    fn apply_policy(&mut self, _first: PageId, _pages: u64, _coherence: Coherence) {}
    /// Start recording the sharing profile (`squall run --profile`). Default: the protocol
    /// keeps none.
    fn set_profiling(&mut self) {}
    /// The sharing profile recorded so far (`None`: profiling off or not kept by this
    /// protocol).
    fn sharing_profile(&self) -> Option<SharingProfile> {
        None
    }
}

/// The protocols Squall offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolKind {
    /// Home-based lazy release consistency, multiple writers (default).
    Hlrc,
    /// Sequentially consistent single-writer invalidation with a home directory.
    Sc,
    /// The user-written protocol registered with this number (see [`user`]): the runtime's
    /// `squall::protocol::register`, the order of registration on every node.
    User(u8),
}

impl ProtocolKind {
    /// Every built-in protocol, in the order of their cores in a [`Router`] (user protocols'
    /// cores follow them, in registration order).
    pub const ALL: [ProtocolKind; 2] = [ProtocolKind::Hlrc, ProtocolKind::Sc];

    pub fn name(self) -> &'static str {
        match self {
            ProtocolKind::Hlrc => "hlrc",
            ProtocolKind::Sc => "sc",
            ProtocolKind::User(_) => "user",
        }
    }
}

impl std::str::FromStr for ProtocolKind {
    type Err = ProtoError;
    fn from_str(s: &str) -> Result<Self, ProtoError> {
        match s {
            "hlrc" => Ok(ProtocolKind::Hlrc),
            "sc" => Ok(ProtocolKind::Sc),
            other => Err(ProtoError::UnknownProtocol {
                name: other.to_string(),
            }),
        }
    }
}

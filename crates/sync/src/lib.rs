//! Synchronization managers (sans-IO): distributed queue locks, barriers, condition variables
//! and flags, carrying the coherence protocol's consistency information.
//!
//! One [`SyncCore`] runs per node, on the node's service thread. Application threads' operations
//! come in as calls naming an opaque [`Waiter`]; messages from other nodes' cores come in through
//! [`SyncCore::handle_message`]; completions of releases started with
//! `Consistency::begin_release` come in through [`SyncCore::release_done`]. Everything the core
//! wants done comes out of [`SyncCore::poll_action`]: [`Action::Send`] and [`Action::Wake`].
//! **Every operation produces exactly one `Wake` for its waiter** (immediately for unlock,
//! signal, clear and misuse errors; later for operations that block).
//!
//! Driving two cores by hand (the runtime does this on each node's service thread, the
//! simulator over its virtual network):
//!
//! ```
//! use squall_core::{LockId, NoConsistency, NodeId};
//! use squall_sync::{Action, Outcome, SyncCore, Waiter};
//!
//! let mut nodes = [SyncCore::new(NodeId(0), 2), SyncCore::new(NodeId(1), 2)];
//! let mut cons = NoConsistency; // the coherence protocol in real use
//! // A thread of node 1 locks lock 0, whose token starts on its manager, node 0.
//! nodes[1].lock(&mut cons, LockId(0), Waiter(7));
//! let mut woken = Vec::new();
//! loop {
//!     let mut sends = Vec::new();
//!     for (i, core) in nodes.iter_mut().enumerate() {
//!         while let Some(action) = core.poll_action() {
//!             match action {
//!                 Action::Send { to, msg } => sends.push((NodeId(i as u16), to, msg)),
//!                 Action::Wake { waiter, result } => woken.push((waiter, result)),
//!                 Action::ProtocolError { error } => panic!("{error}"),
//!             }
//!         }
//!     }
//!     if sends.is_empty() {
//!         break;
//!     }
//!     for (from, to, msg) in sends {
//!         nodes[to.index()].handle_message(&mut cons, from, &msg)?;
//!     }
//! }
//! assert_eq!(woken, vec![(Waiter(7), Ok(Outcome::Done))]);
//! assert_eq!(nodes[1].stats().lock_acquires_remote, 1);
//! # Ok::<(), squall_sync::SyncError>(())
//! ```
//!
//! Message costs (N nodes): remote lock acquire ≤ 3 (request, forward, grant; 2 when the
//! manager holds the token, 0 when this node does or when its token came lent along with
//! another lock's grant — lock read-ahead, 2-node jobs: the requester's learned lock order or,
//! where it knows none, the holder's; see `lock.rs`), unlock 0; per-node barrier 2(N−1)
//! (a combining tree: ⌈log2 N⌉+1 one-way hops, `tree.rs`);
//! total-count barrier, steady SPMD: (p−1) counts + 1 eager per remote node with p threads,
//! a collect and an info per remote node without threads, N−1 departures;
//! condition wait 2 (register, ack) + 1 wake, signal 1; flag set 1 + 1 per waiting node,
//! flag wait 1 per node; all messages between different nodes only.
//!
//! The lock cache ([`FastLocks`], `fast.rs`): the one piece of a core the node's threads
//! touch directly, without the core's owner. Idle tokens the core puts there are taken and
//! released by `FastLocks::try_lock`/`try_unlock` (one compare-and-swap, no call into the
//! core, no `Wake`); a caller whose try fails calls `lock`/`unlock` as usual. The core takes a
//! cached lock back whenever it needs it (see `lock.rs`). [`SyncCore::stats_now`] counts the
//! acquires made there (`lock_acquires_local_fast`).
//!
//! Owns: lock, barrier, condition and flag state of this node and of the ids this node manages
//! (manager of id `x` is node `x % nodes`), and the message encoding between cores.
//! Must not touch: sockets, clocks, threads, page memory (pages are the protocol's business,
//! reached only through `squall_core::Consistency`).
#![forbid(unsafe_code)]

mod barrier;
mod cond;
mod core;
pub mod error;
pub mod fast;
mod flag;
pub mod ids;
mod lock;
pub mod message;
pub mod stats;
pub mod tree;

pub use crate::core::SyncCore;
pub use error::SyncError;
pub use fast::FastLocks;
pub use ids::{BarrierId, CondId, FlagId, Waiter};
pub use lock::{DEFAULT_LOCK_COHORT, DEFAULT_LOCK_READ_AHEAD};
pub use stats::SyncStats;

use serde::{Deserialize, Serialize};
use squall_core::NodeId;

/// What a [`SyncCore`] asks its driver (the runtime or the simulator) to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these sync-encoded bytes to another node's SyncCore (exactly once, FIFO per pair).
    Send { to: NodeId, msg: Vec<u8> },
    /// The operation of `waiter` finished with `result`; resume the thread.
    Wake {
        waiter: Waiter,
        result: Result<Outcome, SyncError>,
    },
    /// The core found its state contradicted while acting on its own behalf (only possible
    /// after another node sent messages that break the protocol). Treat it like an error
    /// returned by `handle_message`: report it naming the node and end the job.
    ProtocolError { error: SyncError },
}

/// How a successful operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Done: the lock is held, the barrier passed, the flag is set, the signal is sent, ...
    Done,
    /// `trylock` only: the lock was not free on this node; nothing is held.
    Busy,
    /// `barrier` only: done, and this is the one thread of the whole job chosen for
    /// `PTHREAD_BARRIER_SERIAL_THREAD` in this episode.
    Serial,
}

/// Who takes part in a barrier episode. All threads of one episode on one node must pass the
/// same value (else `SyncError::BarrierMismatch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BarrierCount {
    /// Every node of the job takes part, this node with `local` threads (counts may differ
    /// between nodes). One arrival per node and one departure per node: 2(N−1) messages.
    /// This is the SPMD / `BARRIER` macro barrier.
    PerNode { local: u32 },
    /// `total` threads anywhere in the job take part (`pthread_barrier_init` count). First
    /// episode: one count message per arriving thread not on the manager node, then a collect
    /// round (N−1 collects, N−1 infos) and N−1 departures. Later episodes, each node predicting
    /// its participants from the previous one: a node with p threads sends p−1 counts and one
    /// eager count + info (its release starts when its p-th thread arrives); only nodes
    /// without threads (or whose prediction failed) are collected; N−1 departures. Steady SPMD
    /// with one thread per node: 2(N−1) messages. More than `total` threads arriving at one
    /// episode is misuse (the extra thread belongs to the next episode only if it arrives after
    /// its node left the previous one or sent its eager info; see `barrier.rs`).
    Total { total: u32 },
}

impl std::fmt::Display for BarrierCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BarrierCount::PerNode { local } => write!(f, "{local} threads on every node"),
            BarrierCount::Total { total } => write!(f, "{total} threads in total"),
        }
    }
}

/// The node that manages (queues, counts) synchronization object `id` in a job of `nodes`.
pub fn manager_of(id: u64, nodes: u16) -> NodeId {
    NodeId((id % u64::from(nodes.max(1))) as u16)
}

//! Squall: software distributed shared memory.
//!
//! A Squall job is N node processes (started by `squall run`, by `mpirun`/`srun`, or by any
//! launcher that sets the `SQUALL_*` variables) sharing one address range mapped at the same
//! virtual address on every node. Ordinary loads and stores to memory from [`Node::alloc`]
//! are kept coherent page by page by the chosen protocol (`hlrc` by default, or `sc`);
//! locks, barriers, conditions and flags carry the consistency information.
//!
//! ```no_run
//! let node = squall::init()?;
//! let data = node.alloc_collective(4096 * 8, squall::Placement::FirstTouch)? as *mut u64;
//! // ... every node writes its part, then:
//! node.barrier()?;
//! node.finalize()?;
//! # Ok::<(), squall::SquallError>(())
//! ```
//!
//! This crate owns the node runtime: one service thread per node (the transport's) that runs
//! the protocol and synchronization cores; application threads reach it through [`Node`].
mod array;
pub mod config;
pub mod error;
mod failure;
mod fnptr;
pub mod gptr;
mod msg;
mod node;
pub mod objects;
mod order;
pub mod profile;
pub mod protocol;
pub mod regions;
mod service;
pub mod stats;
mod threads;

pub use array::{Pod, SharedArray};
pub use config::{PlacementSpec, ProtocolKind, RuntimeConfig, ThreadPlacement};
pub use error::{Result, SquallError};
pub use gptr::{ActiveSet, Cmp, Elem, GlobalPtr, Gptr, Pending, ReduceOp, SpreadArray};
pub use node::{init, init_ssi, init_ssi_with_regions, node, node_ref, parse_placement, Node};
pub use order::MemOrder;
pub use regions::RegionId;
pub use squall_core::{LockId, NodeId, PageId, Placement, ThreadId, PAGE_SIZE};
pub use squall_gptr::{AtomicKind, GptrError, Width};
pub use squall_memory::{Contents, Region};
pub use squall_protocol::{AtomicOp, Policy};
pub use squall_sync::{BarrierCount, BarrierId, CondId, FlagId};
/// The decoders of the runtime's own messages (thread creation, thread results, collective
/// values), for the fuzz targets in `fuzz/`: each takes the payload a peer sent and returns
/// `None`/an error for anything malformed, never panicking. Not a stable API.
#[doc(hidden)]
pub mod decoders {
    pub use crate::node::decode_collective;
    pub use crate::threads::{decode_answer, SpawnMsg};
}
pub use threads::{set_thread_end_hook, set_thread_runner, ThreadFn, ThreadRunner};

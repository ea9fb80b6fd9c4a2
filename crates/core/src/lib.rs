//! Squall's shared vocabulary: the id newtypes every layer speaks in, page geometry, and the
//! one table of environment variables a user can set.
//!
//! Owns: plain data types with no behaviour beyond formatting and conversion.
//! Must not touch: I/O, threads, clocks, memory protection. Every other crate may depend on
//! this one; this one depends on no other Squall crate.
#![forbid(unsafe_code)]

pub mod consistency;
pub mod env;
pub mod ids;
pub mod memory;

pub use consistency::{Consistency, NoConsistency};
pub use ids::{JobId, LockId, NodeId, PageId, ThreadId};
pub use memory::{
    human_bytes, Access, AllocInfo, HeapLayout, PageMemory, Placement, SPLIT_MIN_PAGES,
    STRIPE_PAGES,
};

/// Size of a coherence page in bytes (the host page size on every supported platform).
pub const PAGE_SIZE: usize = 4096;

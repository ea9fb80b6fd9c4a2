//! The global address space: reservation at the same address on every node, page access
//! control and fault capture through userfaultfd, and the shared-heap allocator.
//!
//! Owns: mmap/madvise/fallocate/userfaultfd (all `unsafe` lives in the `sys` module and, for
//! fault capture by signal, `signal_sys`; the rest of the crate denies `unsafe_code`), the page access-state table, the fault thread, and the
//! per-node arena allocator with the allocator of the global part. Must not touch: the network or protocol decisions; which access a
//! page gets is decided by the protocol and applied through [`squall_core::PageMemory`].
#![deny(unsafe_code)]

pub mod error;
pub mod exec;
pub mod global;
pub mod heap;
pub mod signal;
mod signal_sys;
pub mod space;
pub mod symmetric;
mod sys;
mod table;

pub use error::{AllocError, MemoryError};
pub use exec::{fixed_layout, layout_is_fixed};
pub use global::GlobalPart;
pub use heap::{AllocRecord, Allocation, Heap, HeapStats, MIN_ALIGN};
pub use signal::{prepare_thread, SignalServer};
pub use space::{
    max_range, parse_addr, parse_size, AddressSpace, Contents, Fault, FaultSource, FaultThread,
    Region, SpaceConfig, SpaceStats, DEFAULT_BASE, DEFAULT_SIZE,
};
pub use symmetric::{SymmetricSpace, WordOp, SYMMETRIC_BASE};

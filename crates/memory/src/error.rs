//! Error types of the address space and of the allocator.
//!
//! Owns: the wording of every failure this crate reports (lowercase, naming addresses, pages
//! and the environment variable to change). Must not touch: recovery policy (callers decide).
use squall_core::{human_bytes, PageId};
use std::io;

/// Failures of reserving, controlling or watching the global range.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(
        "cannot open userfaultfd ({why}); squall needs it to capture page faults: run as root, or \
         `sysctl vm.unprivileged_userfaultfd=1`, or give the process CAP_SYS_PTRACE, or reserve \
         with user_mode_only (then system calls reading or writing shared memory fail with \
         EFAULT instead of waiting)"
    )]
    Userfaultfd { why: String },
    #[error(
        "this kernel's userfaultfd lacks {missing} (needs linux 5.19 or newer for shmem minor and \
         write-protect faults)"
    )]
    MissingFeatures { missing: String },
    #[error(
        "cannot reserve the global range at {base:#x} ({size} bytes): {source}; set SQUALL_HEAP_BASE \
         to a free address or lower SQUALL_HEAP_SIZE"
    )]
    Reserve {
        base: usize,
        size: usize,
        source: io::Error,
    },
    #[error("bad value {value:?} for {var}: {why}")]
    Config {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error("cannot create the backing memory file of {size} bytes: {source}")]
    Backing { size: usize, source: io::Error },
    #[error("userfaultfd {op} failed for {page} ({count} pages): {source}")]
    Kernel {
        op: &'static str,
        page: PageId,
        count: u64,
        source: io::Error,
    },
    #[error("{page} ({count} pages) lies outside the global range of {total} pages")]
    OutOfRange {
        page: PageId,
        count: u64,
        total: u64,
    },
    #[error("cannot adopt {start:#x}+{len:#x} into the global range: {why}")]
    Adopt {
        start: usize,
        len: usize,
        why: String,
    },
    #[error("cannot restart the program with address randomisation off: {why}")]
    Reexec { why: String },
    #[error("the fault thread of this address space is already running")]
    FaultThreadRunning,
    #[error("cannot start the fault thread: {0}")]
    Spawn(io::Error),
    #[error(
        "SQUALL_FAULTS=signal: {why}; unset SQUALL_FAULTS (or set it to `thread`) to serve faults \
         on the service thread"
    )]
    Signal { why: String },
    #[error(
        "cannot reserve the symmetric arena at {base:#x} ({size} bytes): {source}; lower \
         SHMEM_SYMMETRIC_SIZE"
    )]
    SymmetricReserve {
        base: usize,
        size: usize,
        source: io::Error,
    },
    #[error("{len} bytes at {addr:#x} are not symmetric memory of this node: {why}")]
    NotSymmetric {
        addr: usize,
        len: usize,
        why: String,
    },
}

/// Failures of the shared-heap allocator; each names the address involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error(
        "out of shared memory on node {node}: {} asked (align {align}), {} left in its arena \
         (each node allocates small objects from its own arena: part of the global range of {} \
         split over {nodes} nodes, {} each; large allocations come from the part every node \
         shares, when the range is large enough to have one); raise {} (e.g. {}={})",
        human_bytes(*size as u64),
        human_bytes(*left),
        human_bytes(*range),
        human_bytes(*arena),
        squall_core::env::HEAP_SIZE,
        squall_core::env::HEAP_SIZE,
        suggest_range(*size as u64, *range, *nodes, *max_range)
    )]
    OutOfMemory {
        size: usize,
        align: usize,
        node: u16,
        /// Bytes still free in the node's arena.
        left: u64,
        /// Bytes of the node's arena.
        arena: u64,
        /// Bytes of the whole global range, and the nodes it is split over.
        range: u64,
        nodes: u16,
        /// The largest range this base allows (below the symmetric arena or the top of the
        /// address space).
        max_range: u64,
    },
    #[error(
        "out of shared memory: {} asked (align {align}), {} left in the global part of the range \
         (the global range of {}: {} shared by every node for large allocations, the rest split \
         into arenas of {} for each of {nodes} nodes); raise {} (e.g. {}={})",
        human_bytes(*size as u64),
        human_bytes(*left),
        human_bytes(*range),
        human_bytes(*global),
        human_bytes(*arena),
        squall_core::env::HEAP_SIZE,
        squall_core::env::HEAP_SIZE,
        suggest_range(*size as u64, *range, 1, *max_range)
    )]
    GlobalFull {
        size: usize,
        align: usize,
        /// Bytes never claimed in the global part.
        left: u64,
        /// Bytes of the global part, of each node's arena, of the whole range.
        global: u64,
        arena: u64,
        range: u64,
        nodes: u16,
        /// The largest range this base allows.
        max_range: u64,
    },
    #[error("alignment {align} is not a power of two")]
    BadAlign { align: usize },
    #[error("free of {addr:#x}, which was already freed")]
    DoubleFree { addr: usize },
    #[error("{addr:#x} is not the start of a live allocation of node {node}")]
    NotAllocated { addr: usize, node: u16 },
}

/// A global range in which `size` bytes fit in one node's arena (with room to spare): the
/// next power of two of `2 * size * nodes`, at least twice the current one, at most `max`.
fn suggest_range(size: u64, range: u64, nodes: u16, max: u64) -> String {
    let want = size
        .saturating_mul(2)
        .saturating_mul(u64::from(nodes.max(1)))
        .max(range.saturating_mul(2));
    let want = want.checked_next_power_of_two().unwrap_or(want);
    human_bytes(want.min(max) & !0xfff)
}

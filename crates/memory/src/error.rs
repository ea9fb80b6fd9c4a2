//! Error types of the address space and of the allocator.
//!
//! Owns: the wording of every failure this crate reports (lowercase, naming addresses, pages
//! and the environment variable to change). Must not touch: recovery policy (callers decide).

use squall_core::PageId;
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
        "out of shared memory: {size} bytes (align {align}) do not fit in the arena of node {node}"
    )]
    OutOfMemory {
        size: usize,
        align: usize,
        node: u16,
    },
    #[error("alignment {align} is not a power of two")]
    BadAlign { align: usize },
    #[error("free of {addr:#x}, which was already freed")]
    DoubleFree { addr: usize },
    #[error("{addr:#x} is not the start of a live allocation of node {node}")]
    NotAllocated { addr: usize, node: u16 },
}

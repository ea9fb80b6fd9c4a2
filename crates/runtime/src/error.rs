//! The runtime's error type: what a Squall call can fail with. Messages are lowercase and name
//! the node, the address or the id involved, and say what to do where there is something to do.
use squall_core::NodeId;

/// Errors of the public API.
#[derive(Debug, thiserror::Error)]
pub enum SquallError {
    #[error("squall is not initialised: call squall::init() first (or start the program with `squall run`)")]
    NotInitialised,
    #[error("transport: {0}")]
    Net(#[from] squall_net::NetError),
    #[error("address space: {0}")]
    Memory(#[from] squall_memory::MemoryError),
    #[error("allocation on {node}: {source}")]
    Alloc {
        node: NodeId,
        #[source]
        source: squall_memory::AllocError,
    },
    #[error("{0:#x} is not a squall address (the global range is {1:#x}..{2:#x})")]
    NotSquall(usize, usize, usize),
    #[error("synchronization: {0}")]
    Sync(#[from] squall_sync::SyncError),
    #[error("configuration: {0}")]
    Config(String),
    #[error(
        "{0} must not be called from a message handler (the service thread would wait on itself)"
    )]
    OnServiceThread(&'static str),
    #[error("the node is shutting down")]
    ShuttingDown,
    #[error("join of unknown {0} (never created, already joined, or joined by another thread)")]
    UnknownThread(squall_core::ThreadId),
    #[error("{0}")]
    Protocol(#[from] squall_protocol::ProtoError),
    #[error("{what}: {why}")]
    Thread { what: String, why: String },
    #[error("{0}")]
    Remote(String),
    #[error("regions: {0}")]
    Region(#[from] squall_regions::RegionError),
    /// A shared-object call failed (`squall::objects`).
    #[error("shared object: {0}")]
    Object(#[from] squall_objects::ObjError),
    /// A one-sided operation failed (e.g. the target refused its address).
    #[error("{0}")]
    Gptr(#[from] squall_gptr::GptrError),
    /// A collective call failed on `node`: every node of the job gets this same error.
    #[error("{what} failed on {node}: {cause}")]
    Collective {
        what: &'static str,
        node: NodeId,
        cause: String,
    },
    /// The departure round of `finalize` did not hear from every node in time.
    #[error("finalize: no departure notice from {missing} within {secs} s (each node sends one after the job's last barrier)")]
    Departure { missing: String, secs: u64 },
}

/// Result alias of the public API.
pub type Result<T, E = SquallError> = std::result::Result<T, E>;

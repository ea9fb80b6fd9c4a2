//! The CRL region protocol (seed 002 §2.1) as a sans-IO state machine.
//!
//! A region is a contiguous block of bytes of any size with a global id; the node that creates
//! it is its **home** (the id carries the home's rank, so anyone can find it). Nodes map a
//! region and access it inside brackets: `start_read`/`end_read` (several readers of a node at
//! once) and `start_write`/`end_write` (one writer, no readers). Copies are cached across
//! brackets: a read copy stays valid until someone writes the region; a writer keeps the
//! exclusive copy after `end_write` until someone else asks for it. The home keeps the
//! directory (sharers, the exclusive owner) and serves one request per region at a time:
//! a write invalidates the sharers and recalls the owner's copy; a read recalls the owner's
//! copy, which then stays as a read copy. A bracket that conflicts with one in progress on
//! another node waits for it to end (the invalidation or recall is answered at its end).
//!
//! The core takes API calls and incoming messages and returns [`Action`]s (messages to send,
//! completions of waiting calls) through [`Regions::poll_action`]. It assumes the backbone's
//! delivery: exactly once, FIFO per pair of nodes (the simulator runs it over its reliable
//! layer). The node's own copies are reached through [`RegionMemory`] (the runtime's buffers
//! that the application reads and writes); the home's copy is the core's own, except while
//! the home node's own read copy is current (after its written copy was downgraded for a
//! reader): reads are then served from that copy, and the home's copy catches up before the
//! home node's copy stops being a read copy.
//!
//! Owns region state and the protocol; must not touch sockets, clocks or threads.

mod core;
pub mod msg;
mod stats;

pub use crate::core::Regions;
pub use msg::{Kind, Msg};
use squall_core::NodeId;
pub use stats::RegionStats;

/// A region's global id: the home's rank in the top 16 bits, a per-home sequence below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u64);

impl RegionId {
    /// The id of the `seq`th region created by `home`.
    pub fn new(home: NodeId, seq: u64) -> RegionId {
        RegionId((u64::from(home.0) << 48) | (seq & ((1 << 48) - 1)))
    }
    /// The node that created the region and keeps its directory.
    pub fn home(self) -> NodeId {
        NodeId((self.0 >> 48) as u16)
    }
}

impl std::fmt::Display for RegionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "region {}:{}", self.home().0, self.0 & ((1 << 48) - 1))
    }
}

/// Who waits for a call to complete (the driver's token).
pub type Waiter = u64;

/// Errors of the region protocol: bad calls and bad input, never panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    #[error("{0} does not exist (never created, or deleted)")]
    Unknown(RegionId),
    #[error("{0} is not mapped on this node")]
    NotMapped(RegionId),
    #[error("{rid}: {what} without a matching start")]
    NotInBracket { rid: RegionId, what: &'static str },
    #[error("{0}: cannot flush during a read or write operation")]
    Busy(RegionId),
    #[error("{0}: home node {1} is not in this job")]
    BadHome(RegionId, NodeId),
    #[error("malformed region message from {from}: {what}")]
    Malformed { from: NodeId, what: &'static str },
    #[error("unexpected {kind} for {rid} from {from}")]
    Unexpected {
        from: NodeId,
        rid: RegionId,
        kind: &'static str,
    },
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send this encoded region message to `to` (possibly this node itself).
    Send { to: NodeId, msg: Vec<u8> },
    /// A call of `waiter` completed: `Ok(size)` for a map, `Ok(0)` for a bracket start.
    Complete {
        waiter: Waiter,
        result: Result<u64, RegionError>,
    },
}

/// The node's own copies of regions (the bytes the application maps).
pub trait RegionMemory {
    /// The node's copy of `rid` must exist (zeroed if new) with `size` bytes.
    fn ensure(&mut self, rid: RegionId, size: usize);
    /// Overwrite the node's copy of `rid` with `data` (a fetched copy; no bracket is open).
    fn install(&mut self, rid: RegionId, data: &[u8]);
    /// Copy the node's copy of `rid` into `out` (its size; for a recall or flush: no write
    /// bracket is open).
    fn read_into(&self, rid: RegionId, out: &mut [u8]);
    /// Append the node's copy of `rid` (`len` bytes) to `out`, under `read_into`'s rule (a
    /// store that can copy straight from its bytes overrides this: no zero-fill first).
    fn append_to(&self, rid: RegionId, len: usize, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + len, 0);
        self.read_into(rid, &mut out[at..]);
    }
    /// The region is gone: drop the node's copy.
    fn forget(&mut self, rid: RegionId);
}

//! Message types the runtime registers with the transport (types below 64 are the
//! transport's own). Owns only the numbering.
use squall_net::MsgType;

/// Coherence protocol traffic (payload: the protocol core's own encoding).
pub const PROTO: MsgType = 64;
/// Synchronization traffic (payload: the sync core's own encoding).
pub const SYNC: MsgType = 65;
/// A value broadcast by rank 0 to every node for a collective call (`u64` sequence, `u64` value).
pub const COLLECTIVE: MsgType = 66;
/// Heap operation on memory another node allocated (payload: op `u8` — 0 free, 1 usable
/// size — then the `u64` address); request/reply.
pub const HEAP: MsgType = 67;
/// Statistics of one node sent to rank 0 at finalize (payload: JSON).
pub const STATS: MsgType = 68;
/// Run a function on this node: thread creation (payload: see `threads`); request/reply.
pub const SPAWN: MsgType = 69;
/// A thread finished (payload: global thread id, return value).
pub const JOINED: MsgType = 70;

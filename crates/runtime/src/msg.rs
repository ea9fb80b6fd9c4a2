//! Message types the runtime registers with the transport (types below 64 are the
//! transport's own). Owns only the numbering.
use squall_net::MsgType;

/// Coherence protocol traffic (payload: the protocol core's own encoding).
pub const PROTO: MsgType = MsgType(64);
/// Synchronization traffic (payload: the sync core's own encoding).
pub const SYNC: MsgType = MsgType(65);
/// A value broadcast by rank 0 to every node for a collective call (`u64` sequence, `u64` value).
pub const COLLECTIVE: MsgType = MsgType(66);
/// Heap operation on memory another node allocated (payload: op `u8` — 0 free, 1 usable
/// size — then the `u64` address); request/reply.
pub const HEAP: MsgType = MsgType(67);
/// Statistics of one node sent to rank 0 at finalize (payload: JSON).
pub const STATS: MsgType = MsgType(68);
/// Start a thread on this node (payload: `threads::SpawnMsg`); request/reply.
pub const SPAWN: MsgType = MsgType(69);
/// Wait for a thread of this node to end (payload: the `u64` thread id); request, answered
/// when the thread has ended.
pub const JOIN: MsgType = MsgType(70);
/// Snapshot your statistics: a stats mark (`Node::stats_mark`; empty payload).
pub const STATS_MARK: MsgType = MsgType(71);
/// The sender failed and ends the job (payload: the cause, UTF-8): every node ends with it
/// (`crate::failure`).
pub const ABORT: MsgType = MsgType(72);
/// Departure: the sender passed the job's last barrier and sent everything that barrier made
/// it send (empty payload; see `node::lifecycle`).
pub const DONE: MsgType = MsgType(73);
/// CRL region protocol traffic (payload: `squall_regions::Msg`'s encoding; `crate::regions`).
pub const REGION: MsgType = MsgType(74);
/// DSM/IP shared objects (payload: `squall_objects::Msg`; `crate::objects`).
pub const OBJECT: MsgType = MsgType(75);

/// One-sided operations: Split-C global pointers and OpenSHMEM (payload: the `squall-gptr`
/// engine's own encoding; see `crate::gptr`).
pub const GPTR: MsgType = MsgType(76);

/// The sharing profile of one node sent to rank 0 at finalize (payload: JSON,
/// `profile::NodeProfile`).
pub const PROFILE: MsgType = MsgType(77);

/// A readable name for a message type in statistics.
pub fn name(ty: u16) -> String {
    const NAMES: [(MsgType, &str); 14] = [
        (PROTO, "protocol"),
        (SYNC, "sync"),
        (COLLECTIVE, "collective"),
        (HEAP, "heap"),
        (STATS, "stats"),
        (SPAWN, "spawn"),
        (JOIN, "join"),
        (STATS_MARK, "stats_mark"),
        (PROFILE, "profile"),
        (ABORT, "abort"),
        (DONE, "done"),
        (REGION, "region"),
        (OBJECT, "object"),
        (GPTR, "gptr"),
    ];
    match NAMES.iter().find(|(t, _)| t.0 == ty) {
        Some((_, n)) => (*n).into(),
        None if ty < MsgType::FIRST_USER => format!("transport_{ty}"),
        None => format!("type_{ty}"),
    }
}

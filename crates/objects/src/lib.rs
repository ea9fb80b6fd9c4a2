//! DSM/IP shared objects (seed 004 §3.1–3.2) as a sans-IO core.
//!
//! A shared object is a typed array (int, long, float, double, or fixed-size byte records)
//! that every node keeps a whole copy of, split into *coherence segments* of a per-object
//! number of elements. `Read()` and `Write()` are atomic per element. One of three coherence
//! engines is chosen per object:
//!
//! * **OU** (`ou.rs`): every segment has a permanent owner (segments spread round-robin over
//!   the nodes); every access goes to the owner, which performs accesses one at a time:
//!   sequential consistency.
//! * **NC** (`nc.rs`): reads are local, writes update the local copy and are broadcast as
//!   one-way notices without acknowledgement. No consistency: nothing is promised about the
//!   order in which other nodes see writes, and where the network loses messages they may
//!   never see them (the core marks these sends unreliable; Squall's backbone is reliable, so
//!   in a real job they arrive, eventually).
//! * **MSI** (`msi.rs`): modified/shared/invalid per segment per node with the seed's extra
//!   "distributed-directory-style" information at every node (the number of sharers and the
//!   node in `M`, the owner), upgrades broadcast to every node, the requester waiting for one
//!   answer per holder and checking that the sharers' copies agree: sequential consistency.
//!
//! Writes under OU and MSI follow the seed's Figure 7: a write is *begun* (the value kept in
//! `g_temp`, `g_flag` set), then *stepped* (permission checked and acquired, the write done if
//! the flag is still set); a handler that takes write permission away completes a flagged
//! write first. Between the steps the driver lets handlers run, so the interrupted-write race
//! of Figure 6 is real here, and handled.
//!
//! The core takes API calls (with a waiter id for the calling thread) and incoming messages
//! (with the sender) and returns [`Action`]s: messages to send and completions of parked
//! calls. No sockets, threads or clocks; bad input is a typed [`ObjError`], never a panic.

mod codec;
mod core;
mod msi;
mod nc;
mod ou;

pub use crate::codec::{Msg, Want};
pub use crate::core::ObjectsCore;
pub use crate::msi::MsiState;
use serde::Serialize;
use squall_core::NodeId;

/// A shared object's id: the same on every node. Objects created collectively are numbered
/// from 1 in creation order; objects created by one node have the top bit set, the creator's
/// rank in bits 16..31 and its own counter below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectId(pub u32);

/// The coherence engine of an object (seed 004 §3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Engine {
    /// ENGINE_OU: a fixed owner per segment serialises every access.
    Ou,
    /// ENGINE_NC: reads local, writes broadcast without guaranteed delivery.
    Nc,
    /// ENGINE_MSI: broadcast-based modified/shared/invalid with sharer counts and owner.
    Msi,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Ou => "ou",
            Engine::Nc => "nc",
            Engine::Msi => "msi",
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = ObjError;
    fn from_str(s: &str) -> Result<Self, ObjError> {
        match s.to_ascii_lowercase().as_str() {
            "ou" => Ok(Engine::Ou),
            "nc" => Ok(Engine::Nc),
            "msi" => Ok(Engine::Msi),
            _ => Err(ObjError::BadSpec(format!(
                "unknown engine {s:?} (ou, nc or msi)"
            ))),
        }
    }
}

/// The element type of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ElemKind {
    /// 32-bit signed integer (C `int`).
    Int,
    /// 64-bit signed integer.
    Long,
    /// 32-bit IEEE float.
    Float,
    /// 64-bit IEEE double.
    Double,
    /// A fixed-size record of this many bytes (1..=65536), read and written whole.
    Record(u32),
}

/// Largest record element.
pub const MAX_RECORD: u32 = 65536;
/// Largest coherence segment in bytes: the seed lets the implementation raise the
/// granularity so that coherence messages stay small; here it caps it instead, so that one
/// segment's copy is one message of at most this size.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 20;
/// Segment size in bytes picked when the creator asks for the default (`seg_elems == 0`).
pub const DEFAULT_SEGMENT_BYTES: u64 = 256;

impl ElemKind {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemKind::Int | ElemKind::Float => 4,
            ElemKind::Long | ElemKind::Double => 8,
            ElemKind::Record(n) => n as usize,
        }
    }
}

/// What an object is: its elements, its segment size and its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObjectSpec {
    pub kind: ElemKind,
    /// Number of elements (1 for a scalar such as `SharedInt`).
    pub len: u64,
    /// Elements per coherence segment; 0: the default (about `DEFAULT_SEGMENT_BYTES`).
    pub seg_elems: u32,
    pub engine: Engine,
}

impl ObjectSpec {
    /// Refuse impossible specifications (typed, never a panic).
    pub fn check(&self) -> Result<(), ObjError> {
        if let ElemKind::Record(n) = self.kind {
            if n == 0 || n > MAX_RECORD {
                return Err(ObjError::BadSpec(format!(
                    "record size {n} (1..={MAX_RECORD})"
                )));
            }
        }
        if self.len == 0 || self.len > (1 << 40) {
            return Err(ObjError::BadSpec(format!("length {}", self.len)));
        }
        let bytes = self.len.checked_mul(self.kind.size() as u64);
        if !matches!(bytes, Some(b) if b <= (1 << 40)) {
            return Err(ObjError::BadSpec("object too large".into()));
        }
        if self.segment_elems() * self.kind.size() as u64 > MAX_SEGMENT_BYTES
            && self.segment_elems() > 1
        {
            return Err(ObjError::BadSpec(format!(
                "segment of {} elements is over {MAX_SEGMENT_BYTES} bytes",
                self.seg_elems
            )));
        }
        Ok(())
    }

    /// Elements per segment after the default is applied (never 0, never above `len`).
    pub fn segment_elems(&self) -> u64 {
        let e = if self.seg_elems == 0 {
            (DEFAULT_SEGMENT_BYTES / self.kind.size() as u64).max(1)
        } else {
            u64::from(self.seg_elems)
        };
        e.min(self.len).max(1)
    }

    /// Number of segments.
    pub fn segments(&self) -> u64 {
        self.len.div_ceil(self.segment_elems())
    }

    /// Total bytes of one copy.
    pub fn bytes(&self) -> usize {
        (self.len as usize).saturating_mul(self.kind.size())
    }
}

/// Errors of the shared-object core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjError {
    #[error("malformed object message from {from}: {why}")]
    Malformed { from: NodeId, why: String },
    #[error("bad object specification: {0}")]
    BadSpec(String),
    #[error("no shared object {0:?}")]
    NoObject(ObjectId),
    #[error("element {idx} out of range for object {obj:?} of {len} elements")]
    OutOfRange { obj: ObjectId, idx: u64, len: u64 },
    #[error("element of {got} bytes for object {obj:?} of {want}-byte elements")]
    BadValue {
        obj: ObjectId,
        got: usize,
        want: usize,
    },
    #[error("a name for a shared object is already taken: {0:?}")]
    NameTaken(String),
    #[error("waiter {0} already has a call in progress")]
    Busy(u64),
    #[error("waiter {0} has no write in progress")]
    NoWrite(u64),
    #[error("MSI: {0}")]
    Incoherent(String),
    #[error("too many messages held for objects not created yet")]
    TooManyHeld,
}

/// How a call on the core went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// Done now, with this result.
    Ready(T),
    /// The caller waits: a later [`Action::Complete`] for its waiter says how to go on.
    Pending,
}

/// What a parked caller gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// A read is done: the element's bytes.
    Value(Vec<u8>),
    /// A write is done.
    Written,
    /// Permission changed: call [`ObjectsCore::write_step`] again.
    Retry,
    /// A name looked up by [`ObjectsCore::lookup`] now exists.
    Found(ObjectId),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `msg` (an encoded [`Msg`]) to `to`. `reliable == false` (NC updates): the engine
    /// does not need it delivered; a driver may use an unacknowledged path.
    Send {
        to: NodeId,
        msg: Vec<u8>,
        reliable: bool,
    },
    /// Wake the caller parked as `waiter`.
    Complete { waiter: u64, how: Completion },
}

/// One access as the core performed it (the trace the simulator checks against its
/// sequential reference; off unless [`ObjectsCore::set_trace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The calling thread's waiter id (for OU, the request id the caller sent).
    pub waiter: u64,
    pub obj: ObjectId,
    pub idx: u64,
    pub write: bool,
    pub value: Vec<u8>,
}

/// Event counters of one node's core (seed §4: "event counters").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ObjectStats {
    /// Reads served from this node's copy.
    pub reads_local: u64,
    /// Reads that needed other nodes (OU: at a remote owner; MSI: a read miss).
    pub reads_remote: u64,
    /// Writes done in this node's copy without messages (OU owner, MSI in `M`, NC).
    pub writes_local: u64,
    /// Writes that needed other nodes (OU: at a remote owner; MSI: a write upgrade).
    pub writes_remote: u64,
    /// OU accesses served here for other nodes (as owner).
    pub ou_served: u64,
    /// NC update notices sent and applied.
    pub nc_updates_sent: u64,
    pub nc_updates_applied: u64,
    /// MSI upgrades requested by this node: to `S`, to `M`.
    pub msi_upgrades_s: u64,
    pub msi_upgrades_m: u64,
    /// MSI: copies invalidated here (S or M to I), downgraded (M to S).
    pub msi_invalidations: u64,
    pub msi_downgrades: u64,
    /// MSI: segment copies sent to requesters.
    pub msi_data_sent: u64,
    /// MSI: sharer copies compared for agreement (the seed's dynamic check of invariant 1).
    pub msi_value_checks: u64,
    /// Figure 7: flagged writes completed by a handler that took write permission away (or,
    /// under OU, served another node's access first) instead of by `Write()` itself.
    pub flag_completions: u64,
    /// Messages held because they named an object not created here yet.
    pub held: u64,
}

impl ObjectStats {
    pub fn merge(&mut self, o: &ObjectStats) {
        self.reads_local += o.reads_local;
        self.reads_remote += o.reads_remote;
        self.writes_local += o.writes_local;
        self.writes_remote += o.writes_remote;
        self.ou_served += o.ou_served;
        self.nc_updates_sent += o.nc_updates_sent;
        self.nc_updates_applied += o.nc_updates_applied;
        self.msi_upgrades_s += o.msi_upgrades_s;
        self.msi_upgrades_m += o.msi_upgrades_m;
        self.msi_invalidations += o.msi_invalidations;
        self.msi_downgrades += o.msi_downgrades;
        self.msi_data_sent += o.msi_data_sent;
        self.msi_value_checks += o.msi_value_checks;
        self.flag_completions += o.flag_completions;
        self.held += o.held;
    }
}

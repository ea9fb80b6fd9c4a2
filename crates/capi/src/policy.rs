//! Allocation policies from C: `struct squall_policy` (protocol, coherence unit, updates or
//! invalidation, home placement; every field 0 means the job's default) and the allocations
//! that take one, `squall_malloc_with` and `squall_alloc_collective_with`.
//!
//! Owns: turning a C policy into a checked `squall::Policy`. Must not touch: protocol
//! internals (the runtime's router does the rest).
use crate::api::{node, placement};
use crate::error::{pointer, CapiError};
use squall::{Node, Policy, ProtocolKind};
use std::ffi::{c_int, c_void};

/// `squall_policy.protocol`: the job's default (`SQUALL_PROTOCOL`).
pub const SQUALL_PROTOCOL_DEFAULT: c_int = 0;
/// `squall_policy.protocol`: home-based lazy release consistency, multiple writers.
pub const SQUALL_PROTOCOL_HLRC: c_int = 1;
/// `squall_policy.protocol`: sequentially consistent single-writer invalidation.
pub const SQUALL_PROTOCOL_SC: c_int = 2;
/// `squall_policy.updates`: the job's default (`SQUALL_PUSH_UPDATES`, for `hlrc`).
pub const SQUALL_UPDATES_DEFAULT: c_int = 0;
/// `squall_policy.updates`: homes push the pages they wrote to the copies at barriers
/// (`hlrc` only).
pub const SQUALL_UPDATES_ON: c_int = 1;
/// `squall_policy.updates`: invalidation (copies are fetched again after a write).
pub const SQUALL_UPDATES_OFF: c_int = 2;

/// How an allocation is kept coherent. A zeroed struct is the job's default policy.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct squall_policy {
    /// A `SQUALL_PROTOCOL_*` value.
    pub protocol: c_int,
    /// A `SQUALL_UPDATES_*` value.
    pub updates: c_int,
    /// The coherence unit in pages: 0 or 1 (one page), or a power of two up to 64 for `hlrc`
    /// without updates: a fault on any page of a unit fetches the whole unit in one message
    /// and a write anywhere in it invalidates it whole (fewer fetches for data read in
    /// sweeps, more false sharing). The units are counted from the allocation's start and
    /// every page of a unit has the home of its first page. Other values are refused.
    pub unit_pages: u32,
    /// A `SQUALL_PLACE_*` value.
    pub placement: c_int,
    /// The placement's parameter (block pages for round-robin, the node for
    /// `SQUALL_PLACE_NODE`).
    pub placement_arg: u64,
}

/// The checked `squall::Policy` of `p` (null: the default).
fn to_policy(call: &'static str, n: &Node, p: *const squall_policy) -> Result<Policy, CapiError> {
    // SAFETY: the caller passes null or a pointer to a readable `squall_policy` (the
    // functions' contract).
    let c = unsafe { p.as_ref() }.copied().unwrap_or_default();
    let invalid = |why: String| CapiError::Invalid { call, why };
    let protocol = match c.protocol {
        SQUALL_PROTOCOL_DEFAULT => n.protocol(),
        SQUALL_PROTOCOL_HLRC => ProtocolKind::Hlrc,
        SQUALL_PROTOCOL_SC => ProtocolKind::Sc,
        k => {
            return Err(invalid(format!(
                "unknown protocol {k} (use one of the SQUALL_PROTOCOL_* values)"
            )))
        }
    };
    let mut policy = n.policy(protocol);
    policy.updates = match c.updates {
        SQUALL_UPDATES_DEFAULT => policy.updates,
        SQUALL_UPDATES_ON => true,
        SQUALL_UPDATES_OFF => false,
        k => {
            return Err(invalid(format!(
                "unknown updates value {k} (use one of the SQUALL_UPDATES_* values)"
            )))
        }
    };
    policy.unit_pages = c.unit_pages.max(1);
    if let Some(pl) = placement(call, c.placement, c.placement_arg)? {
        policy.placement = pl;
    }
    policy.check().map_err(|e| invalid(e.to_string()))?;
    Ok(policy)
}

/// Allocate `size` bytes of shared memory kept coherent by `*policy` (null: the job's
/// default), whatever the job's default protocol: e.g. `sc` for data threads share without
/// locks, updates for data every node reads after each barrier. Allocations under different
/// policies are synchronized by the same locks, barriers and atomics. Null on error (an
/// unknown value or a policy that cannot be honoured: `squall_last_error()` says which).
///
/// # Safety
/// `policy` is null or points to a `squall_policy`.
#[no_mangle]
pub unsafe extern "C" fn squall_malloc_with(
    size: usize,
    policy: *const squall_policy,
) -> *mut c_void {
    pointer("squall_malloc_with", || {
        let n = node()?;
        let p = to_policy("squall_malloc_with", &n, policy)?;
        Ok(n.alloc_policy(size.max(1), p)?.cast())
    })
}

/// Collective (SPMD) `squall_malloc_with`: every node calls it in the same order and gets
/// the same address, which rank 0 allocated under `*policy`. Null on error.
///
/// # Safety
/// `policy` is null or points to a `squall_policy`.
#[no_mangle]
pub unsafe extern "C" fn squall_alloc_collective_with(
    size: usize,
    policy: *const squall_policy,
) -> *mut c_void {
    pointer("squall_alloc_collective_with", || {
        let n = node()?;
        let p = to_policy("squall_alloc_collective_with", &n, policy)?;
        Ok(n.alloc_collective_policy(size.max(1), p)?.cast())
    })
}

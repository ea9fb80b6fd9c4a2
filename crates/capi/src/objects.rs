//! The C API of DSM/IP shared objects (seed 004 §3; `squall::objects`): typed objects split
//! into coherence segments, `Read()`/`Write()` atomic per element, the engine (OU, NC, MSI)
//! chosen per object. The C++ classes with the seed's names (`SharedInt`, `SharedIntArray`,
//! ..., `DSM_Lock`, `DSM_Barrier()`) are in `include/squall/dsmip.hpp` over these functions.
//!
//! Owns: argument checking at the C boundary. Must not touch: the object core.
use crate::error::{guard, status, CapiError, SQUALL_OK};
use squall::objects::{self, ElemKind, Engine, ObjectId, ObjectSpec};
use std::ffi::{c_char, c_int, c_void, CStr};

/// Engine OU: a fixed owner per segment performs every access (sequential consistency).
pub const SQUALL_ENGINE_OU: c_int = 0;
/// Engine NC: reads local, writes broadcast without acknowledgement (no consistency).
pub const SQUALL_ENGINE_NC: c_int = 1;
/// Engine MSI: broadcast-based modified/shared/invalid (sequential consistency, caching).
pub const SQUALL_ENGINE_MSI: c_int = 2;

/// Element type `int` (32-bit).
pub const SQUALL_ELEM_INT: c_int = 0;
/// Element type `int64_t`.
pub const SQUALL_ELEM_LONG: c_int = 1;
/// Element type `float`.
pub const SQUALL_ELEM_FLOAT: c_int = 2;
/// Element type `double`.
pub const SQUALL_ELEM_DOUBLE: c_int = 3;
/// Element type: a record of `record_size` bytes (1..65536), read and written whole.
pub const SQUALL_ELEM_RECORD: c_int = 4;

/// Event counters of this node's shared objects (`squall_object_stats`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SquallObjectStats {
    /// Reads served from this node's copy.
    pub reads_local: u64,
    /// Reads that needed other nodes (OU: remote owner; MSI: read miss).
    pub reads_remote: u64,
    /// Writes done without messages (OU owner, MSI in M, NC).
    pub writes_local: u64,
    /// Writes that needed other nodes (OU: remote owner; MSI: write upgrade).
    pub writes_remote: u64,
    /// OU accesses this node served as owner.
    pub ou_served: u64,
    /// NC update notices sent and applied.
    pub nc_updates_sent: u64,
    pub nc_updates_applied: u64,
    /// MSI upgrades this node asked for: to S, to M.
    pub msi_upgrades_s: u64,
    pub msi_upgrades_m: u64,
    /// MSI copies invalidated here, downgraded M to S here.
    pub msi_invalidations: u64,
    pub msi_downgrades: u64,
    /// MSI segment copies sent to requesters.
    pub msi_data_sent: u64,
    /// MSI sharer copies compared for agreement.
    pub msi_value_checks: u64,
    /// Figure 7: flagged writes a handler completed before permission left.
    pub flag_completions: u64,
}

fn spec(
    kind: c_int,
    record_size: u32,
    len: u64,
    seg_elems: u32,
    engine: c_int,
) -> Result<ObjectSpec, CapiError> {
    let bad = |why: String| CapiError::Invalid {
        call: "squall_object_create",
        why,
    };
    let kind = match kind {
        SQUALL_ELEM_INT => ElemKind::Int,
        SQUALL_ELEM_LONG => ElemKind::Long,
        SQUALL_ELEM_FLOAT => ElemKind::Float,
        SQUALL_ELEM_DOUBLE => ElemKind::Double,
        SQUALL_ELEM_RECORD => ElemKind::Record(record_size),
        k => return Err(bad(format!("element type {k}"))),
    };
    let engine = match engine {
        SQUALL_ENGINE_OU => Engine::Ou,
        SQUALL_ENGINE_NC => Engine::Nc,
        SQUALL_ENGINE_MSI => Engine::Msi,
        e => return Err(bad(format!("engine {e} (SQUALL_ENGINE_OU, _NC or _MSI)"))),
    };
    let s = ObjectSpec {
        kind,
        len,
        seg_elems,
        engine,
    };
    s.check().map_err(|e| bad(e.to_string()))?;
    Ok(s)
}

fn id_result(call: &'static str, f: impl FnOnce() -> Result<ObjectId, CapiError>) -> i64 {
    guard(call, i64::from, || f().map(|id| i64::from(id.0)))
}

fn name_of(call: &'static str, name: *const c_char) -> Result<String, CapiError> {
    if name.is_null() {
        return Err(CapiError::Invalid {
            call,
            why: "null name".into(),
        });
    }
    // SAFETY: the caller passes a NUL-terminated string (checked non-null above).
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str()
        .map(str::to_owned)
        .map_err(|_| CapiError::Invalid {
            call,
            why: "name not UTF-8".into(),
        })
}

/// Create a shared object collectively: every node calls it with the same arguments in the
/// same order and gets the same id. `kind`: `SQUALL_ELEM_*` (`record_size` bytes per element
/// for `SQUALL_ELEM_RECORD`, ignored otherwise); `len` elements; `seg_elems` elements per
/// coherence segment (0: about 256 bytes); `engine`: `SQUALL_ENGINE_*`. Returns the id (> 0)
/// or a negative `SQUALL_ERR_*`.
#[no_mangle]
pub extern "C" fn squall_object_create(
    kind: c_int,
    record_size: u32,
    len: u64,
    seg_elems: u32,
    engine: c_int,
) -> i64 {
    id_result("squall_object_create", || {
        Ok(objects::create(spec(
            kind,
            record_size,
            len,
            seg_elems,
            engine,
        )?)?)
    })
}

/// Create a shared object on this node alone under `name` (other nodes: `squall_object_lookup`).
/// Returns the id (> 0) or a negative `SQUALL_ERR_*`.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn squall_object_create_named(
    name: *const c_char,
    kind: c_int,
    record_size: u32,
    len: u64,
    seg_elems: u32,
    engine: c_int,
) -> i64 {
    id_result("squall_object_create_named", || {
        let n = name_of("squall_object_create_named", name)?;
        Ok(objects::create_named(
            &n,
            spec(kind, record_size, len, seg_elems, engine)?,
        )?)
    })
}

/// The id of the object another node created under `name`; waits until it is known here.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn squall_object_lookup(name: *const c_char) -> i64 {
    id_result("squall_object_lookup", || {
        let n = name_of("squall_object_lookup", name)?;
        Ok(objects::lookup(&n)?)
    })
}

/// Number of elements of object `id` (or a negative `SQUALL_ERR_*`).
#[no_mangle]
pub extern "C" fn squall_object_len(id: u32) -> i64 {
    guard("squall_object_len", i64::from, || {
        Ok(objects::spec(ObjectId(id))?.len as i64)
    })
}

/// `Read()` of element `idx` of object `id` into `out` (`size` bytes: the element size).
///
/// # Safety
/// `out` must point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn squall_object_read(
    id: u32,
    idx: u64,
    out: *mut c_void,
    size: usize,
) -> c_int {
    status("squall_object_read", || {
        if out.is_null() || size == 0 {
            return Err(CapiError::Invalid {
                call: "squall_object_read",
                why: "null or empty buffer".into(),
            });
        }
        // SAFETY: the caller gives a writable buffer of `size` bytes (checked non-null).
        let buf = unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), size) };
        objects::read_into(ObjectId(id), idx, buf)?;
        Ok(SQUALL_OK)
    })
}

/// `Write()` of element `idx` of object `id` from `value` (`size` bytes: the element size).
///
/// # Safety
/// `value` must point to `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn squall_object_write(
    id: u32,
    idx: u64,
    value: *const c_void,
    size: usize,
) -> c_int {
    status("squall_object_write", || {
        if value.is_null() || size == 0 {
            return Err(CapiError::Invalid {
                call: "squall_object_write",
                why: "null or empty value".into(),
            });
        }
        // SAFETY: the caller gives a readable buffer of `size` bytes (checked non-null).
        let buf = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) };
        objects::write_from(ObjectId(id), idx, buf)?;
        Ok(SQUALL_OK)
    })
}

/// `Read()` of one element of a `SQUALL_ELEM_INT` object into `*out`.
///
/// # Safety
/// `out` must point to a writable element.
#[no_mangle]
pub unsafe extern "C" fn squall_object_read_int(id: u32, idx: u64, out: *mut i32) -> c_int {
    // SAFETY: `out` points to one writable element (the caller's contract).
    unsafe { squall_object_read(id, idx, out.cast::<c_void>(), std::mem::size_of::<i32>()) }
}

/// `Write()` of one element of a `SQUALL_ELEM_INT` object.
#[no_mangle]
pub extern "C" fn squall_object_write_int(id: u32, idx: u64, value: i32) -> c_int {
    let b = value.to_ne_bytes();
    // SAFETY: `b` is a local buffer of `b.len()` bytes.
    unsafe { squall_object_write(id, idx, b.as_ptr().cast::<c_void>(), b.len()) }
}

/// `Read()` of one element of a `SQUALL_ELEM_LONG` object into `*out`.
///
/// # Safety
/// `out` must point to a writable element.
#[no_mangle]
pub unsafe extern "C" fn squall_object_read_long(id: u32, idx: u64, out: *mut i64) -> c_int {
    // SAFETY: `out` points to one writable element (the caller's contract).
    unsafe { squall_object_read(id, idx, out.cast::<c_void>(), std::mem::size_of::<i64>()) }
}

/// `Write()` of one element of a `SQUALL_ELEM_LONG` object.
#[no_mangle]
pub extern "C" fn squall_object_write_long(id: u32, idx: u64, value: i64) -> c_int {
    let b = value.to_ne_bytes();
    // SAFETY: `b` is a local buffer of `b.len()` bytes.
    unsafe { squall_object_write(id, idx, b.as_ptr().cast::<c_void>(), b.len()) }
}

/// `Read()` of one element of a `SQUALL_ELEM_FLOAT` object into `*out`.
///
/// # Safety
/// `out` must point to a writable element.
#[no_mangle]
pub unsafe extern "C" fn squall_object_read_float(id: u32, idx: u64, out: *mut f32) -> c_int {
    // SAFETY: `out` points to one writable element (the caller's contract).
    unsafe { squall_object_read(id, idx, out.cast::<c_void>(), std::mem::size_of::<f32>()) }
}

/// `Write()` of one element of a `SQUALL_ELEM_FLOAT` object.
#[no_mangle]
pub extern "C" fn squall_object_write_float(id: u32, idx: u64, value: f32) -> c_int {
    let b = value.to_ne_bytes();
    // SAFETY: `b` is a local buffer of `b.len()` bytes.
    unsafe { squall_object_write(id, idx, b.as_ptr().cast::<c_void>(), b.len()) }
}

/// `Read()` of one element of a `SQUALL_ELEM_DOUBLE` object into `*out`.
///
/// # Safety
/// `out` must point to a writable element.
#[no_mangle]
pub unsafe extern "C" fn squall_object_read_double(id: u32, idx: u64, out: *mut f64) -> c_int {
    // SAFETY: `out` points to one writable element (the caller's contract).
    unsafe { squall_object_read(id, idx, out.cast::<c_void>(), std::mem::size_of::<f64>()) }
}

/// `Write()` of one element of a `SQUALL_ELEM_DOUBLE` object.
#[no_mangle]
pub extern "C" fn squall_object_write_double(id: u32, idx: u64, value: f64) -> c_int {
    let b = value.to_ne_bytes();
    // SAFETY: `b` is a local buffer of `b.len()` bytes.
    unsafe { squall_object_write(id, idx, b.as_ptr().cast::<c_void>(), b.len()) }
}

/// This node's shared-object event counters into `*out`.
///
/// # Safety
/// `out` must point to a writable `SquallObjectStats`.
#[no_mangle]
pub unsafe extern "C" fn squall_object_stats(out: *mut SquallObjectStats) -> c_int {
    status("squall_object_stats", || {
        if out.is_null() {
            return Err(CapiError::Invalid {
                call: "squall_object_stats",
                why: "null pointer".into(),
            });
        }
        let s = objects::stats()?;
        let c = SquallObjectStats {
            reads_local: s.reads_local,
            reads_remote: s.reads_remote,
            writes_local: s.writes_local,
            writes_remote: s.writes_remote,
            ou_served: s.ou_served,
            nc_updates_sent: s.nc_updates_sent,
            nc_updates_applied: s.nc_updates_applied,
            msi_upgrades_s: s.msi_upgrades_s,
            msi_upgrades_m: s.msi_upgrades_m,
            msi_invalidations: s.msi_invalidations,
            msi_downgrades: s.msi_downgrades,
            msi_data_sent: s.msi_data_sent,
            msi_value_checks: s.msi_value_checks,
            flag_completions: s.flag_completions,
        };
        // SAFETY: `out` is non-null and points to a caller's `SquallObjectStats`.
        unsafe { out.write(c) };
        Ok(SQUALL_OK)
    })
}

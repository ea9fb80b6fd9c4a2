//! The CRL 1.0 C interface (`crl.h`, `pkg-config squall-crl`) over Squall's regions
//! (`squall::regions`): `crl_init`, `crl_self_addr`/`crl_num_nodes`, `rgn_create`,
//! `rgn_delete`, `rgn_map`/`rgn_unmap`, `rgn_rid`/`rgn_size`, the read and write brackets,
//! `rgn_flush`, `rgn_barrier`, `rgn_bcast_send`/`recv` and the `rgn_reduce_d*` reductions.
//!
//! CRL's calls return nothing, so a failing call (a bad region id, a bracket that was not
//! started, a lost node) prints `crl: CALL: why` and ends the process with status 1, as CRL
//! itself does. `rid_t` is CRL's `unsigned`: the home node in the top 10 bits, the home's
//! region number below (up to 1024 nodes and 4,194,303 regions per node).
//! Owns the C boundary of regions: the table of mapped pointers; must not touch the region
//! protocol.

use crate::error::{guard, CapiError};
use squall::regions::{ReduceOp, Region};
use squall::{Node, NodeId, RegionId};
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock};

/// CRL's region id.
#[allow(non_camel_case_types)]
pub type rid_t = c_uint;

/// This node's number (CRL's global variable), set by `crl_init`.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut crl_self_addr: c_int = 0;

/// The number of nodes (CRL's global variable), set by `crl_init`.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut crl_num_nodes: c_int = 0;

const HOME_SHIFT: u32 = 22;
const SEQ_MASK: u64 = (1 << HOME_SHIFT) - 1;
const MAX_HOMES: u64 = 1 << (32 - HOME_SHIFT);

fn to_c(rid: RegionId) -> Result<rid_t, CapiError> {
    let seq = rid.0 & ((1 << 48) - 1);
    let home = u64::from(rid.home().0);
    if seq > SEQ_MASK || home >= MAX_HOMES {
        return Err(CapiError::Invalid {
            call: "rgn_create",
            why: format!("{rid} does not fit CRL's 32-bit rid_t"),
        });
    }
    Ok(((home << HOME_SHIFT) | seq) as rid_t)
}

fn from_c(rid: rid_t) -> RegionId {
    let r = u64::from(rid);
    RegionId::new(NodeId((r >> HOME_SHIFT) as u16), r & SEQ_MASK)
}

/// The regions mapped through this API, by the address `rgn_map` returned (a region mapped
/// twice has two entries under one address; `rgn_unmap` drops one).
fn mapped() -> &'static Mutex<HashMap<usize, Vec<Arc<Region>>>> {
    static T: OnceLock<Mutex<HashMap<usize, Vec<Arc<Region>>>>> = OnceLock::new();
    T.get_or_init(Mutex::default)
}

/// Run CRL call `call`; on failure print why and end the process (CRL's calls cannot fail).
fn crl<T>(call: &'static str, f: impl FnOnce() -> Result<T, CapiError>) -> T {
    guard(
        call,
        |_| {
            // SAFETY: squall_last_error's text is a valid NUL-terminated string.
            let why = unsafe { std::ffi::CStr::from_ptr(crate::error::last_error_ptr()) };
            eprintln!("crl: {call}: {}", why.to_string_lossy());
            std::process::exit(1)
        },
        f,
    )
}

fn node() -> Result<Node, CapiError> {
    crate::api::node()
}

/// Run `f` on the region mapped at `rgn`.
fn with_region<T>(
    call: &'static str,
    rgn: *mut c_void,
    f: impl FnOnce(&Region) -> Result<T, CapiError>,
) -> Result<T, CapiError> {
    let t = mapped().lock().map_err(|_| CapiError::Panic {
        call,
        why: "region table poisoned".into(),
    })?;
    let r = t
        .get(&(rgn as usize))
        .and_then(|v| v.first())
        .ok_or_else(|| CapiError::Invalid {
            call,
            why: format!("{rgn:p} is not a mapped region (use the pointer rgn_map returned)"),
        })?;
    // The brackets wait for other nodes: do not hold the table meanwhile.
    let r = Arc::clone(r);
    drop(t);
    f(&r)
}

extern "C" fn finalize_at_exit() {
    crate::stack::on_private(|| {
        if let Ok(n) = squall::node() {
            if n.endpoint().is_service_thread() {
                return;
            }
            // Unmap first: the table's regions hold the node.
            if let Ok(mut t) = mapped().lock() {
                t.clear();
            }
            if let Err(e) = n.finalize() {
                eprintln!("crl: {}: finalize at exit: {e}", n.rank());
            }
        }
    });
}

/// Start CRL on this node (every node calls it first): sets `crl_self_addr` and
/// `crl_num_nodes`; the node finalizes when the process exits.
#[no_mangle]
pub extern "C" fn crl_init() {
    crl("crl_init", || {
        crate::api::default_single_node();
        let first = squall::node().is_err();
        let n = squall::init()?;
        // SAFETY: written once here, before the program reads them (CRL's contract: call
        // crl_init first); plain integer stores.
        unsafe {
            crl_self_addr = c_int::from(n.rank().0);
            crl_num_nodes = c_int::from(n.size());
        }
        if first {
            // SAFETY: registering a plain extern "C" function with no arguments.
            if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                eprintln!("crl: could not register the finalize-at-exit handler");
            }
        }
        Ok(())
    })
}

/// Create a region of `size` bytes (zero-filled) homed on this node; map it to use it.
#[no_mangle]
pub extern "C" fn rgn_create(size: c_uint) -> rid_t {
    crl("rgn_create", || {
        let rid = node()?.region_create(size as usize)?;
        to_c(rid)
    })
}

/// Delete a region: nobody may use it afterwards.
#[no_mangle]
pub extern "C" fn rgn_delete(rid: rid_t) {
    crl("rgn_delete", || Ok(node()?.region_delete(from_c(rid))?))
}

/// Map a region on this node: the address of its bytes (read or write them only inside
/// brackets). Mapping a region twice returns the same address.
#[no_mangle]
pub extern "C" fn rgn_map(rid: rid_t) -> *mut c_void {
    crl("rgn_map", || {
        let r = node()?.region_map(from_c(rid))?;
        let p = r.as_ptr() as usize;
        mapped()
            .lock()
            .map_err(|_| CapiError::Panic {
                call: "rgn_map",
                why: "region table poisoned".into(),
            })?
            .entry(p)
            .or_default()
            .push(Arc::new(r));
        Ok(p as *mut c_void)
    })
}

/// Unmap a region mapped with `rgn_map` (its copy stays cached on this node).
#[no_mangle]
pub extern "C" fn rgn_unmap(rgn: *mut c_void) {
    crl("rgn_unmap", || {
        let mut t = mapped().lock().map_err(|_| CapiError::Panic {
            call: "rgn_unmap",
            why: "region table poisoned".into(),
        })?;
        let v = t
            .get_mut(&(rgn as usize))
            .ok_or_else(|| CapiError::Invalid {
                call: "rgn_unmap",
                why: format!("{rgn:p} is not a mapped region"),
            })?;
        let r = v.pop();
        if v.is_empty() {
            t.remove(&(rgn as usize));
        }
        drop(t);
        drop(r);
        Ok(())
    })
}

/// The id of the region mapped at `rgn`.
#[no_mangle]
pub extern "C" fn rgn_rid(rgn: *mut c_void) -> rid_t {
    crl("rgn_rid", || with_region("rgn_rid", rgn, |r| to_c(r.rid())))
}

/// The size in bytes of the region mapped at `rgn`.
#[no_mangle]
pub extern "C" fn rgn_size(rgn: *mut c_void) -> c_uint {
    crl("rgn_size", || {
        with_region("rgn_size", rgn, |r| Ok(r.size() as c_uint))
    })
}

/// Start a read operation: waits until this node holds a current copy and nobody writes it.
#[no_mangle]
pub extern "C" fn rgn_start_read(rgn: *mut c_void) {
    crl("rgn_start_read", || {
        with_region("rgn_start_read", rgn, |r| Ok(r.start_read()?))
    })
}

/// End a read operation.
#[no_mangle]
pub extern "C" fn rgn_end_read(rgn: *mut c_void) {
    crl("rgn_end_read", || {
        // SAFETY: the C program ends the bracket it started; no Rust guard exists for it.
        with_region("rgn_end_read", rgn, |r| Ok(unsafe { r.end_read() }?))
    })
}

/// Start a write operation: waits until this node owns the region and nobody else reads or
/// writes it.
#[no_mangle]
pub extern "C" fn rgn_start_write(rgn: *mut c_void) {
    crl("rgn_start_write", || {
        with_region("rgn_start_write", rgn, |r| Ok(r.start_write()?))
    })
}

/// End a write operation (the data stays here until another node asks for it).
#[no_mangle]
pub extern "C" fn rgn_end_write(rgn: *mut c_void) {
    crl("rgn_end_write", || {
        // SAFETY: the C program ends the bracket it started; no Rust guard exists for it.
        with_region("rgn_end_write", rgn, |r| Ok(unsafe { r.end_write() }?))
    })
}

/// Send this node's copy of the region home and drop it here (outside any operation).
#[no_mangle]
pub extern "C" fn rgn_flush(rgn: *mut c_void) {
    crl("rgn_flush", || {
        with_region("rgn_flush", rgn, |r| Ok(r.flush()?))
    })
}

/// Barrier of every node.
#[no_mangle]
pub extern "C" fn rgn_barrier() {
    crl("rgn_barrier", || Ok(node()?.barrier()?))
}

/// Broadcast `nbytes` at `buf` to every other node (each calls `rgn_bcast_recv`).
///
/// # Safety
/// `buf` points to `nbytes` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rgn_bcast_send(nbytes: c_int, buf: *mut c_void) {
    crl("rgn_bcast_send", || {
        let n = usize::try_from(nbytes).map_err(|_| CapiError::Invalid {
            call: "rgn_bcast_send",
            why: format!("{nbytes} bytes"),
        })?;
        let data = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's promise: `buf` has `n` readable bytes.
            unsafe { std::slice::from_raw_parts(buf as *const u8, n) }
        };
        Ok(node()?.region_bcast_send(data)?)
    })
}

/// Receive the next broadcast (of `nbytes` bytes) from another node into `buf`.
///
/// # Safety
/// `buf` points to `nbytes` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rgn_bcast_recv(nbytes: c_int, buf: *mut c_void) {
    crl("rgn_bcast_recv", || {
        let n = usize::try_from(nbytes).map_err(|_| CapiError::Invalid {
            call: "rgn_bcast_recv",
            why: format!("{nbytes} bytes"),
        })?;
        let d = node()?.region_bcast_recv(n)?;
        if n > 0 {
            // SAFETY: the caller's promise: `buf` has `n` writable bytes; `d` has `n`.
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), buf as *mut u8, n) };
        }
        Ok(())
    })
}

fn reduce(call: &'static str, op: ReduceOp, v: f64) -> f64 {
    crl(call, || Ok(node()?.region_reduce(op, v)?))
}

/// The sum of every node's `arg` (every node calls; every node gets the sum).
#[no_mangle]
pub extern "C" fn rgn_reduce_dadd(arg: f64) -> f64 {
    reduce("rgn_reduce_dadd", ReduceOp::Add, arg)
}

/// The smallest of every node's `arg`.
#[no_mangle]
pub extern "C" fn rgn_reduce_dmin(arg: f64) -> f64 {
    reduce("rgn_reduce_dmin", ReduceOp::Min, arg)
}

/// The largest of every node's `arg`.
#[no_mangle]
pub extern "C" fn rgn_reduce_dmax(arg: f64) -> f64 {
    reduce("rgn_reduce_dmax", ReduceOp::Max, arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rids_round_trip_through_rid_t() {
        for (home, seq) in [(0u16, 1u64), (3, 77), (1023, SEQ_MASK)] {
            let rid = RegionId::new(NodeId(home), seq);
            let c = to_c(rid).map_err(|e| e.to_string());
            assert_eq!(c.map(from_c), Ok(rid));
        }
        assert!(to_c(RegionId::new(NodeId(1024), 1)).is_err());
        assert!(to_c(RegionId::new(NodeId(0), SEQ_MASK + 1)).is_err());
    }
}

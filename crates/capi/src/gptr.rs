//! The Split-C style C API of `squall.h`: global pointers `(node, address)` into each node's
//! symmetric memory, spread arrays dealt block-cyclically, blocking read and write,
//! split-phase get and put completed by `squall_gptr_sync()`, one-way stores completed by
//! `squall_store_sync(bytes)` / `squall_all_store_sync()`, transfers of any size (bulk), and
//! remote atomics executed at the target. Runs on the runtime's one-sided operations
//! (`squall::Gptr`), the same engine as the OpenSHMEM layer.
//!
//! Owns the C boundary of these calls; must not touch the engine (everything goes through
//! `squall::Gptr`).
#![allow(clippy::missing_safety_doc)]
use crate::error::{guard, status, CapiError, SQUALL_OK};
use squall::{AtomicKind, Gptr, NodeId, Width};
use std::ffi::{c_int, c_void};

/// Atomic operation codes of `squall_gptr_atomic` (the old value is always returned).
pub const SQUALL_GPTR_FETCH: c_int = 0;
/// Write `value`.
pub const SQUALL_GPTR_SET: c_int = 1;
/// Add `value` (wrapping).
pub const SQUALL_GPTR_ADD: c_int = 2;
/// Write `value` (returns the old word).
pub const SQUALL_GPTR_SWAP: c_int = 3;
/// Write `value` if the word equals `cond`.
pub const SQUALL_GPTR_COMPARE_SWAP: c_int = 4;
/// Bitwise and, or, xor with `value`.
pub const SQUALL_GPTR_AND: c_int = 5;
pub const SQUALL_GPTR_OR: c_int = 6;
pub const SQUALL_GPTR_XOR: c_int = 7;

/// A global pointer: an address in the symmetric memory of `node` (a block of
/// `squall_all_alloc`, a spread array, or a global variable of a non-PIE program).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SquallGptr {
    pub node: u32,
    pub addr: *mut c_void,
}

/// A spread array: `len` elements of `elem_size` bytes dealt to the `nodes` nodes
/// `block` elements at a time (block b on node b mod nodes). `base` is the same on every node.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SquallSpread {
    pub base: *mut c_void,
    pub len: usize,
    pub elem_size: usize,
    pub block: usize,
    pub nodes: u32,
}

fn g() -> Result<&'static Gptr, CapiError> {
    Ok(crate::api::node()?.gptr()?)
}

fn node_of(g: &Gptr, call: &'static str, n: u32) -> Result<NodeId, CapiError> {
    if n >= u32::from(g.size()) {
        return Err(CapiError::Invalid {
            call,
            why: format!("node {n} outside a job of {} nodes", g.size()),
        });
    }
    Ok(NodeId(n as u16))
}

/// # Safety
/// `p..p+n` readable for the call (or `n` 0).
unsafe fn src<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if p.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: per the contract above.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

/// # Safety
/// `p..p+n` writable and untouched by others for the call (or `n` 0).
unsafe fn dst<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if p.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: per the contract above.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// Collective (after `squall_init`): start the one-sided operations on every node. Global
/// variables become targets when the program's data is at the same address on every node
/// (link with `-no-pie`); returns 1 then, 0 if only the symmetric heap is.
#[no_mangle]
pub extern "C" fn squall_gptr_start() -> c_int {
    status("squall_gptr_start", || {
        let g = g()?;
        let globals = g.check_program_data()?;
        g.node().barrier()?;
        Ok(c_int::from(globals))
    })
}

/// Collective: `size` bytes of symmetric memory (the same address on every node, each node
/// its own copy). NULL on failure.
#[no_mangle]
pub extern "C" fn squall_all_alloc(size: usize) -> *mut c_void {
    crate::error::pointer("squall_all_alloc", || {
        Ok(g()?.alloc(size.max(1), 16)? as *mut c_void)
    })
}

/// Collective: free a block of `squall_all_alloc`.
#[no_mangle]
pub extern "C" fn squall_all_free(ptr: *mut c_void) -> c_int {
    status("squall_all_free", || {
        g()?.free(ptr as usize)?;
        Ok(SQUALL_OK)
    })
}

/// Collective: allocate a spread array into `*out`.
#[no_mangle]
pub unsafe extern "C" fn squall_spread_alloc(
    len: usize,
    elem_size: usize,
    block: usize,
    out: *mut SquallSpread,
) -> c_int {
    status("squall_spread_alloc", || {
        if out.is_null() || elem_size == 0 {
            return Err(CapiError::Invalid {
                call: "squall_spread_alloc",
                why: "null output or zero element size".into(),
            });
        }
        let g = g()?;
        let block = block.max(1);
        let nodes = usize::from(g.size().max(1));
        let per_node = len.div_ceil(block).div_ceil(nodes) * block * elem_size;
        let base = g.alloc(per_node.max(1), elem_size.next_power_of_two().max(16))?;
        // SAFETY: `out` is a valid SquallSpread pointer (checked non-null above).
        unsafe {
            *out = SquallSpread {
                base: base as *mut c_void,
                len,
                elem_size,
                block,
                nodes: nodes as u32,
            }
        };
        Ok(SQUALL_OK)
    })
}

/// Collective: free a spread array.
#[no_mangle]
pub unsafe extern "C" fn squall_spread_free(a: *const SquallSpread) -> c_int {
    status("squall_spread_free", || {
        // SAFETY: the caller passes the array `squall_spread_alloc` filled (or null).
        let a = unsafe { a.as_ref() }.ok_or(CapiError::Invalid {
            call: "squall_spread_free",
            why: "null array".into(),
        })?;
        g()?.free(a.base as usize)?;
        Ok(SQUALL_OK)
    })
}

/// The global pointer of element `i` of a spread array (`node` = u32::MAX if out of bounds).
#[no_mangle]
pub unsafe extern "C" fn squall_spread_ptr(a: *const SquallSpread, i: usize) -> SquallGptr {
    // SAFETY: the caller passes the array `squall_spread_alloc` filled (or null).
    match unsafe { a.as_ref() } {
        Some(a) if i < a.len && a.nodes > 0 => {
            let nodes = a.nodes as usize;
            let b = i / a.block;
            let local = (b / nodes) * a.block + i % a.block;
            SquallGptr {
                node: (b % nodes) as u32,
                addr: (a.base as usize + local * a.elem_size) as *mut c_void,
            }
        }
        _ => SquallGptr {
            node: u32::MAX,
            addr: std::ptr::null_mut(),
        },
    }
}

/// Blocking read of `n` bytes (any size) at `from` into local `to`.
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_read(to: *mut c_void, from: SquallGptr, n: usize) -> c_int {
    status("squall_gptr_read", || {
        let g = g()?;
        let node = node_of(g, "squall_gptr_read", from.node)?;
        // SAFETY: the caller's `to` holds `n` writable bytes.
        g.get(node, from.addr as usize, unsafe { dst(to, n) })?;
        Ok(SQUALL_OK)
    })
}

/// Blocking write of `n` bytes from local `from` to `to`: returns when applied there.
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_write(to: SquallGptr, from: *const c_void, n: usize) -> c_int {
    status("squall_gptr_write", || {
        let g = g()?;
        let node = node_of(g, "squall_gptr_write", to.node)?;
        // SAFETY: the caller's `from` holds `n` readable bytes.
        g.put(node, to.addr as usize, unsafe { src(from, n) })?;
        Ok(SQUALL_OK)
    })
}

/// Split-phase get (Split-C `:=` / `bulk_get`): local `to` holds the data after
/// `squall_gptr_sync()` and must not be touched before.
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_get(to: *mut c_void, from: SquallGptr, n: usize) -> c_int {
    status("squall_gptr_get", || {
        let g = g()?;
        let node = node_of(g, "squall_gptr_get", from.node)?;
        if n == 0 {
            return Ok(SQUALL_OK);
        }
        let at = to as usize;
        g.get_nb(
            node,
            from.addr as usize,
            n,
            Box::new(move |b: &[u8]| {
                // SAFETY: the caller's `to` holds `n` writable bytes untouched until sync,
                // which waits for this copy.
                let out = unsafe { dst(at as *mut c_void, b.len().min(n)) };
                out.copy_from_slice(&b[..out.len()]);
            }),
        )?;
        Ok(SQUALL_OK)
    })
}

/// Split-phase put (Split-C `:=` / `bulk_put`): `from` may be reused at once; applied at the
/// target by the next `squall_gptr_sync()`.
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_put(to: SquallGptr, from: *const c_void, n: usize) -> c_int {
    status("squall_gptr_put", || {
        let g = g()?;
        let node = node_of(g, "squall_gptr_put", to.node)?;
        // SAFETY: the caller's `from` holds `n` readable bytes.
        g.put_nb(node, to.addr as usize, unsafe { src(from, n) })?;
        Ok(SQUALL_OK)
    })
}

/// One-way store (Split-C `:-` / `bulk_store`): no answer; the target counts the bytes
/// (`squall_store_sync`), `squall_all_store_sync` completes every store of the job.
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_store(to: SquallGptr, from: *const c_void, n: usize) -> c_int {
    status("squall_gptr_store", || {
        let g = g()?;
        let node = node_of(g, "squall_gptr_store", to.node)?;
        // SAFETY: the caller's `from` holds `n` readable bytes.
        g.store(node, to.addr as usize, unsafe { src(from, n) })?;
        Ok(SQUALL_OK)
    })
}

/// Split-C `sync()`: wait until every get and put this node issued before completed; reports
/// the first failure of one (a refused address) since the last sync.
#[no_mangle]
pub extern "C" fn squall_gptr_sync() -> c_int {
    status("squall_gptr_sync", || {
        g()?.sync()?;
        Ok(SQUALL_OK)
    })
}

/// Split-C `store_sync(bytes)`: wait until `bytes` bytes have been stored into this node (by
/// any node) since they were last counted, and count them off.
#[no_mangle]
pub extern "C" fn squall_store_sync(bytes: usize) -> c_int {
    status("squall_store_sync", || {
        g()?.store_sync(bytes as u64)?;
        Ok(SQUALL_OK)
    })
}

/// Split-C `all_store_sync()`: a barrier of every node that also completes every store sent
/// before it, to anyone.
#[no_mangle]
pub extern "C" fn squall_all_store_sync() -> c_int {
    status("squall_all_store_sync", || {
        g()?.all_store_sync()?;
        Ok(SQUALL_OK)
    })
}

/// A remote atomic on the 4- or 8-byte word at `at`, executed at its node: `op` one of
/// `SQUALL_GPTR_*`; the old value in `*old` (if not null).
#[no_mangle]
pub unsafe extern "C" fn squall_gptr_atomic(
    at: SquallGptr,
    width: usize,
    op: c_int,
    value: u64,
    cond: u64,
    old: *mut u64,
) -> c_int {
    guard(
        "squall_gptr_atomic",
        |c| c,
        || {
            let g = g()?;
            let node = node_of(g, "squall_gptr_atomic", at.node)?;
            let inv = |why: String| CapiError::Invalid {
                call: "squall_gptr_atomic",
                why,
            };
            let w = Width::from_bytes(width as u64).map_err(|e| inv(e.to_string()))?;
            let k = u8::try_from(op)
                .ok()
                .and_then(AtomicKind::from_u8)
                .ok_or_else(|| inv(format!("operation {op}")))?;
            let v = g.atomic(node, at.addr as usize, w, k, value, cond)?;
            if !old.is_null() {
                // SAFETY: the caller passes a valid uint64_t pointer (or null).
                unsafe { *old = v };
            }
            Ok(SQUALL_OK)
        },
    )
}

//! The OpenSHMEM C API (`include/shmem.h`, hand-written: the standard's names), a thin layer
//! over the runtime's one-sided operations (`squall::Gptr`), the way OSHMPI layers OpenSHMEM
//! over MPI-3 RMA: the entry points here are the few real operations (start-up, symmetric
//! heap, `putmem`/`getmem` and their `_nbi` forms, a fetching and a non-fetching atomic,
//! fence/quiet/barriers, `wait_until`, broadcast, one reduction entry point, locks); the header
//! generates the typed forms (`shmem_int_put`, `shmem_long_atomic_fetch_add`,
//! `shmem_double_sum_to_all`, ...) from them as `static inline` functions.
//!
//! OpenSHMEM's functions return `void`: a failure (a refused address, a bad active set, a
//! call before `shmem_init`) ends the whole job with a message naming the call, the node and
//! the address, as SHMEM implementations do. Owns the C boundary of the SHMEM names; must not
//! touch the engine (everything goes through `squall::Gptr`).
#![allow(clippy::missing_safety_doc)]
use crate::error::{guard, last_error_ptr, CapiError};
use squall::{ActiveSet, AtomicKind, Cmp, Gptr, LockId, NodeId, ReduceOp, Width};
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::OnceLock;

static SHMEM: OnceLock<&'static Gptr> = OnceLock::new();

/// The started layer, or the error of a call before `shmem_init`.
fn shmem() -> Result<&'static Gptr, CapiError> {
    SHMEM.get().copied().ok_or(CapiError::Invalid {
        call: "shmem",
        why: "call shmem_init() first (and start the program with `squall run -n N prog`)".into(),
    })
}

/// End the job with the calling thread's last error (a SHMEM call has no way to return one).
fn die(call: &'static str) -> ! {
    // SAFETY: last_error_ptr returns this thread's NUL-terminated last error text.
    let text = unsafe { CStr::from_ptr(last_error_ptr()) }
        .to_string_lossy()
        .into_owned();
    let what = format!("{call}: {text}");
    match SHMEM.get() {
        Some(g) => g.fail_job(&what),
        None => {
            eprintln!("shmem: {what}");
            std::process::exit(1)
        }
    }
}

/// Run a SHMEM call: the result, or the end of the job with its error.
fn run<T>(call: &'static str, f: impl FnOnce(&'static Gptr) -> Result<T, CapiError>) -> T {
    guard(call, |_| die(call), move || f(shmem()?))
}

fn pe_id(g: &Gptr, call: &'static str, pe: c_int) -> Result<NodeId, CapiError> {
    if pe < 0 || pe >= c_int::from(g.size()) {
        return Err(CapiError::Invalid {
            call,
            why: format!("PE {pe} outside a job of {} PEs", g.size()),
        });
    }
    Ok(NodeId(pe as u16))
}

/// `len` bytes at `p` as a slice (empty for a null or zero-length buffer).
///
/// # Safety
/// `p..p+len` must be readable for the call (the OpenSHMEM contract of a source buffer).
unsafe fn src_slice<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: per the contract above.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}

/// # Safety
/// `p..p+len` must be writable and not otherwise accessed during the call.
unsafe fn dst_slice<'a>(p: *mut c_void, len: usize) -> &'a mut [u8] {
    if p.is_null() || len == 0 {
        return &mut [];
    }
    // SAFETY: per the contract above.
    unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }
}

// ----- start-up -----------------------------------------------------------------------------

/// Collective: start this PE (`squall run` sets the job; without it a one-PE job).
#[no_mangle]
pub extern "C" fn shmem_init() {
    guard(
        "shmem_init",
        |_| die("shmem_init"),
        || {
            if SHMEM.get().is_some() {
                return Ok(());
            }
            crate::api::default_single_node();
            let node = squall::init()?;
            let g = node.gptr()?;
            g.check_program_data()?;
            let _ = SHMEM.set(g);
            node.barrier()?;
            Ok(())
        },
    )
}

/// `shmem_init_thread`: every thread level is supported (`SHMEM_THREAD_MULTIPLE`, 3).
#[no_mangle]
pub unsafe extern "C" fn shmem_init_thread(_requested: c_int, provided: *mut c_int) -> c_int {
    shmem_init();
    if !provided.is_null() {
        // SAFETY: the caller passes a valid int pointer (or null).
        unsafe { *provided = 3 };
    }
    0
}

/// `shmem_query_thread`: `SHMEM_THREAD_MULTIPLE`.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_thread(provided: *mut c_int) {
    if !provided.is_null() {
        // SAFETY: as above.
        unsafe { *provided = 3 };
    }
}

/// Collective: quiet, barrier, end this PE's part of the job.
#[no_mangle]
pub extern "C" fn shmem_finalize() {
    run("shmem_finalize", |g| {
        g.barrier_all()?;
        g.node().finalize()?;
        Ok(())
    })
}

/// End the whole job with `status` (every PE exits).
#[no_mangle]
pub extern "C" fn shmem_global_exit(status: c_int) {
    match SHMEM.get() {
        Some(g) => g.fail_job(&format!("shmem_global_exit({status})")),
        None => std::process::exit(status),
    }
}

#[no_mangle]
pub extern "C" fn shmem_my_pe() -> c_int {
    run("shmem_my_pe", |g| Ok(c_int::from(g.rank().0)))
}

#[no_mangle]
pub extern "C" fn shmem_n_pes() -> c_int {
    run("shmem_n_pes", |g| Ok(c_int::from(g.size())))
}

/// 1 if `pe` is a PE of the job.
#[no_mangle]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    run("shmem_pe_accessible", |g| {
        Ok(c_int::from(pe >= 0 && pe < c_int::from(g.size())))
    })
}

/// 1 if `addr` is symmetric memory (a live `shmem_malloc` block or, in a non-PIE program, a
/// global) and `pe` a PE of the job.
#[no_mangle]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    run("shmem_addr_accessible", |g| {
        let ok = pe >= 0 && pe < c_int::from(g.size()) && g.check_local(addr as usize, 1).is_ok();
        Ok(c_int::from(ok))
    })
}

/// `dest` itself for this PE; NULL for another (remote memory is not load/store reachable).
#[no_mangle]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    run("shmem_ptr", |g| {
        Ok(if pe == c_int::from(g.rank().0) {
            dest as *mut c_void
        } else {
            std::ptr::null_mut()
        })
    })
}

/// The OpenSHMEM version this layer follows: 1.4.
#[no_mangle]
pub unsafe extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    // SAFETY: the caller passes valid int pointers (null ones are skipped).
    unsafe {
        if !major.is_null() {
            *major = 1;
        }
        if !minor.is_null() {
            *minor = 4;
        }
    }
}

/// The vendor string (`SHMEM_VENDOR_STRING`), at most `SHMEM_MAX_NAME_LEN` (256) bytes.
#[no_mangle]
pub unsafe extern "C" fn shmem_info_get_name(name: *mut c_char) {
    const NAME: &[u8] = b"Squall OpenSHMEM\0";
    if !name.is_null() {
        // SAFETY: the standard requires `name` to hold SHMEM_MAX_NAME_LEN bytes.
        unsafe { std::ptr::copy_nonoverlapping(NAME.as_ptr(), name.cast::<u8>(), NAME.len()) };
    }
}

// ----- the symmetric heap -------------------------------------------------------------------

/// Collective: `size` bytes of symmetric memory, the same address on every PE (NULL for 0).
#[no_mangle]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    shmem_align(16, size)
}

/// Collective: `shmem_malloc` aligned to `alignment` (a power of two).
#[no_mangle]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    run("shmem_malloc", |g| {
        if size == 0 {
            g.barrier_all()?;
            return Ok(std::ptr::null_mut());
        }
        Ok(g.alloc(size, alignment)? as *mut c_void)
    })
}

/// Collective: zeroed symmetric memory for `count` elements of `size` bytes.
#[no_mangle]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    run("shmem_calloc", |g| {
        let n = count.checked_mul(size).ok_or(CapiError::Invalid {
            call: "shmem_calloc",
            why: format!("{count} x {size} bytes overflows"),
        })?;
        if n == 0 {
            g.barrier_all()?;
            return Ok(std::ptr::null_mut());
        }
        let p = g.alloc(n, 16)?;
        // A freed block may be reused: zero this PE's copy (before anyone targets it: the
        // allocation ended with a barrier, so zero, then meet again).
        g.put(g.rank(), p, &vec![0u8; n])?;
        g.barrier_all()?;
        Ok(p as *mut c_void)
    })
}

/// Collective: free symmetric memory (NULL is ignored, after the barrier).
#[no_mangle]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    run("shmem_free", |g| {
        if ptr.is_null() {
            return Ok(g.barrier_all()?);
        }
        Ok(g.free(ptr as usize)?)
    })
}

/// Collective: a block of `size` bytes with the old block's contents (up to the smaller size).
#[no_mangle]
pub unsafe extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return shmem_malloc(size);
    }
    run("shmem_realloc", |g| {
        let old = g.block_len(ptr as usize).ok_or(CapiError::Invalid {
            call: "shmem_realloc",
            why: format!("{ptr:p} is not the start of a symmetric allocation"),
        })?;
        if size == 0 {
            g.free(ptr as usize)?;
            return Ok(std::ptr::null_mut());
        }
        let p = g.alloc(size, 16)?;
        let mut keep = vec![0u8; old.min(size)];
        g.get(g.rank(), ptr as usize, &mut keep)?;
        g.put(g.rank(), p, &keep)?;
        g.free(ptr as usize)?;
        Ok(p as *mut c_void)
    })
}

// ----- remote memory access -----------------------------------------------------------------

/// Copy `nelems` bytes from local `source` to `dest` on `pe`; returns when `source` may be
/// reused (remote completion: `shmem_quiet`).
#[no_mangle]
pub unsafe extern "C" fn shmem_putmem(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    run("shmem_putmem", |g| {
        let to = pe_id(g, "shmem_putmem", pe)?;
        // SAFETY: OpenSHMEM's contract: `source` holds `nelems` readable bytes.
        let data = unsafe { src_slice(source, nelems) };
        Ok(g.put_nb(to, dest as usize, data)?)
    })
}

/// `shmem_putmem`, non-blocking in name: the data is copied at once here too.
#[no_mangle]
pub unsafe extern "C" fn shmem_putmem_nbi(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    // SAFETY: the same contract as shmem_putmem.
    unsafe { shmem_putmem(dest, source, nelems, pe) }
}

/// Copy `nelems` bytes from `source` on `pe` to local `dest`; returns with the data.
#[no_mangle]
pub unsafe extern "C" fn shmem_getmem(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    run("shmem_getmem", |g| {
        let from = pe_id(g, "shmem_getmem", pe)?;
        // SAFETY: OpenSHMEM's contract: `dest` holds `nelems` writable bytes.
        let out = unsafe { dst_slice(dest, nelems) };
        Ok(g.get(from, source as usize, out)?)
    })
}

/// Start a get; `dest` holds the data after `shmem_quiet` (and must not be touched before).
#[no_mangle]
pub unsafe extern "C" fn shmem_getmem_nbi(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    run("shmem_getmem_nbi", |g| {
        let from = pe_id(g, "shmem_getmem_nbi", pe)?;
        if nelems == 0 {
            return Ok(());
        }
        let at = dest as usize;
        let deliver = Box::new(move |b: &[u8]| {
            // SAFETY: OpenSHMEM's contract: `dest` holds `nelems` writable bytes that nobody
            // touches until shmem_quiet, which waits for this copy.
            let out = unsafe { dst_slice(at as *mut c_void, b.len().min(nelems)) };
            out.copy_from_slice(&b[..out.len()]);
        });
        Ok(g.get_nb(from, source as usize, nelems, deliver)?)
    })
}

// ----- atomics --------------------------------------------------------------------------------

fn width_of(call: &'static str, w: usize) -> Result<Width, CapiError> {
    Width::from_bytes(w as u64).map_err(|e| CapiError::Invalid {
        call,
        why: e.to_string(),
    })
}

fn kind_of(call: &'static str, op: c_int) -> Result<AtomicKind, CapiError> {
    u8::try_from(op)
        .ok()
        .and_then(AtomicKind::from_u8)
        .ok_or(CapiError::Invalid {
            call,
            why: format!("atomic operation code {op}"),
        })
}

/// A fetching atomic on the `width`-byte word `dest` at `pe` (the header's typed
/// `shmem_TYPE_atomic_fetch*`, `_swap`, `_compare_swap` call it): the old value's bits.
#[no_mangle]
pub extern "C" fn squall_shmem_atomic_fetch(
    dest: *mut c_void,
    width: usize,
    op: c_int,
    value: u64,
    cond: u64,
    pe: c_int,
) -> u64 {
    const CALL: &str = "shmem atomic";
    run(CALL, |g| {
        let to = pe_id(g, CALL, pe)?;
        Ok(g.atomic(
            to,
            dest as usize,
            width_of(CALL, width)?,
            kind_of(CALL, op)?,
            value,
            cond,
        )?)
    })
}

/// A non-fetching atomic (`shmem_TYPE_atomic_add`, `_inc`, `_set`): completed by `shmem_quiet`.
#[no_mangle]
pub extern "C" fn squall_shmem_atomic(
    dest: *mut c_void,
    width: usize,
    op: c_int,
    value: u64,
    pe: c_int,
) {
    const CALL: &str = "shmem atomic";
    run(CALL, |g| {
        let to = pe_id(g, CALL, pe)?;
        Ok(g.atomic_nb(
            to,
            dest as usize,
            width_of(CALL, width)?,
            kind_of(CALL, op)?,
            value,
        )?)
    })
}

fn cmp_of(cmp: c_int) -> Result<Cmp, CapiError> {
    Ok(match cmp {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        _ => {
            return Err(CapiError::Invalid {
                call: "shmem_wait_until",
                why: format!("comparison {cmp} (SHMEM_CMP_EQ .. SHMEM_CMP_LE)"),
            })
        }
    })
}

/// Wait until the local symmetric word `ivar` compares `cmp` to `value` (the header's typed
/// `shmem_TYPE_wait_until`); returns the word's bits.
#[no_mangle]
pub extern "C" fn squall_shmem_wait_until(
    ivar: *mut c_void,
    width: usize,
    cmp: c_int,
    value: u64,
) -> u64 {
    run("shmem_wait_until", |g| {
        Ok(g.wait_until(
            ivar as usize,
            width_of("shmem_wait_until", width)?,
            cmp_of(cmp)?,
            value,
        )?)
    })
}

/// 1 if the local word `ivar` compares `cmp` to `value` now (`shmem_TYPE_test`).
#[no_mangle]
pub extern "C" fn squall_shmem_test(
    ivar: *mut c_void,
    width: usize,
    cmp: c_int,
    value: u64,
) -> c_int {
    run("shmem_test", |g| {
        let w = width_of("shmem_test", width)?;
        let v = g.local_atomic(ivar as usize, w, AtomicKind::Fetch, 0, 0)?;
        Ok(c_int::from(cmp_of(cmp)?.holds(w, v, value)))
    })
}

// ----- ordering and synchronization -----------------------------------------------------------

/// Puts to one PE are applied in issue order on Squall's FIFO links: nothing to wait for.
#[no_mangle]
pub extern "C" fn shmem_fence() {
    run("shmem_fence", |_| Ok(()))
}

/// Wait until every put, non-blocking get and atomic this PE issued completed.
#[no_mangle]
pub extern "C" fn shmem_quiet() {
    run("shmem_quiet", |g| Ok(g.sync()?))
}

/// Quiet, then a barrier of every PE.
#[no_mangle]
pub extern "C" fn shmem_barrier_all() {
    run("shmem_barrier_all", |g| Ok(g.barrier_all()?))
}

/// A barrier of every PE (Squall's barriers also complete this PE's operations first).
#[no_mangle]
pub extern "C" fn shmem_sync_all() {
    run("shmem_sync_all", |g| Ok(g.node().barrier()?))
}

fn active(start: c_int, log_stride: c_int, size: c_int) -> Result<ActiveSet, CapiError> {
    match (
        u16::try_from(start),
        u32::try_from(log_stride),
        u16::try_from(size),
    ) {
        (Ok(start), Ok(log_stride), Ok(size)) => Ok(ActiveSet {
            start,
            log_stride,
            size,
        }),
        _ => Err(CapiError::Invalid {
            call: "shmem collective",
            why: format!("active set start {start} log stride {log_stride} size {size}"),
        }),
    }
}

/// Quiet, then a barrier of the active set (`pSync`: `SHMEM_BARRIER_SYNC_SIZE` longs).
#[no_mangle]
pub extern "C" fn shmem_barrier(
    pe_start: c_int,
    log_pe_stride: c_int,
    pe_size: c_int,
    p_sync: *mut c_long,
) {
    run("shmem_barrier", |g| {
        Ok(g.barrier_set(active(pe_start, log_pe_stride, pe_size)?, p_sync as usize)?)
    })
}

// ----- collectives ----------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn broadcast(
    call: &'static str,
    elem: usize,
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe_root: c_int,
    set: (c_int, c_int, c_int),
    p_sync: *mut c_long,
) {
    run(call, |g| {
        let root = usize::try_from(pe_root).map_err(|_| CapiError::Invalid {
            call,
            why: format!("root {pe_root}"),
        })?;
        Ok(g.broadcast(
            dest as usize,
            source as usize,
            nelems * elem,
            root,
            active(set.0, set.1, set.2)?,
            p_sync as usize,
        )?)
    })
}

/// Broadcast `nelems` 32-bit elements from the root (an index in the active set) to `dest` of
/// every other member (the root's `dest` is left alone, as in OpenSHMEM 1.4).
#[no_mangle]
pub extern "C" fn shmem_broadcast32(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe_root: c_int,
    pe_start: c_int,
    log_pe_stride: c_int,
    pe_size: c_int,
    p_sync: *mut c_long,
) {
    broadcast(
        "shmem_broadcast32",
        4,
        dest,
        source,
        nelems,
        pe_root,
        (pe_start, log_pe_stride, pe_size),
        p_sync,
    )
}

/// `shmem_broadcast32` for 64-bit elements.
#[no_mangle]
pub extern "C" fn shmem_broadcast64(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe_root: c_int,
    pe_start: c_int,
    log_pe_stride: c_int,
    pe_size: c_int,
    p_sync: *mut c_long,
) {
    broadcast(
        "shmem_broadcast64",
        8,
        dest,
        source,
        nelems,
        pe_root,
        (pe_start, log_pe_stride, pe_size),
        p_sync,
    )
}

/// Element types of `squall_shmem_reduce` (the header's `SQUALL_SHMEM_T_*`).
const T_SHORT: c_int = 1;
const T_INT: c_int = 2;
const T_LONG: c_int = 3;
const T_LONGLONG: c_int = 4;
const T_FLOAT: c_int = 5;
const T_DOUBLE: c_int = 6;

/// The reductions behind the header's `shmem_TYPE_OP_to_all`: `type` one of
/// `SQUALL_SHMEM_T_*`, `op` one of `SQUALL_SHMEM_OP_*` (sum, prod, max, min, and, or, xor).
/// `pWrk` is not needed; `pSync` takes `SHMEM_REDUCE_SYNC_SIZE` longs.
#[no_mangle]
pub extern "C" fn squall_shmem_reduce(
    dest: *mut c_void,
    source: *const c_void,
    nreduce: c_int,
    ty: c_int,
    op: c_int,
    pe_start: c_int,
    log_pe_stride: c_int,
    pe_size: c_int,
    p_sync: *mut c_long,
) {
    const CALL: &str = "shmem reduction";
    run(CALL, |g| {
        let op = match op {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Prod,
            2 => ReduceOp::Max,
            3 => ReduceOp::Min,
            4 => ReduceOp::And,
            5 => ReduceOp::Or,
            6 => ReduceOp::Xor,
            _ => {
                return Err(CapiError::Invalid {
                    call: CALL,
                    why: format!("operator {op}"),
                })
            }
        };
        let n = usize::try_from(nreduce).map_err(|_| CapiError::Invalid {
            call: CALL,
            why: format!("nreduce {nreduce}"),
        })?;
        let set = active(pe_start, log_pe_stride, pe_size)?;
        let (d, s, p) = (dest as usize, source as usize, p_sync as usize);
        match ty {
            T_SHORT => g.reduce::<i16>(d, s, n, op, set, p)?,
            T_INT => g.reduce::<i32>(d, s, n, op, set, p)?,
            T_LONG | T_LONGLONG => g.reduce::<i64>(d, s, n, op, set, p)?,
            T_FLOAT => g.reduce::<f32>(d, s, n, op, set, p)?,
            T_DOUBLE => g.reduce::<f64>(d, s, n, op, set, p)?,
            _ => {
                return Err(CapiError::Invalid {
                    call: CALL,
                    why: format!("element type {ty}"),
                })
            }
        }
        Ok(())
    })
}

// ----- distributed locks ----------------------------------------------------------------------

/// Acquire the distributed lock named by the symmetric `lock` variable (a Squall lock whose id
/// is its address: the same on every PE). Quiet first, so puts before it complete.
#[no_mangle]
pub extern "C" fn shmem_set_lock(lock: *mut c_long) {
    run("shmem_set_lock", |g| {
        g.sync()?;
        Ok(g.node().lock(LockId(lock as u64))?)
    })
}

/// Release the lock after completing this PE's puts (the next holder sees them).
#[no_mangle]
pub extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    run("shmem_clear_lock", |g| {
        g.sync()?;
        Ok(g.node().unlock(LockId(lock as u64))?)
    })
}

/// 0 if the lock was free and is now held, 1 if another holds it.
#[no_mangle]
pub extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    run("shmem_test_lock", |g| {
        Ok(if g.node().trylock(LockId(lock as u64))? {
            0
        } else {
            1
        })
    })
}

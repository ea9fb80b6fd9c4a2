//! Doacross loops (`ordered(n)` with `depend(sink: ...)` and `depend(source)`):
//! `GOMP_loop_doacross_*_start` (and `ull`, and the GCC 9+ generic `GOMP_loop_doacross_start`),
//! `GOMP_doacross_post` and `GOMP_doacross_wait` (and `ull`).
//!
//! The loop hands out the iterations 0..counts[0] of its outermost dimension like any loop
//! (`loops`; dynamic chunks in iteration order, one at a time), so every thread runs its
//! outer iterations in increasing order and each outer iteration's inner ones in order in one
//! thread. The first thread to enter allocates the loop's array (one word per outer iteration,
//! in the shared heap, published in word 3 of the construct's slot; the last thread to leave
//! frees it): word i holds 1 + the flattened inner index of the last iteration of row i that
//! posted. `post` stores that with a release (a home-executed atomic: this node's writes
//! reach their homes first); `wait` polls the row's word (relaxed) until it reaches the sink
//! iteration, then reads it once more as an acquire, so the source iteration's writes are
//! visible to the waiting iteration on any node.
//!
//! `GOMP_doacross_wait` is variadic in C: this definition takes the first six arguments (the
//! registers of the x86-64 and AArch64 calling conventions), so loops of up to six ordered
//! dimensions are accepted and deeper ones refused.
//!
//! Owns: doacross bookkeeping. Must not touch: chunk hand-out (`loops`).
use super::icv::{SCHED_DYNAMIC, SCHED_GUIDED, SCHED_STATIC};
use super::loops::{self, next_chunk, no_extras, write_bounds, From64, SCHED_RUNTIME};
use super::team::slot_word;
use super::{icv, refuse, run, word};
use crate::api::node_ref;
use crate::error::CapiError;
use squall::{AtomicOp, MemOrder};
use std::ffi::{c_long, c_uint, c_ulonglong, c_void};
use std::time::Duration;

/// Dimensions a doacross loop may have (the register arguments of `GOMP_doacross_wait`).
const MAX_DIMS: usize = 6;

/// Enter a doacross loop of `ncounts` dimensions with iteration counts `counts` and take the
/// first chunk of its outer dimension.
///
/// # Safety
/// `counts` has `ncounts` entries; `istart`/`iend` are valid or null.
unsafe fn start<T: From64>(
    call: &'static str,
    sched: u32,
    ncounts: c_uint,
    counts: *const u64,
    chunk: u64,
    istart: *mut T,
    iend: *mut T,
) -> bool {
    let n = ncounts as usize;
    if n == 0 || n > MAX_DIMS {
        refuse(call, "a doacross loop of more than six ordered dimensions");
    }
    let mut dims = [0u64; MAX_DIMS];
    // SAFETY: per the contract.
    unsafe { std::ptr::copy_nonoverlapping(counts, dims.as_mut_ptr(), n) };
    let r = run(call, || {
        loops::begin(sched, 0, 1, dims[0], chunk, false, true)?;
        let (team, slot) = icv::with(|f| (f.team, f.lp.slot_number()));
        let dx = match slot {
            Some(ws) if team != 0 => array(team, ws, dims[0])?,
            _ => 0,
        };
        icv::with(|f| {
            f.lp.dx = dx;
            f.lp.dx_n = n as u32;
            f.lp.dx_counts = dims;
        });
        if istart.is_null() {
            return Ok(None);
        }
        next_chunk()
    });
    if istart.is_null() {
        return true;
    }
    // SAFETY: per the contract.
    unsafe { write_bounds(r, istart, iend) }
}

/// The posted-iteration array of construct `ws` (`rows` words): the published one, or a new
/// zeroed one this thread publishes.
fn array(team: usize, ws: u64, rows: u64) -> Result<usize, CapiError> {
    let at = slot_word(team, ws, 3);
    let cur = word(at, AtomicOp::Load)?;
    if cur != 0 {
        return Ok(cur as usize);
    }
    let node = node_ref()?;
    let mine = node.calloc(rows.max(1) as usize, 8)? as usize;
    // A release: the zeroes reach the home before any thread's atomics on the words.
    let seen = node.atomic_ordered(
        at,
        8,
        AtomicOp::CompareSwap {
            expected: 0,
            new: mine as u64,
        },
        MemOrder::Release,
    )?;
    if seen == 0 {
        return Ok(mine);
    }
    node.free(mine as *mut u8)?;
    Ok(seen as usize)
}

/// The array word of iteration `v` and the value that marks it posted.
fn position(v: &[u64; MAX_DIMS]) -> Option<(usize, u64)> {
    let (dx, n, counts) = icv::with(|f| (f.lp.dx, f.lp.dx_n as usize, f.lp.dx_counts));
    if dx == 0 {
        return None;
    }
    let mut flat = 0u64;
    for k in 1..n {
        flat = flat.wrapping_mul(counts[k]).wrapping_add(v[k]);
    }
    Some((dx + 8 * v[0] as usize, flat + 1))
}

fn post(call: &'static str, v: [u64; MAX_DIMS]) {
    run(call, || {
        if let Some((at, mark)) = position(&v) {
            node_ref()?.atomic_ordered(at, 8, AtomicOp::Swap(mark), MemOrder::Release)?;
        }
        Ok(())
    })
}

fn wait(call: &'static str, v: [u64; MAX_DIMS]) {
    run(call, || {
        let Some((at, mark)) = position(&v) else {
            return Ok(());
        };
        let mut pause = 1u64;
        while word(at, AtomicOp::Load)? < mark {
            std::thread::sleep(Duration::from_micros(pause));
            pause = (pause * 2).min(500);
        }
        node_ref()?.atomic_ordered(at, 8, AtomicOp::Load, MemOrder::Acquire)?;
        Ok(())
    })
}

/// The calling thread's iteration vector from a `post` array of the loop's dimensions.
///
/// # Safety
/// `counts` has as many entries as the current doacross loop has dimensions.
unsafe fn vector(counts: *const u64) -> [u64; MAX_DIMS] {
    let n = icv::with(|f| f.lp.dx_n as usize).min(MAX_DIMS);
    let mut v = [0u64; MAX_DIMS];
    // SAFETY: per the contract.
    unsafe { std::ptr::copy_nonoverlapping(counts, v.as_mut_ptr(), n) };
    v
}

/// The `_start` entries of signed (`long`) doacross loops: `[chunk]`, or `[]` for runtime.
macro_rules! starts {
    ($int:ty; $($name:ident, $sched:ident, [$($chunk:ident)?];)*) => {$(
        /// # Safety
        /// `counts` has `ncounts` entries; `istart`/`iend` are valid (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ncounts: c_uint,
            counts: *mut $int,
            $($chunk: $int,)?
            istart: *mut $int,
            iend: *mut $int,
        ) -> bool {
            #[allow(unused_mut, unused_assignments)]
            let mut chunk = 0u64;
            $(chunk = ($chunk as i64).max(0) as u64;)?
            // SAFETY: per the contract (the counts' bits are the same as u64).
            unsafe { start(stringify!($name), $sched, ncounts, counts as *const u64, chunk, istart, iend) }
        }
    )*};
}

starts! { c_long;
    GOMP_loop_doacross_static_start, SCHED_STATIC, [chunk_size];
    GOMP_loop_doacross_dynamic_start, SCHED_DYNAMIC, [chunk_size];
    GOMP_loop_doacross_guided_start, SCHED_GUIDED, [chunk_size];
    GOMP_loop_doacross_runtime_start, SCHED_RUNTIME, [];
}

starts! { c_ulonglong;
    GOMP_loop_ull_doacross_static_start, SCHED_STATIC, [chunk_size];
    GOMP_loop_ull_doacross_dynamic_start, SCHED_DYNAMIC, [chunk_size];
    GOMP_loop_ull_doacross_guided_start, SCHED_GUIDED, [chunk_size];
    GOMP_loop_ull_doacross_runtime_start, SCHED_RUNTIME, [];
}

/// The GCC 9+ generic doacross start (`sched` a `GFS_*` kind, maybe with the monotonic bit).
///
/// # Safety
/// As the libgomp ABI: `counts` has `ncounts` entries, `istart`/`iend` valid or null.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_doacross_start(
    ncounts: c_uint,
    counts: *mut c_long,
    sched: c_long,
    chunk_size: c_long,
    istart: *mut c_long,
    iend: *mut c_long,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    let call = "GOMP_loop_doacross_start";
    no_extras(call, reductions, mem);
    let chunk = chunk_size.max(0) as u64;
    // SAFETY: per the contract.
    unsafe {
        start(
            call,
            sched as u32,
            ncounts,
            counts as *const u64,
            chunk,
            istart,
            iend,
        )
    }
}

/// The unsigned form of [`GOMP_loop_doacross_start`].
///
/// # Safety
/// As [`GOMP_loop_doacross_start`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_ull_doacross_start(
    ncounts: c_uint,
    counts: *mut c_ulonglong,
    sched: c_long,
    chunk_size: c_ulonglong,
    istart: *mut c_ulonglong,
    iend: *mut c_ulonglong,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    let call = "GOMP_loop_ull_doacross_start";
    no_extras(call, reductions, mem);
    // SAFETY: per the contract.
    unsafe {
        start(
            call,
            sched as u32,
            ncounts,
            counts,
            chunk_size,
            istart,
            iend,
        )
    }
}

/// `ordered depend(source)`: the calling iteration `counts` (logical, 0-based) is done.
///
/// # Safety
/// `counts` has one entry per ordered dimension.
#[no_mangle]
pub unsafe extern "C" fn GOMP_doacross_post(counts: *mut c_long) {
    // SAFETY: per the contract.
    post("GOMP_doacross_post", unsafe {
        vector(counts as *const u64)
    })
}

/// The unsigned form of [`GOMP_doacross_post`].
///
/// # Safety
/// As [`GOMP_doacross_post`].
#[no_mangle]
pub unsafe extern "C" fn GOMP_doacross_ull_post(counts: *mut c_ulonglong) {
    // SAFETY: per the contract.
    post("GOMP_doacross_ull_post", unsafe { vector(counts) })
}

/// `ordered depend(sink: v)`: wait until iteration v (logical, 0-based; one argument per
/// ordered dimension, variadic in C: see the module doc) has posted.
///
/// # Safety
/// Called by gcc's code with one argument per dimension of the current doacross loop; the
/// others are unused register contents.
#[no_mangle]
pub unsafe extern "C" fn GOMP_doacross_wait(
    first: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) {
    let v = [first, a1, a2, a3, a4, a5].map(|x| x as u64);
    wait("GOMP_doacross_wait", v)
}

/// The unsigned form of [`GOMP_doacross_wait`].
///
/// # Safety
/// As [`GOMP_doacross_wait`].
#[no_mangle]
pub unsafe extern "C" fn GOMP_doacross_ull_wait(
    first: c_ulonglong,
    a1: c_ulonglong,
    a2: c_ulonglong,
    a3: c_ulonglong,
    a4: c_ulonglong,
    a5: c_ulonglong,
) {
    wait("GOMP_doacross_ull_wait", [first, a1, a2, a3, a4, a5])
}

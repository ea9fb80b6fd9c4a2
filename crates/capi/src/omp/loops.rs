//! Worksharing loops (iteration hand-out for every `GOMP_loop_*` entry point, which live in
//! `loop_abi`), sections and `ordered`.
//!
//! A loop is turned into iteration numbers 0..n (iteration i is `start + i * incr`, in
//! wrapping 64-bit arithmetic, which serves both signed and unsigned loops). `static` needs no
//! shared state: each thread computes its chunks from its number (one block per thread without
//! a chunk size, as libgomp divides them, else chunks dealt round-robin). `dynamic` and
//! `guided` hand out chunks through the `next` word of the construct's slot (see `team`):
//! `dynamic` per node first (`chunks`: one home-executed fetch-and-add per block of chunks, one
//! chunk per thread of the node; ordered loops one per chunk), `guided` one compare-and-swap
//! per chunk. Sections are a
//! dynamic loop over the section numbers.
//!
//! `ordered`: chunks pass the right to run ordered regions in iteration order. The slot's
//! ordered state (next iteration allowed) lives in the team descriptor under the team's
//! ordered lock; a thread whose chunk starts there runs its ordered regions, and when it takes
//! its next chunk or leaves the loop it waits for its turn (if it had no ordered region), sets
//! the state to its chunk's end and wakes the waiters (a condition). The lock carries the
//! ordered regions' writes to the next chunk's thread.
//!
//! Owns: iteration hand-out. Must not touch: team start/end (`team`).
use super::icv::{self, SCHED_AUTO, SCHED_DYNAMIC, SCHED_GUIDED, SCHED_MONOTONIC, SCHED_STATIC};
use super::team::{self, desc, slot_word, Ws0, SLOTS};
use super::{refuse, run, word};
use crate::api::node_ref;
use crate::error::CapiError;
use crate::pthread::object_id;
use squall::{AtomicOp, CondId, LockId};
use std::ffi::{c_long, c_uint, c_ulonglong, c_void};

/// `GFS_RUNTIME`: the schedule comes from the run-sched ICV.
pub(super) const SCHED_RUNTIME: u32 = 0;

/// The worksharing loop a thread is in.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopState {
    pub active: bool,
    kind: u32,
    start: u64,
    incr: u64,
    n: u64,
    chunk: u64,
    /// static: chunks taken; a team of one's dynamic/guided loop: next iteration.
    trip: u64,
    /// The construct number of the slot it uses.
    slot: Option<u64>,
    ordered: bool,
    /// ordered: the current chunk, whether the thread has one and whether its ordered
    /// regions may run (its turn came).
    ord_lo: u64,
    ord_hi: u64,
    has_chunk: bool,
    ord_held: bool,
    /// A doacross loop (`doacross`): its array of posted iterations (0 in a team of one),
    /// its dimensions and their iteration counts.
    pub doacross: bool,
    pub dx: usize,
    pub dx_n: u32,
    pub dx_counts: [u64; 6],
}

impl LoopState {
    /// The construct number of the slot the loop uses (none: a static loop, or a team of one).
    pub fn slot_number(&self) -> Option<u64> {
        self.slot
    }
}

/// Iterations of a signed loop.
pub fn count_long(start: i64, end: i64, incr: i64) -> u64 {
    let (s, e, i) = (i128::from(start), i128::from(end), i128::from(incr));
    let n = if i > 0 && e > s {
        (e - s + i - 1) / i
    } else if i < 0 && s > e {
        (s - e - i - 1) / -i
    } else {
        0
    };
    n as u64
}

/// Iterations of an unsigned loop counting up (`up`) or down (`incr` is then negative in
/// two's complement).
pub fn count_ull(up: bool, start: u64, end: u64, incr: u64) -> u64 {
    let (s, e) = (u128::from(start), u128::from(end));
    if up && e > s && incr > 0 {
        (e - s).div_ceil(u128::from(incr)) as u64
    } else if !up && s > e && incr != 0 {
        let d = u128::from(incr.wrapping_neg());
        (s - e).div_ceil(d) as u64
    } else {
        0
    }
}

/// The concrete schedule of `sched` (runtime and auto resolved) and its chunk.
pub(super) fn resolve(sched: u32, chunk: u64) -> (u32, u64) {
    let (kind, chunk) = match sched & !SCHED_MONOTONIC {
        SCHED_RUNTIME => icv::with(|f| (f.icv.sched_kind, f.icv.sched_chunk)),
        k => (k, chunk),
    };
    match kind {
        SCHED_DYNAMIC | SCHED_GUIDED => (kind, chunk.max(1)),
        SCHED_AUTO => (SCHED_STATIC, 0),
        _ => (SCHED_STATIC, chunk),
    }
}

/// Enter a loop (call through `run`).
pub(super) fn begin(
    sched: u32,
    start: u64,
    incr: u64,
    n: u64,
    chunk: u64,
    ordered: bool,
    doacross: bool,
) -> Result<(), CapiError> {
    let (kind, chunk) = resolve(sched, chunk);
    let (team, active) = icv::with(|f| (f.team, f.lp.active));
    if active {
        return Err(CapiError::Invalid {
            call: "GOMP_loop_*_start",
            why: "a worksharing construct started inside another one of the same team".into(),
        });
    }
    let slot = if team != 0 && (kind != SCHED_STATIC || ordered || doacross) {
        Some(team::ws_enter(team)?)
    } else {
        None
    };
    icv::with(|f| {
        f.lp = LoopState {
            active: true,
            kind,
            start,
            incr,
            n,
            chunk,
            slot,
            ordered,
            doacross,
            ..LoopState::default()
        }
    });
    Ok(())
}

/// Enter the loop (or sections) a combined construct set up (call through `run`).
pub fn enter_ws0(w: &Ws0) -> Result<(), CapiError> {
    begin(w.sched, w.start, w.incr, w.n, w.chunk, false, false)
}

fn ordered_ids(team: usize) -> (LockId, CondId) {
    (LockId(object_id(team + 2)), CondId(object_id(team + 3)))
}

/// The next iteration allowed to run ordered regions in construct `ws` (hold the ordered lock).
fn ordered_next(team: usize, ws: u64) -> u64 {
    let o = &desc(team).ordered[(ws % SLOTS) as usize];
    // SAFETY: reading the descriptor's words (live, under the ordered lock).
    let (tag, next) = unsafe {
        (
            std::ptr::read_volatile(&o[0]),
            std::ptr::read_volatile(&o[1]),
        )
    };
    if tag == ws + 1 {
        next
    } else {
        0
    }
}

/// Wait (holding the ordered lock) until chunk `lo` may run its ordered regions.
fn ordered_wait(team: usize, ws: u64, lo: u64) -> Result<(), CapiError> {
    let node = node_ref()?;
    let (lock, cond) = ordered_ids(team);
    while ordered_next(team, ws) != lo {
        node.cond_wait(cond, lock)?;
    }
    Ok(())
}

/// The calling thread is done with its ordered chunk: pass the turn on.
fn ordered_pass(team: usize, lp: &mut LoopState) -> Result<(), CapiError> {
    let Some(ws) = lp.slot else { return Ok(()) };
    let node = node_ref()?;
    let (lock, cond) = ordered_ids(team);
    node.lock(lock)?;
    if !lp.ord_held {
        ordered_wait(team, ws, lp.ord_lo)?;
    }
    let o = &mut desc(team).ordered[(ws % SLOTS) as usize];
    o[0] = ws + 1;
    o[1] = lp.ord_hi;
    node.cond_broadcast(cond)?;
    node.unlock(lock)?;
    lp.has_chunk = false;
    lp.ord_held = false;
    Ok(())
}

/// The next chunk of the calling thread's loop as iteration numbers (call through `run`).
pub(super) fn next_chunk() -> Result<Option<(u64, u64)>, CapiError> {
    let (team, tid, nth, mut lp) =
        icv::with(|f| (f.team, u64::from(f.tid), u64::from(f.nthreads), f.lp));
    if !lp.active {
        return Err(CapiError::Invalid {
            call: "GOMP_loop_*_next",
            why: "not inside a worksharing loop".into(),
        });
    }
    if lp.ordered && lp.has_chunk && team != 0 {
        ordered_pass(team, &mut lp)?;
    }
    let n = lp.n;
    let r = match (lp.kind, team, lp.slot) {
        (SCHED_STATIC, ..) if lp.chunk == 0 => {
            if lp.trip > 0 {
                None
            } else {
                lp.trip = 1;
                let (q, r) = (n / nth, n % nth);
                let lo = tid * q + tid.min(r);
                let hi = lo + q + u64::from(tid < r);
                (lo < hi).then_some((lo, hi))
            }
        }
        (SCHED_STATIC, ..) => {
            let lo = (lp.trip.saturating_mul(nth).saturating_add(tid)).saturating_mul(lp.chunk);
            lp.trip += 1;
            (lo < n).then(|| (lo, lo.saturating_add(lp.chunk).min(n)))
        }
        (_, 0, _) | (_, _, None) => {
            let lo = lp.trip;
            let size = if lp.kind == SCHED_GUIDED {
                n - lo.min(n)
            } else {
                lp.chunk
            };
            let hi = lo.saturating_add(size.max(1)).min(n);
            lp.trip = hi;
            (lo < n).then_some((lo, hi))
        }
        // Ordered and doacross loops take chunks in iteration order, one at a time.
        (SCHED_DYNAMIC, _, Some(ws)) if !lp.ordered && !lp.doacross => {
            super::chunks::next(team, ws, n, lp.chunk)?
        }
        (SCHED_DYNAMIC, _, Some(ws)) => {
            let lo = word(slot_word(team, ws, 1), AtomicOp::FetchAdd(lp.chunk))?;
            (lo < n).then(|| (lo, lo.saturating_add(lp.chunk).min(n)))
        }
        (_, _, Some(ws)) => {
            // guided: a share of what is left, at least the chunk.
            let at = slot_word(team, ws, 1);
            let mut cur = word(at, AtomicOp::Load)?;
            loop {
                if cur >= n {
                    break None;
                }
                let left = n - cur;
                let q = left.div_ceil(nth).max(lp.chunk).min(left);
                let seen = word(
                    at,
                    AtomicOp::CompareSwap {
                        expected: cur,
                        new: cur + q,
                    },
                )?;
                if seen == cur {
                    break Some((cur, cur + q));
                }
                cur = seen;
            }
        }
    };
    if lp.ordered {
        lp.has_chunk = r.is_some();
        lp.ord_held = false;
        if let Some((lo, hi)) = r {
            lp.ord_lo = lo;
            lp.ord_hi = hi;
        }
    }
    icv::with(|f| f.lp = lp);
    Ok(r)
}

/// Leave the loop: pass the ordered turn on, count the thread out of the slot, then the
/// barrier unless `nowait`.
pub(super) fn finish(call: &'static str, nowait: bool) {
    run(call, || {
        let (team, nth, mut lp) = icv::with(|f| (f.team, f.nthreads, f.lp));
        if team != 0 {
            if lp.ordered && lp.has_chunk {
                ordered_pass(team, &mut lp)?;
            }
            if let Some(ws) = lp.slot {
                if lp.kind == SCHED_DYNAMIC && !lp.ordered && !lp.doacross {
                    super::chunks::leave(team, ws)?;
                }
                team::ws_leave(team, ws, 2, nth)?;
            }
        }
        icv::with(|f| f.lp = LoopState::default());
        Ok(())
    });
    if !nowait {
        team::barrier(call);
    }
}

/// Write chunk `r` of the current loop to `istart`/`iend` as loop values.
///
/// # Safety
/// `istart` and `iend` are valid (or null: nothing written).
pub(super) unsafe fn write_bounds<T: From64>(
    r: Option<(u64, u64)>,
    istart: *mut T,
    iend: *mut T,
) -> bool {
    let Some((lo, hi)) = r else { return false };
    let (start, incr) = icv::with(|f| (f.lp.start, f.lp.incr));
    if !istart.is_null() && !iend.is_null() {
        // SAFETY: valid per the contract.
        unsafe {
            istart.write(T::from64(start.wrapping_add(lo.wrapping_mul(incr))));
            iend.write(T::from64(start.wrapping_add(hi.wrapping_mul(incr))));
        }
    }
    true
}

/// The loop variable types of the ABI, from their 64-bit two's complement bits.
pub(super) trait From64 {
    fn from64(v: u64) -> Self;
}
impl From64 for c_long {
    fn from64(v: u64) -> Self {
        v as c_long
    }
}
impl From64 for c_ulonglong {
    fn from64(v: u64) -> Self {
        v
    }
}

/// Enter a loop of `n` iterations from `start` by `incr` (64-bit two's complement bits) and
/// take its first chunk, unless `istart` is null (then only the loop is entered: true).
///
/// # Safety
/// `istart`/`iend` are valid or null.
#[allow(clippy::too_many_arguments)]
unsafe fn enter<T: From64>(
    call: &'static str,
    sched: u32,
    ordered: bool,
    start: u64,
    incr: u64,
    n: u64,
    chunk: u64,
    istart: *mut T,
    iend: *mut T,
) -> bool {
    let r = run(call, || {
        begin(sched, start, incr, n, chunk, ordered, false)?;
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

/// Start a signed loop and take its first chunk.
///
/// # Safety
/// `istart`/`iend` are valid or null.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn long_start(
    call: &'static str,
    sched: u32,
    ordered: bool,
    start: c_long,
    end: c_long,
    incr: c_long,
    chunk: c_long,
    istart: *mut c_long,
    iend: *mut c_long,
) -> bool {
    let n = count_long(start, end, incr);
    let (start, incr, chunk) = (start as u64, incr as u64, chunk.max(0) as u64);
    // SAFETY: per the contract.
    unsafe { enter(call, sched, ordered, start, incr, n, chunk, istart, iend) }
}

/// Start an unsigned loop and take its first chunk.
///
/// # Safety
/// `istart`/`iend` are valid or null.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn ull_start(
    call: &'static str,
    sched: u32,
    ordered: bool,
    up: bool,
    start: c_ulonglong,
    end: c_ulonglong,
    incr: c_ulonglong,
    chunk: c_ulonglong,
    istart: *mut c_ulonglong,
    iend: *mut c_ulonglong,
) -> bool {
    let n = count_ull(up, start, end, incr);
    // SAFETY: per the contract.
    unsafe { enter(call, sched, ordered, start, incr, n, chunk, istart, iend) }
}

/// The next chunk of the current loop.
///
/// # Safety
/// `istart`/`iend` are valid.
pub(super) unsafe fn any_next<T: From64>(call: &'static str, istart: *mut T, iend: *mut T) -> bool {
    let r = run(call, next_chunk);
    // SAFETY: per the contract.
    unsafe { write_bounds(r, istart, iend) }
}

/// The extras of the GCC 9+ generic loop starts: task reductions (`reduction(task, ...)`,
/// see `task_red::workshare_register`); `lastprivate(conditional)`/scan memory is refused.
pub(super) fn no_extras(call: &'static str, reductions: *mut usize, mem: *mut *mut c_void) {
    if !mem.is_null() {
        refuse(
            call,
            "lastprivate(conditional:) or scan on a worksharing construct",
        );
    }
    if !reductions.is_null() {
        // SAFETY: gcc's reduction array of the construct.
        unsafe { super::task_red::workshare_register(call, reductions) };
    }
}

// ----- sections ------------------------------------------------------------------------------

/// Sections are numbered 1..=count; 0 means none left.
fn section(r: Option<(u64, u64)>) -> c_uint {
    r.map_or(0, |(lo, _)| lo as c_uint + 1)
}

/// `#pragma omp sections` with `count` sections: the first section this thread runs.
#[no_mangle]
pub extern "C" fn GOMP_sections_start(count: c_uint) -> c_uint {
    section(run("GOMP_sections_start", || {
        begin(SCHED_DYNAMIC, 1, 1, u64::from(count), 1, false, false)?;
        next_chunk()
    }))
}

/// The GCC 9+ form (task reductions and lastprivate(conditional) memory refused).
///
/// # Safety
/// `reductions` and `mem` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn GOMP_sections2_start(
    count: c_uint,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> c_uint {
    no_extras("GOMP_sections2_start", reductions, mem);
    GOMP_sections_start(count)
}

/// The next section this thread runs (0: none left).
#[no_mangle]
pub extern "C" fn GOMP_sections_next() -> c_uint {
    section(run("GOMP_sections_next", next_chunk))
}

#[no_mangle]
pub extern "C" fn GOMP_sections_end() {
    finish("GOMP_sections_end", false);
}

#[no_mangle]
pub extern "C" fn GOMP_sections_end_nowait() {
    finish("GOMP_sections_end_nowait", true);
}

#[no_mangle]
pub extern "C" fn GOMP_sections_end_cancel() -> bool {
    finish("GOMP_sections_end_cancel", false);
    false
}

/// `#pragma omp parallel sections`.
///
/// # Safety
/// `func` is the program's outlined function and `data` its argument.
#[no_mangle]
pub unsafe extern "C" fn GOMP_parallel_sections(
    func: Option<team::RegionFn>,
    data: *mut c_void,
    num_threads: c_uint,
    count: c_uint,
    flags: c_uint,
) {
    let Some(func) = func else { return };
    let ws0 = Ws0 {
        kind: 2,
        sched: SCHED_DYNAMIC,
        start: 1,
        incr: 1,
        n: u64::from(count),
        chunk: 1,
    };
    team::begin(
        "GOMP_parallel_sections",
        func,
        data,
        num_threads,
        flags,
        ws0,
    );
    // SAFETY: per the contract.
    unsafe { func(data) };
    team::end("GOMP_parallel_sections");
}

// ----- ordered -------------------------------------------------------------------------------

/// Start of an `ordered` region: wait for this thread's chunk's turn.
#[no_mangle]
pub extern "C" fn GOMP_ordered_start() {
    run("GOMP_ordered_start", || {
        let (team, lp) = icv::with(|f| (f.team, f.lp));
        if team == 0 || lp.ord_held {
            return Ok(());
        }
        let (Some(ws), true) = (lp.slot, lp.has_chunk && lp.ordered) else {
            return Err(CapiError::Invalid {
                call: "GOMP_ordered_start",
                why: "an ordered region outside an ordered loop's chunk".into(),
            });
        };
        let node = node_ref()?;
        let (lock, _) = ordered_ids(team);
        node.lock(lock)?;
        ordered_wait(team, ws, lp.ord_lo)?;
        node.unlock(lock)?;
        icv::with(|f| f.lp.ord_held = true);
        Ok(())
    })
}

/// End of an `ordered` region (the turn passes when the chunk is done).
#[no_mangle]
pub extern "C" fn GOMP_ordered_end() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_counts() {
        assert_eq!(count_long(0, 10, 1), 10);
        assert_eq!(count_long(0, 10, 3), 4);
        assert_eq!(count_long(10, 0, -3), 4);
        assert_eq!(count_long(5, 5, 1), 0);
        assert_eq!(count_long(i64::MIN, i64::MAX, 1), u64::MAX);
        assert_eq!(count_ull(true, 0, 10, 4), 3);
        assert_eq!(count_ull(false, 10, 0, 2u64.wrapping_neg()), 5);
        assert_eq!(count_ull(true, 10, 0, 1), 0);
    }
}

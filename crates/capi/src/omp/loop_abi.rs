//! The libgomp entry points of worksharing loops: `GOMP_loop_{static,dynamic,guided,runtime}`
//! `_start`/`_next` with their `nonmonotonic`, `maybe_nonmonotonic`, `ordered` and `ull`
//! forms, the GCC 9+ generic `GOMP_loop_start` family, the loop ends and the combined
//! `GOMP_parallel_loop_*`. Each is a thin shell over `loops` (which owns the hand-out).
//!
//! Owns: the ABI signatures. Must not touch: iteration state (`loops`).
use super::icv::{SCHED_DYNAMIC, SCHED_GUIDED, SCHED_STATIC};
use super::loops::{
    any_next, count_long, finish, long_start, no_extras, resolve, ull_start, SCHED_RUNTIME,
};
use super::team::{self, Ws0};
use std::ffi::{c_long, c_uint, c_ulonglong, c_void};

/// The chunk argument of a `_start` entry: the caller's `chunk`, or 0 for a `runtime`
/// schedule (whose entry points have no chunk: the `run-sched-var` ICV gives it).
macro_rules! chunk_or_zero {
    () => {
        0
    };
    ($chunk:ident) => {
        $chunk
    };
}

/// `_start`/`_next` pairs over `$inner` (`long_start` or `ull_start`, the latter with the
/// leading `[up]` argument) for integers of type `$int`. Each row is
/// `start, next, schedule, ordered, [chunk]` (`[]` for a `runtime` schedule).
macro_rules! loop_pairs {
    (@pair $inner:ident [$($up:ident)?] $int:ty;
        $start:ident, $next:ident, $sched:ident, $ordered:tt, [$($chunk:ident)?]) => {
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $start(
            $($up: bool,)?
            start: $int,
            end: $int,
            incr: $int,
            $($chunk: $int,)?
            istart: *mut $int,
            iend: *mut $int,
        ) -> bool {
            // SAFETY: per the contract.
            unsafe {
                $inner(
                    stringify!($start),
                    $sched,
                    $ordered,
                    $($up,)?
                    start,
                    end,
                    incr,
                    chunk_or_zero!($($chunk)?),
                    istart,
                    iend,
                )
            }
        }
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $next(istart: *mut $int, iend: *mut $int) -> bool {
            // SAFETY: per the contract.
            unsafe { any_next(stringify!($next), istart, iend) }
        }
    };
    ($inner:ident $up:tt $int:ty;
        $($start:ident, $next:ident, $sched:ident, $ordered:tt, $chunk:tt;)*) => {
        $(loop_pairs!(@pair $inner $up $int; $start, $next, $sched, $ordered, $chunk);)*
    };
}

loop_pairs! { long_start [] c_long;
    GOMP_loop_static_start, GOMP_loop_static_next, SCHED_STATIC, false, [chunk];
    GOMP_loop_dynamic_start, GOMP_loop_dynamic_next, SCHED_DYNAMIC, false, [chunk];
    GOMP_loop_guided_start, GOMP_loop_guided_next, SCHED_GUIDED, false, [chunk];
    GOMP_loop_nonmonotonic_dynamic_start, GOMP_loop_nonmonotonic_dynamic_next,
        SCHED_DYNAMIC, false, [chunk];
    GOMP_loop_nonmonotonic_guided_start, GOMP_loop_nonmonotonic_guided_next,
        SCHED_GUIDED, false, [chunk];
    GOMP_loop_runtime_start, GOMP_loop_runtime_next, SCHED_RUNTIME, false, [];
    GOMP_loop_nonmonotonic_runtime_start, GOMP_loop_nonmonotonic_runtime_next,
        SCHED_RUNTIME, false, [];
    GOMP_loop_maybe_nonmonotonic_runtime_start, GOMP_loop_maybe_nonmonotonic_runtime_next,
        SCHED_RUNTIME, false, [];
    GOMP_loop_ordered_static_start, GOMP_loop_ordered_static_next, SCHED_STATIC, true, [chunk];
    GOMP_loop_ordered_dynamic_start, GOMP_loop_ordered_dynamic_next,
        SCHED_DYNAMIC, true, [chunk];
    GOMP_loop_ordered_guided_start, GOMP_loop_ordered_guided_next,
        SCHED_GUIDED, true, [chunk];
    GOMP_loop_ordered_runtime_start, GOMP_loop_ordered_runtime_next, SCHED_RUNTIME, true, [];
}

loop_pairs! { ull_start [up] c_ulonglong;
    GOMP_loop_ull_static_start, GOMP_loop_ull_static_next, SCHED_STATIC, false, [chunk];
    GOMP_loop_ull_dynamic_start, GOMP_loop_ull_dynamic_next, SCHED_DYNAMIC, false, [chunk];
    GOMP_loop_ull_guided_start, GOMP_loop_ull_guided_next, SCHED_GUIDED, false, [chunk];
    GOMP_loop_ull_nonmonotonic_dynamic_start, GOMP_loop_ull_nonmonotonic_dynamic_next,
        SCHED_DYNAMIC, false, [chunk];
    GOMP_loop_ull_nonmonotonic_guided_start, GOMP_loop_ull_nonmonotonic_guided_next,
        SCHED_GUIDED, false, [chunk];
    GOMP_loop_ull_runtime_start, GOMP_loop_ull_runtime_next, SCHED_RUNTIME, false, [];
    GOMP_loop_ull_nonmonotonic_runtime_start, GOMP_loop_ull_nonmonotonic_runtime_next,
        SCHED_RUNTIME, false, [];
    GOMP_loop_ull_maybe_nonmonotonic_runtime_start,
        GOMP_loop_ull_maybe_nonmonotonic_runtime_next, SCHED_RUNTIME, false, [];
    GOMP_loop_ull_ordered_static_start, GOMP_loop_ull_ordered_static_next,
        SCHED_STATIC, true, [chunk];
    GOMP_loop_ull_ordered_dynamic_start, GOMP_loop_ull_ordered_dynamic_next,
        SCHED_DYNAMIC, true, [chunk];
    GOMP_loop_ull_ordered_guided_start, GOMP_loop_ull_ordered_guided_next,
        SCHED_GUIDED, true, [chunk];
    GOMP_loop_ull_ordered_runtime_start, GOMP_loop_ull_ordered_runtime_next,
        SCHED_RUNTIME, true, [];
}

/// The GCC 9+ generic loop starts (`sched` is a `GFS_*` kind, possibly with the monotonic
/// bit): `$name` over `$inner` (`long_start`, or `ull_start` with `[up]`), `$ordered` or not.
macro_rules! generic_start {
    ($name:ident, $inner:ident [$($up:ident)?] $int:ty, $ordered:tt) => {
        /// # Safety
        /// `istart`/`iend` are valid or null (then only the loop is entered).
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            $($up: bool,)?
            start: $int,
            end: $int,
            incr: $int,
            sched: c_long,
            chunk: $int,
            istart: *mut $int,
            iend: *mut $int,
            reductions: *mut usize,
            mem: *mut *mut c_void,
        ) -> bool {
            no_extras(stringify!($name), reductions, mem);
            // SAFETY: per the contract.
            unsafe {
                $inner(
                    stringify!($name),
                    sched as u32,
                    $ordered,
                    $($up,)?
                    start,
                    end,
                    incr,
                    chunk,
                    istart,
                    iend,
                )
            }
        }
    };
}

generic_start!(GOMP_loop_start, long_start [] c_long, false);
generic_start!(GOMP_loop_ordered_start, long_start [] c_long, true);
generic_start!(GOMP_loop_ull_start, ull_start [up] c_ulonglong, false);
generic_start!(GOMP_loop_ull_ordered_start, ull_start [up] c_ulonglong, true);

/// The end of a worksharing loop, with its implicit barrier.
#[no_mangle]
pub extern "C" fn GOMP_loop_end() {
    finish("GOMP_loop_end", false);
}

/// The end of a `nowait` worksharing loop.
#[no_mangle]
pub extern "C" fn GOMP_loop_end_nowait() {
    finish("GOMP_loop_end_nowait", true);
}

/// The end of a loop in a cancellable region: never cancelled.
#[no_mangle]
pub extern "C" fn GOMP_loop_end_cancel() -> bool {
    finish("GOMP_loop_end_cancel", false);
    false
}

// ----- combined parallel loops ---------------------------------------------------------------

/// Open a team whose threads start inside the loop (they call the `_next` entry directly).
///
/// # Safety
/// `func` is the program's outlined function and `data` its argument.
#[allow(clippy::too_many_arguments)]
unsafe fn parallel_loop(
    call: &'static str,
    func: Option<team::RegionFn>,
    data: *mut c_void,
    num_threads: c_uint,
    sched: u32,
    start: c_long,
    end: c_long,
    incr: c_long,
    chunk: c_long,
    flags: c_uint,
) {
    let Some(func) = func else { return };
    let (sched, chunk) = if sched == SCHED_RUNTIME {
        resolve(sched, 0)
    } else {
        (sched, chunk.max(0) as u64)
    };
    let ws0 = Ws0 {
        kind: 1,
        sched,
        start: start as u64,
        incr: incr as u64,
        n: count_long(start, end, incr),
        chunk,
    };
    team::begin(call, func, data, num_threads, flags, ws0);
    // SAFETY: per the contract.
    unsafe { func(data) };
    team::end(call);
}

/// `GOMP_parallel_loop_*` entries: `[chunk]`, or `[]` for a `runtime` schedule.
macro_rules! parallel_loops {
    ($($name:ident, $sched:ident, [$($chunk:ident)?];)*) => {$(
        /// # Safety
        /// `func` is the program's outlined function and `data` its argument.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            func: Option<team::RegionFn>,
            data: *mut c_void,
            num_threads: c_uint,
            start: c_long,
            end: c_long,
            incr: c_long,
            $($chunk: c_long,)?
            flags: c_uint,
        ) {
            // SAFETY: per the contract.
            unsafe {
                parallel_loop(
                    stringify!($name),
                    func,
                    data,
                    num_threads,
                    $sched,
                    start,
                    end,
                    incr,
                    chunk_or_zero!($($chunk)?),
                    flags,
                )
            }
        }
    )*};
}

parallel_loops! {
    GOMP_parallel_loop_static, SCHED_STATIC, [chunk];
    GOMP_parallel_loop_dynamic, SCHED_DYNAMIC, [chunk];
    GOMP_parallel_loop_guided, SCHED_GUIDED, [chunk];
    GOMP_parallel_loop_nonmonotonic_dynamic, SCHED_DYNAMIC, [chunk];
    GOMP_parallel_loop_nonmonotonic_guided, SCHED_GUIDED, [chunk];
    GOMP_parallel_loop_runtime, SCHED_RUNTIME, [];
    GOMP_parallel_loop_nonmonotonic_runtime, SCHED_RUNTIME, [];
    GOMP_parallel_loop_maybe_nonmonotonic_runtime, SCHED_RUNTIME, [];
}

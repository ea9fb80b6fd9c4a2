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

macro_rules! long_loop {
    ($start:ident, $next:ident, $sched:expr, $ordered:expr) => {
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $start(
            start: c_long,
            end: c_long,
            incr: c_long,
            chunk: c_long,
            istart: *mut c_long,
            iend: *mut c_long,
        ) -> bool {
            // SAFETY: per the contract.
            unsafe {
                long_start(
                    stringify!($start),
                    $sched,
                    $ordered,
                    start,
                    end,
                    incr,
                    chunk,
                    istart,
                    iend,
                )
            }
        }
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $next(istart: *mut c_long, iend: *mut c_long) -> bool {
            // SAFETY: per the contract.
            unsafe { any_next(stringify!($next), istart, iend) }
        }
    };
}

macro_rules! long_runtime_loop {
    ($start:ident, $next:ident, $ordered:expr) => {
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $start(
            start: c_long,
            end: c_long,
            incr: c_long,
            istart: *mut c_long,
            iend: *mut c_long,
        ) -> bool {
            // SAFETY: per the contract.
            unsafe {
                long_start(
                    stringify!($start),
                    SCHED_RUNTIME,
                    $ordered,
                    start,
                    end,
                    incr,
                    0,
                    istart,
                    iend,
                )
            }
        }
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $next(istart: *mut c_long, iend: *mut c_long) -> bool {
            // SAFETY: per the contract.
            unsafe { any_next(stringify!($next), istart, iend) }
        }
    };
}

macro_rules! ull_loop {
    ($start:ident, $next:ident, $sched:expr, $ordered:expr) => {
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $start(
            up: bool,
            start: c_ulonglong,
            end: c_ulonglong,
            incr: c_ulonglong,
            chunk: c_ulonglong,
            istart: *mut c_ulonglong,
            iend: *mut c_ulonglong,
        ) -> bool {
            // SAFETY: per the contract.
            unsafe {
                ull_start(
                    stringify!($start),
                    $sched,
                    $ordered,
                    up,
                    start,
                    end,
                    incr,
                    chunk,
                    istart,
                    iend,
                )
            }
        }
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $next(istart: *mut c_ulonglong, iend: *mut c_ulonglong) -> bool {
            // SAFETY: per the contract.
            unsafe { any_next(stringify!($next), istart, iend) }
        }
    };
}

macro_rules! ull_runtime_loop {
    ($start:ident, $next:ident, $ordered:expr) => {
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $start(
            up: bool,
            start: c_ulonglong,
            end: c_ulonglong,
            incr: c_ulonglong,
            istart: *mut c_ulonglong,
            iend: *mut c_ulonglong,
        ) -> bool {
            // SAFETY: per the contract.
            unsafe {
                ull_start(
                    stringify!($start),
                    SCHED_RUNTIME,
                    $ordered,
                    up,
                    start,
                    end,
                    incr,
                    0,
                    istart,
                    iend,
                )
            }
        }
        /// # Safety
        /// `istart` and `iend` are valid pointers (the libgomp ABI).
        #[no_mangle]
        pub unsafe extern "C" fn $next(istart: *mut c_ulonglong, iend: *mut c_ulonglong) -> bool {
            // SAFETY: per the contract.
            unsafe { any_next(stringify!($next), istart, iend) }
        }
    };
}

long_loop!(
    GOMP_loop_static_start,
    GOMP_loop_static_next,
    SCHED_STATIC,
    false
);
long_loop!(
    GOMP_loop_dynamic_start,
    GOMP_loop_dynamic_next,
    SCHED_DYNAMIC,
    false
);
long_loop!(
    GOMP_loop_guided_start,
    GOMP_loop_guided_next,
    SCHED_GUIDED,
    false
);
long_loop!(
    GOMP_loop_nonmonotonic_dynamic_start,
    GOMP_loop_nonmonotonic_dynamic_next,
    SCHED_DYNAMIC,
    false
);
long_loop!(
    GOMP_loop_nonmonotonic_guided_start,
    GOMP_loop_nonmonotonic_guided_next,
    SCHED_GUIDED,
    false
);
long_runtime_loop!(GOMP_loop_runtime_start, GOMP_loop_runtime_next, false);
long_runtime_loop!(
    GOMP_loop_nonmonotonic_runtime_start,
    GOMP_loop_nonmonotonic_runtime_next,
    false
);
long_runtime_loop!(
    GOMP_loop_maybe_nonmonotonic_runtime_start,
    GOMP_loop_maybe_nonmonotonic_runtime_next,
    false
);
long_loop!(
    GOMP_loop_ordered_static_start,
    GOMP_loop_ordered_static_next,
    SCHED_STATIC,
    true
);
long_loop!(
    GOMP_loop_ordered_dynamic_start,
    GOMP_loop_ordered_dynamic_next,
    SCHED_DYNAMIC,
    true
);
long_loop!(
    GOMP_loop_ordered_guided_start,
    GOMP_loop_ordered_guided_next,
    SCHED_GUIDED,
    true
);
long_runtime_loop!(
    GOMP_loop_ordered_runtime_start,
    GOMP_loop_ordered_runtime_next,
    true
);

ull_loop!(
    GOMP_loop_ull_static_start,
    GOMP_loop_ull_static_next,
    SCHED_STATIC,
    false
);
ull_loop!(
    GOMP_loop_ull_dynamic_start,
    GOMP_loop_ull_dynamic_next,
    SCHED_DYNAMIC,
    false
);
ull_loop!(
    GOMP_loop_ull_guided_start,
    GOMP_loop_ull_guided_next,
    SCHED_GUIDED,
    false
);
ull_loop!(
    GOMP_loop_ull_nonmonotonic_dynamic_start,
    GOMP_loop_ull_nonmonotonic_dynamic_next,
    SCHED_DYNAMIC,
    false
);
ull_loop!(
    GOMP_loop_ull_nonmonotonic_guided_start,
    GOMP_loop_ull_nonmonotonic_guided_next,
    SCHED_GUIDED,
    false
);
ull_runtime_loop!(
    GOMP_loop_ull_runtime_start,
    GOMP_loop_ull_runtime_next,
    false
);
ull_runtime_loop!(
    GOMP_loop_ull_nonmonotonic_runtime_start,
    GOMP_loop_ull_nonmonotonic_runtime_next,
    false
);
ull_runtime_loop!(
    GOMP_loop_ull_maybe_nonmonotonic_runtime_start,
    GOMP_loop_ull_maybe_nonmonotonic_runtime_next,
    false
);
ull_loop!(
    GOMP_loop_ull_ordered_static_start,
    GOMP_loop_ull_ordered_static_next,
    SCHED_STATIC,
    true
);
ull_loop!(
    GOMP_loop_ull_ordered_dynamic_start,
    GOMP_loop_ull_ordered_dynamic_next,
    SCHED_DYNAMIC,
    true
);
ull_loop!(
    GOMP_loop_ull_ordered_guided_start,
    GOMP_loop_ull_ordered_guided_next,
    SCHED_GUIDED,
    true
);
ull_runtime_loop!(
    GOMP_loop_ull_ordered_runtime_start,
    GOMP_loop_ull_ordered_runtime_next,
    true
);

/// The GCC 9+ generic loop start (`sched` is a `GFS_*` kind, possibly with the monotonic bit).
///
/// # Safety
/// `istart`/`iend` are valid or null (then only the loop is entered).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_start(
    start: c_long,
    end: c_long,
    incr: c_long,
    sched: c_long,
    chunk: c_long,
    istart: *mut c_long,
    iend: *mut c_long,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    no_extras("GOMP_loop_start", reductions, mem);
    // SAFETY: per the contract.
    unsafe {
        long_start(
            "GOMP_loop_start",
            sched as u32,
            false,
            start,
            end,
            incr,
            chunk,
            istart,
            iend,
        )
    }
}

/// # Safety
/// As [`GOMP_loop_start`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_ordered_start(
    start: c_long,
    end: c_long,
    incr: c_long,
    sched: c_long,
    chunk: c_long,
    istart: *mut c_long,
    iend: *mut c_long,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    no_extras("GOMP_loop_ordered_start", reductions, mem);
    // SAFETY: per the contract.
    unsafe {
        long_start(
            "GOMP_loop_ordered_start",
            sched as u32,
            true,
            start,
            end,
            incr,
            chunk,
            istart,
            iend,
        )
    }
}

/// # Safety
/// As [`GOMP_loop_start`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_ull_start(
    up: bool,
    start: c_ulonglong,
    end: c_ulonglong,
    incr: c_ulonglong,
    sched: c_long,
    chunk: c_ulonglong,
    istart: *mut c_ulonglong,
    iend: *mut c_ulonglong,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    no_extras("GOMP_loop_ull_start", reductions, mem);
    // SAFETY: per the contract.
    unsafe {
        ull_start(
            "GOMP_loop_ull_start",
            sched as u32,
            false,
            up,
            start,
            end,
            incr,
            chunk,
            istart,
            iend,
        )
    }
}

/// # Safety
/// As [`GOMP_loop_start`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_loop_ull_ordered_start(
    up: bool,
    start: c_ulonglong,
    end: c_ulonglong,
    incr: c_ulonglong,
    sched: c_long,
    chunk: c_ulonglong,
    istart: *mut c_ulonglong,
    iend: *mut c_ulonglong,
    reductions: *mut usize,
    mem: *mut *mut c_void,
) -> bool {
    no_extras("GOMP_loop_ull_ordered_start", reductions, mem);
    // SAFETY: per the contract.
    unsafe {
        ull_start(
            "GOMP_loop_ull_ordered_start",
            sched as u32,
            true,
            up,
            start,
            end,
            incr,
            chunk,
            istart,
            iend,
        )
    }
}

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

macro_rules! parallel_loop {
    ($name:ident, $sched:expr) => {
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
            chunk: c_long,
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
                    chunk,
                    flags,
                )
            }
        }
    };
}

macro_rules! parallel_runtime_loop {
    ($name:ident) => {
        /// # Safety
        /// `func` is the program's outlined function and `data` its argument.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            func: Option<team::RegionFn>,
            data: *mut c_void,
            num_threads: c_uint,
            start: c_long,
            end: c_long,
            incr: c_long,
            flags: c_uint,
        ) {
            // SAFETY: per the contract.
            unsafe {
                parallel_loop(
                    stringify!($name),
                    func,
                    data,
                    num_threads,
                    SCHED_RUNTIME,
                    start,
                    end,
                    incr,
                    0,
                    flags,
                )
            }
        }
    };
}

parallel_loop!(GOMP_parallel_loop_static, SCHED_STATIC);
parallel_loop!(GOMP_parallel_loop_dynamic, SCHED_DYNAMIC);
parallel_loop!(GOMP_parallel_loop_guided, SCHED_GUIDED);
parallel_loop!(GOMP_parallel_loop_nonmonotonic_dynamic, SCHED_DYNAMIC);
parallel_loop!(GOMP_parallel_loop_nonmonotonic_guided, SCHED_GUIDED);
parallel_runtime_loop!(GOMP_parallel_loop_runtime);
parallel_runtime_loop!(GOMP_parallel_loop_nonmonotonic_runtime);
parallel_runtime_loop!(GOMP_parallel_loop_maybe_nonmonotonic_runtime);

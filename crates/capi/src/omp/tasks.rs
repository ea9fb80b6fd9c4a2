//! Explicit tasks (`GOMP_task`, `GOMP_taskloop*`), their synchronization (`taskwait`,
//! `taskgroup`, `taskyield`) and cancellation entry points.
//!
//! A task is deferred when it may be: its record and firstprivate block (copied at creation
//! through gcc's `cpyfn`, else byte for byte) go into the shared heap and the team's task list,
//! and a team thread runs it at a task scheduling point (`deferred` says which and how the
//! data reaches the node that runs it). Otherwise (`if(0)`, inside a final task, a team of
//! one, a team with many unfinished tasks) it waits for its dependences and runs at once in
//! the creating thread, on a copy in the creating thread's shared stack frame (or the shared
//! heap when large). A taskloop is split into deferred tasks of consecutive iterations
//! (`grainsize`, `num_tasks`, else one per thread) inside its taskgroup, or runs as one
//! undeferred task when tasks cannot be deferred.
//!
//! Cancellation is never activated (as libgomp without `OMP_CANCELLATION=true`): the
//! cancellation points answer "not cancelled".
//!
//! Owns: task execution. Must not touch: team memory.
use super::deferred::{self, CopyFn, TaskFn};
use super::loops::{count_long, count_ull, From64};
use super::{icv, refuse, run};
use crate::api::node_ref;
use std::ffi::{c_int, c_long, c_uint, c_ulong, c_ulonglong, c_void};

const FLAG_FINAL: c_uint = 1 << 1;
const FLAG_DEPEND: c_uint = 1 << 3;
const FLAG_PRIORITY: c_uint = 1 << 4;
const FLAG_UP: c_uint = 1 << 8;
const FLAG_GRAINSIZE: c_uint = 1 << 9;
const FLAG_IF: c_uint = 1 << 10;
const FLAG_NOGROUP: c_uint = 1 << 11;
const FLAG_REDUCTION: c_uint = 1 << 12;
const FLAG_DETACH: c_uint = 1 << 13;

/// Bytes of firstprivate data copied into the creating thread's stack frame.
const INLINE: usize = 1024;

/// Run `fn` on a private copy of `data` (`size` bytes aligned to `align`), after `prepare`
/// has adjusted the copy (taskloop bounds).
///
/// # Safety
/// `func`, `cpyfn` and `data` are what gcc passes to `GOMP_task`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_copy(
    call: &'static str,
    func: TaskFn,
    data: *mut c_void,
    cpyfn: Option<CopyFn>,
    size: usize,
    align: usize,
    final_: bool,
    prepare: impl FnOnce(*mut c_void),
) {
    let align = align.max(1);
    // This frame is on the calling thread's (shared) stack: the copy lives there.
    let mut local = [0u64; INLINE / 8 + 8];
    let (buf, heap) = if size + align <= std::mem::size_of_val(&local) {
        let p = local.as_mut_ptr() as usize;
        (p.next_multiple_of(align) as *mut c_void, None)
    } else {
        let p = run(call, || {
            Ok(node_ref()?.alloc_with(
                size.max(1),
                align.next_power_of_two(),
                node_ref()?.default_placement(),
            )?)
        });
        (p.cast::<c_void>(), Some(p))
    };
    match cpyfn {
        // SAFETY: gcc's copy function from `data` into a buffer of `size` bytes.
        Some(c) => unsafe { c(buf, data) },
        // SAFETY: `data` has `size` bytes; `buf` has room for them.
        None if size > 0 => unsafe {
            std::ptr::copy_nonoverlapping(data.cast::<u8>(), buf.cast::<u8>(), size)
        },
        None => {}
    }
    prepare(buf);
    let was_final = icv::with(|f| {
        let was = f.in_final;
        f.in_final = was || final_;
        was
    });
    // SAFETY: the task's outlined function on its own copy.
    unsafe { func(buf) };
    icv::with(|f| f.in_final = was_final);
    if let Some(p) = heap {
        run(call, || Ok(node_ref()?.free(p)?));
    }
    std::hint::black_box(&mut local);
}

/// `#pragma omp task`: deferred (queued for the team, see `deferred`) when it may be, else
/// run now in the calling thread once its dependences are met (`if(0)`, inside a final task,
/// in a team of one, or while the team has many unfinished tasks, as libgomp).
///
/// # Safety
/// The arguments are what gcc passes (the libgomp ABI of GCC 9 and later).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn GOMP_task(
    func: Option<TaskFn>,
    data: *mut c_void,
    cpyfn: Option<CopyFn>,
    arg_size: c_long,
    arg_align: c_long,
    if_clause: bool,
    flags: c_uint,
    depend: *mut *mut c_void,
    priority: c_int,
    _detach: *mut c_void,
) {
    if flags & FLAG_DETACH != 0 {
        refuse("GOMP_task", "a task with a detach clause");
    }
    let Some(func) = func else { return };
    let (size, align) = (arg_size.max(0) as usize, arg_align.max(1) as usize);
    let final_ = flags & FLAG_FINAL != 0;
    // SAFETY: gcc's depend array when the flag says there is one.
    let dl = run("GOMP_task", || {
        Ok(if flags & FLAG_DEPEND != 0 {
            unsafe { deferred::parse_depend(depend) }
        } else {
            Vec::new()
        })
    });
    let priority = if flags & FLAG_PRIORITY != 0 {
        priority
    } else {
        0
    };
    if if_clause && deferred::can_defer() {
        let t = deferred::alloc_task(size, align, dl.len());
        let buf = deferred::data_of(t);
        match cpyfn {
            // SAFETY: gcc's copy function from `data` into the task's block of `size` bytes.
            Some(c) => unsafe { c(buf, data) },
            // SAFETY: `data` has `size` bytes; the block has room for them.
            None if size > 0 => unsafe {
                std::ptr::copy_nonoverlapping(data.cast::<u8>(), buf.cast::<u8>(), size)
            },
            None => {}
        }
        deferred::enqueue(t, func, &dl, priority, final_);
        run("GOMP_task", || {
            drop(dl);
            Ok(())
        });
        return;
    }
    deferred::wait_deps("GOMP_task", &dl);
    run("GOMP_task", || {
        drop(dl);
        Ok(())
    });
    deferred::undeferred(|| {
        // SAFETY: per the contract.
        unsafe { run_copy("GOMP_task", func, data, cpyfn, size, align, final_, |_| {}) }
    });
}

/// The iterations of a taskloop: `n` of them from `start` by `step` (two's complement bits),
/// ending at `end`; `num` is gcc's `num_tasks` or grainsize argument.
#[derive(Clone, Copy)]
struct Range<T> {
    start: T,
    end: T,
    n: u64,
    start_bits: u64,
    step_bits: u64,
    num: u64,
}

/// How many tasks a taskloop of `n` iterations becomes (libgomp's choice: `grainsize` gives
/// tasks of at least that many iterations, `num_tasks` that many, neither one per thread).
fn task_count(n: u64, num: u64, flags: c_uint) -> u64 {
    let k = if flags & FLAG_GRAINSIZE != 0 {
        n / num.max(1)
    } else if num == 0 {
        u64::from(icv::with(|f| f.nthreads))
    } else {
        num
    };
    k.clamp(1, n.max(1))
}

/// A taskloop: gcc's task function reads its bounds from the first two words of its data, of
/// the loop's integer type `T`. Split into deferred tasks of consecutive iterations when tasks
/// may be deferred (and `if` is true), else one undeferred task runs the whole range.
///
/// # Safety
/// The arguments are what gcc passes.
#[allow(clippy::too_many_arguments)]
unsafe fn taskloop<T: Copy + From64>(
    call: &'static str,
    func: Option<TaskFn>,
    data: *mut c_void,
    cpyfn: Option<CopyFn>,
    arg_size: c_long,
    arg_align: c_long,
    flags: c_uint,
    priority: c_int,
    range: Range<T>,
) {
    let Range { start, end, .. } = range;
    let group = flags & FLAG_NOGROUP == 0;
    if group {
        GOMP_taskgroup_start();
        if flags & FLAG_REDUCTION != 0 {
            // SAFETY: with a reduction, gcc's taskloop data is {start, end, reduction array}.
            let reds = unsafe {
                data.cast::<T>()
                    .add(2)
                    .cast::<*mut usize>()
                    .read_unaligned()
            };
            // SAFETY: gcc's reduction array.
            unsafe { super::task_red::GOMP_taskgroup_reduction_register(reds) };
        }
    }
    let Some(func) = func else {
        if group {
            GOMP_taskgroup_end();
        }
        return;
    };
    let (size, align) = (arg_size.max(0) as usize, arg_align.max(1) as usize);
    let set = |buf: *mut c_void| {
        let b = buf.cast::<T>();
        // SAFETY: gcc's taskloop data starts with the task's start and end.
        unsafe {
            b.write(start);
            b.add(1).write(end);
        }
    };
    let tasks = task_count(range.n, range.num, flags);
    if flags & FLAG_IF != 0 && tasks > 1 && deferred::can_defer() {
        let priority = if flags & FLAG_PRIORITY != 0 {
            priority
        } else {
            0
        };
        let (q, r) = (range.n / tasks, range.n % tasks);
        let mut lo = 0u64;
        for i in 0..tasks {
            let hi = lo + q + u64::from(i < r);
            let bound = |k: u64| {
                T::from64(
                    range
                        .start_bits
                        .wrapping_add(k.wrapping_mul(range.step_bits)),
                )
            };
            let (s, e) = (bound(lo), if hi == range.n { end } else { bound(hi) });
            let t = deferred::alloc_task(size, align, 0);
            let buf = deferred::data_of(t);
            match cpyfn {
                // SAFETY: gcc's copy function from `data` into the task's block.
                Some(c) => unsafe { c(buf, data) },
                // SAFETY: `data` has `size` bytes; the block has room for them.
                None if size > 0 => unsafe {
                    std::ptr::copy_nonoverlapping(data.cast::<u8>(), buf.cast::<u8>(), size)
                },
                None => {}
            }
            let b = buf.cast::<T>();
            // SAFETY: gcc's taskloop data starts with the task's start and end.
            unsafe {
                b.write(s);
                b.add(1).write(e);
            }
            deferred::enqueue(t, func, &[], priority, flags & FLAG_FINAL != 0);
            lo = hi;
        }
    } else {
        deferred::undeferred(|| {
            // SAFETY: per the contract.
            unsafe {
                run_copy(
                    call,
                    func,
                    data,
                    cpyfn,
                    size,
                    align,
                    flags & FLAG_FINAL != 0,
                    set,
                )
            }
        });
    }
    if group {
        GOMP_taskgroup_end();
    }
}

/// The `GOMP_taskloop` entries, one per loop integer type `$int`.
macro_rules! taskloops {
    ($($(#[$doc:meta])* $name:ident: $int:ty, $count:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// The arguments are what gcc passes.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            func: Option<TaskFn>,
            data: *mut c_void,
            cpyfn: Option<CopyFn>,
            arg_size: c_long,
            arg_align: c_long,
            flags: c_uint,
            num_tasks: c_ulong,
            priority: c_int,
            start: $int,
            end: $int,
            step: $int,
        ) {
            let (name, size, align) = (stringify!($name), arg_size, arg_align);
            let range = Range {
                start,
                end,
                n: $count(flags, start, end, step),
                start_bits: start as u64,
                step_bits: step as u64,
                num: num_tasks as u64,
            };
            // SAFETY: per the contract.
            unsafe { taskloop(name, func, data, cpyfn, size, align, flags, priority, range) }
        }
    )*};
}

/// Iterations of a signed taskloop.
fn count_signed(_flags: c_uint, start: c_long, end: c_long, step: c_long) -> u64 {
    count_long(start, end, step)
}

/// Iterations of an unsigned taskloop (`GOMP_TASK_FLAG_UP` for an up-count).
fn count_unsigned(flags: c_uint, start: c_ulonglong, end: c_ulonglong, step: c_ulonglong) -> u64 {
    count_ull(flags & FLAG_UP != 0, start, end, step)
}

taskloops! {
    /// `#pragma omp taskloop` over `start..end` by `step` (signed), split into tasks.
    GOMP_taskloop: c_long, count_signed;
    /// The unsigned form of [`GOMP_taskloop`] (`flags` has `GOMP_TASK_FLAG_UP` for an
    /// up-count).
    GOMP_taskloop_ull: c_ulonglong, count_unsigned;
}

/// `#pragma omp taskwait`: the calling task's children run (here or elsewhere) to their end.
#[no_mangle]
pub extern "C" fn GOMP_taskwait() {
    deferred::taskwait();
}

/// `taskwait depend(...)`: wait for the calling task's children the dependences name.
///
/// # Safety
/// `depend` is gcc's depend array.
#[no_mangle]
pub unsafe extern "C" fn GOMP_taskwait_depend(depend: *mut *mut c_void) {
    // SAFETY: per the contract.
    let dl = run("GOMP_taskwait_depend", || {
        Ok(unsafe { deferred::parse_depend(depend) })
    });
    deferred::wait_deps("GOMP_taskwait_depend", &dl);
    run("GOMP_taskwait_depend", || {
        drop(dl);
        Ok(())
    });
}

/// `#pragma omp taskyield`: run one queued task if one can start.
#[no_mangle]
pub extern "C" fn GOMP_taskyield() {
    deferred::taskyield();
}

/// `#pragma omp taskgroup`: its tasks (and their descendants) end before its end; it keeps
/// the task reductions registered in it (`task_red`).
#[no_mangle]
pub extern "C" fn GOMP_taskgroup_start() {
    run("GOMP_taskgroup_start", || {
        super::task_red::group_start();
        Ok(())
    });
    deferred::group_start();
}

#[no_mangle]
pub extern "C" fn GOMP_taskgroup_end() {
    deferred::group_end();
    run("GOMP_taskgroup_end", || {
        super::task_red::group_end();
        Ok(())
    });
}

/// `#pragma omp cancellation point`: not cancelled.
#[no_mangle]
pub extern "C" fn GOMP_cancellation_point(_which: c_int) -> bool {
    false
}

/// `#pragma omp cancel`: cancellation is not activated, so nothing is cancelled.
#[no_mangle]
pub extern "C" fn GOMP_cancel(_which: c_int, _do_cancel: bool) -> bool {
    false
}

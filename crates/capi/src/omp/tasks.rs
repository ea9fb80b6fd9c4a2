//! Explicit tasks (`GOMP_task`, `GOMP_taskloop*`), their synchronization (`taskwait`,
//! `taskgroup`, `taskyield`) and cancellation entry points.
//!
//! Every task runs at once, to completion, in the thread that creates it (an undeferred task,
//! as for `if(0)`; OpenMP lets the runtime schedule a task at its creation). Its firstprivate
//! block is copied first (through gcc's `cpyfn` when it has one, else byte for byte) into a
//! buffer on the creating thread's shared stack (or the shared heap when large), so the task
//! sees its own copies and pointers to them are valid on every node. Running in creation
//! order satisfies every `depend` clause, and every task is complete when `taskwait`,
//! `taskgroup` end or a barrier is reached. What this costs: tasks give no parallelism here
//! (a parallel region's work should come from worksharing loops or from tasks created by
//! several threads).
//!
//! Cancellation is never activated (as libgomp without `OMP_CANCELLATION=true`): the
//! cancellation points answer "not cancelled".
//!
//! Owns: task execution. Must not touch: team memory.
use super::{icv, refuse, run};
use crate::api::node_ref;
use std::ffi::{c_int, c_long, c_uint, c_ulong, c_ulonglong, c_void};

/// A task's function and its firstprivate copy function.
type TaskFn = unsafe extern "C" fn(*mut c_void);
type CopyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

const FLAG_FINAL: c_uint = 1 << 1;
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

/// `#pragma omp task`: runs the task now (see the module doc).
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
    _if_clause: bool,
    flags: c_uint,
    _depend: *mut *mut c_void,
    _priority: c_int,
    _detach: *mut c_void,
) {
    if flags & FLAG_DETACH != 0 {
        refuse("GOMP_task", "a task with a detach clause");
    }
    let Some(func) = func else { return };
    let (size, align) = (arg_size.max(0) as usize, arg_align.max(1) as usize);
    // SAFETY: per the contract.
    unsafe {
        run_copy(
            "GOMP_task",
            func,
            data,
            cpyfn,
            size,
            align,
            flags & FLAG_FINAL != 0,
            |_| {},
        )
    }
}

/// A taskloop: one task runs the whole range `start..end` (gcc's task function reads its
/// bounds from the first two words of its data, of the loop's integer type `T`).
///
/// # Safety
/// The arguments are what gcc passes.
#[allow(clippy::too_many_arguments)]
unsafe fn taskloop<T: Copy>(
    call: &'static str,
    func: Option<TaskFn>,
    data: *mut c_void,
    cpyfn: Option<CopyFn>,
    arg_size: c_long,
    arg_align: c_long,
    flags: c_uint,
    start: T,
    end: T,
) {
    let group = flags & FLAG_NOGROUP == 0;
    if group {
        super::task_red::group_start();
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
            super::task_red::group_end();
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
    if group {
        super::task_red::group_end();
    }
}

/// The `GOMP_taskloop` entries, one per loop integer type `$int`.
macro_rules! taskloops {
    ($($(#[$doc:meta])* $name:ident: $int:ty;)*) => {$(
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
            _num_tasks: c_ulong,
            _priority: c_int,
            start: $int,
            end: $int,
            _step: $int,
        ) {
            let (name, size, align) = (stringify!($name), arg_size, arg_align);
            // SAFETY: per the contract.
            unsafe { taskloop(name, func, data, cpyfn, size, align, flags, start, end) }
        }
    )*};
}

taskloops! {
    /// `#pragma omp taskloop` over `start..end` by `step` (signed): one task runs the whole
    /// range.
    GOMP_taskloop: c_long;
    /// The unsigned form of [`GOMP_taskloop`] (`flags` has `GOMP_TASK_FLAG_UP` for an
    /// up-count; the direction does not matter, as one task runs the whole range).
    GOMP_taskloop_ull: c_ulonglong;
}

/// Every child task is complete already.
#[no_mangle]
pub extern "C" fn GOMP_taskwait() {}

/// `taskwait depend(...)`: every earlier task is complete already.
#[no_mangle]
pub extern "C" fn GOMP_taskwait_depend(_depend: *mut *mut c_void) {}

#[no_mangle]
pub extern "C" fn GOMP_taskyield() {}

/// `#pragma omp taskgroup`: its tasks complete before its end (they run at once); it keeps
/// the task reductions registered in it (`task_red`).
#[no_mangle]
pub extern "C" fn GOMP_taskgroup_start() {
    super::task_red::group_start();
}

#[no_mangle]
pub extern "C" fn GOMP_taskgroup_end() {
    super::task_red::group_end();
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

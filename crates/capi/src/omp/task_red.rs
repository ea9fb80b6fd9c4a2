//! Task reductions as gcc lowers them (`taskgroup task_reduction(...)` with `in_reduction`
//! tasks, and `taskloop reduction(...)`): `GOMP_taskgroup_reduction_register`,
//! `GOMP_task_reduction_remap`, `GOMP_taskgroup_reduction_unregister`, and the taskgroups
//! they attach to.
//!
//! gcc describes the reduction variables in an array `d` on the registering thread's stack:
//! `d[0]` variables, `d[1]` bytes of one thread's private block, `d[2]` its alignment (the
//! runtime replaces it by the blocks' address), `d[4]` the next array of a chain, `d[5]` the
//! runtime's (here: 1 marks the head of a registration), `d[6]` the blocks' end, then per
//! variable `d[7+3j]` its address, `d[7+3j+1]` its offset in a block, `d[7+3j+2]` (the
//! runtime's: the array it belongs to). Registering allocates one zeroed block per team thread
//! in the shared heap (`nthreads × d[1]`); remapping gives a task the address of a variable in
//! its thread's block (by the original's address, or by an address inside any thread's block);
//! after the taskgroup, gcc's own code combines the blocks into the originals and
//! unregisters, which frees them. A block is written only by tasks running on its thread, one
//! at a time, and the blocks are Squall memory read after the taskgroup's end (an acquire);
//! a deferred task sees the registrations of where it was created and remaps into the
//! blocks of the thread that runs it (`deferred`). A taskgroup inherits the registrations of the one around it, as in libgomp.
//!
//! Owns: the per-thread taskgroup stack of registrations. Must not touch: task execution.
use super::team::{slot_word, ws_enter, ws_leave};
use super::{icv, run, word};
use crate::api::node_ref;
use crate::error::CapiError;
use squall::{AtomicOp, MemOrder};
use std::cell::RefCell;
use std::ffi::c_void;
use std::time::Duration;

thread_local! {
    /// The registrations visible in each open taskgroup of this thread (innermost last; 0:
    /// none).
    static GROUPS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The registrations visible in the calling thread's innermost taskgroup (0: none).
pub fn current() -> usize {
    GROUPS.with(|g| g.borrow().last().copied().unwrap_or(0))
}

/// A deferred task starts on this thread: it sees the registrations `red` visible where it
/// was created (its `in_reduction` remaps into the running thread's blocks). Through `run`.
pub fn enter(red: usize) {
    GROUPS.with(|g| g.borrow_mut().push(red));
}

/// The task of the matching [`enter`] ended.
pub fn leave() {
    GROUPS.with(|g| {
        g.borrow_mut().pop();
    });
}

/// `GOMP_taskgroup_start`: a taskgroup that sees the registrations of the enclosing one.
pub fn group_start() {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let top = g.last().copied().unwrap_or(0);
        g.push(top);
    });
}

/// `GOMP_taskgroup_end`.
pub fn group_end() {
    GROUPS.with(|g| {
        g.borrow_mut().pop();
    });
}

/// gcc's reduction array at `d` as its words (7 + 3 per variable).
///
/// # Safety
/// `d` is a reduction array gcc made, alive and not otherwise borrowed while the slice is used.
unsafe fn array<'a>(d: usize) -> &'a mut [usize] {
    // SAFETY: per the contract: d[0] is the variable count, the array has 7 + 3·d[0] words.
    unsafe {
        let vars = *(d as *const usize);
        std::slice::from_raw_parts_mut(d as *mut usize, 7 + 3 * vars)
    }
}

/// Register the chain of reduction arrays at `data` in the current taskgroup.
///
/// # Safety
/// `data` is the array gcc passes.
unsafe fn register(data: usize) -> Result<(), CapiError> {
    if GROUPS.with(|g| g.borrow().is_empty()) {
        group_start();
    }
    let nthreads = icv::with(|f| f.nthreads).max(1);
    // SAFETY: per the contract.
    unsafe { register_blocks(data, nthreads, current())? };
    GROUPS.with(|g| {
        if let Some(top) = g.borrow_mut().last_mut() {
            *top = data;
        }
    });
    Ok(())
}

/// Give the chain of reduction arrays at `data` one zeroed block per thread of a team of
/// `nthreads` (the chain's end linked to `old`).
///
/// # Safety
/// `data` is a reduction array gcc made.
pub unsafe fn register_blocks(data: usize, nthreads: u32, old: usize) -> Result<(), CapiError> {
    let node = node_ref()?;
    let mut d = data;
    loop {
        // SAFETY: `d` walks gcc's chain of reduction arrays (the contract).
        let a = unsafe { array(d) };
        let bytes = a[1].saturating_mul(nthreads as usize).max(1);
        let p = node.alloc_with(
            bytes,
            a[2].max(8).next_power_of_two(),
            node.default_placement(),
        )?;
        // SAFETY: `p` has `bytes` bytes.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        a[2] = p as usize;
        a[6] = p as usize + bytes;
        a[5] = usize::from(d == data);
        for j in 0..a[0] {
            a[7 + 3 * j + 2] = d;
        }
        if a[4] == 0 {
            a[4] = old;
            break;
        }
        d = a[4];
    }
    Ok(())
}

/// Another thread of a worksharing construct registered `first`: make the calling thread's
/// own chain `data` (the same variables) use its blocks.
///
/// # Safety
/// Both are reduction arrays gcc made for the same construct; `first`'s is registered.
pub unsafe fn share_blocks(data: usize, first: usize, old: usize) {
    let (mut d, mut f) = (data, first);
    loop {
        // SAFETY: per the contract (chains of the same shape: the first's follows ours).
        let (a, b) = unsafe { (array(d), array(f)) };
        a[2] = b[2];
        a[6] = b[6];
        a[5] = usize::from(d == data);
        for j in 0..a[0] {
            a[7 + 3 * j + 2] = d;
        }
        if a[4] == 0 {
            a[4] = old;
            break;
        }
        (d, f) = (a[4], b[4]);
    }
}

/// A worksharing construct or parallel region with `reduction(task, ...)`: the calling
/// thread's taskgroup sees `data`. Through `run`.
pub fn enter_registered(data: usize) {
    GROUPS.with(|g| g.borrow_mut().push(data));
}

/// Where the calling thread's copy of the reduction variable at `p` is, and the original's
/// address: found by the original's address, else by an address inside some thread's block.
///
/// # Safety
/// The current taskgroup's registrations are live arrays.
unsafe fn remap_one(p: usize, tid: usize) -> Option<(usize, usize)> {
    let mut d = current();
    while d != 0 {
        // SAFETY: a registered array of the chain (the contract).
        let a = unsafe { array(d) };
        if let Some(j) = (0..a[0]).find(|&j| a[7 + 3 * j] == p) {
            return Some((a[2] + tid * a[1] + a[7 + 3 * j + 1], p));
        }
        d = a[4];
    }
    d = current();
    while d != 0 {
        // SAFETY: as above.
        let a = unsafe { array(d) };
        if p >= a[2] && p < a[6] && a[1] > 0 {
            let off = (p - a[2]) % a[1];
            let j = (0..a[0]).find(|&j| a[7 + 3 * j + 1] == off)?;
            return Some((a[2] + tid * a[1] + off, a[7 + 3 * j]));
        }
        d = a[4];
    }
    None
}

/// `taskgroup task_reduction(...)` (and a taskloop's `reduction`): register the variables.
///
/// # Safety
/// `data` is the array gcc passes.
#[no_mangle]
pub unsafe extern "C" fn GOMP_taskgroup_reduction_register(data: *mut usize) {
    // SAFETY: per the contract.
    run("GOMP_taskgroup_reduction_register", || unsafe {
        register(data as usize)
    })
}

/// After gcc combined the blocks into the originals: free the blocks of this registration.
///
/// # Safety
/// `data` is an array registered by [`GOMP_taskgroup_reduction_register`].
#[no_mangle]
pub unsafe extern "C" fn GOMP_taskgroup_reduction_unregister(data: *mut usize) {
    run("GOMP_taskgroup_reduction_unregister", || {
        let node = node_ref()?;
        let mut d = data as usize;
        loop {
            // SAFETY: the registered chain; its head has d[5] = 1, the next head stops the walk.
            let a = unsafe { array(d) };
            node.free(a[2] as *mut u8)?;
            d = a[4];
            // SAFETY: as above.
            if d == 0 || unsafe { array(d) }[5] != 0 {
                break;
            }
        }
        Ok(())
    })
}

/// `in_reduction`: replace each of the `cnt` addresses in `ptrs` by the calling thread's
/// copy; for the first `cntorig`, also store the original's address at `ptrs[cnt + i]`.
///
/// # Safety
/// `ptrs` has `cnt + cntorig` entries, as gcc passes.
#[no_mangle]
pub unsafe extern "C" fn GOMP_task_reduction_remap(
    cnt: usize,
    cntorig: usize,
    ptrs: *mut *mut c_void,
) {
    run("GOMP_task_reduction_remap", || {
        let tid = icv::with(|f| f.tid) as usize;
        for i in 0..cnt {
            // SAFETY: `ptrs` has cnt + cntorig entries.
            let slot = unsafe { ptrs.add(i) };
            let p = unsafe { *slot } as usize;
            // SAFETY: the current registrations are live.
            let (mine, orig) = unsafe { remap_one(p, tid) }.ok_or_else(|| CapiError::Invalid {
                call: "GOMP_task_reduction_remap",
                why: format!("{p:#x} is no variable of an enclosing task_reduction"),
            })?;
            // SAFETY: as above.
            unsafe {
                *slot = mine as *mut c_void;
                if i < cntorig {
                    *ptrs.add(cnt + i) = orig as *mut c_void;
                }
            }
        }
        Ok(())
    })
}

/// A worksharing construct with `reduction(task, ...)` (the `reductions` argument of
/// `GOMP_loop_start` and `GOMP_sections2_start`): an implicit taskgroup around the construct
/// whose registration is shared by the team. The first thread to arrive registers its array
/// (one block per thread) and publishes it in word 4 of a worksharing slot of its own; the
/// others make their arrays use its blocks (read after an acquire). Every thread passes its
/// own array, and gcc's code reads the blocks' address from it.
///
/// # Safety
/// `data` is the array gcc passes.
pub unsafe fn workshare_register(call: &'static str, data: *mut usize) {
    super::tasks::GOMP_taskgroup_start();
    run(call, || {
        let (team, n) = icv::with(|f| (f.team, f.nthreads));
        let data = data as usize;
        let old = current();
        if team == 0 {
            // SAFETY: per the contract.
            unsafe { register_blocks(data, 1, old)? };
        } else {
            let ws = ws_enter(team)?;
            let at = slot_word(team, ws, 4);
            let node = node_ref()?;
            let seen = word(
                at,
                AtomicOp::CompareSwap {
                    expected: 0,
                    new: 1,
                },
            )?;
            if seen == 0 {
                // SAFETY: per the contract.
                unsafe { register_blocks(data, n, old)? };
                node.atomic_ordered(at, 8, AtomicOp::Swap(data as u64), MemOrder::Release)?;
            } else {
                let mut pause = 1u64;
                while word(at, AtomicOp::Load)? <= 1 {
                    std::thread::sleep(Duration::from_micros(pause));
                    pause = (pause * 2).min(1000);
                }
                let first = node.atomic_ordered(at, 8, AtomicOp::Load, MemOrder::Acquire)?;
                // SAFETY: the first thread's registered array of the same construct.
                unsafe { share_blocks(data, first as usize, old) };
            }
            ws_leave(team, ws, 2, n)?;
        }
        GROUPS.with(|g| {
            if let Some(top) = g.borrow_mut().last_mut() {
                *top = data;
            }
        });
        Ok(())
    });
}

/// The end of a worksharing construct's task reductions: its implicit taskgroup ends (its
/// tasks complete), thread 0 — which combined the blocks — frees them, then a barrier unless
/// `cancelled`.
#[no_mangle]
pub extern "C" fn GOMP_workshare_task_reduction_unregister(cancelled: bool) {
    let data = current();
    super::tasks::GOMP_taskgroup_end();
    if icv::with(|f| f.tid) == 0 && data != 0 {
        // SAFETY: the array registered by `workshare_register` for this construct.
        unsafe { GOMP_taskgroup_reduction_unregister(data as *mut usize) };
    }
    if !cancelled {
        super::team::barrier("GOMP_workshare_task_reduction_unregister");
    }
}

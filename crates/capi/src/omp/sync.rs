//! Mutual exclusion and one-thread constructs: `critical` (unnamed and named), the
//! `GOMP_atomic_start/end` lock gcc uses for atomics it cannot inline (and for some
//! reductions), `single` (with and without `copyprivate`) and the `omp_*_lock` API.
//!
//! Every lock is a Squall lock (FIFO across nodes, acquire on lock, release on unlock), so
//! the ends of critical regions carry their writes to the next holder on any node. A named
//! critical region is named by the address of the common symbol gcc passes (a program
//! global: the same on every node); an `omp_lock_t` by its address (in a global, on a shared
//! stack or in the shared heap). Nest locks keep their depth per thread (only the owner
//! reads it). `single`: the first thread to count itself into the construct's slot runs it.
//!
//! Owns: these constructs' semantics. Must not touch: loop hand-out (`loops`).
use super::team::{self, desc};
use super::{icv, run};
use crate::api::node_ref;
use crate::error::CapiError;
use crate::pthread::{mix, object_id};
use squall::{AtomicOp, LockId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

/// The lock of every unnamed critical region ("omp crit").
const CRITICAL: u64 = 0x6f6d_7020_6372_6974;
/// The lock of `GOMP_atomic_start/end` ("omp atom").
const ATOMIC: u64 = 0x6f6d_7020_6174_6f6d;

fn lock(call: &'static str, id: LockId) {
    // The uncontended cached case needs no stack switch (one compare-and-swap).
    if let Some(n) = squall::node_ref() {
        if n.lock_fast(id) {
            return;
        }
    }
    run(call, || Ok(node_ref()?.lock(id)?))
}

fn unlock(call: &'static str, id: LockId) {
    if let Some(n) = squall::node_ref() {
        if n.unlock_fast(id) {
            return;
        }
    }
    run(call, || Ok(node_ref()?.unlock(id)?))
}

#[no_mangle]
pub extern "C" fn GOMP_critical_start() {
    lock("GOMP_critical_start", LockId(mix(CRITICAL)));
}

#[no_mangle]
pub extern "C" fn GOMP_critical_end() {
    unlock("GOMP_critical_end", LockId(mix(CRITICAL)));
}

fn named(pptr: *mut *mut c_void) -> LockId {
    LockId(object_id(pptr as usize))
}

/// `#pragma omp critical (name)`: `pptr` is the address of gcc's `.gomp_critical_user_NAME`.
#[no_mangle]
pub extern "C" fn GOMP_critical_name_start(pptr: *mut *mut c_void) {
    lock("GOMP_critical_name_start", named(pptr));
}

#[no_mangle]
pub extern "C" fn GOMP_critical_name_end(pptr: *mut *mut c_void) {
    unlock("GOMP_critical_name_end", named(pptr));
}

#[no_mangle]
pub extern "C" fn GOMP_atomic_start() {
    lock("GOMP_atomic_start", LockId(mix(ATOMIC)));
}

#[no_mangle]
pub extern "C" fn GOMP_atomic_end() {
    unlock("GOMP_atomic_end", LockId(mix(ATOMIC)));
}

/// Count the calling thread into a `single`: true for the first one.
fn single_elect(call: &'static str) -> bool {
    let (team, n) = icv::with(|f| (f.team, f.nthreads));
    if team == 0 {
        return true;
    }
    run(call, || {
        let ws = team::ws_enter(team)?;
        let seen = super::word(team::slot_word(team, ws, 1), AtomicOp::FetchAdd(1))?;
        if seen + 1 == u64::from(n) {
            // The last one in resets the slot (ws_leave counted in `next` already).
            super::word(team::slot_word(team, ws, 1), AtomicOp::Swap(0))?;
            super::word(team::slot_word(team, ws, 2), AtomicOp::Swap(0))?;
            super::word(
                team::slot_word(team, ws, 0),
                AtomicOp::Swap(ws / team::SLOTS + 1),
            )?;
        }
        Ok(seen == 0)
    })
}

/// `#pragma omp single`: true in the one thread that runs it (gcc adds the barrier).
#[no_mangle]
pub extern "C" fn GOMP_single_start() -> bool {
    single_elect("GOMP_single_start")
}

/// `single copyprivate(...)`: null in the thread that runs the region; the others wait and
/// get the pointer that thread passes to `GOMP_single_copy_end`.
#[no_mangle]
pub extern "C" fn GOMP_single_copy_start() -> *mut c_void {
    if single_elect("GOMP_single_copy_start") {
        return std::ptr::null_mut();
    }
    team::barrier("GOMP_single_copy_start");
    let team = icv::with(|f| f.team);
    // SAFETY: reading the live descriptor after the barrier that published it.
    unsafe { std::ptr::read_volatile(&desc(team).copy) as *mut c_void }
}

/// Publish the copyprivate data of the thread that ran the `single`.
#[no_mangle]
pub extern "C" fn GOMP_single_copy_end(data: *mut c_void) {
    let team = icv::with(|f| f.team);
    if team != 0 {
        // SAFETY: writing the live descriptor before the barrier that publishes it.
        unsafe { std::ptr::write_volatile(&mut desc(team).copy, data as usize) };
    }
    team::barrier("GOMP_single_copy_end");
}

// ----- omp_lock_t / omp_nest_lock_t ----------------------------------------------------------

thread_local! {
    /// Nest locks this thread holds: lock address -> depth.
    static NEST: RefCell<HashMap<usize, c_int>> = RefCell::new(HashMap::new());
}

fn lock_id(l: *mut c_void) -> LockId {
    LockId(object_id(l as usize))
}

fn need(call: &'static str, l: *mut c_void) {
    if l.is_null() {
        run(call, || -> Result<(), CapiError> {
            Err(CapiError::Invalid {
                call,
                why: "the lock is a null pointer".into(),
            })
        })
    }
}

#[no_mangle]
pub extern "C" fn omp_init_lock(l: *mut c_void) {
    need("omp_init_lock", l);
}

#[no_mangle]
pub extern "C" fn omp_init_lock_with_hint(l: *mut c_void, _hint: c_int) {
    need("omp_init_lock_with_hint", l);
}

#[no_mangle]
pub extern "C" fn omp_destroy_lock(l: *mut c_void) {
    need("omp_destroy_lock", l);
    run("omp_destroy_lock", || {
        Ok(node_ref()?.lock_destroy(lock_id(l))?)
    })
}

#[no_mangle]
pub extern "C" fn omp_set_lock(l: *mut c_void) {
    need("omp_set_lock", l);
    lock("omp_set_lock", lock_id(l));
}

#[no_mangle]
pub extern "C" fn omp_unset_lock(l: *mut c_void) {
    need("omp_unset_lock", l);
    unlock("omp_unset_lock", lock_id(l));
}

#[no_mangle]
pub extern "C" fn omp_test_lock(l: *mut c_void) -> c_int {
    need("omp_test_lock", l);
    run("omp_test_lock", || {
        Ok(c_int::from(node_ref()?.trylock(lock_id(l))?))
    })
}

#[no_mangle]
pub extern "C" fn omp_init_nest_lock(l: *mut c_void) {
    need("omp_init_nest_lock", l);
}

#[no_mangle]
pub extern "C" fn omp_init_nest_lock_with_hint(l: *mut c_void, _hint: c_int) {
    need("omp_init_nest_lock_with_hint", l);
}

#[no_mangle]
pub extern "C" fn omp_destroy_nest_lock(l: *mut c_void) {
    omp_destroy_lock(l);
}

fn depth(l: *mut c_void) -> c_int {
    NEST.with(|m| m.borrow().get(&(l as usize)).copied().unwrap_or(0))
}

fn set_depth(l: *mut c_void, d: c_int) {
    // The map may allocate: on the private stack (see `crate::stack`).
    crate::stack::on_private(|| {
        NEST.with(|m| {
            let mut m = m.borrow_mut();
            if d == 0 {
                m.remove(&(l as usize));
            } else {
                m.insert(l as usize, d);
            }
        })
    })
}

#[no_mangle]
pub extern "C" fn omp_set_nest_lock(l: *mut c_void) {
    need("omp_set_nest_lock", l);
    let d = depth(l);
    if d == 0 {
        lock("omp_set_nest_lock", lock_id(l));
    }
    set_depth(l, d + 1);
}

#[no_mangle]
pub extern "C" fn omp_unset_nest_lock(l: *mut c_void) {
    need("omp_unset_nest_lock", l);
    let d = depth(l);
    if d == 0 {
        run("omp_unset_nest_lock", || -> Result<(), CapiError> {
            Err(CapiError::Invalid {
                call: "omp_unset_nest_lock",
                why: "the calling thread does not hold the lock".into(),
            })
        });
    }
    set_depth(l, d - 1);
    if d == 1 {
        unlock("omp_unset_nest_lock", lock_id(l));
    }
}

/// The new nesting depth, or 0 if another thread holds the lock.
#[no_mangle]
pub extern "C" fn omp_test_nest_lock(l: *mut c_void) -> c_int {
    need("omp_test_nest_lock", l);
    let d = depth(l);
    if d == 0
        && run(
            "omp_test_nest_lock",
            || Ok(node_ref()?.trylock(lock_id(l))?),
        )
    {
        set_depth(l, 1);
        return 1;
    }
    if d == 0 {
        return 0;
    }
    set_depth(l, d + 1);
    d + 1
}

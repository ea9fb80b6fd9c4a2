//! Mutexes of the pthreads layer: `pthread_mutex_init/lock/trylock/unlock/destroy` on Squall
//! locks named by the mutex's address, with the mutex kinds of POSIX.
//!
//! Kinds. The kind lives in the `pthread_mutex_t` itself, where glibc keeps it (`__data.__kind`,
//! the `int` at byte 16 on 64-bit Linux; `pthread_mutex_init` fills the object through glibc,
//! and the static initializers `PTHREAD_MUTEX_INITIALIZER`,
//! `PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP` and `PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP` put
//! it there at compile time). So a mutex must be initialised in memory every node sees
//! (malloc'd or a global) before threads of other nodes use it.
//! - `PTHREAD_MUTEX_RECURSIVE`: the owner may lock it again; it is released when unlocked as
//!   many times. The recursion depth is node-local, per (mutex, thread), in a thread-local
//!   table; the kind is read from the object after each successful acquire (one load; the
//!   mutex's page is usually cached, as Squall writes nothing into mutexes).
//! - `PTHREAD_MUTEX_ERRORCHECK`: relock is `EDEADLK`, unlock by a thread that does not hold it
//!   `EPERM` (POSIX).
//! - `PTHREAD_MUTEX_NORMAL` / `DEFAULT` (and glibc's adaptive kind): behave as error-checking
//!   mutexes. POSIX lets a relock of a NORMAL mutex deadlock (DEFAULT: undefined); Squall
//!   chooses to diagnose it instead of hanging the job: `EDEADLK` and a message on stderr.
//!
//! Refused with `ENOTSUP` and a message: process-shared and robust mutex attributes (a Squall
//! mutex is shared by the threads of one job, not between unrelated processes).
//!
//! Owns: mutex kinds and recursion depths. Must not touch: the runtime's lock internals (only
//! the `api::*_id` calls).
use crate::api::{self, node};
use crate::error::CapiError;
use crate::pthread::{need, object_id, pt};
use crate::pthread_timed::{read_abstime, remaining};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::time::Duration;

extern "C" {
    // In glibc; not all are declared by the libc crate.
    fn pthread_mutexattr_gettype(attr: *const libc::pthread_mutexattr_t, kind: *mut c_int)
        -> c_int;
    fn pthread_mutexattr_getpshared(
        attr: *const libc::pthread_mutexattr_t,
        pshared: *mut c_int,
    ) -> c_int;
    fn pthread_mutexattr_getrobust(
        attr: *const libc::pthread_mutexattr_t,
        robust: *mut c_int,
    ) -> c_int;
}

/// Byte offset of `__data.__kind` in glibc's `pthread_mutex_t` (64-bit Linux).
const KIND_OFFSET: usize = 16;
/// glibc's `PTHREAD_MUTEX_KIND_MASK_NP`: the type bits of `__kind` (the others are flags).
const KIND_MASK: c_int = 3;

thread_local! {
    /// Recursive mutexes this thread holds: object id -> depth (>= 1).
    static DEPTH: RefCell<HashMap<u64, u32>> = RefCell::new(HashMap::new());
}

/// The POSIX kind stored in the mutex at `m`.
fn kind(m: *mut c_void) -> c_int {
    // SAFETY: `m` is a pthread_mutex_t (40 bytes, 8-byte aligned) per the callers' contract.
    let k = unsafe {
        (m as *const u8)
            .add(KIND_OFFSET)
            .cast::<c_int>()
            .read_volatile()
    };
    k & KIND_MASK
}

/// After a successful acquire: start a recursion count if the mutex is recursive.
fn acquired(m: *mut c_void, id: u64) {
    if kind(m) == libc::PTHREAD_MUTEX_RECURSIVE {
        DEPTH.with(|d| d.borrow_mut().insert(id, 1));
    }
}

/// One more level of a recursive mutex this thread holds; `false` if it holds none (checked
/// before any Squall call, so nesting costs a thread-local lookup; an empty table, the case of
/// every thread holding no recursive mutex, costs one load).
fn deeper(id: u64) -> bool {
    DEPTH.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_empty() {
            return false;
        }
        match d.get_mut(&id) {
            Some(n) => {
                *n += 1;
                true
            }
            None => false,
        }
    })
}

/// Before waiting on a condition with mutex `id`: this thread's recursion depth (taken out of
/// the table so the wait releases the mutex completely), 0 for other kinds.
pub(crate) fn suspend_depth(id: u64) -> u32 {
    DEPTH.with(|d| d.borrow_mut().remove(&id).unwrap_or(0))
}

/// After the condition wait re-acquired mutex `id`: put the depth back.
pub(crate) fn resume_depth(id: u64, depth: u32) {
    if depth > 0 {
        DEPTH.with(|d| d.borrow_mut().insert(id, depth));
    }
}

/// Check the attributes of `pthread_mutex_init`: the kind is taken from them by glibc; refused
/// are process-shared and robust mutexes.
fn check_attr(attr: *const c_void) -> Result<(), CapiError> {
    if attr.is_null() {
        return Ok(());
    }
    let a = attr as *const libc::pthread_mutexattr_t;
    let (mut pshared, mut robust): (c_int, c_int) = (0, 0);
    // SAFETY: attr is a valid pthread_mutexattr_t per the contract.
    let (r1, r2) = unsafe {
        (
            pthread_mutexattr_getpshared(a, &mut pshared),
            pthread_mutexattr_getrobust(a, &mut robust),
        )
    };
    if r1 == 0 && pshared == libc::PTHREAD_PROCESS_SHARED {
        return Err(CapiError::Unsupported(
            "a process-shared mutex (PTHREAD_PROCESS_SHARED: squall mutexes are shared by the \
             threads of one job on every node, not between separate processes)",
        ));
    }
    if r2 == 0 && robust != 0 {
        return Err(CapiError::Unsupported(
            "a robust mutex (PTHREAD_MUTEX_ROBUST: owner death is not tracked)",
        ));
    }
    let mut k: c_int = 0;
    // SAFETY: as above.
    if unsafe { pthread_mutexattr_gettype(a, &mut k) } != 0 {
        return Err(CapiError::Invalid {
            call: "pthread_mutex_init",
            why: "the mutex attribute is not initialised".into(),
        });
    }
    Ok(())
}

/// `pthread_mutex_init`: stores the kind from `attr` (recursive, error-checking, normal or
/// default) in the mutex. Process-shared and robust mutexes are `ENOTSUP`.
///
/// # Safety
/// `m` is a `pthread_mutex_t`; `attr` is null or a valid `pthread_mutexattr_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_init(m: *mut c_void, attr: *const c_void) -> c_int {
    pt("pthread_mutex_init", || {
        let a = need("pthread_mutex_init", "mutex", m)?;
        check_attr(attr)?;
        // SAFETY: `m` is a pthread_mutex_t and `attr` null or valid (checked above): glibc
        // writes the initial state, including the kind, into the object.
        let rc = unsafe {
            libc::pthread_mutex_init(
                m as *mut libc::pthread_mutex_t,
                attr as *const libc::pthread_mutexattr_t,
            )
        };
        if rc != 0 {
            return Err(CapiError::Invalid {
                call: "pthread_mutex_init",
                why: format!("glibc refused the attributes (error {rc})"),
            });
        }
        DEPTH.with(|d| d.borrow_mut().remove(&object_id(a)));
        Ok(0)
    })
}

/// `pthread_mutex_lock`. Relocking a recursive mutex adds a level; relocking any other kind is
/// `EDEADLK` (see the module doc).
///
/// # Safety
/// `m` is null or a `pthread_mutex_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_lock(m: *mut c_void) -> c_int {
    // The node's lock cache first (one CAS, no guard): an idle token cached on this node.
    if !m.is_null() {
        let id = object_id(m as usize);
        if api::lock_cached(id) {
            acquired(m, id);
            return 0;
        }
    }
    pt("pthread_mutex_lock", || {
        let a = need("pthread_mutex_lock", "mutex", m)?;
        let id = object_id(a);
        if deeper(id) {
            return Ok(0);
        }
        api::lock_id(&node()?, id)?;
        acquired(m, id);
        Ok(0)
    })
}

/// `pthread_mutex_trylock`: `EBUSY` if taking it would need waiting (a recursive mutex the
/// caller holds gains a level).
///
/// # Safety
/// `m` is null or a `pthread_mutex_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_trylock(m: *mut c_void) -> c_int {
    if !m.is_null() {
        let id = object_id(m as usize);
        if api::lock_cached(id) {
            acquired(m, id);
            return 0;
        }
    }
    pt("pthread_mutex_trylock", || {
        let a = need("pthread_mutex_trylock", "mutex", m)?;
        let id = object_id(a);
        if deeper(id) {
            return Ok(0);
        }
        Ok(if api::trylock_id(&node()?, id)? {
            acquired(m, id);
            0
        } else {
            libc::EBUSY
        })
    })
}

/// `pthread_mutex_timedlock`: as `pthread_mutex_lock`, or `ETIMEDOUT` once `abstime`
/// (`CLOCK_REALTIME`) has passed. The runtime's lock has no timeout, so this polls
/// `trylock` (which also asks for the lock's token) with a pause growing from 20 µs to 5 ms:
/// it is not queued in the lock's FIFO, and a relock by the owner (non-recursive) times out
/// rather than reporting `EDEADLK`.
///
/// # Safety
/// `m` is null or a `pthread_mutex_t`; `abstime` null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_timedlock(
    m: *mut c_void,
    abstime: *const c_void,
) -> c_int {
    pt("pthread_mutex_timedlock", || {
        let a = need("pthread_mutex_timedlock", "mutex", m)?;
        let id = object_id(a);
        if deeper(id) {
            return Ok(0);
        }
        let ts = read_abstime("pthread_mutex_timedlock", abstime)?;
        let n = node()?;
        let mut pause = Duration::from_micros(20);
        loop {
            if api::trylock_id(&n, id)? {
                acquired(m, id);
                return Ok(0);
            }
            let Some(left) = remaining(libc::CLOCK_REALTIME, &ts) else {
                return Ok(libc::ETIMEDOUT);
            };
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    })
}

/// `pthread_mutex_unlock`: `EPERM` if the calling thread does not hold it; a recursive mutex is
/// released at its last unlock.
///
/// # Safety
/// `m` is null or a `pthread_mutex_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_unlock(m: *mut c_void) -> c_int {
    pt("pthread_mutex_unlock", || {
        let a = need("pthread_mutex_unlock", "mutex", m)?;
        let id = object_id(a);
        let still_held = DEPTH.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_empty() {
                return false;
            }
            match d.get_mut(&id) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    true
                }
                Some(_) => {
                    d.remove(&id);
                    false
                }
                None => false,
            }
        });
        if !still_held && !api::unlock_cached(id) {
            api::unlock_id(&node()?, id)?;
        }
        Ok(0)
    })
}

/// `pthread_mutex_destroy`: `EBUSY` if a thread of this node holds or waits for it.
///
/// # Safety
/// `m` is null or a `pthread_mutex_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_mutex_destroy(m: *mut c_void) -> c_int {
    pt("pthread_mutex_destroy", || {
        let a = need("pthread_mutex_destroy", "mutex", m)?;
        api::lock_destroy_id(&node()?, "pthread_mutex_destroy", object_id(a))?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_keeps_the_kind_where_squall_reads_it() {
        for k in [
            libc::PTHREAD_MUTEX_NORMAL,
            libc::PTHREAD_MUTEX_RECURSIVE,
            libc::PTHREAD_MUTEX_ERRORCHECK,
        ] {
            // SAFETY: plain glibc calls on local, properly sized objects.
            unsafe {
                let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
                assert_eq!(libc::pthread_mutexattr_init(&mut attr), 0);
                assert_eq!(libc::pthread_mutexattr_settype(&mut attr, k), 0);
                let mut m: libc::pthread_mutex_t = std::mem::zeroed();
                assert_eq!(libc::pthread_mutex_init(&mut m, &attr), 0);
                assert_eq!(kind(std::ptr::addr_of_mut!(m).cast()), k, "kind {k}");
            }
        }
        let mut r = libc::PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
        assert_eq!(
            kind(std::ptr::addr_of_mut!(r).cast()),
            libc::PTHREAD_MUTEX_RECURSIVE
        );
        let mut e = libc::PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
        assert_eq!(
            kind(std::ptr::addr_of_mut!(e).cast()),
            libc::PTHREAD_MUTEX_ERRORCHECK
        );
    }
}

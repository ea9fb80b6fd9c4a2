//! The program's signal calls that would take SIGBUS from Squall under `SQUALL_FAULTS=signal`:
//! libsquall.so defines (interposes) `sigaction`, `signal`, `pthread_sigmask` and
//! `sigprocmask`.
//!
//! In signal mode a page fault raises SIGBUS in the faulting thread, and Squall's handler
//! serves it. A program that installs its own SIGBUS handler (as programs reading mmap'd files
//! do) would take Squall's faults; one that blocks every signal in its threads (a common
//! idiom before a dedicated signal thread) would be killed by its first fault. So, once the
//! handler is installed: `sigaction(SIGBUS, ...)` and `signal(SIGBUS, ...)` set the action that
//! faults which are not Squall's go to (and report the previous one), and a mask being
//! blocked keeps SIGBUS deliverable. Everything else, and everything in the default mode,
//! goes to the C library unchanged (`libc_next`).
//!
//! Owns: these four interposers. Must not touch: the handler (`squall_memory::signal`).
use std::ffi::c_int;

/// `sigaction` (interposed): SIGBUS's action is kept by Squall's handler in signal mode.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGBUS {
        // SAFETY: the caller passes null or a valid `sigaction` for each.
        let (new, prev) = unsafe { (act.as_ref(), old.as_mut()) };
        if squall_memory::signal::program_sigbus_action(new, prev) {
            return 0;
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::sigaction()(sig, act, old) }
}

/// `signal` (interposed): as `sigaction` for SIGBUS (the C library's `signal` does not call
/// the interposed `sigaction`).
///
/// # Safety
/// As `signal(2)`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if sig == libc::SIGBUS {
        // SAFETY: an all-zero `sigaction` is valid (no handler, no flags, empty mask).
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = handler;
        // `signal` in glibc: BSD semantics.
        new.sa_flags = libc::SA_RESTART;
        if squall_memory::signal::program_sigbus_action(Some(&new), Some(&mut old)) {
            return old.sa_sigaction;
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::signal()(sig, handler) }
}

/// Type of `pthread_sigmask` and `sigprocmask`.
type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// Calls `real` with the caller's mask, SIGBUS taken out of it when it is being blocked.
///
/// # Safety
/// `set` and `old` as `pthread_sigmask(3)` takes them.
unsafe fn mask(
    real: MaskFn,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let mut copy = None;
    if !set.is_null() && (how == libc::SIG_BLOCK || how == libc::SIG_SETMASK) {
        // SAFETY: the caller passes a valid sigset_t (checked non-null).
        let mut c = unsafe { *set };
        if squall_memory::signal::keep_sigbus_deliverable(&mut c) {
            copy = Some(c);
        }
    }
    let set = copy.as_ref().map_or(set, |c| c as *const libc::sigset_t);
    // SAFETY: the caller's arguments, the mask possibly without SIGBUS.
    unsafe { real(how, set, old) }
}

/// `pthread_sigmask` (interposed): SIGBUS stays deliverable in signal mode.
///
/// # Safety
/// As `pthread_sigmask(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { mask(crate::libc_next::pthread_sigmask(), how, set, old) }
}

/// `sigprocmask` (interposed): as `pthread_sigmask`.
///
/// # Safety
/// As `sigprocmask(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { mask(crate::libc_next::sigprocmask(), how, set, old) }
}

//! The system interface of fault capture by signal ([`crate::signal`]): the SIGBUS handler's
//! entry point and its chaining to the action it replaced, the alternate signal stacks it runs
//! on, and the futex a thread waiting for its page sleeps on.
//!
//! Owns: every `unsafe` block of fault capture by signal (the crate's other `unsafe` is in
//! `sys`). Must not touch: page states or the protocol; the handler only hands the fault's
//! address and kind to [`crate::signal::serve`] and restores `errno`.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The userfaultfd feature: a fault on a registered range raises SIGBUS in the faulting
/// thread instead of queueing a message and blocking it.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;

/// The program's SIGBUS action, for faults that are not ours: the one ours replaced, or one
/// the program set since (`set_chained`). A leaked copy, swapped whole, so the handler reads
/// it without a lock; a replaced copy is never freed (the handler may be reading it), a few
/// bytes per `sigaction(SIGBUS)` call of the program.
static CHAINED: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// Whether the handler is installed (the outcome of the first installation).
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// Install the SIGBUS handler for the whole process (once; later calls return the first
/// outcome). It runs on the thread's alternate stack when it has one (`SA_ONSTACK`).
pub fn install_sigbus() -> io::Result<()> {
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: an all-zero `sigaction` is a valid value (no handler, no flags, empty mask).
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `act.sa_mask` is a live sigset_t owned by this frame.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: as above, for the old action the kernel fills in.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live `sigaction` values of this frame.
        match unsafe { libc::sigaction(libc::SIGBUS, &act, &mut old) } {
            0 => {
                CHAINED.store(Box::into_raw(Box::new(old)), Ordering::Release);
                Ok(())
            }
            _ => Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL)),
        }
    });
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::from_raw_os_error(*e)),
    }
}

/// Whether the handler is installed.
pub fn installed() -> bool {
    matches!(INSTALLED.get(), Some(Ok(())))
}

/// The program's own `sigaction(SIGBUS, new, old)` while the handler is installed: `old`
/// receives the program's action (the one faults that are not ours go to), and `new`, if
/// given, becomes it; the handler itself stays.
pub fn set_chained(new: Option<&libc::sigaction>, old: Option<&mut libc::sigaction>) {
    if let Some(old) = old {
        let p = CHAINED.load(Ordering::Acquire);
        // SAFETY: a non-null `CHAINED` points to a leaked, never freed `sigaction`.
        *old = if p.is_null() {
            // SAFETY: an all-zero `sigaction` is the default action.
            unsafe { std::mem::zeroed() }
        } else {
            unsafe { *p }
        };
    }
    if let Some(new) = new {
        CHAINED.store(Box::into_raw(Box::new(*new)), Ordering::Release);
    }
}

/// Takes SIGBUS out of `set` (a mask a program is about to block) while the handler is
/// installed: a fault with SIGBUS blocked would end the process. `true` if it was in.
pub fn unblock_sigbus(set: &mut libc::sigset_t) -> bool {
    // SAFETY: `set` is a live, initialised sigset_t.
    if !installed() || unsafe { libc::sigismember(set, libc::SIGBUS) } != 1 {
        return false;
    }
    // SAFETY: as above.
    unsafe { libc::sigdelset(set, libc::SIGBUS) };
    true
}

/// The SIGBUS handler: a fault the server takes returns to the faulting instruction, which
/// runs again with the access granted; any other goes to the previous action.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: `__errno_location` returns this thread's errno slot, valid for its lifetime.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above; the handler must leave the interrupted code's errno as it was.
    let saved = unsafe { *errno };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for SIGBUS
    // `si_addr` is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    let write = fault_was_write(ctx);
    if !crate::signal::serve(addr, write) {
        chain(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// Whether the fault that raised the signal was a write: bit 1 of the page-fault error code
/// the kernel saves in the signal context (x86-64; set for a SIGBUS raised by a fault).
#[cfg(target_arch = "x86_64")]
fn fault_was_write(ctx: *mut c_void) -> bool {
    // SAFETY: the kernel passes a valid `ucontext_t` as the third argument of an SA_SIGINFO
    // handler; the handler only reads it.
    let err =
        unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    err & 2 != 0
}

/// Elsewhere the kind is unknown: a write is assumed (the protocol then grants read-write,
/// correct but dearer for a read).
#[cfg(not(target_arch = "x86_64"))]
fn fault_was_write(_ctx: *mut c_void) -> bool {
    true
}

/// Hand a signal that is not ours to the action we replaced; with none (the default or
/// ignore), restore the default, so that the instruction, run again, ends the process with
/// SIGBUS as it would have without us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let p = CHAINED.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: a non-null `CHAINED` points to a leaked, never freed `sigaction`.
    let prev = unsafe { *p };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: an all-zero `sigaction` is the default action with an empty mask.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: a pointer to a live `sigaction` of this frame; no old action is asked for.
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this address as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this address as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// An alternate signal stack of the calling thread (the handler must not run on a thread's
/// own stack, which may be a shared stack in the global range and fault itself). Dropping it
/// disables it (if it is still the thread's) and unmaps it.
pub struct AltStack {
    map: usize,
    len: usize,
}

/// Bytes of an alternate stack (address space only until touched; the handler runs the
/// protocol core and the network poll on it).
const ALT_STACK: usize = 1 << 20;
const GUARD: usize = 4096;

impl AltStack {
    /// Map a private stack with a guard page below it and make it the calling thread's
    /// alternate signal stack.
    pub fn install() -> io::Result<AltStack> {
        let len = ALT_STACK + GUARD;
        // SAFETY: a new anonymous private mapping at an address the kernel picks; no existing
        // memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let s = AltStack {
            map: p as usize,
            len,
        };
        // SAFETY: the guard page is the first page of the mapping just made.
        if unsafe { libc::mprotect(p, GUARD, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ss = libc::stack_t {
            ss_sp: (s.map + GUARD) as *mut c_void,
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        // SAFETY: `ss` describes the mapping above, which lives until `s` is dropped (the drop
        // disables the stack first).
        if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: all-zero is a valid `stack_t` for the kernel to fill in.
        let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: reads the thread's current alternate stack into a live value.
        let ok = unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) } == 0;
        if ok && cur.ss_sp as usize == self.map + GUARD {
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disabling takes no memory; not called from the handler (the stack is
            // not in use).
            unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) };
        }
        // SAFETY: the mapping is ours and no longer the thread's signal stack.
        unsafe { libc::munmap(self.map as *mut c_void, self.len) };
    }
}

/// Sleep while `word` holds `expected`, at most `timeout` (a spurious or early return is
/// harmless: callers look again).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the live atomic `word` and the live `ts`; no other memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wake every thread sleeping in [`futex_wait`] on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of the live atomic `word` as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

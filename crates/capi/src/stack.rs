//! Shared stacks for the pthreads layer: every thread Squall starts, and `main`'s thread, runs
//! the program's code on a stack inside the global range, homed on the node where it runs
//! (local placement, a guard page below it), so a pointer to a stack variable means the same
//! memory on every node.
//!
//! Squall's own code must not run on a shared stack: it takes the node's service lock in the
//! calling thread, and a write fault on a shared stack page (write-protected while another node
//! holds a copy) cannot be served while that thread holds the lock (the fault server needs it).
//! So every C entry point that can take the lock runs on the thread's private stack (the one
//! the thread was started on): [`on_private`], called by `error::guard`, switches to the part
//! of the private stack below the point where the thread entered its shared stack, and back.
//! The switches are two small assembly routines and one inline `asm!` block (x86-64 System V);
//! on other architectures the program's code runs on the private stack (stacks are not shared
//! there).
//!
//! `pthread_exit` leaves the shared stack directly ([`leave`]): it returns from the
//! [`run_on`] that entered it, with the thread's value, abandoning the program's frames (C
//! frames; no Rust frame with a destructor lies between).
//!
//! Owns: the stack switches, the per-thread record of the shared stack in use, allocation of
//! shared stacks. Must not touch: the runtime's state (allocation goes through `Node`).
use crate::error::CapiError;
use squall::{Node, Placement, PAGE_SIZE};
use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The default stack size: the pthreads default on Linux (8 MiB; address space only, pages
/// cost memory when touched).
pub(crate) const DEFAULT_STACK: usize = 8 << 20;
/// The smallest stack handed out (`PTHREAD_STACK_MIN` is 16 KiB; a little more for the C
/// library's needs).
const MIN_STACK: usize = 64 << 10;
/// Bytes at the top of a new stack written at allocation (see `SharedStack::alloc`).
const PRETOUCH: usize = 64 << 10;
/// Bytes left untouched below the saved private stack pointer before a switch back to it.
const PRIVATE_GAP: usize = 256;

pub(crate) type Body = extern "C" fn(*mut c_void) -> *mut c_void;

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    // squall_capi_stack_enter(top, slot, f, arg) -> f(arg), run with rsp = top. Saves the
    // callee-saved registers on the current stack and the stack pointer in *slot, so that
    // squall_capi_stack_leave(*slot, v) returns from here with v.
    ".text",
    ".globl squall_capi_stack_enter",
    ".hidden squall_capi_stack_enter",
    ".type squall_capi_stack_enter,@function",
    "squall_capi_stack_enter:",
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rsi], rsp",
    "mov rbx, rsi",
    "mov rsp, rdi",
    "mov rdi, rcx",
    "call rdx",
    "mov rsp, [rbx]",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    ".size squall_capi_stack_enter, .-squall_capi_stack_enter",
    // squall_capi_stack_leave(saved, v): return v from the squall_capi_stack_enter whose
    // saved stack pointer is `saved`.
    ".globl squall_capi_stack_leave",
    ".hidden squall_capi_stack_leave",
    ".type squall_capi_stack_leave,@function",
    "squall_capi_stack_leave:",
    "mov rsp, rdi",
    "mov rax, rsi",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    ".size squall_capi_stack_leave, .-squall_capi_stack_leave",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn squall_capi_stack_enter(
        top: usize,
        slot: *mut usize,
        f: Body,
        arg: *mut c_void,
    ) -> *mut c_void;
    fn squall_capi_stack_leave(saved: usize, v: *mut c_void) -> !;
}

/// The shared stack this thread runs the program on: `[lo, hi)` (0, 0 when it has none), the
/// private stack pointer saved when the thread entered it, and whether `pthread_exit` left it.
/// One thread-local, so the test of `on_private` costs one TLS look-up.
struct StackState {
    lo: Cell<usize>,
    hi: Cell<usize>,
    saved: Cell<usize>,
    exited: Cell<bool>,
}

thread_local! {
    static STATE: StackState = const {
        StackState {
            lo: Cell::new(0),
            hi: Cell::new(0),
            saved: Cell::new(0),
            exited: Cell::new(false),
        }
    };
}

#[inline(always)]
fn stack_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: usize;
        // SAFETY: reads the stack pointer register; no memory or flags are touched.
        unsafe {
            std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
        };
        sp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let probe = 0u8;
        std::ptr::addr_of!(probe) as usize
    }
}

struct Ctx<F, R> {
    f: Option<F>,
    r: Option<std::thread::Result<R>>,
}

extern "C" fn call_ctx<F: FnOnce() -> R, R>(p: *mut c_void) {
    // SAFETY: `p` is the `Ctx<F, R>` that `on_private` passed, alive for this call.
    let c = unsafe { &mut *(p as *mut Ctx<F, R>) };
    // Move the closure onto this (private) stack, run it, store the result afterwards: no
    // panic unwinds across the switch.
    if let Some(f) = c.f.take() {
        let r = catch_unwind(AssertUnwindSafe(f));
        c.r = Some(r);
    }
}

/// Run `f` on the calling thread's private stack if it runs on its shared stack now (else
/// directly). Every C entry point that can take the node's service lock runs through this.
#[inline]
pub(crate) fn on_private<R>(f: impl FnOnce() -> R) -> R {
    let saved = STATE.with(|s| {
        let sp = stack_pointer();
        if sp >= s.lo.get() && sp < s.hi.get() {
            s.saved.get()
        } else {
            0
        }
    });
    if saved == 0 {
        return f();
    }
    switch_to_private(saved, f)
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn switch_to_private<F: FnOnce() -> R, R>(saved: usize, f: F) -> R {
    let mut c: Ctx<F, R> = Ctx {
        f: Some(f),
        r: None,
    };
    let sp = (saved - PRIVATE_GAP) & !15;
    let ctx: *mut c_void = std::ptr::addr_of_mut!(c).cast();
    // SAFETY: `sp` lies in the private stack below the frames still live there (the thread
    // entered its shared stack from a frame at `saved`, and nothing runs on the private stack
    // below it while the program runs on the shared one), 16-byte aligned as a call needs;
    // `c` outlives the call. The old stack pointer is kept in r12 (callee-saved: call_ctx
    // preserves it; declared clobbered here), every register call_ctx may change is declared
    // clobbered by `clobber_abi("C")`. Inline, with a direct call: no indirect branch.
    unsafe {
        std::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {sp}",
            "call {f}",
            "mov rsp, r12",
            sp = in(reg) sp,
            f = sym call_ctx::<F, R>,
            in("rdi") ctx,
            out("r12") _,
            clobber_abi("C"),
        )
    };
    match c.r {
        Some(Ok(r)) => r,
        Some(Err(p)) => resume_unwind(p),
        None => unreachable!("the private-stack call did not run"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn switch_to_private<F: FnOnce() -> R, R>(_saved: usize, f: F) -> R {
    f()
}

/// A stack in the global range, homed on this node, with a guard page below it.
pub(crate) struct SharedStack {
    node: Node,
    base: usize,
    len: usize,
}

impl SharedStack {
    /// `size` bytes of stack (rounded up to pages, at least 64 KiB) plus a guard page.
    pub(crate) fn alloc(node: &Node, size: usize) -> Result<SharedStack, CapiError> {
        let size = size.max(MIN_STACK).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let len = size + PAGE_SIZE;
        let base = node.alloc_with(len, PAGE_SIZE, Placement::Node(node.rank()))? as usize;
        // SAFETY: the guard page is the first page of an allocation of this node's that nothing
        // else uses; PROT_NONE makes an overflow fault instead of writing below the stack.
        if unsafe { libc::mprotect(base as *mut c_void, PAGE_SIZE, libc::PROT_NONE) } != 0 {
            let e = std::io::Error::last_os_error();
            let _ = node.free(base as *mut u8);
            return Err(CapiError::Invalid {
                call: "pthread_create",
                why: format!("cannot set the stack's guard page: {e}"),
            });
        }
        // Touch the top pages now, from the private stack with no lock held, so the shallow
        // calls of the program (and of the C library, which may hold its own locks then) do not
        // fault on a fresh stack page.
        for off in (len.saturating_sub(PRETOUCH).max(PAGE_SIZE)..len).step_by(PAGE_SIZE) {
            // SAFETY: a page of this new allocation above the guard page, owned by this stack.
            unsafe { std::ptr::write_volatile((base + off) as *mut u8, 0) };
        }
        Ok(SharedStack {
            node: node.clone(),
            base,
            len,
        })
    }

    /// Run `f(arg)` on this stack; returns its value, or the value given to [`leave`].
    /// The second value says whether the body left by `pthread_exit`.
    pub(crate) fn run(&self, f: Body, arg: *mut c_void) -> (*mut c_void, bool) {
        run_on(self.base + PAGE_SIZE, self.base + self.len, f, arg)
    }
}

/// Stacks of ended threads kept for the next threads of this node (default size only): a
/// reused stack costs no allocation and its touched pages are still mapped here.
static POOL: std::sync::Mutex<Vec<SharedStack>> = std::sync::Mutex::new(Vec::new());
/// Stacks the pool keeps at most.
const POOL_MAX: usize = 16;

impl SharedStack {
    /// A stack of `size` bytes: from the pool of ended threads' stacks if one has that size,
    /// else a new one.
    pub(crate) fn take(node: &Node, size: usize) -> Result<SharedStack, CapiError> {
        let len = size.max(MIN_STACK).div_ceil(PAGE_SIZE) * PAGE_SIZE + PAGE_SIZE;
        {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = pool.iter().position(|s| s.len == len) {
                return Ok(pool.swap_remove(i));
            }
        }
        SharedStack::alloc(node, size)
    }

    /// Give back the stack of an ended thread (kept for reuse, or freed).
    pub(crate) fn give(self) {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL_MAX && self.len == DEFAULT_STACK + PAGE_SIZE {
            pool.push(self);
        }
    }
}

impl Drop for SharedStack {
    fn drop(&mut self) {
        // SAFETY: the guard page of this allocation goes back to read-write before the
        // allocation is freed (the heap may hand the page out again).
        unsafe {
            libc::mprotect(
                self.base as *mut c_void,
                PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if let Err(e) = self.node.free(self.base as *mut u8) {
            eprintln!("squall: could not free a thread's stack: {e}");
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn run_on(lo: usize, hi: usize, f: Body, arg: *mut c_void) -> (*mut c_void, bool) {
    let (before, slot) = STATE.with(|s| {
        let before = (s.lo.replace(lo), s.hi.replace(hi), s.saved.get());
        s.exited.set(false);
        (before, s.saved.as_ptr())
    });
    // SAFETY: `hi` is the 16-byte aligned top of a mapped stack of this thread's own; `slot` is
    // this thread's saved-pointer cell; `f` is a C function.
    let v = unsafe { squall_capi_stack_enter(hi & !15, slot, f, arg) };
    let exited = STATE.with(|s| {
        s.lo.set(before.0);
        s.hi.set(before.1);
        s.saved.set(before.2);
        s.exited.replace(false)
    });
    (v, exited)
}

#[cfg(not(target_arch = "x86_64"))]
fn run_on(_lo: usize, _hi: usize, f: Body, arg: *mut c_void) -> (*mut c_void, bool) {
    (f(arg), false)
}

/// `pthread_exit(v)` from the program's code on a shared stack: return `v` from the
/// [`run_on`] that entered it. Returns (does nothing) if the thread is not on a shared stack.
pub(crate) fn leave(v: *mut c_void) {
    #[cfg(target_arch = "x86_64")]
    if let Some(saved) = STATE.with(|s| {
        (s.hi.get() != 0).then(|| {
            s.exited.set(true);
            s.saved.get()
        })
    }) {
        // SAFETY: `saved` is the stack pointer saved by the squall_capi_stack_enter this thread
        // is running under (`hi` is set only inside it); the frames it abandons are the
        // program's and this function's, none holding anything to drop.
        unsafe { squall_capi_stack_leave(saved, v) }
    }
    let _ = v;
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// A plain heap buffer as a stack (the switches do not care where a stack lives).
    fn with_stack<R>(f: impl FnOnce(usize, usize) -> R) -> R {
        let buf = vec![0u8; 256 << 10];
        let lo = buf.as_ptr() as usize;
        f(lo, lo + buf.len())
    }

    extern "C" fn where_am_i(p: *mut c_void) -> *mut c_void {
        // SAFETY: `p` is the [usize; 2] of the test, alive during the call.
        let out = unsafe { &mut *(p as *mut [usize; 2]) };
        out[0] = stack_pointer();
        out[1] = on_private(stack_pointer);
        p
    }

    #[test]
    fn runs_on_the_given_stack_and_back_on_the_private_one() {
        with_stack(|lo, hi| {
            let mut out = [0usize; 2];
            let before = stack_pointer();
            let (v, exited) = run_on(lo, hi, where_am_i, std::ptr::addr_of_mut!(out).cast());
            assert_eq!(v, std::ptr::addr_of_mut!(out).cast::<c_void>());
            assert!(!exited);
            assert!(
                out[0] >= lo && out[0] < hi,
                "the body ran on the shared stack"
            );
            assert!(
                out[1] < before && before - out[1] < 64 << 10,
                "on_private ran just below the private stack pointer ({:#x} vs {before:#x})",
                out[1]
            );
            // Back on the private stack, nothing is recorded any more.
            assert_eq!(on_private(stack_pointer) >> 20, stack_pointer() >> 20);
        });
    }

    fn nested_exit(depth: u32, v: *mut c_void) {
        if depth == 0 {
            leave(v);
            unreachable!("leave returns only off a shared stack");
        }
        nested_exit(depth - 1, v);
    }

    extern "C" fn exits(p: *mut c_void) -> *mut c_void {
        nested_exit(10, p.wrapping_add(1));
        std::ptr::null_mut()
    }

    #[test]
    fn leave_returns_the_value_from_nested_frames() {
        with_stack(|lo, hi| {
            let p = 0x1000 as *mut c_void;
            let (v, exited) = run_on(lo, hi, exits, p);
            assert_eq!(v, p.wrapping_add(1));
            assert!(exited);
            // The thread's state is back to "no shared stack".
            leave(std::ptr::null_mut());
        });
    }

    extern "C" fn panics_inside(_: *mut c_void) -> *mut c_void {
        let r = std::panic::catch_unwind(|| on_private(|| panic!("inside")));
        assert!(
            r.is_err(),
            "the panic crossed back to the shared stack as a panic"
        );
        std::ptr::null_mut()
    }

    #[test]
    fn a_panic_on_the_private_stack_resumes_on_the_shared_one() {
        with_stack(|lo, hi| {
            let (v, _) = run_on(lo, hi, panics_inside, std::ptr::null_mut());
            assert!(v.is_null());
        });
    }
}

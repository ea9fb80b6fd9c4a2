//! System calls on shared memory under `SQUALL_FAULTS=signal`: `read`, `pread`, `fread` into
//! it (and their `_FORTIFY_SOURCE` forms `__read_chk`, `__pread_chk`, `__fread_chk`) and
//! `write`, `pwrite`, `fwrite` from it.
//!
//! With faults served by signal, the kernel's own access to a page this node cannot access
//! fails with EFAULT instead of waiting (the faulting "thread" is the kernel). A pthreads
//! program linked with `pkg-config --libs squall-pthread` calls these functions through
//! `-Wl,--wrap=NAME`: each wrapper first gives the node the access the kernel will need to the
//! buffer (`Node::prepare_access`, a no-op in the default mode and outside Squall memory), then
//! calls the C library's function unchanged. Other calls that take a buffer of shared memory
//! (recv, send, readv, stat into a global ...) are not wrapped: see `SQUALL_FAULTS` in
//! docs/env.md. (`send` and `recv` are left alone on purpose: programs in message-passing
//! style define functions of those names themselves, and `--wrap` would reroute their calls.)
//!
//! Owns: the wrappers. Must not touch: the fault path itself (the runtime's).
use std::ffi::{c_int, c_void};

/// Give this node `len` bytes of access from `buf` for a kernel read (`write` false) or write
/// of them, on the thread's private stack (a shared stack may fault while Squall holds its
/// lock).
fn prepare(buf: *const c_void, len: usize, write: bool) {
    if let Some(n) = squall::node_ref() {
        if n.signal_faults() {
            crate::stack::on_private(|| n.prepare_access(buf as usize, len, write));
        }
    }
}

/// `read` (wrapped): the buffer made writable first.
///
/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged, as `read(2)` takes them.
    unsafe { crate::libc_next::read()(fd, buf, n) }
}

/// `pread` (wrapped).
///
/// # Safety
/// As `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pread(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::pread()(fd, buf, n, off) }
}

/// `fread` (wrapped): the C library reads a large request straight into the buffer.
///
/// # Safety
/// As `fread(3)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_fread(
    buf: *mut c_void,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::fread()(buf, size, count, f) }
}

/// `write` (wrapped): the buffer made readable first.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::write()(fd, buf, n) }
}

/// `pwrite` (wrapped).
///
/// # Safety
/// As `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_pwrite(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::pwrite()(fd, buf, n, off) }
}

/// `fwrite` (wrapped): the C library writes a large request straight from the buffer.
///
/// # Safety
/// As `fwrite(3)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_fwrite(
    buf: *const c_void,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count), false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::fwrite()(buf, size, count, f) }
}

extern "C" {
    fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize;
    fn __pread_chk(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t, buflen: usize)
        -> isize;
    fn __fread_chk(
        buf: *mut c_void,
        buflen: usize,
        size: usize,
        count: usize,
        f: *mut libc::FILE,
    ) -> usize;
}

/// `__read_chk` (wrapped): `read` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__read_chk` (the C library's checked `read`).
#[no_mangle]
pub unsafe extern "C" fn __wrap___read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { __read_chk(fd, buf, n, buflen) }
}

/// `__pread_chk` (wrapped): `pread` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__pread_chk`.
#[no_mangle]
pub unsafe extern "C" fn __wrap___pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: libc::off_t,
    buflen: usize,
) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { __pread_chk(fd, buf, n, off, buflen) }
}

/// `__fread_chk` (wrapped): `fread` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__fread_chk`.
#[no_mangle]
pub unsafe extern "C" fn __wrap___fread_chk(
    buf: *mut c_void,
    buflen: usize,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count).min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { __fread_chk(buf, buflen, size, count, f) }
}

//! System calls on shared memory under `SQUALL_FAULTS=signal`: libsquall.so defines (and so
//! interposes for the whole process, the program and its libraries alike) `read`, `pread`,
//! `readv`, `preadv`, `fread`, `recv`, `recvfrom` into memory, their `_FORTIFY_SOURCE` forms
//! `__read_chk`, `__pread_chk`, `__fread_chk`, `__recv_chk`, `__recvfrom_chk`, and `write`,
//! `pwrite`, `writev`, `pwritev`, `fwrite`, `send`, `sendto` from it.
//!
//! With faults served by signal, the kernel's own access to a page this node cannot access
//! fails with EFAULT instead of waiting (the faulting "thread" is the kernel). Each function
//! here first gives the node the access the kernel will need to the buffers
//! (`Node::prepare_access`, a no-op in the default mode and outside Squall memory), then calls
//! the C library's function unchanged (`libc_next`). A program that defines a function of one
//! of these names itself keeps its own: the executable's definition comes first. Other calls
//! that take a buffer of shared memory (`recvmsg`, `stat` into a global ...) are not covered:
//! see `SQUALL_FAULTS` in docs/env.md. libsquall's own calls of these names never come here
//! (`libc_next`).
//!
//! Owns: the interposed functions. Must not touch: the fault path itself (the runtime's).
use std::ffi::{c_int, c_void};

/// This process's node if its faults are served by signal (nothing to prepare otherwise).
fn signal_node() -> Option<&'static squall::Node> {
    squall::node_ref().filter(|n| n.signal_faults())
}

/// Give this node `len` bytes of access from `buf` for a kernel read (`write` false) or write
/// of them, on the thread's private stack (a shared stack may fault while Squall holds its
/// lock). Every call of the process comes here: a buffer outside Squall memory, or the
/// default mode, costs a few compares.
fn prepare(buf: *const c_void, len: usize, write: bool) {
    let Some(n) = signal_node() else {
        return;
    };
    if len == 0 {
        return;
    }
    // A buffer in Squall memory starts or ends there (the global range or a region it
    // adopted, such as the program's globals).
    let start = buf as usize;
    if !n.is_shared(start) && !n.is_shared(start.saturating_add(len - 1)) {
        return;
    }
    crate::stack::on_private(|| n.prepare_access(start, len, write));
}

/// `read` (interposed): the buffer made writable first.
///
/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged, as `read(2)` takes them.
    unsafe { crate::libc_next::read()(fd, buf, n) }
}

/// `pread` (interposed).
///
/// # Safety
/// As `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: usize, off: libc::off_t) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::pread()(fd, buf, n, off) }
}

/// `fread` (interposed): the C library reads a large request straight into the buffer.
///
/// # Safety
/// As `fread(3)`.
#[no_mangle]
pub unsafe extern "C" fn fread(
    buf: *mut c_void,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::fread()(buf, size, count, f) }
}

/// `write` (interposed): the buffer made readable first.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::write()(fd, buf, n) }
}

/// `pwrite` (interposed).
///
/// # Safety
/// As `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::pwrite()(fd, buf, n, off) }
}

/// `fwrite` (interposed): the C library writes a large request straight from the buffer.
///
/// # Safety
/// As `fwrite(3)`.
#[no_mangle]
pub unsafe extern "C" fn fwrite(
    buf: *const c_void,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count), false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::fwrite()(buf, size, count, f) }
}

/// `__read_chk` (interposed): `read` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__read_chk` (the C library's checked `read`).
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::__read_chk()(fd, buf, n, buflen) }
}

/// `__pread_chk` (interposed): `pread` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__pread_chk`.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: libc::off_t,
    buflen: usize,
) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::__pread_chk()(fd, buf, n, off, buflen) }
}

/// `__fread_chk` (interposed): `fread` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__fread_chk`.
#[no_mangle]
pub unsafe extern "C" fn __fread_chk(
    buf: *mut c_void,
    buflen: usize,
    size: usize,
    count: usize,
    f: *mut libc::FILE,
) -> usize {
    prepare(buf, size.saturating_mul(count).min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::__fread_chk()(buf, buflen, size, count, f) }
}

/// Prepares every buffer of an `iovec` array (the array itself first: the kernel reads it).
fn prepare_iov(iov: *const libc::iovec, n: c_int, write: bool) {
    let Ok(n) = usize::try_from(n) else {
        return;
    };
    if iov.is_null() || signal_node().is_none() {
        return;
    }
    prepare(
        iov.cast(),
        n.saturating_mul(std::mem::size_of::<libc::iovec>()),
        false,
    );
    for i in 0..n {
        // SAFETY: the caller passes `n` iovecs at `iov` (as the system call requires); the
        // array was made readable above.
        let v = unsafe { *iov.add(i) };
        prepare(v.iov_base, v.iov_len, write);
    }
}

/// `readv` (interposed): every buffer made writable first.
///
/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    prepare_iov(iov, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::readv()(fd, iov, n) }
}

/// `preadv` (interposed).
///
/// # Safety
/// As `preadv(2)`.
#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: libc::off_t,
) -> isize {
    prepare_iov(iov, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::preadv()(fd, iov, n, off) }
}

/// `writev` (interposed): every buffer made readable first.
///
/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    prepare_iov(iov, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::writev()(fd, iov, n) }
}

/// `pwritev` (interposed).
///
/// # Safety
/// As `pwritev(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: libc::off_t,
) -> isize {
    prepare_iov(iov, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::pwritev()(fd, iov, n, off) }
}

/// `recv` (interposed): the buffer made writable first.
///
/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::recv()(fd, buf, n, flags) }
}

/// `recvfrom` (interposed).
///
/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    prepare(buf, n, true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::recvfrom()(fd, buf, n, flags, addr, len) }
}

/// `__recv_chk` (interposed): `recv` under `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `__recv_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::__recv_chk()(fd, buf, n, buflen, flags) }
}

/// `__recvfrom_chk` (interposed).
///
/// # Safety
/// As `__recvfrom_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    prepare(buf, n.min(buflen), true);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::__recvfrom_chk()(fd, buf, n, buflen, flags, addr, len) }
}

/// `send` (interposed): the buffer made readable first.
///
/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::send()(fd, buf, n, flags) }
}

/// `sendto` (interposed).
///
/// # Safety
/// As `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> isize {
    prepare(buf, n, false);
    // SAFETY: the caller's arguments, unchanged.
    unsafe { crate::libc_next::sendto()(fd, buf, n, flags, addr, len) }
}

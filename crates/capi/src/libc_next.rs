//! libsquall's own calls into the C library, kept away from the program's functions of the
//! same names.
//!
//! A program linked with libsquall.so may define functions named like the C library's: a
//! message-passing helper `send(int to, double v)`, `recv`, `poll`, a `shutdown()` of its own.
//! The linker then exports the program's definition (libsquall.so refers to the name), and
//! the dynamic linker binds libsquall's references to it: Squall's network layer would call
//! the program's `send` instead of the socket call, and crash. So libsquall.so is linked with
//! `-Wl,--wrap=NAME` for every name in `build.rs`'s `WRAPPED`: its references, Rust's
//! standard library and mio included, go to the `__wrap_NAME` below, which calls the C
//! library's own definition, found with `dlsym(RTLD_NEXT, ...)` (the next definition after
//! libsquall.so: never the program's). libsquall.so then imports none of these names, so the
//! program's functions stay the program's. The functions `io.rs` and `signals.rs` interpose
//! for the program (`read`, `sigaction` ...) call the C library's through the same accessors.
//! Every function is looked up once, when the library is loaded (an `.init_array` entry): the
//! signal-mode fault handler, which receives from sockets, must not be the first to call
//! `dlsym`.
//!
//! Owns: the list of such names and their calls into the C library. Must not touch: what a
//! call means (each forwards its arguments unchanged).
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The C library's definition of `name` (resolved once into `slot`); the job ends with a
/// message if there is none.
pub(crate) fn real(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `dlsym` with the RTLD_NEXT pseudo-handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if p.is_null() {
        let msg = format!(
            "squall: the C library has no `{}`: libsquall.so cannot call it\n",
            name.to_string_lossy()
        );
        // SAFETY: writes a byte buffer to stderr (a raw system call, no wrapped name).
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    slot.store(p, Ordering::Release);
    p
}

/// `NAME()`: the C library's function of that name, typed (looked up at the first call), and
/// `$group()`, which looks up every function of the invocation.
macro_rules! libc_fn {
    ($group:ident; $(fn $name:ident ($($ty:ty),*) -> $ret:ty;)*) => {
        $(
        pub(crate) fn $name() -> unsafe extern "C" fn($($ty),*) -> $ret {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let name = concat!(stringify!($name), "\0");
            let p = real(&SLOT, CStr::from_bytes_with_nul(name.as_bytes()).unwrap_or_default());
            // SAFETY: `p` is the C library's definition of this function, whose C signature
            // the types above spell.
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> $ret>(p) }
        }
        )*
        /// Looks up every function of this group.
        fn $group() {
            $(let _ = $name();)*
        }
    };
}

/// `libc_fn!`, and `__wrap_NAME` calling `NAME()` with the same arguments.
macro_rules! next {
    ($group:ident; $(fn $name:ident / $wrap:ident ($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {
        libc_fn! { $group; $(fn $name($($ty),*) -> $ret;)* }
        wrap_only! { $(fn $name / $wrap($($arg: $ty),*) -> $ret;)* }
    };
}

/// `__wrap_NAME` calling the C library's `NAME()` (defined by `libc_fn!`).
macro_rules! wrap_only {
    ($(fn $name:ident / $wrap:ident ($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {$(
        /// libsquall's own call of the C library's function of this name.
        ///
        /// # Safety
        /// As the C library's function.
        #[no_mangle]
        pub unsafe extern "C" fn $wrap($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's arguments, unchanged.
            unsafe { $name()($($arg),*) }
        }
    )*};
}

/// Looks up every function when the library is loaded.
extern "C" fn look_up_all() {
    sockets();
    interposed();
    signal_calls();
    let _ = open_fn(&OPEN, c"open");
    let _ = open_fn(&OPEN64, c"open64");
}

#[used]
#[link_section = ".init_array"]
static LOOK_UP_AT_LOAD: extern "C" fn() = look_up_all;

use libc::{msghdr, nfds_t, pollfd, sockaddr, socklen_t};
next! {
    sockets;
    fn accept4 / __wrap_accept4(fd: c_int, a: *mut sockaddr, l: *mut socklen_t, f: c_int) -> c_int;
    fn bind / __wrap_bind(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int;
    fn close / __wrap_close(fd: c_int) -> c_int;
    fn gettid / __wrap_gettid() -> libc::pid_t;
    fn connect / __wrap_connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int;
    fn listen / __wrap_listen(fd: c_int, backlog: c_int) -> c_int;
    fn pause / __wrap_pause() -> c_int;
    fn poll / __wrap_poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    fn recv / __wrap_recv(fd: c_int, b: *mut c_void, n: usize, f: c_int) -> isize;
    fn recvfrom / __wrap_recvfrom(
        fd: c_int, b: *mut c_void, n: usize, f: c_int, a: *mut sockaddr, l: *mut socklen_t
    ) -> isize;
    fn send / __wrap_send(fd: c_int, b: *const c_void, n: usize, f: c_int) -> isize;
    fn sendmsg / __wrap_sendmsg(fd: c_int, m: *const msghdr, f: c_int) -> isize;
    fn sendto / __wrap_sendto(
        fd: c_int, b: *const c_void, n: usize, f: c_int, a: *const sockaddr, l: socklen_t
    ) -> isize;
    fn shutdown / __wrap_shutdown(fd: c_int, how: c_int) -> c_int;
    fn socket / __wrap_socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
    fn writev / __wrap_writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize;
}

/// The C library's `open` and `open64` take a mode only with `O_CREAT` or `O_TMPFILE`
/// (variadic); the wrappers pass the third argument on either way (ignored without those).
type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
static OPEN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static OPEN64: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

fn open_fn(slot: &AtomicPtr<c_void>, name: &CStr) -> OpenFn {
    let p = real(slot, name);
    // SAFETY: the C library's `open`/`open64`, variadic after the flags.
    unsafe { std::mem::transmute::<*mut c_void, OpenFn>(p) }
}

/// libsquall's own `open` (its callers pass a mode whenever the flags need one).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    unsafe { open_fn(&OPEN, c"open")(path, flags, mode) }
}

/// libsquall's own `open64`.
///
/// # Safety
/// As `open64(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, unchanged.
    unsafe { open_fn(&OPEN64, c"open64")(path, flags, mode) }
}

// The C library's functions `io.rs` interposes, called after it prepared the buffers.
libc_fn! {
    interposed;
    fn read(c_int, *mut c_void, usize) -> isize;
    fn write(c_int, *const c_void, usize) -> isize;
    fn pread(c_int, *mut c_void, usize, libc::off_t) -> isize;
    fn pwrite(c_int, *const c_void, usize, libc::off_t) -> isize;
    fn fread(*mut c_void, usize, usize, *mut libc::FILE) -> usize;
    fn fwrite(*const c_void, usize, usize, *mut libc::FILE) -> usize;
    fn readv(c_int, *const libc::iovec, c_int) -> isize;
    fn preadv(c_int, *const libc::iovec, c_int, libc::off_t) -> isize;
    fn pwritev(c_int, *const libc::iovec, c_int, libc::off_t) -> isize;
    fn __read_chk(c_int, *mut c_void, usize, usize) -> isize;
    fn __pread_chk(c_int, *mut c_void, usize, libc::off_t, usize) -> isize;
    fn __fread_chk(*mut c_void, usize, usize, usize, *mut libc::FILE) -> usize;
    fn __recv_chk(c_int, *mut c_void, usize, usize, c_int) -> isize;
    fn __recvfrom_chk(
        c_int, *mut c_void, usize, usize, c_int, *mut sockaddr, *mut socklen_t
    ) -> isize;
}

// The C library's signal calls `signals.rs` interposes.
libc_fn! {
    signal_calls;
    fn sigaction(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    fn signal(c_int, libc::sighandler_t) -> libc::sighandler_t;
    fn pthread_sigmask(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    fn sigprocmask(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
}

// libsquall's own calls of these (`build.rs` wraps them too): straight to the C library,
// without `io.rs`'s preparing.
wrap_only! {
    fn read / __wrap_read(fd: c_int, b: *mut c_void, n: usize) -> isize;
    fn write / __wrap_write(fd: c_int, b: *const c_void, n: usize) -> isize;
    fn pread / __wrap_pread(fd: c_int, b: *mut c_void, n: usize, off: libc::off_t) -> isize;
    fn pwrite / __wrap_pwrite(fd: c_int, b: *const c_void, n: usize, off: libc::off_t) -> isize;
    fn fread / __wrap_fread(b: *mut c_void, s: usize, n: usize, f: *mut libc::FILE) -> usize;
    fn fwrite / __wrap_fwrite(b: *const c_void, s: usize, n: usize, f: *mut libc::FILE) -> usize;
    fn sigaction / __wrap_sigaction(
        sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction
    ) -> c_int;
    fn signal / __wrap_signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    fn pthread_sigmask / __wrap_pthread_sigmask(
        how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t
    ) -> c_int;
    fn sigprocmask / __wrap_sigprocmask(
        how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t
    ) -> c_int;
}

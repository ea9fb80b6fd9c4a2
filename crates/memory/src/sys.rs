//! Thin wrappers over the Linux system calls the address space needs: memfd, mmap, madvise,
//! fallocate, userfaultfd and its ioctls, eventfd, poll, and copies through raw mappings.
//!
//! Owns: every `unsafe` block of this crate (the rest of it denies `unsafe_code`). Each wrapper
//! is safe to call: it takes plain integers and slices, checks what the kernel needs, and turns `-1`
//! into `io::Error` with the [`syscall!`] helper (as mio does).
//! Must not touch: page states, policy, threads. Callers decide what to map and when.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Run a libc call; `-1` becomes the thread's `errno` as an `io::Error`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: each call site documents why its arguments are valid for this call.
        #[allow(unused_unsafe)]
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

// ---- userfaultfd ABI (include/uapi/linux/userfaultfd.h); stable kernel ABI. ----

pub const UFFD_API: u64 = 0xAA;
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

pub const UFFD_FEATURE_MISSING_SHMEM: u64 = 1 << 5;
pub const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
pub const UFFD_FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;

pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;

pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;

pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;

const fn ioc(dir: u64, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | (0xAA << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, 0x3F, 24);
const UFFDIO_REGISTER: u64 = ioc(IOC_READ | IOC_WRITE, 0x00, 32);
const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, 0x01, 16);
const UFFDIO_WAKE: u64 = ioc(IOC_READ, 0x02, 16);
const UFFDIO_WRITEPROTECT: u64 = ioc(IOC_READ | IOC_WRITE, 0x06, 24);
const UFFDIO_CONTINUE: u64 = ioc(IOC_READ | IOC_WRITE, 0x07, 32);
const USERFAULTFD_IOC_NEW: u64 = 0xAA << 8;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioContinue {
    range: UffdioRange,
    mode: u64,
    mapped: i64,
}

/// One message read from a userfaultfd (`struct uffd_msg`, 32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UffdMsg {
    pub event: u8,
    pub flags: u64,
    pub address: u64,
    pub ptid: u32,
}

pub const UFFD_MSG_SIZE: usize = 32;

impl UffdMsg {
    /// Decode the kernel's little-endian `struct uffd_msg`.
    pub fn decode(b: &[u8; UFFD_MSG_SIZE]) -> Self {
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_ne_bytes(a)
        };
        let mut t = [0u8; 4];
        t.copy_from_slice(&b[24..28]);
        UffdMsg {
            event: b[0],
            flags: u64_at(8),
            address: u64_at(16),
            ptid: u32::from_ne_bytes(t),
        }
    }
}

fn ioctl<T>(fd: RawFd, req: u64, arg: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: `arg` is a live, exclusively borrowed `#[repr(C)]` struct whose size is encoded in
    // `req` (see `ioc`), so the kernel reads and writes only inside it.
    syscall!(ioctl(fd, req as _, arg as *mut T))
}

/// Open a userfaultfd: the syscall first, then `/dev/userfaultfd`. Returns the fd and a
/// description of each way that failed (for the error message) if none worked.
pub fn userfaultfd_open(user_mode_only: bool) -> Result<OwnedFd, Vec<String>> {
    let flags = libc::O_CLOEXEC
        | libc::O_NONBLOCK
        | if user_mode_only {
            UFFD_USER_MODE_ONLY
        } else {
            0
        };
    let mut why = Vec::new();
    // SAFETY: userfaultfd(2) takes one integer flag argument and returns a new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if r >= 0 {
        // SAFETY: the kernel just returned this fd to us; nobody else owns it.
        return Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
    }
    why.push(format!("userfaultfd(2): {}", io::Error::last_os_error()));
    let path = c"/dev/userfaultfd";
    match syscall!(open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)) {
        Ok(dev) => {
            // SAFETY: `open` returned a fresh fd we own.
            let dev = unsafe { OwnedFd::from_raw_fd(dev) };
            // SAFETY: USERFAULTFD_IOC_NEW takes the new fd's flags as a plain integer argument.
            match syscall!(ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags)) {
                // SAFETY: the ioctl returned a fresh fd we own.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
                Err(e) => why.push(format!("/dev/userfaultfd USERFAULTFD_IOC_NEW: {e}")),
            }
        }
        Err(e) => why.push(format!("open /dev/userfaultfd: {e}")),
    }
    Err(why)
}

/// Handshake with the kernel asking for `features`; returns the features the kernel grants.
pub fn uffd_api(fd: RawFd, features: u64) -> io::Result<u64> {
    let mut a = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_API, &mut a)?;
    Ok(a.features)
}

/// Features this kernel supports at all (a throwaway fd: UFFDIO_API may be done only once).
pub fn uffd_probe_features(user_mode_only: bool) -> Result<u64, Vec<String>> {
    let fd = userfaultfd_open(user_mode_only)?;
    uffd_api(fd.as_raw_fd(), 0).map_err(|e| vec![format!("UFFDIO_API: {e}")])
}

pub fn uffd_register(fd: RawFd, start: usize, len: usize, mode: u64) -> io::Result<()> {
    let mut r = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut r).map(drop)
}

/// Stop handling faults of `start..start+len` (UFFDIO_UNREGISTER): the range becomes a plain
/// mapping again (write protection is cleared).
pub fn uffd_unregister(fd: RawFd, start: usize, len: usize) -> io::Result<()> {
    let mut r = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_UNREGISTER, &mut r).map(drop)
}

/// Map the existing memfd pages of `start..start+len` (after a MINOR fault or a zap),
/// write-protected if `wp`; wakes threads waiting on the range. Also returns how many bytes
/// the kernel mapped before failing (the `mapped` field; negative is an errno).
pub fn uffd_continue(fd: RawFd, start: usize, len: usize, wp: bool) -> (io::Result<()>, i64) {
    let mut c = UffdioContinue {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: if wp { UFFDIO_CONTINUE_MODE_WP } else { 0 },
        mapped: 0,
    };
    let r = ioctl(fd, UFFDIO_CONTINUE, &mut c).map(drop);
    (r, c.mapped)
}

/// Set (`wp`) or clear write protection of mapped pages; clearing wakes waiters.
pub fn uffd_writeprotect(fd: RawFd, start: usize, len: usize, wp: bool) -> io::Result<()> {
    let mut w = UffdioWriteprotect {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: if wp { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 },
    };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut w).map(drop)
}

/// Wake threads blocked on faults in the range (they retry their access).
pub fn uffd_wake(fd: RawFd, start: usize, len: usize) -> io::Result<()> {
    let mut r = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_WAKE, &mut r).map(drop)
}

/// Read one fault message; `Ok(None)` when none is pending (the fd is non-blocking).
pub fn uffd_read(fd: RawFd) -> io::Result<Option<UffdMsg>> {
    let mut buf = [0u8; UFFD_MSG_SIZE];
    // SAFETY: `buf` is a writable buffer of exactly the length passed.
    match syscall!(read(fd, buf.as_mut_ptr().cast(), buf.len())) {
        Ok(n) if n as usize == UFFD_MSG_SIZE => Ok(Some(UffdMsg::decode(&buf))),
        Ok(n) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short userfaultfd read of {n} bytes"),
        )),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

// ---- memfd, mappings ----

pub fn memfd_create(name: &CStr, size: usize) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let fd = syscall!(memfd_create(name.as_ptr(), libc::MFD_CLOEXEC))?;
    // SAFETY: memfd_create returned a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    syscall!(ftruncate(fd.as_raw_fd(), size as libc::off_t))?;
    Ok(fd)
}

/// `MAP_SHARED` mapping of `fd` at exactly `addr` (`MAP_FIXED_NOREPLACE`), or anywhere if
/// `addr` is `None`. Never replaces an existing mapping.
pub fn map_shared(fd: RawFd, addr: Option<usize>, len: usize) -> io::Result<usize> {
    let mut flags = libc::MAP_SHARED | libc::MAP_NORESERVE;
    if addr.is_some() {
        flags |= libc::MAP_FIXED_NOREPLACE;
    }
    let hint = addr.unwrap_or(0) as *mut libc::c_void;
    // SAFETY: mmap without MAP_FIXED never replaces existing mappings (MAP_FIXED_NOREPLACE
    // fails with EEXIST instead), so no live Rust memory can be clobbered.
    let p = unsafe { libc::mmap(hint, len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let got = p as usize;
    if let Some(want) = addr {
        if got != want {
            // Old kernels ignore MAP_FIXED_NOREPLACE and treat the address as a hint.
            unmap(got, len);
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
    }
    Ok(got)
}

/// `MAP_SHARED` mapping of `fd` at file offset `offset` placed exactly at `addr`, REPLACING
/// whatever the process had mapped there (`MAP_FIXED`): used to take over a page-aligned range
/// of the program's own data section (an adopted region).
///
/// The caller guarantees that the range is a page-aligned part of a private read/write mapping
/// of the program whose current contents it has already copied into `fd` at `offset`, and that
/// no other thread is accessing the range meanwhile: the same bytes are then visible at the same
/// addresses afterwards, so no Rust reference into the range observes a change.
pub fn map_shared_over(fd: RawFd, addr: usize, len: usize, offset: usize) -> io::Result<()> {
    let flags = libc::MAP_SHARED | libc::MAP_FIXED;
    // SAFETY: see the contract above: the replaced pages hold the same bytes afterwards.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize != addr {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

/// Copy `len` bytes of the process's own memory at `src` into the mapping at `dst`.
///
/// The caller guarantees `src..src+len` is readable memory of this process that is not being
/// written concurrently, and `dst..dst+len` lies in a backdoor view owned by this crate.
pub fn copy_within_process(src: usize, dst: usize, len: usize) {
    // SAFETY: per the contract both ranges are mapped; they belong to different mappings, so
    // they do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) }
}

/// Whether the `len` bytes at `addr` (mapped, readable, not registered with userfaultfd) are all
/// zero.
pub fn mapping_is_zero(addr: usize, len: usize) -> bool {
    // SAFETY: per the contract the range is mapped and readable; it is only read, through a
    // byte slice that lives for this call.
    let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    let (head, words, tail) = {
        // SAFETY: reinterpreting initialised bytes as u64 words is valid for any bit pattern.
        unsafe { s.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

/// Which pages of the page-aligned mapping `addr..addr+len` are resident (mincore(2)); for
/// anonymous memory, a page that is not resident was never written and reads as zeros.
pub fn resident_pages(addr: usize, len: usize) -> io::Result<Vec<bool>> {
    let pages = len.div_ceil(host_page_size());
    let mut v = vec![0u8; pages];
    // SAFETY: `v` holds one byte per page of the range, as mincore requires; the range is
    // only queried.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v.into_iter().map(|b| b & 1 != 0).collect())
}

/// `ADDR_NO_RANDOMIZE` of personality(2).
pub const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;

/// The process's personality flags (personality(0xffffffff) only queries).
pub fn personality_get() -> io::Result<libc::c_ulong> {
    // SAFETY: a query; no memory is involved.
    let r = unsafe { libc::personality(0xffff_ffff) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as libc::c_ulong)
}

/// Set the process's personality flags (inherited across execve).
pub fn personality_set(flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: sets a per-process flag word; no memory is involved.
    let r = unsafe { libc::personality(flags) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Replace the process image with `path` and `args` (argv, argv[0] included), keeping the
/// environment. Returns only on failure.
pub fn exec(path: &CStr, args: &[std::ffi::CString]) -> io::Error {
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: `path` and every argument are NUL-terminated strings that live across the call;
    // `argv` is NULL-terminated. execv keeps the current environment.
    unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
    io::Error::last_os_error()
}

/// Unmap a mapping this module created. Errors are ignored (used only on drop paths).
pub fn unmap(addr: usize, len: usize) {
    // SAFETY: callers pass a range they mapped with `map_shared` and no longer reference.
    let _ = syscall!(munmap(addr as *mut libc::c_void, len));
}

/// Drop the page-table entries of `addr..addr+len` (the page cache keeps shmem data).
pub fn zap(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_DONTNEED on a shared file mapping only drops PTEs; contents stay in the file.
    syscall!(madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED)).map(drop)
}

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault pages in writable without changing their contents.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Allocate (if they have none) and map writable the pages of `addr..addr+len` of a shared
/// mapping, without changing their contents: a later write through it takes no page fault.
pub fn populate_mapping(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_POPULATE_WRITE only faults pages in (as a write would, without writing);
    // it never changes the bytes of the range.
    syscall!(madvise(addr as *mut libc::c_void, len, MADV_POPULATE_WRITE)).map(drop)
}

/// Allocate file pages for `offset..offset+len` (zero-filled if new), keeping existing data.
pub fn populate(fd: RawFd, offset: usize, len: usize) -> io::Result<()> {
    syscall!(fallocate(fd, 0, offset as libc::off_t, len as libc::off_t)).map(drop)
}

/// Free the file pages of `offset..offset+len` (reads return zeros afterwards).
pub fn punch_hole(fd: RawFd, offset: usize, len: usize) -> io::Result<()> {
    syscall!(fallocate(
        fd,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset as libc::off_t,
        len as libc::off_t
    ))
    .map(drop)
}

/// Copy `out.len()` bytes from mapped address `src` into `out`.
///
/// The caller guarantees `src..src+out.len()` lies inside a live read/write mapping owned by
/// this crate that is never registered with userfaultfd (the backdoor view), so the copy cannot
/// fault into userspace handling.
pub fn copy_from_mapping(src: usize, out: &mut [u8]) {
    // SAFETY: per the contract above the source range is mapped and readable; `out` is a
    // distinct Rust buffer, so the ranges do not overlap. Concurrent writes by application
    // threads through the other view only make the copied bytes stale, as with any DSM copy.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) }
}

/// Append the `len` bytes at mapped address `src` to `out` (same contract as
/// [`copy_from_mapping`]): one pass, no zero-fill of the destination first.
pub fn append_from_mapping(src: usize, len: usize, out: &mut Vec<u8>) {
    // SAFETY: per the contract the source range is mapped and readable for `len` bytes and is
    // not Rust-owned memory, so the temporary slice aliases no Rust reference.
    out.extend_from_slice(unsafe { std::slice::from_raw_parts(src as *const u8, len) })
}

/// Whether the `data.len()` bytes at mapped address `src` equal `data` (same contract as
/// [`copy_from_mapping`]).
pub fn mapping_equals(src: usize, data: &[u8]) -> bool {
    // SAFETY: per the contract above the range is mapped and readable for `data.len()` bytes;
    // memcmp only reads both ranges. Concurrent writes through the other view only make the
    // answer stale, as with `copy_from_mapping`.
    unsafe { libc::memcmp(src as *const libc::c_void, data.as_ptr().cast(), data.len()) == 0 }
}

/// Copy `data` into mapped address `dst` (same contract as [`copy_from_mapping`]).
pub fn copy_to_mapping(dst: usize, data: &[u8]) {
    // SAFETY: per the contract the destination range is mapped writable and is not Rust-owned
    // memory, so it cannot overlap `data`'s borrow.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) }
}

// ---- eventfd + poll for the fault thread ----

pub fn eventfd() -> io::Result<OwnedFd> {
    let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
    // SAFETY: eventfd returned a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes exactly the 8 bytes of `one`, which lives across the call.
    syscall!(write(fd, (&one as *const u64).cast(), 8)).map(drop)
}

/// Wait until `a` or `b` is readable; returns `(a_ready, b_ready)`. EINTR counts as nothing.
pub fn poll2(a: RawFd, b: RawFd) -> io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live array of exactly the length passed.
    match syscall!(poll(fds.as_mut_ptr(), 2, -1)) {
        Ok(_) => Ok((fds[0].revents != 0, fds[1].revents != 0)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok((false, false)),
        Err(e) => Err(e),
    }
}

/// The kernel's host page size.
pub fn host_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let r = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if r <= 0 {
        4096
    } else {
        r as usize
    }
}

// ---- the symmetric arena (one-sided operations, `crate::symmetric`) ----

/// Private anonymous read/write mapping at exactly `addr` (`MAP_FIXED_NOREPLACE`,
/// `MAP_NORESERVE`: address space only until touched). Never replaces an existing mapping.
pub fn map_private_fixed(addr: usize, len: usize) -> io::Result<()> {
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE fails with EEXIST instead of replacing a mapping, so no live
    // Rust memory can be clobbered.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p as usize != addr {
        unmap(p as usize, len);
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(())
}

/// An atomic read-modify-write of one aligned word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordOp {
    Load,
    Store(u64),
    Add(u64),
    Swap(u64),
    CompareSwap { current: u64, new: u64 },
    And(u64),
    Or(u64),
    Xor(u64),
}

macro_rules! word_op {
    ($a:expr, $op:expr, $t:ty) => {{
        use std::sync::atomic::Ordering::SeqCst;
        let a = $a;
        match $op {
            WordOp::Load => a.load(SeqCst),
            WordOp::Store(v) => a.swap(v as $t, SeqCst),
            WordOp::Swap(v) => a.swap(v as $t, SeqCst),
            WordOp::Add(v) => a.fetch_add(v as $t, SeqCst),
            WordOp::And(v) => a.fetch_and(v as $t, SeqCst),
            WordOp::Or(v) => a.fetch_or(v as $t, SeqCst),
            WordOp::Xor(v) => a.fetch_xor(v as $t, SeqCst),
            WordOp::CompareSwap { current, new } => {
                match a.compare_exchange(current as $t, new as $t, SeqCst, SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    }};
}

/// Execute `op` on the 4- or 8-byte word at `addr` with a hardware atomic; the old value.
///
/// The caller guarantees `addr..addr+width` lies inside a live read/write mapping that is not
/// Rust-owned memory (the symmetric arena or the program's writable data), and that `addr` is
/// aligned to `width`.
pub fn word_atomic(addr: usize, width: usize, op: WordOp) -> u64 {
    if width == 4 {
        // SAFETY: per the contract the word is mapped, writable and aligned; other accesses to
        // it (remote atomics, the program's own atomics) are atomic too or the program's race.
        let a = unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) };
        u64::from(word_op!(a, op, u32))
    } else {
        // SAFETY: as above, for an 8-byte word.
        let a = unsafe { std::sync::atomic::AtomicU64::from_ptr(addr as *mut u64) };
        word_op!(a, op, u64)
    }
}

/// The main program's writable data (`[start, end)`: its writable `PT_LOAD` segment with the
/// RELRO part left out), from the dynamic loader's program headers.
pub fn program_data_segment() -> Option<(usize, usize)> {
    struct Found {
        seen: bool,
        range: Option<(usize, usize)>,
    }
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` for the duration of the call, and
        // `data` is the `Found` passed to dl_iterate_phdr below.
        let (info, found) = unsafe { (&*info, &mut *(data as *mut Found)) };
        if found.seen {
            return 1;
        }
        // The first object is the main program.
        found.seen = true;
        if info.dlpi_phdr.is_null() {
            return 1;
        }
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
        let phdrs =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        let mut data_seg = None;
        let mut relro = None;
        for p in phdrs {
            let start = base + p.p_vaddr as usize;
            let end = start + p.p_memsz as usize;
            if p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_W != 0 {
                data_seg = Some((start, end));
            } else if p.p_type == libc::PT_GNU_RELRO {
                relro = Some((start, end));
            }
        }
        if let Some((mut s, e)) = data_seg {
            if let Some((rs, re)) = relro {
                if rs <= s && re > s {
                    s = re;
                }
            }
            // Whole pages of the segment only past RELRO's end (mprotect works on pages).
            let page = host_page_size();
            if let Some((_, re)) = relro {
                s = s.max(re.div_ceil(page) * page);
            }
            if s < e {
                found.range = Some((s, e));
            }
        }
        1
    }
    let mut found = Found {
        seen: false,
        range: None,
    };
    // SAFETY: the callback only reads the loader's headers and writes `found`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut found as *mut Found).cast()) };
    found.range
}

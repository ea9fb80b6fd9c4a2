//! Code addresses named independently of where a process loaded its modules: `(hash of the
//! module's name as the loader lists it, offset from the module's load address)`. Every node
//! runs the same program with the same libraries (the main program's name is the empty one).
//!
//! Owns: the `dl_iterate_phdr` walks. Must not touch anything else.
use std::ffi::{c_int, c_void};

struct Find {
    addr: usize,
    found: Option<(u64, usize)>,
}

/// FNV-1a of a module's name (`dlpi_name`; empty for the main program).
fn name_hash(info: &libc::dl_phdr_info) -> u64 {
    let name: &[u8] = if info.dlpi_name.is_null() {
        &[]
    } else {
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

extern "C" fn visit_find(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `Find` passed below, alive for the whole walk; `info` is valid for
    // this callback and its `dlpi_phnum` program headers are readable.
    let (f, info) = unsafe { (&mut *(data as *mut Find), &*info) };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let base = info.dlpi_addr as usize;
    let hit = phdrs.iter().any(|p| {
        let start = base.wrapping_add(p.p_vaddr as usize);
        p.p_type == libc::PT_LOAD && f.addr >= start && f.addr - start < p.p_memsz as usize
    });
    if hit {
        f.found = Some((name_hash(info), base));
        return 1;
    }
    0
}

struct Base {
    want: u64,
    found: Option<usize>,
}

extern "C" fn visit_base(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `Base` passed below; `info` is valid for this callback.
    let (b, info) = unsafe { (&mut *(data as *mut Base), &*info) };
    if name_hash(info) == b.want {
        b.found = Some(info.dlpi_addr as usize);
        return 1;
    }
    0
}

/// `(module name hash, offset)` of a code or data address, if it is in a loaded module.
pub(crate) fn encode(addr: usize) -> Option<(u64, u64)> {
    let mut f = Find { addr, found: None };
    // SAFETY: the callback only reads the loader's records and writes `f`.
    unsafe { libc::dl_iterate_phdr(Some(visit_find), &mut f as *mut Find as *mut c_void) };
    f.found.map(|(i, base)| (i, (addr - base) as u64))
}

/// Entries of each thread's cache of [`encode`] answers (a power of two).
const CACHE: usize = 64;

/// Direct-mapped by address: `(address, encode(address))`; address 0 is an empty entry.
type Encoded = [(usize, Option<(u64, u64)>); CACHE];

thread_local! {
    static ENCODED: std::cell::RefCell<Encoded> =
        const { std::cell::RefCell::new([(0, None); CACHE]) };
}

/// [`encode`] through a per-thread cache: a mutex or other object named by its address is
/// looked up in the loader's records (`dl_iterate_phdr`, which takes the loader's lock) once
/// per thread and address, not at every lock and unlock. An address's answer stays right
/// while what holds it stays mapped (a module is not unloaded while its objects are used).
pub(crate) fn encode_cached(addr: usize) -> Option<(u64, u64)> {
    if addr == 0 {
        return encode(addr);
    }
    let slot = (addr >> 3) & (CACHE - 1);
    let hit = ENCODED.with(|c| {
        let e = c.borrow()[slot];
        (e.0 == addr).then_some(e.1)
    });
    if let Some(found) = hit {
        return found;
    }
    let found = encode(addr);
    ENCODED.with(|c| c.borrow_mut()[slot] = (addr, found));
    found
}

/// The local address of `(module name hash, offset)` (the inverse of [`encode`]; the runtime
/// decodes thread functions itself; key destructors are decoded with this).
pub(crate) fn decode(module: u64, offset: u64) -> Option<usize> {
    let mut b = Base {
        want: module,
        found: None,
    };
    // SAFETY: the callback only reads the loader's records and writes `b`.
    unsafe { libc::dl_iterate_phdr(Some(visit_base), &mut b as *mut Base as *mut c_void) };
    b.found.map(|base| base.wrapping_add(offset as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn probe(p: *mut c_void) -> *mut c_void {
        p
    }

    #[test]
    fn round_trip_of_code_addresses() {
        let f = probe as extern "C" fn(*mut c_void) -> *mut c_void as usize;
        let (i, off) = encode(f).expect("a function of this binary is in a module");
        assert_eq!(decode(i, off), Some(f));
        let libc_fn = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize;
        let (j, off2) = encode(libc_fn).expect("libc is a module");
        assert_ne!(i, j, "the program and libc are different modules");
        assert_eq!(decode(j, off2), Some(libc_fn));
        let heap = Box::new(5u64);
        assert_eq!(encode(&*heap as *const u64 as usize), None);
        // The cache answers as the loader does, also for a second address in its entry.
        for a in [f, libc_fn, &*heap as *const u64 as usize, f + 8 * CACHE] {
            assert_eq!(encode_cached(a), encode(a));
            assert_eq!(encode_cached(a), encode(a), "cached");
        }
    }
}

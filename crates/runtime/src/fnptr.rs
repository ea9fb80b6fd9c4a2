//! Function pointers that mean the same function on every node. Address randomisation loads
//! the program and its libraries at different addresses in each process, so a pointer is sent
//! as (module, offset from the module's load address) and turned back into a local address on
//! the receiving node. Every node must run the same binaries (as `squall run` and `mpirun` do).
//!
//! Owns: the translation, and the `unsafe` calls to `dladdr` / `dl_iterate_phdr` it needs.
//! Must not touch anything else.
use std::ffi::{c_int, c_void, CStr};

/// A function named independently of where this process loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnRef {
    /// Empty for the main executable, else the shared object's path as the loader named it.
    pub module: String,
    /// Offset of the function from the module's ELF header.
    pub offset: u64,
}

/// The address of the ELF header (what `dladdr` calls `dli_fbase`) of one loaded module.
fn module_base(info: &libc::dl_phdr_info) -> Option<usize> {
    if info.dlpi_phdr.is_null() {
        return None;
    }
    // SAFETY: the loader passes `dlpi_phnum` valid program headers at `dlpi_phdr`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_LOAD && p.p_offset == 0)
        .map(|p| info.dlpi_addr as usize + p.p_vaddr as usize)
}

struct Search<'a> {
    /// `None`: the main executable (the loader lists it first).
    want: Option<&'a [u8]>,
    index: usize,
    found: Option<usize>,
}

extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Search` passed to dl_iterate_phdr below, alive for the whole call;
    // `info` is valid for this callback.
    let (s, info) = unsafe { (&mut *(data as *mut Search<'_>), &*info) };
    let idx = s.index;
    s.index += 1;
    let hit = match s.want {
        None => idx == 0,
        Some(name) => {
            !info.dlpi_name.is_null()
                // SAFETY: non-null `dlpi_name` is a NUL-terminated string owned by the loader.
                && unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes() == name
        }
    };
    if hit {
        s.found = module_base(info);
        return 1;
    }
    0
}

fn find_base(want: Option<&[u8]>) -> Option<usize> {
    let mut s = Search {
        want,
        index: 0,
        found: None,
    };
    // SAFETY: `visit` only reads the loader's data and writes into `s`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut s as *mut Search<'_> as *mut c_void) };
    s.found
}

/// Name the function at `addr` so another node can find it.
pub fn encode(addr: usize) -> Option<FnRef> {
    // SAFETY: an all-zero Dl_info is a valid value of this plain C struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads its address argument and fills `info`.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fbase.is_null() {
        return None;
    }
    let base = info.dli_fbase as usize;
    let module = if Some(base) == find_base(None) || info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: non-null `dli_fname` is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    };
    Some(FnRef {
        module,
        offset: (addr - base) as u64,
    })
}

/// The local address of a function named by [`encode`] on some node.
pub fn decode(f: &FnRef) -> Option<usize> {
    let base = if f.module.is_empty() {
        find_base(None)
    } else {
        find_base(Some(f.module.as_bytes()))
    }?;
    Some(base + f.offset as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn probe(x: *mut c_void) -> *mut c_void {
        x
    }

    #[test]
    fn round_trips_a_function_of_this_executable() {
        let addr = probe as *const () as usize;
        let r = encode(addr).expect("dladdr knows our own function");
        assert_eq!(r.module, "");
        assert_eq!(decode(&r), Some(addr));
    }
}

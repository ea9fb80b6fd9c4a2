//! Names for the profile's addresses: an allocation's call site (file:line and function from
//! the program's debug information, the symbol and offset without it) and the global
//! variables of the adopted data sections (the ELF symbol table), through the `backtrace`
//! crate's symbolizer (gimli + addr2line over the loaded objects, so it follows shared
//! libraries and position-independent executables at their load addresses).
//!
//! Owns: address-to-name look-ups and their cache. Must not touch: the recorder's counters.

use super::Site;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A named allocation site or global variable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SiteName {
    /// `file:line` (`None` without debug information).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The function (allocation sites) or the variable (globals), if known.
    pub function: Option<String>,
    /// Symbol+offset or the raw address when there is nothing better.
    pub raw: String,
}

impl SiteName {
    /// `file:line (function)`, `symbol+0xoff` or `0xaddr`: the site as the report names it.
    pub fn label(&self) -> String {
        match (&self.file, self.line, &self.function) {
            (Some(f), Some(l), Some(func)) => format!("{}:{l} ({func})", short(f)),
            (Some(f), Some(l), None) => format!("{}:{l}", short(f)),
            _ => self.raw.clone(),
        }
    }
}

/// The last two components of a path (`dir/file.c`).
fn short(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [file, dir, _] | [file, dir] => format!("{dir}/{file}"),
        _ => path.to_string(),
    }
}

/// Look-ups with a cache (one allocation site is usually hit many times).
#[derive(Default)]
pub(super) struct Symbolizer {
    code: HashMap<usize, SiteName>,
}

impl Symbolizer {
    pub(super) fn site(&mut self, site: Site) -> SiteName {
        match site {
            Site::Rust(loc) => SiteName {
                file: Some(loc.file().to_string()),
                line: Some(loc.line()),
                function: None,
                raw: format!("{}:{}", loc.file(), loc.line()),
            },
            Site::Code(0) => SiteName {
                file: None,
                line: None,
                function: None,
                raw: "(caller unknown)".into(),
            },
            Site::Code(ip) => self.code.entry(ip).or_insert_with(|| code(ip)).clone(),
        }
    }
}

/// Symbolize a return address: the call instruction is the byte before it.
fn code(ip: usize) -> SiteName {
    let mut out = SiteName {
        file: None,
        line: None,
        function: None,
        raw: format!("{ip:#x}"),
    };
    let at = ip.saturating_sub(1);
    backtrace::resolve(at as *mut std::ffi::c_void, |sym| {
        if out.function.is_some() {
            return; // the innermost (inlined) frame came first
        }
        if let Some(name) = sym.name() {
            let name = name.to_string();
            out.raw = match sym.addr() {
                Some(a) if (a as usize) <= ip => format!("{name}+{:#x}", ip - a as usize),
                _ => name.clone(),
            };
            out.function = Some(name);
        }
        out.file = sym.filename().map(|f| f.display().to_string());
        out.line = sym.lineno();
    });
    out
}

/// The global variable at `addr` (the ELF symbol table's object symbol covering it), if any.
pub(super) fn global_at(addr: u64) -> Option<String> {
    let mut found = None;
    backtrace::resolve(addr as usize as *mut std::ffi::c_void, |sym| {
        if found.is_none() {
            found = sym.name().map(|n| n.to_string());
        }
    });
    found
}

/// The variables covering `[start, start + len)`, as runs of one name: (first, length, name).
/// Looked up every 8 bytes (variables are at least that aligned in practice).
pub(super) fn globals_in(start: u64, len: u64) -> Vec<(u64, u64, String)> {
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    let mut a = start;
    while a < start + len {
        if let Some(name) = global_at(a) {
            match out.last_mut() {
                Some((s, l, n)) if *n == name && *s + *l == a => *l += 8,
                _ => out.push((a, 8, name)),
            }
        }
        a += 8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> usize {
        // A return address into this test function's caller.
        super::super::caller_of(here as *const () as usize)
    }

    #[test]
    fn code_addresses_resolve_to_function_and_line() {
        let ip = here();
        assert_ne!(ip, 0, "the caller's frame was found");
        let s = code(ip);
        assert!(
            s.function.as_deref().is_some_and(|f| f.contains("code_addresses_resolve")),
            "{s:?}"
        );
        assert!(s.file.as_deref().is_some_and(|f| f.ends_with("symbols.rs")), "{s:?}");
        assert!(s.label().contains("profile/symbols.rs:"), "{}", s.label());
    }

    static SOME_GLOBAL: [u64; 4] = [1, 2, 3, 4];

    #[test]
    fn globals_resolve_from_the_symbol_table() {
        let a = SOME_GLOBAL.as_ptr() as u64;
        let runs = globals_in(a, 32);
        assert!(
            runs.iter().any(|(_, _, n)| n.contains("SOME_GLOBAL")),
            "{runs:?}"
        );
    }
}

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

/// The variables covering `[start, start + len)` from the program's ELF symbol table (data
/// objects of `/proc/self/exe`, moved by its load address): (first, length, name).
pub(super) fn globals_in(start: u64, len: u64) -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectKind, ObjectSymbol, SymbolKind};
    let Ok(data) = std::fs::read("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    let bias = if file.kind() == ObjectKind::Dynamic {
        load_address().unwrap_or(0)
    } else {
        0
    };
    let end = start + len;
    let mut out: Vec<(u64, u64, String)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Data && s.size() > 0)
        .filter_map(|s| {
            let a = s.address().wrapping_add(bias);
            let name = s.name().ok()?;
            (a < end && a + s.size() > start).then(|| (a, s.size(), name.to_string()))
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0 && a.2 == b.2);
    out
}

/// Where the executable is mapped (its first mapping, file offset 0, in /proc/self/maps).
fn load_address() -> Option<u64> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (range, offset, path) = (f.first()?, f.get(2)?, f.get(5)?);
        if std::path::Path::new(path) != exe || u64::from_str_radix(offset, 16).ok()? != 0 {
            return None;
        }
        u64::from_str_radix(range.split('-').next()?, 16).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

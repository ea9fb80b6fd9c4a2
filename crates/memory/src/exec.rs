//! The same program layout on every node: an adopted region (the program's `SQUALL_GLOBAL`
//! section) must lie at the same address in every node process, but address-space layout
//! randomisation moves a position-independent executable. [`fixed_layout`] turns
//! randomisation off for this process (`personality(ADDR_NO_RANDOMIZE)`) and re-executes it
//! (`/proc/self/exe` with the arguments of `/proc/self/cmdline` and the same environment), so
//! it works whatever started the process (`squall run`, mpirun, srun, a shell).
//!
//! Owns: the decision to re-execute. Must not touch: anything after start-up (call it before the
//! node connects to anyone, before other threads exist).

use crate::error::MemoryError;
use crate::sys;
use std::ffi::CString;

/// Whether address randomisation is off for this process (its personality, or the system-wide
/// `kernel.randomize_va_space = 0`).
pub fn layout_is_fixed() -> bool {
    if sys::personality_get().is_ok_and(|p| p & sys::ADDR_NO_RANDOMIZE != 0) {
        return true;
    }
    std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").is_ok_and(|s| s.trim() == "0")
}

/// Make sure this process runs with address randomisation off: returns `Ok(())` at once if it
/// already does; otherwise sets `ADDR_NO_RANDOMIZE` and re-executes the program (does not
/// return on success). Errors say what failed; the caller may go on (a node whose layout
/// differs is then caught when adopting the region).
pub fn fixed_layout() -> Result<(), MemoryError> {
    if layout_is_fixed() {
        return Ok(());
    }
    let why = |w: String| MemoryError::Reexec { why: w };
    let flags = sys::personality_get().map_err(|e| why(format!("personality query: {e}")))?;
    sys::personality_set(flags | sys::ADDR_NO_RANDOMIZE)
        .map_err(|e| why(format!("personality(ADDR_NO_RANDOMIZE): {e}")))?;
    if !layout_is_fixed() {
        return Err(why(
            "the kernel did not keep ADDR_NO_RANDOMIZE (a seccomp filter?)".into(),
        ));
    }
    let cmdline =
        std::fs::read("/proc/self/cmdline").map_err(|e| why(format!("/proc/self/cmdline: {e}")))?;
    let args = split_cmdline(&cmdline);
    if args.is_empty() {
        return Err(why("/proc/self/cmdline is empty".into()));
    }
    let e = sys::exec(c"/proc/self/exe", &args);
    // Leave the personality as it was: this process keeps running with its old layout.
    let _ = sys::personality_set(flags);
    Err(why(format!("execv /proc/self/exe: {e}")))
}

/// The NUL-separated arguments of `/proc/self/cmdline`.
fn split_cmdline(b: &[u8]) -> Vec<CString> {
    let b = b.strip_suffix(&[0]).unwrap_or(b);
    if b.is_empty() {
        return Vec::new();
    }
    b.split(|&c| c == 0)
        .filter_map(|a| CString::new(a).ok())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_splits_on_nul() {
        let v = split_cmdline(b"./prog\0-n\0\0x y\0");
        let s: Vec<&str> = v.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(s, vec!["./prog", "-n", "", "x y"]);
        assert!(split_cmdline(b"").is_empty());
        assert_eq!(split_cmdline(b"a").len(), 1);
    }
}

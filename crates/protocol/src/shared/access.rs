//! Page-access changes in runs: one `PageMemory::set_access_run` per run of consecutive pages.
//!
//! Owns: nothing but the batching. Must not touch: protocol state, page contents.

use squall_core::{Access, PageId, PageMemory};

/// Set the access of `pages` (ascending) with one call per run of consecutive pages.
pub(crate) fn set_access_runs(mem: &dyn PageMemory, pages: &[PageId], access: Access) {
    let mut i = 0;
    while i < pages.len() {
        let first = pages[i];
        let mut n = 1;
        while i + n < pages.len() && pages[i + n].0 == first.0 + n as u64 {
            n += 1;
        }
        mem.set_access_run(first, n as u64, access);
        i += n;
    }
}

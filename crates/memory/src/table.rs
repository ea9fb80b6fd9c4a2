//! The page access-state table: one `AtomicU8` per page, allocated lazily in chunks so a
//! 64 GiB range (16M pages) costs nothing until pages are used. Besides the access state, each
//! entry has a `woken` bit (see `WOKEN`) and a `backed` bit: the page's backing memory is known to be allocated and mapped in
//! the backdoor view (set by `AddressSpace::prepare_install`, cleared when the page is released).
//!
//! Owns: the record of what access each page of the application view currently has.
//! Must not touch: the mappings themselves (that is `space`). Written only by the service
//! thread (through `AddressSpace::set_access`), readable from any thread.

use squall_core::Access;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

const CHUNK_PAGES: usize = 4096;

fn encode(a: Access) -> u8 {
    match a {
        Access::None => 0,
        Access::Read => 1,
        Access::ReadWrite => 2,
    }
}

/// The `backed` bit of an entry (the low two bits hold the access state).
const BACKED: u8 = 0x80;
/// The `woken` bit: since the last fault message on the page was read, the kernel has woken
/// the threads blocked on it (set just before a waking kernel call, cleared when a fault
/// message is read), so a `Resume` needs no wake of its own.
const WOKEN: u8 = 0x40;
/// The bits of the access state.
const ACCESS: u8 = 0x03;

fn decode(v: u8) -> Access {
    match v & ACCESS {
        1 => Access::Read,
        2 => Access::ReadWrite,
        _ => Access::None,
    }
}

/// Two-level table of page access states; every page starts as `Access::None`.
pub struct AccessTable {
    pages: u64,
    chunks: Box<[OnceLock<Box<[AtomicU8]>>]>,
}

impl AccessTable {
    pub fn new(pages: u64) -> Self {
        let n = (pages as usize).div_ceil(CHUNK_PAGES);
        AccessTable {
            pages,
            chunks: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Pages covered.
    pub fn len(&self) -> u64 {
        self.pages
    }

    /// Current state of `page` (`None` for pages never set or beyond the table).
    pub fn get(&self, page: u64) -> Access {
        if page >= self.pages {
            return Access::None;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        match self.chunks[c].get() {
            Some(chunk) => decode(chunk[i].load(Ordering::Acquire)),
            None => Access::None,
        }
    }

    /// Whether `page` has its `backed` bit.
    pub fn backed(&self, page: u64) -> bool {
        if page >= self.pages {
            return false;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        self.chunks[c]
            .get()
            .is_some_and(|chunk| chunk[i].load(Ordering::Acquire) & BACKED != 0)
    }

    /// Set or clear the `backed` bit of `page`, keeping its access state.
    pub fn set_backed(&self, page: u64, backed: bool) {
        if page >= self.pages {
            return;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        if backed {
            self.chunk(c)[i].fetch_or(BACKED, Ordering::AcqRel);
        } else if let Some(chunk) = self.chunks[c].get() {
            chunk[i].fetch_and(!BACKED, Ordering::AcqRel);
        }
    }

    /// Whether `page` has its `woken` bit.
    pub fn woken(&self, page: u64) -> bool {
        if page >= self.pages {
            return false;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        self.chunks[c]
            .get()
            .is_some_and(|chunk| chunk[i].load(Ordering::Acquire) & WOKEN != 0)
    }

    /// Set or clear the `woken` bit of `page`, keeping its access state.
    pub fn set_woken(&self, page: u64, woken: bool) {
        if page >= self.pages {
            return;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        if woken {
            self.chunk(c)[i].fetch_or(WOKEN, Ordering::AcqRel);
        } else if let Some(chunk) = self.chunks[c].get() {
            chunk[i].fetch_and(!WOKEN, Ordering::AcqRel);
        }
    }

    fn chunk(&self, c: usize) -> &[AtomicU8] {
        self.chunks[c].get_or_init(|| (0..CHUNK_PAGES).map(|_| AtomicU8::new(0)).collect())
    }

    /// Record `access` for `page`; returns the previous state. Pages beyond the table are
    /// ignored (callers check bounds first).
    pub fn set(&self, page: u64, access: Access) -> Access {
        if page >= self.pages {
            return Access::None;
        }
        let (c, i) = (page as usize / CHUNK_PAGES, page as usize % CHUNK_PAGES);
        let chunk = if access == Access::None {
            // Setting `None` on an untouched chunk needs no allocation.
            match self.chunks[c].get() {
                Some(chunk) => chunk,
                None => return Access::None,
            }
        } else {
            self.chunk(c)
        };
        let new = encode(access);
        let old = chunk[i]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v & !ACCESS) | new)
            })
            .unwrap_or_else(|v| v);
        decode(old)
    }

    /// Number of chunks allocated so far.
    #[cfg(test)]
    pub fn allocated_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| c.get().is_some()).count()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lazy_and_round_trip() {
        let t = AccessTable::new(16 << 20);
        assert_eq!(t.allocated_chunks(), 0);
        assert_eq!(t.get(12345), Access::None);
        assert_eq!(t.set(12345, Access::None), Access::None);
        assert_eq!(t.allocated_chunks(), 0);
        assert_eq!(t.set(12345, Access::Read), Access::None);
        assert_eq!(t.set(12345, Access::ReadWrite), Access::Read);
        assert_eq!(t.get(12345), Access::ReadWrite);
        assert_eq!(t.get(12346), Access::None);
        assert_eq!(t.allocated_chunks(), 1);
        assert_eq!(t.get(16 << 20), Access::None);
        assert_eq!(t.set(16 << 20, Access::Read), Access::None);
        assert_eq!(t.get(16 << 20), Access::None);
    }

    #[test]
    fn backed_bit_is_independent_of_access() {
        let t = AccessTable::new(1 << 20);
        assert!(!t.backed(7));
        t.set_backed(7, false);
        assert_eq!(t.allocated_chunks(), 0);
        t.set_backed(7, true);
        assert!(t.backed(7));
        assert_eq!(t.get(7), Access::None);
        assert_eq!(t.set(7, Access::Read), Access::None);
        assert!(t.backed(7));
        assert_eq!(t.set(7, Access::None), Access::Read);
        assert!(t.backed(7));
        t.set_backed(7, false);
        assert!(!t.backed(7));
        assert_eq!(t.set(7, Access::ReadWrite), Access::None);
        assert!(!t.backed(8));
        assert!(!t.backed(1 << 20));
    }

    #[test]
    fn woken_bit_is_independent_of_access_and_backed() {
        let t = AccessTable::new(1 << 20);
        assert!(!t.woken(9));
        t.set_woken(9, false);
        assert_eq!(t.allocated_chunks(), 0);
        t.set_woken(9, true);
        t.set_backed(9, true);
        assert_eq!(t.set(9, Access::Read), Access::None);
        assert!(t.woken(9) && t.backed(9));
        assert_eq!(t.set(9, Access::ReadWrite), Access::Read);
        t.set_woken(9, false);
        assert!(!t.woken(9) && t.backed(9));
        assert_eq!(t.get(9), Access::ReadWrite);
        assert!(!t.woken(1 << 20));
    }
}

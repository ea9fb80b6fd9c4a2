//! Memory that one-sided operations (Split-C global pointers, OpenSHMEM) reach on this node:
//! the symmetric arena (a private mapping at the same virtual address on every node, outside
//! the coherent global range: each node has its own copy) and, once adopted, the program's own
//! writable data (globals and statics: the same addresses on every node running the same
//! non-randomised binary).
//!
//! Every access is checked against those two windows before any byte moves, so a wrong address
//! from the network is an error, never a write. Which bytes inside a window are live
//! allocations is the caller's concern. Owns the arena mapping and the checked copies and
//! atomics; the `unsafe` parts are in `sys`. Must not touch the network or the global range.
use crate::error::MemoryError;
use crate::sys;
pub use crate::sys::WordOp;

/// Where the arena goes: below the default global range (`0x6000_0000_0000`), the same on
/// every node.
pub const SYMMETRIC_BASE: usize = 0x5800_0000_0000;

/// The node's symmetric memory windows.
#[derive(Debug)]
pub struct SymmetricSpace {
    base: usize,
    size: usize,
    data: Option<(usize, usize)>,
}

impl SymmetricSpace {
    /// Map the arena: `size` bytes (rounded up to whole pages) at `base`. Address space only
    /// until touched.
    pub fn reserve(base: usize, size: usize) -> Result<Self, MemoryError> {
        let page = sys::host_page_size();
        let size = size.max(page).div_ceil(page) * page;
        sys::map_private_fixed(base, size).map_err(|source| MemoryError::SymmetricReserve {
            base,
            size,
            source,
        })?;
        Ok(SymmetricSpace {
            base,
            size,
            data: None,
        })
    }

    pub fn base(&self) -> usize {
        self.base
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Make the main program's writable data (its globals and statics) reachable; returns its
    /// range. `None` if the loader reports no such segment.
    pub fn adopt_program_data(&mut self) -> Option<(usize, usize)> {
        self.data = sys::program_data_segment();
        self.data
    }

    /// The adopted program data range.
    pub fn program_data(&self) -> Option<(usize, usize)> {
        self.data
    }

    /// Whether `[addr, addr+len)` lies in the arena.
    pub fn in_arena(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.size)
    }

    /// Whether `[addr, addr+len)` lies in the adopted program data.
    pub fn in_data(&self, addr: usize, len: usize) -> bool {
        self.data
            .is_some_and(|(s, e)| addr >= s && addr.checked_add(len).is_some_and(|x| x <= e))
    }

    fn check(&self, addr: usize, len: usize) -> Result<(), MemoryError> {
        if self.in_arena(addr, len) || self.in_data(addr, len) {
            return Ok(());
        }
        Err(MemoryError::NotSymmetric {
            addr,
            len,
            why: format!(
                "outside the symmetric arena {:#x}..{:#x}{}",
                self.base,
                self.base + self.size,
                match self.data {
                    Some((s, e)) => format!(" and the program's data {s:#x}..{e:#x}"),
                    None => String::new(),
                }
            ),
        })
    }

    /// Copy `out.len()` bytes at `addr` into `out`.
    pub fn read(&self, addr: usize, out: &mut [u8]) -> Result<(), MemoryError> {
        self.check(addr, out.len())?;
        sys::copy_from_mapping(addr, out);
        Ok(())
    }

    /// Append the `len` bytes at `addr` to `out`.
    pub fn read_append(
        &self,
        addr: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), MemoryError> {
        self.check(addr, len)?;
        sys::append_from_mapping(addr, len, out);
        Ok(())
    }

    /// Copy `data` to `addr`.
    pub fn write(&self, addr: usize, data: &[u8]) -> Result<(), MemoryError> {
        self.check(addr, data.len())?;
        sys::copy_to_mapping(addr, data);
        Ok(())
    }

    /// Atomic `op` on the `width`-byte (4 or 8) aligned word at `addr`; the old value.
    pub fn atomic(&self, addr: usize, width: usize, op: WordOp) -> Result<u64, MemoryError> {
        if width != 4 && width != 8 || !addr.is_multiple_of(width) {
            return Err(MemoryError::NotSymmetric {
                addr,
                len: width,
                why: format!("an atomic needs an aligned 4- or 8-byte word, not {width} bytes"),
            });
        }
        self.check(addr, width)?;
        Ok(sys::word_atomic(addr, width, op))
    }
}

impl Drop for SymmetricSpace {
    fn drop(&mut self) {
        sys::unmap(self.base, self.size);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn checked_access() {
        let base = SYMMETRIC_BASE + 0x100_0000_0000;
        let mut s = SymmetricSpace::reserve(base, 1 << 20).unwrap();
        s.write(base + 8, &[1, 2, 3]).unwrap();
        let mut b = [0u8; 3];
        s.read(base + 8, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(s.write(base + (1 << 20) - 1, &[0, 0]).is_err());
        assert!(s.read(base - 1, &mut b).is_err());
        assert!(s.write(usize::MAX - 1, &[0, 0]).is_err());
        assert_eq!(s.atomic(base + 16, 8, WordOp::Add(5)).unwrap(), 0);
        assert_eq!(
            s.atomic(base + 16, 8, WordOp::CompareSwap { current: 5, new: 7 })
                .unwrap(),
            5
        );
        assert_eq!(s.atomic(base + 16, 8, WordOp::Load).unwrap(), 7);
        assert_eq!(s.atomic(base + 20, 4, WordOp::Add(u64::MAX)).unwrap(), 0);
        assert_eq!(s.atomic(base + 20, 4, WordOp::Load).unwrap(), 0xffff_ffff);
        assert!(s.atomic(base + 3, 4, WordOp::Load).is_err());
        // The program's data: a static of this test binary.
        static mut X: [u64; 4] = [0; 4];
        let x = std::ptr::addr_of!(X) as usize;
        assert!(s.write(x, &[9]).is_err());
        let (lo, hi) = s.adopt_program_data().unwrap();
        assert!(lo <= x && x + 32 <= hi, "{lo:#x}..{hi:#x} vs {x:#x}");
        s.write(x, &7u64.to_le_bytes()).unwrap();
        assert_eq!(s.atomic(x, 8, WordOp::Load).unwrap(), 7);
        assert!(
            SymmetricSpace::reserve(base, 4096).is_err(),
            "never maps over a mapping"
        );
    }
}

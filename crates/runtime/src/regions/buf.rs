//! A region's bytes on this node: one fixed heap block whose address never changes while the
//! region is cached here (what `rgn_map` hands out), shared between the application (inside
//! its brackets) and the region core (which installs fetched copies and copies the block out for
//! recalls only when no bracket excludes it; see `squall-regions`). Owns the block and the
//! only `unsafe` of the region glue; must not decide when access is allowed.

use std::cell::UnsafeCell;

/// A fixed block of bytes accessed through raw pointers under the region protocol's rules.
pub struct RegionBuf {
    bytes: Box<[UnsafeCell<u8>]>,
}

// SAFETY: the block is plain bytes; who may read or write it when is decided by the region
// protocol's brackets (one writer or several readers), which the callers of `slice`,
// `slice_mut`, `install` and `read_into` hold.
unsafe impl Sync for RegionBuf {}
// SAFETY: as above; the block has no thread affinity.
unsafe impl Send for RegionBuf {}

impl RegionBuf {
    pub fn zeroed(len: usize) -> RegionBuf {
        RegionBuf {
            bytes: (0..len).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The block's address (stable for the buffer's life).
    pub fn as_ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.bytes.as_ptr())
    }

    /// Read access.
    ///
    /// # Safety
    /// The caller holds a read or write bracket of the region (nobody writes meanwhile).
    pub unsafe fn slice(&self) -> &[u8] {
        // SAFETY: the pointer and length describe the block; the caller's bracket excludes
        // writers for the borrow's life.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    /// Write access.
    ///
    /// # Safety
    /// The caller holds the write bracket of the region (nobody else reads or writes it).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self) -> &mut [u8] {
        // SAFETY: the pointer and length describe the block; the write bracket makes this the
        // only access for the borrow's life.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len()) }
    }

    /// Overwrite the block (the region core, installing a fetched copy: no bracket is open).
    pub fn install(&self, data: &[u8]) {
        let n = data.len().min(self.len());
        // SAFETY: the region core installs only while no bracket of this node is open (a
        // fetch completes before the bracket that asked for it starts), so nobody else
        // touches the block; `n` is within both.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr(), n) };
    }

    /// Copy the block out (the region core, for a recall or a flush: no write bracket is
    /// open, readers may be).
    pub fn read_into(&self, out: &mut [u8]) {
        let n = out.len().min(self.len());
        // SAFETY: no write bracket is open while the core copies the block out (recalls wait
        // for the writer's end_write), so the bytes do not change under the copy.
        out[..n].copy_from_slice(&unsafe { self.slice() }[..n]);
    }

    /// Append the block's first `len` bytes to `out` (as `read_into`, without zero-filling
    /// the destination first).
    pub fn append_to(&self, len: usize, out: &mut Vec<u8>) {
        let n = len.min(self.len());
        // SAFETY: as `read_into`: no write bracket is open while the core copies the block
        // out, so the bytes do not change under the copy.
        out.extend_from_slice(&unsafe { self.slice() }[..n]);
    }
}

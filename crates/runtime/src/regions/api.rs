//! The Rust API of CRL regions: `Node::region_create`, `region_map`, `region_delete`, and
//! the mapped `Region` with its bracket guards (`read()`: several readers, `write()`: one
//! writer; the bracket ends when the guard drops; the region is unmapped when the `Region`
//! drops). Also the unguarded bracket calls the C API (`crl.h`) is made of. Must not touch
//! the core's state except through `RegionService`.

use super::{RegionBuf, RegionId, RegionService};
use crate::error::Result;
use crate::Node;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

impl Node {
    fn regions(&self) -> &RegionService {
        self.region_service()
    }

    /// Create a region of `size` bytes (zero-filled) whose home is this node; any node can
    /// map it by its id. Local: no message.
    pub fn region_create(&self, size: usize) -> Result<RegionId> {
        Ok(self
            .regions()
            .with(self.endpoint(), |core, _| core.create(size)))
    }

    /// Map a region by id on this node (one message to its home the first time this node
    /// sees it). The mapping stays valid until the `Region` drops.
    pub fn region_map(&self, rid: RegionId) -> Result<Region> {
        let size = self
            .regions()
            .call(self.endpoint(), |core, w, bufs| core.map(w, rid, bufs))?;
        let buf = self
            .regions()
            .buf(rid)
            .ok_or(super::RegionError::Unknown(rid))?;
        debug_assert_eq!(buf.len() as u64, size);
        Ok(Region {
            node: self.clone(),
            rid,
            buf,
        })
    }

    /// Delete a region (no node may use it afterwards; copies cached elsewhere are dropped).
    pub fn region_delete(&self, rid: RegionId) -> Result<()> {
        Ok(self
            .regions()
            .with(self.endpoint(), |core, bufs| core.delete(rid, bufs))?)
    }

    /// This node's region statistics so far.
    pub fn region_stats(&self) -> super::RegionStats {
        self.regions().stats()
    }
}

/// A region mapped on this node. Unmapped on drop (the copy stays cached).
pub struct Region {
    node: Node,
    rid: RegionId,
    buf: Arc<RegionBuf>,
}

impl Region {
    pub fn rid(&self) -> RegionId {
        self.rid
    }

    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// The mapped bytes' address: stable while the region is mapped (what `rgn_map`
    /// returns). Read or write it only inside a bracket.
    pub fn as_ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }

    /// Start a read bracket: waits until this node holds a current copy and nobody in the
    /// job writes the region. Ends when the guard drops.
    pub fn read(&self) -> Result<ReadGuard<'_>> {
        self.start_read()?;
        Ok(ReadGuard { region: self })
    }

    /// Start a write bracket: waits until this node owns the region and nobody else in the
    /// job reads or writes it. Ends when the guard drops; the data stays here until another
    /// node asks for it.
    pub fn write(&self) -> Result<WriteGuard<'_>> {
        self.start_write()?;
        Ok(WriteGuard { region: self })
    }

    /// Unguarded `start_read` (the C API's `rgn_start_read`); pair it with [`Region::end_read`].
    pub fn start_read(&self) -> Result<()> {
        let rid = self.rid;
        self.node
            .regions()
            .call(self.node.endpoint(), |core, w, bufs| {
                core.start_read(w, rid, bufs)
            })
            .map(|_| ())
    }

    /// Unguarded `end_read`.
    ///
    /// # Safety
    /// No [`ReadGuard`] of this bracket exists (the guard ends its own bracket), and nothing
    /// reads the bytes through [`Region::as_ptr`] after this call.
    pub unsafe fn end_read(&self) -> Result<()> {
        self.end_read_inner()
    }

    fn end_read_inner(&self) -> Result<()> {
        let rid = self.rid;
        Ok(self
            .node
            .regions()
            .with(self.node.endpoint(), |core, bufs| core.end_read(rid, bufs))?)
    }

    /// Unguarded `start_write` (the C API's `rgn_start_write`); pair it with
    /// [`Region::end_write`].
    pub fn start_write(&self) -> Result<()> {
        let rid = self.rid;
        self.node
            .regions()
            .call(self.node.endpoint(), |core, w, bufs| {
                core.start_write(w, rid, bufs)
            })
            .map(|_| ())
    }

    /// Unguarded `end_write`.
    ///
    /// # Safety
    /// No [`WriteGuard`] of this bracket exists (the guard ends its own bracket), and nothing
    /// touches the bytes through [`Region::as_ptr`] after this call.
    pub unsafe fn end_write(&self) -> Result<()> {
        self.end_write_inner()
    }

    fn end_write_inner(&self) -> Result<()> {
        let rid = self.rid;
        Ok(self
            .node
            .regions()
            .with(self.node.endpoint(), |core, bufs| core.end_write(rid, bufs))?)
    }

    /// Send this node's copy home and drop it here (outside any bracket).
    pub fn flush(&self) -> Result<()> {
        let rid = self.rid;
        Ok(self
            .node
            .regions()
            .with(self.node.endpoint(), |core, bufs| core.flush(rid, bufs))?)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let rid = self.rid;
        // Unmapping a deleted region is not an error worth reporting from a destructor.
        let _ = self
            .node
            .regions()
            .with(self.node.endpoint(), |core, _| core.unmap(rid));
    }
}

/// A read bracket: the region's bytes, read-only.
pub struct ReadGuard<'a> {
    region: &'a Region,
}

impl Deref for ReadGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: this guard is an open read bracket: nobody writes the region meanwhile.
        unsafe { self.region.buf.slice() }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.region.end_read_inner() {
            eprintln!("squall: end of a read bracket: {e}");
        }
    }
}

/// A write bracket: the region's bytes, writable.
pub struct WriteGuard<'a> {
    region: &'a Region,
}

impl Deref for WriteGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: this guard is the open write bracket: nobody else touches the region.
        unsafe { self.region.buf.slice() }
    }
}

impl DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only borrow through the guard.
        unsafe { self.region.buf.slice_mut() }
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.region.end_write_inner() {
            eprintln!("squall: end of a write bracket: {e}");
        }
    }
}

//! Byte encoding helpers shared by the protocol message formats.
//!
//! Owns: little-endian writers and a bounds-checked reader that turns every short or bad input
//! into `ProtoError::Malformed` naming the sender. Must not touch: protocol state.

use crate::shared::home::HomeRef;
use crate::ProtoError;
use squall_core::{NodeId, PageId, PAGE_SIZE};

/// Appends little-endian fields to a message buffer.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn new(tag: u8) -> Self {
        Writer { buf: vec![tag] }
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn node(&mut self, n: NodeId) -> &mut Self {
        self.u16(n.0)
    }
    pub(crate) fn page(&mut self, p: PageId) -> &mut Self {
        self.u64(p.0)
    }
    /// A home and its migration epoch.
    pub(crate) fn home(&mut self, h: HomeRef) -> &mut Self {
        self.node(h.node).u32(h.epoch)
    }
    /// Length-prefixed (u32) byte string.
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
        self
    }
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Reads fields back; every failure is a typed `Malformed` error.
pub(crate) struct Reader<'a> {
    from: NodeId,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(from: NodeId, buf: &'a [u8]) -> Self {
        Reader { from, buf, pos: 0 }
    }
    pub(crate) fn err(&self, why: impl Into<String>) -> ProtoError {
        ProtoError::Malformed {
            from: self.from,
            why: why.into(),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                self.err(format!(
                    "message truncated: need {n} bytes at offset {}, have {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(format!("bad boolean byte {b}"))),
        }
    }
    pub(crate) fn u16(&mut self) -> Result<u16, ProtoError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, ProtoError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, ProtoError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn node(&mut self, nodes: u16) -> Result<NodeId, ProtoError> {
        let n = self.u16()?;
        if n >= nodes {
            return Err(self.err(format!("node {n} out of range (job has {nodes} nodes)")));
        }
        Ok(NodeId(n))
    }
    /// A home (a node of the job) and its migration epoch.
    pub(crate) fn home(&mut self, nodes: u16) -> Result<HomeRef, ProtoError> {
        Ok(HomeRef {
            node: self.node(nodes)?,
            epoch: self.u32()?,
        })
    }
    pub(crate) fn page(&mut self, total: u64) -> Result<PageId, ProtoError> {
        let p = self.u64()?;
        if p >= total {
            return Err(self.err(format!("page {p:#x} outside the global range")));
        }
        Ok(PageId(p))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A whole page of data.
    pub(crate) fn page_data(&mut self) -> Result<&'a [u8], ProtoError> {
        let b = self.bytes()?;
        if b.len() != PAGE_SIZE {
            return Err(self.err(format!("page data of {} bytes", b.len())));
        }
        Ok(b)
    }
    pub(crate) fn end(&self) -> Result<(), ProtoError> {
        if self.pos != self.buf.len() {
            return Err(self.err(format!("{} trailing bytes", self.buf.len() - self.pos)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::new(7);
        w.u16(3).u32(9).u64(11).bytes(b"abc");
        let v = w.finish();
        let mut r = Reader::new(NodeId(1), &v);
        assert_eq!(r.u8().ok(), Some(7));
        assert_eq!(r.node(4).ok(), Some(NodeId(3)));
        assert_eq!(r.u32().ok(), Some(9));
        assert_eq!(r.u64().ok(), Some(11));
        assert_eq!(r.bytes().ok(), Some(&b"abc"[..]));
        assert!(r.end().is_ok());
        let mut r = Reader::new(NodeId(1), &v[..5]);
        assert_eq!(r.u8().ok(), Some(7));
        assert_eq!(r.u16().ok(), Some(3));
        assert!(matches!(r.u32(), Err(ProtoError::Malformed { .. })));
    }
}

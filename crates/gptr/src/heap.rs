//! The symmetric heap's allocator: deterministic first-fit over offsets of the node's
//! symmetric arena. Every node runs the same sequence of collective allocations (as
//! `shmem_malloc` requires), so every node gets the same offsets; the runtime checks that it
//! did. Also answers "is `[off, off+len)` inside one live block", the check every incoming
//! remote operation passes before it touches memory.
//!
//! Owns offsets only; must not touch memory.
use std::collections::BTreeMap;

/// Allocation failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeapError {
    #[error("the symmetric heap ({size} bytes) has no free block of {want} bytes aligned to {align}; raise SHMEM_SYMMETRIC_SIZE")]
    Full { size: u64, want: u64, align: u64 },
    #[error("offset {0:#x} is not the start of a symmetric allocation")]
    NotAllocated(u64),
    #[error("alignment {0} is not a power of two")]
    BadAlign(u64),
}

/// First-fit allocator over `[0, size)`.
#[derive(Debug, Clone)]
pub struct SymHeap {
    size: u64,
    /// Free blocks: offset -> length (coalesced).
    free: BTreeMap<u64, u64>,
    /// Live blocks: offset -> length.
    used: BTreeMap<u64, u64>,
}

/// The smallest alignment of any block (what `malloc` gives).
pub const MIN_ALIGN: u64 = 16;

impl SymHeap {
    pub fn new(size: u64) -> Self {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        SymHeap {
            size,
            free,
            used: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes in live blocks.
    pub fn used_bytes(&self) -> u64 {
        self.used.values().sum()
    }

    /// Allocate `len` bytes (at least 1) aligned to `align`; the block's offset.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64, HeapError> {
        if !align.is_power_of_two() {
            return Err(HeapError::BadAlign(align));
        }
        let align = align.max(MIN_ALIGN);
        let want = len.max(1).div_ceil(MIN_ALIGN) * MIN_ALIGN;
        let found = self.free.iter().find_map(|(&off, &flen)| {
            let start = off.checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(want)?;
            (end <= off + flen).then_some((off, flen, start, end))
        });
        let Some((off, flen, start, end)) = found else {
            return Err(HeapError::Full {
                size: self.size,
                want,
                align,
            });
        };
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if end < off + flen {
            self.free.insert(end, off + flen - end);
        }
        self.used.insert(start, want);
        Ok(start)
    }

    /// Free the block at `off`.
    pub fn free(&mut self, off: u64) -> Result<(), HeapError> {
        let len = self.used.remove(&off).ok_or(HeapError::NotAllocated(off))?;
        let (mut start, mut end) = (off, off + len);
        if let Some((&p, &pl)) = self.free.range(..off).next_back() {
            if p + pl == start {
                self.free.remove(&p);
                start = p;
            }
        }
        if let Some(&nl) = self.free.get(&end) {
            self.free.remove(&end);
            end += nl;
        }
        self.free.insert(start, end - start);
        Ok(())
    }

    /// The length of the live block starting at `off`.
    pub fn block_len(&self, off: u64) -> Option<u64> {
        self.used.get(&off).copied()
    }

    /// Whether `[off, off+len)` lies inside one live block.
    pub fn contains(&self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        match self.used.range(..=off).next_back() {
            Some((&s, &l)) => end <= s + l && (off < s + l || len == 0),
            None => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn alloc_free_contains() {
        let mut h = SymHeap::new(1 << 20);
        let a = h.alloc(100, 16).unwrap();
        let b = h.alloc(8, 4096).unwrap();
        assert_eq!(b % 4096, 0);
        assert!(h.contains(a, 100));
        assert!(h.contains(a + 99, 1));
        assert!(!h.contains(a + 112, 1));
        assert!(!h.contains(a, 200));
        assert!(!h.contains(u64::MAX, 2));
        h.free(a).unwrap();
        assert!(!h.contains(a, 1));
        assert_eq!(h.free(a), Err(HeapError::NotAllocated(a)));
        h.free(b).unwrap();
        assert_eq!(h.free.len(), 1);
        assert!(matches!(h.alloc(2 << 20, 16), Err(HeapError::Full { .. })));
        assert!(matches!(h.alloc(1, 3), Err(HeapError::BadAlign(3))));
    }

    proptest! {
        /// Two heaps fed the same sequence give the same offsets; live blocks never overlap;
        /// freeing everything leaves one free block.
        #[test]
        fn deterministic_and_disjoint(ops in proptest::collection::vec((any::<bool>(), 1u64..5000, 0u32..4), 1..80)) {
            let (mut x, mut y) = (SymHeap::new(1 << 20), SymHeap::new(1 << 20));
            let mut live: Vec<u64> = Vec::new();
            for (alloc, len, al) in ops {
                if alloc || live.is_empty() {
                    let a = x.alloc(len, 16 << al);
                    prop_assert_eq!(a.clone(), y.alloc(len, 16 << al));
                    if let Ok(o) = a { live.push(o); }
                } else {
                    let o = live.remove((len as usize) % live.len());
                    x.free(o).unwrap();
                    y.free(o).unwrap();
                }
                let mut spans: Vec<(u64, u64)> = x.used.iter().map(|(&o, &l)| (o, l)).collect();
                spans.sort();
                for w in spans.windows(2) { prop_assert!(w[0].0 + w[0].1 <= w[1].0); }
            }
            for o in live { x.free(o).unwrap(); }
            prop_assert_eq!(x.free.len(), 1);
        }
    }
}

//! Sharing profile of one node's protocol core (`squall run --profile`): per page, the faults,
//! fetches, invalidations, home migrations this node saw and, at the page's home, the diffs
//! applied and which 64-byte blocks each writer changed, to tell false sharing (several
//! nodes writing disjoint blocks of one page between their synchronizations) from true
//! sharing (overlapping blocks).
//!
//! Owns: the counters and the per-page writer block masks. Must not touch: protocol
//! decisions (a core calls in here only when profiling is on: one branch on the hot paths).

use serde::{Deserialize, Serialize};
use squall_core::{NodeId, PageId, PAGE_SIZE};
use std::collections::HashMap;

/// Bytes per block of the writer masks: one page is 64 blocks, one `u64` per writer.
pub const BLOCK: usize = 64;
const _: () = assert!(PAGE_SIZE / BLOCK == 64);

/// What one node's core saw of one page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCounts {
    pub read_faults: u32,
    pub write_faults: u32,
    pub fetches: u32,
    pub invalidations: u32,
    /// Home side: diffs applied (other nodes' writes) and their changed bytes.
    pub diffs: u32,
    pub diff_bytes: u64,
    pub migrations: u32,
    /// Home side: a writer's interval met another node's interval on this page (since the
    /// writer's previous one) with disjoint blocks (false) or overlapping blocks (true).
    pub false_sharing: u32,
    pub true_sharing: u32,
    /// Nodes involved (bit n is node n; nodes past 63 share bit 63): writers seen at the
    /// home, and the pairs of the false and true sharing events.
    pub writers: u64,
    pub false_nodes: u64,
    pub true_nodes: u64,
}

impl PageCounts {
    /// Add another node's view of the same page.
    pub fn merge(&mut self, o: &PageCounts) {
        self.read_faults += o.read_faults;
        self.write_faults += o.write_faults;
        self.fetches += o.fetches;
        self.invalidations += o.invalidations;
        self.diffs += o.diffs;
        self.diff_bytes += o.diff_bytes;
        self.migrations += o.migrations;
        self.false_sharing += o.false_sharing;
        self.true_sharing += o.true_sharing;
        self.writers |= o.writers;
        self.false_nodes |= o.false_nodes;
        self.true_nodes |= o.true_nodes;
    }
}

/// The bit of `node` in the node masks.
pub fn node_bit(node: NodeId) -> u64 {
    1u64 << node.0.min(63)
}

/// The 64-byte blocks a diff's runs touch (bit b: bytes `64b..64b+63`); 0 for a malformed diff.
pub fn diff_blocks(diff: &[u8]) -> u64 {
    let mut mask = 0u64;
    let ok = crate::shared::diff::for_each_run(diff, |off, bytes| {
        if !bytes.is_empty() {
            mask |= blocks_of(off, bytes.len());
        }
    });
    if ok.is_some() {
        mask
    } else {
        0
    }
}

/// The blocks of bytes `off..off+len` (`len > 0`, inside the page).
fn blocks_of(off: usize, len: usize) -> u64 {
    let first = off / BLOCK;
    let last = (off + len - 1) / BLOCK;
    let n = last - first + 1;
    let run = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    run << first
}

/// The blocks where `old` and `new` (one page each) differ.
pub fn changed_blocks(old: &[u8], new: &[u8]) -> u64 {
    let mut mask = 0u64;
    for (b, (o, n)) in old.chunks(BLOCK).zip(new.chunks(BLOCK)).enumerate() {
        if o != n {
            mask |= 1u64 << b.min(63);
        }
    }
    mask
}

/// One writer's last interval on a page, as its home saw it.
#[derive(Debug, Clone, Copy)]
struct Write {
    node: NodeId,
    blocks: u64,
    seq: u32,
}

/// The per-page writer history at the home: the newest interval of each writer, numbered.
#[derive(Debug, Default)]
struct History {
    next: u32,
    last: Vec<Write>,
}

/// One node's profile so far, as sent to rank 0 at finalize.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharingProfile {
    /// Page number and what this node saw of it.
    pub pages: Vec<(u64, PageCounts)>,
}

/// The recorder a core owns while profiling is on.
#[derive(Debug, Default)]
pub struct Profiler {
    pages: HashMap<u64, PageCounts>,
    history: HashMap<u64, History>,
    /// Home pages written since their last release without a protocol snapshot (a home
    /// page's first write after a fetch): their contents at the write fault, kept up to date
    /// with the other writers' diffs, so the release can tell which blocks the home wrote.
    snapshots: HashMap<u64, Vec<u8>>,
}

impl Profiler {
    fn page(&mut self, page: PageId) -> &mut PageCounts {
        self.pages.entry(page.0).or_default()
    }

    /// An application fault of this node.
    pub fn fault(&mut self, page: PageId, write: bool) {
        let c = self.page(page);
        if write {
            c.write_faults += 1;
        } else {
            c.read_faults += 1;
        }
    }

    /// A copy of `page` requested from its home.
    pub fn fetch(&mut self, page: PageId) {
        self.page(page).fetches += 1;
    }

    /// This node's copy of `page` invalidated.
    pub fn invalidate(&mut self, page: PageId) {
        self.page(page).invalidations += 1;
    }

    /// The home of `page` moved (counted where it arrived).
    pub fn migrate(&mut self, page: PageId) {
        self.page(page).migrations += 1;
    }

    /// Home side: `writer` changed the `blocks` of `page` in one interval (`diff_bytes`:
    /// the bytes of its diff, 0 for the home's own writes). Compared with the other writers'
    /// intervals since `writer`'s previous one: disjoint blocks are false sharing,
    /// overlapping ones true sharing.
    pub fn home_write(&mut self, page: PageId, writer: NodeId, blocks: u64, diff_bytes: u64) {
        if blocks == 0 {
            return;
        }
        let h = self.history.entry(page.0).or_default();
        h.next += 1;
        let seq = h.next;
        let prev = h.last.iter().find(|w| w.node == writer).map(|w| w.seq);
        let (mut fals, mut tru, mut fnodes, mut tnodes) = (0u32, 0u32, 0u64, 0u64);
        for w in h.last.iter().filter(|w| w.node != writer) {
            if prev.is_some_and(|p| w.seq < p) {
                continue;
            }
            if w.blocks & blocks != 0 {
                tru += 1;
                tnodes |= node_bit(w.node) | node_bit(writer);
            } else {
                fals += 1;
                fnodes |= node_bit(w.node) | node_bit(writer);
            }
        }
        match h.last.iter_mut().find(|w| w.node == writer) {
            Some(w) => {
                w.blocks = blocks;
                w.seq = seq;
            }
            None => h.last.push(Write {
                node: writer,
                blocks,
                seq,
            }),
        }
        let c = self.page(page);
        if diff_bytes > 0 {
            c.diffs += 1;
            c.diff_bytes += diff_bytes;
        }
        c.writers |= node_bit(writer);
        c.false_sharing += fals;
        c.true_sharing += tru;
        c.false_nodes |= fnodes;
        c.true_nodes |= tnodes;
    }

    /// This node sent a diff of `page` with these `blocks` to the page's home: remembered
    /// (no event, no count: the home counts the diff) so that, should the home migrate here,
    /// the next writers' diffs are compared with this node's writes too (migratory data
    /// would otherwise show no sharing at all: the home's own writes are seen only through
    /// its snapshot).
    pub fn own_diff(&mut self, page: PageId, me: NodeId, blocks: u64) {
        if blocks == 0 {
            return;
        }
        let h = self.history.entry(page.0).or_default();
        h.next += 1;
        let seq = h.next;
        match h.last.iter_mut().find(|w| w.node == me) {
            Some(w) => {
                w.blocks = blocks;
                w.seq = seq;
            }
            None => h.last.push(Write {
                node: me,
                blocks,
                seq,
            }),
        }
    }

    /// Home side: a write fault on `page`, whose current contents are `data`, that the
    /// protocol keeps no snapshot of (see [`Self::home_release`]).
    pub fn home_write_fault(&mut self, page: PageId, data: Vec<u8>) {
        self.snapshots.entry(page.0).or_insert(data);
    }

    /// Home side: another writer's `diff` applied to `page` (the snapshot takes it, so it
    /// shows only the home's own writes).
    pub fn home_applied(&mut self, page: PageId, diff: &[u8]) {
        if let Some(s) = self.snapshots.get_mut(&page.0) {
            // Diffs the home applies were checked before.
            let _ = crate::shared::diff::apply_diff(s, diff);
        }
    }

    /// Home side: `page` released with contents `cur`: the blocks the home wrote since its
    /// write fault are its interval's writes ([`Self::home_write`]). Without them, data
    /// that moves between writers (a counter under a lock) whose home stays put would show
    /// only the other writers, and never the sharing.
    pub fn home_release(&mut self, page: PageId, me: NodeId, cur: &[u8]) {
        if let Some(snap) = self.snapshots.remove(&page.0) {
            self.home_write(page, me, changed_blocks(&snap, cur), 0);
        }
    }

    /// Whether a write-fault snapshot of `page` is held.
    pub fn has_snapshot(&self, page: PageId) -> bool {
        self.snapshots.contains_key(&page.0)
    }

    /// The profile so far (pages in order).
    pub fn snapshot(&self) -> SharingProfile {
        let mut pages: Vec<(u64, PageCounts)> =
            self.pages.iter().map(|(p, c)| (*p, c.clone())).collect();
        pages.sort_by_key(|(p, _)| *p);
        SharingProfile { pages }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_blocks_are_false_sharing_and_overlap_is_true_sharing() {
        let mut p = Profiler::default();
        let (a, b) = (NodeId(0), NodeId(1));
        // Two intervals each, disjoint blocks: every meeting is false sharing.
        p.home_write(PageId(7), a, 0b0011, 0);
        p.home_write(PageId(7), b, 0b1100, 100);
        p.home_write(PageId(7), a, 0b0011, 0);
        p.home_write(PageId(7), b, 0b1100, 100);
        // The same word: true sharing.
        p.home_write(PageId(9), a, 1 << 5, 8);
        p.home_write(PageId(9), b, 1 << 5, 8);
        // One writer alone: no sharing.
        p.home_write(PageId(11), b, 1, 8);
        p.home_write(PageId(11), b, 1, 8);
        let s = p.snapshot();
        let get = |n: u64| {
            s.pages
                .iter()
                .find(|(q, _)| *q == n)
                .map(|(_, c)| c.clone())
        };
        let f = get(7).expect("page 7");
        assert_eq!((f.false_sharing, f.true_sharing), (3, 0));
        assert_eq!(f.false_nodes, 0b11);
        assert_eq!((f.diffs, f.diff_bytes), (2, 200));
        let t = get(9).expect("page 9");
        assert_eq!((t.false_sharing, t.true_sharing), (0, 1));
        assert_eq!(t.true_nodes, 0b11);
        let one = get(11).expect("page 11");
        assert_eq!((one.false_sharing, one.true_sharing), (0, 0));
        assert_eq!(one.writers, 0b10);
    }

    #[test]
    fn block_masks_of_diffs_and_pages() {
        let twin = vec![0u8; PAGE_SIZE];
        let mut cur = twin.clone();
        cur[0] = 1;
        cur[63] = 1;
        cur[64 * 10 + 3] = 2;
        cur[4095] = 3;
        let d = crate::shared::diff::make_diff(&twin, &cur);
        let want = 1 | (1 << 10) | (1 << 63);
        assert_eq!(diff_blocks(&d), want);
        assert_eq!(changed_blocks(&twin, &cur), want);
        assert_eq!(blocks_of(60, 10), 0b11);
        assert_eq!(blocks_of(0, PAGE_SIZE), u64::MAX);
        assert_eq!(diff_blocks(&[1, 2, 3]), 0);
    }

    #[test]
    fn a_homes_write_fault_snapshot_shows_its_own_writes_only() {
        let mut p = Profiler::default();
        let (home, other, page) = (NodeId(0), NodeId(1), PageId(3));
        let base = vec![0u8; PAGE_SIZE];
        // The home faults; the other node's diff (block 20) arrives; the home writes block 5.
        p.home_write_fault(page, base.clone());
        let mut theirs = base.clone();
        theirs[20 * 64] = 1;
        let d = crate::shared::diff::make_diff(&base, &theirs);
        p.home_write(page, other, diff_blocks(&d), 8);
        p.home_applied(page, &d);
        let mut cur = theirs.clone();
        cur[5 * 64 + 1] = 7;
        assert!(p.has_snapshot(page));
        p.home_release(page, home, &cur);
        assert!(!p.has_snapshot(page));
        // Block 20 is not the home's: the two intervals are disjoint (false sharing).
        let c = p.snapshot().pages[0].1.clone();
        assert_eq!((c.false_sharing, c.true_sharing), (1, 0));
        assert_eq!(c.writers, 0b11);
        // The other node writes block 20 again (disjoint from the home's block 5: false
        // sharing), then the home writes block 20: true sharing.
        p.home_write(page, other, 1 << 20, 8);
        p.home_write_fault(page, cur.clone());
        let mut next = cur.clone();
        next[20 * 64 + 2] = 4;
        p.home_release(page, home, &next);
        // Released without a snapshot: nothing recorded.
        p.home_release(page, home, &next);
        let c = p.snapshot().pages[0].1.clone();
        assert_eq!((c.false_sharing, c.true_sharing), (2, 1));
    }
}

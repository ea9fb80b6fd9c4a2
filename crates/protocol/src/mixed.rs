//! Protocols chosen per allocation: one `hlrc` core and one `sc` core in the same node, each
//! owning the pages of its allocations.
//!
//! Which protocol a page follows is a static function of its address, so no node ever has to
//! ask: every node's arena is cut in two halves, the lower half for `hlrc` allocations and the
//! upper half for `sc` ones ([`ArenaSplit`]; the runtime keeps one heap per half). Pages beyond
//! the heap (adopted regions such as the program's globals) follow `hlrc`.
//!
//! Owns: routing faults, messages, allocations and atomics to the right core, and tagging each
//! message with the core it belongs to. Must not touch either core's state. Synchronization
//! hooks go to `hlrc`; `sc`'s hooks do nothing (every write is visible when it completes).
use crate::{Action, AtomicCall, Hlrc, ProtoError, ProtoStats, Protocol, ProtocolKind, Sc};
use squall_core::{AllocInfo, Consistency, HeapLayout, NodeId, PageId, PageMemory};

/// The static split of the global range between the two protocols: the layout of a job with
/// twice as many "half arenas" as nodes; half arena `2n` is node n's `hlrc` half, `2n + 1`
/// its `sc` half.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArenaSplit {
    halves: HeapLayout,
}

impl ArenaSplit {
    /// The split of `layout`'s range. `layout.total_pages` must be a multiple of
    /// `2 * layout.nodes`, so that both halves of a node lie in that node's arena.
    pub fn new(layout: HeapLayout) -> Self {
        debug_assert_eq!(layout.total_pages % (2 * u64::from(layout.nodes.max(1))), 0);
        ArenaSplit {
            halves: HeapLayout {
                nodes: layout.nodes.saturating_mul(2).max(2),
                total_pages: layout.total_pages,
            },
        }
    }

    /// The layout whose "node" `half(node, kind)` arena is that node's half for `kind`
    /// (give it to the heap of that half).
    pub fn halves(&self) -> HeapLayout {
        self.halves
    }

    /// The half-arena index of `node`'s half for `kind`.
    pub fn half(node: NodeId, kind: ProtocolKind) -> NodeId {
        NodeId(node.0 * 2 + u16::from(kind == ProtocolKind::Sc))
    }

    /// The protocol `page` follows.
    pub fn kind_of(&self, page: PageId) -> ProtocolKind {
        if page.0 >= self.halves.total_pages || self.halves.manager_of(page).0.is_multiple_of(2) {
            ProtocolKind::Hlrc
        } else {
            ProtocolKind::Sc
        }
    }
}

const TAG_HLRC: u8 = 0;
const TAG_SC: u8 = 1;

/// An `hlrc` and an `sc` core behind one [`Protocol`].
pub struct Mixed<M: PageMemory> {
    hlrc: Hlrc<M>,
    sc: Sc<M>,
    split: ArenaSplit,
}

impl<M: PageMemory + Clone> Mixed<M> {
    /// Both cores for node `me`, sharing the node's memory.
    pub fn new(mem: M, me: NodeId, layout: HeapLayout) -> Self {
        Mixed {
            hlrc: Hlrc::new(mem.clone(), me, layout),
            sc: Sc::new(mem, me, layout),
            split: ArenaSplit::new(layout),
        }
    }

    /// The `hlrc` core, for its policy settings (e.g. `Hlrc::set_barrier_fetch`).
    pub fn hlrc_mut(&mut self) -> &mut Hlrc<M> {
        &mut self.hlrc
    }
}

impl<M: PageMemory> Mixed<M> {
    fn core(&mut self, page: PageId) -> &mut dyn Protocol {
        match self.split.kind_of(page) {
            ProtocolKind::Hlrc => &mut self.hlrc,
            ProtocolKind::Sc => &mut self.sc,
        }
    }
}

impl<M: PageMemory> Consistency for Mixed<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        self.hlrc.acquire_info()
    }
    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        self.hlrc.grant_info(acquirer_info)
    }
    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.hlrc.apply_grant(grant_info)
    }
    fn begin_release(&mut self, token: u64) -> bool {
        self.hlrc.begin_release(token)
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        self.hlrc.barrier_info()
    }
    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        self.hlrc.apply_barrier(all)
    }
}

impl<M: PageMemory> Protocol for Mixed<M> {
    fn name(&self) -> &'static str {
        "hlrc+sc"
    }
    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        self.core(page).handle_fault(page, write)
    }
    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        match msg.split_first() {
            Some((&TAG_HLRC, rest)) => self.hlrc.handle_message(from, rest),
            Some((&TAG_SC, rest)) => self.sc.handle_message(from, rest),
            Some((t, _)) => Err(ProtoError::Malformed {
                from,
                why: format!("unknown protocol tag {t}"),
            }),
            None => Err(ProtoError::Malformed {
                from,
                why: "empty protocol message".into(),
            }),
        }
    }
    fn register_allocation(&mut self, alloc: AllocInfo) {
        self.core(alloc.first).register_allocation(alloc)
    }
    fn poll_action(&mut self) -> Option<Action> {
        let (tag, a) = match self.hlrc.poll_action() {
            Some(a) => (TAG_HLRC, a),
            None => (TAG_SC, self.sc.poll_action()?),
        };
        Some(match a {
            Action::Send { to, msg } => {
                let mut tagged = Vec::with_capacity(msg.len() + 1);
                tagged.push(tag);
                tagged.extend_from_slice(&msg);
                Action::Send { to, msg: tagged }
            }
            other => other,
        })
    }
    fn atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        self.core(page).atomic(page, offset, call, token)
    }
    fn observe_atomic(&mut self, page: PageId, offset: usize, value: &[u8]) {
        self.core(page).observe_atomic(page, offset, value)
    }
    fn stats(&self) -> ProtoStats {
        let mut s = self.hlrc.stats();
        s.merge(&self.sc.stats());
        s
    }
    fn set_ending(&mut self, ending: bool) {
        self.hlrc.set_ending(ending);
        self.sc.set_ending(ending);
    }
    fn set_profiling(&mut self) {
        self.hlrc.set_profiling();
    }
    fn sharing_profile(&self) -> Option<crate::SharingProfile> {
        self.hlrc.sharing_profile()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_alternate_by_node() {
        let split = ArenaSplit::new(HeapLayout {
            nodes: 2,
            total_pages: 400,
        });
        // node 0: pages 0..100 hlrc, 100..200 sc; node 1: 200..300 hlrc, 300..400 sc.
        assert_eq!(split.kind_of(PageId(0)), ProtocolKind::Hlrc);
        assert_eq!(split.kind_of(PageId(150)), ProtocolKind::Sc);
        assert_eq!(split.kind_of(PageId(250)), ProtocolKind::Hlrc);
        assert_eq!(split.kind_of(PageId(399)), ProtocolKind::Sc);
        assert_eq!(
            split.kind_of(PageId(400)),
            ProtocolKind::Hlrc,
            "adopted regions follow hlrc"
        );
        let h = split.halves();
        assert_eq!(
            h.arena_start(ArenaSplit::half(NodeId(1), ProtocolKind::Sc)),
            PageId(300)
        );
        // the real manager of a page is the node owning both halves
        let real = HeapLayout {
            nodes: 2,
            total_pages: 400,
        };
        assert_eq!(real.manager_of(PageId(150)), NodeId(0));
        assert_eq!(real.manager_of(PageId(300)), NodeId(1));
    }
}

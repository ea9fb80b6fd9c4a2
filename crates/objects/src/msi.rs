//! ENGINE_MSI (seed §3.2.2.3): modified/shared/invalid per segment per node, with the seed's
//! "distributed-directory-style" information kept at every node: the number of sharers of
//! the segment and the node holding it in `M` (the owner), updated by every upgrade.
//!
//! A node without the permission it needs asks the segment's manager (segments spread
//! round-robin, like OU owners), which broadcasts the upgrade to every node, one upgrade of a
//! segment at a time, with the number of holders that will answer. Every node updates its
//! sharer count and owner; holders answer the requester with their copy (an `M` holder
//! downgrades to `S` for a read upgrade; every holder goes to `I` for a write upgrade); nodes
//! in `I` stay silent. The requester waits for that many answers, checks that the copies
//! agree (the seed's dynamic check of invariant 1) and that the count matches its own
//! directory information, installs the copy, takes the permission and tells the manager.
//!
//! Why a manager orders a segment's upgrades: the seed broadcasts upgrades from the
//! requester, over an interconnect it calls unordered, and keeps the sharer count and owner
//! at each node to stay consistent. Squall's backbone is FIFO per pair but not ordered across
//! senders, so two concurrent upgrades of one segment could be seen in different orders by
//! different nodes; sending them through one node per segment gives every node the same order
//! (the counts then agree everywhere, which the requester checks).
//!
//! Reads in `S` or `M` and writes in `M` are local (no message). Writes follow Figure 7: the
//! upgrade handlers complete a flagged write before taking `M` away.
//!
//! Owns: the MSI segment states, the manager queues, the upgrade transaction. Must not touch:
//! OU or NC state.

use crate::codec::{Msg, Want};
use crate::core::ObjectsCore;
use crate::{Completion, ObjError, ObjectId, Step};
use squall_core::NodeId;
use std::collections::VecDeque;

/// A node's permission for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsiState {
    Modified,
    Shared,
    Invalid,
}

/// An upgrade this node waits for.
#[derive(Debug)]
pub(crate) struct Txn {
    want: Want,
    /// Holders that answer (from the manager's broadcast; unknown until it arrives).
    expected: Option<u16>,
    got: u16,
    data: Option<Vec<u8>>,
    /// Readers waiting: (waiter, element).
    readers: Vec<(u64, u64)>,
    /// Writers waiting (they step again).
    writers: Vec<u64>,
}

/// This node's view of one segment.
#[derive(Debug)]
pub(crate) struct MsiSeg {
    pub(crate) state: MsiState,
    /// Directory information: sharers (nodes in `S`), 0 while an owner holds `M`.
    pub(crate) sharers: u16,
    /// Directory information: the node in `M`, if any.
    pub(crate) owner: Option<NodeId>,
    pub(crate) txn: Option<Txn>,
}

impl MsiSeg {
    /// Every node starts with a valid (zero) copy in `S` (invariant 2: some node holds it);
    /// a one-node job starts in `M` (it is the only holder, no upgrade is ever needed).
    pub(crate) fn initial(nodes: u16) -> Self {
        if nodes == 1 {
            return MsiSeg {
                state: MsiState::Modified,
                sharers: 0,
                owner: Some(NodeId(0)),
                txn: None,
            };
        }
        MsiSeg {
            state: MsiState::Shared,
            sharers: nodes,
            owner: None,
            txn: None,
        }
    }
}

/// The manager's record of a segment: its exact holders and the queue of upgrades.
#[derive(Debug)]
pub(crate) struct MgrSeg {
    holders: Vec<bool>,
    busy: bool,
    queue: VecDeque<(NodeId, Want)>,
}

impl ObjectsCore {
    fn seg_mut(&mut self, id: ObjectId, seg: u64) -> Result<&mut crate::msi::MsiSeg, ObjError> {
        let o = self.obj_mut(id)?;
        o.msi
            .get_mut(seg as usize)
            .ok_or_else(|| ObjError::Incoherent(format!("no segment {seg} of {id:?}")))
    }

    /// This node's MSI state of segment `seg` of `id` (statistics, tests).
    pub fn msi_state(&self, id: ObjectId, seg: u64) -> Option<(MsiState, u16, Option<NodeId>)> {
        let s = self.objects.get(&id)?.msi.get(seg as usize)?;
        Some((s.state, s.sharers, s.owner))
    }

    /// Start an upgrade of `seg` to `want` unless one is in progress.
    fn ensure_txn(&mut self, id: ObjectId, seg: u64, want: Want) -> Result<(), ObjError> {
        let s = self.seg_mut(id, seg)?;
        if s.txn.is_some() {
            return Ok(());
        }
        s.txn = Some(Txn {
            want,
            expected: None,
            got: 0,
            data: None,
            readers: Vec::new(),
            writers: Vec::new(),
        });
        match want {
            Want::Shared => self.stats.msi_upgrades_s += 1,
            Want::Modified => self.stats.msi_upgrades_m += 1,
        }
        let mgr = self.home_of(id, seg);
        self.send(mgr, Msg::MsiGet { obj: id, seg, want }, true);
        Ok(())
    }

    pub(crate) fn msi_read(
        &mut self,
        id: ObjectId,
        idx: u64,
        waiter: u64,
    ) -> Result<Step<Vec<u8>>, ObjError> {
        let seg = self.obj(id)?.seg_of(idx);
        if self.seg_mut(id, seg)?.state != MsiState::Invalid {
            self.stats.reads_local += 1;
            let v = self.local_value(id, idx)?;
            self.note(waiter, id, idx, false, &v);
            return Ok(Step::Ready(v));
        }
        self.stats.reads_remote += 1;
        self.ensure_txn(id, seg, Want::Shared)?;
        if let Some(t) = self.seg_mut(id, seg)?.txn.as_mut() {
            t.readers.push((waiter, idx));
        }
        Ok(Step::Pending)
    }

    /// Figure 7 lines 3–7: `if (coherence != MSI_M) AcquireM(); if (g_flag) x = g_temp;`.
    pub(crate) fn msi_write_step(&mut self, waiter: u64) -> Result<Step<()>, ObjError> {
        let Some(p) = self.writes.get(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        let (id, idx, sent) = (p.obj, p.idx, p.sent);
        let seg = self.obj(id)?.seg_of(idx);
        if self.seg_mut(id, seg)?.state == MsiState::Modified {
            self.perform(waiter)?;
            self.writes.remove(&waiter);
            if !sent {
                self.stats.writes_local += 1;
            }
            return Ok(Step::Ready(()));
        }
        if !sent {
            self.stats.writes_remote += 1;
            if let Some(p) = self.writes.get_mut(&waiter) {
                p.sent = true;
            }
        }
        self.ensure_txn(id, seg, Want::Modified)?;
        if let Some(t) = self.seg_mut(id, seg)?.txn.as_mut() {
            t.writers.push(waiter);
        }
        Ok(Step::Pending)
    }

    /// Manager: queue an upgrade; start it if the segment is idle.
    pub(crate) fn msi_get(
        &mut self,
        from: NodeId,
        id: ObjectId,
        seg: u64,
        want: Want,
    ) -> Result<(), ObjError> {
        if self.home_of(id, seg) != self.me || seg >= self.obj(id)?.spec.segments() {
            return Err(ObjError::Malformed {
                from,
                why: format!("MSI upgrade of segment {seg} of {id:?}, not managed here"),
            });
        }
        let nodes = self.nodes;
        let m = self.obj_mut(id)?.mgr.entry(seg).or_insert_with(|| MgrSeg {
            holders: vec![true; usize::from(nodes)],
            busy: false,
            queue: VecDeque::new(),
        });
        m.queue.push_back((from, want));
        if !m.busy {
            self.msi_start_next(id, seg)?;
        }
        Ok(())
    }

    fn msi_start_next(&mut self, id: ObjectId, seg: u64) -> Result<(), ObjError> {
        let nodes = self.nodes;
        let o = self.obj_mut(id)?;
        let Some(m) = o.mgr.get_mut(&seg) else {
            return Ok(());
        };
        let Some((r, want)) = m.queue.pop_front() else {
            return Ok(());
        };
        let expected = m
            .holders
            .iter()
            .enumerate()
            .filter(|&(i, &h)| h && i != r.index())
            .count() as u16;
        match want {
            Want::Shared => m.holders[r.index()] = true,
            Want::Modified => {
                m.holders.iter_mut().for_each(|h| *h = false);
                m.holders[r.index()] = true;
            }
        }
        m.busy = true;
        for n in 0..nodes {
            let u = Msg::MsiUpgrade {
                obj: id,
                seg,
                want,
                requester: r,
                expected,
            };
            self.send(NodeId(n), u, true);
        }
        Ok(())
    }

    /// Manager: the requester has its permission; next upgrade.
    pub(crate) fn msi_done(
        &mut self,
        from: NodeId,
        id: ObjectId,
        seg: u64,
    ) -> Result<(), ObjError> {
        let o = self.obj_mut(id)?;
        match o.mgr.get_mut(&seg) {
            Some(m) if m.busy => m.busy = false,
            _ => {
                return Err(ObjError::Malformed {
                    from,
                    why: format!("MSI done for idle segment {seg} of {id:?}"),
                })
            }
        }
        self.msi_start_next(id, seg)
    }

    /// Every node: an upgrade, in the manager's order.
    pub(crate) fn msi_upgrade(
        &mut self,
        id: ObjectId,
        seg: u64,
        want: Want,
        requester: NodeId,
        expected: u16,
    ) -> Result<(), ObjError> {
        let me = self.me;
        let range = self.obj(id)?.seg_range(seg);
        let s = self.seg_mut(id, seg)?;
        // The holders the directory information here predicts (checked at the requester).
        let predicted = match (s.owner, want) {
            (Some(_), _) => 1,
            (None, Want::Shared) => s.sharers,
            (None, Want::Modified) => s
                .sharers
                .saturating_sub(u16::from(requester == me && s.state == MsiState::Shared)),
        };
        match want {
            Want::Shared => {
                if s.owner.take().is_some() {
                    s.sharers = 2;
                } else {
                    s.sharers = s.sharers.saturating_add(1);
                }
            }
            Want::Modified => {
                s.owner = Some(requester);
                s.sharers = 0;
            }
        }
        if requester == me {
            if predicted != expected {
                return Err(ObjError::Incoherent(format!(
                    "segment {seg} of {id:?}: the manager counts {expected} holders, the \
                     directory information here {predicted}"
                )));
            }
            let Some(t) = s.txn.as_mut() else {
                return Err(ObjError::Incoherent(format!(
                    "upgrade of segment {seg} of {id:?} this node did not ask for"
                )));
            };
            t.expected = Some(expected);
            return self.msi_maybe_complete(id, seg);
        }
        let state = s.state;
        let answer = match (want, state) {
            (_, MsiState::Invalid) => false,
            (Want::Shared, MsiState::Shared) => true,
            (Want::Shared, MsiState::Modified) => {
                self.complete_flagged(id, seg)?;
                self.seg_mut(id, seg)?.state = MsiState::Shared;
                self.stats.msi_downgrades += 1;
                true
            }
            (Want::Modified, MsiState::Modified) => {
                self.complete_flagged(id, seg)?;
                self.seg_mut(id, seg)?.state = MsiState::Invalid;
                self.stats.msi_invalidations += 1;
                true
            }
            (Want::Modified, MsiState::Shared) => {
                self.seg_mut(id, seg)?.state = MsiState::Invalid;
                self.stats.msi_invalidations += 1;
                true
            }
        };
        if answer {
            let data = self.obj(id)?.data[range].to_vec();
            self.stats.msi_data_sent += 1;
            self.send(requester, Msg::MsiData { obj: id, seg, data }, true);
        }
        Ok(())
    }

    /// The requester: one holder's copy.
    pub(crate) fn msi_data(
        &mut self,
        from: NodeId,
        id: ObjectId,
        seg: u64,
        data: Vec<u8>,
    ) -> Result<(), ObjError> {
        let want_len = self.obj(id)?.seg_range(seg).len();
        if data.len() != want_len {
            return Err(ObjError::Malformed {
                from,
                why: format!("segment copy of {} bytes, not {want_len}", data.len()),
            });
        }
        let s = self.seg_mut(id, seg)?;
        let Some(t) = s.txn.as_mut() else {
            return Err(ObjError::Incoherent(format!(
                "copy of segment {seg} of {id:?} from {from} with no upgrade waiting"
            )));
        };
        t.got += 1;
        let mut checked = false;
        match &t.data {
            Some(d) if *d != data => {
                return Err(ObjError::Incoherent(format!(
                    "segment {seg} of {id:?}: sharers' copies disagree ({from}'s differs)"
                )))
            }
            Some(_) => checked = true,
            None => t.data = Some(data),
        }
        if checked {
            self.stats.msi_value_checks += 1;
        }
        self.msi_maybe_complete(id, seg)
    }

    fn msi_maybe_complete(&mut self, id: ObjectId, seg: u64) -> Result<(), ObjError> {
        let range = self.obj(id)?.seg_range(seg);
        let s = self.seg_mut(id, seg)?;
        let Some(t) = s.txn.as_ref() else {
            return Ok(());
        };
        let Some(e) = t.expected else {
            return Ok(());
        };
        if t.got > e {
            return Err(ObjError::Incoherent(format!(
                "segment {seg} of {id:?}: {} answers for {e} holders",
                t.got
            )));
        }
        if t.got < e {
            return Ok(());
        }
        let Some(t) = s.txn.take() else {
            return Ok(());
        };
        if t.want == Want::Modified && e == 0 && s.state != MsiState::Shared {
            return Err(ObjError::Incoherent(format!(
                "segment {seg} of {id:?}: write upgrade from {:?} with no holder",
                s.state
            )));
        }
        if t.want == Want::Shared && e == 0 {
            return Err(ObjError::Incoherent(format!(
                "segment {seg} of {id:?}: no node holds a copy (invariant 2)"
            )));
        }
        s.state = match t.want {
            Want::Shared => MsiState::Shared,
            Want::Modified => MsiState::Modified,
        };
        if let Some(d) = t.data {
            self.obj_mut(id)?.data[range].copy_from_slice(&d);
        }
        let mgr = self.home_of(id, seg);
        self.send(mgr, Msg::MsiDone { obj: id, seg }, true);
        for (w, idx) in t.readers {
            let v = self.local_value(id, idx)?;
            self.note(w, id, idx, false, &v);
            self.complete(w, Completion::Value(v));
        }
        for w in t.writers {
            self.complete(w, Completion::Retry);
        }
        Ok(())
    }
}

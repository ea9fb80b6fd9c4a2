//! The object table and the entry points of the core: creation (collective or by one node,
//! with look-up by name), `read`, `write_begin`/`write_step`, incoming messages, the action
//! queue. Engine-specific work is in `ou.rs`, `nc.rs` and `msi.rs`.
//!
//! Owns: the objects' local copies, the pending writes (the seed's `g_temp`/`g_flag`, one per
//! calling thread), messages held for objects not created yet, self-addressed messages (handled
//! in place, never sent). Must not touch: sockets, clocks, threads.

use crate::codec::Msg;
use crate::msi::{MgrSeg, MsiSeg};
use crate::{
    Access, Action, Completion, Engine, ObjError, ObjectId, ObjectSpec, ObjectStats, Step,
};
use squall_core::NodeId;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Most messages held for objects this node has not created yet (beyond: an error).
const MAX_HELD: usize = 1 << 20;

/// One object's copy on this node.
pub(crate) struct Object {
    pub(crate) spec: ObjectSpec,
    /// The whole copy (every node keeps one, seed §3).
    pub(crate) data: Vec<u8>,
    pub(crate) seg_elems: u64,
    pub(crate) elem: usize,
    /// MSI: this node's state per segment (empty for other engines).
    pub(crate) msi: Vec<MsiSeg>,
    /// MSI: the segments this node manages that have seen an upgrade.
    pub(crate) mgr: HashMap<u64, MgrSeg>,
}

impl Object {
    pub(crate) fn seg_of(&self, idx: u64) -> u64 {
        idx / self.seg_elems
    }
    pub(crate) fn elem_range(&self, idx: u64) -> std::ops::Range<usize> {
        let a = idx as usize * self.elem;
        a..a + self.elem
    }
    pub(crate) fn seg_range(&self, seg: u64) -> std::ops::Range<usize> {
        let a = (seg * self.seg_elems) as usize * self.elem;
        let e = ((seg + 1) * self.seg_elems).min(self.spec.len) as usize * self.elem;
        a..e
    }
}

/// A write between `write_begin` and its last `write_step` (Figure 7's `g_temp`, `g_flag`).
#[derive(Debug)]
pub(crate) struct PendingWrite {
    pub(crate) obj: ObjectId,
    pub(crate) idx: u64,
    pub(crate) temp: Vec<u8>,
    /// Set by `write_begin`; cleared by whoever performs the write.
    pub(crate) flag: bool,
    /// OU: the write was sent to the owner. MSI: counted as remote once.
    pub(crate) sent: bool,
}

/// One node's shared-object core.
pub struct ObjectsCore {
    pub(crate) me: NodeId,
    pub(crate) nodes: u16,
    pub(crate) objects: HashMap<ObjectId, Object>,
    names: HashMap<String, ObjectId>,
    next_collective: u32,
    next_own: u32,
    held: HashMap<ObjectId, Vec<(NodeId, Msg)>>,
    held_count: usize,
    lookups: HashMap<String, Vec<u64>>,
    pub(crate) writes: BTreeMap<u64, PendingWrite>,
    /// OU reads sent to an owner, by request id (the waiter).
    pub(crate) ou_reads: HashMap<u64, ()>,
    local: VecDeque<Msg>,
    actions: VecDeque<Action>,
    pub(crate) stats: ObjectStats,
    trace: Option<Vec<Access>>,
}

impl ObjectsCore {
    pub fn new(me: NodeId, nodes: u16) -> Self {
        ObjectsCore {
            me,
            nodes: nodes.max(1),
            objects: HashMap::new(),
            names: HashMap::new(),
            next_collective: 1,
            next_own: 0,
            held: HashMap::new(),
            held_count: 0,
            lookups: HashMap::new(),
            writes: BTreeMap::new(),
            ou_reads: HashMap::new(),
            local: VecDeque::new(),
            actions: VecDeque::new(),
            stats: ObjectStats::default(),
            trace: None,
        }
    }

    pub fn rank(&self) -> NodeId {
        self.me
    }

    pub fn nodes(&self) -> u16 {
        self.nodes
    }

    pub fn stats(&self) -> ObjectStats {
        self.stats
    }

    /// Record every access performed (the points where reads and writes take effect).
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }

    /// The accesses performed since the last call (empty unless tracing).
    pub fn take_trace(&mut self) -> Vec<Access> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub(crate) fn note(&mut self, waiter: u64, obj: ObjectId, idx: u64, write: bool, value: &[u8]) {
        if let Some(t) = self.trace.as_mut() {
            t.push(Access {
                waiter,
                obj,
                idx,
                write,
                value: value.to_vec(),
            });
        }
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Create an object collectively: every node calls this with the same specification in
    /// the same order and gets the same id.
    pub fn create(&mut self, spec: ObjectSpec) -> Result<ObjectId, ObjError> {
        spec.check()?;
        let id = ObjectId(self.next_collective);
        if id.0 >= 0x8000_0000 {
            return Err(ObjError::BadSpec("too many collective objects".into()));
        }
        self.next_collective += 1;
        self.install(id, spec)?;
        Ok(id)
    }

    /// Create an object on this node alone, under `name`: every other node learns it from an
    /// announcement and finds it with [`ObjectsCore::lookup`].
    pub fn create_named(&mut self, name: &str, spec: ObjectSpec) -> Result<ObjectId, ObjError> {
        spec.check()?;
        if self.names.contains_key(name) {
            return Err(ObjError::NameTaken(name.into()));
        }
        if self.next_own > 0xffff {
            return Err(ObjError::BadSpec(
                "too many objects created by this node".into(),
            ));
        }
        let id = ObjectId(0x8000_0000 | (u32::from(self.me.0 & 0x7fff) << 16) | self.next_own);
        self.next_own += 1;
        self.install(id, spec)?;
        self.name(name, id);
        for n in 0..self.nodes {
            if NodeId(n) != self.me {
                let m = Msg::Announce {
                    id,
                    name: name.into(),
                    spec,
                };
                self.send(NodeId(n), m, true);
            }
        }
        Ok(id)
    }

    /// The object named `name`: `Ready(id)` if known here, else `Pending` and a
    /// `Completion::Found` for `waiter` when its announcement arrives.
    pub fn lookup(&mut self, name: &str, waiter: u64) -> Step<ObjectId> {
        match self.names.get(name) {
            Some(&id) => Step::Ready(id),
            None => {
                self.lookups.entry(name.into()).or_default().push(waiter);
                Step::Pending
            }
        }
    }

    /// Forget a parked look-up (its caller gave up waiting).
    pub fn cancel_lookup(&mut self, name: &str, waiter: u64) {
        if let Some(v) = self.lookups.get_mut(name) {
            v.retain(|&w| w != waiter);
        }
    }

    pub fn spec(&self, id: ObjectId) -> Option<ObjectSpec> {
        self.objects.get(&id).map(|o| o.spec)
    }

    fn name(&mut self, name: &str, id: ObjectId) {
        self.names.insert(name.into(), id);
        for w in self.lookups.remove(name).unwrap_or_default() {
            self.complete(w, Completion::Found(id));
        }
    }

    fn install(&mut self, id: ObjectId, spec: ObjectSpec) -> Result<(), ObjError> {
        if self.objects.contains_key(&id) {
            return Err(ObjError::BadSpec(format!("object {id:?} exists already")));
        }
        let segs = spec.segments();
        let msi = if spec.engine == Engine::Msi {
            (0..segs).map(|_| MsiSeg::initial(self.nodes)).collect()
        } else {
            Vec::new()
        };
        self.objects.insert(
            id,
            Object {
                spec,
                data: vec![0; spec.bytes()],
                seg_elems: spec.segment_elems(),
                elem: spec.kind.size(),
                msi,
                mgr: HashMap::new(),
            },
        );
        for (from, m) in self.held.remove(&id).unwrap_or_default() {
            self.held_count -= 1;
            self.handle(from, m)?;
        }
        self.drain()
    }

    pub(crate) fn obj(&self, id: ObjectId) -> Result<&Object, ObjError> {
        self.objects.get(&id).ok_or(ObjError::NoObject(id))
    }

    pub(crate) fn obj_mut(&mut self, id: ObjectId) -> Result<&mut Object, ObjError> {
        self.objects.get_mut(&id).ok_or(ObjError::NoObject(id))
    }

    fn check_idx(&self, id: ObjectId, idx: u64) -> Result<&Object, ObjError> {
        let o = self.obj(id)?;
        if idx >= o.spec.len {
            return Err(ObjError::OutOfRange {
                obj: id,
                idx,
                len: o.spec.len,
            });
        }
        Ok(o)
    }

    /// The segment owner (OU) or manager (MSI) of `seg`: segments spread round-robin.
    pub(crate) fn home_of(&self, id: ObjectId, seg: u64) -> NodeId {
        NodeId(((u64::from(id.0) + seg) % u64::from(self.nodes)) as u16)
    }

    /// Element `idx` of object `id` (`Read()`): `Ready(bytes)`, or `Pending` and a
    /// `Completion::Value` for `waiter` later.
    pub fn read(&mut self, id: ObjectId, idx: u64, waiter: u64) -> Result<Step<Vec<u8>>, ObjError> {
        let engine = self.check_idx(id, idx)?.spec.engine;
        let r = match engine {
            Engine::Nc => {
                self.stats.reads_local += 1;
                let v = self.local_value(id, idx)?;
                self.note(waiter, id, idx, false, &v);
                Ok(Step::Ready(v))
            }
            Engine::Ou => self.ou_read(id, idx, waiter),
            Engine::Msi => self.msi_read(id, idx, waiter),
        };
        self.drain()?;
        r
    }

    /// Begin `Write()` of element `idx` (Figure 7 lines 1–2: `g_temp = newValue; g_flag = 1`).
    /// The write happens in [`ObjectsCore::write_step`] or in a handler that runs meanwhile.
    pub fn write_begin(
        &mut self,
        id: ObjectId,
        idx: u64,
        value: &[u8],
        waiter: u64,
    ) -> Result<(), ObjError> {
        let o = self.check_idx(id, idx)?;
        if value.len() != o.elem {
            return Err(ObjError::BadValue {
                obj: id,
                got: value.len(),
                want: o.elem,
            });
        }
        if self.writes.contains_key(&waiter) || self.ou_reads.contains_key(&waiter) {
            return Err(ObjError::Busy(waiter));
        }
        self.writes.insert(
            waiter,
            PendingWrite {
                obj: id,
                idx,
                temp: value.to_vec(),
                flag: true,
                sent: false,
            },
        );
        Ok(())
    }

    /// Continue `waiter`'s write (Figure 7 lines 3–7): acquire permission if needed, write if
    /// the flag is still set. `Ready(())`: the write is done; `Pending`: wait for the
    /// completion (`Written`, or `Retry`: call again).
    pub fn write_step(&mut self, waiter: u64) -> Result<Step<()>, ObjError> {
        let Some(p) = self.writes.get(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        let (id, done) = (p.obj, !p.flag);
        if done {
            self.writes.remove(&waiter);
            return Ok(Step::Ready(()));
        }
        let r = match self.obj(id)?.spec.engine {
            Engine::Nc => self.nc_write(waiter),
            Engine::Ou => self.ou_write_step(waiter),
            Engine::Msi => self.msi_write_step(waiter),
        };
        self.drain()?;
        r
    }

    /// Perform `waiter`'s pending write into the local copy now and clear its flag.
    pub(crate) fn perform(&mut self, waiter: u64) -> Result<(), ObjError> {
        let Some(p) = self.writes.get_mut(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        p.flag = false;
        let (id, idx, temp) = (p.obj, p.idx, std::mem::take(&mut p.temp));
        let o = self.obj_mut(id)?;
        let r = o.elem_range(idx);
        o.data[r].copy_from_slice(&temp);
        self.note(waiter, id, idx, true, &temp);
        Ok(())
    }

    /// Figure 7's handler side: complete every flagged write of `seg` before this node's
    /// permission for it changes (or, under OU, before another node's access is served).
    pub(crate) fn complete_flagged(&mut self, id: ObjectId, seg: u64) -> Result<(), ObjError> {
        let seg_elems = self.obj(id)?.seg_elems;
        let ws: Vec<u64> = self
            .writes
            .iter()
            .filter(|(_, p)| p.flag && p.obj == id && p.idx / seg_elems == seg)
            .map(|(&w, _)| w)
            .collect();
        for w in ws {
            self.perform(w)?;
            self.stats.flag_completions += 1;
        }
        Ok(())
    }

    pub(crate) fn local_value(&self, id: ObjectId, idx: u64) -> Result<Vec<u8>, ObjError> {
        let o = self.obj(id)?;
        Ok(o.data[o.elem_range(idx)].to_vec())
    }

    /// This node's copy of element `idx`, whatever the engine's state (for tests and
    /// statistics; not a `Read()`).
    pub fn peek(&self, id: ObjectId, idx: u64) -> Result<Vec<u8>, ObjError> {
        self.check_idx(id, idx)?;
        self.local_value(id, idx)
    }

    /// An incoming message from `from`.
    pub fn on_message(&mut self, from: NodeId, payload: &[u8]) -> Result<(), ObjError> {
        if from.0 >= self.nodes {
            return Err(ObjError::Malformed {
                from,
                why: "sender outside the job".into(),
            });
        }
        let m = Msg::decode(from, payload)?;
        self.handle(from, m)?;
        self.drain()
    }

    fn handle(&mut self, from: NodeId, m: Msg) -> Result<(), ObjError> {
        if let Some(id) = m.object() {
            if !self.objects.contains_key(&id) {
                if self.held_count >= MAX_HELD {
                    return Err(ObjError::TooManyHeld);
                }
                self.held_count += 1;
                self.stats.held += 1;
                self.held.entry(id).or_default().push((from, m));
                return Ok(());
            }
        }
        match m {
            Msg::Announce { id, name, spec } => {
                if !self.objects.contains_key(&id) {
                    self.install(id, spec)?;
                }
                self.name(&name, id);
                Ok(())
            }
            Msg::OuReq {
                req,
                obj,
                idx,
                write,
            } => self.ou_serve(from, req, obj, idx, write),
            Msg::OuReply { req, value } => self.ou_reply(req, value),
            Msg::NcUpdate { obj, idx, value } => self.nc_apply(from, obj, idx, &value),
            Msg::MsiGet { obj, seg, want } => self.msi_get(from, obj, seg, want),
            Msg::MsiUpgrade {
                obj,
                seg,
                want,
                requester,
                expected,
            } => self.msi_upgrade(obj, seg, want, requester, expected),
            Msg::MsiData { obj, seg, data } => self.msi_data(from, obj, seg, data),
            Msg::MsiDone { obj, seg } => self.msi_done(from, obj, seg),
        }
    }

    /// Send `m` to `to`; a message to this node is handled in place (after the current step).
    pub(crate) fn send(&mut self, to: NodeId, m: Msg, reliable: bool) {
        if to == self.me {
            self.local.push_back(m);
        } else {
            self.actions.push_back(Action::Send {
                to,
                msg: m.encode(),
                reliable,
            });
        }
    }

    pub(crate) fn complete(&mut self, waiter: u64, how: Completion) {
        self.actions.push_back(Action::Complete { waiter, how });
    }

    fn drain(&mut self) -> Result<(), ObjError> {
        while let Some(m) = self.local.pop_front() {
            let me = self.me;
            self.handle(me, m)?;
        }
        Ok(())
    }
}

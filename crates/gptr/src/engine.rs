//! The one-sided engine of one node: issues gets, puts, stores and atomics, serves the ones
//! peers send, and keeps the bookkeeping that `sync()`/`quiet`, `store_sync` and
//! `all_store_sync` wait on.
//!
//! * get, put and atomic carry an operation id and are answered (data, ack, old value, or a
//!   refusal); they stay outstanding until then. `sync_ready(w)` is true when no operation
//!   issued before watermark `w` ([`Engine::watermark`]) is outstanding: that is `sync()` and
//!   `shmem_quiet`, for split-phase and blocking operations alike.
//! * a store is one-way: no per-store answer. The target counts the bytes that arrived
//!   (`take_stored`: Split-C's `store_sync(bytes)`) and, per sender and all-store-sync epoch,
//!   the stores; `all_store_sync` sends every peer the number of stores it sent it in the
//!   epoch; when every peer's count has arrived and matched, the node tells every peer that
//!   its stores are in (`StoresIn`), and the all-store-sync completes when every node said
//!   so: on return every store of the epoch, to any node, has arrived. A store the target
//!   refuses comes back as a refusal reported at the next sync.
//! * operations on this node's own memory are executed at once (and complete at once).
//!
//! Every incoming address goes through [`SymMemory`], which refuses what is not symmetric
//! memory; the refusal travels back to the issuer with the address. Owns this bookkeeping;
//! must not touch sockets, clocks, threads or raw memory.
use crate::atomic::{AtomicKind, Width};
use crate::msg::{decode, Kind, Msg};
use crate::GptrError;
use squall_core::NodeId;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// Bytes before a `GetReply`'s data (kind and operation id).
pub const GET_REPLY_HEADER: usize = 9;

/// The first [`GET_REPLY_HEADER`] bytes of the answer to get `op` (its data follow): what a
/// transport matches to read the data straight into the get's destination.
pub fn get_reply_head(op: OpId) -> [u8; GET_REPLY_HEADER] {
    let mut h = [0u8; GET_REPLY_HEADER];
    h[0] = Kind::GetReply as u8;
    h[1..].copy_from_slice(&op.0.to_le_bytes());
    h
}

/// An operation's id, unique per issuing node, increasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// The node's symmetric memory as the engine sees it: every call checks the address range
/// and refuses (with the reason) what is not symmetric memory of this node.
pub trait SymMemory {
    /// Whether `[addr, addr+len)` is symmetric memory of this node (the reason if not).
    fn check(&mut self, addr: u64, len: u64) -> Result<(), String>;
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), String>;
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String>;
    /// Append the `len` bytes at `addr` to `out` (a get's reply is built this way: memories
    /// that can copy straight from their mapping override it and save a zero-fill).
    fn read_append(&mut self, addr: u64, len: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let at = out.len();
        out.resize(at + len, 0);
        self.read(addr, &mut out[at..])
    }
    /// Execute `kind` on the `width`-byte word at `addr` (aligned); the old value.
    fn atomic(
        &mut self,
        addr: u64,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> Result<u64, String>;
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A get's bytes.
    Data(Vec<u8>),
    /// An atomic's old value.
    Value(u64),
    /// A put was applied.
    Done,
    /// The target refused it, or it could not be carried out.
    Failed(GptrError),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes to a peer (message type `GPTR`).
    Send { to: NodeId, bytes: Vec<u8> },
    /// An operation completed.
    Complete { op: OpId, outcome: Outcome },
    /// Something a store-sync waits for changed (stores arrived, a peer's count came).
    StoresChanged,
}

#[derive(Debug, Clone)]
struct Pending {
    target: NodeId,
    what: &'static str,
    addr: u64,
    len: u64,
}

/// Counters for statistics (and the bench's checks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub gets: u64,
    pub puts: u64,
    pub stores: u64,
    pub atomics: u64,
    pub local_ops: u64,
    pub bytes_got: u64,
    pub bytes_put: u64,
    pub bytes_stored: u64,
    pub served_gets: u64,
    pub served_puts: u64,
    pub served_stores: u64,
    pub served_atomics: u64,
    pub refused: u64,
    pub all_store_syncs: u64,
}

/// One node's engine.
#[derive(Debug)]
pub struct Engine {
    me: NodeId,
    nodes: u16,
    next_op: u64,
    pending: BTreeMap<u64, Pending>,
    /// Epoch of stores sent now (the number of all-store-syncs this node started).
    epoch: u64,
    /// Stores sent to each peer in `epoch`.
    sent: Vec<u64>,
    /// Stores received per (peer, their epoch).
    recv: HashMap<(u16, u64), u64>,
    /// Store counts announced per (peer, epoch).
    announced: HashMap<(u16, u64), u64>,
    /// Bytes that arrived by store per (sender, epoch), this node's own stores included:
    /// an all-store-sync counts them off `stored` when it completes the epoch.
    recv_bytes: HashMap<(u16, u64), u64>,
    /// Epochs this node started whose stores to it have not all arrived yet.
    open: BTreeSet<u64>,
    /// `StoresIn` notices per (peer, epoch).
    stores_in: HashSet<(u16, u64)>,
    /// Bytes that arrived by store and were not yet taken by `take_stored`.
    stored: u64,
    /// Refusals of one-way stores, reported at the next sync.
    errors: Vec<GptrError>,
    actions: VecDeque<Action>,
    stats: EngineStats,
}

impl Engine {
    pub fn new(me: NodeId, nodes: u16) -> Self {
        Engine {
            me,
            nodes,
            next_op: 1,
            pending: BTreeMap::new(),
            epoch: 0,
            sent: vec![0; usize::from(nodes)],
            recv: HashMap::new(),
            announced: HashMap::new(),
            recv_bytes: HashMap::new(),
            open: BTreeSet::new(),
            stores_in: HashSet::new(),
            stored: 0,
            errors: Vec::new(),
            actions: VecDeque::new(),
            stats: EngineStats::default(),
        }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The next action to carry out.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The id the next operation gets: `sync_ready(watermark())` later means every
    /// operation issued before this call completed.
    pub fn watermark(&self) -> u64 {
        self.next_op
    }

    /// No operation issued before `watermark` is outstanding.
    pub fn sync_ready(&self, watermark: u64) -> bool {
        self.pending.range(..watermark).next().is_none()
    }

    /// Operations outstanding.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Refusals of one-way stores since the last call.
    pub fn take_errors(&mut self) -> Vec<GptrError> {
        std::mem::take(&mut self.errors)
    }

    fn check_node(&self, n: NodeId) -> Result<(), GptrError> {
        if n.0 < self.nodes {
            Ok(())
        } else {
            Err(GptrError::NoSuchNode {
                node: n.0,
                nodes: self.nodes,
            })
        }
    }

    fn new_op(&mut self, target: NodeId, what: &'static str, addr: u64, len: u64) -> OpId {
        let op = self.next_op;
        self.next_op += 1;
        if target != self.me {
            self.pending.insert(
                op,
                Pending {
                    target,
                    what,
                    addr,
                    len,
                },
            );
        }
        OpId(op)
    }

    fn refusal(node: NodeId, what: &'static str, addr: u64, len: u64, why: String) -> GptrError {
        GptrError::Refused {
            node,
            what,
            addr,
            len,
            why,
        }
    }

    fn complete(&mut self, op: OpId, outcome: Outcome) {
        self.actions.push_back(Action::Complete { op, outcome });
    }

    /// Read `len` bytes at `addr` on `to`. Completes with `Outcome::Data`.
    pub fn get(
        &mut self,
        mem: &mut dyn SymMemory,
        to: NodeId,
        addr: u64,
        len: u64,
    ) -> Result<OpId, GptrError> {
        self.check_node(to)?;
        let op = self.new_op(to, "a get", addr, len);
        self.stats.gets += 1;
        self.stats.bytes_got += len;
        if to == self.me {
            self.stats.local_ops += 1;
            let outcome = match usize::try_from(len) {
                Ok(n) => {
                    let mut out = vec![0u8; n];
                    match mem.read(addr, &mut out) {
                        Ok(()) => Outcome::Data(out),
                        Err(why) => {
                            Outcome::Failed(Self::refusal(self.me, "a get", addr, len, why))
                        }
                    }
                }
                Err(_) => Outcome::Failed(GptrError::Invalid(format!("get of {len} bytes"))),
            };
            self.complete(op, outcome);
        } else {
            let bytes = Msg::Get {
                op: op.0,
                addr,
                len,
            }
            .encode();
            self.actions.push_back(Action::Send { to, bytes });
        }
        Ok(op)
    }

    /// Write `data` at `addr` on `to`. Completes with `Outcome::Done` when applied there.
    pub fn put(
        &mut self,
        mem: &mut dyn SymMemory,
        to: NodeId,
        addr: u64,
        data: &[u8],
    ) -> Result<OpId, GptrError> {
        self.check_node(to)?;
        let len = data.len() as u64;
        let op = self.new_op(to, "a put", addr, len);
        self.stats.puts += 1;
        self.stats.bytes_put += len;
        if to == self.me {
            self.stats.local_ops += 1;
            let outcome = match mem.write(addr, data) {
                Ok(()) => Outcome::Done,
                Err(why) => Outcome::Failed(Self::refusal(self.me, "a put", addr, len, why)),
            };
            self.complete(op, outcome);
        } else {
            let bytes = Msg::Put {
                op: op.0,
                addr,
                data,
            }
            .encode();
            self.actions.push_back(Action::Send { to, bytes });
        }
        Ok(op)
    }

    /// [`Engine::put`] whose message the driver sends itself, without copying `data` into it:
    /// for a remote `to`, returns the message's head ([`Msg::put_head`]); the driver sends the
    /// head followed by `data` to `to` (message type `GPTR`) after taking this call's actions.
    /// A put to oneself is applied here and returns no head.
    pub fn put_split(
        &mut self,
        mem: &mut dyn SymMemory,
        to: NodeId,
        addr: u64,
        data: &[u8],
    ) -> Result<(OpId, Option<Vec<u8>>), GptrError> {
        if to == self.me {
            return self.put(mem, to, addr, data).map(|op| (op, None));
        }
        self.check_node(to)?;
        let len = data.len() as u64;
        let op = self.new_op(to, "a put", addr, len);
        self.stats.puts += 1;
        self.stats.bytes_put += len;
        Ok((op, Some(Msg::put_head(op.0, addr))))
    }

    /// One-way store of `data` at `addr` on `to`: no answer; counted at the target.
    pub fn store(
        &mut self,
        mem: &mut dyn SymMemory,
        to: NodeId,
        addr: u64,
        data: &[u8],
    ) -> Result<(), GptrError> {
        self.check_node(to)?;
        let len = data.len() as u64;
        self.stats.stores += 1;
        self.stats.bytes_stored += len;
        if to == self.me {
            self.stats.local_ops += 1;
            mem.write(addr, data)
                .map_err(|why| Self::refusal(self.me, "a store", addr, len, why))?;
            self.stored += len;
            *self.recv_bytes.entry((self.me.0, self.epoch)).or_insert(0) += len;
            self.actions.push_back(Action::StoresChanged);
        } else {
            self.sent[usize::from(to.0)] += 1;
            let bytes = Msg::Store {
                epoch: self.epoch,
                addr,
                data,
            }
            .encode();
            self.actions.push_back(Action::Send { to, bytes });
        }
        Ok(())
    }

    /// Atomic `kind` on the `width`-byte word at `addr` on `to`. Completes with the old value.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        mem: &mut dyn SymMemory,
        to: NodeId,
        addr: u64,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> Result<OpId, GptrError> {
        self.check_node(to)?;
        if !addr.is_multiple_of(width.bytes()) {
            return Err(GptrError::Invalid(format!(
                "remote atomic at {addr:#x} on {to}: not aligned to its {} bytes",
                width.bytes()
            )));
        }
        let op = self.new_op(to, "an atomic", addr, width.bytes());
        self.stats.atomics += 1;
        if to == self.me {
            self.stats.local_ops += 1;
            let outcome = match mem.atomic(addr, width, kind, a, b) {
                Ok(v) => Outcome::Value(v),
                Err(why) => Outcome::Failed(Self::refusal(
                    self.me,
                    "an atomic",
                    addr,
                    width.bytes(),
                    why,
                )),
            };
            self.complete(op, outcome);
        } else {
            let bytes = Msg::Atomic {
                op: op.0,
                addr,
                width,
                kind,
                a,
                b,
            }
            .encode();
            self.actions.push_back(Action::Send { to, bytes });
        }
        Ok(op)
    }

    /// Split-C `store_sync(bytes)`: if at least `bytes` bytes arrived by store since they were
    /// last taken, take them and return true; otherwise false (wait for `StoresChanged`).
    pub fn take_stored(&mut self, bytes: u64) -> bool {
        if self.stored >= bytes {
            self.stored -= bytes;
            true
        } else {
            false
        }
    }

    /// Bytes arrived by store not yet taken.
    pub fn stored_bytes(&self) -> u64 {
        self.stored
    }

    /// Start an all-store-sync (collective, every node in the same order): tells every peer how
    /// many stores this node sent it since the last one. Returns the epoch to wait for with
    /// [`Engine::all_store_done`].
    pub fn all_store_sync(&mut self) -> u64 {
        let e = self.epoch;
        self.epoch += 1;
        self.stats.all_store_syncs += 1;
        self.open.insert(e);
        for p in 0..self.nodes {
            if p == self.me.0 {
                continue;
            }
            let count = std::mem::take(&mut self.sent[usize::from(p)]);
            let bytes = Msg::StoreDone { epoch: e, count }.encode();
            self.actions.push_back(Action::Send {
                to: NodeId(p),
                bytes,
            });
        }
        self.advance_epochs();
        e
    }

    /// Open epochs whose stores to this node all arrived: count their bytes off what
    /// `take_stored` sees (the all-store-sync completes those stores: a later
    /// `store_sync(bytes)` waits for stores after it) and tell every peer.
    fn advance_epochs(&mut self) {
        let ready: Vec<u64> = self
            .open
            .iter()
            .copied()
            .filter(|&e| {
                (0..self.nodes).filter(|&p| p != self.me.0).all(|p| {
                    self.announced
                        .get(&(p, e))
                        .is_some_and(|&c| self.recv.get(&(p, e)).copied().unwrap_or(0) == c)
                })
            })
            .collect();
        for e in ready {
            self.open.remove(&e);
            for p in 0..self.nodes {
                self.announced.remove(&(p, e));
                self.recv.remove(&(p, e));
                let b = self.recv_bytes.remove(&(p, e)).unwrap_or(0);
                self.stored = self.stored.saturating_sub(b);
            }
            for p in (0..self.nodes).filter(|&p| p != self.me.0) {
                let bytes = Msg::StoresIn { epoch: e }.encode();
                self.actions.push_back(Action::Send {
                    to: NodeId(p),
                    bytes,
                });
            }
            self.actions.push_back(Action::StoresChanged);
        }
    }

    /// All-store-sync `epoch` is complete: every node reached it and every store sent in it,
    /// to any node, arrived. Forgets the epoch once true.
    pub fn all_store_done(&mut self, epoch: u64) -> bool {
        if self.open.contains(&epoch) || epoch >= self.epoch {
            return false;
        }
        let ok = (0..self.nodes)
            .filter(|&p| p != self.me.0)
            .all(|p| self.stores_in.contains(&(p, epoch)));
        if ok {
            for p in 0..self.nodes {
                self.stores_in.remove(&(p, epoch));
            }
        }
        ok
    }

    /// A `GPTR` message from `from`.
    pub fn on_message(
        &mut self,
        mem: &mut dyn SymMemory,
        from: NodeId,
        bytes: &[u8],
    ) -> Result<(), GptrError> {
        self.check_node(from)?;
        match decode(from, bytes)? {
            Msg::Get { op, addr, len } => {
                self.stats.served_gets += 1;
                // Checked before allocating: a length never allocates more than the memory
                // the address range really covers.
                let checked = mem.check(addr, len).and_then(|()| {
                    usize::try_from(len).map_err(|_| format!("a get of {len} bytes"))
                });
                let reply = match checked {
                    Err(why) => self.refused_msg(op, addr, len, &why),
                    Ok(n) => {
                        let mut buf = Vec::with_capacity(GET_REPLY_HEADER + n);
                        buf.extend_from_slice(&get_reply_head(OpId(op)));
                        match mem.read_append(addr, n, &mut buf) {
                            Ok(()) => buf,
                            Err(why) => self.refused_msg(op, addr, len, &why),
                        }
                    }
                };
                self.actions.push_back(Action::Send {
                    to: from,
                    bytes: reply,
                });
            }
            Msg::Put { op, addr, data } => {
                self.stats.served_puts += 1;
                let reply = match mem.write(addr, data) {
                    Ok(()) => Msg::PutAck { op }.encode(),
                    Err(why) => self.refused_msg(op, addr, data.len() as u64, &why),
                };
                self.actions.push_back(Action::Send {
                    to: from,
                    bytes: reply,
                });
            }
            Msg::Store { epoch, addr, data } => {
                self.stats.served_stores += 1;
                *self.recv.entry((from.0, epoch)).or_insert(0) += 1;
                match mem.write(addr, data) {
                    Ok(()) => {
                        self.stored += data.len() as u64;
                        *self.recv_bytes.entry((from.0, epoch)).or_insert(0) += data.len() as u64;
                    }
                    Err(why) => {
                        let bytes = self.refused_msg(0, addr, data.len() as u64, &why);
                        self.actions.push_back(Action::Send { to: from, bytes });
                    }
                }
                self.advance_epochs();
                self.actions.push_back(Action::StoresChanged);
            }
            Msg::Atomic {
                op,
                addr,
                width,
                kind,
                a,
                b,
            } => {
                self.stats.served_atomics += 1;
                let reply = if !addr.is_multiple_of(width.bytes()) {
                    self.refused_msg(op, addr, width.bytes(), "not aligned to the word")
                } else {
                    match mem.atomic(addr, width, kind, a, b) {
                        Ok(old) => Msg::AtomicReply { op, old }.encode(),
                        Err(why) => self.refused_msg(op, addr, width.bytes(), &why),
                    }
                };
                self.actions.push_back(Action::Send {
                    to: from,
                    bytes: reply,
                });
            }
            Msg::StoreDone { epoch, count } => {
                self.announced.insert((from.0, epoch), count);
                self.advance_epochs();
                self.actions.push_back(Action::StoresChanged);
            }
            Msg::StoresIn { epoch } => {
                self.stores_in.insert((from.0, epoch));
                self.actions.push_back(Action::StoresChanged);
            }
            Msg::GetReply { op, data } => {
                self.finish(from, op, Outcome::Data(data.to_vec()))?;
            }
            Msg::PutAck { op } => self.finish(from, op, Outcome::Done)?,
            Msg::AtomicReply { op, old } => self.finish(from, op, Outcome::Value(old))?,
            Msg::Refused { op, addr, len, why } => {
                if op == 0 {
                    self.errors
                        .push(Self::refusal(from, "a store", addr, len, why.into()));
                    self.actions.push_back(Action::StoresChanged);
                } else {
                    let what = self.pending.get(&op).map_or("an operation", |p| p.what);
                    let e = Self::refusal(from, what, addr, len, why.into());
                    self.finish(from, op, Outcome::Failed(e))?;
                }
            }
        }
        Ok(())
    }

    fn refused_msg(&mut self, op: u64, addr: u64, len: u64, why: &str) -> Vec<u8> {
        self.stats.refused += 1;
        Msg::Refused { op, addr, len, why }.encode()
    }

    fn finish(&mut self, from: NodeId, op: u64, outcome: Outcome) -> Result<(), GptrError> {
        match self.pending.get(&op) {
            Some(p) if p.target == from => {
                self.pending.remove(&op);
                self.complete(OpId(op), outcome);
                Ok(())
            }
            _ => Err(GptrError::UnknownOp { from, op }),
        }
    }

    /// A get's answer without copying its data: if `bytes` is a `GetReply` for an outstanding
    /// get of `from`, the get completes (no `Complete` action) and its id is returned; the
    /// data are `bytes[GET_REPLY_HEADER..]`. `None` for any other message (pass it to
    /// [`Engine::on_message`]).
    pub fn take_get_reply(
        &mut self,
        from: NodeId,
        bytes: &[u8],
    ) -> Result<Option<OpId>, GptrError> {
        if bytes.first() != Some(&(Kind::GetReply as u8)) {
            return Ok(None);
        }
        let Msg::GetReply { op, .. } = decode(from, bytes)? else {
            return Ok(None);
        };
        match self.pending.get(&op) {
            Some(p) if p.target == from => {
                self.pending.remove(&op);
                Ok(Some(OpId(op)))
            }
            _ => Err(GptrError::UnknownOp { from, op }),
        }
    }

    /// What an outstanding operation is, for error texts (`None` if not outstanding).
    pub fn describe(&self, op: OpId) -> Option<String> {
        self.pending.get(&op.0).map(|p| {
            format!(
                "{} of {} bytes at {:#x} on {}",
                p.what, p.len, p.addr, p.target
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Memory of `[0x1000, 0x1000 + len)`.
    struct Mem(Vec<u8>);
    const BASE: u64 = 0x1000;
    impl Mem {
        fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, String> {
            let off = addr.checked_sub(BASE).ok_or("below")? as usize;
            let end = off.checked_add(len).ok_or("overflow")?;
            if end > self.0.len() {
                return Err(format!("{addr:#x} out of range"));
            }
            Ok(off..end)
        }
    }
    impl SymMemory for Mem {
        fn check(&mut self, addr: u64, len: u64) -> Result<(), String> {
            self.range(addr, len as usize).map(|_| ())
        }
        fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), String> {
            let r = self.range(addr, out.len())?;
            out.copy_from_slice(&self.0[r]);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
            let r = self.range(addr, data.len())?;
            self.0[r].copy_from_slice(data);
            Ok(())
        }
        fn atomic(
            &mut self,
            addr: u64,
            width: Width,
            kind: AtomicKind,
            a: u64,
            b: u64,
        ) -> Result<u64, String> {
            let r = self.range(addr, width.bytes() as usize)?;
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&self.0[r.clone()]);
            let old = u64::from_le_bytes(w);
            let new = kind.apply(width, old, a, b).to_le_bytes();
            let n = r.len();
            self.0[r].copy_from_slice(&new[..n]);
            Ok(old)
        }
    }

    /// Deliver every Send between two engines until quiet; collect completions.
    fn run(e: &mut [Engine; 2], m: &mut [Mem; 2]) -> Vec<(usize, OpId, Outcome)> {
        let mut done = Vec::new();
        loop {
            let mut moved = false;
            for i in 0..2 {
                while let Some(a) = e[i].poll_action() {
                    moved = true;
                    match a {
                        Action::Send { to, bytes } => {
                            let j = usize::from(to.0);
                            e[j].on_message(&mut m[j], NodeId(i as u16), &bytes)
                                .unwrap();
                        }
                        Action::Complete { op, outcome } => done.push((i, op, outcome)),
                        Action::StoresChanged => {}
                    }
                }
            }
            if !moved {
                return done;
            }
        }
    }

    #[test]
    fn get_put_atomic_store_refusal() {
        let mut e = [Engine::new(NodeId(0), 2), Engine::new(NodeId(1), 2)];
        let mut m = [Mem(vec![0; 64]), Mem(vec![0; 64])];
        let w = e[0].watermark();
        let p = e[0].put(&mut m[0], NodeId(1), BASE + 8, b"hello").unwrap();
        assert!(!e[0].sync_ready(w + 1));
        let done = run(&mut e, &mut m);
        assert_eq!(done, vec![(0, p, Outcome::Done)]);
        assert!(e[0].sync_ready(w + 1));
        let g = e[0].get(&mut m[0], NodeId(1), BASE + 8, 5).unwrap();
        assert_eq!(
            run(&mut e, &mut m),
            vec![(0, g, Outcome::Data(b"hello".to_vec()))]
        );
        let a = e[0]
            .atomic(
                &mut m[0],
                NodeId(1),
                BASE + 16,
                Width::W8,
                AtomicKind::Add,
                5,
                0,
            )
            .unwrap();
        assert_eq!(run(&mut e, &mut m), vec![(0, a, Outcome::Value(0))]);
        let bad = e[0]
            .put(&mut m[0], NodeId(1), BASE + 60, b"toolong")
            .unwrap();
        let d = run(&mut e, &mut m);
        assert!(
            matches!(&d[0], (0, o, Outcome::Failed(GptrError::Refused { node: NodeId(1), addr, .. })) if *o == bad && *addr == BASE + 60)
        );
        // Stores: counted at the target; all-store-sync matches the counts.
        e[0].store(&mut m[0], NodeId(1), BASE, b"ab").unwrap();
        e[0].store(&mut m[0], NodeId(1), BASE + 100, b"cd").unwrap();
        run(&mut e, &mut m);
        assert!(e[1].take_stored(2) && !e[1].take_stored(1));
        e[0].store(&mut m[0], NodeId(1), BASE + 4, b"ef").unwrap();
        let (x, y) = (e[0].all_store_sync(), e[1].all_store_sync());
        run(&mut e, &mut m);
        assert!(e[0].all_store_done(x) && e[1].all_store_done(y));
        // The all-store-sync completed "ef": store_sync does not count it again.
        assert!(!e[1].take_stored(1));
        let errs = e[0].take_errors();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(e[0]
            .on_message(&mut m[0], NodeId(1), &Msg::PutAck { op: 999 }.encode())
            .is_err());
        assert!(e[0].get(&mut m[0], NodeId(5), 0, 1).is_err());
    }
}

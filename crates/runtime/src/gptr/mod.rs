//! One-sided remote operations on this node: the driver of the `squall-gptr` engine (Split-C
//! global pointers and the OpenSHMEM layer both run on it).
//!
//! [`Gptr`] owns the node's symmetric memory (the arena of `squall_memory::SymmetricSpace`
//! plus, when every node has it at the same address, the program's data), the symmetric
//! allocator, and the engine behind one lock. Application threads issue operations under that
//! lock and send the engine's messages after releasing it; the `GPTR` handler feeds incoming
//! messages on the service thread. Completions wake waiters through one condition variable
//! (blocking operations, `sync`, `store_sync`, `all_store_sync`, `wait_until`).
//!
//! Ordering rules (docs/memory-model.md): operations to one target are applied in issue order
//! (the backbone is FIFO per pair); `sync()` completes every operation this node issued before
//! it; a Squall barrier ([`crate::Node::barrier`]) first completes this node's outstanding
//! operations; one-way stores are completed only by `store_sync` / `all_store_sync`.
//!
//! Owns this driver and its waits; must not touch the page protocols or the service lock.
mod collective;
mod pointer;

pub use collective::{ActiveSet, ReduceOp};
pub use pointer::{Elem, GlobalPtr, Pending, SpreadArray};

use crate::error::{Result, SquallError};
use crate::msg;
use crate::node::Node;
use parking_lot::{Condvar, Mutex};
use squall_core::NodeId;
use squall_gptr::{
    get_reply_head, Action, AtomicKind, Engine, GptrError, OpId, Outcome, SymHeap, SymMemory,
    Width, GET_REPLY_HEADER,
};
use squall_memory::{SymmetricSpace, WordOp, SYMMETRIC_BASE};
use squall_net::Bytes;
use squall_net::Endpoint;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Environment variable of the arena's size (OpenSHMEM's name; `k`, `m`, `g` suffixes).
pub const SYMMETRIC_SIZE_VAR: &str = squall_core::env::SHMEM_SYMMETRIC_SIZE;
/// Default arena size: address space only until touched.
pub const DEFAULT_SYMMETRIC_SIZE: usize = 1 << 30;
/// A blocking get of at least this many bytes lends its destination to the transport, which
/// reads the reply's data straight into it (tcp: [`Endpoint::receive_into`]); smaller ones
/// copy the few bytes (lending costs two turns of the endpoint's lock).
const LAND_MIN: usize = 16 * 1024;

static GPTR: OnceLock<Arc<Gptr>> = OnceLock::new();

/// Where a split-phase get's bytes go (run on the thread that handles the reply).
pub type Deliver = Box<dyn FnOnce(&[u8]) + Send>;

/// Where a completion goes.
enum Sink {
    /// A thread waits for it in `done`.
    Wait,
    /// Split-phase: nothing to deliver (put, non-fetching atomic); a failure is kept for sync.
    Discard,
    /// Split-phase get: the bytes go to this callback (run on the thread that handles the
    /// completion, under no lock).
    Deliver(Deliver),
}

/// A completed operation a thread waits for: the engine's outcome, or a get's reply as it
/// arrived (its data after `GET_REPLY_HEADER`, not copied until the waiter takes it).
enum Done {
    Outcome(Outcome),
    Reply(Bytes),
    /// A get's reply whose this many data bytes the transport read straight into the
    /// destination the waiter lent ([`Endpoint::receive_into`]).
    Placed(usize),
}

struct State {
    engine: Engine,
    heap: SymHeap,
    sinks: HashMap<u64, Sink>,
    done: HashMap<u64, Done>,
    /// Failures of split-phase operations and refused stores, reported by the next sync.
    failures: Vec<GptrError>,
    /// Split-phase get replies being copied into their destinations outside the lock: the
    /// engine counts such a get complete when the reply is taken, so `sync` also waits for
    /// this to drop to zero (found by apps/mm/mm_splitc.c: a sync returned while the copy of
    /// the last reply was still running, and the program read the previous block).
    delivering: usize,
    /// Blocking gets whose data the transport read straight into their destination.
    landed: u64,
}

/// The node's symmetric memory as the engine checks it: a live allocation of the arena, or
/// the program's data when it is symmetric.
struct Mem<'a> {
    space: &'a SymmetricSpace,
    heap: &'a SymHeap,
    data_ok: bool,
    me: NodeId,
}

impl Mem<'_> {
    fn checked(&self, addr: u64, len: u64) -> std::result::Result<usize, String> {
        let a = usize::try_from(addr).map_err(|_| format!("address {addr:#x}"))?;
        let n = usize::try_from(len).map_err(|_| format!("length {len}"))?;
        if self.space.in_arena(a, n) {
            let off = (a - self.space.base()) as u64;
            if self.heap.contains(off, len) {
                return Ok(a);
            }
            return Err(format!(
                "{} has no live symmetric allocation covering {len} bytes at {addr:#x}",
                self.me
            ));
        }
        if self.space.in_data(a, n) {
            if self.data_ok {
                return Ok(a);
            }
            return Err(format!(
                "{addr:#x} is in the program's data, which is not at the same address on every \
                 node (link with -no-pie, as `pkg-config --libs squall-shmem` does)"
            ));
        }
        Err(format!(
            "{addr:#x} (+{len}) is outside {}'s symmetric arena {:#x}..{:#x}{}",
            self.me,
            self.space.base(),
            self.space.base() + self.space.size(),
            match self.space.program_data() {
                Some((s, e)) => format!(" and the program's data {s:#x}..{e:#x}"),
                None => String::new(),
            }
        ))
    }
}

fn word_op(kind: AtomicKind, a: u64, b: u64) -> WordOp {
    match kind {
        AtomicKind::Fetch => WordOp::Load,
        AtomicKind::Set => WordOp::Store(a),
        AtomicKind::Add => WordOp::Add(a),
        AtomicKind::Swap => WordOp::Swap(a),
        AtomicKind::CompareSwap => WordOp::CompareSwap { current: b, new: a },
        AtomicKind::And => WordOp::And(a),
        AtomicKind::Or => WordOp::Or(a),
        AtomicKind::Xor => WordOp::Xor(a),
    }
}

impl SymMemory for Mem<'_> {
    fn check(&mut self, addr: u64, len: u64) -> std::result::Result<(), String> {
        self.checked(addr, len).map(drop)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> std::result::Result<(), String> {
        let a = self.checked(addr, out.len() as u64)?;
        self.space.read(a, out).map_err(|e| e.to_string())
    }
    fn read_append(
        &mut self,
        addr: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let a = self.checked(addr, len as u64)?;
        self.space
            .read_append(a, len, out)
            .map_err(|e| e.to_string())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> std::result::Result<(), String> {
        let a = self.checked(addr, data.len() as u64)?;
        self.space.write(a, data).map_err(|e| e.to_string())
    }
    fn atomic(
        &mut self,
        addr: u64,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> std::result::Result<u64, String> {
        let at = self.checked(addr, width.bytes())?;
        self.space
            .atomic(at, width.bytes() as usize, word_op(kind, a, b))
            .map_err(|e| e.to_string())
    }
}

/// Comparison of [`Gptr::wait_until`] (OpenSHMEM's `SHMEM_CMP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    /// `value cmp operand` on signed words of `width`.
    pub fn holds(self, width: Width, value: u64, operand: u64) -> bool {
        let (v, o) = match width {
            Width::W4 => (
                i64::from(value as u32 as i32),
                i64::from(operand as u32 as i32),
            ),
            Width::W8 => (value as i64, operand as i64),
        };
        match self {
            Cmp::Eq => v == o,
            Cmp::Ne => v != o,
            Cmp::Gt => v > o,
            Cmp::Ge => v >= o,
            Cmp::Lt => v < o,
            Cmp::Le => v <= o,
        }
    }
}

/// One-sided operations of this node (see the module doc). One per process.
pub struct Gptr {
    node: Node,
    ep: Endpoint,
    space: SymmetricSpace,
    /// The program's data is at the same address here as on node 0 (set by
    /// [`Gptr::check_program_data`]).
    data_ok: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
}

impl Node {
    /// This node's one-sided operations, started on first use (the arena is mapped then and
    /// the `GPTR` handler registered; messages that arrive earlier are held until then). Every
    /// node must call it (directly or through `shmem_init`) before others target it.
    pub fn gptr(&self) -> Result<&'static Gptr> {
        if let Some(g) = GPTR.get() {
            return Ok(g);
        }
        let g = Gptr::start(self)?;
        Ok(GPTR.get_or_init(|| g))
    }
}

/// The started [`Gptr`], if any (without starting it).
pub(crate) fn started() -> Option<&'static Gptr> {
    GPTR.get().map(|g| &**g)
}

/// Before a Squall barrier: complete this node's outstanding one-sided operations.
pub(crate) fn quiet_before_barrier() -> Result<()> {
    match started() {
        Some(g) if g.has_outstanding() => g.sync(),
        _ => Ok(()),
    }
}

fn gerr(e: GptrError) -> SquallError {
    SquallError::Gptr(e)
}

impl Gptr {
    fn start(node: &Node) -> Result<Arc<Gptr>> {
        let size = match std::env::var(SYMMETRIC_SIZE_VAR) {
            Ok(v) => squall_memory::parse_size(&v).ok_or_else(|| {
                SquallError::Config(format!(
                    "bad value {v:?} for {SYMMETRIC_SIZE_VAR}: expected a size such as 512M or 2G"
                ))
            })?,
            Err(_) => DEFAULT_SYMMETRIC_SIZE,
        };
        let mut space = SymmetricSpace::reserve(SYMMETRIC_BASE, size)?;
        space.adopt_program_data();
        let me = node.rank();
        let g = Arc::new(Gptr {
            node: node.clone(),
            ep: node.endpoint().clone(),
            data_ok: AtomicBool::new(false),
            state: Mutex::new(State {
                engine: Engine::new(me, node.size()),
                heap: SymHeap::new(space.size() as u64),
                sinks: HashMap::new(),
                done: HashMap::new(),
                failures: Vec::new(),
                delivering: 0,
                landed: 0,
            }),
            space,
            cv: Condvar::new(),
        });
        let h = g.clone();
        node.endpoint().register(msg::GPTR, move |ep, m| {
            let placed = m.placed();
            if let Err(e) = h.on_message(m.src, m.payload, placed) {
                eprintln!("squall: {}: {e}", ep.rank());
            }
        });
        Ok(g)
    }

    /// End the whole job because of `what` (a fatal error in a call that cannot return one,
    /// such as OpenSHMEM's `void` functions): every node prints this node and the cause.
    pub fn fail_job(&self, what: &str) -> ! {
        crate::failure::end_job(Some(&self.ep), self.rank(), what)
    }

    /// The node this runs on.
    pub fn node(&self) -> &Node {
        &self.node
    }

    pub fn rank(&self) -> NodeId {
        self.node.rank()
    }

    pub fn size(&self) -> u16 {
        self.node.size()
    }

    /// The arena `(base, size)`: the same on every node.
    pub fn arena(&self) -> (usize, usize) {
        (self.space.base(), self.space.size())
    }

    /// Whether the program's globals are reachable by one-sided operations (the program's data
    /// is at the same address on every node). Checked by [`Gptr::check_program_data`].
    pub fn program_data(&self) -> Option<(usize, usize)> {
        self.space
            .program_data()
            .filter(|_| self.data_ok.load(Ordering::Relaxed))
    }

    /// The engine's view of this node's symmetric memory, over `heap`.
    fn mem<'a>(&'a self, heap: &'a SymHeap) -> Mem<'a> {
        Mem {
            space: &self.space,
            heap,
            data_ok: self.data_ok.load(Ordering::Relaxed),
            me: self.node.rank(),
        }
    }

    fn has_outstanding(&self) -> bool {
        let st = self.state.lock();
        st.engine.outstanding() > 0 || st.delivering > 0
    }

    /// Run `f` on the engine under the lock, take its actions, then send and deliver them
    /// outside the lock.
    fn with_engine<R>(
        &self,
        f: impl FnOnce(&mut Engine, &mut Mem<'_>) -> std::result::Result<R, GptrError>,
        sink: impl FnOnce(&R) -> Option<(u64, Sink)>,
    ) -> Result<R> {
        let mut st = self.state.lock();
        let State { engine, heap, .. } = &mut *st;
        let mut mem = self.mem(heap);
        let r = f(engine, &mut mem).map_err(gerr)?;
        if let Some((op, s)) = sink(&r) {
            st.sinks.insert(op, s);
        }
        self.finish(st)?;
        Ok(r)
    }

    /// Carry out the engine's actions: completions under the lock, then (after releasing it)
    /// deliveries and sends.
    fn finish(&self, st: parking_lot::MutexGuard<'_, State>) -> Result<()> {
        let sends = self.finish_unsent(st);
        self.send_all(sends)
    }

    fn send_all(&self, sends: Vec<(NodeId, Vec<u8>)>) -> Result<()> {
        for (to, bytes) in sends {
            self.ep.send(to, msg::GPTR, bytes)?;
        }
        Ok(())
    }

    /// [`Gptr::finish`] without the sends: returned to be sent by the caller.
    fn finish_unsent(&self, mut st: parking_lot::MutexGuard<'_, State>) -> Vec<(NodeId, Vec<u8>)> {
        let mut sends = Vec::new();
        let mut deliver = Vec::new();
        let mut wake = false;
        while let Some(a) = st.engine.poll_action() {
            match a {
                Action::Send { to, bytes } => sends.push((to, bytes)),
                Action::StoresChanged => wake = true,
                Action::Complete { op, outcome } => {
                    wake = true;
                    match (st.sinks.remove(&op.0), outcome) {
                        (Some(Sink::Wait), o) => {
                            st.done.insert(op.0, Done::Outcome(o));
                        }
                        (_, Outcome::Failed(e)) => st.failures.push(e),
                        (Some(Sink::Deliver(f)), Outcome::Data(d)) => deliver.push((f, d)),
                        _ => {}
                    }
                }
            }
        }
        let errs = st.engine.take_errors();
        st.failures.extend(errs);
        st.delivering += deliver.len();
        drop(st);
        let delivered = deliver.len();
        for (f, d) in deliver {
            f(&d);
        }
        if delivered > 0 {
            self.state.lock().delivering -= delivered;
            wake = true;
        }
        if wake {
            self.cv.notify_all();
        }
        sends
    }

    /// A `GPTR` message; `placed`: bytes of it after `payload` the transport read into a
    /// destination lent by a blocking get ([`Incoming::placed`](squall_net::Incoming::placed)).
    fn on_message(&self, from: NodeId, payload: Bytes, placed: usize) -> Result<()> {
        let mut st = self.state.lock();
        // A get's data go to their waiter or sink without a copy into an outcome.
        if let Some(op) = st.engine.take_get_reply(from, &payload).map_err(gerr)? {
            match st.sinks.remove(&op.0) {
                Some(Sink::Wait) if placed > 0 => {
                    st.landed += 1;
                    st.done.insert(op.0, Done::Placed(placed));
                    drop(st);
                }
                _ if placed > 0 => {
                    drop(st);
                    return Err(SquallError::Remote(format!(
                        "a get reply from {from} was placed into a buffer nobody waits on"
                    )));
                }
                Some(Sink::Deliver(f)) => {
                    st.delivering += 1;
                    drop(st);
                    f(&payload[GET_REPLY_HEADER..]);
                    self.state.lock().delivering -= 1;
                }
                Some(Sink::Wait) => {
                    st.done.insert(op.0, Done::Reply(payload));
                    drop(st);
                }
                _ => drop(st),
            }
            self.cv.notify_all();
            return Ok(());
        }
        let State { engine, heap, .. } = &mut *st;
        let mut mem = self.mem(heap);
        let r = engine.on_message(&mut mem, from, &payload);
        self.finish(st)?;
        // Served writes change memory someone may wait on (`wait_until`).
        self.cv.notify_all();
        r.map_err(gerr)
    }

    /// Wait until `ready` holds on the state (checked under the lock, after every
    /// completion and at least every 5 ms: local writes by other threads wake nobody).
    fn wait_for(&self, mut ready: impl FnMut(&mut State) -> bool) {
        let mut st = self.state.lock();
        while !ready(&mut st) {
            self.cv.wait_for(&mut st, Duration::from_millis(5));
        }
    }

    fn wait_done(&self, op: OpId) -> Result<Done> {
        let mut out = self.spin_for_done(op);
        if out.is_none() {
            self.wait_for(|st| {
                out = st.done.remove(&op.0);
                out.is_some()
            });
        }
        match out {
            Some(Done::Outcome(Outcome::Failed(e))) => Err(gerr(e)),
            Some(d) => Ok(d),
            None => Err(SquallError::ShuttingDown),
        }
    }

    /// For the endpoint's reply spin (`SQUALL_REPLY_SPIN_US`) the waiting thread, idle anyway,
    /// polls the network itself ([`Endpoint::poll_once`]) and handles the one-sided messages it
    /// reads as the service thread would (in order with it), so the answer it waits for costs
    /// no thread wake-up. Holds no lock across a look at the network or a yield. `None`: the
    /// window ended (or the network cannot be polled from here) before the answer came.
    fn spin_for_done(&self, op: OpId) -> Option<Done> {
        let claims = |ty| ty == msg::GPTR;
        let mut handle = |ep: &Endpoint, m: squall_net::Incoming| {
            let placed = m.placed();
            if let Err(e) = self.on_message(m.src, m.payload, placed) {
                eprintln!("squall: {}: {e}", ep.rank());
            }
        };
        self.ep.wait_polling(&claims, &mut handle, || {
            self.state.lock().done.remove(&op.0)
        })
    }

    fn wait_op(&self, op: OpId) -> Result<Outcome> {
        match self.wait_done(op)? {
            Done::Outcome(o) => Ok(o),
            Done::Reply(b) => Ok(Outcome::Data(b[GET_REPLY_HEADER..].to_vec())),
            Done::Placed(n) => Err(SquallError::Remote(format!(
                "{n} bytes of a get reply answered an operation that is not a get"
            ))),
        }
    }

    // ----- the operations -------------------------------------------------------------

    /// Blocking read of `out.len()` bytes at `addr` on `node`.
    pub fn get(&self, node: NodeId, addr: usize, out: &mut [u8]) -> Result<()> {
        self.issuer_check(addr, out.len())?;
        let len = out.len() as u64;
        if out.len() >= LAND_MIN && node != self.rank() {
            return self.get_landed(node, addr, out);
        }
        let op = self.with_engine(
            |e, m| e.get(m, node, addr as u64, len),
            |op| Some((op.0, Sink::Wait)),
        )?;
        let done = self.wait_done(op)?;
        Self::take_got(node, done, out)
    }

    /// A blocking get whose reply the transport reads straight into `out`: the destination
    /// is lent before the request leaves and taken back when the get completed. Where the
    /// transport did not place it (udp, a reply that raced the lending), it is copied.
    fn get_landed(&self, node: NodeId, addr: usize, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        let mut sends = Vec::new();
        let op = {
            let mut st = self.state.lock();
            let State { engine, heap, .. } = &mut *st;
            let mut mem = self.mem(heap);
            let op = engine.get(&mut mem, node, addr as u64, len).map_err(gerr)?;
            st.sinks.insert(op.0, Sink::Wait);
            sends.extend(self.finish_unsent(st));
            op
        };
        let head = get_reply_head(op);
        let done = self.ep.receive_into(node, msg::GPTR, &head, out, || {
            self.send_all(std::mem::take(&mut sends))?;
            self.wait_done(op)
        })?;
        Self::take_got(node, done, out)
    }

    /// A blocking get's answer into `out` (unless already placed there).
    fn take_got(node: NodeId, done: Done, out: &mut [u8]) -> Result<()> {
        let d = match done {
            Done::Placed(n) if n == out.len() => return Ok(()),
            Done::Placed(n) => {
                return Err(SquallError::Remote(format!(
                    "get from {node}: {n} bytes came back for {}",
                    out.len()
                )))
            }
            Done::Reply(b) => b.slice(GET_REPLY_HEADER.min(b.len())..),
            Done::Outcome(Outcome::Data(d)) => Bytes::from(d),
            Done::Outcome(o) => {
                return Err(SquallError::Remote(format!(
                    "get from {node}: unexpected answer {o:?}"
                )))
            }
        };
        if d.len() != out.len() {
            return Err(SquallError::Remote(format!(
                "get from {node}: {} bytes came back for {}",
                d.len(),
                out.len()
            )));
        }
        out.copy_from_slice(&d);
        Ok(())
    }

    /// Split-phase get: `deliver` receives the bytes when they arrive (on the thread that
    /// handles the reply); [`Gptr::sync`] waits for it.
    pub fn get_nb(&self, node: NodeId, addr: usize, len: usize, deliver: Deliver) -> Result<()> {
        self.issuer_check(addr, len)?;
        let mut d = Some(deliver);
        self.with_engine(
            |e, m| e.get(m, node, addr as u64, len as u64),
            |op| d.take().map(|f| (op.0, Sink::Deliver(f))),
        )
        .map(drop)
    }

    /// Blocking put: returns when `data` was applied at `node` (Split-C's blocking write).
    pub fn put(&self, node: NodeId, addr: usize, data: &[u8]) -> Result<()> {
        self.issuer_check(addr, data.len())?;
        let (op, head) = self.with_engine(
            |e, m| e.put_split(m, node, addr as u64, data),
            |(op, _)| Some((op.0, Sink::Wait)),
        )?;
        self.send_put(node, head, data)?;
        self.wait_op(op).map(drop)
    }

    /// Sends a remote put's message: its head, then the caller's bytes straight from their
    /// buffer (no copy into a message on tcp).
    fn send_put(&self, node: NodeId, head: Option<Vec<u8>>, data: &[u8]) -> Result<()> {
        if let Some(head) = head {
            self.ep.send_borrowed(node, msg::GPTR, &head, data)?;
        }
        Ok(())
    }

    /// Split-phase put: `data` is copied before the call returns (the buffer may be reused:
    /// OpenSHMEM's blocking put); completed by [`Gptr::sync`].
    pub fn put_nb(&self, node: NodeId, addr: usize, data: &[u8]) -> Result<()> {
        self.issuer_check(addr, data.len())?;
        let (_, head) = self.with_engine(
            |e, m| e.put_split(m, node, addr as u64, data),
            |(op, _)| Some((op.0, Sink::Discard)),
        )?;
        self.send_put(node, head, data)
    }

    /// One-way store: no answer; completed at the target by `store_sync` / `all_store_sync`.
    pub fn store(&self, node: NodeId, addr: usize, data: &[u8]) -> Result<()> {
        self.issuer_check(addr, data.len())?;
        self.with_engine(|e, m| e.store(m, node, addr as u64, data), |_| None)
    }

    /// Blocking remote atomic on the `width`-byte word at `addr` on `node`; the old value.
    pub fn atomic(
        &self,
        node: NodeId,
        addr: usize,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> Result<u64> {
        self.issuer_check(addr, width.bytes() as usize)?;
        let op = self.with_engine(
            |e, m| e.atomic(m, node, addr as u64, width, kind, a, b),
            |op| Some((op.0, Sink::Wait)),
        )?;
        match self.wait_op(op)? {
            Outcome::Value(v) => Ok(v),
            o => Err(SquallError::Remote(format!(
                "atomic on {node}: unexpected answer {o:?}"
            ))),
        }
    }

    /// Split-phase remote atomic whose old value nobody needs (`shmem_atomic_add`, `_set`);
    /// completed by [`Gptr::sync`].
    pub fn atomic_nb(
        &self,
        node: NodeId,
        addr: usize,
        width: Width,
        kind: AtomicKind,
        a: u64,
    ) -> Result<()> {
        self.issuer_check(addr, width.bytes() as usize)?;
        self.with_engine(
            |e, m| e.atomic(m, node, addr as u64, width, kind, a, 0),
            |op| Some((op.0, Sink::Discard)),
        )
        .map(drop)
    }

    /// Split-C `sync()` / `shmem_quiet`: wait until every operation this node issued before
    /// the call completed (deliveries of split-phase gets included); report the first failure
    /// of a split-phase operation or refused store since the last sync.
    pub fn sync(&self) -> Result<()> {
        let w = self.state.lock().engine.watermark();
        self.wait_for(|st| st.engine.sync_ready(w) && st.delivering == 0);
        self.take_failure()
    }

    fn take_failure(&self) -> Result<()> {
        let mut st = self.state.lock();
        let errs = st.engine.take_errors();
        st.failures.extend(errs);
        if st.failures.is_empty() {
            return Ok(());
        }
        let n = st.failures.len();
        let first = st.failures.remove(0);
        st.failures.clear();
        drop(st);
        if n == 1 {
            Err(gerr(first))
        } else {
            Err(SquallError::Remote(format!(
                "{first} (and {} more failed operations)",
                n - 1
            )))
        }
    }

    /// Split-C `store_sync(bytes)`: wait until `bytes` bytes have arrived at this node by
    /// store (from any node, since they were last counted), and count them off.
    pub fn store_sync(&self, bytes: u64) -> Result<()> {
        self.wait_for(|st| st.engine.take_stored(bytes));
        Ok(())
    }

    /// Split-C `all_store_sync()`: a barrier of all nodes that also completes every store
    /// sent to anyone before it (each node tells every other how many it sent it). Also
    /// completes this node's outstanding split-phase operations first.
    pub fn all_store_sync(&self) -> Result<()> {
        self.sync()?;
        let mut epoch = 0;
        self.with_engine(
            |e, _| {
                epoch = e.all_store_sync();
                Ok(())
            },
            |_| None,
        )?;
        self.wait_for(|st| st.engine.all_store_done(epoch));
        self.take_failure()
    }

    /// Wait until the local `width`-byte word at `addr` satisfies `cmp` against `value`
    /// (OpenSHMEM `wait_until`); returns the word. Woken by every served operation.
    pub fn wait_until(&self, addr: usize, width: Width, cmp: Cmp, value: u64) -> Result<u64> {
        let w = width.bytes() as usize;
        let mut err = None;
        let mut seen = 0;
        self.wait_for(|_| match self.space.atomic(addr, w, WordOp::Load) {
            Ok(v) => {
                seen = v;
                cmp.holds(width, v, value)
            }
            Err(e) => {
                err = Some(e);
                true
            }
        });
        match err {
            Some(e) => Err(e.into()),
            None => Ok(seen),
        }
    }

    /// A local atomic on this node's own symmetric word (what a program does to its own copy).
    pub fn local_atomic(
        &self,
        addr: usize,
        width: Width,
        kind: AtomicKind,
        a: u64,
        b: u64,
    ) -> Result<u64> {
        let v = self
            .space
            .atomic(addr, width.bytes() as usize, word_op(kind, a, b))?;
        self.cv.notify_all();
        Ok(v)
    }

    /// Quiet, then a barrier of every node (`shmem_barrier_all`).
    pub fn barrier_all(&self) -> Result<()> {
        self.sync()?;
        self.node.barrier()
    }

    // ----- the symmetric heap ----------------------------------------------------------

    /// Collective symmetric allocation (`shmem_malloc`/`shmem_align`): every node calls it
    /// with the same size in the same order and gets the same address. Ends with a barrier,
    /// so no node targets the block before every node has it. A node whose address differs
    /// from node 0's fails with an error naming both.
    pub fn alloc(&self, size: usize, align: usize) -> Result<usize> {
        let mine = {
            let mut st = self.state.lock();
            st.heap
                .alloc(size as u64, align as u64)
                .map(|off| self.space.base() + off as usize)
        };
        let at0 = self
            .node
            .broadcast(Some(mine.as_ref().map_or(0, |a| *a as u64)));
        let r = match (mine, at0) {
            (Err(e), _) => Err(SquallError::Remote(format!(
                "symmetric allocation of {size} bytes on {}: {e}",
                self.rank()
            ))),
            (_, Err(e)) => Err(e),
            (Ok(a), Ok(z)) if a as u64 != z => Err(SquallError::Remote(format!(
                "symmetric allocation of {size} bytes: {} got {a:#x} but node 0 got {z:#x} \
                 (every node must make the same shmem_malloc/shmem_free calls in the same order)",
                self.rank()
            ))),
            (Ok(a), Ok(_)) => Ok(a),
        };
        self.barrier_all()?;
        r
    }

    /// Collective symmetric free (`shmem_free`): a barrier first (nobody still targets the
    /// block), then every node frees its copy.
    pub fn free(&self, addr: usize) -> Result<()> {
        self.barrier_all()?;
        let off = addr
            .checked_sub(self.space.base())
            .filter(|_| self.space.in_arena(addr, 1))
            .ok_or_else(|| {
                SquallError::Remote(format!(
                    "free of {addr:#x}: not an address of the symmetric heap {:#x}..{:#x}",
                    self.space.base(),
                    self.space.base() + self.space.size()
                ))
            })?;
        self.state
            .lock()
            .heap
            .free(off as u64)
            .map_err(|e| SquallError::Remote(format!("free of {addr:#x}: {e}")))
    }

    /// The length of the live symmetric allocation starting at `addr`.
    pub fn block_len(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.space.base())?;
        self.state
            .lock()
            .heap
            .block_len(off as u64)
            .map(|n| n as usize)
    }

    /// Whether `[addr, addr+len)` is symmetric memory of this node (the reason if not).
    pub fn check_local(&self, addr: usize, len: usize) -> std::result::Result<(), String> {
        let st = self.state.lock();
        self.mem(&st.heap)
            .checked(addr as u64, len as u64)
            .map(drop)
    }

    /// Collective: make the program's globals reachable by one-sided operations if its data
    /// is at the same address here as on node 0 (a non-randomised or non-PIE binary). Where it
    /// is not, operations on addresses in it are refused, at the issuer and at the target,
    /// with the reason. Returns whether this node's data is symmetric.
    pub fn check_program_data(&self) -> Result<bool> {
        let mine = self.space.program_data().map_or(0, |(s, _)| s as u64);
        let at0 = self.node.broadcast(Some(mine))?;
        let same = mine != 0 && mine == at0;
        self.data_ok.store(same, Ordering::Relaxed);
        Ok(same)
    }

    /// Refuse at the issuer an operation on an address of this node's program data when that
    /// data is not symmetric (the target would write somewhere else).
    fn issuer_check(&self, addr: usize, len: usize) -> Result<()> {
        if self.space.in_data(addr, len) && !self.data_ok.load(Ordering::Relaxed) {
            return Err(SquallError::Remote(format!(
                "{addr:#x} is in the program's data, which is not at the same address on every \
                 node: link with -no-pie (as `pkg-config --libs squall-shmem` does) to use \
                 globals in one-sided operations"
            )));
        }
        Ok(())
    }

    /// Statistics of the engine (for `Node::stats` and the bench).
    pub fn stats_json(&self) -> serde_json::Value {
        let st = self.state.lock();
        let s = st.engine.stats();
        serde_json::json!({
            "gets": s.gets, "puts": s.puts, "stores": s.stores, "atomics": s.atomics,
            "local_ops": s.local_ops, "bytes_got": s.bytes_got, "bytes_put": s.bytes_put,
            "bytes_stored": s.bytes_stored, "served_gets": s.served_gets,
            "served_puts": s.served_puts, "served_stores": s.served_stores,
            "served_atomics": s.served_atomics, "refused": s.refused,
            "all_store_syncs": s.all_store_syncs,
            "symmetric_bytes_used": st.heap.used_bytes(), "landed_gets": st.landed,
        })
    }
}

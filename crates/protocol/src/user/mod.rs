//! User-written page protocols (Tempest, seed 001 §2–3): the public, safe interface a program
//! implements to keep its own allocations coherent, and the adapter that runs such a protocol
//! as a core of the [`Router`](crate::Router) beside `hlrc` and `sc`.
//!
//! A user protocol is a sans-IO state machine like the built-in ones: it gets faults,
//! messages from its peers on other nodes and the synchronization hooks, and acts only
//! through the [`Mechanisms`] it is handed with each event (page access rights, page bytes,
//! messages to nodes, resuming faulted threads, completing releases). So the same code runs
//! in the runtime (the mechanisms are `mprotect`, the node's page view and the transport) and
//! in the simulator (an in-memory page store and a virtual network).
//!
//! **What the mechanisms guarantee.**
//! * Messages a protocol sends reach the same protocol on the destination node exactly once,
//!   in order per pair of nodes (no order across pairs), untouched.
//! * [`Mechanisms::set_access`] takes effect before the call returns: once a page's access is
//!   `None` (or `Read`), no application thread of this node reads (or writes) it any more
//!   without faulting, so [`Mechanisms::read_page`] after revoking reads the final bytes.
//! * [`Mechanisms::write_page`] and [`Mechanisms::read_page`] go through a view that never
//!   faults and never changes the application's access.
//! * A faulted thread retries its access after [`Mechanisms::resume`] on its page; if the
//!   access is still missing it faults again (so a protocol may resume early: it is only
//!   slower). Concurrent faults on one page may be reported more than once.
//! * A release (lock release, barrier arrival, thread exit) waits until the protocol has
//!   completed it ([`UserProtocol::release`] returns `true`, or [`Mechanisms::release_done`]
//!   later); a barrier's hooks run only after every node's release completed.
//! * Every node's [`UserProtocol::allocated`] runs before any node can see an address of the
//!   allocation; the allocation's pages are zero and every node's access to them is `None`.
//!
//! **Limits.** A user protocol owns allocations made under `Policy { protocol:
//! ProtocolKind::User(id), .. }` only; it cannot be the job's default. Atomics
//! (`squall_atomic_*`, `Node::fetch_add`) on its pages are refused. One-page coherence units.
//! User protocols are written in Rust; the C API names only the built-in protocols.
//!
//! Owns: [`UserProtocol`], [`Mechanisms`], [`UserCore`]. Must not touch: the router, the
//! built-in protocols.

use crate::{Action, AtomicCall, Coherence, ProtoStats, Protocol};
use squall_core::{AllocInfo, Consistency, PageMemory};
use std::collections::VecDeque;

/// What a user protocol needs from the rest of Squall, in one place.
pub use crate::{ProtoError, ProtocolKind};
pub use squall_core::{Access, HeapLayout, NodeId, PageId, PAGE_SIZE};

/// The most user protocols one program may register.
pub const MAX_USER_PROTOCOLS: u8 = 8;

/// A page protocol written by a user. Every method runs on the node's service thread, must
/// not block, and acts only through `m`. The synchronization hooks have defaults for a
/// protocol with nothing to do at synchronization (e.g. one that keeps a single copy).
pub trait UserProtocol: Send {
    /// Short name (statistics, errors).
    fn name(&self) -> &'static str;

    /// The `pages` pages from `first` were allocated under this protocol (called on every
    /// node, the allocating one first, before any node can use them).
    fn allocated(&mut self, _m: &mut Mechanisms<'_>, _first: PageId, _pages: u64) {}

    /// An application thread of this node touched `page` without the access it needed (a
    /// write if `write`). Give the node the access (now or after messages) and
    /// [`Mechanisms::resume`] the page.
    fn fault(
        &mut self,
        m: &mut Mechanisms<'_>,
        page: PageId,
        write: bool,
    ) -> Result<(), ProtoError>;

    /// A message this protocol's instance on node `from` sent. Return
    /// [`ProtoError::Malformed`] for bytes it cannot decode (never panic on them).
    fn message(
        &mut self,
        m: &mut Mechanisms<'_>,
        from: NodeId,
        msg: &[u8],
    ) -> Result<(), ProtoError>;

    /// Acquire, at the acquirer: bytes sent along with the lock request.
    fn acquire_info(&mut self, _m: &mut Mechanisms<'_>) -> Vec<u8> {
        Vec::new()
    }

    /// Acquire, at the node handing the lock over: bytes for the acquirer, given its
    /// [`UserProtocol::acquire_info`].
    fn grant_info(&mut self, _m: &mut Mechanisms<'_>, _acquirer_info: &[u8]) -> Vec<u8> {
        Vec::new()
    }

    /// Acquire, at the acquirer, before its thread continues: the grant's bytes (empty if
    /// the granting node's instance said nothing).
    fn acquired(&mut self, _m: &mut Mechanisms<'_>, _grant_info: &[u8]) {}

    /// Start a release (lock release, barrier arrival, thread exit). Return `true` if it is
    /// complete now; otherwise call [`Mechanisms::release_done`] with `token` once it is.
    fn release(&mut self, _m: &mut Mechanisms<'_>, _token: u64) -> bool {
        true
    }

    /// Barrier arrival (after this node's release completed): bytes for every node.
    fn barrier_info(&mut self, _m: &mut Mechanisms<'_>) -> Vec<u8> {
        Vec::new()
    }

    /// Barrier completion, at every node: the non-empty arrival infos of the nodes.
    fn barrier(&mut self, _m: &mut Mechanisms<'_>, _all: &[Vec<u8>]) {}
}

/// Builds one node's instance of a user protocol: `(this node, the job's page layout)`.
pub type UserFactory =
    std::sync::Arc<dyn Fn(NodeId, HeapLayout) -> Box<dyn UserProtocol> + Send + Sync>;

/// What a user protocol may do, handed to it with every event.
pub struct Mechanisms<'a> {
    me: NodeId,
    layout: HeapLayout,
    name: &'static str,
    mem: &'a dyn PageMemory,
    actions: &'a mut VecDeque<Action>,
    stats: &'a mut ProtoStats,
}

impl Mechanisms<'_> {
    /// This node.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Nodes in the job (`NodeId(0) .. NodeId(nodes - 1)`).
    pub fn nodes(&self) -> u16 {
        self.layout.nodes
    }

    /// The node that allocated `page` (its arena holds the page): a natural fixed home.
    pub fn manager_of(&self, page: PageId) -> NodeId {
        self.layout.manager_of(page)
    }

    /// Check `page` is a global page (for page numbers decoded from messages).
    pub fn check_page(&self, from: NodeId, page: PageId) -> Result<(), ProtoError> {
        if page.0 < self.layout.total_pages {
            Ok(())
        } else {
            Err(ProtoError::Malformed {
                from,
                why: format!("{page} is outside the global range"),
            })
        }
    }

    /// The application's access to `page` on this node.
    pub fn access(&self, page: PageId) -> Access {
        self.mem.access(page)
    }

    /// Set the application's access to `page` on this node (effective on return).
    pub fn set_access(&mut self, page: PageId, access: Access) {
        self.mem.set_access(page, access);
    }

    /// This node's copy of `page` (`PAGE_SIZE` bytes), whatever the application's access.
    pub fn read_page(&self, page: PageId) -> Vec<u8> {
        let mut buf = vec![0u8; PAGE_SIZE];
        self.mem.read_page(page, &mut buf);
        buf
    }

    /// Overwrite `data.len()` bytes of this node's copy of `page` from `offset` (whatever
    /// the application's access, which is left as it is). Refused if it leaves the page.
    pub fn write_page(
        &mut self,
        page: PageId,
        offset: usize,
        data: &[u8],
    ) -> Result<(), ProtoError> {
        if offset.checked_add(data.len()).is_none_or(|e| e > PAGE_SIZE) {
            return Err(ProtoError::Malformed {
                from: self.me,
                why: format!(
                    "{} bytes at offset {offset} of {page} leave the page",
                    data.len()
                ),
            });
        }
        self.mem.write_bytes(page, offset, data);
        Ok(())
    }

    /// Send `msg` to this protocol's instance on node `to`, another node (work for this
    /// node itself is done directly, not by a message to itself).
    pub fn send(&mut self, to: NodeId, msg: Vec<u8>) {
        self.stats.count_send(self.name, msg.len());
        self.actions.push_back(Action::Send { to, msg });
    }

    /// Let the threads that faulted on `page` retry.
    pub fn resume(&mut self, page: PageId) {
        self.actions.push_back(Action::Resume { page });
    }

    /// The release started with `token` ([`UserProtocol::release`] returned `false`) is
    /// complete.
    pub fn release_done(&mut self, token: u64) {
        self.actions.push_back(Action::ReleaseDone { token });
    }

    /// Count a whole page sent or installed (the `page_fetches` statistic).
    pub fn count_page_fetch(&mut self) {
        self.stats.page_fetches += 1;
    }
}

/// A user protocol as a [`Protocol`] core over a node's page memory `M` (what the router,
/// the runtime and the simulator drive).
pub struct UserCore<M> {
    mem: M,
    me: NodeId,
    layout: HeapLayout,
    user: Box<dyn UserProtocol>,
    actions: VecDeque<Action>,
    stats: ProtoStats,
}

impl<M: PageMemory> UserCore<M> {
    /// Node `me`'s core of `user` over `mem`.
    pub fn new(mem: M, me: NodeId, layout: HeapLayout, user: Box<dyn UserProtocol>) -> Self {
        UserCore {
            mem,
            me,
            layout,
            user,
            actions: VecDeque::new(),
            stats: ProtoStats::default(),
        }
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut dyn UserProtocol, &mut Mechanisms<'_>) -> R) -> R {
        let mut m = Mechanisms {
            me: self.me,
            layout: self.layout,
            name: self.user.name(),
            mem: &self.mem,
            actions: &mut self.actions,
            stats: &mut self.stats,
        };
        f(self.user.as_mut(), &mut m)
    }
}

impl<M: PageMemory> Consistency for UserCore<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        self.with(|u, m| u.acquire_info(m))
    }
    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        self.with(|u, m| u.grant_info(m, acquirer_info))
    }
    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.with(|u, m| u.acquired(m, grant_info))
    }
    fn begin_release(&mut self, token: u64) -> bool {
        self.with(|u, m| u.release(m, token))
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        self.with(|u, m| u.barrier_info(m))
    }
    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        self.with(|u, m| u.barrier(m, all))
    }
}

impl<M: PageMemory> Protocol for UserCore<M> {
    fn name(&self) -> &'static str {
        self.user.name()
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        self.stats.count_fault(write);
        self.with(|u, m| u.fault(m, page, write))
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        self.with(|u, m| u.message(m, from, msg))
    }

    /// Nothing: every node hears of the allocation through `apply_policy`.
    fn register_allocation(&mut self, _alloc: AllocInfo) {}

    fn apply_policy(&mut self, first: PageId, pages: u64, _coherence: Coherence) {
        self.with(|u, m| u.allocated(m, first, pages))
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn atomic(
        &mut self,
        page: PageId,
        _offset: usize,
        _call: AtomicCall,
        _token: u64,
    ) -> Result<(), ProtoError> {
        Err(ProtoError::Unsupported {
            protocol: self.user.name(),
            what: format!("atomic operations (on {page})"),
        })
    }

    fn stats(&self) -> ProtoStats {
        self.stats.clone()
    }
}

/// A little-endian message builder for user protocols (pairs with [`MsgReader`]).
#[derive(Debug, Default)]
pub struct MsgWriter(Vec<u8>);

impl MsgWriter {
    /// A message starting with its kind byte.
    pub fn new(kind: u8) -> Self {
        MsgWriter(vec![kind])
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn node(self, n: NodeId) -> Self {
        let mut s = self;
        s.0.extend_from_slice(&n.0.to_le_bytes());
        s
    }
    pub fn page(self, p: PageId) -> Self {
        self.u64(p.0)
    }
    /// A length-prefixed byte string.
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(&(b.len() as u32).to_le_bytes());
        self.0.extend_from_slice(b);
        self
    }
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a message written with [`MsgWriter`]; every shortfall or bad value is a
/// [`ProtoError::Malformed`] naming the sender.
#[derive(Debug)]
pub struct MsgReader<'a> {
    from: NodeId,
    buf: &'a [u8],
}

impl<'a> MsgReader<'a> {
    pub fn new(from: NodeId, buf: &'a [u8]) -> Self {
        MsgReader { from, buf }
    }
    /// A `Malformed` error about this message.
    pub fn err(&self, why: impl Into<String>) -> ProtoError {
        ProtoError::Malformed {
            from: self.from,
            why: why.into(),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(self.err(format!(
                "message cut short ({} bytes left, {n} needed)",
                self.buf.len()
            )));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A node of the job.
    pub fn node(&mut self, m: &Mechanisms<'_>) -> Result<NodeId, ProtoError> {
        let b = self.take(2)?;
        let n = u16::from_le_bytes([b[0], b[1]]);
        if n >= m.nodes() {
            return Err(self.err(format!("node {n} is not in the job")));
        }
        Ok(NodeId(n))
    }
    /// A global page.
    pub fn page(&mut self, m: &Mechanisms<'_>) -> Result<PageId, ProtoError> {
        let p = PageId(self.u64()?);
        m.check_page(self.from, p)?;
        Ok(p)
    }
    /// A global page that must be homed at this node: a message only a home may receive.
    /// `what` names the message for the error ("a fetch of").
    pub fn home_page(&mut self, m: &Mechanisms<'_>, what: &str) -> Result<PageId, ProtoError> {
        let p = self.page(m)?;
        if m.manager_of(p) != m.me() {
            return Err(self.err(format!("{what} {p}, which is not homed here")));
        }
        Ok(p)
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let b = self.take(4)?;
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        self.take(n)
    }
    /// The message must end here.
    pub fn end(&self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.err(format!("{} bytes after the message", self.buf.len())))
        }
    }
}

#[cfg(test)]
mod tests;

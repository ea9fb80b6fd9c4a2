//! Allocation: the shared heap (alloc, calloc, free, realloc, usable size, arrays, the
//! collective allocation) and the adoption of the program's global data as shared memory.
//! Owns the heap calls of the public API; must not touch synchronization or threads.

use super::Node;
use crate::array::{Pod, SharedArray};
use crate::error::{Result, SquallError};
use crate::msg;
use crate::profile::Site;
use crate::service::{Reply, Service};
use squall_core::{AllocInfo, NodeId, PageId, Placement};
use squall_memory::{AllocError, Region};
use squall_protocol::{Coherence, Policy, ProtocolKind};

impl Node {
    /// Collective, at start-up (before any application thread touches the range and before
    /// any thread creation): make the program's global data `regions` (page aligned, whole
    /// pages: under the pthreads layer its `squall_data` and `squall_bss` sections) coherent
    /// shared memory, with node 0 as the home of every page (CableS' GLOBAL: the primary copy
    /// is on the first node, which holds the initial values). Every node adopts the regions
    /// into its address space; their pages are numbered at the top of node 0's arena (node
    /// 0's heap gives them up) and follow the job's default policy. Zero pages cost no memory until
    /// touched ([`squall_memory::Contents`]). Rank 0 broadcasts its regions: a node where they
    /// lie elsewhere fails with an error (address randomisation must be off: see
    /// `squall_memory::fixed_layout`). No regions on rank 0 does nothing. Returns the first
    /// page and the page count.
    pub fn adopt_regions(&self, regions: &[Region]) -> Result<(PageId, u64)> {
        let me = self.rank();
        let zero = me == NodeId(0);
        let count = self.broadcast(zero.then_some(regions.len() as u64))? as usize;
        let mut same = count == regions.len();
        for i in 0..count {
            let mine = regions
                .get(i)
                .map_or((0, 0), |r| (r.start as u64, r.len as u64));
            let s0 = self.broadcast(zero.then_some(mine.0))?;
            let l0 = self.broadcast(zero.then_some(mine.1))?;
            same &= (s0, l0) == mine;
        }
        if !same {
            let here: Vec<String> = regions
                .iter()
                .map(|r| format!("{:#x}+{:#x}", r.start, r.len))
                .collect();
            return Err(SquallError::Config(format!(
                "{me}: the program's shared data sections are at [{}] here but elsewhere on \
                 node 0: every node must run the same binary with address randomisation off \
                 (the pthreads layer re-executes the program with personality \
                 ADDR_NO_RANDOMIZE; if that is refused, run under `setarch -R` or set \
                 kernel.randomize_va_space=0)",
                here.join(", ")
            )));
        }
        if regions.is_empty() {
            return Ok((PageId(0), 0));
        }
        let len: usize = regions.iter().map(|r| r.len).sum();
        let pages = (len / squall_core::PAGE_SIZE) as u64;
        let first = self.inner.layout.adopted_first(pages).ok_or_else(|| {
            SquallError::Config(format!(
                "the program's shared data ({len} bytes) is larger than node 0's arena"
            ))
        })?;
        if zero {
            let mut s = self.inner.svc.lock();
            let got = s
                .heap()
                .reserve_top(pages)
                .map_err(|e| SquallError::Alloc {
                    node: me,
                    source: e,
                })?;
            if got != first {
                return Err(SquallError::Config(format!(
                    "node 0's heap reserved {got} for the program's shared data, expected {first}"
                )));
            }
        }
        self.inner.space.adopt_regions(regions, first)?;
        if self.profiling() {
            for r in regions {
                self.inner.prof.adopted(r.start as u64, r.len as u64);
            }
        }
        if zero {
            let mut s = self.inner.svc.lock();
            s.register(squall_core::AllocInfo {
                first,
                pages,
                placement: Placement::Node(NodeId(0)),
            });
            s.drain(&self.inner.ep);
        }
        // Every node has adopted (and node 0 registered) before anyone touches the regions.
        self.barrier()?;
        Ok((first, pages))
    }

    /// Allocate `size` bytes of shared memory aligned to `align` (0: 16) with this placement
    /// for its pages, kept coherent by the job's default policy (`SQUALL_PROTOCOL`,
    /// `SQUALL_PUSH_UPDATES`). Any thread, any node, any time.
    #[track_caller]
    pub fn alloc_with(&self, size: usize, align: usize, placement: Placement) -> Result<*mut u8> {
        let policy = Policy {
            placement,
            ..self.default_policy()
        };
        self.alloc_fresh(size, align, policy).map(|(p, _)| p)
    }

    /// Allocate as [`Node::alloc_with`], kept coherent by `protocol` whatever the run's default
    /// (e.g. `sc` for data a program reads and writes without synchronization).
    #[track_caller]
    pub fn alloc_in(
        &self,
        size: usize,
        align: usize,
        placement: Placement,
        protocol: ProtocolKind,
    ) -> Result<*mut u8> {
        let policy = Policy {
            placement,
            ..self.policy(protocol)
        };
        self.alloc_fresh(size, align, policy).map(|(p, _)| p)
    }

    /// Allocate `size` bytes kept coherent by `policy`: its protocol, coherence unit, updates
    /// or invalidation, and home placement, whatever the job's default. Allocations under
    /// different policies live side by side anywhere in the node's arena (one can be as large
    /// as the free space) and are synchronized by the same locks, barriers and atomics. Every
    /// node knows the policy before it can see the address (an allocation under a policy
    /// other than the default is announced to every node before this returns).
    #[track_caller]
    pub fn alloc_policy(&self, size: usize, policy: Policy) -> Result<*mut u8> {
        self.alloc_fresh(size, 0, policy).map(|(p, _)| p)
    }

    /// [`Node::alloc_policy`] with an alignment, also telling whether the memory was never
    /// handed out before (and so is zero on every node without anyone writing it).
    #[track_caller]
    pub(super) fn alloc_fresh(
        &self,
        size: usize,
        align: usize,
        policy: Policy,
    ) -> Result<(*mut u8, bool)> {
        policy
            .check()
            .map_err(|e| SquallError::Config(e.to_string()))?;
        let caller = std::panic::Location::caller();
        let site = self.profiling().then(|| Site::current(caller));
        let layout = self.inner.layout;
        // Large allocations go straight to the global part (sparing the node's arena); any
        // allocation its arena cannot hold goes there too.
        let (addr, fresh) = if layout.has_global_part() && size >= BIG_BYTES {
            (self.claim(size, align, policy)?, true)
        } else {
            match self.alloc_local(size, align, policy) {
                Err(SquallError::Alloc {
                    source: AllocError::OutOfMemory { .. },
                    ..
                }) if layout.has_global_part() => (self.claim(size, align, policy)?, true),
                r => r?,
            }
        };
        if let Some(site) = site {
            self.inner.prof.alloc(addr, size as u64, site);
        }
        Ok((addr as usize as *mut u8, fresh))
    }

    /// Allocate from this node's arena: the address and whether it is fresh.
    fn alloc_local(&self, size: usize, align: usize, policy: Policy) -> Result<(u64, bool)> {
        let me = self.rank();
        let tag = pool_tag(policy.coherence());
        let r = self.call("alloc", move |s, _, w| {
            match s.heap().alloc_tagged(size, align, policy.placement, tag) {
                Ok(a) => {
                    // Addresses are at least 16-aligned: bit 0 carries `fresh`.
                    let reply = Reply::Value(a.addr as u64 | u64::from(a.fresh));
                    let Some(info) = a.new_pages else {
                        return s.wake(w, reply);
                    };
                    match s.protocol.register_with(info, &policy, w.0) {
                        Ok(true) => s.wake(w, reply),
                        Ok(false) => s.wake_when_announced(w, reply),
                        Err(e) => s.wake(w, Reply::Failed(SquallError::Config(e.to_string()))),
                    }
                }
                Err(e) => s.wake(
                    w,
                    Reply::Failed(SquallError::Alloc {
                        node: me,
                        source: e,
                    }),
                ),
            }
        })?;
        match r {
            Reply::Value(a) => Ok((a & !1, a & 1 == 1)),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to alloc".into())),
        }
    }

    /// Allocate from the global part of the range: node 0 decides the pages (it holds the
    /// job's [`squall_memory::GlobalPart`]), then this node registers the claim and announces
    /// it to every node, and returns the address once every node has recorded it (so every
    /// node can answer home look-ups for its stripes of it before anyone touches it).
    fn claim(&self, size: usize, align: usize, policy: Policy) -> Result<u64> {
        let me = self.rank();
        let (first, pages) = if me == NodeId(0) {
            let r = self.call("claim", move |s, _, w| {
                let reply = match s.global().claim(size, align) {
                    Ok((first, _)) => Reply::Value(s.space.addr_of(first) as u64),
                    Err(e) => Reply::Failed(SquallError::Alloc {
                        node: me,
                        source: e,
                    }),
                };
                s.wake(w, reply)
            })?;
            match r {
                Reply::Value(a) => {
                    let first = self.page_of(a as usize)?;
                    (first, size.max(1).div_ceil(squall_core::PAGE_SIZE) as u64)
                }
                Reply::Failed(e) => return Err(e),
                Reply::Sync(_) => {
                    return Err(SquallError::Remote("unexpected reply to claim".into()))
                }
            }
        } else {
            let mut p = vec![HEAP_CLAIM];
            p.extend_from_slice(&(size as u64).to_le_bytes());
            p.extend_from_slice(&(align as u64).to_le_bytes());
            let r = self.inner.ep.request(NodeId(0), msg::HEAP, p)?;
            decode_claim_reply(&r)?
        };
        let info = AllocInfo {
            first,
            pages,
            placement: policy.placement,
        };
        let addr = self.inner.space.addr_of(first) as u64;
        let r = self.call("claim", move |s, _, w| {
            let reply = Reply::Value(addr);
            match s.protocol.register_claim(info, &policy, w.0) {
                Ok(true) => s.wake(w, reply),
                Ok(false) => s.wake_when_announced(w, reply),
                Err(e) => s.wake(w, Reply::Failed(SquallError::Config(e.to_string()))),
            }
        })?;
        match r {
            Reply::Value(a) => Ok(a),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to claim".into())),
        }
    }

    /// The node that keeps the allocation record of the memory at `page`: node 0 for the
    /// global part, the arena's node otherwise.
    fn heap_owner(&self, page: PageId) -> NodeId {
        let l = self.inner.layout;
        if l.in_global_part(page) {
            NodeId(0)
        } else {
            l.manager_of(page)
        }
    }

    /// The coherence policy the memory at `ptr` follows (as every node knows it), with the
    /// default placement.
    pub fn policy_of(&self, ptr: *const u8) -> Result<Policy> {
        let page = self.page_of(ptr as usize)?;
        let c = self.inner.svc.lock().protocol.coherence_of(page);
        Ok(Policy {
            protocol: c.protocol,
            unit_pages: c.unit_pages,
            updates: c.updates,
            placement: self.default_placement(),
        })
    }

    /// Allocate with the default placement (`SQUALL_PLACEMENT`, first touch unless set).
    #[track_caller]
    pub fn alloc(&self, size: usize) -> Result<*mut u8> {
        self.alloc_with(size, 0, self.default_placement())
    }

    /// Allocate zeroed memory.
    #[track_caller]
    pub fn calloc(&self, count: usize, size: usize) -> Result<*mut u8> {
        let bytes = count
            .checked_mul(size)
            .ok_or_else(|| SquallError::Config(format!("calloc({count}, {size}) overflows")))?;
        let (p, fresh) = self.alloc_fresh(bytes, 0, self.default_policy())?;
        // Memory never handed out is zero on every node: writing it would make this node the
        // first toucher (and home) of every page of it. A reused chunk is not zero: zero it
        // through the application view (an ordinary write, coherent like any other).
        if !fresh {
            // SAFETY: `p` was just allocated with at least `bytes` usable bytes.
            unsafe { std::ptr::write_bytes(p, 0, bytes) };
        }
        Ok(p)
    }

    /// Free memory from any `alloc` on any node.
    ///
    /// A release first (when this node may hold writes to the chunk's page for its home,
    /// `Protocol::holds_writes_for_home`), as the allocator's lock makes `free` in a pthreads
    /// program: the chunk may be handed out again at once, to a thread of any node, and a write this node
    /// made to it as a copy of a page homed elsewhere (its diff still held for this node's
    /// next release) must reach the home before the new owner's writes, or it would land over
    /// them later (a task queue whose nodes one thread links, another frees and a third
    /// allocates again: the freed node's old `next` put back into the new one).
    pub fn free(&self, ptr: *mut u8) -> Result<()> {
        let addr = ptr as usize;
        let page = self.page_of(addr)?;
        // A chunk that does not start a page lies in that page (small objects); one that
        // does may be a large allocation of several pages: then release in any case.
        let in_one_page = !addr.is_multiple_of(squall_core::PAGE_SIZE);
        self.call("free", move |s, ep, w| {
            if in_one_page && !squall_protocol::Protocol::holds_writes_for_home(&*s.protocol, page)
            {
                s.wake(w, Reply::Value(0));
            } else {
                s.release_then(ep, Box::new(move |s, _| s.wake(w, Reply::Value(0))));
            }
        })?;
        let manager = self.heap_owner(page);
        if manager == self.rank() {
            match self.call("free", move |s, _, w| {
                let r = free_local(s, addr);
                s.wake(w, r)
            })? {
                Reply::Failed(e) => Err(e),
                _ => Ok(()),
            }
        } else {
            let mut p = vec![0u8];
            p.extend_from_slice(&(addr as u64).to_le_bytes());
            let r = self.inner.ep.request(manager, msg::HEAP, p)?;
            if r.is_empty() {
                Ok(())
            } else {
                Err(SquallError::Remote(
                    String::from_utf8_lossy(&r).into_owned(),
                ))
            }
        }
    }

    /// Usable size of the allocation at `ptr`.
    pub fn usable_size(&self, ptr: *mut u8) -> Result<usize> {
        let addr = ptr as usize;
        let page = self.page_of(addr)?;
        let manager = self.heap_owner(page);
        let bad = || {
            SquallError::Remote(format!(
                "{addr:#x} is not the start of a live squall allocation"
            ))
        };
        if manager == self.rank() {
            match self.call("usable_size", move |s, _, w| {
                let v = size_local(s, addr).map(|n| n as u64).unwrap_or(u64::MAX);
                s.wake(w, Reply::Value(v))
            })? {
                Reply::Value(v) if v != u64::MAX => Ok(v as usize),
                _ => Err(bad()),
            }
        } else {
            let mut p = vec![1u8];
            p.extend_from_slice(&(addr as u64).to_le_bytes());
            let r = self.inner.ep.request(manager, msg::HEAP, p)?;
            let b: [u8; 8] = r.as_ref().try_into().map_err(|_| bad())?;
            match u64::from_le_bytes(b) {
                u64::MAX => Err(bad()),
                v => Ok(v as usize),
            }
        }
    }

    /// Resize an allocation (the contents up to the smaller size are kept; a moved one keeps
    /// its coherence policy).
    #[track_caller]
    pub fn realloc(&self, ptr: *mut u8, size: usize) -> Result<*mut u8> {
        if ptr.is_null() {
            return self.alloc(size);
        }
        let old = self.usable_size(ptr)?;
        if size <= old {
            return Ok(ptr);
        }
        let src = ptr as usize;
        let new = self.alloc_policy(size, self.policy_of(ptr)?)?;
        // SAFETY: `usable_size` just confirmed `src` is the start of a live squall allocation of
        // `old` bytes; `new` is a fresh one of at least `size > old` bytes; they are disjoint.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, new, old) };
        self.free(src as *mut u8)?;
        Ok(new)
    }

    /// Collective: every node calls this in the same order; rank 0 allocates and every node
    /// gets the same address. If rank 0's allocation fails, every node fails with the same
    /// [`SquallError::Collective`] naming node 0 and the cause.
    #[track_caller]
    pub fn alloc_collective(&self, size: usize, placement: Placement) -> Result<*mut u8> {
        let caller = std::panic::Location::caller();
        let v = self.collective("collective allocation", || {
            crate::profile::with_rust_caller(caller, || {
                self.alloc_with(size, 0, placement).map(|p| p as u64)
            })
        })?;
        Ok(v as usize as *mut u8)
    }

    /// Collective [`Node::alloc_policy`]: every node calls this in the same order; rank 0
    /// allocates under `policy` and every node gets the same address (as
    /// [`Node::alloc_collective`] for failures).
    pub fn alloc_collective_policy(&self, size: usize, policy: Policy) -> Result<*mut u8> {
        let v = self.collective("collective allocation", || {
            self.alloc_policy(size, policy).map(|p| p as u64)
        })?;
        Ok(v as usize as *mut u8)
    }

    /// Allocate a shared array of `len` elements (zero if fresh; see [`Node::calloc`]).
    #[track_caller]
    pub fn alloc_array<T: Pod>(&self, len: usize, placement: Placement) -> Result<SharedArray<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            SquallError::Config(format!(
                "an array of {len} elements overflows the address space"
            ))
        })?;
        let p = self.alloc_with(bytes.max(1), std::mem::align_of::<T>().max(16), placement)?;
        // SAFETY: a live allocation of `bytes` bytes aligned for T.
        Ok(unsafe { SharedArray::from_raw(p as usize, len) })
    }

    /// Collective [`Node::alloc_array`]: rank 0 allocates, every node gets the same array.
    #[track_caller]
    pub fn alloc_array_collective<T: Pod>(
        &self,
        len: usize,
        placement: Placement,
    ) -> Result<SharedArray<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            SquallError::Config(format!(
                "an array of {len} elements overflows the address space"
            ))
        })?;
        let p = self.alloc_collective(bytes.max(1), placement)?;
        // SAFETY: rank 0 allocated `bytes` bytes (16-aligned, enough for every Pod type).
        Ok(unsafe { SharedArray::from_raw(p as usize, len) })
    }
}

/// The heap pool of allocations under `c`: objects of different policies never share a page
/// (a page follows one protocol).
fn pool_tag(c: Coherence) -> u32 {
    // The built-in protocols by their place in `ALL`, user protocols after them (at most
    // `MAX_USER_PROTOCOLS`, so the index fits its four bits).
    let protocol = match c.protocol {
        ProtocolKind::User(i) => ProtocolKind::ALL.len() as u32 + u32::from(i),
        k => ProtocolKind::ALL.iter().position(|&b| b == k).unwrap_or(0) as u32,
    };
    protocol | u32::from(c.updates) << 4 | c.unit_pages.trailing_zeros() << 8
}

/// Heap request of a claim of the global part (to node 0): size and alignment, `u64` each.
pub(super) const HEAP_CLAIM: u8 = 2;

/// Allocations from this size on come from the global part of the range when it has one.
const BIG_BYTES: usize = 1 << 30;

/// Node 0's answer to a claim request: `0` and the first page and page count, or `1` and the
/// error.
pub(super) fn claim_reply(s: &mut Service, req: &[u8]) -> Vec<u8> {
    let word = |i: usize| {
        req.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (Some(size), Some(align), 17) = (word(1), word(9), req.len()) else {
        let mut r = vec![1u8];
        r.extend_from_slice(b"malformed claim request");
        return r;
    };
    match s.global().claim(size as usize, align as usize) {
        Ok((first, pages)) => {
            let mut r = vec![0u8];
            r.extend_from_slice(&first.0.to_le_bytes());
            r.extend_from_slice(&pages.to_le_bytes());
            r
        }
        Err(e) => {
            let mut r = vec![1u8];
            r.extend_from_slice(format!("allocation on node 0: {e}").as_bytes());
            r
        }
    }
}

fn decode_claim_reply(r: &[u8]) -> Result<(PageId, u64)> {
    match r.split_first() {
        Some((0, rest)) if rest.len() == 16 => {
            let first = u64::from_le_bytes(rest[..8].try_into().unwrap_or([0; 8]));
            let pages = u64::from_le_bytes(rest[8..].try_into().unwrap_or([0; 8]));
            Ok((PageId(first), pages))
        }
        Some((1, why)) => Err(SquallError::Remote(
            String::from_utf8_lossy(why).into_owned(),
        )),
        _ => Err(SquallError::Remote(
            "malformed answer to a claim from node 0".into(),
        )),
    }
}

/// Usable size of the live allocation at `addr` recorded on this node (the global part's
/// claims on node 0, the arena's allocations on every node).
pub(super) fn size_local(s: &mut Service, addr: usize) -> Option<usize> {
    if s.space
        .page_of(addr)
        .is_some_and(|p| s.heap().layout().in_global_part(p))
    {
        return s.global().size_of(addr);
    }
    s.heap().size_of(addr)
}

pub(super) fn free_local(s: &mut Service, addr: usize) -> Reply {
    if s.space
        .page_of(addr)
        .is_some_and(|p| s.heap().layout().in_global_part(p))
    {
        return match s.global().free(addr) {
            Ok((first, pages)) => match s.space.release_pages(first, pages) {
                Ok(()) => Reply::Value(0),
                Err(e) => Reply::Failed(e.into()),
            },
            Err(e) => Reply::Failed(SquallError::Alloc {
                node: s.me,
                source: e,
            }),
        };
    }
    match s.heap().free(addr) {
        Ok(rec) => {
            if let Some(info) = rec.released {
                if let Err(e) = s.space.release_pages(info.first, info.pages) {
                    return Reply::Failed(e.into());
                }
            }
            Reply::Value(0)
        }
        Err(e) => Reply::Failed(SquallError::Alloc {
            node: s.me,
            source: e,
        }),
    }
}

//! Atomics on shared words, executed at the word's home, and fences, with their C11
//! orderings mapped onto releases and acquires. Must not touch the heap or threads.

use super::Node;
use crate::error::{Result, SquallError};
use crate::order::{self, MemOrder};
use crate::service::{Reply, Service};
use crossbeam_channel::bounded;
use squall_core::Consistency;
use squall_net::Endpoint;
use squall_protocol::{AtomicCall, AtomicOp, Protocol};

impl Node {
    /// Execute `op` on the `u64` at `addr` at its home and return the old value. Ordering: a
    /// release first (this thread's earlier writes are visible before the atomic takes
    /// effect); atomics on one word are sequentially consistent with each other. It is not an
    /// acquire, and a cached copy of the word's page is not updated: read such words with
    /// `atomic(addr, AtomicOp::FetchAdd(0))`.
    pub fn atomic(&self, addr: *mut u64, op: AtomicOp) -> Result<u64> {
        let a = addr as usize;
        let page = self.page_of(a)?;
        let offset = a - self.inner.space.addr_of(page);
        let r = self.call("atomic", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, _| {
                    if let Err(e) = s.protocol.atomic(page, offset, op.into(), w.0) {
                        s.wake(w, Reply::Failed(e.into()));
                    }
                }),
            )
        })?;
        match r {
            Reply::Value(v) => Ok(v),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to an atomic".into())),
        }
    }

    /// Whether `addr` is Squall memory (the global range or an adopted region): atomics there
    /// must go through [`Node::atomic_ordered`].
    pub fn is_shared(&self, addr: usize) -> bool {
        self.inner.space.page_of(addr).is_some()
    }

    /// Execute `op` on the `width`-byte word (1, 2, 4 or 8, naturally aligned) at `addr` at its
    /// page's home and return the old value (zero-extended), with C11 ordering `order`:
    ///
    /// * a release (`Release`, `AcqRel`, `SeqCst`) first makes this node's writes visible
    ///   (`begin_release`) and leaves the node's synchronization info at the location;
    /// * an acquire (`Acquire`, `AcqRel`, `SeqCst`) applies the infos other nodes left at the
    ///   location (their writes before their releasing operations become visible here);
    /// * `Relaxed` does neither: one message to the home and back (none if this node is it).
    ///
    /// All operations on one location are executed one at a time at its home, so they are
    /// atomic and totally ordered (sequentially consistent per location). After any of them,
    /// the word's new value is in this node's copy of its page (if it has one), so a plain
    /// read of the word on this node sees it or a later value.
    pub fn atomic_ordered(
        &self,
        addr: usize,
        width: u8,
        op: AtomicOp,
        order: MemOrder,
    ) -> Result<u64> {
        let page = self.page_of(addr)?;
        let offset = addr - self.inner.space.addr_of(page);
        let (acquire, release) = order.acquire_release();
        let writes = !matches!(op, AtomicOp::Load);
        // After a release fence, a relaxed write carries the fence's info (see `order`).
        let fenced = if !release && writes {
            order::fence_info()
        } else {
            None
        };
        if !acquire {
            order::note_relaxed_read(addr, width);
        }
        let r = self.call("atomic", move |s, ep, w| {
            let go = move |s: &mut Service, _: &Endpoint| {
                let info = if release {
                    Some(s.protocol.grant_info(&[]))
                } else {
                    fenced
                };
                let call = AtomicCall {
                    op,
                    width,
                    acquire,
                    release: info,
                };
                let seen = AtomicCall {
                    release: None,
                    ..call.clone()
                };
                s.atomics.insert(w.0, (page, offset, seen));
                if let Err(e) = s.protocol.atomic(page, offset, call, w.0) {
                    s.atomics.remove(&w.0);
                    s.wake(w, Reply::Failed(e.into()));
                }
            };
            if release {
                s.release_then(ep, Box::new(go));
            } else {
                go(s, ep);
            }
        })?;
        match r {
            Reply::Value(v) => Ok(v),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to an atomic".into())),
        }
    }

    /// A fence with C11 ordering `order` (`atomic_thread_fence`): a release fence makes this
    /// node's writes visible at their homes (`begin_release`), an acquire fence is a no-op
    /// beyond the CPU's (acquires happen at the acquiring atomics themselves; see
    /// docs/memory-model.md for what a fence can and cannot order across nodes).
    pub fn fence(&self, order: MemOrder) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let (acquire, release) = order.acquire_release();
        if release {
            let (tx, rx) = bounded(1);
            let r = self.call("fence", move |s, ep, w| {
                s.release_then(
                    ep,
                    Box::new(move |s, _| {
                        let _ = tx.send(s.protocol.grant_info(&[]));
                        s.wake(w, Reply::Value(0))
                    }),
                )
            })?;
            if let Reply::Failed(e) = r {
                return Err(e);
            }
            let info = rx.recv().map_err(|_| SquallError::ShuttingDown)?;
            order::set_fence_info(info);
        }
        if acquire {
            for (addr, width) in order::take_relaxed_reads() {
                self.atomic_ordered(addr, width, AtomicOp::Load, MemOrder::Acquire)?;
            }
        }
        Ok(())
    }
}

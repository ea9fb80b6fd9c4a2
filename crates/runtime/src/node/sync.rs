//! Synchronization through the sync core: barriers, locks (with the lock cache fast path),
//! conditions and flags, timed as sync time; and how an application thread waits for the
//! end of any service call (`wait_woken`: polling the network itself for a bounded spin, so a
//! lock grant or a barrier release is read and handled by the thread it wakes). Must not touch
//! the heap or threads.
//!
//! The rule: never hold the service lock while blocking. A waiting thread takes it only
//! inside the handling of one message it read (as the service thread's handlers do), never
//! across a look at the network, a yield or the sleep on its wake-up channel.

use super::{my_waiter, Node};
use crate::error::{Result, SquallError};
use crate::failure;
use crate::msg;
use crate::service::{Reply, Service};
use crossbeam_channel::{Receiver, TryRecvError};
use parking_lot::Mutex;
use squall_core::LockId;
use squall_net::{Endpoint, Incoming, MsgType};
use squall_sync::{BarrierCount, BarrierId, CondId, FlagId, Outcome, SyncError};

/// What an application thread waiting for a message takes from the network itself
/// ([`squall_net::Endpoint::poll_once`]): synchronization and protocol messages.
pub(super) fn claims(ty: MsgType) -> bool {
    ty == msg::SYNC || ty == msg::PROTO
}

/// Handle one message [`claims`] took, under the service lock (as the service thread's
/// handlers do).
pub(super) fn handle_claimed(svc: &Mutex<Service>, ep: &Endpoint, m: Incoming) {
    let mut s = svc.lock();
    if m.ty == msg::SYNC {
        s.on_sync_message(ep, m.src, &m.payload);
    } else {
        s.on_protocol_message(ep, m.src, &m.payload);
    }
}

impl Node {
    /// Waits for this thread's wake-up from a service call (`Node::call`). For the endpoint's
    /// reply spin (`SQUALL_REPLY_SPIN_US`) the thread, idle anyway, first polls the network
    /// itself ([`squall_net::Endpoint::poll_once`]), yielding the CPU between looks: the
    /// protocol and sync messages it reads (a lock grant, a barrier release, the write notices
    /// before them) it handles here, under the service lock taken per message exactly as the
    /// service thread's handlers take it, and the wake-up they produce is then already in
    /// `rx`: no wake-up of the service thread nor of this one. After the window (or if the
    /// network cannot be polled from here) it sleeps on `rx`.
    ///
    /// Never holds the service lock while blocking (see the module doc): `poll_once` runs the
    /// handler with the lock taken and released inside it, and the yield and the sleep happen
    /// with no lock held.
    pub(super) fn wait_woken(&self, rx: &Receiver<Reply>) -> Result<Reply> {
        let svc = &self.inner.svc;
        let mut handle = |ep: &squall_net::Endpoint, m| handle_claimed(svc, ep, m);
        let woken = self
            .inner
            .ep
            .wait_polling(&claims, &mut handle, || match rx.try_recv() {
                Ok(r) => Some(Ok(r)),
                Err(TryRecvError::Disconnected) => Some(Err(SquallError::ShuttingDown)),
                Err(TryRecvError::Empty) => None,
            });
        if let Some(r) = woken {
            return r;
        }
        rx.recv().map_err(|_| SquallError::ShuttingDown)
    }

    /// The barriers of `finalize`: not application synchronization, so not timed as such.
    pub(super) fn end_barrier(&self) -> Result<()> {
        let r = self.call("finalize", move |s, _, w| {
            s.sync.barrier(
                &mut *s.protocol,
                BarrierId(0),
                w,
                BarrierCount::PerNode { local: 1 },
            )
        })?;
        match r {
            Reply::Sync(r) => r.map(|_| ()).map_err(Into::into),
            Reply::Failed(e) => Err(e),
            Reply::Value(_) => Ok(()),
        }
    }

    /// Barrier of every node, with one participating thread per node.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_with(BarrierId(0), BarrierCount::PerNode { local: 1 })
            .map(|_| ())
    }

    /// A barrier with an explicit id and participant count. Returns `true` in exactly one
    /// thread of the job per episode.
    ///
    /// A count of zero is refused on this node alone (the call is not counted anywhere). A
    /// count that contradicts the episode's (another thread or node arrived with a different
    /// one, or more threads than the total arrived) means the episode can never complete on
    /// any node: it ends the job, every node printing this node and the cause
    /// (`crate::failure`), instead of leaving the other participants waiting.
    pub fn barrier_with(&self, id: BarrierId, count: BarrierCount) -> Result<bool> {
        // One-sided operations this node issued complete before the barrier (memory-model.md).
        crate::gptr::quiet_before_barrier()?;
        let t0 = self.profiling().then(|| self.inner.prof.now_ns());
        let r = self.sync_call("barrier", move |s, _, w| {
            s.sync.barrier(&mut *s.protocol, id, w, count)
        });
        if let Some(t0) = t0 {
            let serial = matches!(r, Ok(Outcome::Serial));
            self.inner.prof.barrier(id.0, t0, serial);
        }
        match r {
            Ok(o) => Ok(o == Outcome::Serial),
            Err(SquallError::Sync(e @ SyncError::BarrierMismatch { .. })) => failure::end_job(
                Some(&self.inner.ep),
                self.rank(),
                &format!("synchronization: {e}"),
            ),
            Err(e) => Err(e),
        }
    }

    /// Acquire a global lock (FIFO across nodes). When the lock's token is idle on this node
    /// (the last holder was a thread of this node and no other node asked for it since), the
    /// lock cache takes it with one compare-and-swap, without the service lock (counted in
    /// `lock_acquires_local_fast`, not timed as sync time).
    #[inline]
    pub fn lock(&self, lock: LockId) -> Result<()> {
        if self.lock_fast(lock) {
            return Ok(());
        }
        self.lock_slow(lock)
    }

    /// Only the fast path of [`Node::lock`]: take `lock` if its token is idle in this node's
    /// lock cache (one compare-and-swap, no service lock, no allocation, never blocks);
    /// `false`: call [`Node::lock`].
    #[inline]
    pub fn lock_fast(&self, lock: LockId) -> bool {
        let ok = self.inner.fast.try_lock(lock.0, my_waiter().0);
        if ok && self.profiling() {
            let p = &self.inner.prof;
            p.acquired(lock.0, p.now_ns(), false);
        }
        ok
    }

    /// Only the fast path of [`Node::unlock`]: put `lock`, taken through the lock cache by
    /// this thread, back when nobody waits for it; `false`: call [`Node::unlock`].
    #[inline]
    pub fn unlock_fast(&self, lock: LockId) -> bool {
        let ok = self.inner.fast.try_unlock(lock.0, my_waiter().0);
        if ok && self.profiling() {
            self.inner.prof.released(lock.0);
        }
        ok
    }

    /// Profiling: when a slow lock call starts, and the node's remote acquisitions so far.
    fn lock_probe(&self) -> Option<(u64, u64)> {
        self.profiling().then(|| {
            let remote = self.inner.svc.lock().sync.remote_acquires();
            (self.inner.prof.now_ns(), remote)
        })
    }

    /// Profiling: a slow lock call that started at `probe` acquired `lock`.
    fn lock_acquired(&self, lock: LockId, probe: Option<(u64, u64)>) {
        if let Some((t0, remote)) = probe {
            let now_remote = self.inner.svc.lock().sync.remote_acquires();
            self.inner.prof.acquired(lock.0, t0, now_remote > remote);
        }
    }

    #[cold]
    pub(super) fn lock_slow(&self, lock: LockId) -> Result<()> {
        let probe = self.lock_probe();
        self.sync_call("lock", move |s, _, w| {
            s.sync.lock(&mut *s.protocol, lock, w)
        })?;
        self.lock_acquired(lock, probe);
        Ok(())
    }

    /// Try to acquire a global lock without waiting; `true` if it is now held.
    pub fn trylock(&self, lock: LockId) -> Result<bool> {
        if self.lock_fast(lock) {
            return Ok(true);
        }
        let probe = self.lock_probe();
        let o = self.sync_call("trylock", move |s, _, w| {
            s.sync.trylock(&mut *s.protocol, lock, w)
        })?;
        if o != Outcome::Busy {
            self.lock_acquired(lock, probe);
        }
        Ok(o != Outcome::Busy)
    }

    /// Release a global lock held by this thread: back into the lock cache with one
    /// compare-and-swap when it was taken there and no other node or thread waits for it.
    #[inline]
    pub fn unlock(&self, lock: LockId) -> Result<()> {
        if self.unlock_fast(lock) {
            return Ok(());
        }
        self.unlock_slow(lock)
    }

    #[cold]
    pub(super) fn unlock_slow(&self, lock: LockId) -> Result<()> {
        self.sync_call("unlock", move |s, _, w| {
            s.sync.unlock(&mut *s.protocol, lock, w)
        })?;
        if self.profiling() {
            self.inner.prof.released(lock.0);
        }
        Ok(())
    }

    /// Check that `lock` may be destroyed: no thread of this node holds it or waits for it
    /// (misuse is an error naming the lock).
    pub fn lock_destroy(&self, lock: LockId) -> Result<()> {
        self.sync_call("lock_destroy", move |s, _, w| s.sync.destroy_lock(lock, w))
            .map(|_| ())
    }

    /// Check that `cond` may be destroyed: no thread of this node waits on it.
    pub fn cond_destroy(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_destroy", move |s, _, w| s.sync.destroy_cond(cond, w))
            .map(|_| ())
    }

    /// Wait on a condition variable bound to `lock` (held by this thread); Mesa semantics.
    pub fn cond_wait(&self, cond: CondId, lock: LockId) -> Result<()> {
        self.sync_call("cond_wait", move |s, _, w| {
            s.sync.cond_wait(&mut *s.protocol, cond, lock, w)
        })
        .map(|_| ())
    }

    /// Wake one waiter of `cond`.
    pub fn cond_signal(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_signal", move |s, _, w| {
            s.sync.cond_signal(&mut *s.protocol, cond, w)
        })
        .map(|_| ())
    }

    /// Wake every waiter of `cond`.
    pub fn cond_broadcast(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_broadcast", move |s, _, w| {
            s.sync.cond_broadcast(&mut *s.protocol, cond, w)
        })
        .map(|_| ())
    }

    /// Set a flag (a release); wakes every waiter.
    pub fn flag_set(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_set", move |s, _, w| {
            s.sync.flag_set(&mut *s.protocol, flag, w)
        })
        .map(|_| ())
    }

    /// Wait until a flag is set (an acquire), without spinning on shared memory.
    pub fn flag_wait(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_wait", move |s, _, w| {
            s.sync.flag_wait(&mut *s.protocol, flag, w)
        })
        .map(|_| ())
    }

    /// Clear a flag.
    pub fn flag_clear(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_clear", move |s, _, w| s.sync.flag_clear(flag, w))
            .map(|_| ())
    }
}

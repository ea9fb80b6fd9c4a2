//! The MPI backend's unsafe parts (feature `mpi`): one `MPI_Irecv` (any source, any tag)
//! kept posted into a buffer this module owns, tested with `MPI_Test`; the blocking send of
//! a small message ([`send`]); `MPI_TAG_UB` ([`tag_ub`]); the communicator lent to MPI code
//! beside Squall ([`OwnComm`]); and the MPI lock itself ([`MpiLock`]). Owns that buffer,
//! request, communicator and lock and nothing else; the MPI calls must only be made under the lock
//! (`MPI_THREAD_SERIALIZED`), and nothing here decides anything about frames.
//!
//! Why a posted receive: a message that arrives is matched to it inside the progress call that
//! pulls the message in, so one `MPI_Test` both progresses and completes it, as `MPI_Recv` does
//! for a raw MPI program; `MPI_Improbe` matches before it progresses, so a message is found one
//! call later and every empty probe allocates and frees a request. rsmpi's safe requests borrow
//! their buffer for a scope and cannot stay posted across calls, hence the direct calls below.
//!
//! Ordering: MPI matches a newly posted receive against the oldest unexpected message first, and
//! messages from one sender match posted receives in the order they were sent, so receiving
//! every message (headerless or framed) through this one receive keeps each sender's order.
//! The one message it must not take, the body behind a split header (larger than its
//! buffer), is received by its own `MPI_Recv` before this receive is posted again.
#![allow(unsafe_code)]

use ::mpi::datatype::Equivalence;
use ::mpi::ffi;
use ::mpi::raw::AsRaw;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// The lock around every MPI call: a flag taken with one atomic swap and released with a plain
/// store (a general mutex spends a second locked instruction on the release, to look for
/// sleepers). Almost every taker uses [`MpiLock::try_lock`] and does something else when it
/// is busy; [`MpiLock::lock`] (the progress thread's queued sends, finalisation) spins briefly
/// and then yields its core until it gets it.
pub(crate) struct MpiLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (`held` is taken with an acquire swap and released with a release store), so the lock hands
// `T` from thread to thread like a mutex does.
unsafe impl<T: Send> Sync for MpiLock<T> {}

/// Access to the value of a held [`MpiLock`]; released when dropped.
pub(crate) struct MpiGuard<'a, T> {
    lock: &'a MpiLock<T>,
}

impl<T> MpiLock<T> {
    pub(crate) fn new(value: T) -> MpiLock<T> {
        MpiLock {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The lock if it is free now.
    pub(crate) fn try_lock(&self) -> Option<MpiGuard<'_, T>> {
        if self.held.load(Ordering::Relaxed) || self.held.swap(true, Ordering::Acquire) {
            return None;
        }
        Some(MpiGuard { lock: self })
    }

    /// Waits for the lock (spinning a little, then yielding the core between tries).
    pub(crate) fn lock(&self) -> MpiGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl<T> Deref for MpiGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Sync` above) and lives no longer than the
        // lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for MpiGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for MpiGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

/// One blocking `MPI_Send` of `buf` to rank `to` of `MPI_COMM_WORLD` with `tag`, straight
/// through the C binding: rsmpi's safe path builds a communicator handle and asks MPI for the
/// world's size (to check the rank) on every call, which showed in the per-message profile.
/// The caller holds the MPI lock and has checked that `to` is a rank of the job and that MPI is
/// not finalised; `buf` is at most `i32::MAX` bytes.
pub(crate) fn send(buf: &[u8], to: i32, tag: i32) {
    let count = i32::try_from(buf.len()).unwrap_or(i32::MAX);
    // SAFETY: MPI is initialised and not finalised (the caller checked under the MPI lock);
    // `buf` is valid for reads of `count` bytes for the whole (blocking) call.
    unsafe {
        ffi::MPI_Send(
            buf.as_ptr().cast(),
            count,
            u8::equivalent_datatype().as_raw(),
            to,
            tag,
            ffi::RSMPI_COMM_WORLD,
        );
    }
}

/// `MPI_TAG_UB` of `MPI_COMM_WORLD` (the largest tag a message may carry), or 0 if MPI does
/// not report it. The caller holds the MPI lock (or is the thread that initialised MPI, before
/// any other thread may call it), MPI not finalised.
pub(crate) fn tag_ub() -> i32 {
    let mut value: *mut i32 = std::ptr::null_mut();
    let mut flag = 0;
    // SAFETY: MPI is initialised; for MPI_TAG_UB, MPI stores a pointer to its own `int`
    // (valid until finalisation) into `value` and sets `flag` if the attribute exists.
    unsafe {
        ffi::MPI_Comm_get_attr(
            ffi::RSMPI_COMM_WORLD,
            ffi::MPI_TAG_UB as i32,
            (&mut value as *mut *mut i32).cast(),
            &mut flag,
        );
        if flag == 0 || value.is_null() {
            return 0;
        }
        *value
    }
}

/// Where the posted receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not posted (before first use, after completion until released, after cancel).
    Idle,
    /// Posted; `req` is live and MPI may write the buffer.
    Posted,
    /// Completed: the buffer holds a message of `len` bytes from rank `src` with `tag`.
    Done { src: i32, tag: i32, len: usize },
}

/// One receive kept posted for messages of any tag from any source.
pub(crate) struct PostedRecv {
    /// The receive's buffer: `max` bytes of capacity while posted (length 0: MPI writes the
    /// spare capacity), the message's length once completed. Handed away by
    /// [`PostedRecv::take`]; the next post then allocates a new one (off the latency path).
    buf: Vec<u8>,
    max: usize,
    req: ffi::MPI_Request,
    state: State,
}

// SAFETY: the request handle is only touched under the backend's MPI lock (one thread at a
// time, `MPI_THREAD_SERIALIZED`), and the buffer is owned here; moving the pair to another
// thread is what that lock already does.
unsafe impl Send for PostedRecv {}

/// A duplicate of the world communicator, lent to MPI code running beside Squall (under the
/// MPI lock: [`crate::Endpoint::with_mpi`]); its messages can never match Squall's receive.
pub(crate) struct OwnComm(pub(crate) ::mpi::topology::SimpleCommunicator);

// SAFETY: the handle is only used under the backend's MPI lock (one thread at a time,
// `MPI_THREAD_SERIALIZED`) and freed under it before `MPI_Finalize`; moving it to another
// thread is what that lock already does.
unsafe impl Send for OwnComm {}

impl PostedRecv {
    /// A receive for messages of any tag up to `max` bytes (larger ones are an MPI error: the
    /// senders must split them). Posted at the first [`PostedRecv::test`].
    pub(crate) fn new(max: usize) -> PostedRecv {
        PostedRecv {
            buf: Vec::with_capacity(max),
            max,
            // SAFETY: reading a constant the MPI library exports.
            req: unsafe { ffi::RSMPI_REQUEST_NULL },
            state: State::Idle,
        }
    }

    fn post(&mut self) {
        self.buf.clear();
        if self.buf.capacity() < self.max {
            self.buf = Vec::with_capacity(self.max);
        }
        let count = i32::try_from(self.max).unwrap_or(i32::MAX);
        // SAFETY: MPI is initialised and not finalised (the caller holds the MPI lock); the
        // buffer is owned by `self`, has `count` bytes of capacity, and is neither read, moved
        // out nor dropped while the receive is posted (`Drop` and `cancel` complete the request
        // first; `take` only takes a completed one); `req` outlives the call.
        unsafe {
            ffi::MPI_Irecv(
                self.buf.as_mut_ptr().cast(),
                count,
                u8::equivalent_datatype().as_raw(),
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                ffi::RSMPI_COMM_WORLD,
                &mut self.req,
            );
        }
        self.state = State::Posted;
    }

    /// Posts the receive (on `MPI_COMM_WORLD`) if needed, then tests it (which progresses
    /// MPI): the source rank, tag and length of the message now in the buffer, until
    /// [`PostedRecv::release`]. The caller holds the MPI lock, MPI not finalised.
    pub(crate) fn test(&mut self) -> Option<(i32, i32, usize)> {
        match self.state {
            State::Done { src, tag, len } => return Some((src, tag, len)),
            State::Idle => self.post(),
            State::Posted => {}
        }
        let mut flag = 0;
        let mut status = MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: `req` is a live request posted by `post`; `flag` and `status` are valid for
        // writes; MPI sets `req` to MPI_REQUEST_NULL when it completes.
        let status = unsafe {
            ffi::MPI_Test(&mut self.req, &mut flag, status.as_mut_ptr());
            if flag == 0 {
                return None;
            }
            status.assume_init()
        };
        let mut count = 0;
        // SAFETY: `status` was filled in by the completed MPI_Test.
        unsafe {
            ffi::MPI_Get_count(&status, u8::equivalent_datatype().as_raw(), &mut count);
        }
        let len = usize::try_from(count).unwrap_or(0).min(self.max);
        // SAFETY: the completed receive wrote `len` bytes (at most its `max`, the buffer's
        // capacity) at the start of the buffer.
        unsafe { self.buf.set_len(len) };
        self.state = State::Done {
            src: status.MPI_SOURCE,
            tag: status.MPI_TAG,
            len,
        };
        Some((status.MPI_SOURCE, status.MPI_TAG, len))
    }

    /// The message a completed [`PostedRecv::test`] reported.
    pub(crate) fn data(&self) -> &[u8] {
        match self.state {
            State::Done { .. } => &self.buf,
            _ => &[],
        }
    }

    /// Done with the message in the buffer. The receive is posted again by the next
    /// [`PostedRecv::test`] (from whichever thread holds the MPI lock next), not here: the
    /// repost (a request allocation and a search of MPI's unexpected messages) then happens
    /// after the handler of this message has run and sent its answer, off the latency path.
    /// A message arriving meanwhile waits in MPI's unexpected queue, and a new receive matches
    /// the oldest of those first, so order is kept.
    pub(crate) fn release(&mut self) {
        if matches!(self.state, State::Done { .. }) {
            self.buf.clear();
            self.state = State::Idle;
        }
    }

    /// Like [`PostedRecv::release`], but hands the message's buffer over (its capacity is the
    /// receive's whole size; a new buffer is allocated when the receive is posted again).
    /// Empty if no message is here.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        match self.state {
            State::Done { .. } => {
                self.state = State::Idle;
                std::mem::take(&mut self.buf)
            }
            _ => Vec::new(),
        }
    }

    /// Withdraws a posted receive (before `MPI_Finalize`): cancelled, or completed if a message
    /// matched it meanwhile (that message is dropped: the node is finishing).
    pub(crate) fn cancel(&mut self) {
        if self.state != State::Posted {
            self.state = State::Idle;
            self.buf.clear();
            return;
        }
        let mut status = MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: `req` is live (state Posted); MPI_Wait returns once it is cancelled or
        // complete and sets it to MPI_REQUEST_NULL, after which MPI no longer touches `buf`.
        unsafe {
            ffi::MPI_Cancel(&mut self.req);
            ffi::MPI_Wait(&mut self.req, status.as_mut_ptr());
        }
        self.state = State::Idle;
    }
}

impl Drop for PostedRecv {
    fn drop(&mut self) {
        if self.state == State::Posted {
            // Dropped while posted (the owner must cancel before MPI_Finalize): the buffer must
            // outlive the request, so it is leaked rather than freed under MPI's feet.
            let buf = std::mem::take(&mut self.buf);
            std::mem::forget(buf);
        }
    }
}

//! The MPI backend's shared-memory window (feature `mpi`): between ranks on the same machine a
//! message does not go through MPI point-to-point but through a ring ([`super::mpi_ring`]) in
//! an MPI-3 shared-memory window (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`, then
//! `MPI_Win_allocate_shared`, one passive-target epoch for the window's life). Each rank's
//! segment holds one ring per other rank of its machine, written by that rank alone and read
//! by the owner alone. Owns the window and which ring belongs to which rank; must not decode
//! frames or decide which messages go where (that is [`super::mpi`]). Every call is made
//! under the backend's MPI lock (the one that serialises MPI calls), which is also what makes
//! each ring's writer and reader single.
//!
//! Why: an MPI point-to-point message between two processes of one machine costs the matching
//! machinery (a posted request, the unexpected queue, the progress engine's other callbacks)
//! on both sides; a ring costs the cache line its record occupies. The issue allows one-sided
//! operations where measured faster, and MPI-3 shared-memory windows are MPI's own answer for
//! ranks that share memory.
#![allow(unsafe_code)]

use super::mpi_ring::{ring_bytes, slot, Reader, Ring, Writer};
use ::mpi::datatype::Equivalence;
use ::mpi::ffi;
use ::mpi::raw::AsRaw;
use std::mem::MaybeUninit;

/// The window and this rank's ends of the rings to and from the other ranks of its machine.
pub(crate) struct Shm {
    win: ffi::MPI_Win,
    comm: ffi::MPI_Comm,
    /// By rank in `MPI_COMM_WORLD`: the ring to that rank, if it is on this machine.
    tx: Vec<Option<Writer>>,
    /// The rings from the other ranks of this machine.
    pub(crate) rx: Vec<Reader>,
}

// SAFETY: the raw pointers point into the window, which lives until `free` (and the whole
// `Shm` is only used under the backend's MPI lock, one thread at a time), and the MPI handles
// are used under that same lock (`MPI_THREAD_SERIALIZED`).
unsafe impl Send for Shm {}

impl Shm {
    /// Creates the window over the ranks of this machine (collective over `MPI_COMM_WORLD`:
    /// every rank calls it, with the same `enabled`). None when disabled or when this rank is
    /// alone on its machine. Caller: the thread that initialised MPI, before any other MPI call
    /// can happen; `world_rank` of `world_size`.
    ///
    /// `groups` > 1 (testing): the ranks of a machine are split further by world rank modulo
    /// `groups`, so one machine stands for several and both paths run side by side.
    pub(crate) fn create(world_rank: i32, world_size: i32, groups: i32) -> Option<Shm> {
        let int = i32::equivalent_datatype().as_raw();
        let mut comm = MaybeUninit::<ffi::MPI_Comm>::uninit();
        let (mut n, mut me) = (0, 0);
        // SAFETY: MPI is initialised; `comm`, `n` and `me` are valid for writes; the split is
        // collective over MPI_COMM_WORLD, which every rank calls here.
        let comm = unsafe {
            ffi::MPI_Comm_split_type(
                ffi::RSMPI_COMM_WORLD,
                ffi::RSMPI_COMM_TYPE_SHARED,
                world_rank,
                ffi::RSMPI_INFO_NULL,
                comm.as_mut_ptr(),
            );
            let mut comm = comm.assume_init();
            if groups > 1 {
                let mut machine = comm;
                let mut part = MaybeUninit::<ffi::MPI_Comm>::uninit();
                ffi::MPI_Comm_split(machine, world_rank % groups, world_rank, part.as_mut_ptr());
                ffi::MPI_Comm_free(&mut machine);
                comm = part.assume_init();
            }
            ffi::MPI_Comm_size(comm, &mut n);
            ffi::MPI_Comm_rank(comm, &mut me);
            comm
        };
        let (Ok(n), Ok(me)) = (usize::try_from(n), usize::try_from(me)) else {
            return None;
        };
        let mut comm_mut = comm;
        if n < 2 {
            // SAFETY: `comm` is a communicator this rank created above.
            unsafe { ffi::MPI_Comm_free(&mut comm_mut) };
            return None;
        }
        let cap = ring_bytes(n - 1);
        let slot = slot(cap);
        let mut world_of = vec![0i32; n];
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut win = MaybeUninit::<ffi::MPI_Win>::uninit();
        // SAFETY: collective over `comm`; the buffers are valid for `n` ints / one pointer /
        // one handle; the window's memory stays valid until `free`.
        let win = unsafe {
            ffi::MPI_Allgather(
                (&world_rank as *const i32).cast(),
                1,
                int,
                world_of.as_mut_ptr().cast(),
                1,
                int,
                comm,
            );
            ffi::MPI_Win_allocate_shared(
                (n * slot) as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm,
                (&mut base as *mut *mut u8).cast(),
                win.as_mut_ptr(),
            );
            win.assume_init()
        };
        let mut segment = vec![std::ptr::null_mut::<u8>(); n];
        for (j, seg) in segment.iter_mut().enumerate() {
            let (mut size, mut unit) = (0 as ffi::MPI_Aint, 0);
            // SAFETY: `j` is a rank of the window's group; MPI writes that rank's segment
            // address into `seg`.
            unsafe {
                ffi::MPI_Win_shared_query(
                    win,
                    j as i32,
                    &mut size,
                    &mut unit,
                    (seg as *mut *mut u8).cast(),
                );
            }
        }
        // Each ring starts zeroed, by its writer: the lines are then in the writer's cache
        // when its first lap begins. (Zeroed by the owner, they were dirty in the reader's
        // cache, and the writer's first lap fetched every line from there: 4 KiB messages
        // took 5 µs a round trip instead of 1.5 until the ring had gone round once.) Nobody
        // touches a ring before the barrier; the barrier orders the zeroes before any use.
        for (j, seg) in segment.iter().enumerate() {
            if j != me {
                // SAFETY: ring `me` of segment `j` (`n * slot` bytes each) is this rank's to
                // write, and nobody else uses it before the barrier below.
                unsafe { std::ptr::write_bytes(seg.add(me * slot), 0, slot) };
            }
        }
        // SAFETY: the window is live, its epoch opened once; collective over `comm`.
        unsafe {
            ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as i32, win);
            ffi::MPI_Win_sync(win);
            ffi::MPI_Barrier(comm);
            ffi::MPI_Win_sync(win);
        }
        // SAFETY: `from < n`, and each segment is `n * slot` bytes, zeroed before the barrier,
        // at the window's (page-aligned) segment starts plus multiples of `slot` (a multiple of
        // 64); the window lives until `free`, which consumes the rings' owner; each ring has one
        // writer (rank `from`) and one reader (rank `owner`), each under its MPI lock.
        let ring =
            |owner: usize, from: usize| unsafe { Ring::new(segment[owner].add(from * slot), cap) };
        let mut tx: Vec<Option<Writer>> = (0..world_size).map(|_| None).collect();
        let mut rx = Vec::new();
        for (j, &w) in world_of.iter().enumerate() {
            if j == me {
                continue;
            }
            if let Some(slot) = usize::try_from(w).ok().and_then(|i| tx.get_mut(i)) {
                *slot = Some(Writer::new(ring(j, me)));
            }
            rx.push(Reader::new(w, ring(me, j)));
        }
        Some(Shm { win, comm, tx, rx })
    }

    /// Appends one message to the ring to world rank `to` (see [`Writer::write`]; `wait` gets
    /// the rings from this machine, to make room by reading them); None if `to` is not on this
    /// machine.
    pub(crate) fn send(
        &mut self,
        to: i32,
        tag: i32,
        parts: &[&[u8]],
        wait: &mut dyn FnMut(&mut [Reader]) -> bool,
    ) -> Option<bool> {
        let w = usize::try_from(to)
            .ok()
            .and_then(|i| self.tx.get_mut(i))?
            .as_mut()?;
        let rx = &mut self.rx;
        Some(w.write(tag, parts, &mut || wait(rx)))
    }

    /// Ranks of the job not on this machine (reached through MPI point-to-point).
    pub(crate) fn remote_ranks(&self) -> usize {
        self.tx
            .iter()
            .filter(|t| t.is_none())
            .count()
            .saturating_sub(1)
    }

    /// Ends the epoch and frees the window (collective over this machine's ranks: every one
    /// must call it, so only when all of them said goodbye). Caller holds the MPI lock.
    pub(crate) fn free(self) {
        let (mut win, mut comm) = (self.win, self.comm);
        // SAFETY: the window and communicator were created by `create` and are freed once
        // (`self` is consumed); no ring is used afterwards (the rings live in `self`).
        unsafe {
            ffi::MPI_Win_unlock_all(win);
            ffi::MPI_Win_free(&mut win);
            ffi::MPI_Comm_free(&mut comm);
        }
    }
}

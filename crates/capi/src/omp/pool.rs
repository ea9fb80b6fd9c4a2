//! The thread pool of outermost parallel regions: the threads of a team opened at level 0
//! stay alive between regions and wait in a Squall barrier for the next one, so a region's
//! start and end are one barrier each instead of n−1 thread creations and joins.
//!
//! Only main's outermost regions use it (regions opened by other threads, and nested ones,
//! start and join their threads each time); it is kept while successive regions ask for the
//! same team size and placement (another size ends it and starts a new one). Its block in the shared heap holds the current team descriptor's
//! address and the thread records. Region start: the opener writes the descriptor and its
//! address, then arrives at the pool's start barrier (a release; the threads' departures are
//! acquires, so the region's data is visible to them); region end: everyone arrives at the
//! end barrier (the threads' writes reach the opener). A null descriptor ends the threads;
//! the opener joins them (also from `atexit` for main's pool, before the node finalizes).
//!
//! Owns: pool threads and the pool block. Must not touch: region semantics (`team`).
use super::team::{alloc_desc, barrier_count, free_desc, member, place};
use super::{icv, run};
use crate::api::{self, node_ref};
use crate::error::CapiError;
use crate::pthread::object_id;
use squall::{BarrierId, NodeId};
use std::cell::Cell;
use std::ffi::c_void;

/// The pool block: the current descriptor, then one record per thread.
#[repr(C)]
struct Block {
    desc: usize,
    n: usize,
    /// The opener's node and the placement (how the pool's barriers count arrivals).
    opener: u32,
    bind: u32,
}

#[repr(C)]
struct Record {
    block: usize,
    tid: usize,
}

struct Pool {
    block: usize,
    /// The team descriptor every region of the pool uses.
    team: usize,
    n: u32,
    bind: u32,
    threads: Vec<u64>,
}

thread_local! {
    /// The calling thread's pool (a leaked `Box<Pool>`, 0 for none): a plain word, so it is
    /// still readable from `atexit`, after the thread's TLS destructors ran.
    static POOL: Cell<usize> = const { Cell::new(0) };
}

fn take() -> Option<Box<Pool>> {
    match POOL.with(|p| p.replace(0)) {
        0 => None,
        // SAFETY: a pointer from Box::into_raw in `start_region`, taken out once.
        p => Some(unsafe { Box::from_raw(p as *mut Pool) }),
    }
}

fn with_pool<R>(f: impl FnOnce(Option<&Pool>) -> R) -> R {
    match POOL.with(Cell::get) {
        0 => f(None),
        // SAFETY: the live pool of this thread (only this thread touches it).
        p => f(Some(unsafe { &*(p as *const Pool) })),
    }
}

fn start_id(block: usize) -> BarrierId {
    BarrierId(object_id(block + 1))
}

fn end_id(block: usize) -> BarrierId {
    BarrierId(object_id(block + 2))
}

/// The pool's start or end barrier of block `block` (its `n` threads; one arrival per node
/// when the pool has a thread on every node, see `team::barrier_count`).
fn wait(block: usize, id: BarrierId, n: u32) -> Result<(), CapiError> {
    // SAFETY: the block header, written before any pool thread was created.
    let (opener, bind) = unsafe {
        (
            (*(block as *const Block)).opener,
            (*(block as *const Block)).bind,
        )
    };
    let count = barrier_count(opener as u16, n, bind)?;
    node_ref()?.barrier_with(id, count)?;
    Ok(())
}

/// The calling thread's pool for a team of `n` threads placed by `bind` (made, or remade
/// when the size or placement changed): its block and its team descriptor.
pub fn prepare(n: u32, bind: u32) -> Result<(usize, usize), CapiError> {
    let fits = with_pool(|p| p.map(|p| p.n == n && p.bind == bind));
    if fits == Some(false) {
        shutdown()?;
    }
    if fits != Some(true) {
        let pool = Box::new(create(n, bind)?);
        POOL.with(|p| p.set(Box::into_raw(pool) as usize));
    }
    Ok(with_pool(|p| p.map_or((0, 0), |p| (p.block, p.team))))
}

/// Start a region whose descriptor is written: the opener's arrival at the start barrier.
pub fn start_region(block: usize, n: u32) -> Result<(), CapiError> {
    let team = with_pool(|p| p.map_or(0, |p| p.team));
    // SAFETY: the live pool block; the threads read it only after the start barrier.
    unsafe { (*(block as *mut Block)).desc = team };
    wait(block, start_id(block), n)
}

/// The end of a region: every thread of the pool arrives.
pub fn end_region(block: usize, n: u32) -> Result<(), CapiError> {
    wait(block, end_id(block), n)
}

fn create(n: u32, bind: u32) -> Result<Pool, CapiError> {
    let node = node_ref()?;
    let bytes = std::mem::size_of::<Block>() + n as usize * std::mem::size_of::<Record>();
    let block = node.calloc(1, bytes)? as usize;
    let team = alloc_desc()?;
    // SAFETY: the block was just allocated with room for the header and n records.
    unsafe {
        let b = &mut *(block as *mut Block);
        b.n = n as usize;
        b.opener = u32::from(node.rank().0);
        b.bind = bind;
    }
    let records = (block + std::mem::size_of::<Block>()) as *mut Record;
    let stack = icv::defaults().stack;
    let mut threads = Vec::with_capacity(n as usize - 1);
    for t in 1..n {
        // SAFETY: inside the block (n records).
        let r = unsafe { records.add(t as usize) };
        // SAFETY: as above.
        unsafe {
            r.write(Record {
                block,
                tid: t as usize,
            })
        };
        let on = place(node.rank().0, node.size(), t, n, bind);
        threads.push(
            node.spawn_with(Some(NodeId(on)), pool_thread, r.cast(), stack)?
                .0,
        );
    }
    Ok(Pool {
        block,
        team,
        n,
        bind,
        threads,
    })
}

/// End the calling thread's pool: a null descriptor, then join its threads.
fn shutdown() -> Result<(), CapiError> {
    let Some(pool) = take() else {
        return Ok(());
    };
    // SAFETY: the live pool block.
    unsafe { (*(pool.block as *mut Block)).desc = 0 };
    wait(pool.block, start_id(pool.block), pool.n)?;
    for t in pool.threads {
        api::join(t)?;
    }
    node_ref()?.free(pool.block as *mut u8)?;
    free_desc(pool.team)
}

/// End the calling thread's pool, if any (called when main returns); a failure is printed.
pub fn shutdown_at_main_end() {
    if POOL.with(Cell::get) != 0 {
        crate::error::guard(
            "ending the OpenMP thread pool",
            |_| super::fatal("thread pool end"),
            shutdown,
        );
    }
}

/// A pool thread: one region per start barrier until the descriptor is null.
extern "C" fn pool_thread(arg: *mut c_void) -> *mut c_void {
    let (block, tid, n) = run("OpenMP pool thread", || {
        // SAFETY: `arg` is this thread's record in the live pool block.
        let r = unsafe { &*(arg as *const Record) };
        // SAFETY: the block header, written before this thread was created.
        let n = unsafe { (*(r.block as *const Block)).n } as u32;
        Ok((r.block, r.tid as u32, n))
    });
    loop {
        let team = run("OpenMP pool thread", || {
            wait(block, start_id(block), n)?;
            // SAFETY: the descriptor word, written before the start barrier.
            Ok(unsafe { std::ptr::read_volatile(&(*(block as *const Block)).desc) })
        });
        if team == 0 {
            return std::ptr::null_mut();
        }
        member(team, tid);
        run("OpenMP pool thread", || wait(block, end_id(block), n));
    }
}

//! Parallel regions: `GOMP_parallel` (and the old `_start`/`_end` pair), the team descriptor
//! in Squall memory, where team threads run (placement over the nodes), team barriers, and
//! the worksharing slots the other modules hand out work through.
//!
//! A region of T > 1 threads: the opening thread (thread 0) writes a descriptor into the
//! shared heap (the outlined function, its `data` pointer, T, the ICVs, the pre-initialised
//! worksharing loop of a combined construct) and starts T−1 Squall threads, thread t on the
//! node `place` picks; each runs `fn(data)` on a shared stack and ends; thread 0 runs
//! `fn(data)` too and then joins them (the region's closing barrier: thread ends are
//! releases, joins acquires). Creating a thread is a release, its start an acquire, so what
//! the opener wrote before the region is visible in it.
//!
//! Worksharing slots: a separate shared block of `SLOTS` slots, each three 8-byte words
//! touched only by home-executed atomics: `gen` (the round the slot serves: construct number
//! `ws` uses slot `ws % SLOTS` in round `ws / SLOTS`), `next` (the next iteration to hand out,
//! or the arrival count of a `single`) and `done` (threads that left the construct). The last
//! thread to leave resets `next` and `done` and then advances `gen`; a thread that runs
//! `SLOTS` constructs ahead (nowait) waits for that.
//!
//! Owns: team memory and team threads. Must not touch: runtime internals.
use super::icv::{self, Frame, Icv, BIND_CLOSE, BIND_FALSE, BIND_PRIMARY, BIND_TRUE};
use super::loops::LoopState;
use super::{run, word};
use crate::api::{self, node_ref};
use crate::error::CapiError;
use crate::pthread::object_id;
use squall::{AtomicOp, BarrierCount, BarrierId, NodeId};
use std::ffi::c_void;
use std::time::Duration;

/// Worksharing slots per team.
pub const SLOTS: u64 = 16;
/// Bytes per slot (a cache line: the words of one slot share it, slots do not).
const SLOT_BYTES: usize = 64;
/// Levels of nesting the descriptor records (thread number and team size per level).
pub const MAX_LEVELS: usize = 16;

/// The outlined function of a region.
pub type RegionFn = unsafe extern "C" fn(*mut c_void);

/// A worksharing construct set up when the team starts (combined `parallel for` /
/// `parallel sections`): every thread enters it before calling the function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ws0 {
    /// 0: none; 1: a loop; 2: sections.
    pub kind: u32,
    /// `SCHED_*` of the loop.
    pub sched: u32,
    pub start: u64,
    pub incr: u64,
    pub n: u64,
    pub chunk: u64,
}

/// The team descriptor (Squall memory, written by thread 0 before it starts the others).
#[repr(C)]
pub struct Desc {
    /// The outlined function as (module, offset): address randomisation may load the program
    /// at another address on each node.
    func_module: u64,
    func_offset: u64,
    data: usize,
    nthreads: u32,
    level: u32,
    active_level: u32,
    icv_nthreads: u32,
    icv_dynamic: u32,
    icv_sched_kind: u32,
    icv_max_active: u32,
    icv_bind: u32,
    icv_sched_chunk: u64,
    ancestors: [[u32; 2]; MAX_LEVELS],
    ws0: Ws0,
    /// The node that opened the region and the placement of its threads (`place`): how the
    /// team's barriers count arrivals ([`barrier_count`]).
    pub opener: u32,
    pub bind: u32,
    /// The worksharing slot block.
    pub slots: usize,
    /// The number of the first worksharing construct of the region (a pooled team's
    /// constructs keep counting across its regions, so its slots need no reset).
    pub ws_base: u64,
    /// `copyprivate`: the broadcasting thread's data (written before, read after a barrier).
    pub copy: usize,
    /// Ordered loops, per slot: (construct number + 1, next iteration allowed), under the
    /// team's ordered lock.
    pub ordered: [[u64; 2]; SLOTS as usize],
    /// Deferred tasks (`deferred`, under the team's task lock): the list of unfinished tasks
    /// in creation order, their count, and the first barrier number where every thread runs
    /// tasks (0: none yet).
    pub tq_head: usize,
    pub tq_tail: usize,
    pub tq_pending: u64,
    pub tasking_from: u64,
    /// Task memory blocks free for reuse (`deferred`).
    pub tq_free: usize,
    /// `GOMP_parallel_reductions`: the registered reduction array every thread's tasks see.
    pub reductions: usize,
    /// The number of the first barrier of the region (a pooled team keeps counting).
    pub bar_base: u64,
}

thread_local! {
    /// The reduction array the next team this thread opens registers (`GOMP_parallel_reductions`).
    static NEXT_REDUCTIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// What a started thread is given: its team and number.
#[repr(C)]
struct Member {
    desc: usize,
    tid: usize,
}

/// The descriptor of the calling thread's team (`team != 0`).
pub fn desc(team: usize) -> &'static mut Desc {
    // SAFETY: `team` is a live descriptor: it is freed only after every team thread ended.
    unsafe { &mut *(team as *mut Desc) }
}

/// The node of thread `t` of a team of `n` opened on node `master` of `nodes` (places are
/// nodes). `spread` (the default, also `true` and `false`): thread t on node
/// master + ⌊t·nodes/n⌋, i.e. consecutive threads in contiguous blocks, one block per node
/// when n ≥ nodes, evenly spaced nodes when n < nodes; `close`: the same blocks when
/// n ≥ nodes, else consecutive nodes; `master`/`primary`: every thread on the opener's node.
pub fn place(master: u16, nodes: u16, t: u32, n: u32, bind: u32) -> u16 {
    let nodes64 = u64::from(nodes.max(1));
    let off = match bind {
        BIND_PRIMARY => 0,
        BIND_CLOSE if u64::from(n) < nodes64 => u64::from(t),
        _ => u64::from(t) * nodes64 / u64::from(n.max(1)),
    };
    ((u64::from(master) + off) % nodes64) as u16
}

/// The team size a region gets.
pub(super) fn team_size(parent: &Frame, requested: u32) -> u32 {
    if parent.active_level >= parent.icv.max_active {
        return 1;
    }
    let n = if requested == 0 {
        parent.icv.nthreads
    } else {
        requested
    };
    n.clamp(1, icv::defaults().thread_limit)
}

/// Open a region run by `func(data)`: push the calling thread's frame (thread 0) and start
/// the other threads. The caller then runs `func(data)` and calls [`end`].
pub fn begin(
    call: &'static str,
    func: RegionFn,
    data: *mut c_void,
    requested: u32,
    flags: u32,
    ws0: Ws0,
) {
    run(call, || {
        let parent = icv::current();
        let n = team_size(&parent, requested);
        let mut ancestors = parent.ancestors.clone();
        ancestors.push((0, n));
        let mut icv = parent.icv;
        let clause = flags & 7;
        if clause != BIND_FALSE {
            icv.bind = clause;
        }
        let mut frame = Frame {
            team: 0,
            tid: 0,
            nthreads: n,
            level: parent.level + 1,
            active_level: parent.active_level + u32::from(n > 1),
            ancestors,
            icv: parent.icv,
            ws: 0,
            lp: LoopState::default(),
            workers: Vec::new(),
            pool: 0,
            in_final: false,
            task: 0,
            group: 0,
            bar: 0,
            spawned: false,
            queued: 0,
        };
        if n > 1 {
            let bind = if icv.bind == BIND_TRUE {
                icv::BIND_SPREAD
            } else {
                icv.bind
            };
            if parent.level == 0 && crate::pthread::IS_MAIN.with(std::cell::Cell::get) {
                // main's outermost regions: a pool of threads (and one descriptor) kept
                // between regions, ended when main returns; worksharing constructs keep
                // counting from the last region's.
                let (block, team) = super::pool::prepare(n, bind)?;
                fill_desc(team, &frame, func, data, icv, ws0)?;
                set_placement(team, bind)?;
                frame.team = team;
                frame.pool = block;
                frame.ws = desc(team).ws_base;
                frame.bar = desc(team).bar_base;
                super::pool::start_region(block, n)?;
            } else {
                let team = alloc_desc()?;
                fill_desc(team, &frame, func, data, icv, ws0)?;
                set_placement(team, bind)?;
                frame.team = team;
                frame.workers = start_threads(team, n, bind)?;
            }
        }
        icv::push(frame);
        if ws0.kind != 0 {
            super::loops::enter_ws0(&ws0)?;
        }
        Ok(())
    })
}

/// Record in the descriptor that the calling node opens the team and `bind` places it.
fn set_placement(team: usize, bind: u32) -> Result<(), CapiError> {
    let d = desc(team);
    d.opener = u32::from(node_ref()?.rank().0);
    d.bind = bind;
    Ok(())
}

/// How a barrier of the `n` threads of a team opened on node `opener` and placed by `bind`
/// counts arrivals. When the team has a thread on every node of the job: one arrival per node
/// (`PerNode`: the node's threads of the team gather locally, then the node sends one message;
/// the manager's departure is one message per node). Otherwise every thread is counted
/// (`Total`), since a node without a thread of the team cannot arrive for it.
pub fn barrier_count(opener: u16, n: u32, bind: u32) -> Result<BarrierCount, CapiError> {
    let node = node_ref()?;
    let (nodes, me) = (node.size(), node.rank().0);
    if n < u32::from(nodes) {
        return Ok(BarrierCount::Total { total: n });
    }
    let mut hosts = vec![false; usize::from(nodes)];
    let mut local = 0;
    for t in 0..n {
        let on = place(opener, nodes, t, n, bind);
        hosts[usize::from(on)] = true;
        local += u32::from(on == me);
    }
    Ok(if hosts.iter().all(|&h| h) {
        BarrierCount::PerNode { local }
    } else {
        BarrierCount::Total { total: n }
    })
}

/// How many threads of team `team` run on the calling node.
pub fn local_threads(team: usize) -> Result<u32, CapiError> {
    let node = node_ref()?;
    let (nodes, me) = (node.size(), node.rank().0);
    let d = desc(team);
    Ok((0..d.nthreads)
        .filter(|&t| place(d.opener as u16, nodes, t, d.nthreads, d.bind) == me)
        .count() as u32)
}

/// A zeroed team descriptor and its worksharing slots in the shared heap.
pub fn alloc_desc() -> Result<usize, CapiError> {
    let node = node_ref()?;
    let team = node.calloc(1, std::mem::size_of::<Desc>())? as usize;
    // One more slot: its first word counts arrivals at tasking barriers (`arrivals`).
    desc(team).slots = node.calloc(SLOTS as usize + 1, SLOT_BYTES)? as usize;
    Ok(team)
}

/// The word (touched by home-executed atomics only) counting arrivals at the tasking
/// barriers of team `team` (see `deferred`).
pub fn arrivals(team: usize) -> usize {
    desc(team).slots + SLOTS as usize * SLOT_BYTES
}

/// Free a descriptor from [`alloc_desc`].
pub fn free_desc(team: usize) -> Result<(), CapiError> {
    let node = node_ref()?;
    super::deferred::free_blocks(desc(team))?;
    node.free(desc(team).slots as *mut u8)?;
    node.free(team as *mut u8)?;
    Ok(())
}

/// Write what a region's threads need into its descriptor (all but the slots and `ws_base`).
fn fill_desc(
    team: usize,
    frame: &Frame,
    func: RegionFn,
    data: *mut c_void,
    icv: Icv,
    ws0: Ws0,
) -> Result<(), CapiError> {
    let n = frame.nthreads;
    if frame.level as usize > MAX_LEVELS {
        return Err(CapiError::Unsupported(
            "more than 16 levels of nested parallel regions",
        ));
    }
    let d = desc(team);
    let (module, offset) =
        crate::modules::encode_cached(func as usize).ok_or_else(|| CapiError::Invalid {
            call: "GOMP_parallel",
            why: format!(
                "the region's function {:#x} is in no loaded module",
                func as usize
            ),
        })?;
    d.func_module = module;
    d.func_offset = offset;
    d.data = data as usize;
    d.nthreads = n;
    d.level = frame.level;
    d.active_level = frame.active_level;
    d.icv_nthreads = icv.nthreads;
    d.icv_dynamic = u32::from(icv.dynamic);
    d.icv_sched_kind = icv.sched_kind;
    d.icv_sched_chunk = icv.sched_chunk;
    d.icv_max_active = icv.max_active;
    d.icv_bind = icv.bind;
    for (i, &(t, s)) in frame.ancestors.iter().enumerate() {
        d.ancestors[i] = [t, s];
    }
    d.ws0 = ws0;
    d.reductions = NEXT_REDUCTIONS.with(|r| r.replace(0));
    Ok(())
}

/// Start threads 1..n of team `team` (nested regions), each placed by `bind`.
fn start_threads(team: usize, n: u32, bind: u32) -> Result<Vec<u64>, CapiError> {
    let node = node_ref()?;
    // One record per thread: (team, thread number), in the shared heap.
    let members = node.calloc(n as usize, std::mem::size_of::<Member>())? as *mut Member;
    let stack = icv::defaults().stack;
    let mut workers = Vec::with_capacity(n as usize);
    workers.push(members as u64);
    for t in 1..n {
        // SAFETY: `members` has room for n entries (allocated above).
        let m = unsafe { members.add(t as usize) };
        // SAFETY: as above.
        unsafe {
            m.write(Member {
                desc: team,
                tid: t as usize,
            })
        };
        let on = place(node.rank().0, node.size(), t, n, bind);
        let tid = node.spawn_with(Some(NodeId(on)), worker, m.cast(), stack)?;
        workers.push(tid.0);
    }
    Ok(workers)
}

/// Close the region `begin` opened: leave the frame; thread 0 joins the team's threads and
/// frees the team's memory.
pub fn end(call: &'static str) {
    super::deferred::before_barrier(call);
    super::deferred::leave_region();
    run(call, || {
        let Some(frame) = icv::pop() else {
            return Err(CapiError::Invalid {
                call,
                why: "not inside a parallel region".into(),
            });
        };
        if frame.team == 0 {
            return Ok(());
        }
        let node = node_ref()?;
        if frame.pool != 0 {
            super::pool::end_region(frame.pool, frame.nthreads)?;
            // Every thread entered the same constructs: the next region continues from here
            // (written after the end barrier: a late thread of this region still reads the
            // old value when it starts).
            desc(frame.team).ws_base = frame.ws;
            desc(frame.team).bar_base = frame.bar;
            return Ok(());
        }
        if let Some((&members, threads)) = frame.workers.split_first() {
            for &t in threads {
                api::join(t)?;
            }
            node.free(members as *mut u8)?;
        }
        free_desc(frame.team)
    })
}

/// The body of every team thread but thread 0 of a nested region (run by the pthreads
/// layer's thread runner on a shared stack homed on its node).
extern "C" fn worker(arg: *mut c_void) -> *mut c_void {
    let (team, tid) = run("parallel region (thread start)", || {
        // SAFETY: `arg` is this thread's Member record, alive until the region's end.
        let m = unsafe { &*(arg as *const Member) };
        Ok((m.desc, m.tid as u32))
    });
    member(team, tid);
    std::ptr::null_mut()
}

/// Take part in the region of team `team` as thread `tid` (not 0): enter its frame, run the
/// region's function, leave.
pub fn member(team: usize, tid: u32) {
    let (func, data) = run("parallel region (thread start)", || {
        let d = desc(team);
        let n = d.nthreads;
        let mut ancestors: Vec<(u32, u32)> = d.ancestors[..d.level as usize - 1]
            .iter()
            .map(|a| (a[0], a[1]))
            .collect();
        ancestors.push((tid, n));
        icv::push(Frame {
            team,
            tid,
            nthreads: n,
            level: d.level,
            active_level: d.active_level,
            ancestors,
            icv: Icv {
                nthreads: d.icv_nthreads,
                dynamic: d.icv_dynamic != 0,
                sched_kind: d.icv_sched_kind,
                sched_chunk: d.icv_sched_chunk,
                max_active: d.icv_max_active,
                bind: d.icv_bind,
            },
            ws: d.ws_base,
            lp: LoopState::default(),
            workers: Vec::new(),
            pool: 0,
            in_final: false,
            task: 0,
            group: 0,
            bar: d.bar_base,
            spawned: false,
            queued: 0,
        });
        let ws0 = d.ws0;
        if ws0.kind != 0 {
            super::loops::enter_ws0(&ws0)?;
        }
        if d.reductions != 0 {
            super::task_red::enter_registered(d.reductions);
        }
        let func = crate::modules::decode(d.func_module, d.func_offset).ok_or_else(|| {
            CapiError::Invalid {
                call: "GOMP_parallel",
                why: "the region's function is in a module this node did not load".into(),
            }
        })?;
        Ok((func, d.data))
    });
    // SAFETY: the program's outlined function (found in this node's copy of its module).
    let func: RegionFn = unsafe { std::mem::transmute::<usize, RegionFn>(func) };
    // SAFETY: the region's function and its data (on the opener's shared stack).
    unsafe { func(data as *mut c_void) };
    super::deferred::before_barrier("parallel region (thread end)");
    super::deferred::leave_region();
    run("parallel region (thread end)", || {
        if desc(team).reductions != 0 {
            super::task_red::leave();
        }
        icv::pop();
        Ok(())
    });
}

/// A barrier of the calling thread's team (no-op in a team of one). Every arrival is a
/// release and every departure an acquire.
pub fn barrier(call: &'static str) {
    let (team, n) = icv::with(|f| (f.team, f.nthreads));
    if team == 0 {
        return;
    }
    super::deferred::before_barrier(call);
    run(call, || {
        let d = desc(team);
        let count = barrier_count(d.opener as u16, n, d.bind)?;
        node_ref()?.barrier_with(BarrierId(object_id(team + 1)), count)?;
        Ok(())
    })
}

/// The address of word `w` (0 gen, 1 next, 2 done, 3 a block the construct owns, 4 the
/// first thread's task reduction array) of slot `ws % SLOTS` of team `team`.
pub fn slot_word(team: usize, ws: u64, w: usize) -> usize {
    desc(team).slots + (ws % SLOTS) as usize * SLOT_BYTES + w * 8
}

/// Enter a slot-using worksharing construct: its number, once its slot serves it. Call
/// through `run`; only for a team of more than one thread.
pub fn ws_enter(team: usize) -> Result<u64, CapiError> {
    let ws = icv::with(|f| {
        f.ws += 1;
        f.ws - 1
    });
    let round = ws / SLOTS;
    let gen = slot_word(team, ws, 0);
    let mut pause = 1u64;
    while word(gen, AtomicOp::Load)? != round {
        std::thread::sleep(Duration::from_micros(pause));
        pause = (pause * 2).min(2000);
    }
    Ok(ws)
}

/// Leave construct `ws` (counted in `counter`: 1 = `next` for a single, 2 = `done`): the last
/// of the `n` threads resets the slot for its next round.
pub fn ws_leave(team: usize, ws: u64, counter: usize, n: u32) -> Result<(), CapiError> {
    let seen = word(slot_word(team, ws, counter), AtomicOp::FetchAdd(1))?;
    if seen + 1 == u64::from(n) {
        // Word 3: a block the construct owns (a doacross loop's posted iterations).
        let block = word(slot_word(team, ws, 3), AtomicOp::Swap(0))?;
        if block != 0 {
            node_ref()?.free(block as *mut u8)?;
        }
        word(slot_word(team, ws, 1), AtomicOp::Swap(0))?;
        word(slot_word(team, ws, 2), AtomicOp::Swap(0))?;
        word(slot_word(team, ws, 4), AtomicOp::Swap(0))?;
        word(slot_word(team, ws, 0), AtomicOp::Swap(ws / SLOTS + 1))?;
    }
    Ok(())
}

// ----- entry points ------------------------------------------------------------------------

/// `#pragma omp parallel`: run `fn(data)` on a team of `num_threads` threads (0: the
/// nthreads ICV); `flags & 7` is the `proc_bind` clause.
///
/// # Safety
/// `func` is the program's outlined function and `data` its argument.
#[no_mangle]
pub unsafe extern "C" fn GOMP_parallel(
    func: Option<RegionFn>,
    data: *mut c_void,
    num_threads: u32,
    flags: u32,
) {
    let Some(func) = func else { return };
    begin(
        "GOMP_parallel",
        func,
        data,
        num_threads,
        flags,
        Ws0::default(),
    );
    // SAFETY: per the contract; runs on the caller's (shared) stack.
    unsafe { func(data) };
    end("GOMP_parallel");
}

/// `#pragma omp parallel reduction(task, ...)`: the first word of `data` is gcc's reduction
/// array; it is registered for the team (one block per thread) before the team starts, every
/// thread's tasks see it, and gcc's code combines the blocks after the region and
/// unregisters. Returns the team size.
///
/// # Safety
/// As [`GOMP_parallel`]; `data` starts with the reduction array's address.
#[no_mangle]
pub unsafe extern "C" fn GOMP_parallel_reductions(
    func: Option<RegionFn>,
    data: *mut c_void,
    num_threads: u32,
    flags: u32,
) -> u32 {
    let Some(func) = func else { return 1 };
    // SAFETY: per the contract.
    let rdata = unsafe { *(data as *const usize) };
    let n = run("GOMP_parallel_reductions", || {
        let n = team_size(&icv::current(), num_threads);
        // SAFETY: gcc's reduction array.
        unsafe { super::task_red::register_blocks(rdata, n, 0)? };
        NEXT_REDUCTIONS.with(|r| r.set(rdata));
        Ok(n)
    });
    begin(
        "GOMP_parallel_reductions",
        func,
        data,
        num_threads,
        flags,
        Ws0::default(),
    );
    run("GOMP_parallel_reductions", || {
        NEXT_REDUCTIONS.with(|r| r.set(0));
        super::task_red::enter_registered(rdata);
        Ok(())
    });
    // SAFETY: per the contract; runs on the caller's (shared) stack.
    unsafe { func(data) };
    run("GOMP_parallel_reductions", || {
        super::task_red::leave();
        Ok(())
    });
    end("GOMP_parallel_reductions");
    n
}

/// The pre-GCC 4.9 form: open the team; the caller runs `fn(data)` and `GOMP_parallel_end`.
///
/// # Safety
/// As [`GOMP_parallel`].
#[no_mangle]
pub unsafe extern "C" fn GOMP_parallel_start(
    func: Option<RegionFn>,
    data: *mut c_void,
    num_threads: u32,
) {
    let Some(func) = func else { return };
    begin(
        "GOMP_parallel_start",
        func,
        data,
        num_threads,
        0,
        Ws0::default(),
    );
}

#[no_mangle]
pub extern "C" fn GOMP_parallel_end() {
    end("GOMP_parallel_end");
}

/// `#pragma omp barrier` and the implicit barriers gcc emits.
#[no_mangle]
pub extern "C" fn GOMP_barrier() {
    barrier("GOMP_barrier");
}

/// A barrier in a cancellable region: never cancelled.
#[no_mangle]
pub extern "C" fn GOMP_barrier_cancel() -> bool {
    barrier("GOMP_barrier_cancel");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_places_blocks() {
        let nodes: Vec<u16> = (0..4)
            .map(|t| place(0, 2, t, 4, icv::BIND_SPREAD))
            .collect();
        assert_eq!(nodes, [0, 0, 1, 1]);
        let nodes: Vec<u16> = (0..2)
            .map(|t| place(0, 4, t, 2, icv::BIND_SPREAD))
            .collect();
        assert_eq!(nodes, [0, 2]);
        let nodes: Vec<u16> = (0..2).map(|t| place(1, 4, t, 2, BIND_CLOSE)).collect();
        assert_eq!(nodes, [1, 2]);
        let nodes: Vec<u16> = (0..3).map(|t| place(3, 4, t, 3, BIND_PRIMARY)).collect();
        assert_eq!(nodes, [3, 3, 3]);
        // 8 threads on 4 nodes: two per node.
        let mut per = [0; 4];
        for t in 0..8 {
            per[usize::from(place(0, 4, t, 8, icv::BIND_SPREAD))] += 1;
        }
        assert_eq!(per, [2; 4]);
    }
}

//! Deferred tasks: the team's task list in Squall memory, task records, dependences, and the
//! task scheduling points that run queued tasks (`taskwait`, taskgroup end, `taskyield`,
//! barriers and the region's end).
//!
//! A team's task state lives in its descriptor (`team::Desc`: the list's head and tail, the
//! count of unfinished tasks) and is touched only under the team's task lock, a Squall lock
//! (acquire on lock, release on unlock). A deferred task is one record in the shared heap:
//! the header ([`Rec`]), its dependences, then its firstprivate block (copied by the creating
//! thread through gcc's `cpyfn` or byte for byte). The creator links it at the tail under the
//! lock (a release), whoever runs it unlinks nothing until it ends: it marks it running under
//! the lock (an acquire: the block and everything the creator wrote before are visible on the
//! running node), runs it on its own shared stack, then takes the lock again to finish it
//! (its writes are released to whoever next takes the lock: the parent's `taskwait`, the
//! taskgroup's end, the barrier's drain). The outlined function is recorded as (module,
//! offset), since each node may load the program at another address.
//!
//! Accounting, all under the lock: the team's `pending` (unfinished tasks), each record's
//! `children` (unfinished child tasks; implicit and undeferred tasks get a header-only record
//! when they create their first child), each taskgroup record's `pending` (unfinished tasks
//! created in it, descendants included, as tasks inherit their creator's taskgroup). A record
//! is freed when it has ended and has no unfinished child.
//!
//! Dependences (`depend` in, out, inout, mutexinoutset, inoutset, depobj, `omp_all_memory`):
//! a queued task may start only when no earlier unfinished sibling (same parent, earlier in
//! the list) has a conflicting dependence: same address (or the all-memory null address) and
//! not both `in`. mutexinoutset and inoutset are ordered like `out` (a compliant
//! serialization). `priority` picks the highest-priority startable task first.
//!
//! Barriers: a thread that created tasks since the last barrier runs queued tasks until the
//! team has none unfinished before it arrives. Threads that created none help only in
//! "tasking" barriers: from the barrier after the team's first deferred task on (the creator
//! records that barrier number in the descriptor; every thread reads it after a barrier, so
//! all agree which barriers are tasking), every thread arrives on a counter and runs queued
//! tasks until every thread arrived and no task is unfinished. A team's first tasking barrier
//! is thus run by the creators alone (threads already waiting do not help).
//!
//! Owns: task records, the team's task list and scheduling points. Must not touch: team
//! memory other than the descriptor's task words.
use super::team::{desc, Desc};
use super::{icv, run, word};
use crate::api::{self, node_ref};
use crate::error::CapiError;
use crate::pthread::object_id;
use squall::AtomicOp;
use std::ffi::c_void;
use std::time::Duration;

/// A task's function and its firstprivate copy function.
pub type TaskFn = unsafe extern "C" fn(*mut c_void);
pub type CopyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

const QUEUED: u64 = 0;
const RUNNING: u64 = 1;

/// A task record's header (Squall memory, under the team's task lock).
#[repr(C)]
struct Rec {
    next: usize,
    prev: usize,
    state: u64,
    /// The creating task's record (0: none).
    parent: usize,
    /// The taskgroup it was created in (0: none).
    group: usize,
    /// Unfinished child tasks.
    children: u64,
    /// The task ended (its record waits for its children).
    ended: u64,
    func_module: u64,
    func_offset: u64,
    data: usize,
    /// The task reductions visible where it was created (`task_red`).
    red: usize,
    final_: u64,
    priority: i64,
    /// Dependences, as (address, 1 for `in`) pairs after the header; the block follows them.
    ndeps: u64,
}

/// A taskgroup's record.
#[repr(C)]
struct Group {
    pending: u64,
    prev: usize,
}

fn rec(p: usize) -> &'static mut Rec {
    // SAFETY: a live task record (freed only once ended with no child, never while listed).
    unsafe { &mut *(p as *mut Rec) }
}

fn deps(p: usize) -> &'static [[u64; 2]] {
    let r = rec(p);
    // SAFETY: `ndeps` pairs follow the header (written at creation).
    unsafe {
        std::slice::from_raw_parts(
            (p + std::mem::size_of::<Rec>()) as *const [u64; 2],
            r.ndeps as usize,
        )
    }
}

fn group(p: usize) -> &'static mut Group {
    // SAFETY: a live taskgroup record (freed by its owner after its end).
    unsafe { &mut *(p as *mut Group) }
}

fn lock_id(team: usize) -> u64 {
    object_id(team + 4)
}

fn lock(team: usize) -> Result<(), CapiError> {
    api::lock_id(node_ref()?, lock_id(team))
}

fn unlock(team: usize) -> Result<(), CapiError> {
    api::unlock_id(node_ref()?, lock_id(team))
}

/// Bytes before each block of task memory: its capacity is the word just before the block.
const BLOCK_HEAD: usize = 64;

/// A block of at least `bytes` of Squall memory for a task record or a taskgroup: one the team
/// used before, from its free list (taken under the lock, so what its last user wrote is
/// visible and no late write of another node reaches it), else a new one. Blocks are never
/// freed while the team lives: a block freed on one node and reused by another without
/// synchronization could receive the old user's writes late.
fn get_block(team: usize, bytes: usize) -> Result<usize, CapiError> {
    lock(team)?;
    let d = desc(team);
    let (mut prev, mut p) = (0usize, d.tq_free);
    while p != 0 {
        // SAFETY: a free block: its first word links the list, its capacity precedes it.
        let (next, cap) = unsafe { (*(p as *const usize), *((p - 8) as *const usize)) };
        if cap >= bytes {
            if prev == 0 {
                d.tq_free = next;
            } else {
                // SAFETY: as above.
                unsafe { *(prev as *mut usize) = next };
            }
            break;
        }
        (prev, p) = (p, next);
    }
    unlock(team)?;
    if p == 0 {
        let node = node_ref()?;
        let cap = bytes.max(64).next_multiple_of(64);
        let base = node.alloc_with(BLOCK_HEAD + cap, 64, node.default_placement())? as usize;
        p = base + BLOCK_HEAD;
        // SAFETY: the word before the block is inside the allocation.
        unsafe { *((p - 8) as *mut usize) = cap };
    }
    Ok(p)
}

/// Give block `p` back to the team's free list (under the lock).
fn put_block(d: &mut Desc, p: usize) {
    // SAFETY: a block from `get_block`, no longer used.
    unsafe { *(p as *mut usize) = d.tq_free };
    d.tq_free = p;
}

/// Free the blocks of a team's free list (the team has ended: no thread uses it).
pub fn free_blocks(d: &mut Desc) -> Result<(), CapiError> {
    let node = node_ref()?;
    let mut p = std::mem::replace(&mut d.tq_free, 0);
    while p != 0 {
        // SAFETY: a free block (see `get_block`).
        let next = unsafe { *(p as *const usize) };
        node.free((p - BLOCK_HEAD) as *mut u8)?;
        p = next;
    }
    Ok(())
}

/// gcc's `depend` array as (address, is `in`) pairs (libgomp's two layouts: `d[0]` the count
/// and `d[1]` the out/inout count, or `d[0] == 0` and counts of out/inout, mutexinoutset and
/// in at `d[2..5]`, then depobjs).
///
/// # Safety
/// `depend` is the array gcc passes (or null).
pub unsafe fn parse_depend(depend: *mut *mut c_void) -> Vec<[u64; 2]> {
    if depend.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract (libgomp's layouts).
    unsafe {
        let at = |i: usize| *depend.add(i) as u64;
        let n = at(0) as usize;
        if n != 0 {
            let nout = at(1) as usize;
            return (0..n).map(|i| [at(2 + i), u64::from(i >= nout)]).collect();
        }
        let n = at(1) as usize;
        let normal = at(2) as usize + at(3) as usize + at(4) as usize;
        let nout = at(2) as usize + at(3) as usize;
        (0..n)
            .map(|i| {
                if i < normal {
                    [at(5 + i), u64::from(i >= nout)]
                } else {
                    // A depobj: {address, kind}; kind 1 is GOMP_DEPEND_IN.
                    let d = *depend.add(5 + i) as *const u64;
                    [*d, u64::from(*d.add(1) == 1)]
                }
            })
            .collect()
    }
}

fn conflict(a: &[[u64; 2]], b: &[[u64; 2]]) -> bool {
    a.iter().any(|x| {
        b.iter()
            .any(|y| (x[0] == y[0] || x[0] == 0 || y[0] == 0) && !(x[1] == 1 && y[1] == 1))
    })
}

/// Is a task with dependences `mine`, child of `parent`, blocked by an unfinished sibling
/// listed before `before` (0: the whole list)? Under the lock.
fn blocked(d: &Desc, parent: usize, mine: &[[u64; 2]], before: usize) -> bool {
    if mine.is_empty() {
        return false;
    }
    let mut p = d.tq_head;
    while p != 0 && p != before {
        let r = rec(p);
        if r.parent == parent && r.ndeps > 0 && conflict(mine, deps(p)) {
            return true;
        }
        p = r.next;
    }
    false
}

/// Which queued tasks a scheduling point may start.
#[derive(Clone, Copy)]
enum Pick {
    Any,
    ChildOf(usize),
    InGroup(usize),
}

/// Take the startable queued task of highest priority that `pick` allows (marked running).
/// Under the lock.
fn take(d: &Desc, pick: Pick) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut p = d.tq_head;
    while p != 0 {
        let r = rec(p);
        let allowed = match pick {
            Pick::Any => true,
            Pick::ChildOf(t) => r.parent == t,
            Pick::InGroup(g) => r.group == g,
        };
        if r.state == QUEUED
            && allowed
            && best.is_none_or(|b| rec(b).priority < r.priority)
            && !blocked(d, r.parent, deps(p), p)
        {
            best = Some(p);
        }
        p = r.next;
    }
    if let Some(b) = best {
        rec(b).state = RUNNING;
    }
    best
}

/// What one visit to a scheduling point found.
enum Step {
    Done,
    Run(usize),
    Wait,
}

/// Visit the team's task list once: `done` (under the lock) ends the wait, else a task
/// `pick` allows is taken.
fn step(
    call: &'static str,
    team: usize,
    pick: Pick,
    done: impl Fn(&Desc) -> Result<bool, CapiError>,
) -> Step {
    run(call, || {
        lock(team)?;
        let d = desc(team);
        // Nothing the point prefers can start: any task may (a task it waits for may wait
        // on one outside its set; a thread waiting in a plain barrier runs none).
        let s = if let Some(t) = take(d, pick).or_else(|| take(d, Pick::Any)) {
            Step::Run(t)
        } else if done(d)? {
            Step::Done
        } else {
            Step::Wait
        };
        unlock(team)?;
        Ok(s)
    })
}

/// Run queued tasks that `pick` allows until `done` holds (see [`step`]).
fn wait_until(
    call: &'static str,
    team: usize,
    pick: Pick,
    done: impl Fn(&Desc) -> Result<bool, CapiError>,
) {
    let mut pause = 1u64;
    loop {
        match step(call, team, pick, &done) {
            Step::Done => return,
            Step::Run(t) => {
                execute(t);
                pause = 1;
            }
            Step::Wait => {
                std::thread::sleep(Duration::from_micros(pause));
                pause = (pause * 2).min(1000);
            }
        }
    }
}

/// Run task `t` (taken by [`take`]) in the calling thread, then finish it.
fn execute(t: usize) {
    let (func, data, saved) = run("task (start)", || {
        let r = rec(t);
        let func = crate::modules::decode(r.func_module, r.func_offset).ok_or_else(|| {
            CapiError::Invalid {
                call: "GOMP_task",
                why: "the task's function is in a module this node did not load".into(),
            }
        })?;
        let saved = icv::with(|f| {
            let s = (f.task, f.group, f.in_final);
            f.task = t;
            f.group = r.group;
            f.in_final = r.final_ != 0;
            s
        });
        super::task_red::enter(r.red);
        Ok((func, r.data, saved))
    });
    // SAFETY: the program's task function (this node's copy of its module), on its block.
    let func: TaskFn = unsafe { std::mem::transmute::<usize, TaskFn>(func) };
    // SAFETY: as above; runs on the calling thread's shared stack.
    unsafe { func(data as *mut c_void) };
    run("task (end)", || {
        super::task_red::leave();
        let team = icv::with(|f| {
            (f.task, f.group, f.in_final) = saved;
            f.team
        });
        lock(team)?;
        let d = desc(team);
        let r = rec(t);
        if r.prev == 0 {
            d.tq_head = r.next;
        } else {
            rec(r.prev).next = r.next;
        }
        if r.next == 0 {
            d.tq_tail = r.prev;
        } else {
            rec(r.next).prev = r.prev;
        }
        d.tq_pending -= 1;
        if r.group != 0 {
            group(r.group).pending -= 1;
        }
        if r.parent != 0 {
            let p = rec(r.parent);
            p.children -= 1;
            if p.ended != 0 && p.children == 0 {
                put_block(d, r.parent);
            }
        }
        r.ended = 1;
        if r.children == 0 {
            put_block(d, t);
        }
        unlock(team)
    });
}

/// The calling task's record, made (header only) if it has none yet. Through `run`.
fn current_record() -> Result<usize, CapiError> {
    if let t @ 1.. = icv::with(|f| f.task) {
        return Ok(t);
    }
    let t = get_block(icv::with(|f| f.team), std::mem::size_of::<Rec>())?;
    // SAFETY: the block has room for a record.
    unsafe { std::ptr::write_bytes(t as *mut u8, 0, std::mem::size_of::<Rec>()) };
    icv::with(|f| f.task = t);
    Ok(t)
}

/// End the record `t` of an implicit or undeferred task (freed now, or by its last child).
fn end_record(team: usize, t: usize) -> Result<(), CapiError> {
    lock(team)?;
    let r = rec(t);
    r.ended = 1;
    if r.children == 0 {
        put_block(desc(team), t);
    }
    unlock(team)
}

/// Can the calling thread defer a task? (In a team of more than one thread, not in a final
/// task, and while the team has fewer than 64 unfinished tasks per thread, as libgomp.)
pub fn can_defer() -> bool {
    icv::with(|f| f.team != 0 && !f.in_final && f.queued < 64 * u64::from(f.nthreads))
}

/// Create a deferred task: its record with `size` bytes of block aligned to `align`; the
/// caller copies the block into `data_of(record)`, then calls [`enqueue`].
pub fn alloc_task(size: usize, align: usize, ndeps: usize) -> usize {
    run("GOMP_task", || {
        current_record()?;
        let align = align.max(8).next_power_of_two();
        let head = std::mem::size_of::<Rec>() + ndeps * 16;
        let p = get_block(icv::with(|f| f.team), head + align + size)?;
        // SAFETY: `p` has `head` header bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, head) };
        rec(p).data = (p + head).next_multiple_of(align);
        rec(p).ndeps = ndeps as u64;
        Ok(p)
    })
}

/// The firstprivate block of record `t`.
pub fn data_of(t: usize) -> *mut c_void {
    rec(t).data as *mut c_void
}

/// Link record `t` (its block copied) at the team's tail: it runs `func` with dependences
/// `dl`, `priority`, and its children are final when `final_`.
pub fn enqueue(t: usize, func: TaskFn, dl: &[[u64; 2]], priority: i32, final_: bool) {
    run("GOMP_task", || {
        let (module, offset) =
            crate::modules::encode_cached(func as usize).ok_or_else(|| CapiError::Invalid {
                call: "GOMP_task",
                why: format!(
                    "the task function {:#x} is in no loaded module",
                    func as usize
                ),
            })?;
        let (team, parent, grp, bar) = icv::with(|f| (f.team, f.task, f.group, f.bar));
        let r = rec(t);
        r.func_module = module;
        r.func_offset = offset;
        r.parent = parent;
        r.group = grp;
        r.red = super::task_red::current();
        r.final_ = u64::from(final_);
        r.priority = i64::from(priority);
        // SAFETY: `ndeps` pairs follow the header (alloc_task made room).
        unsafe {
            std::ptr::copy_nonoverlapping(
                dl.as_ptr(),
                (t + std::mem::size_of::<Rec>()) as *mut [u64; 2],
                dl.len(),
            )
        };
        lock(team)?;
        let d = desc(team);
        r.prev = d.tq_tail;
        if d.tq_tail == 0 {
            d.tq_head = t;
        } else {
            rec(d.tq_tail).next = t;
        }
        d.tq_tail = t;
        d.tq_pending += 1;
        rec(parent).children += 1;
        if grp != 0 {
            group(grp).pending += 1;
        }
        if d.tasking_from == 0 {
            d.tasking_from = bar + 1;
        }
        let queued = d.tq_pending;
        unlock(team)?;
        icv::with(|f| {
            f.spawned = true;
            f.queued = queued;
        });
        Ok(())
    })
}

/// Before an undeferred task or `taskwait depend(...)`: wait (running the calling task's
/// children) until no unfinished child of the calling task conflicts with `dl`.
pub fn wait_deps(call: &'static str, dl: &[[u64; 2]]) {
    let (team, me) = icv::with(|f| (f.team, f.task));
    if team == 0 || me == 0 || dl.is_empty() {
        return;
    }
    wait_until(call, team, Pick::ChildOf(me), |d| {
        Ok(!blocked(d, me, dl, 0))
    });
}

/// Run an undeferred task's body `body` as its own task: children it creates get a record of
/// their own; the record ends with it.
pub fn undeferred(body: impl FnOnce()) {
    let saved = icv::with(|f| std::mem::replace(&mut f.task, 0));
    body();
    run("GOMP_task", || {
        let (team, t) = icv::with(|f| (f.team, std::mem::replace(&mut f.task, saved)));
        if t != 0 {
            end_record(team, t)?;
        }
        Ok(())
    });
}

/// `taskwait`: run the calling task's children until none is unfinished.
pub fn taskwait() {
    let (team, me) = icv::with(|f| (f.team, f.task));
    if team == 0 || me == 0 {
        return;
    }
    wait_until("GOMP_taskwait", team, Pick::ChildOf(me), |_| {
        Ok(rec(me).children == 0)
    });
}

/// `taskyield`: run one queued task, if any can start.
pub fn taskyield() {
    let team = icv::with(|f| f.team);
    if team != 0 && icv::with(|f| f.task) != 0 {
        if let Step::Run(t) = step("GOMP_taskyield", team, Pick::Any, |_| Ok(true)) {
            execute(t);
        }
    }
}

/// Taskgroup start in a team: a taskgroup record inside the enclosing one.
pub fn group_start() {
    if icv::with(|f| f.team) == 0 {
        return;
    }
    run("GOMP_taskgroup_start", || {
        let g = get_block(icv::with(|f| f.team), std::mem::size_of::<Group>())?;
        group(g).pending = 0;
        icv::with(|f| {
            group(g).prev = f.group;
            f.group = g;
        });
        Ok(())
    });
}

/// Taskgroup end: run the group's tasks until none is unfinished, then leave it.
pub fn group_end() {
    let (team, g) = icv::with(|f| (f.team, f.group));
    if team == 0 || g == 0 {
        return;
    }
    wait_until("GOMP_taskgroup_end", team, Pick::InGroup(g), |_| {
        Ok(group(g).pending == 0)
    });
    run("GOMP_taskgroup_end", || {
        icv::with(|f| f.group = group(g).prev);
        lock(team)?;
        put_block(desc(team), g);
        unlock(team)
    });
}

/// Before the calling thread arrives at a barrier of its team (or the region's end): run
/// tasks as the module doc says. Counts the barrier.
pub fn before_barrier(call: &'static str) {
    let (team, n, bar, spawned) = icv::with(|f| {
        f.bar += 1;
        (
            f.team,
            f.nthreads,
            f.bar - 1,
            std::mem::replace(&mut f.spawned, false),
        )
    });
    if team == 0 {
        return;
    }
    let from = desc(team).tasking_from;
    if from != 0 && from <= bar {
        let arrived = super::team::arrivals(team);
        let target = u64::from(n) * (bar - from + 1);
        run(call, || word(arrived, AtomicOp::FetchAdd(1)));
        wait_until(call, team, Pick::Any, |d| {
            Ok(d.tq_pending == 0 && word(arrived, AtomicOp::Load)? >= target)
        });
    } else if spawned {
        wait_until(call, team, Pick::Any, |d| Ok(d.tq_pending == 0));
    }
}

/// At the region's end, after [`before_barrier`]: free the implicit task's record.
pub fn leave_region() {
    let (team, t) = icv::with(|f| (f.team, std::mem::replace(&mut f.task, 0)));
    if t != 0 {
        run("parallel region (end)", || {
            lock(team)?;
            put_block(desc(team), t);
            unlock(team)
        });
    }
}

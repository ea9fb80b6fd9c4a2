//! Threads: creating a thread on any node (a release), where threads go by default, a
//! thread's end (a release) and joins (an acquire), and starting a thread on this node.
//! Owns the `spawn_on` side of the thread table's use; must not touch the heap.

use super::{node, placement_index, Node, CURRENT};
use crate::config::ThreadPlacement;
use crate::error::{Result, SquallError};
use crate::fnptr;
use crate::msg;
use crate::service::{Reply, Service};
use crate::threads::{self, Joiner, SpawnMsg, ThreadFn};
use squall_core::{Consistency, NodeId, ThreadId};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Node {
    /// Where threads created without a named node run (see [`ThreadPlacement`]; from
    /// `SQUALL_THREAD_PLACEMENT`, `even` by default).
    pub fn thread_placement(&self) -> ThreadPlacement {
        let i = self.inner.thread_placement.load(Ordering::Relaxed);
        ThreadPlacement::ALL[usize::from(i) % ThreadPlacement::ALL.len()]
    }

    /// Choose where this node puts the threads it creates from now on without naming a node
    /// (the k of [`ThreadPlacement`] keeps counting every thread this node created).
    pub fn set_thread_placement(&self, p: ThreadPlacement) {
        self.inner
            .thread_placement
            .store(placement_index(p), Ordering::Relaxed);
    }

    /// Start `f(arg)` as a thread on `on` (or, for `None`, the node [`Node::thread_placement`]
    /// picks: by default the k-th thread this node creates runs on node (rank + k + 1) mod N,
    /// so the creating thread and its threads spread evenly). Creating a thread is
    /// a release: everything this thread wrote before is visible to the new thread. `arg` is
    /// passed as is: pointers into Squall memory are valid everywhere, other pointers only on
    /// this node.
    pub fn spawn_on(&self, on: Option<NodeId>, f: ThreadFn, arg: *mut c_void) -> Result<ThreadId> {
        self.spawn_with(on, f, arg, 0)
    }

    /// [`Node::spawn_on`] asking for a stack of `stack` bytes (0: the default), which the
    /// thread runner of the node where the thread runs honours
    /// ([`crate::set_thread_runner`]).
    pub fn spawn_with(
        &self,
        on: Option<NodeId>,
        f: ThreadFn,
        arg: *mut c_void,
        stack: usize,
    ) -> Result<ThreadId> {
        let n = self.inner.spawned.fetch_add(1, Ordering::Relaxed);
        let target =
            on.unwrap_or_else(|| self.thread_placement().target(self.rank(), n, self.size()));
        if target.0 >= self.size() {
            return Err(SquallError::Config(format!(
                "cannot create a thread on {target}: the job has {} nodes",
                self.size()
            )));
        }
        let fref = fnptr::encode(f as usize).ok_or_else(|| {
            SquallError::Config(format!(
                "thread function at {:#x} is not in any loaded module",
                f as usize
            ))
        })?;
        // Counted from 1: no thread id is 0 (a pthread_t of 0 often means "no thread"), and 0
        // is what CURRENT holds in threads spawn_on did not start.
        let tid = threads::make_tid(target, self.rank(), (n as u32).wrapping_add(1));
        let arg = arg as usize as u64;
        let r = self.call("spawn", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, ep| {
                    let info = s.protocol.grant_info(&[]);
                    let sp = SpawnMsg {
                        tid,
                        f: fref,
                        arg,
                        info,
                        stack: stack as u64,
                    };
                    if target == s.me {
                        let r = start_thread(s, sp);
                        let reply = match r {
                            Ok(()) => Reply::Value(0),
                            Err(why) => Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why,
                            }),
                        };
                        s.wake(w, reply);
                        return;
                    }
                    let svc_me = s.me;
                    let sent = ep.request_async(target, msg::SPAWN, sp.encode(), move |ep, r| {
                        let reply = match r {
                            Ok(m) => match threads::decode_answer(&m.payload) {
                                Ok(_) => Reply::Value(0),
                                Err((_, why)) => Reply::Failed(SquallError::Thread {
                                    what: format!("creating a thread on {target}"),
                                    why,
                                }),
                            },
                            Err(e) => Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why: e.to_string(),
                            }),
                        };
                        if let Ok(n) = node() {
                            n.inner.svc.lock().wake(w, reply);
                        } else {
                            eprintln!(
                                "squall: {svc_me}: spawn answer without a node ({})",
                                ep.rank()
                            );
                        }
                    });
                    if let Err(e) = sent {
                        s.wake(
                            w,
                            Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why: e.to_string(),
                            }),
                        );
                    }
                }),
            )
        })?;
        match r {
            Reply::Failed(e) => Err(e),
            _ => Ok(tid),
        }
    }

    /// The calling thread's global id: the id `spawn_on` returned for it, or for any other
    /// thread (such as `main`) an id naming this node that no spawned thread has.
    pub fn current_thread(&self) -> ThreadId {
        match CURRENT.with(Cell::get) {
            0 => threads::make_tid(self.rank(), self.rank(), u32::MAX),
            t => ThreadId(t),
        }
    }

    /// Called by a thread started with `spawn_on` when its function returned.
    pub(super) fn thread_exit(&self, tid: ThreadId, ret: u64) {
        let r = self.call("thread exit", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, ep| {
                    let info = s.protocol.grant_info(&[]);
                    s.thread_done(ep, tid, ret, info);
                    s.wake(w, Reply::Value(0));
                }),
            )
        });
        if let Err(e) = r {
            eprintln!("squall: {}: {tid} could not end cleanly: {e}", self.rank());
        }
    }

    /// Wait for a thread created with `spawn_on` (on any node) to end; returns its result.
    /// A successful join is an acquire: the thread's writes are visible afterwards.
    pub fn join(&self, tid: ThreadId) -> Result<*mut c_void> {
        let run = threads::node_of(tid);
        if run.0 >= self.size() {
            return Err(SquallError::Remote(format!(
                "join of unknown {tid}: no such node"
            )));
        }
        self.timed_sync(|| self.join_wait(run, tid))
    }

    /// The waiting part of `join` (timed as sync time by the caller).
    pub(super) fn join_wait(&self, run: NodeId, tid: ThreadId) -> Result<*mut c_void> {
        if run == self.rank() {
            match self.call("join", move |s, ep, w| s.join(ep, tid, Joiner::Local(w)))? {
                Reply::Value(ret) => Ok(ret as usize as *mut c_void),
                Reply::Failed(e) => Err(e),
                Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to join".into())),
            }
        } else {
            let answer = self
                .inner
                .ep
                .request(run, msg::JOIN, tid.0.to_le_bytes().to_vec())?;
            let (ret, info) = threads::decode_answer(&answer).map_err(|(kind, why)| {
                if kind == threads::ERR_UNKNOWN_THREAD {
                    SquallError::UnknownThread(tid)
                } else {
                    SquallError::Thread {
                        what: format!("joining {tid}"),
                        why,
                    }
                }
            })?;
            self.call("join", move |s, _, w| {
                s.protocol.apply_grant(&info);
                s.wake(w, Reply::Value(0))
            })?;
            Ok(ret as usize as *mut c_void)
        }
    }
}

/// On the service thread of the node a thread is to run on: apply the creator's release,
/// record the thread and start it.
pub(super) fn start_thread(s: &mut Service, sp: SpawnMsg) -> std::result::Result<(), String> {
    let me = s.me;
    let addr = fnptr::decode(&sp.f).ok_or_else(|| {
        format!(
            "{me} cannot find the thread function ({} + {:#x}): every node must run the same binaries",
            if sp.f.module.is_empty() { "main executable" } else { sp.f.module.as_str() },
            sp.f.offset
        )
    })?;
    s.protocol.apply_grant(&sp.info);
    s.thread_started(sp.tid);
    // SAFETY: `addr` is the local address of the function the creator named, which has the
    // `ThreadFn` signature (the creator passed a `ThreadFn`, and all nodes run one binary).
    let f: ThreadFn = unsafe { std::mem::transmute::<usize, ThreadFn>(addr) };
    let (tid, arg, stack) = (sp.tid, sp.arg, sp.stack as usize);
    std::thread::Builder::new()
        .name(format!("squall-{}", tid.0 & 0xffff_ffff))
        .spawn(move || {
            CURRENT.with(|c| c.set(tid.0));
            if let Err(e) = super::faults::prepare_thread() {
                eprintln!("squall: {tid}: {e}");
                std::process::exit(1);
            }
            let t = Instant::now();
            // Counted as running for the statistics (a stats mark may come while it runs).
            let start_ns = node().ok().map(|n| {
                let at = n.now_ns();
                n.inner.live_threads.begin(at);
                at
            });
            let ret = threads::run_thread(f, arg as usize as *mut c_void, stack) as usize as u64;
            threads::run_thread_end_hook();
            match node() {
                Ok(n) => {
                    if let Some(at) = start_ns {
                        n.inner.live_threads.end(at);
                    }
                    n.inner
                        .thread_ns
                        .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    n.thread_exit(tid, ret)
                }
                Err(e) => eprintln!("squall: {tid} ended without a node: {e}"),
            }
        })
        .map(|_| ())
        .map_err(|e| format!("{me} could not start a thread: {e}"))
}

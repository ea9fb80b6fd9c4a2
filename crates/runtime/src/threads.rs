//! Threads on any node (CableS): creation on a named node or one the thread placement picks, join from any node,
//! and the consistency they carry — creating a thread is a release by the creator and an
//! acquire by the new thread; a thread's end is a release and a successful join an acquire.
//!
//! Owns: the thread table of threads running on this node (on the service thread), the spawn
//! and join message encodings. Must not touch protocol internals (only the `Consistency` hooks).
use crate::error::SquallError;
use crate::fnptr::FnRef;
use crate::service::{Reply, Service};
use squall_core::{NodeId, ThreadId};
use squall_net::{Endpoint, Incoming};
use squall_protocol::Protocol;
use squall_sync::Waiter;
use std::collections::HashMap;
use std::ffi::c_void;

/// The C-compatible thread body: `void *(*)(void *)`.
pub type ThreadFn = extern "C" fn(*mut c_void) -> *mut c_void;

/// A function every thread started by `spawn_on` runs on its own thread after its function
/// returned and before its end is reported (so joiners see what it did): the pthreads layer's
/// thread-specific-data destructors. Set once per process; later calls are ignored.
static THREAD_END_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Install the thread-end hook (see `THREAD_END_HOOK`); `false` if one was already set.
pub fn set_thread_end_hook(hook: fn()) -> bool {
    THREAD_END_HOOK.set(hook).is_ok()
}

/// Run the thread-end hook, if any, on the ending thread.
pub(crate) fn run_thread_end_hook() {
    if let Some(h) = THREAD_END_HOOK.get() {
        h();
    }
}

/// Runs a thread's body on the node where it runs: `runner(f, arg, stack_bytes)` calls
/// `f(arg)` (e.g. on another stack) and returns what it returned. Set by the C API's pthreads
/// layer ([`set_thread_runner`]); without one, `f(arg)` runs directly.
pub type ThreadRunner = fn(ThreadFn, *mut c_void, usize) -> *mut c_void;

static RUNNER: std::sync::OnceLock<ThreadRunner> = std::sync::OnceLock::new();

/// Install the thread runner for every thread this process starts from now on (the first call
/// wins; later ones return `false`).
pub fn set_thread_runner(r: ThreadRunner) -> bool {
    RUNNER.set(r).is_ok()
}

/// Run `f(arg)` through the installed runner, if any.
pub(crate) fn run_thread(f: ThreadFn, arg: *mut c_void, stack: usize) -> *mut c_void {
    match RUNNER.get() {
        Some(r) => r(f, arg, stack),
        None => f(arg),
    }
}

/// Global thread ids: the running node in the top 16 bits, the creating node in the next 16,
/// a per-creator counter in the low 32.
pub fn make_tid(run: NodeId, creator: NodeId, n: u32) -> ThreadId {
    ThreadId((u64::from(run.0) << 48) | (u64::from(creator.0) << 32) | u64::from(n))
}

/// The node a thread runs on.
pub fn node_of(tid: ThreadId) -> NodeId {
    NodeId((tid.0 >> 48) as u16)
}

/// Who waits for a thread's end.
pub(crate) enum Joiner {
    Local(Waiter),
    Remote(Incoming),
}

pub(crate) enum ThreadState {
    Running(Vec<Joiner>),
    Done { ret: u64, info: Vec<u8> },
}

/// Threads that run (or ran, and are not joined yet) on this node.
#[derive(Default)]
pub(crate) struct ThreadTable {
    threads: HashMap<u64, ThreadState>,
    /// Threads started here that have not ended.
    running: u32,
    /// This node entered `Node::finalize`.
    finalizing: bool,
}

/// Encoding of a spawn request.
pub struct SpawnMsg {
    pub tid: ThreadId,
    pub f: FnRef,
    pub arg: u64,
    pub info: Vec<u8>,
    /// Stack bytes the thread asked for (0: the default), for the thread runner.
    pub stack: u64,
}

fn take<const N: usize>(b: &[u8], at: &mut usize) -> Option<[u8; N]> {
    let s = b.get(*at..*at + N)?;
    *at += N;
    s.try_into().ok()
}

fn take_bytes<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = u32::from_le_bytes(take::<4>(b, at)?) as usize;
    let s = b.get(*at..*at + n)?;
    *at += n;
    Some(s)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

impl SpawnMsg {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&self.tid.0.to_le_bytes());
        v.extend_from_slice(&self.f.offset.to_le_bytes());
        v.extend_from_slice(&self.arg.to_le_bytes());
        put_bytes(&mut v, self.f.module.as_bytes());
        put_bytes(&mut v, &self.info);
        v.extend_from_slice(&self.stack.to_le_bytes());
        v
    }
    pub fn decode(b: &[u8]) -> Option<SpawnMsg> {
        let mut at = 0;
        let tid = ThreadId(u64::from_le_bytes(take(b, &mut at)?));
        let offset = u64::from_le_bytes(take(b, &mut at)?);
        let arg = u64::from_le_bytes(take(b, &mut at)?);
        let module = String::from_utf8(take_bytes(b, &mut at)?.to_vec()).ok()?;
        let info = take_bytes(b, &mut at)?.to_vec();
        let stack = u64::from_le_bytes(take(b, &mut at)?);
        Some(SpawnMsg {
            tid,
            f: FnRef { module, offset },
            arg,
            info,
            stack,
        })
    }
}

/// Error kinds in thread answers.
pub(crate) const ERR_UNKNOWN_THREAD: u8 = 1;
pub(crate) const ERR_OTHER: u8 = 2;

/// A join answer: `0, ret, info` or `kind, error text`.
pub(crate) fn encode_join_ok(ret: u64, info: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&ret.to_le_bytes());
    put_bytes(&mut v, info);
    v
}

pub(crate) fn encode_err(kind: u8, text: &str) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(text.as_bytes());
    v
}

/// Decode a spawn or join answer: `Ok((ret, info))` or the error kind and text.
pub fn decode_answer(b: &[u8]) -> Result<(u64, Vec<u8>), (u8, String)> {
    match b.first() {
        Some(0) => {
            let mut at = 1;
            let ret = take::<8>(b, &mut at).map(u64::from_le_bytes);
            let info = take_bytes(b, &mut at).map(<[u8]>::to_vec);
            match (ret, info) {
                (Some(r), Some(i)) => Ok((r, i)),
                _ => Err((ERR_OTHER, "malformed thread answer".into())),
            }
        }
        Some(&k) => Err((k, String::from_utf8_lossy(&b[1..]).into_owned())),
        None => Err((ERR_OTHER, "empty thread answer".into())),
    }
}

impl Service {
    /// Record a thread that starts running on this node.
    pub(crate) fn thread_started(&mut self, tid: ThreadId) {
        self.threads
            .threads
            .insert(tid.0, ThreadState::Running(Vec::new()));
        self.threads.running += 1;
        self.update_ending();
    }

    /// This node entered its finalization (its main thread is done with the program).
    pub(crate) fn finalizing(&mut self) {
        self.threads.finalizing = true;
        self.update_ending();
    }

    /// The protocol is ending while the node finalizes and no thread of it runs: on a node
    /// whose main thread waits in finalize from the start (the program runs in threads other
    /// nodes started here), only once those threads are over.
    fn update_ending(&mut self) {
        let t = &self.threads;
        let ending = t.finalizing && t.running == 0;
        self.protocol.set_ending(ending);
    }

    /// A thread of this node ended with `ret`, its release done and `info` its notices.
    pub(crate) fn thread_done(&mut self, ep: &Endpoint, tid: ThreadId, ret: u64, info: Vec<u8>) {
        let joiners = match self.threads.threads.remove(&tid.0) {
            Some(ThreadState::Running(j)) => {
                self.threads.running = self.threads.running.saturating_sub(1);
                self.update_ending();
                j
            }
            _ => Vec::new(),
        };
        if joiners.is_empty() {
            self.threads
                .threads
                .insert(tid.0, ThreadState::Done { ret, info });
            return;
        }
        // pthreads allows one joiner; the first gets the result, later ones an error.
        let mut first = true;
        for j in joiners {
            let answer = if first {
                Ok((ret, info.clone()))
            } else {
                Err(tid)
            };
            first = false;
            self.answer_join(ep, j, answer);
        }
    }

    fn answer_join(&mut self, ep: &Endpoint, j: Joiner, answer: Result<(u64, Vec<u8>), ThreadId>) {
        match (j, answer) {
            (Joiner::Local(w), Ok((ret, _))) => self.wake(w, Reply::Value(ret)),
            (Joiner::Local(w), Err(tid)) => {
                self.wake(w, Reply::Failed(SquallError::UnknownThread(tid)))
            }
            (Joiner::Remote(req), a) => {
                let bytes = match a {
                    Ok((ret, info)) => encode_join_ok(ret, &info),
                    Err(tid) => encode_err(
                        ERR_UNKNOWN_THREAD,
                        &format!("{tid} was joined by another thread"),
                    ),
                };
                if let Err(e) = ep.reply(&req, bytes) {
                    eprintln!(
                        "squall: {}: could not answer a join from {}: {e}",
                        self.me, req.src
                    );
                }
            }
        }
    }

    /// Someone wants to join `tid`, which runs (or ran) on this node.
    pub(crate) fn join(&mut self, ep: &Endpoint, tid: ThreadId, j: Joiner) {
        match self.threads.threads.remove(&tid.0) {
            Some(ThreadState::Done { ret, info }) => self.answer_join(ep, j, Ok((ret, info))),
            Some(ThreadState::Running(mut js)) => {
                js.push(j);
                self.threads.threads.insert(tid.0, ThreadState::Running(js));
            }
            None => {
                let text = format!(
                    "join of unknown {tid} on {} (never created, or already joined)",
                    self.me
                );
                match j {
                    Joiner::Local(w) => {
                        self.wake(w, Reply::Failed(SquallError::UnknownThread(tid)))
                    }
                    Joiner::Remote(req) => {
                        if let Err(e) = ep.reply(&req, encode_err(ERR_UNKNOWN_THREAD, &text)) {
                            eprintln!(
                                "squall: {}: could not answer a join from {}: {e}",
                                self.me, req.src
                            );
                        }
                    }
                }
            }
        }
    }
}

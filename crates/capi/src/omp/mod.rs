//! Squall's OpenMP runtime: the GCC libgomp ABI (`GOMP_*`) that `gcc -fopenmp` lowers every
//! construct to, and the `omp_*` API, so an unmodified OpenMP program runs across nodes
//! (`pkg-config --libs squall-openmp` links these definitions instead of the system libgomp).
//!
//! Modules, one concern each: `icv` (internal control variables, the environment, the
//! `omp_*` getters and setters, the calling thread's team frames), `team` (parallel regions:
//! team creation over the nodes, barriers), `pool` (the thread pool of main's outermost
//! regions), `loops` (iteration hand-out, sections, ordered), `chunks` (dynamic chunks per node first), `loop_abi` (the loop entry points), `doacross` (ordered(n) loops with depend(sink/source)),
//! `sync` (critical, atomic, single/copyprivate, locks), `tasks` (the task entry points,
//! taskloops, cancellation), `deferred` (the team's task list, dependences, scheduling points), `task_red` (task reductions).
//!
//! What makes it work across nodes is the pthreads layer's single system image: the program's
//! globals and every thread's stack are Squall memory, so the `data` pointer gcc passes to the
//! outlined region (into the opener's stack) means the same memory on every node. Team
//! threads are Squall threads started with `Node::spawn_with` and run on shared stacks by the
//! pthreads layer's thread runner. Shared control words of a team live in the shared heap and
//! are only touched through home-executed atomics (`Node::atomic_ordered`); data
//! consistency comes from Squall barriers, locks and thread create/join.
//!
//! Owns: the OpenMP semantics. Must not touch: the runtime's internals (public `squall` API only).
pub mod chunks;
pub mod deferred;
pub mod doacross;
pub mod icv;
pub mod loop_abi;
pub mod loops;
pub mod pool;
pub mod sync;
pub mod task_red;
pub mod tasks;
pub mod team;

use crate::api::node_ref;
use crate::error::{guard, CapiError};
use squall::{AtomicOp, MemOrder};
use std::ffi::CStr;

/// Run `f` (Squall work) on the private stack; a failure ends the program with a message
/// naming the OpenMP entry point (the libgomp ABI has no error returns).
pub(crate) fn run<T>(call: &'static str, f: impl FnOnce() -> Result<T, CapiError>) -> T {
    guard(call, |_| fatal(call), f)
}

/// Print the calling thread's last error for `call` and end the program.
pub(crate) fn fatal(call: &str) -> ! {
    // SAFETY: last_error_ptr returns a valid NUL-terminated string of this thread.
    let text = unsafe { CStr::from_ptr(crate::error::last_error_ptr()) }.to_string_lossy();
    let me = squall::node_ref().map_or_else(|| "squall".to_string(), |n| n.rank().to_string());
    eprintln!("squall: {me}: OpenMP {call}: {text}; ending the program");
    std::process::exit(1)
}

/// Refuse an OpenMP feature this runtime does not implement: a message, then the program ends.
pub(crate) fn refuse(call: &str, what: &str) -> ! {
    let me = squall::node_ref().map_or_else(|| "squall".to_string(), |n| n.rank().to_string());
    eprintln!("squall: {me}: OpenMP {call}: {what} is not supported by squall's OpenMP runtime; ending the program");
    std::process::exit(1)
}

/// A home-executed atomic on the 8-byte control word at `addr` (Squall memory), relaxed: the
/// control words order nothing but themselves.
pub(crate) fn word(addr: usize, op: AtomicOp) -> Result<u64, CapiError> {
    Ok(node_ref()?.atomic_ordered(addr, 8, op, MemOrder::Relaxed)?)
}

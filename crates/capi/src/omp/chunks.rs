//! Dynamic-schedule chunks handed out per node first: a node takes a block of chunks (one per
//! team thread it hosts) from the construct's global counter with one home-executed
//! fetch-and-add, and its threads take chunks from that block under a node-local mutex; only
//! the thread that finds the block empty goes to the counter again. A node with one thread of
//! the team takes one chunk per fetch-and-add (as before); k threads on a node share each
//! remote operation k ways. Every iteration of a fetched block is run: a thread stops only when
//! its node's block is empty and the counter is past the end, and every thread of the node
//! asks until it stops. A thread's chunks still increase (blocks are taken in increasing
//! order and dealt in order), so `monotonic` holds.
//!
//! Owns: the node-local blocks (process memory, keyed by team descriptor and construct
//! number; an entry goes when the last of the node's threads leaves the construct). Must not
//! touch: the slot words' layout (`team`) or the other schedules (`loops`).
use super::team::{local_threads, slot_word};
use super::word;
use crate::error::CapiError;
use squall::AtomicOp;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// This node's block of a construct: iterations `lo..hi` not yet handed out, the counter is
/// past the end (`done`), and how many of the node's threads have left.
#[derive(Default)]
struct Block {
    lo: u64,
    hi: u64,
    done: bool,
    left: u32,
}

type Blocks = HashMap<(usize, u64), Block>;

fn blocks() -> MutexGuard<'static, Blocks> {
    static B: OnceLock<Mutex<Blocks>> = OnceLock::new();
    B.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The next chunk (`chunk` iterations, fewer at the end) of dynamic construct `ws` of team
/// `team`, a loop of `n` iterations; `None` when every iteration has been handed out.
pub fn next(team: usize, ws: u64, n: u64, chunk: u64) -> Result<Option<(u64, u64)>, CapiError> {
    let mut map = blocks();
    let b = map.entry((team, ws)).or_default();
    if b.lo >= b.hi && !b.done {
        let k = u64::from(local_threads(team)?.max(1));
        let size = chunk.saturating_mul(k);
        let lo = word(slot_word(team, ws, 1), AtomicOp::FetchAdd(size))?;
        if lo >= n {
            b.done = true;
        } else {
            b.lo = lo;
            b.hi = lo.saturating_add(size).min(n);
        }
    }
    if b.lo >= b.hi {
        return Ok(None);
    }
    let lo = b.lo;
    b.lo = lo.saturating_add(chunk).min(b.hi);
    Ok(Some((lo, b.lo)))
}

/// The calling thread leaves construct `ws`: the last of the node's threads drops the block.
pub fn leave(team: usize, ws: u64) -> Result<(), CapiError> {
    let local = local_threads(team)?;
    let mut map = blocks();
    let gone = match map.get_mut(&(team, ws)) {
        Some(b) => {
            b.left += 1;
            b.left >= local
        }
        None => false,
    };
    if gone {
        map.remove(&(team, ws));
    }
    Ok(())
}

//! C11 memory orders of Squall's atomics ([`MemOrder`]) and the per-thread state that gives
//! fences their meaning across nodes.
//!
//! A release fence followed by relaxed atomic writes is a release for whoever acquires
//! through those writes (C11 fence-to-atomic synchronization): the fence makes the node's
//! writes visible and keeps the node's synchronization info of that moment; every later
//! relaxed write of the thread leaves that info at its location (as a releasing operation
//! does), without a release of its own. An acquire fence after relaxed atomic reads is an
//! acquire through what they read: the locations the thread read with relaxed operations since
//! its last acquire fence are read again as acquires.
//!
//! Owns: the order enum and the thread-local fence state. Must not touch: the service state
//! (`Node::atomic_ordered` and `Node::fence` use this).
use std::cell::RefCell;
use std::collections::BTreeSet;

/// A C11 memory order, with the values of GCC's `__ATOMIC_*` constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemOrder {
    Relaxed = 0,
    Consume = 1,
    Acquire = 2,
    Release = 3,
    AcqRel = 4,
    SeqCst = 5,
}

impl MemOrder {
    /// The order of a C `memory_order` / `__ATOMIC_*` value (GCC's HLE hint bits, 16 and up,
    /// are ignored); `None` for an unknown value.
    pub fn from_c(v: i32) -> Option<MemOrder> {
        Some(match v & 0xffff {
            0 => MemOrder::Relaxed,
            1 => MemOrder::Consume,
            2 => MemOrder::Acquire,
            3 => MemOrder::Release,
            4 => MemOrder::AcqRel,
            5 => MemOrder::SeqCst,
            _ => return None,
        })
    }

    /// (is an acquire, is a release). Consume is treated as acquire (as compilers do).
    pub fn acquire_release(self) -> (bool, bool) {
        match self {
            MemOrder::Relaxed => (false, false),
            MemOrder::Consume | MemOrder::Acquire => (true, false),
            MemOrder::Release => (false, true),
            MemOrder::AcqRel | MemOrder::SeqCst => (true, true),
        }
    }
}

#[derive(Default)]
struct FenceState {
    /// The node's synchronization info at this thread's latest release fence.
    released: Option<Vec<u8>>,
    /// (address, width) of the locations this thread read with non-acquire atomics since its
    /// latest acquire fence.
    relaxed_reads: BTreeSet<(usize, u8)>,
}

thread_local! {
    static FENCE: RefCell<FenceState> = RefCell::new(FenceState::default());
}

/// Most relaxed-read locations remembered per thread for a later acquire fence; beyond it the
/// oldest (lowest addresses) are forgotten and the fence cannot acquire through them (a
/// documented limit).
const MAX_RELAXED_READS: usize = 1024;

/// The info a relaxed write of this thread leaves at its location (after a release fence).
pub(crate) fn fence_info() -> Option<Vec<u8>> {
    FENCE.with(|f| f.borrow().released.clone())
}

/// A release fence of this thread completed with the node's `info`.
pub(crate) fn set_fence_info(info: Vec<u8>) {
    FENCE.with(|f| f.borrow_mut().released = Some(info));
}

/// This thread read `(addr, width)` with a non-acquire atomic.
pub(crate) fn note_relaxed_read(addr: usize, width: u8) {
    FENCE.with(|f| {
        let mut f = f.borrow_mut();
        f.relaxed_reads.insert((addr, width));
        if f.relaxed_reads.len() > MAX_RELAXED_READS {
            f.relaxed_reads.pop_first();
        }
    });
}

/// The locations an acquire fence acquires through (and forgets).
pub(crate) fn take_relaxed_reads() -> Vec<(usize, u8)> {
    FENCE.with(|f| {
        std::mem::take(&mut f.borrow_mut().relaxed_reads)
            .into_iter()
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_map_from_c() {
        assert_eq!(MemOrder::from_c(5), Some(MemOrder::SeqCst));
        assert_eq!(MemOrder::from_c(5 | 1 << 16), Some(MemOrder::SeqCst));
        assert_eq!(MemOrder::from_c(9), None);
        assert_eq!(MemOrder::Consume.acquire_release(), (true, false));
        assert_eq!(MemOrder::Release.acquire_release(), (false, true));
    }

    #[test]
    fn fence_state_is_per_thread() {
        note_relaxed_read(64, 8);
        note_relaxed_read(64, 8);
        set_fence_info(vec![1]);
        std::thread::spawn(|| {
            assert!(fence_info().is_none());
            assert!(take_relaxed_reads().is_empty());
        })
        .join()
        .expect("the other thread sees its own empty state");
        assert_eq!(fence_info(), Some(vec![1]));
        assert_eq!(take_relaxed_reads(), vec![(64, 8)]);
        assert!(take_relaxed_reads().is_empty());
    }
}

//! The seam between synchronization and coherence.
//!
//! Synchronization managers (`squall-sync`) know when an acquire, a release or a barrier
//! happens; coherence protocols (`squall-protocol`) know what that means for pages. The sync
//! cores call these hooks at those points and carry the returned bytes inside their own
//! messages (lock requests, grants, barrier arrivals and departures), never interpreting them.
//!
//! Order of calls for one lock handed from node A (releaser) to node B (acquirer):
//! 1. on B: `acquire_info()` — sent with B's request (e.g. B's vector time);
//! 2. on A: `begin_release(token)` when A's thread unlocks; the grant to B is not sent until the
//!    release is complete (`true` returned, or later `ReleaseDone(token)` reported by the protocol);
//! 3. on A: `grant_info(b_info)` — what B must learn (write notices B has not seen), sent with the grant;
//! 4. on B: `apply_grant(info)` before B's thread is resumed (invalidations happen here).
//!
//! For a barrier: every node does `begin_release`, then sends `barrier_info()` with its arrival;
//! the arrivals' bytes are gathered (up a tree of nodes, see `squall-sync`), and every node calls
//! `apply_barrier(&all)` before its threads leave the barrier. On the way, a node may combine
//! several nodes' bytes into one with `merge_barrier_infos` (so a departure need not carry N
//! infos to each of N nodes); a protocol that does not merge gets every node's bytes.

/// Hooks a coherence protocol offers to synchronization. Implementations must not block.
pub trait Consistency {
    /// Bytes an acquirer sends along with a lock request.
    fn acquire_info(&mut self) -> Vec<u8>;
    /// At the node handing a lock over: bytes the acquirer must apply, given its `acquire_info`.
    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8>;
    /// At the acquirer, when a grant arrives and before its thread resumes.
    fn apply_grant(&mut self, grant_info: &[u8]);
    /// Start a release (flush modifications). Returns `true` if it is complete at once;
    /// otherwise the protocol later reports completion for `token`.
    fn begin_release(&mut self, token: u64) -> bool;
    /// Bytes a node sends with its barrier arrival (after its release completed).
    fn barrier_info(&mut self) -> Vec<u8>;
    /// At every node when a barrier completes: the arrivals' bytes of all nodes, in rank order
    /// — or, where `merge_barrier_infos` merged some of them, the merged bytes in their place
    /// (then in no particular order).
    fn apply_barrier(&mut self, all: &[Vec<u8>]);
    /// Combine several nodes' `barrier_info` bytes (or earlier merges of them) into one, such
    /// that `apply_barrier` of the result does what applying all of `infos` would (it may do
    /// more that is harmless, e.g. invalidate a superset). Must be a pure function of `infos`:
    /// any node may merge any other nodes' bytes. `None` (the default): this protocol does not
    /// merge; the barrier then carries every node's bytes separately.
    fn merge_barrier_infos(&mut self, _infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        None
    }
}

/// A protocol that does nothing at synchronization points (for sync-only tests and for
/// allocations that are not cached).
#[derive(Debug, Default)]
pub struct NoConsistency;

impl Consistency for NoConsistency {
    fn acquire_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn grant_info(&mut self, _acquirer_info: &[u8]) -> Vec<u8> {
        Vec::new()
    }
    fn apply_grant(&mut self, _grant_info: &[u8]) {}
    fn begin_release(&mut self, _token: u64) -> bool {
        true
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn apply_barrier(&mut self, _all: &[Vec<u8>]) {}
}

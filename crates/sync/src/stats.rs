//! Counters of one node's synchronization activity (time is measured by the runtime, not here).
//!
//! Owns: `SyncStats`. Must not touch: clocks, core state.
use crate::message::KIND_NAMES;
use serde::{Deserialize, Serialize};

/// What one SyncCore did. Serializable so the runtime can print it with its other statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncStats {
    /// Lock acquisitions served without any message (the token was on this node).
    pub lock_acquires_local: u64,
    /// Lock acquisitions on this node's lock cache: the token was here, idle, and the thread
    /// took it with one compare-and-swap, without the core (not in `lock_acquires_local`).
    #[serde(default)]
    pub lock_acquires_local_fast: u64,
    /// Lock acquisitions that needed the token to come from another node.
    pub lock_acquires_remote: u64,
    /// Of the local acquisitions: those that took a token lent along with another lock's grant
    /// (lock read-ahead hits).
    #[serde(default)]
    pub lock_acquires_lent: u64,
    /// Idle tokens this node lent along with its grants.
    #[serde(default)]
    pub lock_lends: u64,
    /// Of the lends: tokens this node chose by its own lock order (the request left the choice
    /// to the lender, `ReadAhead::more`).
    #[serde(default)]
    pub lock_lends_unasked: u64,
    /// Tokens other nodes lent to this node.
    #[serde(default)]
    pub lock_lends_received: u64,
    /// Lent tokens that left this node again before any thread took them (read-ahead misses).
    #[serde(default)]
    pub lock_lends_unused: u64,
    /// Lock requests (or their forwards) dropped because a lend had overtaken them.
    #[serde(default)]
    pub lock_requests_overtaken: u64,
    /// Cohort passes: local acquisitions that went before a waiting successor node beyond the
    /// threads queued before its forward came (the token stayed on this node for them; at most
    /// `SyncCore::set_lock_cohort` in a row, see `lock.rs`). Counted in `lock_acquires_local`.
    #[serde(default)]
    pub lock_cohort_passes: u64,
    /// `trylock` calls that returned `Outcome::Busy`.
    pub trylock_busy: u64,
    /// Barrier episodes this node took part in (completed).
    pub barrier_episodes: u64,
    /// One-way hops on the longest causal chain of each barrier episode this node completed,
    /// summed (per-node mode: ⌈log2 N⌉+1, the tree's depth plus the departure; total mode: 2,
    /// or 4 with a collect round). Divided by `barrier_episodes`: hops per barrier.
    #[serde(default)]
    pub barrier_hops: u64,
    /// Total-count barriers: eager releases this node started (its predicted participants
    /// arrived; their count goes with its info in one message).
    #[serde(default)]
    pub barrier_eager: u64,
    /// Total-count barriers: threads reported late (they arrived after this node's eager info).
    #[serde(default)]
    pub barrier_late: u64,
    /// Total-count barriers: collects answered after an eager info (a late thread counted in
    /// the episode made the info stale).
    #[serde(default)]
    pub barrier_recollects: u64,
    /// Total-count barriers, manager side: collects sent (or done locally).
    #[serde(default)]
    pub barrier_collects: u64,
    /// Total-count barriers: threads a departure did not count, kept for the next episode.
    #[serde(default)]
    pub barrier_carried: u64,
    /// Condition waits completed (signalled and lock re-acquired).
    pub cond_waits: u64,
    /// Condition signals and broadcasts issued by this node's threads.
    pub cond_signals: u64,
    /// Flag waits completed.
    pub flag_waits: u64,
    /// Messages sent, indexed like `message::KIND_NAMES`.
    pub messages_sent: [u64; 17],
    /// Bytes of sync messages sent.
    pub bytes_sent: u64,
}

impl SyncStats {
    /// Total number of messages sent.
    pub fn messages_total(&self) -> u64 {
        self.messages_sent.iter().sum()
    }

    /// Messages sent of the kind named `name` (see `message::KIND_NAMES`); 0 for unknown names.
    pub fn messages_of(&self, name: &str) -> u64 {
        KIND_NAMES
            .iter()
            .position(|k| *k == name)
            .map_or(0, |i| self.messages_sent[i])
    }
}

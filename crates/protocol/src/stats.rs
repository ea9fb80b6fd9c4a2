//! Protocol statistics, per node, serializable and summable over nodes.
//!
//! Owns: the counters a core keeps. Must not touch: protocol decisions.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::AddAssign;

/// Messages and bytes sent of one message type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsgCount {
    pub messages: u64,
    pub bytes: u64,
}

/// Counters of one protocol core (or their sum over nodes, see `merge`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtoStats {
    pub read_faults: u64,
    pub write_faults: u64,
    pub twins: u64,
    pub diffs_created: u64,
    pub diff_bytes: u64,
    pub diffs_applied: u64,
    pub page_fetches: u64,
    /// hlrc: pages sent along with a fetch (read-ahead), beside `page_fetches`.
    pub pages_prefetched: u64,
    /// hlrc: of `pages_prefetched`, pages before the faulting one (runs of lost copies).
    #[serde(default)]
    pub pages_prefetched_behind: u64,
    pub invalidations: u64,
    pub home_migrations: u64,
    /// hlrc: exclusive-mode grants (no twin, diff or notice) and recalls of them.
    pub exclusive_grants: u64,
    pub recalls: u64,
    /// hlrc: pages a home's push updated, and notices those updates made unnecessary.
    #[serde(default)]
    pub pushes_taken: u64,
    #[serde(default)]
    pub push_kept: u64,
    /// hlrc: pages a home sent along with its lock grants, and pages an acquirer updated in
    /// place from them (instead of invalidating and fetching them again).
    #[serde(default)]
    pub grant_pages_pushed: u64,
    #[serde(default)]
    pub grant_pushes_taken: u64,
    /// hlrc: faults on probed copies, pushed or fetched at a barrier (granted without a
    /// message).
    #[serde(default)]
    pub push_probe_hits: u64,
    /// hlrc: fetches sent when a barrier released (runs of copies its notices took that this
    /// node used lately), and the pages they asked for.
    #[serde(default)]
    pub barrier_fetches: u64,
    #[serde(default)]
    pub pages_barrier_fetched: u64,
    /// hlrc: homes this node took from a static placement instead of asking the manager.
    #[serde(default)]
    pub homes_computed: u64,
    pub atomics: u64,
    /// Synchronization info bytes that could not be decoded (a bug in a peer).
    pub malformed_sync_info: u64,
    /// Times the notice store was compacted (no barrier for a long time).
    pub notice_compactions: u64,
    /// Per message type (its name in the protocol docs).
    pub sent: BTreeMap<String, MsgCount>,
}

impl ProtoStats {
    /// Add another node's counters to these.
    pub fn merge(&mut self, other: &ProtoStats) {
        self.read_faults += other.read_faults;
        self.write_faults += other.write_faults;
        self.twins += other.twins;
        self.diffs_created += other.diffs_created;
        self.diff_bytes += other.diff_bytes;
        self.diffs_applied += other.diffs_applied;
        self.page_fetches += other.page_fetches;
        self.pages_prefetched += other.pages_prefetched;
        self.pages_prefetched_behind += other.pages_prefetched_behind;
        self.invalidations += other.invalidations;
        self.home_migrations += other.home_migrations;
        self.exclusive_grants += other.exclusive_grants;
        self.recalls += other.recalls;
        self.pushes_taken += other.pushes_taken;
        self.push_kept += other.push_kept;
        self.grant_pages_pushed += other.grant_pages_pushed;
        self.grant_pushes_taken += other.grant_pushes_taken;
        self.push_probe_hits += other.push_probe_hits;
        self.barrier_fetches += other.barrier_fetches;
        self.homes_computed += other.homes_computed;
        self.pages_barrier_fetched += other.pages_barrier_fetched;
        self.atomics += other.atomics;
        self.malformed_sync_info += other.malformed_sync_info;
        self.notice_compactions += other.notice_compactions;
        for (k, v) in &other.sent {
            let e = self.sent.entry(k.clone()).or_default();
            e.messages += v.messages;
            e.bytes += v.bytes;
        }
    }
    /// Record one application fault.
    pub fn count_fault(&mut self, write: bool) {
        if write {
            self.write_faults += 1;
        } else {
            self.read_faults += 1;
        }
    }
    /// Record one message sent.
    pub fn count_send(&mut self, kind: &str, bytes: usize) {
        let e = self.sent.entry(kind.to_string()).or_default();
        e.messages += 1;
        e.bytes += bytes as u64;
    }
    /// Total messages sent (all types).
    pub fn messages(&self) -> u64 {
        self.sent.values().map(|c| c.messages).sum()
    }
    /// Total bytes sent (all types).
    pub fn bytes(&self) -> u64 {
        self.sent.values().map(|c| c.bytes).sum()
    }
    /// Messages of one type.
    pub fn messages_of(&self, kind: &str) -> u64 {
        self.sent.get(kind).map_or(0, |c| c.messages)
    }
}

impl AddAssign<&ProtoStats> for ProtoStats {
    fn add_assign(&mut self, rhs: &ProtoStats) {
        self.merge(rhs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_and_serializes() {
        let mut a = ProtoStats {
            read_faults: 2,
            ..Default::default()
        };
        a.count_send("fetch", 10);
        let mut b = ProtoStats {
            read_faults: 3,
            twins: 1,
            ..Default::default()
        };
        b.count_send("fetch", 5);
        b.count_send("diff", 7);
        a += &b;
        assert_eq!(a.read_faults, 5);
        assert_eq!(a.twins, 1);
        assert_eq!(a.messages_of("fetch"), 2);
        assert_eq!(a.bytes(), 22);
        let json = serde_json::to_string(&a).expect("serializable");
        let back: ProtoStats = serde_json::from_str(&json).expect("deserializable");
        assert_eq!(back, a);
    }
}

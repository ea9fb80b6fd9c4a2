//! Counters of one node's region protocol. Owns only the counting.
use serde::Serialize;
use std::collections::BTreeMap;

/// What one node's region core did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RegionStats {
    pub created: u64,
    pub maps: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Read copies this node dropped because the home invalidated them.
    pub invalidations: u64,
    /// Exclusive copies this node sent back to the home when recalled.
    pub recalls: u64,
    /// Invalidations and recalls this node sent as the home.
    pub home_invalidations_sent: u64,
    pub home_recalls_sent: u64,
    pub flushes: u64,
    pub deletes: u64,
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    /// Messages sent, by kind.
    pub sent: BTreeMap<&'static str, u64>,
}

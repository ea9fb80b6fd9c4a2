//! Communication statistics: per message type counts and bytes, plus transport counters.
//! Owns counting only; must not decide anything.
use serde::Serialize;
use std::collections::BTreeMap;

/// Messages and payload bytes of one message type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TypeCount {
    pub sent: u64,
    pub sent_bytes: u64,
    pub received: u64,
    pub received_bytes: u64,
}

/// Why an incoming packet was dropped without delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Not a squall packet or a malformed header.
    Garbage,
    /// Shorter than its header says.
    Truncated,
    /// Carries another run's job id.
    ForeignJob,
    /// Addressed to another rank or from a rank outside the job.
    BadDest,
    /// A duplicate of a packet already delivered.
    Duplicate,
    /// Too far ahead of the receive window to buffer.
    OutOfWindow,
    /// Arrived from a peer that already said goodbye.
    AfterBye,
}

/// A snapshot of one node's communication counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetStats {
    /// Per message type (user and transport types), keyed by the raw type number.
    pub by_type: BTreeMap<u16, TypeCount>,
    /// Datagrams (udp) or frames (tcp) written to the network, including retransmissions and acks.
    pub packets_sent: u64,
    /// Datagrams or frames read from the network.
    pub packets_received: u64,
    /// Datagrams sent again after a timeout or a nack (udp).
    pub retransmissions: u64,
    /// Duplicate datagrams dropped (udp).
    pub dups_dropped: u64,
    /// Packets dropped, by reason (duplicates are also counted here).
    pub drops: BTreeMap<DropReason, u64>,
    /// Datagrams dropped, duplicated, reordered or delayed by fault injection.
    pub faults_injected: u64,
    /// Datagrams the socket refused (full buffer); the reliability layer resends them.
    pub send_failures: u64,
}

impl NetStats {
    /// Total messages sent over all types.
    pub fn messages_sent(&self) -> u64 {
        self.by_type.values().map(|c| c.sent).sum()
    }
    /// Total messages received over all types.
    pub fn messages_received(&self) -> u64 {
        self.by_type.values().map(|c| c.received).sum()
    }
    /// Drops for one reason.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(&reason).copied().unwrap_or(0)
    }
}

/// Transport-level counters a backend keeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkCounters {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    pub drops: BTreeMap<DropReason, u64>,
    pub faults_injected: u64,
    pub send_failures: u64,
}

impl LinkCounters {
    pub fn drop(&mut self, reason: DropReason) {
        *self.drops.entry(reason).or_insert(0) += 1;
    }
    pub fn merge_into(&self, s: &mut NetStats) {
        s.packets_sent += self.packets_sent;
        s.packets_received += self.packets_received;
        s.retransmissions += self.retransmissions;
        s.faults_injected += self.faults_injected;
        s.send_failures += self.send_failures;
        for (r, n) in &self.drops {
            *s.drops.entry(*r).or_insert(0) += n;
        }
        s.dups_dropped = s.dropped(DropReason::Duplicate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_serialize_to_json() {
        let mut s = NetStats::default();
        s.by_type.insert(
            100,
            TypeCount {
                sent: 2,
                sent_bytes: 10,
                received: 1,
                received_bytes: 5,
            },
        );
        s.drops.insert(DropReason::ForeignJob, 3);
        let j = serde_json::to_string(&s).expect("serializes");
        assert!(j.contains("\"foreign_job\":3"), "{j}");
        assert!(j.contains("\"100\":{\"sent\":2"), "{j}");
    }
}

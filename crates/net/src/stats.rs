//! Communication statistics: per message type counts and bytes, plus transport counters.
//! Owns counting only; must not decide anything.
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
    /// Authentication on, and the packet is unsealed or its tag does not match the job key
    /// (forged, altered, or from a node with another key).
    BadMac,
    /// Authentication on, and a correctly tagged packet whose authentication sequence number
    /// was already received (a replay, or a datagram the network duplicated).
    Replayed,
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
    /// Frames a batch ([`crate::Endpoint::batch`]) held and wrote together with others (tcp).
    pub frames_batched: u64,
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
    /// Packets received whose authentication tag and sequence number were checked and
    /// accepted (0 when the job runs without authentication).
    pub packets_authenticated: u64,
    /// Times the service thread kept polling after serving input instead of sleeping
    /// (`SQUALL_POLL_SPIN_US`), and how many of those caught input before the window ended.
    pub poll_spins: u64,
    pub poll_spin_hits: u64,
    /// Replies to blocking requests that reached their waiting thread while it was still
    /// polling (`SQUALL_REPLY_SPIN_US`): no wake-up of that thread; and, of those, the ones it
    /// read from the socket itself (no service thread on the path either).
    pub replies_spun: u64,
    pub replies_polled: u64,
    /// Messages an application thread waiting for something they bring (a lock grant, a
    /// barrier release) read from the socket and handled itself ([`crate::Endpoint::poll_once`]).
    pub waiter_handled: u64,
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
    pub frames_batched: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    pub drops: BTreeMap<DropReason, u64>,
    pub faults_injected: u64,
    pub send_failures: u64,
    pub authenticated: u64,
}

impl LinkCounters {
    pub fn drop(&mut self, reason: DropReason) {
        *self.drops.entry(reason).or_insert(0) += 1;
    }
    pub fn merge_into(&self, s: &mut NetStats) {
        s.packets_sent += self.packets_sent;
        s.frames_batched += self.frames_batched;
        s.packets_received += self.packets_received;
        s.retransmissions += self.retransmissions;
        s.faults_injected += self.faults_injected;
        s.send_failures += self.send_failures;
        s.packets_authenticated += self.authenticated;
        for (r, n) in &self.drops {
            *s.drops.entry(*r).or_insert(0) += n;
        }
        s.dups_dropped = s.dropped(DropReason::Duplicate);
    }
}

/// Slots of [`TypeCounters`]' lock-free table (a job uses a few dozen message types).
const TYPE_SLOTS: usize = 256;

/// One slot: `key` is 0 while free, else the message type + 1 (set once, never cleared).
/// The `own_*` counters have one writer (the service thread: [`TypeCounters::sent_owned`]),
/// which adds with a plain load and store instead of a locked read-modify-write.
#[derive(Default)]
struct TypeSlot {
    key: AtomicU32,
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    received: AtomicU64,
    received_bytes: AtomicU64,
    own_sent: AtomicU64,
    own_sent_bytes: AtomicU64,
    own_received: AtomicU64,
    own_received_bytes: AtomicU64,
}

/// Adds to a counter only one thread writes (no locked instruction; readers see whole values).
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Per message type counts, updated on every message without a lock: an open-addressed table
/// of atomic counters keyed by type (a slot is claimed once with a compare-and-swap), with a
/// locked map behind it for types beyond the table's room.
pub(crate) struct TypeCounters {
    slots: Box<[TypeSlot]>,
    overflow: Mutex<BTreeMap<u16, TypeCount>>,
}

impl Default for TypeCounters {
    fn default() -> Self {
        TypeCounters {
            slots: (0..TYPE_SLOTS).map(|_| TypeSlot::default()).collect(),
            overflow: Mutex::new(BTreeMap::new()),
        }
    }
}

impl TypeCounters {
    /// The slot of `ty`, claiming a free one; None when the table is full.
    fn slot(&self, ty: u16) -> Option<&TypeSlot> {
        let key = u32::from(ty) + 1;
        let start = (u32::from(ty).wrapping_mul(0x9e37_79b9) >> 24) as usize % TYPE_SLOTS;
        for i in 0..TYPE_SLOTS {
            let s = &self.slots[(start + i) % TYPE_SLOTS];
            match s.key.load(Ordering::Acquire) {
                k if k == key => return Some(s),
                0 => match s
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(s),
                    Err(k) if k == key => return Some(s),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        None
    }

    /// Counts one message of `len` payload bytes sent.
    pub fn sent(&self, ty: u16, len: usize) {
        match self.slot(ty) {
            Some(s) => {
                s.sent.fetch_add(1, Ordering::Relaxed);
                s.sent_bytes.fetch_add(len as u64, Ordering::Relaxed);
            }
            None => {
                let mut m = self.overflow.lock();
                let c = m.entry(ty).or_default();
                c.sent += 1;
                c.sent_bytes += len as u64;
            }
        }
    }

    /// Counts one message of `len` payload bytes sent by the owner thread (the service
    /// thread): the only thread calling this or [`TypeCounters::received_owned`].
    pub fn sent_owned(&self, ty: u16, len: usize) {
        match self.slot(ty) {
            Some(s) => {
                bump(&s.own_sent, 1);
                bump(&s.own_sent_bytes, len as u64);
            }
            None => self.sent(ty, len),
        }
    }

    /// Counts one message of `len` payload bytes received, by the owner thread (see
    /// [`TypeCounters::sent_owned`]).
    pub fn received_owned(&self, ty: u16, len: usize) {
        match self.slot(ty) {
            Some(s) => {
                bump(&s.own_received, 1);
                bump(&s.own_received_bytes, len as u64);
            }
            None => self.received(ty, len),
        }
    }

    /// Counts one message of `len` payload bytes received.
    pub fn received(&self, ty: u16, len: usize) {
        match self.slot(ty) {
            Some(s) => {
                s.received.fetch_add(1, Ordering::Relaxed);
                s.received_bytes.fetch_add(len as u64, Ordering::Relaxed);
            }
            None => {
                let mut m = self.overflow.lock();
                let c = m.entry(ty).or_default();
                c.received += 1;
                c.received_bytes += len as u64;
            }
        }
    }

    /// A snapshot by type (each counter read on its own: a message counted meanwhile may show
    /// in one counter and not yet in its partner).
    pub fn snapshot(&self) -> BTreeMap<u16, TypeCount> {
        let mut m = self.overflow.lock().clone();
        for s in self.slots.iter() {
            let key = s.key.load(Ordering::Acquire);
            let Some(ty) = key.checked_sub(1).and_then(|t| u16::try_from(t).ok()) else {
                continue;
            };
            let c = m.entry(ty).or_default();
            c.sent += s.sent.load(Ordering::Relaxed);
            c.sent_bytes += s.sent_bytes.load(Ordering::Relaxed);
            c.received += s.received.load(Ordering::Relaxed);
            c.received_bytes += s.received_bytes.load(Ordering::Relaxed);
            c.sent += s.own_sent.load(Ordering::Relaxed);
            c.sent_bytes += s.own_sent_bytes.load(Ordering::Relaxed);
            c.received += s.own_received.load(Ordering::Relaxed);
            c.received_bytes += s.own_received_bytes.load(Ordering::Relaxed);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_counters_count_every_type_even_past_the_table() {
        let t = TypeCounters::default();
        // More types than slots: the rest go to the locked map.
        for ty in 0..(TYPE_SLOTS as u16 + 40) {
            t.sent(ty, usize::from(ty));
            t.received(ty, 1);
            t.received(ty, 2);
        }
        t.sent(u16::MAX, 7);
        // The owner's counts add to the shared ones.
        t.sent_owned(u16::MAX, 3);
        t.received_owned(u16::MAX, 4);
        let m = t.snapshot();
        assert_eq!(m.len(), TYPE_SLOTS + 41);
        for (ty, c) in &m {
            if *ty == u16::MAX {
                assert_eq!(
                    *c,
                    TypeCount {
                        sent: 2,
                        sent_bytes: 10,
                        received: 1,
                        received_bytes: 4
                    }
                );
                continue;
            }
            assert_eq!(
                *c,
                TypeCount {
                    sent: 1,
                    sent_bytes: u64::from(*ty),
                    received: 2,
                    received_bytes: 3
                },
                "type {ty}"
            );
        }
    }

    #[test]
    fn type_counters_are_exact_under_concurrent_claims() {
        let t = std::sync::Arc::new(TypeCounters::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = std::sync::Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..1000u16 {
                        t.sent(64 + i % 50, 10);
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().expect("counting thread");
        }
        let m = t.snapshot();
        assert_eq!(m.len(), 50);
        assert!(m.values().all(|c| c.sent == 80 && c.sent_bytes == 800));
    }

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

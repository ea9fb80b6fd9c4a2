//! `sc` scenarios: exact message counts, and the races of DSM/IP §3.2.3 (Figure 7): an
//! upgrade crossing an invalidation, requests racing with an ownership transfer, duplicate
//! faults.

mod common;
use common::Cluster;
use squall_core::{Access, PageId};
use squall_protocol::AtomicOp;

#[test]
fn message_counts_of_read_miss_upgrade_recall_and_invalidate() {
    let mut c = Cluster::new("sc", 2);
    c.fault(1, 0, false); // look-up + request + grant with data
    c.settle();
    assert_eq!(c.access(1, 0), Access::Read);
    c.fault(1, 0, true); // upgrade: request + grant without data
    c.settle();
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    c.store(1, 0, 0, 5);
    c.fault(0, 0, false); // home reads: recall (downgrade) + ack with data
    c.settle();
    assert_eq!(c.access(0, 0), Access::Read);
    assert_eq!(c.access(1, 0), Access::Read);
    assert_eq!(c.load(0, 0, 0), 5);
    c.fault(0, 0, true); // home writes: invalidate + ack
    c.settle();
    assert_eq!(c.access(0, 0), Access::ReadWrite);
    assert_eq!(c.access(1, 0), Access::None);
    let s = c.total_stats();
    assert_eq!(s.messages_of("home_query"), 1);
    assert_eq!(s.messages_of("home_reply"), 1);
    assert_eq!(s.messages_of("request"), 2);
    assert_eq!(s.messages_of("grant"), 2);
    assert_eq!(s.messages_of("recall"), 1);
    assert_eq!(s.messages_of("recall_ack"), 1);
    assert_eq!(s.messages_of("invalidate"), 1);
    assert_eq!(s.messages_of("invalidate_ack"), 1);
    assert_eq!(s.messages(), 10);
    // The sync hooks are no-ops: a release completes at once.
    assert!(c.cores[1].begin_release(1));
}

/// Figure 7, the write/invalidate crossing: node 1 asks to upgrade its read copy while the home
/// is invalidating it for node 2's write. The write must happen once, in M, with current data.
#[test]
fn upgrade_crossing_an_invalidation_gets_data() {
    let mut c = Cluster::new("sc", 3);
    for n in [1, 2] {
        c.fault(n, 0, false);
        c.settle();
    }
    c.fault(1, 0, true); // node 1's upgrade request is in flight
    c.fault(2, 0, true);
    c.deliver(2, 0); // the home serves node 2 first: invalidates node 1
    c.deliver(1, 0); // node 1's upgrade waits at the home
    assert!(c.deliver(0, 1)); // the invalidation reaches node 1 while it waits
    assert_eq!(c.access(1, 0), Access::None);
    c.deliver(1, 0); // ack
    c.deliver(0, 2); // node 2 owns the page
    assert_eq!(c.access(2, 0), Access::ReadWrite);
    c.store(2, 0, 0, 42);
    c.settle(); // node 2 recalled, node 1 granted with data
    assert_eq!(c.access(2, 0), Access::None);
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    assert_eq!(
        c.load(1, 0, 0),
        42,
        "the grant carried the data node 1's copy lost"
    );
    c.store(1, 0, 0, 43);
    c.fault(2, 0, false);
    c.settle();
    assert_eq!(c.load(2, 0, 0), 43);
}

/// Requests racing with an ownership transfer: while the home moves ownership from node 1 to
/// node 2, node 3's request and the home's own read queue behind it; the recall to the new
/// owner follows its grant on the same FIFO channel.
#[test]
fn requests_queue_behind_an_ownership_transfer() {
    let mut c = Cluster::new("sc", 4);
    for n in [2, 3] {
        c.fault(n, 0, false); // learn the home
        c.settle();
    }
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 0, 1);
    c.fault(2, 0, true);
    c.fault(3, 0, false);
    c.deliver(2, 0); // recall to node 1
    c.deliver(3, 0); // queued
    c.fault(0, 0, false); // the home's own read: queued
    assert_eq!(
        c.pending(0, 3),
        0,
        "nothing for node 3 while the transfer runs"
    );
    c.deliver(0, 1);
    c.deliver(1, 0); // recall ack: grant to node 2, then recall (downgrade) to node 2
    assert_eq!(c.pending(0, 2), 2);
    c.deliver(0, 2); // grant first
    assert_eq!(c.access(2, 0), Access::ReadWrite);
    c.store(2, 0, 0, 2);
    c.settle();
    assert_eq!(c.load(3, 0, 0), 2);
    assert_eq!(c.load(0, 0, 0), 2);
    assert_eq!(c.access(2, 0), Access::Read);
}

#[test]
fn duplicate_faults_send_one_request() {
    let mut c = Cluster::new("sc", 2);
    c.fault(1, 1, true);
    c.fault(1, 1, true);
    c.fault(1, 1, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("request"), 1);
    assert_eq!(c.access(1, 1), Access::ReadWrite);
}

#[test]
fn atomics_recall_the_owner_first() {
    let mut c = Cluster::new("sc", 3);
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 8, 100);
    c.cores[2]
        .atomic(PageId(0), 8, AtomicOp::FetchAdd(5).into(), 1)
        .expect("atomic accepted");
    c.drain(2);
    c.settle();
    assert_eq!(c.atomics, vec![(2, 1, 100)]);
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 8), 105);
}

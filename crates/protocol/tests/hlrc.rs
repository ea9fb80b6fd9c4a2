//! `hlrc` scenarios after Cashmere §2.2: home fetches, twins and diffs, write notices at
//! acquires and barriers, home migration with redirects, atomics, exact message counts.

mod common;
// Note: a non-home page written in an interval stays writable across the release with a
// fresh twin (`KEEP_WRITABLE_IDLE`), so the writer's access after a release is ReadWrite.
use common::Cluster;
use squall_core::{Access, NodeId, PageId};
use squall_protocol::{AtomicCall, AtomicOp, ProtoError};

#[test]
fn message_counts_of_read_miss_write_release_and_acquire() {
    let mut c = Cluster::new("hlrc", 2);
    // Read miss on a non-home node: home look-up, then fetch.
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.access(1, 0), Access::Read);
    // Write fault on a valid copy: twin, no messages.
    c.fault(1, 0, true);
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    c.store(1, 0, 8, 11);
    // Release: one diff to the home, one ack. The page was just written, so it stays
    // writable with a fresh twin (no write fault if it is written again).
    c.release(1, 1);
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    // Node 0 (the home) acquires from node 1: its copy is already up to date.
    c.handoff(1, 0);
    c.fault(0, 0, true);
    assert_eq!(c.load(0, 0, 8), 11);
    c.store(0, 0, 16, 22);
    c.release(0, 2);
    assert_eq!(
        c.access(0, 0),
        Access::ReadWrite,
        "a shared home page written lately stays writable (its next release compares it \
         with the snapshot taken now)"
    );
    // Node 1 acquires from node 0: the home pushes the page the notice names inside the
    // grant, and node 1's clean copy (equal to its twin) is updated in place: no refetch.
    c.handoff(0, 1);
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    assert_eq!(c.load(1, 0, 16), 22);
    assert_eq!(c.load(1, 0, 8), 11);
    let s = c.total_stats();
    assert_eq!(s.messages_of("home_query"), 1);
    assert_eq!(s.messages_of("home_reply"), 1);
    assert_eq!(s.messages_of("fetch"), 1);
    assert_eq!(s.messages_of("page_data"), 1);
    assert_eq!(s.messages_of("diff"), 1);
    assert_eq!(s.messages_of("diff_ack"), 1);
    assert_eq!(s.messages_of("dropped"), 0, "node 1 keeps its copy");
    assert_eq!(s.messages(), 6);
    assert_eq!(s.twins, 1);
    assert_eq!(s.diffs_created, 1);
    assert_eq!(s.diffs_applied, 1);
    assert_eq!(s.diff_bytes, 1, "only the changed byte travels");
    assert_eq!(s.invalidations, 0);
    assert_eq!((s.grant_pages_pushed, s.grant_pushes_taken), (1, 1));
    // Node 1 writes again: the twin is the pushed page, so its diff carries only its byte.
    c.store(1, 0, 24, 33);
    c.release(1, 3);
    c.handoff(1, 0);
    let s = c.total_stats();
    assert_eq!(s.diff_bytes, 2);
    assert_eq!(
        (c.load(0, 0, 8), c.load(0, 0, 16), c.load(0, 0, 24)),
        (11, 22, 33)
    );
}

#[test]
fn a_grant_naming_no_acquirer_invalidates_and_the_miss_refetches() {
    // The same history, the last notice carried by a grant that names no acquirer (a flag):
    // nothing is pushed, the notice invalidates node 1's copy and its miss refetches.
    let mut c = Cluster::new("hlrc", 2);
    c.fault(1, 0, false);
    c.settle();
    c.fault(1, 0, true);
    c.store(1, 0, 8, 11);
    c.release(1, 1);
    c.handoff(1, 0);
    c.fault(0, 0, true);
    c.store(0, 0, 16, 22);
    c.release(0, 2);
    c.notify(0, 1);
    assert_eq!(c.access(1, 0), Access::None);
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 16), 22);
    assert_eq!(c.load(1, 0, 8), 11);
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 2);
    assert_eq!(s.messages_of("page_data"), 2);
    assert_eq!(
        s.messages_of("dropped"),
        1,
        "node 1 tells the home its copy is gone"
    );
    assert_eq!(s.messages(), 9);
    assert_eq!(s.invalidations, 1);
    assert_eq!(s.grant_pages_pushed, 0);
}

#[test]
fn duplicate_faults_start_one_fetch() {
    let mut c = Cluster::new("hlrc", 2);
    c.fault(1, 1, false);
    c.fault(1, 1, false);
    c.fault(1, 1, true);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 1);
    assert_eq!(
        c.access(1, 1),
        Access::ReadWrite,
        "the write fault folded into the fetch"
    );
    assert_eq!(c.resumed.iter().filter(|r| r.0 == 1).count(), 1);
}

#[test]
fn multiple_writers_of_one_page_merge_at_the_home() {
    let mut c = Cluster::new("hlrc", 3);
    for n in [1, 2] {
        c.fault(n, 0, true);
        c.settle();
    }
    c.store(1, 0, 0, 1);
    c.store(2, 0, 8, 2);
    c.release(1, 1);
    c.release(2, 2);
    c.fault(0, 0, false);
    assert_eq!((c.load(0, 0, 0), c.load(0, 0, 8)), (1, 2));
}

/// Node 2 reads page 0 (homed at node 0); node 1 writes 5 into it under a lock that goes
/// 1 -> 0 (node 0 releases without writing); the lock is next handed to node 2.
fn written_two_hops_away() -> Cluster {
    let mut c = Cluster::new("hlrc", 3);
    c.fault(2, 0, false);
    c.settle();
    assert_eq!(c.load(2, 0, 0), 0);
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 0, 5);
    c.release(1, 1);
    c.handoff(1, 0);
    c.release(0, 2);
    c
}

#[test]
fn transitive_notices_reach_the_third_node() {
    // Lock goes 1 -> 0 -> 2; node 2 learns node 1's notice through node 0, whose grant
    // carries the page (node 0 is its home, node 1's diff applied): node 2's copy is updated
    // in place instead of invalidated.
    let mut c = written_two_hops_away();
    c.handoff(0, 2);
    assert_eq!(c.access(2, 0), Access::Read);
    assert_eq!(c.load(2, 0, 0), 5);
    let s = c.total_stats();
    assert_eq!((s.grant_pushes_taken, s.invalidations), (1, 0));
    // Without pages pushed (a grant naming no acquirer) the notice invalidates the copy.
    let mut d = written_two_hops_away();
    d.notify(0, 2);
    assert_eq!(d.access(2, 0), Access::None);
    d.fault(2, 0, false);
    d.settle();
    assert_eq!(d.load(2, 0, 0), 5);
}

#[test]
fn barrier_invalidates_and_collects_notices() {
    let mut c = Cluster::new("hlrc", 3);
    for n in 0..3 {
        c.fault(n, 0, false);
        c.settle();
    }
    c.fault(2, 0, true);
    c.store(2, 0, 64, 9);
    for n in 0..3 {
        c.release(n, 10 + u64::from(n));
    }
    let infos: Vec<Vec<u8>> = (0..3).map(|n| c.cores[n].barrier_info()).collect();
    for n in 0..3 {
        c.cores[n].apply_barrier(&infos);
    }
    assert_eq!(c.access(1, 0), Access::None);
    assert_eq!(
        c.access(2, 0),
        Access::ReadWrite,
        "the writer's own notice does not invalidate it (and it stays writable)"
    );
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 64), 9);
    // Empty acquirer info gets everything the granter holds; after the barrier that is nothing.
    let all = c.cores[2].grant_info(&[]);
    let info = c.cores[1].acquire_info();
    let again = c.cores[2].grant_info(&info);
    assert!(all.len() >= again.len());
}

#[test]
fn a_notice_overtaking_a_fetch_refetches() {
    let mut c = Cluster::new("hlrc", 3);
    c.fault(1, 0, true);
    c.settle();
    // Node 2 starts a fetch (look-up first) but the page data is held back.
    c.fault(2, 0, false);
    c.deliver(2, 0);
    c.deliver(0, 2);
    c.deliver(2, 0); // fetch served now: the home's copy lacks node 1's write
    assert_eq!(c.pending(0, 2), 1);
    c.store(1, 0, 0, 77);
    assert!(!c.cores[1].begin_release(1));
    c.drain(1);
    c.deliver(1, 0); // the diff
    c.deliver(0, 1); // its ack
    assert_eq!(c.released, vec![(1, 1)]);
    c.handoff(1, 2); // the notice arrives while the stale copy is in flight
    c.settle();
    assert_eq!(c.access(2, 0), Access::Read);
    assert_eq!(c.load(2, 0, 0), 77);
    assert_eq!(c.total_stats().messages_of("fetch"), 3);
}

#[test]
fn home_migrates_to_a_sole_writer_and_others_are_redirected() {
    let mut c = Cluster::new("hlrc-migrate", 3);
    // Node 2 learns the home (node 0) before the migration.
    c.fault(2, 0, false);
    c.settle();
    // The home is writing the page: node 1's write fault asks for the home in vain...
    c.fault(0, 0, true);
    c.fault(1, 0, true);
    c.settle();
    assert_eq!(c.total_stats().messages_of("want_home"), 1);
    assert_eq!(c.total_stats().home_migrations, 0);
    // The home keeps a page it wrote writable for a few releases (compared with a snapshot
    // at each); once idle it is write-protected and no longer counts as being written.
    for token in 1..=4 {
        c.release(0, token);
    }
    assert_eq!(c.access(0, 0), Access::Read);
    // ...but its diff (a streak of one sole-writer diff) moves the home.
    c.store(1, 0, 0, 3);
    c.release(1, 1);
    let s = c.total_stats();
    assert_eq!(s.home_migrations, 1);
    // Node 1 is the home now: its next write needs no twin and no diff.
    c.fault(1, 0, true);
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    c.store(1, 0, 8, 4);
    c.release(1, 2);
    assert_eq!(c.total_stats().diffs_created, 1);
    // Node 2 still believes node 0 is the home: redirected once (the notice comes with a
    // grant naming no acquirer, so no page is pushed with it and node 2's copy is lost).
    c.notify(1, 2);
    c.fault(2, 0, false);
    c.settle();
    assert_eq!(c.load(2, 0, 0), 3);
    assert_eq!(c.load(2, 0, 8), 4);
    assert_eq!(c.total_stats().messages_of("redirect"), 1);
    // The old home (the manager) answers new look-ups with the new home.
    let mut d = Cluster::new("hlrc-migrate", 3);
    d.fault(1, 0, true);
    d.settle();
    d.store(1, 0, 0, 1);
    d.release(1, 1);
    d.fault(2, 0, false);
    d.settle();
    assert_eq!(d.total_stats().messages_of("redirect"), 0);
    assert_eq!(d.load(2, 0, 0), 1);
}

/// A shared home page written lately stays writable, compared with its snapshot at each
/// release; once idle it is write-protected. A store of another thread that lands after the
/// comparison and before the protection must still be noticed (Water's wrong answer: the
/// next holder of the lock on another node read its old copy).
#[test]
fn a_store_landing_while_an_idle_home_page_is_protected_is_noticed() {
    // The idle releases after which the home write-protects the page (a dry run).
    let setup = |c: &mut Cluster| {
        c.fault(1, 0, false);
        c.settle();
        c.fault(0, 0, true);
        c.store(0, 0, 8, 5);
        c.release(0, 1);
        c.handoff(0, 1);
        assert_eq!(c.load(1, 0, 8), 5);
    };
    let mut dry = Cluster::new("hlrc", 2);
    setup(&mut dry);
    let mut idle = 0;
    while dry.access(0, 0) == Access::ReadWrite {
        idle += 1;
        dry.release(0, 1 + idle);
        assert!(idle < 100, "the idle home page is never write-protected");
    }
    let mut c = Cluster::new("hlrc", 2);
    setup(&mut c);
    for t in 1..idle {
        c.release(0, 1 + t);
    }
    assert_eq!(c.access(0, 0), Access::ReadWrite);
    c.store_at_protect(0, 0, 16, 7);
    c.release(0, 1 + idle);
    assert_eq!(c.access(0, 0), Access::Read, "protected at this release");
    assert_eq!(c.load(0, 0, 16), 7, "the store landed");
    // The next holder of the lock on node 1 must see it.
    c.handoff(0, 1);
    if c.access(1, 0) == Access::None {
        c.fault(1, 0, false);
        c.settle();
    }
    assert_eq!(c.load(1, 0, 16), 7, "node 1 read a stale copy");
    assert_eq!(c.load(1, 0, 8), 5);
}

#[test]
fn a_write_fault_moves_the_home_when_the_home_is_not_writing() {
    // Cashmere's migration at a write fault: node 0 (home) initialised the page, node 1
    // writes it. Exact messages: fetch + page data, then want_home + its ack (with the
    // handover); the release after sends no diff (node 1 is the home).
    let mut c = Cluster::new("hlrc-migrate", 2);
    c.fault(0, 1, true);
    c.store(0, 1, 0, 5);
    c.release(0, 1);
    c.fault(1, 1, false);
    c.settle();
    c.fault(1, 1, true);
    c.settle();
    c.store(1, 1, 8, 6);
    c.release(1, 1);
    let s = c.total_stats();
    assert_eq!(s.home_migrations, 1);
    assert_eq!(s.messages_of("fetch"), 1);
    assert_eq!(s.messages_of("want_home"), 1);
    assert_eq!(s.messages_of("diff_ack"), 1);
    assert_eq!(s.messages_of("diff"), 0);
    assert_eq!(s.diffs_created, 0);
    // Node 1 is the home: its next write needs no fault at all.
    assert_eq!(c.access(1, 1), Access::ReadWrite);
    // Node 0 dropped its copy and reads the page back from its new home.
    c.handoff(1, 0);
    c.fault(0, 1, false);
    c.settle();
    assert_eq!(c.load(0, 1, 0), 5);
    assert_eq!(c.load(0, 1, 8), 6);
}

#[test]
fn sequential_want_homes_move_the_following_copies_in_one_run() {
    // Node 0 (home) initialised pages 0..4; node 1 reads them all, then writes them in page
    // order. Page 0 moves by its own want_home; the want_home for page 1 continues the
    // sequence, so its ack is followed by one `handovers` message with pages 2 and 3, which
    // node 1 then writes with no fault at all (nobody else holds them). Exact messages: one
    // home look-up (2), 4 fetches + 4 page data, 2 want_home + 2 acks, 1 handovers; the
    // release sends nothing.
    let mut c = Cluster::new("hlrc-migrate", 2);
    for p in 0..4 {
        c.fault(0, p, true);
        c.store(0, p, 0, 100 + p);
    }
    c.release(0, 1);
    for p in 0..4 {
        c.fault(1, p, false);
        c.settle();
    }
    c.fault(1, 0, true);
    c.settle();
    c.fault(1, 1, true);
    c.settle();
    for p in 2..4 {
        assert_eq!(
            c.access(1, p),
            Access::ReadWrite,
            "page {p} came in the run"
        );
        assert_eq!(c.load(1, p, 0), 100 + p);
    }
    for p in 0..4 {
        c.store(1, p, 8, 200 + p);
    }
    c.release(1, 1);
    let s = c.total_stats();
    assert_eq!(s.home_migrations, 4);
    assert_eq!(s.messages_of("fetch"), 4);
    assert_eq!(s.messages_of("page_data"), 4);
    assert_eq!(s.messages_of("want_home"), 2);
    assert_eq!(s.messages_of("diff_ack"), 2);
    assert_eq!(s.messages_of("handovers"), 1);
    assert_eq!(s.messages_of("diff"), 0);
    assert_eq!(s.messages_of("home_query"), 1);
    assert_eq!(s.messages(), 15);
    assert_eq!(s.write_faults, 4 + 2, "node 0's four, node 1's first two");
    // Node 0 dropped its copies and reads the pages back from their new home.
    c.handoff(1, 0);
    for p in 0..4 {
        c.fault(0, p, false);
        c.settle();
        assert_eq!(c.load(0, p, 0), 100 + p);
        assert_eq!(c.load(0, p, 8), 200 + p);
    }
}

/// One barrier episode on every node of `c`: release, barrier info (which sends the
/// pushes), delivery of everything sent, then every node applies the infos.
fn barrier(c: &mut Cluster, token: u64) {
    let nodes = c.cores.len();
    for n in 0..nodes {
        c.release(n as u16, token);
    }
    let infos: Vec<Vec<u8>> = (0..nodes).map(|n| c.cores[n].barrier_info()).collect();
    for n in 0..nodes {
        c.drain(n as u16);
    }
    c.settle();
    for n in 0..nodes {
        c.cores[n].apply_barrier(&infos);
        c.drain(n as u16);
    }
    c.settle();
}

#[test]
fn a_copy_written_lately_comes_back_writable_from_the_barrier_fetch() {
    // Write-write false sharing at every step (Gauss's cyclic rows): node 0 (home of page 0)
    // writes the first word, node 1 the second, then a barrier. Node 1's copy, kept writable
    // with a twin since its first write, is lost to node 0's notice and comes back at the
    // barrier writable with a fresh twin: each later step costs node 1 no fault at all.
    let mut c = Cluster::new("hlrc", 2);
    c.fault(0, 0, true);
    c.store(0, 0, 0, 1);
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 8, 1);
    barrier(&mut c, 1);
    let faults = c.total_stats().write_faults;
    for step in 2..6u64 {
        assert_eq!(
            c.access(1, 0),
            Access::ReadWrite,
            "step {step}: node 1's copy"
        );
        c.store(0, 0, 0, step);
        c.store(1, 0, 8, step);
        barrier(&mut c, step);
        // Both writers' words, on both nodes.
        for n in 0..2 {
            assert_eq!((c.load(n, 0, 0), c.load(n, 0, 8)), (step, step), "node {n}");
        }
    }
    let s = c.total_stats();
    assert_eq!(
        s.write_faults, faults,
        "no write fault after the first step"
    );
    // Per step from step 2: node 1's diff and its ack, the `dropped` for its lost copy, and
    // the barrier fetch with its page data (the first step's copy came by demand).
    assert!(
        s.barrier_fetches >= 4,
        "{} barrier fetches",
        s.barrier_fetches
    );
    assert_eq!(s.messages_of("fetch"), 1 + s.barrier_fetches);
}

#[test]
fn a_home_pushes_what_it_wrote_to_readers_at_barriers() {
    // Node 0 (home of page 0) writes it every barrier interval; node 1 reads it once.
    let mut c = Cluster::new("hlrc-push", 2);
    c.fault(0, 0, true);
    c.store(0, 0, 0, 1);
    barrier(&mut c, 1);
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 1);
    // Interval 2: the home writes; at the barrier it pushes the page to node 1, which keeps
    // its copy through the home's notice. The push is installed as a probe (no access): the
    // read faults, but is granted locally with no message.
    c.fault(0, 0, true);
    c.store(0, 0, 0, 2);
    barrier(&mut c, 2);
    let s = c.total_stats();
    assert_eq!(s.messages_of("push"), 1);
    assert_eq!((s.pushes_taken, s.push_kept), (1, 1));
    assert_eq!(c.access(1, 0), Access::None, "a pushed copy is a probe");
    let before = s.messages();
    c.fault(1, 0, false);
    assert_eq!(
        c.total_stats().messages(),
        before,
        "a probe hit sends nothing"
    );
    assert_eq!(c.load(1, 0, 0), 2);
    // Interval 3: pushed again, but node 1 does not read it; interval 4: the push finds the
    // probe untouched, so node 1 drops the copy and tells the home (no more pushes).
    for (v, token) in [(3u64, 3u64), (4, 4)] {
        c.store(0, 0, 0, v);
        barrier(&mut c, token);
    }
    let s = c.total_stats();
    assert_eq!(s.messages_of("push"), 3);
    assert_eq!((s.pushes_taken, s.push_kept), (2, 2));
    assert_eq!(s.push_probe_hits, 1);
    assert_eq!(s.messages_of("dropped"), 1);
    assert_eq!(s.messages_of("fetch"), 1);
    c.store(0, 0, 0, 5);
    barrier(&mut c, 5);
    assert_eq!(
        c.total_stats().messages_of("push"),
        3,
        "node 1 left the copyset"
    );
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 5);
    assert_eq!(c.total_stats().messages_of("fetch"), 2);
}

#[test]
fn atomics_execute_at_the_home_in_order() {
    let mut c = Cluster::new("hlrc", 3);
    for (n, token) in [(1u16, 1u64), (2, 2), (0, 3), (1, 4)] {
        c.cores[usize::from(n)]
            .atomic(PageId(2), 16, AtomicOp::FetchAdd(1).into(), token)
            .expect("atomic accepted");
        c.drain(n);
        c.settle();
    }
    let mut olds: Vec<u64> = c.atomics.iter().map(|a| a.2).collect();
    olds.sort_unstable();
    assert_eq!(olds, vec![0, 1, 2, 3]);
    c.cores[2]
        .atomic(
            PageId(2),
            16,
            AtomicOp::CompareSwap {
                expected: 4,
                new: 40,
            }
            .into(),
            5,
        )
        .expect("atomic accepted");
    c.drain(2);
    c.settle();
    assert_eq!(c.atomics.last().copied(), Some((2, 5, 4)));
    assert_eq!(
        c.cores[1].atomic(PageId(2), 12, AtomicOp::Swap(1).into(), 6),
        Err(ProtoError::BadAtomic {
            page: PageId(2),
            offset: 12,
            width: 8
        })
    );
}

#[test]
fn unallocated_pages_are_refused() {
    let mut c = Cluster::new("hlrc", 2);
    // Node 0 manages page 9 but allocated only 0..4.
    assert_eq!(
        c.cores[0].handle_fault(PageId(9), false),
        Err(ProtoError::NotAllocated { page: PageId(9) })
    );
    c.fault(1, 9, false);
    c.deliver(1, 0);
    let msg = c
        .queues
        .get_mut(&(0, 1))
        .and_then(|q| q.pop_front())
        .expect("reply");
    assert_eq!(
        c.cores[1].handle_message(NodeId(0), &msg),
        Err(ProtoError::NotAllocated { page: PageId(9) })
    );
    assert_eq!(
        c.cores[1].handle_fault(PageId(1_000), false),
        Err(ProtoError::NotAllocated {
            page: PageId(1_000)
        })
    );
}

#[test]
fn compacted_notices_still_invalidate_everything_needed() {
    let mut c = Cluster::new("hlrc-small", 3);
    for p in [0, 1] {
        c.fault(2, p, false);
        c.settle();
    }
    // Node 1 writes pages 0 and 1 in its first interval, then other pages in seven more.
    for p in [0, 1] {
        c.fault(1, p, true);
        c.settle();
        c.store(1, p, 0, 10 + p);
    }
    c.release(1, 1);
    for (i, p) in [2u64, 3, 2, 3, 2, 3, 2].iter().enumerate() {
        c.fault(1, *p, true);
        c.settle();
        c.store(1, *p, 0, i as u64);
        c.release(1, 2 + i as u64);
    }
    assert!(c.cores[1].stats().notice_compactions > 0);
    c.handoff(1, 2);
    assert_eq!(c.access(2, 0), Access::None);
    assert_eq!(c.access(2, 1), Access::None);
    c.fault(2, 1, false);
    c.settle();
    assert_eq!(c.load(2, 1, 0), 11);
}

/// Cashmere's exclusive mode: a write miss on a page nobody else holds gets the page
/// exclusively (no twin, no diff, no notice); another node's miss recalls it.
#[test]
fn exclusive_mode_skips_twins_and_diffs_until_recalled() {
    let mut c = Cluster::new("hlrc-excl", 3);
    c.fault(1, 0, true); // look-up (2) + fetch (2), granted exclusive
    c.settle();
    assert_eq!(c.access(1, 0), Access::ReadWrite);
    c.store(1, 0, 0, 7);
    assert!(c.cores[1].begin_release(1), "nothing to flush");
    c.handoff(1, 2);
    c.fault(2, 0, false); // look-up (2) + fetch, recall, recall reply, page data (4)
    c.settle();
    assert_eq!(c.load(2, 0, 0), 7);
    assert_eq!(
        c.access(1, 0),
        Access::Read,
        "the old holder keeps a read copy"
    );
    // From now on the page is shared: writes twin and diff as usual.
    c.fault(1, 0, true);
    c.store(1, 0, 8, 8);
    c.release(1, 2); // diff + ack (2)
    c.handoff(1, 2);
    assert_eq!(c.access(2, 0), Access::None);
    c.fault(0, 0, false); // the home reads its own current copy: no messages
    assert_eq!(c.load(0, 0, 8), 8);
    let s = c.total_stats();
    assert_eq!(s.exclusive_grants, 1);
    assert_eq!(s.recalls, 1);
    assert_eq!(s.twins, 1);
    assert_eq!(s.diffs_created, 1);
    assert_eq!(s.messages_of("recall"), 1);
    assert_eq!(s.messages_of("recall_reply"), 1);
    assert_eq!(s.messages_of("dropped"), 1);
    assert_eq!(s.messages(), 13);
}

#[test]
fn notices_are_collected_one_barrier_later() {
    use common::{Mem, MemH};
    use squall_core::{AllocInfo, Consistency, HeapLayout, PageMemory, Placement};
    use squall_protocol::{Hlrc, Protocol};
    use std::rc::Rc;
    let layout = HeapLayout {
        nodes: 2,
        total_pages: 32,
    };
    let mems: Vec<Rc<Mem>> = (0..2).map(|_| Rc::new(Mem::default())).collect();
    let mut cores: Vec<Hlrc<MemH>> = (0..2)
        .map(|n| Hlrc::new(MemH(mems[n].clone()), NodeId(n as u16), layout))
        .collect();
    cores[0].register_allocation(AllocInfo {
        first: PageId(0),
        pages: 1,
        placement: Placement::Node(NodeId(0)),
    });
    let barrier = |cores: &mut Vec<Hlrc<MemH>>| {
        for c in cores.iter_mut() {
            assert!(c.begin_release(0));
        }
        let infos: Vec<Vec<u8>> = cores.iter_mut().map(|c| c.barrier_info()).collect();
        for c in cores.iter_mut() {
            c.apply_barrier(&infos);
        }
    };
    // Deliver every message until all cores are quiet; count resumes.
    let pump = |cores: &mut Vec<Hlrc<MemH>>| {
        let mut resumed = 0;
        loop {
            let mut moved = false;
            for from in 0..cores.len() {
                while let Some(a) = cores[from].poll_action() {
                    moved = true;
                    match a {
                        squall_protocol::Action::Send { to, msg } => cores[to.index()]
                            .handle_message(NodeId(from as u16), &msg)
                            .expect("message accepted"),
                        squall_protocol::Action::Resume { .. } => resumed += 1,
                        _ => {}
                    }
                }
            }
            if !moved {
                return resumed;
            }
        }
    };
    // A home page nobody else holds needs no notice when its home writes it.
    cores[0]
        .handle_fault(PageId(0), true)
        .expect("fault accepted");
    assert_eq!(pump(&mut cores), 1, "the home's fault was served");
    barrier(&mut cores);
    assert_eq!(cores[0].notices_held(), 0, "unshared home write: no notice");
    // Once node 1 holds a copy, the home's next write is noticed (the home page stays
    // writable, watched: its release compares it to the copy handed out).
    cores[1]
        .handle_fault(PageId(0), false)
        .expect("fault accepted");
    assert_eq!(pump(&mut cores), 1, "node 1's read was served");
    assert_eq!(MemH(mems[0].clone()).access(PageId(0)), Access::ReadWrite);
    MemH(mems[0].clone()).write_bytes(PageId(0), 0, &[7]);
    pump(&mut cores);
    barrier(&mut cores);
    assert_eq!(cores[0].notices_held(), 1);
    assert_eq!(cores[1].notices_held(), 1);
    barrier(&mut cores);
    assert_eq!(cores[0].notices_held(), 0);
    assert_eq!(cores[1].notices_held(), 0);
}

/// Writes sent early (a notice invalidated a page this node was writing) still need this node's
/// notice at its release, even when the page was not changed again after its refetch.
#[test]
fn early_flushed_writes_are_noticed_at_the_release() {
    let mut c = Cluster::new("hlrc", 3);
    c.fault(2, 0, false);
    c.settle();
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 0, 5);
    c.fault(0, 0, true);
    c.store(0, 0, 8, 6);
    c.release(0, 1);
    c.handoff(0, 2);
    c.fault(2, 0, false);
    c.settle();
    assert_eq!((c.load(2, 0, 0), c.load(2, 0, 8)), (0, 6));
    c.handoff(0, 1); // node 1 is writing page 0: early flush, then invalid
    c.settle();
    assert_eq!(c.access(1, 0), Access::None);
    c.fault(1, 0, false);
    c.settle();
    c.fault(1, 0, true); // twin of the refetched page; no further change
    c.release(1, 2);
    c.handoff(1, 2);
    assert_eq!(
        c.access(2, 0),
        Access::None,
        "node 1's flushed write must be noticed"
    );
    c.fault(2, 0, false);
    c.settle();
    assert_eq!(c.load(2, 0, 0), 5);
}

/// Node 0 writes `base + p` into pages 0..4 and releases (`token`); node 1 gets its notices
/// (a grant naming no acquirer, so no page comes pushed with them) and reads page 0.
fn rewrite_then_reread_page_0(c: &mut Cluster, base: u64, token: u64) {
    for p in 0..4 {
        c.fault(0, p, true);
        c.store(0, p, 0, base + p);
    }
    c.release(0, token);
    c.notify(0, 1);
    c.fault(1, 0, false);
    c.settle();
}

#[test]
fn sequential_reads_and_lost_copies_are_fetched_ahead() {
    // Node 1 reads page 0 (homed at node 0, like pages 1..4, which it never held): one fetch
    // brings all four, the three it did not ask for as one run.
    let mut c = Cluster::new("hlrc-ahead", 2);
    c.fault(1, 0, false);
    c.settle();
    for p in 0..4 {
        assert_eq!(c.access(1, p), Access::Read);
    }
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 1);
    assert_eq!(s.messages_of("page_data"), 1);
    assert_eq!(
        s.messages_of("page_run"),
        1,
        "read-ahead pages come as one run"
    );
    assert_eq!(s.pages_prefetched, 3);
    // Node 0 writes all four; after the notices node 1 reads page 0 again: only page 0 was
    // used (faulted on), so only it is fetched; the others, never used, are not read ahead.
    rewrite_then_reread_page_0(&mut c, 10, 1);
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 2);
    assert_eq!(s.messages_of("page_run"), 1);
    // Node 1 uses pages 1..4: a sequential stream (page 1's fetch brings page 2 along, page
    // 3 is fetched on its own).
    for p in 1..4 {
        c.fault(1, p, false);
        c.settle();
        assert_eq!(c.load(1, p, 0), 10 + p);
    }
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 4);
    assert_eq!(s.messages_of("page_run"), 2);
    assert_eq!(s.pages_prefetched, 4);
    // Written again: pages 0, 1 and 3 were used (faulted on), page 2 only read ahead, so the
    // fetch of page 0 brings page 1 back along with it and the run stops at page 2.
    rewrite_then_reread_page_0(&mut c, 20, 2);
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 5);
    assert_eq!(s.messages_of("page_run"), 3);
    assert_eq!(s.pages_prefetched, 5);
    for p in 0..2 {
        assert_eq!(c.access(1, p), Access::Read);
        assert_eq!(c.load(1, p, 0), 20 + p);
    }
    assert_eq!(c.access(1, 2), Access::None);
}

/// Node 1 reads pages 3, 2, 1, 0 (homed at node 0) one by one, backward: each read is a
/// fetch of its own (the pages after it are held). Node 0 writes all four and node 1
/// gets the notices with no page pushed along (`notify`): its four copies are lost.
fn read_backward_then_lose_all(kind: &str) -> Cluster {
    let mut c = Cluster::new(kind, 2);
    for p in (0..4).rev() {
        c.fault(1, p, false);
        c.settle();
    }
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch"), 4);
    assert_eq!(s.pages_prefetched, 0);
    for p in 0..4 {
        c.fault(0, p, true);
        c.store(0, p, 0, 30 + p);
    }
    c.release(0, 1);
    c.notify(0, 1);
    for p in 0..4 {
        assert_eq!(c.access(1, p), Access::None);
    }
    c.settle();
    c.resumed.clear();
    c
}

#[test]
fn a_fault_brings_back_the_lost_copies_before_and_after_it() {
    // The first fault after the notices lands on page 2: one fetch brings pages 0 and 1
    // (behind) and page 3 (ahead); the page itself comes first, then one run each side.
    let mut c = read_backward_then_lose_all("hlrc-ahead");
    let before = c.total_stats();
    c.fault(1, 2, false);
    assert_eq!(c.pending(1, 0), 1, "one fetch");
    c.deliver(1, 0);
    // The home answers page 2 (`page_data`, tag 5) before the read-ahead runs (`page_run`,
    // tag 15).
    let tags: Vec<u8> = c
        .queues
        .get(&(0, 1))
        .map(|q| q.iter().map(|m| m[0]).collect())
        .unwrap_or_default();
    assert_eq!(tags, [5, 15, 15]);
    c.deliver(0, 1);
    assert!(
        c.resumed.iter().any(|&(n, p)| n == 1 && p.0 == 2),
        "the faulting thread resumes with the first reply"
    );
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch") - before.messages_of("fetch"), 1);
    assert_eq!(
        s.messages_of("page_data") - before.messages_of("page_data"),
        1
    );
    assert_eq!(
        s.messages_of("page_run") - before.messages_of("page_run"),
        2
    );
    assert_eq!(s.pages_prefetched - before.pages_prefetched, 3);
    assert_eq!(
        s.pages_prefetched_behind - before.pages_prefetched_behind,
        2
    );
    for p in 0..4 {
        assert_eq!(c.access(1, p), Access::Read);
        assert_eq!(c.load(1, p, 0), 30 + p);
    }
}

#[test]
fn a_short_lost_run_cap_splits_the_run_between_both_sides() {
    // Capped at 2 pages: page 2's fetch brings page 3 (ahead) and page 1 (behind); page 0
    // needs a fetch of its own.
    let mut c = read_backward_then_lose_all("hlrc-ahead2");
    let before = c.total_stats();
    c.fault(1, 2, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.pages_prefetched - before.pages_prefetched, 2);
    assert_eq!(
        s.pages_prefetched_behind - before.pages_prefetched_behind,
        1
    );
    assert_eq!(c.access(1, 0), Access::None);
    for p in 1..4 {
        assert_eq!(c.load(1, p, 0), 30 + p);
    }
    c.fault(1, 0, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("fetch") - before.messages_of("fetch"), 2);
    assert_eq!(c.load(1, 0, 0), 30);
}

/// Node 0 rewrites pages 0..4 (its home pages) and both nodes pass a barrier.
fn rewrite_all_then_barrier(c: &mut Cluster, base: u64, token: u64) {
    for p in 0..4 {
        c.fault(0, p, true);
        c.store(0, p, 0, base + p);
    }
    c.settle();
    barrier(c, token);
}

#[test]
fn a_barrier_fetches_the_lost_copies_used_lately_at_once() {
    // Read-ahead off: node 1 reads pages 0 and 1 with a fetch each.
    let mut c = Cluster::new("hlrc", 2);
    for p in 0..2 {
        c.fault(1, p, false);
        c.settle();
    }
    let s0 = c.total_stats();
    assert_eq!(s0.messages_of("fetch"), 2);
    // Node 0 rewrites them: the barrier's notices take node 1's copies, and node 1 fetches
    // both at once (one fetch: `page_data` for page 0, a `page_run` with page 1), after its
    // `dropped`. They come as probes: no access yet.
    rewrite_all_then_barrier(&mut c, 10, 1);
    let s = c.total_stats();
    assert_eq!(s.barrier_fetches, 1);
    assert_eq!(s.pages_barrier_fetched, 2);
    assert_eq!(s.messages_of("fetch") - s0.messages_of("fetch"), 1);
    assert_eq!(s.messages_of("page_data") - s0.messages_of("page_data"), 1);
    assert_eq!(s.messages_of("page_run") - s0.messages_of("page_run"), 1);
    assert_eq!(s.messages_of("dropped") - s0.messages_of("dropped"), 1);
    assert_eq!(c.access(1, 0), Access::None);
    assert_eq!(c.access(1, 1), Access::None);
    // A read of page 1 grants both probes locally, no message.
    let before = c.total_stats();
    c.fault(1, 1, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages(), before.messages());
    assert_eq!(s.push_probe_hits - before.push_probe_hits, 1);
    for p in 0..2 {
        assert_eq!(c.access(1, p), Access::Read);
        assert_eq!(c.load(1, p, 0), 10 + p);
    }
    // Seen read: the next seven barrier fetches come readable, with no fault at all.
    for round in 0..7 {
        rewrite_all_then_barrier(&mut c, 20 + 10 * round, 2 + round);
        for p in 0..2 {
            assert_eq!(c.access(1, p), Access::Read, "round {round} page {p}");
            assert_eq!(c.load(1, p, 0), 20 + 10 * round + p);
        }
    }
    let s = c.total_stats();
    assert_eq!(s.barrier_fetches, 8);
    assert_eq!(s.read_faults, before.read_faults + 1);
    // The ninth comes as a probe again; nobody reads it, so the next barrier fetches nothing
    // and a later read fetches page 0 on demand (read-ahead is off: page 1 stays invalid).
    rewrite_all_then_barrier(&mut c, 60, 9);
    assert_eq!(c.access(1, 0), Access::None);
    rewrite_all_then_barrier(&mut c, 70, 10);
    let s = c.total_stats();
    assert_eq!(s.barrier_fetches, 9);
    assert_eq!(s.pages_barrier_fetched, 18);
    let fetches = s.messages_of("fetch");
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.total_stats().messages_of("fetch"), fetches + 1);
    assert_eq!(c.load(1, 0, 0), 70);
    assert_eq!(c.access(1, 1), Access::None);
}

#[test]
fn barrier_fetches_can_be_turned_off() {
    let mut c = Cluster::new("hlrc-nobfetch", 2);
    c.fault(1, 0, false);
    c.settle();
    rewrite_all_then_barrier(&mut c, 10, 1);
    let s = c.total_stats();
    assert_eq!(s.barrier_fetches, 0);
    assert_eq!(s.messages_of("fetch"), 1);
    assert_eq!(c.access(1, 0), Access::None);
}

#[test]
fn a_read_of_a_page_of_a_barrier_fetch_in_flight_trusts_the_whole_run() {
    // Node 1 reads pages 0..4 (four fetches, read-ahead off); node 0 rewrites them and the
    // barrier fetch of all four goes out. Node 1 faults on page 0 before the replies arrive:
    // the other three come readable (no probe fault each), and stay so the next round.
    let mut c = Cluster::new("hlrc", 2);
    for p in 0..4 {
        c.fault(1, p, false);
        c.settle();
    }
    for p in 0..4 {
        c.fault(0, p, true);
        c.store(0, p, 0, 40 + p);
    }
    c.settle();
    for n in 0..2 {
        c.release(n, 1);
    }
    let infos: Vec<Vec<u8>> = (0..2).map(|n| c.cores[n].barrier_info()).collect();
    c.settle();
    c.cores[0].apply_barrier(&infos);
    c.drain(0);
    c.cores[1].apply_barrier(&infos);
    c.drain(1);
    assert_eq!(c.total_stats().pages_barrier_fetched, 4);
    c.fault(1, 0, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.push_probe_hits, 0, "no probe fault");
    for p in 0..4 {
        assert_eq!(c.access(1, p), Access::Read);
        assert_eq!(c.load(1, p, 0), 40 + p);
    }
    rewrite_all_then_barrier(&mut c, 50, 2);
    for p in 0..4 {
        assert_eq!(
            c.access(1, p),
            Access::Read,
            "trusted: page {p} came readable"
        );
        assert_eq!(c.load(1, p, 0), 50 + p);
    }
    assert_eq!(c.total_stats().barrier_fetches, 2);
}

/// Node 1 reads page 0 (homed at node 0); node 0 then writes 5 into it and releases.
fn read_then_home_writes() -> Cluster {
    let mut c = Cluster::new("hlrc", 2);
    c.fault(1, 0, false);
    c.settle();
    c.fault(0, 0, true);
    c.store(0, 0, 0, 5);
    c.release(0, 1);
    c
}

#[test]
fn an_acquiring_atomic_since_the_last_barrier_leaves_the_barrier_fetch_on() {
    // Node 0 releases through an atomic (a C11 `atomic_fetch_add` with release order); node
    // 1's acquiring load of the word brings node 0's notice, which takes page 0; node 1 reads
    // it again on demand.
    let mut c = read_then_home_writes();
    let info = c.cores[0].grant_info(&[]);
    let release = AtomicCall {
        op: AtomicOp::FetchAdd(1),
        width: 8,
        acquire: false,
        release: Some(info),
    };
    c.cores[0]
        .atomic(PageId(2), 16, release, 1)
        .expect("atomic accepted");
    c.drain(0);
    c.settle();
    let acquire = AtomicCall {
        op: AtomicOp::Load,
        width: 8,
        acquire: true,
        release: None,
    };
    c.cores[1]
        .atomic(PageId(2), 16, acquire, 2)
        .expect("atomic accepted");
    c.drain(1);
    c.settle();
    let infos = c
        .atomic_infos
        .iter()
        .find(|a| a.0 == 1 && a.1 == 2)
        .map(|a| a.2.clone())
        .expect("the acquiring atomic completed");
    assert_eq!(infos.len(), 1);
    for i in &infos {
        c.cores[1].apply_atomic_grant(i);
    }
    c.drain(1);
    assert_eq!(c.access(1, 0), Access::None, "the atomic's notice took it");
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 5);
    // Not a lock grant: the barrier still fetches page 0 (contrast with the next test).
    rewrite_all_then_barrier(&mut c, 10, 2);
    let s = c.total_stats();
    assert_eq!(s.barrier_fetches, 1, "an atomic is not a lock grant");
    assert_eq!(s.pages_barrier_fetched, 1);
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 10);
}

#[test]
fn a_node_that_took_a_lock_grant_since_its_last_barrier_fetches_nothing_at_the_next() {
    // A lock handed from node 0 to node 1 between the barriers: its notice takes page 0,
    // which node 1 reads again on demand.
    let mut c = read_then_home_writes();
    c.handoff(0, 1);
    c.settle();
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 5);
    rewrite_all_then_barrier(&mut c, 10, 2);
    assert_eq!(
        c.total_stats().barrier_fetches,
        0,
        "a grant since the last barrier"
    );
    assert_eq!(c.access(1, 0), Access::None);
    c.fault(1, 0, false);
    c.settle();
    // No grant in this interval: the next barrier fetches page 0.
    rewrite_all_then_barrier(&mut c, 20, 3);
    assert_eq!(c.total_stats().barrier_fetches, 1);
    c.fault(1, 0, false);
    c.settle();
    assert_eq!(c.load(1, 0, 0), 20);
}

#[test]
fn a_node_learns_its_own_blocked_pages_from_one_home_query() {
    // Node 0 manages pages 4..12, placed in blocks: 4..8 homed at node 0, 8..12 at node 1.
    let mut c = Cluster::new("hlrc", 2);
    c.cores[0].register_allocation(squall_core::AllocInfo {
        first: PageId(4),
        pages: 8,
        placement: squall_core::Placement::Blocked,
    });
    for p in 8..12 {
        c.fault(1, p, true);
        c.settle();
        c.store(1, p, 0, p);
        assert_eq!(
            c.access(1, p),
            Access::ReadWrite,
            "page {p}: node 1 is its home"
        );
    }
    let s = c.total_stats();
    assert_eq!(
        s.messages_of("home_query"),
        1,
        "the first answer names node 1 as the home of the rest of its block"
    );
    assert_eq!(
        s.messages_of("fetch"),
        0,
        "a home never fetches its own pages"
    );
    // Node 0 reads them from their home, node 1.
    c.fault(0, 9, false);
    c.settle();
    assert_eq!(c.load(0, 9, 0), 9);
}

#[test]
fn a_home_granting_a_lock_pushes_the_page_it_wrote() {
    // The contended-counter pattern: page 0's home is node 0; node 1 writes it under a lock,
    // hands the lock back, node 0 writes it, hands the lock to node 1 with the page inside.
    let mut c = Cluster::new("hlrc", 2);
    c.fault(0, 0, true);
    c.settle();
    c.store(0, 0, 0, 1);
    c.release(0, 1);
    c.handoff(0, 1);
    c.fault(1, 0, true);
    c.settle();
    c.store(1, 0, 0, 2);
    c.release(1, 2);
    c.settle();
    c.handoff(1, 0);
    c.fault(0, 0, true);
    c.settle();
    c.store(0, 0, 0, 3);
    c.release(0, 3);
    c.settle();
    c.handoff(0, 1);
    let st = c.total_stats();
    assert_eq!(st.grant_pages_pushed, 1, "{st:?}");
    assert_eq!(st.grant_pushes_taken, 1, "{st:?}");
    assert_ne!(c.access(1, 0), Access::None);
    assert_eq!(c.load(1, 0, 0), 3);
}

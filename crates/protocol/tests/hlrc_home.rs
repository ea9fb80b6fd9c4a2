//! `hlrc` home look-ups under a static placement: a node asks the manager about a page of an
//! allocation once, learns the allocation's placement from the reply, and from then on takes
//! the pages the placement homes on it without asking (issue 21: under blocked placement a
//! node sent home queries for the pages of its own block).
mod common;

use common::Cluster;
use squall_core::{Access, AllocInfo, HeapLayout, NodeId, PageId, Placement};

/// Release on every node, exchange barrier infos, apply them (as the runtime's barrier does).
fn barrier(c: &mut Cluster, token: u64) {
    let nodes = c.cores.len();
    for n in 0..nodes {
        c.release(n as u16, token);
    }
    let infos: Vec<Vec<u8>> = (0..nodes).map(|n| c.cores[n].barrier_info()).collect();
    c.settle();
    for n in 0..nodes {
        c.cores[n].apply_barrier(&infos);
        c.drain(n as u16);
    }
    c.settle();
}

#[test]
fn a_node_takes_its_own_blocked_pages_as_home_without_asking() {
    let mut c = Cluster::new("hlrc", 2);
    // Cluster::new's layout.
    let layout = HeapLayout {
        nodes: 2,
        total_pages: 32,
    };
    // Pages 4..12 blocked over 2 nodes: 4..8 at node 0, 8..12 at node 1; node 0 manages them.
    for p in 4..12 {
        assert_eq!(layout.manager_of(PageId(p)), NodeId(0));
    }
    c.cores[0].register_allocation(AllocInfo {
        first: PageId(4),
        pages: 8,
        placement: Placement::Blocked,
    });
    // Node 1 writes the last page of its block: it does not know the allocation yet, so it
    // asks the manager once; the reply names the allocation and its placement.
    c.fault(1, 11, true);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("home_query"), 1);
    assert_eq!(s.messages_of("fetch"), 0, "node 1 is the home: no fetch");
    assert_eq!(c.access(1, 11), Access::ReadWrite);
    // The rest of its block (before page 11: not in the reply's run of following homes):
    // computed from the placement, no query, no fetch.
    for p in 8..11 {
        c.fault(1, p, true);
        c.settle();
        c.store(1, p, 0, 100 + p);
        assert_eq!(c.access(1, p), Access::ReadWrite, "page {p}");
    }
    c.store(1, 11, 0, 111);
    let s = c.total_stats();
    assert_eq!(s.messages_of("home_query"), 1);
    assert_eq!(s.messages_of("fetch"), 0);
    assert_eq!(s.homes_computed, 3);
    // Node 0's pages are another node's: node 1 still asks about them (and fetches).
    c.fault(1, 5, false);
    c.settle();
    let s = c.total_stats();
    assert_eq!(s.messages_of("home_query"), 2);
    assert_eq!(s.messages_of("fetch"), 1);
    // The homes node 1 took are the manager's: node 0 reads node 1's writes from it after a
    // barrier (asking the manager, itself, and fetching from node 1).
    barrier(&mut c, 1);
    for p in 8..12 {
        c.fault(0, p, false);
        c.settle();
        assert_eq!(c.load(0, p, 0), 100 + p, "page {p}");
    }
}

#[test]
fn first_touch_allocations_are_still_asked_about() {
    let mut c = Cluster::new("hlrc", 2);
    c.cores[0].register_allocation(AllocInfo {
        first: PageId(4),
        pages: 8,
        placement: Placement::FirstTouch,
    });
    for p in [11, 8] {
        c.fault(1, p, true);
        c.settle();
    }
    let s = c.total_stats();
    assert_eq!(
        s.messages_of("home_query"),
        2,
        "no placement to compute homes from"
    );
    assert_eq!(s.homes_computed, 0);
    assert_eq!(c.access(1, 8), Access::ReadWrite);
}

//! Barrier infos merged on the way (`Consistency::merge_barrier_infos`, as the sync cores'
//! barrier tree does) must do what applying every node's info does: the same invalidations,
//! and the merged vector time.

mod common;
use common::Cluster;
use squall_core::Access;

/// Nodes 1..3 each write one of pages 0..2 that all four nodes read, then a barrier applied
/// with the infos `gather` builds from the nodes' own.
fn episode(kind: &str, gather: impl Fn(&mut Cluster, Vec<Vec<u8>>) -> Vec<Vec<u8>>) -> Cluster {
    let mut c = Cluster::new(kind, 4);
    for n in 0..4u16 {
        for p in 0..4 {
            c.fault(n, p, false);
            c.settle();
        }
    }
    for n in 1..4u16 {
        let p = u64::from(n) - 1;
        c.fault(n, p, true);
        c.store(n, p, 8, 10 + u64::from(n));
    }
    for n in 0..4u16 {
        c.release(n, 1 + u64::from(n));
    }
    let infos: Vec<Vec<u8>> = (0..4).map(|n| c.cores[n].barrier_info()).collect();
    for n in 0..4u16 {
        c.drain(n);
    }
    c.settle();
    let all = gather(&mut c, infos);
    for n in 0..4 {
        c.cores[n].apply_barrier(&all);
        c.drain(n as u16);
    }
    c.settle();
    c
}

fn check(kind: &str) {
    let separate = episode(kind, |_, infos| infos);
    let invalidated = (0..4u16)
        .flat_map(|n| (0..3).map(move |p| (n, p)))
        .filter(|&(n, p)| separate.access(n, p) == Access::None)
        .count();
    assert!(
        invalidated >= 6,
        "{kind}: the barrier invalidated {invalidated} copies"
    );
    // As the tree does: node 3 merges its own with node 2's, node 0 merges the rest.
    let merged = episode(kind, |c, infos| {
        let low = c.cores[3]
            .merge_barrier_infos(&infos[2..])
            .expect("hlrc merges");
        let all = c.cores[0]
            .merge_barrier_infos(&[infos[0].clone(), infos[1].clone(), low])
            .expect("hlrc merges");
        vec![all]
    });
    for n in 0..4u16 {
        for p in 0..4 {
            assert_eq!(
                merged.access(n, p),
                separate.access(n, p),
                "{kind}: node {n}, page {p}"
            );
        }
    }
    // Every node sees every write after the barrier.
    let mut merged = merged;
    for n in 0..4u16 {
        for w in 1..4u16 {
            let p = u64::from(w) - 1;
            if merged.access(n, p) == Access::None {
                merged.fault(n, p, false);
                merged.settle();
            }
            assert_eq!(
                merged.load(n, p, 8),
                10 + u64::from(w),
                "{kind}: node {n} page {p}"
            );
        }
    }
}

#[test]
fn merged_barrier_infos_invalidate_what_separate_ones_do() {
    check("hlrc");
}

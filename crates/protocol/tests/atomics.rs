//! Home-executed atomics of both protocols: widths, operations, and the release infos an
//! atomic location keeps for its acquirers (crates/protocol/src/atomic.rs).
mod common;

use common::Cluster;
use squall_core::PageId;
use squall_protocol::{AtomicCall, AtomicOp, ProtoError};

fn call(op: AtomicOp, width: u8, acquire: bool, release: Option<&[u8]>) -> AtomicCall {
    AtomicCall {
        op,
        width,
        acquire,
        release: release.map(<[u8]>::to_vec),
    }
}

/// Run one atomic on node `n` to completion; returns (old value, infos brought back).
fn run(
    c: &mut Cluster,
    n: u16,
    offset: usize,
    call: AtomicCall,
    token: u64,
) -> (u64, Vec<Vec<u8>>) {
    c.cores[usize::from(n)]
        .atomic(PageId(2), offset, call, token)
        .expect("atomic accepted");
    c.drain(n);
    c.settle();
    let (_, _, old) = *c
        .atomics
        .iter()
        .find(|a| a.0 == n && a.1 == token)
        .expect("the atomic completed");
    let infos = c
        .atomic_infos
        .iter()
        .find(|a| a.0 == n && a.1 == token)
        .map(|a| a.2.clone())
        .unwrap_or_default();
    (old, infos)
}

#[test]
fn release_infos_reach_acquirers_through_the_same_page() {
    for kind in ["hlrc", "sc"] {
        let mut c = Cluster::new(kind, 3);
        // Node 1 releases through the 2-byte word at offset 6 (0 - 1 wraps to 0xffff).
        let (old, infos) = run(
            &mut c,
            1,
            6,
            call(AtomicOp::FetchAdd(u64::MAX), 2, false, Some(b"one")),
            1,
        );
        assert_eq!((old, infos.len()), (0, 0), "{kind}");
        // Node 2 acquires: it sees the value and node 1's info.
        let (old, infos) = run(&mut c, 2, 6, call(AtomicOp::Load, 2, true, None), 2);
        assert_eq!(old, 0xffff, "{kind}");
        assert_eq!(infos, vec![b"one".to_vec()], "{kind}");
        // A relaxed read gets no info; an acquire by the releaser gets none of its own.
        assert!(run(&mut c, 2, 6, call(AtomicOp::Load, 2, false, None), 3)
            .1
            .is_empty());
        assert!(run(&mut c, 1, 6, call(AtomicOp::Load, 2, true, None), 4)
            .1
            .is_empty());
        // A second releaser: an acquirer gets both (C11 release sequences), the latest per node.
        run(
            &mut c,
            0,
            6,
            call(AtomicOp::Swap(5), 2, true, Some(b"zero")),
            5,
        );
        run(
            &mut c,
            1,
            6,
            call(AtomicOp::FetchAdd(1), 2, false, Some(b"one again")),
            6,
        );
        let (old, infos) = run(&mut c, 2, 6, call(AtomicOp::Load, 2, true, None), 7);
        assert_eq!(old, 6, "{kind}");
        assert_eq!(
            infos,
            vec![b"zero".to_vec(), b"one again".to_vec()],
            "{kind}"
        );
        // Infos are kept per page: an acquire through another word of the page gets them too.
        let (_, infos) = run(&mut c, 2, 16, call(AtomicOp::Load, 8, true, None), 8);
        assert_eq!(infos.len(), 2, "{kind}");
    }
}

#[test]
fn widths_and_operations() {
    for kind in ["hlrc", "sc"] {
        let mut c = Cluster::new(kind, 2);
        let r = |c: &mut Cluster, off, op, w, t| run(c, 1, off, call(op, w, false, None), t).0;
        assert_eq!(r(&mut c, 3, AtomicOp::Swap(0x1ff), 1, 1), 0);
        assert_eq!(
            r(&mut c, 3, AtomicOp::Load, 1, 2),
            0xff,
            "{kind}: cut to one byte"
        );
        assert_eq!(r(&mut c, 3, AtomicOp::FetchAdd(1), 1, 3), 0xff);
        assert_eq!(
            r(&mut c, 3, AtomicOp::Load, 1, 4),
            0,
            "{kind}: wraps at one byte"
        );
        assert_eq!(
            r(&mut c, 2, AtomicOp::Load, 1, 5),
            0,
            "{kind}: the neighbour is untouched"
        );
        assert_eq!(r(&mut c, 8, AtomicOp::Or(0b1010), 4, 6), 0);
        assert_eq!(r(&mut c, 8, AtomicOp::And(0b0110), 4, 7), 0b1010);
        assert_eq!(r(&mut c, 8, AtomicOp::Xor(0b0011), 4, 8), 0b0010);
        assert_eq!(r(&mut c, 8, AtomicOp::Nand(0b0001), 4, 9), 0b0001);
        assert_eq!(
            r(&mut c, 8, AtomicOp::Load, 4, 10),
            0xffff_fffe,
            "{kind}: nand at 4 bytes"
        );
        let cas = AtomicOp::CompareSwap {
            expected: u64::MAX - 1, // -2, sign-extended
            new: 3,
        };
        assert_eq!(
            r(&mut c, 8, cas, 4, 11),
            0xffff_fffe,
            "{kind}: the compare sees 4 bytes"
        );
        assert_eq!(r(&mut c, 8, AtomicOp::Load, 4, 12), 3);
        for (offset, width) in [(7, 2), (2, 4), (4, 8), (4094, 4), (0, 3)] {
            assert_eq!(
                c.cores[1].atomic(
                    PageId(2),
                    offset,
                    call(AtomicOp::Load, width, false, None),
                    99
                ),
                Err(ProtoError::BadAtomic {
                    page: PageId(2),
                    offset,
                    width
                }),
                "{kind}: {width} bytes at {offset}"
            );
        }
    }
}

//! Unit tests of the MPI backend: cpu lists, decoding frames (whole, split, large), the MPI
//! lock, the spin policy.

use super::decode::{decode_frame, decode_owned};
use super::init::{parse_cpu_list, SpinPolicy, SVC_SPIN, YIELD_AFTER};
use super::recv::is_split_header;
use super::*;
use squall_wire::MsgType;

#[test]
fn cpu_lists_count_ranges_and_singles() {
    assert_eq!(parse_cpu_list("0-1\n"), Some(2));
    assert_eq!(parse_cpu_list("0"), Some(1));
    assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
    assert_eq!(parse_cpu_list(""), None);
    assert_eq!(parse_cpu_list("3-1"), None);
    assert_eq!(parse_cpu_list("0-x"), None);
}

fn encoded(payload_len: usize, split: bool) -> Vec<u8> {
    let mut h = Header::new(JobId(7), MsgType(100), NodeId(1), NodeId(0));
    h.request_id = 9;
    if split {
        h.payload_len = payload_len as u32;
        h.to_bytes().to_vec()
    } else {
        squall_wire::encode(&h, &vec![0xabu8; payload_len])
    }
}

#[test]
fn decode_frame_takes_whole_frames_and_split_headers_and_drops_the_rest() {
    let (job, me) = (JobId(7), NodeId(0));
    // A whole frame: payload copied out.
    let f = encoded(8, false);
    let (h, p) = decode_frame(job, me, 2, 1, &f, None).expect("whole frame");
    assert_eq!(
        (h.ty, h.request_id, &p[..]),
        (MsgType(100), 9, &[0xab; 8][..])
    );
    assert!(!is_split_header(&f));
    // An empty whole frame is not a split header.
    assert!(!is_split_header(&encoded(0, false)));
    // A header alone with its body.
    let head = encoded(5000, true);
    assert!(is_split_header(&head));
    let (_, p) = decode_frame(job, me, 2, 1, &head, Some(vec![1u8; 5000])).expect("header + body");
    assert_eq!(p.len(), 5000);
    // Wrong body length, truncated frame, foreign job, wrong source or rank, garbage.
    assert_eq!(
        decode_frame(job, me, 2, 1, &head, Some(vec![1u8; 10])).err(),
        Some(DropReason::Truncated)
    );
    assert_eq!(
        decode_frame(job, me, 2, 1, &f[..f.len() - 1], None).err(),
        Some(DropReason::Truncated)
    );
    assert_eq!(
        decode_frame(JobId(8), me, 2, 1, &f, None).err(),
        Some(DropReason::ForeignJob)
    );
    assert_eq!(
        decode_frame(job, me, 3, 2, &f, None).err(),
        Some(DropReason::BadDest)
    );
    assert_eq!(
        decode_frame(job, me, 2, 5, &f, None).err(),
        Some(DropReason::BadDest)
    );
    assert_eq!(
        decode_frame(job, NodeId(1), 2, 1, &f, None).err(),
        Some(DropReason::BadDest)
    );
    assert_eq!(
        decode_frame(job, me, 2, 1, &[0u8; 10], None).err(),
        Some(DropReason::Garbage)
    );
}

#[test]
fn large_frames_keep_their_buffer_and_are_checked_like_copies() {
    let (job, me) = (JobId(7), NodeId(0));
    let f = encoded(4096, false);
    assert!(f.len() > COPY_MAX);
    // As the posted receive hands it over: the whole receive's capacity, the frame's length.
    let mut buf = Vec::with_capacity(RX_MAX);
    buf.extend_from_slice(&f);
    let (h, p) = decode_owned(job, me, 2, 1, buf).expect("whole frame");
    assert_eq!((h.ty, h.request_id, p.len()), (MsgType(100), 9, 4096));
    assert!(p.iter().all(|&b| b == 0xab));
    assert_eq!(
        decode_owned(job, me, 2, 1, f[..f.len() - 3].to_vec()).err(),
        Some(DropReason::Truncated)
    );
    assert_eq!(
        decode_owned(JobId(8), me, 2, 1, f.clone()).err(),
        Some(DropReason::ForeignJob)
    );
    assert_eq!(
        decode_owned(job, me, 2, 0, f).err(),
        Some(DropReason::BadDest)
    );
}

#[test]
fn mpi_lock_is_exclusive_across_threads() {
    let lock = Arc::new(MpiLock::new(0u64));
    {
        let g = lock.try_lock().expect("free");
        assert!(lock.try_lock().is_none(), "held");
        drop(g);
    }
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    // Both ways of taking it, as the backend does.
                    let mut g = if i == 0 {
                        lock.lock()
                    } else {
                        loop {
                            if let Some(g) = lock.try_lock() {
                                break g;
                            }
                            std::hint::spin_loop();
                        }
                    };
                    // A non-atomic read-modify-write: lost updates if two held it at once.
                    let v = *g;
                    std::hint::black_box(v);
                    *g = v + 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("locking thread");
    }
    assert_eq!(*lock.lock(), 60_000);
}

#[test]
fn service_thread_spins_only_when_every_node_has_a_core() {
    let fits = SpinPolicy::for_machine(2, 2);
    assert_eq!(fits.hot_for, SVC_SPIN);
    assert_eq!(fits.yield_after, YIELD_AFTER);
    assert!(fits.yield_after < fits.hot_for);
    let crowded = SpinPolicy::for_machine(4, 2);
    assert_eq!(crowded.hot_for, Duration::ZERO);
    // One node on a big machine spins too.
    assert_eq!(SpinPolicy::for_machine(1, 64), fits);
}

//! Decoding never panics on bad bytes: random and truncated messages give typed errors.

mod common;
use common::Cluster;
use squall_core::NodeId;
use squall_protocol::ProtoError;

fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

#[test]
fn random_and_truncated_messages_are_rejected_without_panics() {
    for kind in ["hlrc", "sc"] {
        let mut c = Cluster::new(kind, 2);
        // Collect real messages to truncate and corrupt.
        c.fault(1, 0, true);
        let mut samples = Vec::new();
        for _ in 0..4 {
            if let Some(m) = c.queues.get(&(1, 0)).and_then(|q| q.front()).cloned() {
                samples.push(m);
            }
            if let Some(m) = c.queues.get(&(0, 1)).and_then(|q| q.front()).cloned() {
                samples.push(m);
            }
            c.settle();
        }
        let mut s = 42u64;
        for i in 0..5_000 {
            let mut msg: Vec<u8> = if i % 2 == 0 && !samples.is_empty() {
                let base = &samples[i % samples.len()];
                let cut = (lcg(&mut s) as usize) % (base.len() + 1);
                let mut m = base[..cut].to_vec();
                if cut > 0 && i % 4 == 0 {
                    let at = (lcg(&mut s) as usize) % cut;
                    m[at] ^= 1 << (lcg(&mut s) % 8);
                }
                m
            } else {
                let len = (lcg(&mut s) % 40) as usize;
                (0..len).map(|_| lcg(&mut s) as u8).collect()
            };
            if i % 7 == 0 {
                msg.insert(0, (lcg(&mut s) % 12) as u8);
            }
            // Any error is fine; a panic fails the test. Typed errors name the sender.
            let core = &mut c.cores[i % 2];
            if let Err(ProtoError::Malformed { from, .. }) = core.handle_message(NodeId(1), &msg) {
                assert_eq!(from, NodeId(1));
            }
            while core.poll_action().is_some() {}
        }
        // Garbage sync info is counted, never applied.
        c.cores[1].apply_grant(&[1, 2, 3]);
        c.cores[1].apply_barrier(&[vec![9; 5]]);
        if kind == "hlrc" {
            assert_eq!(c.cores[1].stats().malformed_sync_info, 2);
        }
    }
}

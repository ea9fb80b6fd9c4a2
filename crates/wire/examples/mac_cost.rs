//! Cost of sealing and checking one packet per payload size (keyed BLAKE3): `cargo run
//! --release -p squall-wire --example mac_cost`. Each figure is the fastest of many short
//! batches, so a machine shared with other work still shows what one packet costs.
use squall_core::{JobId, NodeId};
use squall_wire::{auth::KEY_LEN, decode_packet, encode_sealed_into, AuthKey, Header, MsgType};
use std::time::Instant;

/// The fastest per-item time of `batches` batches of `per` calls of `f`, in microseconds.
fn fastest(batches: usize, per: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut best = f64::INFINITY;
    for b in 0..batches {
        let t0 = Instant::now();
        for i in 0..per {
            f(b * per + i);
        }
        best = best.min(t0.elapsed().as_secs_f64() / per as f64);
    }
    best * 1e6
}

fn main() {
    let key = AuthKey::from_bytes([7; KEY_LEN]);
    let h = Header::new(JobId(1), MsgType(70), NodeId(0), NodeId(1));
    println!(
        "payload bytes, seal us, check us, check MiB/s, encrypt us, decrypt us (fastest batch)"
    );
    for size in [64usize, 4096, 32 * 1024, 1 << 20] {
        let payload = vec![0x5au8; size];
        let per = ((256 << 10) / (size + 64)).clamp(1, 2000);
        let mut out = Vec::with_capacity(size + 200);
        let seal = fastest(300, per, |i| {
            out.clear();
            encode_sealed_into(&h, &payload, &key, i as u64 + 1, &mut out);
        });
        let check = fastest(300, per, |_| {
            let p = decode_packet(&out).expect("decodes");
            let t = p.trailer.expect("sealed");
            assert!(key.verify(p.header_bytes, p.payload, t).is_ok());
        });
        let hb = h.to_bytes();
        let mut buf = payload.clone();
        let mut trailer = [0u8; squall_wire::AUTH_TRAILER_LEN];
        let enc = fastest(300, per, |i| {
            trailer = key.seal_encrypted(&hb, &mut buf, i as u64 + 1);
        });
        let sealed = buf.clone();
        let dec = fastest(300, per, |_| {
            buf.copy_from_slice(&sealed);
            assert!(key.open_encrypted(&hb, &mut buf, &trailer).is_ok());
        });
        println!(
            "{size:>8}, {seal:.2}, {check:.2}, {:.0}, {enc:.2}, {dec:.2}",
            size as f64 / (check * 1e-6) / f64::from(1 << 20)
        );
    }
}

//! Property tests and a bounded fuzz smoke test of the decoder: it never panics, and
//! everything it accepts re-encodes to the same bytes.
use proptest::prelude::*;
use rand::{RngCore, SeedableRng};
use squall_core::{JobId, NodeId};
use squall_wire::{decode, decode_packet, encode, Flags, Header, MsgType, HEADER_LEN};

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn accepted_packets_reencode_identically(mut bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN..120)) {
        // Make the prefix plausible so the interesting paths are reached often.
        bytes[0] = b'S'; bytes[1] = b'Q'; bytes[2] = 1; bytes[3] = 0;
        if let Ok(p) = decode_packet(&bytes) {
            let mut again = encode(&p.header, p.payload);
            again.extend_from_slice(p.trailer.unwrap_or_default());
            prop_assert_eq!(again, bytes.clone());
        }
    }

    #[test]
    fn round_trip(job: u64, ty: u16, src: u16, dst: u16, flags in 0u16..0x80, seq: u64, ack: u64,
                  rid: u64, count in 1u16..100, payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let h = Header { job: JobId(job), ty: MsgType(ty), src: NodeId(src), dst: NodeId(dst),
            flags: Flags(flags), seq, ack, request_id: rid, payload_len: payload.len() as u32,
            frag_index: count - 1, frag_count: count };
        let bytes = encode(&h, &payload);
        let (d, p) = decode(&bytes).expect("valid packet decodes");
        prop_assert_eq!(d, h);
        prop_assert_eq!(p, &payload[..]);
        // Every strict prefix is rejected, never accepted or panicking.
        for cut in 0..bytes.len() {
            prop_assert!(decode(&bytes[..cut]).is_err());
        }
    }
}

/// Plain-Rust fuzz smoke test: 100k random inputs (half with a valid prefix) through the decoder.
#[test]
fn fuzz_smoke_100k() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed);
    let mut buf = vec![0u8; 256];
    let mut accepted = 0;
    for i in 0..100_000u32 {
        let len = (rng.next_u32() % 200) as usize;
        rng.fill_bytes(&mut buf[..len]);
        if i % 2 == 0 && len >= 4 {
            buf[..4].copy_from_slice(&[b'S', b'Q', 1, 0]);
        }
        if len >= 52 && i % 4 == 0 {
            // Valid flags, fragment fields and length so the full-accept path is exercised.
            buf[18..20].copy_from_slice(&0u16.to_le_bytes());
            buf[48..52].copy_from_slice(&[0, 0, 1, 0]);
            buf[44..48].copy_from_slice(&((len - HEADER_LEN) as u32).to_le_bytes());
        }
        if decode(&buf[..len]).is_ok() {
            accepted += 1;
        }
    }
    assert!(
        accepted > 1000,
        "the accept path was reached only {accepted} times"
    );
}

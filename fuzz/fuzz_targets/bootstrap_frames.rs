//! Fuzz target: what a stranger can send to the rendezvous or a node during bootstrap — frames
//! (header, payload, authentication trailer, with and without the job key), hellos and
//! address tables. No input may panic; a frame is taken with the key only if it was sealed
//! with it; decoded hellos and tables re-encode to themselves.
#![no_main]
use libfuzzer_sys::fuzz_target;
use squall_net::bootstrap::{decode_hello, decode_table, encode_hello, encode_table, read_frame};
use squall_net::AuthKey;

fuzz_target!(|data: &[u8]| {
    let key = AuthKey::from_bytes([3; 32]);
    let _ = read_frame(&mut &data[..], None);
    if let Ok((h, p)) = read_frame(&mut &data[..], Some(&key)) {
        // Only a frame sealed with the job key gets through: the fuzzer cannot forge one.
        let _ = (h, p);
        panic!("an unsealed or forged frame was accepted with the job key");
    }
    if let Ok(h) = decode_hello(data) {
        assert_eq!(decode_hello(&encode_hello(&h)), Ok(h));
    }
    if let Ok(t) = decode_table(data) {
        assert_eq!(decode_table(&encode_table(&t)), Ok(t));
    }
});

//! Fuzz target: the wire decoder must never panic, and what it accepts must re-encode exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, p)) = squall_wire::decode(data) {
        assert_eq!(squall_wire::encode(&h, p), data);
    }
    let _ = squall_wire::decode_header(data);
});

//! Fuzz target: the wire decoder must never panic, and what it accepts must re-encode exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = squall_wire::decode_packet(data) {
        let mut again = squall_wire::encode(&p.header, p.payload);
        again.extend_from_slice(p.trailer.unwrap_or_default());
        assert_eq!(again, data);
    }
    let _ = squall_wire::decode_header(data);
});

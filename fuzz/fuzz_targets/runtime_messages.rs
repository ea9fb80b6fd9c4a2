//! Fuzz target: the runtime's own messages a peer can send — thread creation (`SPAWN`),
//! thread results (spawn and join answers) and collective values — decode without panicking,
//! and what decodes re-encodes to the same meaning.
#![no_main]
use libfuzzer_sys::fuzz_target;
use squall::decoders::{decode_answer, decode_collective, SpawnMsg};

fuzz_target!(|data: &[u8]| {
    if let Some(m) = SpawnMsg::decode(data) {
        let again = SpawnMsg::decode(&m.encode()).expect("a decoded spawn re-encodes");
        assert_eq!(again.encode(), m.encode());
    }
    let _ = decode_answer(data);
    let _ = decode_collective(data);
});

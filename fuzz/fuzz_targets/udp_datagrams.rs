//! Fuzz target: the udp reliability core (`squall_net::udp_core`) of two nodes exchanging
//! messages over a link the script controls — datagrams lost, duplicated, reordered,
//! corrupted, truncated, or made up — with time advancing by the script's steps. No input may
//! panic a core; with the job key on, every message delivered is the next one the peer sent
//! (exactly once, in order, unchanged), whatever the link did.
#![no_main]
use libfuzzer_sys::fuzz_target;
use squall_net::udp_core::{CoreConfig, CoreEvent, Message, UdpCore};
use squall_net::{AuthKey, Bytes, JobId, MsgType, NodeId};
use squall_wire::Flags;
use std::time::{Duration, Instant};

#[path = "common/script.rs"]
mod script;
use script::Script;

fuzz_target!(|data: &[u8]| {
    let mut s = Script::new(data);
    let auth = s.u8() % 2 == 0;
    let start = Instant::now();
    let mut now = start;
    let mut cores: Vec<UdpCore> = (0..2u16)
        .map(|r| {
            let mut cfg = CoreConfig::new(NodeId(r), 2, JobId(7), Duration::from_secs(3));
            cfg.max_payload = 64;
            cfg.window = 4;
            if auth {
                cfg.auth = Some(AuthKey::from_bytes([9; 32]));
            }
            UdpCore::new(cfg, now)
        })
        .collect();
    // Per direction: what was sent, how many were delivered, datagrams on the link.
    let mut sent: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut got = [0usize; 2];
    let mut link: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut steps = 0;
    while !s.done() && steps < 1_000 {
        steps += 1;
        let n = usize::from(s.u8() % 2);
        match s.u8() % 8 {
            0 | 1 => {
                let payload = s.bytes(200);
                let msg = Message {
                    ty: MsgType(64),
                    flags: Flags::empty(),
                    request_id: 0,
                    payload: Bytes::from(payload.clone()),
                };
                if cores[n].send(now, NodeId(1 - n as u16), msg).is_ok() {
                    sent[n].push(payload);
                }
            }
            2 | 3 => {
                // Deliver a datagram from the link toward n, chosen (reordering), maybe kept
                // (duplication), maybe damaged.
                let l = &mut link[1 - n];
                if !l.is_empty() {
                    let i = usize::from(s.u8()) % l.len();
                    let mut d = if s.u8() % 4 == 0 {
                        l[i].clone()
                    } else {
                        l.remove(i)
                    };
                    match s.u8() % 6 {
                        0 if !d.is_empty() => {
                            let at = usize::from(s.u16()) % d.len();
                            d[at] ^= s.u8() | 1;
                        }
                        1 => d.truncate(usize::from(s.u16()) % (d.len() + 1)),
                        _ => {}
                    }
                    let _ = cores[n].handle_datagram(now, &d);
                }
            }
            4 => {
                let junk = s.bytes(120);
                let _ = cores[n].handle_datagram(now, &junk);
            }
            5 => {
                link[1 - n].clear();
            }
            _ => {
                now += Duration::from_millis(u64::from(s.u8() % 50));
                for c in &mut cores {
                    c.handle_timeout(now);
                }
            }
        }
        for (i, c) in cores.iter_mut().enumerate() {
            while let Some(t) = c.poll_transmit() {
                if usize::from(t.to.0) == 1 - i {
                    link[i].push(t.data);
                }
            }
            while let Some(e) = c.poll_event() {
                if let CoreEvent::Deliver { src, payload, .. } = e {
                    let from = usize::from(src.0);
                    assert!(from < 2 && from != i, "delivered from {src}");
                    if auth {
                        let want = sent[from].get(got[from]);
                        assert_eq!(
                            want.map(|w| w.as_slice()),
                            Some(payload.as_ref()),
                            "authenticated link delivered something other than the next message"
                        );
                    }
                    got[from] += 1;
                }
            }
        }
    }
});

//! Sans-IO tests of the reliable-datagram core: N cores over a simulated network with seeded
//! loss, duplication, reordering and latency, driven by a virtual clock. Every message must be
//! delivered exactly once, whole and in order per sender. Seeds are printed on failure.
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_net::udp_core::{CoreConfig, CoreEvent, Message, UdpCore};
use squall_net::{AuthKey, DropReason};
use squall_net::{Bytes, JobId, MsgType, NodeId};
use squall_wire::Flags;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
struct Net {
    loss: f64,
    dup: f64,
    reorder: f64,
    latency: Duration,
}

struct Outcome {
    virtual_time: Duration,
    retransmissions: u64,
    datagrams: u64,
    authenticated: u64,
    replayed: u64,
}

fn payload(src: u16, idx: u32, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len.max(6));
    v.extend_from_slice(&src.to_le_bytes());
    v.extend_from_slice(&idx.to_le_bytes());
    while v.len() < len {
        v.push((v.len() as u32 ^ idx) as u8);
    }
    Bytes::from(v)
}

/// Runs `n` cores, each sending `msgs` messages to random peers; checks delivery.
fn simulate(seed: u64, n: u16, msgs: u32, net: Net, max_payload: usize) -> Outcome {
    simulate_with(seed, n, msgs, net, max_payload, None)
}

/// [`simulate`] with every core sealing and checking its datagrams with `auth`.
fn simulate_with(
    seed: u64,
    n: u16,
    msgs: u32,
    net: Net,
    max_payload: usize,
    auth: Option<(AuthKey, bool)>,
) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let t0 = Instant::now();
    let mut now = t0;
    let job = JobId(0xfeed);
    let mut cores: Vec<UdpCore> = (0..n)
        .map(|r| {
            let mut c = CoreConfig::new(NodeId(r), n, job, Duration::from_secs(30));
            c.max_payload = max_payload;
            c.window = 16;
            c.auth = auth.as_ref().map(|a| a.0.clone());
            c.encrypt = auth.as_ref().is_some_and(|a| a.1);
            UdpCore::new(c, now)
        })
        .collect();
    // expected[dst][src] = list of (idx, len) in send order
    let mut expected: Vec<Vec<Vec<(u32, usize)>>> = vec![vec![Vec::new(); n as usize]; n as usize];
    for src in 0..n {
        for idx in 0..msgs {
            let mut dst = rng.gen_range(0..n);
            if dst == src {
                dst = (dst + 1) % n;
            }
            let len = match rng.gen_range(0..10) {
                0 => rng.gen_range(max_payload..max_payload * 5),
                1 => 0,
                _ => rng.gen_range(6..200),
            };
            let len = len.max(6);
            expected[dst as usize][src as usize].push((idx, len));
            let msg = Message {
                ty: MsgType(100),
                flags: Flags::empty(),
                request_id: 0,
                payload: payload(src, idx, len),
            };
            cores[src as usize]
                .send(now, NodeId(dst), msg)
                .expect("send");
        }
    }
    let mut got: Vec<Vec<Vec<(u32, usize)>>> = vec![vec![Vec::new(); n as usize]; n as usize];
    let mut wire: BTreeMap<(Instant, u64), (NodeId, Vec<u8>)> = BTreeMap::new();
    let mut counter = 0u64;
    let total: usize = expected.iter().flatten().map(Vec::len).sum();
    let mut delivered = 0usize;
    let mut steps = 0u64;
    loop {
        // Collect transmits onto the simulated wire.
        for c in cores.iter_mut() {
            while let Some(t) = c.poll_transmit() {
                if rng.gen_bool(net.loss) {
                    continue;
                }
                let copies = if rng.gen_bool(net.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at = now + net.latency;
                    if rng.gen_bool(net.reorder) {
                        at += net.latency * rng.gen_range(1..5);
                    }
                    counter += 1;
                    wire.insert((at, counter), (t.to, t.data.clone()));
                }
            }
        }
        for (r, c) in cores.iter_mut().enumerate() {
            while let Some(ev) = c.poll_event() {
                match ev {
                    CoreEvent::Deliver { src, payload, .. } => {
                        let idx = u32::from_le_bytes(payload[2..6].try_into().expect("idx"));
                        assert_eq!(
                            payload,
                            self::payload(src.0, idx, payload.len()),
                            "seed {seed}: corrupt message {idx} from {src} at node {r}"
                        );
                        got[r][src.index()].push((idx, payload.len()));
                        delivered += 1;
                    }
                    other => panic!("seed {seed}: unexpected event at node {r}: {other:?}"),
                }
            }
        }
        if delivered == total && cores.iter().all(|c| c.is_flushed()) {
            break;
        }
        steps += 1;
        assert!(
            steps < 5_000_000,
            "seed {seed}: livelock ({delivered}/{total} delivered)"
        );
        let next_wire = wire.keys().next().map(|k| k.0);
        let next_timer = cores.iter().filter_map(|c| c.poll_timeout()).min();
        let next = match (next_wire, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).expect("something to do"),
        };
        if next > now + Duration::from_millis(50) && std::env::var("SIMDEBUG").is_ok() {
            eprintln!(
                "jump {:?} at {:?}: delivered {delivered}/{total} wire {} timers {:?}",
                next - now,
                now - t0,
                wire.len(),
                cores
                    .iter()
                    .map(|c| (c.poll_timeout().map(|t| t - now), c.is_flushed()))
                    .collect::<Vec<_>>()
            );
        }
        now = now.max(next);
        assert!(
            now - t0 < Duration::from_secs(25),
            "seed {seed}: no progress in 25 s virtual"
        );
        while let Some(e) = wire.first_entry() {
            if e.key().0 > now {
                break;
            }
            let (to, data) = e.remove();
            let _ = cores[to.index()].handle_datagram(now, &data);
        }
        for c in cores.iter_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
    }
    assert_eq!(
        got, expected,
        "seed {seed}: deliveries differ (order, loss or duplicates)"
    );
    Outcome {
        virtual_time: now - t0,
        retransmissions: cores.iter().map(|c| c.stats().retransmissions).sum(),
        datagrams: cores.iter().map(|c| c.stats().datagrams_sent).sum(),
        authenticated: cores.iter().map(|c| c.stats().authenticated).sum(),
        replayed: cores
            .iter()
            .map(|c| {
                c.stats()
                    .drops
                    .get(&DropReason::Replayed)
                    .copied()
                    .unwrap_or(0)
            })
            .sum(),
    }
}

const LOSSY: Net = Net {
    loss: 0.1,
    dup: 0.05,
    reorder: 0.1,
    latency: Duration::from_micros(50),
};

#[test]
fn clean_network_needs_no_retransmission() {
    let clean = Net {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        latency: Duration::from_micros(50),
    };
    let o = simulate(1, 3, 300, clean, 1000);
    assert_eq!(o.retransmissions, 0);
}

#[test]
fn lossy_network_many_seeds() {
    for seed in 0..20 {
        let o = simulate(seed, 3, 300, LOSSY, 1000);
        eprintln!(
            "seed {seed}: {:?} {} retx {} datagrams",
            o.virtual_time, o.retransmissions, o.datagrams
        );
        assert!(
            o.retransmissions < o.datagrams / 2,
            "seed {seed}: {} retransmissions of {} datagrams",
            o.retransmissions,
            o.datagrams
        );
        assert!(
            o.virtual_time < Duration::from_secs(1),
            "seed {seed}: took {:?}",
            o.virtual_time
        );
    }
}

#[test]
fn heavy_loss_still_delivers() {
    let net = Net {
        loss: 0.3,
        dup: 0.2,
        reorder: 0.3,
        latency: Duration::from_micros(100),
    };
    for seed in 100..105 {
        simulate(seed, 4, 100, net, 500);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn random_networks(seed: u64, loss in 0.0f64..0.3, dup in 0.0f64..0.2, reorder in 0.0f64..0.3,
                       n in 2u16..5, mp in 64usize..2000) {
        let net = Net { loss, dup, reorder, latency: Duration::from_micros(30) };
        simulate(seed, n, 60, net, mp);
    }
}

#[test]
fn silent_peer_is_lost_and_goodbye_is_not() {
    let now = Instant::now();
    let job = JobId(1);
    let mut a = UdpCore::new(
        CoreConfig::new(NodeId(0), 3, job, Duration::from_millis(300)),
        now,
    );
    let mut b = UdpCore::new(
        CoreConfig::new(NodeId(1), 3, job, Duration::from_millis(300)),
        now,
    );
    // b says goodbye to a; node 2 never speaks.
    b.close(now);
    while let Some(t) = b.poll_transmit() {
        if t.to == NodeId(0) {
            a.handle_datagram(now, &t.data).expect("bye accepted");
        }
    }
    let mut events = Vec::new();
    let mut t = now;
    while t < now + Duration::from_secs(1) {
        t += Duration::from_millis(10);
        a.handle_timeout(t);
        while a.poll_transmit().is_some() {}
        while let Some(e) = a.poll_event() {
            events.push(format!("{e:?}"));
        }
    }
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].contains("PeerBye(NodeId(1))"), "{events:?}");
    assert!(
        events[1].contains("PeerLost") && events[1].contains("NodeId(2)"),
        "{events:?}"
    );
}

#[test]
fn unacknowledged_data_ends_in_peer_lost() {
    // Datagrams a → b vanish; b keeps sending heartbeats, so a hears b but never gets an ack.
    let t0 = Instant::now();
    let job = JobId(2);
    let timeout = Duration::from_millis(500);
    let mut a = UdpCore::new(CoreConfig::new(NodeId(0), 2, job, timeout), t0);
    // b is patient (long timeout) so it keeps heartbeating the whole time.
    let mut bcfg = CoreConfig::new(NodeId(1), 2, job, Duration::from_secs(10));
    bcfg.heartbeat = Duration::from_millis(50);
    let mut b = UdpCore::new(bcfg, t0);
    let msg = Message {
        ty: MsgType(100),
        flags: Flags::empty(),
        request_id: 0,
        payload: Bytes::from_static(b"hello"),
    };
    a.send(t0, NodeId(1), msg).expect("send");
    let mut now = t0;
    let mut lost = None;
    while now < t0 + Duration::from_secs(3) && lost.is_none() {
        now += Duration::from_millis(5);
        a.handle_timeout(now);
        b.handle_timeout(now);
        while a.poll_transmit().is_some() {}
        while let Some(t) = b.poll_transmit() {
            let _ = a.handle_datagram(now, &t.data);
        }
        while let Some(e) = a.poll_event() {
            if let CoreEvent::PeerLost { peer, reason } = e {
                lost = Some((peer, reason, now - t0));
            }
        }
        while b.poll_event().is_some() {}
    }
    let (peer, reason, after) = lost.expect("a declares b lost");
    assert_eq!(peer, NodeId(1));
    assert!(reason.contains("no acknowledgement"), "{reason}");
    assert!(after < Duration::from_secs(2), "took {after:?}");
    assert!(a.stats().retransmissions >= 6);
}

#[test]
fn authenticated_cores_deliver_exactly_once_over_a_lossy_network() {
    let key = AuthKey::from_bytes([0x5a; 32]);
    let mut replayed = 0;
    for seed in 200..210 {
        let o = simulate_with(seed, 3, 200, LOSSY, 1000, Some((key.clone(), false)));
        assert!(o.authenticated > 0, "seed {seed}: nothing authenticated");
        replayed += o.replayed;
    }
    // Encrypted: the messages (checked byte for byte on delivery) come out whole, in order.
    for seed in 300..305 {
        let o = simulate_with(seed, 3, 200, LOSSY, 1000, Some((key.clone(), true)));
        assert!(o.authenticated > 0, "seed {seed}: nothing authenticated");
    }
    // The network duplicates 5 % of the datagrams: the copies are refused as replays.
    assert!(replayed > 0, "no duplicate was refused as a replay");
}

/// A captured datagram sent again, one from a node with another key, one altered in flight
/// and one with its seal stripped: all refused and counted, nothing delivered, nothing acked.
#[test]
fn captured_and_forged_datagrams_are_refused() {
    let now = Instant::now();
    let job = JobId(3);
    let cfg = |r: u16, k: u8| {
        let mut c = CoreConfig::new(NodeId(r), 2, job, Duration::from_secs(5));
        c.auth = Some(AuthKey::from_bytes([k; 32]));
        c
    };
    let mut a = UdpCore::new(cfg(0, 1), now);
    let mut b = UdpCore::new(cfg(1, 1), now);
    let mut evil = UdpCore::new(cfg(0, 2), now);
    let msg = |p: &'static [u8]| Message {
        ty: MsgType(100),
        flags: Flags::empty(),
        request_id: 0,
        payload: Bytes::from_static(p),
    };
    a.send(now, NodeId(1), msg(b"pay 10")).expect("send");
    let captured = a.poll_transmit().expect("a datagram").data;
    assert_eq!(b.handle_datagram(now, &captured), Ok(()));
    let delivered = |b: &mut UdpCore| {
        let mut n = 0;
        while let Some(e) = b.poll_event() {
            if matches!(e, CoreEvent::Deliver { .. }) {
                n += 1;
            }
        }
        n
    };
    assert_eq!(delivered(&mut b), 1);
    // The replay.
    assert_eq!(b.handle_datagram(now, &captured), Err(DropReason::Replayed));
    // Another key (same job id and ranks, the next sequence numbers).
    evil.send(now, NodeId(1), msg(b"pay 1000")).expect("send");
    let forged = evil.poll_transmit().expect("a datagram").data;
    assert_eq!(b.handle_datagram(now, &forged), Err(DropReason::BadMac));
    // Altered in flight: the amount changed.
    a.send(now, NodeId(1), msg(b"pay 20")).expect("send");
    let mut altered = a.poll_transmit().expect("a datagram").data;
    let at = altered.len() - squall_wire::AUTH_TRAILER_LEN - 1;
    altered[at] ^= 0x01;
    assert_eq!(b.handle_datagram(now, &altered), Err(DropReason::BadMac));
    // Stripped of its seal: header flag cleared, trailer cut.
    a.send(now, NodeId(1), msg(b"pay 30")).expect("send");
    let mut stripped = a.poll_transmit().expect("a datagram").data;
    stripped.truncate(stripped.len() - squall_wire::AUTH_TRAILER_LEN);
    let flags = u16::from_le_bytes([stripped[18], stripped[19]]) & !Flags::AUTH.0;
    stripped[18..20].copy_from_slice(&flags.to_le_bytes());
    assert_eq!(b.handle_datagram(now, &stripped), Err(DropReason::BadMac));
    assert_eq!(delivered(&mut b), 0, "a refused datagram was delivered");
    let st = b.stats();
    assert_eq!(st.drops.get(&DropReason::Replayed), Some(&1));
    assert_eq!(st.drops.get(&DropReason::BadMac), Some(&3));
    assert_eq!(st.authenticated, 1);
}

#[test]
fn encrypted_datagrams_carry_no_plaintext_and_open_once() {
    let now = Instant::now();
    let cfg = |r: u16| {
        let mut c = CoreConfig::new(NodeId(r), 2, JobId(4), Duration::from_secs(5));
        c.auth = Some(AuthKey::from_bytes([6; 32]));
        c.encrypt = true;
        c
    };
    let mut a = UdpCore::new(cfg(0), now);
    let mut b = UdpCore::new(cfg(1), now);
    let secret = b"the balance of account 42 is 1000";
    a.send(
        now,
        NodeId(1),
        Message {
            ty: MsgType(100),
            flags: Flags::empty(),
            request_id: 0,
            payload: Bytes::from_static(secret),
        },
    )
    .expect("send");
    let d = a.poll_transmit().expect("a datagram").data;
    assert!(
        !d.windows(7).any(|w| w == b"account"),
        "plaintext on the wire"
    );
    assert_eq!(b.handle_datagram(now, &d), Ok(()));
    assert_eq!(b.handle_datagram(now, &d), Err(DropReason::Replayed));
    let mut got = Vec::new();
    while let Some(e) = b.poll_event() {
        if let CoreEvent::Deliver { payload, .. } = e {
            got.push(payload);
        }
    }
    assert_eq!(got, vec![Bytes::from_static(secret)]);
}

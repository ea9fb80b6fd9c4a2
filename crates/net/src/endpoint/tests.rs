//! Unit tests of the endpoint: reply slots, extra sources, the handler table and its hold
//! race, lingering, the integer hasher.

use super::request::ReplySlot;
use super::service::Linger;
use super::*;
use std::hash::BuildHasher;

fn reply(n: u8) -> Incoming {
    Incoming {
        src: NodeId(1),
        ty: MsgType(70),
        payload: Bytes::from(vec![n]),
        request_id: u64::from(n),
        flags: Flags::REPLY,
        placed: 0,
    }
}

#[test]
fn reply_slot_hands_over_across_threads_and_skips_other_ids() {
    let slot = Arc::new(ReplySlot {
        value: Mutex::new(None),
        cv: Condvar::new(),
    });
    // An outcome of an abandoned request sits in the slot: it must not answer request 2.
    slot.put(1, Ok(reply(1)));
    let s2 = Arc::clone(&slot);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        s2.put(2, Ok(reply(2)));
    });
    let got = slot.take(2).expect("reply 2");
    assert_eq!(&got.payload[..], &[2]);
    t.join().expect("putter");
    assert!(slot.value.lock().is_none());
    slot.put(3, Err(NetError::Shutdown));
    assert!(matches!(slot.take(3), Err(NetError::Shutdown)));
}

#[test]
fn extra_source_runs_on_the_service_thread_until_removed() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
    let (mut tx, rx) = UnixStream::pair().expect("socket pair");
    rx.set_nonblocking(true).expect("non-blocking");
    let fd = rx.as_raw_fd();
    let (got_tx, got_rx) = bounded::<(usize, bool)>(16);
    // The callback owns a clone; `rx` keeps the socket open after the source is removed.
    let mut reader = rx.try_clone().expect("clone");
    let id = ep
        .add_source(fd, move |ep| {
            // Edge-triggered: read everything there is.
            let mut n = 0;
            let mut buf = [0u8; 64];
            while let Ok(k) = reader.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k;
            }
            let _ = got_tx.send((n, ep.is_service_thread()));
        })
        .expect("add source");
    tx.write_all(b"abc").expect("write");
    let (n, on_service) = got_rx.recv_timeout(Duration::from_secs(5)).expect("ready");
    assert_eq!((n, on_service), (3, true));
    // While spinning, posted work and further input are still served.
    ep.spin_until(Instant::now() + Duration::from_millis(50));
    let (done_tx, done_rx) = bounded(1);
    ep.post(move |_| {
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("posted closure ran");
    tx.write_all(b"de").expect("write");
    let (n, _) = got_rx.recv_timeout(Duration::from_secs(5)).expect("ready");
    assert_eq!(n, 2);
    ep.stop_spin();
    assert!(ep.remove_source(id));
    assert!(!ep.remove_source(id), "removed once");
    tx.write_all(b"f").expect("write");
    assert!(
        got_rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "a removed source is not polled"
    );
    ep.shutdown().expect("shutdown");
    drop(rx);
}

#[test]
fn handler_table_holds_replaces_and_removes_in_order() {
    let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
    let me = ep.rank();
    let (tx, rx) = bounded::<(u8, u8)>(64);
    // Sent before any handler: held, then delivered in order once one is registered.
    for i in 0..3u8 {
        ep.send(me, MsgType(100), vec![i]).expect("send");
    }
    let t1 = tx.clone();
    ep.register(MsgType(100), move |ep, inc| {
        let n = inc.payload[0];
        let _ = t1.send((1, n));
        if n == 3 {
            // Replaced from inside: the next message goes to the new handler.
            let t2 = t1.clone();
            ep.register(MsgType(100), move |ep, inc| {
                let n = inc.payload[0];
                let _ = t2.send((2, n));
                if n == 4 {
                    // Removed while it runs: later messages are held.
                    ep.unregister(MsgType(100));
                }
            });
        }
    });
    for i in 3..7u8 {
        ep.send(me, MsgType(100), vec![i]).expect("send");
    }
    let got: Vec<(u8, u8)> = (0..5)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("delivered"))
        .collect();
    assert_eq!(got, vec![(1, 0), (1, 1), (1, 2), (1, 3), (2, 4)]);
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "held while no handler is registered"
    );
    ep.register(MsgType(100), move |_, inc| {
        let _ = tx.send((3, inc.payload[0]));
    });
    let got: Vec<(u8, u8)> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("delivered"))
        .collect();
    assert_eq!(got, vec![(3, 5), (3, 6)]);
    let by_type = ep.stats().by_type;
    let c = by_type.get(&100).expect("counted");
    assert_eq!((c.sent, c.received), (7, 7));
    ep.shutdown().expect("shutdown");
}

/// Microseconds `hold` sleeps before queueing (tests only): widens the window in which a
/// registration can slip between "no handler" and "held".
static HOLD_RACE_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(super) fn widen_hold_race() {
    let us = HOLD_RACE_US.load(Ordering::Relaxed);
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

#[test]
fn a_handler_registered_while_its_messages_arrive_gets_every_one() {
    // Registration races with the service thread finding no handler and holding the
    // message (a CI hang: a barrier request held forever behind a handler registered a
    // moment too late). Many rounds, each a new type, registered mid-stream.
    let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
    let me = ep.rank();
    HOLD_RACE_US.store(300, Ordering::Relaxed);
    for round in 0..60u16 {
        let ty = MsgType(100 + round);
        let sender = {
            let ep = ep.clone();
            std::thread::spawn(move || {
                for i in 0..40u8 {
                    ep.send(me, ty, vec![i]).expect("send");
                }
            })
        };
        // Register while the first messages are being found handler-less.
        std::thread::sleep(Duration::from_micros(u64::from(round % 4) * 100));
        let (tx, rx) = bounded::<u8>(64);
        ep.register(ty, move |_, inc| {
            let _ = tx.send(inc.payload[0]);
        });
        sender.join().expect("sender");
        let got: Vec<u8> = (0..40)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(5))
                    .unwrap_or_else(|_| panic!("round {round}: a message was never delivered"))
            })
            .collect();
        assert_eq!(got, (0..40).collect::<Vec<u8>>(), "round {round}: in order");
        ep.unregister(ty);
    }
    HOLD_RACE_US.store(0, Ordering::Relaxed);
    ep.shutdown().expect("shutdown");
}

#[test]
fn linger_backs_off_after_empty_windows_and_resets_on_a_hit() {
    let t0 = Instant::now();
    let w = Duration::from_micros(20);
    let mut l = Linger::new(Some(w));
    assert_eq!(l.start(t0), Some(t0 + w));
    l.hit();
    assert_eq!(l.start(t0), Some(t0 + w), "a hit keeps lingering on");
    // Empty windows in a row: the next 1, 3, 7, ... up to 63 are skipped.
    let mut skips = Vec::new();
    for _ in 0..8 {
        l.miss();
        let mut skipped = 0;
        while l.start(t0).is_none() {
            skipped += 1;
        }
        skips.push(skipped);
    }
    assert_eq!(skips, [1, 3, 7, 15, 31, 63, 63, 63]);
    l.hit();
    assert!(l.start(t0).is_some(), "no back-off after a hit");
    assert_eq!(Linger::new(None).start(t0), None, "off: never");
}

#[test]
fn int_hasher_keeps_small_keys_apart() {
    let b = BuildHasherDefault::<IntHasher>::default();
    let mut seen = std::collections::HashSet::new();
    for ty in 0u16..4096 {
        assert!(seen.insert(b.hash_one(ty)), "type {ty} collides");
    }
    assert_ne!(b.hash_one(1u64), b.hash_one(2u64));
}

//! Multi-process tests of the communication backbone over tcp, udp and mpi: every node is a
//! separate OS process (this test binary re-executed with `SQUALL_TEST_ROLE`), joined by the
//! real bootstrap. Covers FIFO order, request/reply, 1 MiB bulk, the DSM/IP message test (with
//! and without injected faults), a SIGKILLed node, garbage datagrams, and MPI lent to code
//! beside Squall.
mod common;

use common::{assert_success, spawn};
use parking_lot::{Condvar, Mutex};
use squall_net::{bootstrap, Endpoint, MsgType, NetConfig, NodeId};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T_SEQ: MsgType = MsgType(100);
const T_ECHO: MsgType = MsgType(101);
const T_BULK: MsgType = MsgType(102);
const T_DONE: MsgType = MsgType(103);
const T_PING: MsgType = MsgType(104);
/// A request answered only after a one-way `T_MARK` carrying the same token went first.
const T_AFTER: MsgType = MsgType(105);
const T_MARK: MsgType = MsgType(106);
/// `send_borrowed`: an 8-byte sequence number (the head), then `split_len(seq)` bytes of
/// `split_byte` (the borrowed body); checked whole and in order by the receiver.
const T_SPLIT: MsgType = MsgType(107);
const SPLITS: u64 = 40;

fn split_len(seq: u64) -> usize {
    match seq % 4 {
        0 => 0,
        1 => 1 + seq as usize,
        2 => 4096 + 3 * seq as usize,
        _ => (1 << 20) + seq as usize,
    }
}

fn split_byte(src: u16, seq: u64, i: usize) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 9) ^ seq as usize ^ (src as usize) << 3) as u8
}
/// Sent after a `T_MARK` with the same token; handled by whichever thread reads it (the
/// service thread, or a waiting thread through `Endpoint::poll_once`).
const T_CLAIM: MsgType = MsgType(108);
const CLAIMS_PER_PEER: u64 = 500;

const SEQ_PER_PEER: u64 = 2000;
const BULK: usize = 1 << 20;
const MESSAGES: u32 = 100_000;

fn bulk_byte(src: u16, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11) ^ src as usize) as u8
}

/// Counters the handlers update; the main thread waits on them.
#[derive(Default)]
struct State {
    next_seq: Vec<u64>,
    /// Next `T_SPLIT` sequence number expected per source.
    next_split: Vec<u64>,
    seq_errors: Vec<String>,
    bulk_ok: usize,
    done: usize,
    /// Tokens of the `T_MARK` messages handled.
    marks: std::collections::HashSet<u64>,
    /// `T_CLAIM` messages handled, by the service thread and by a waiting thread.
    claimed: u64,
    claimed_by_waiter: u64,
}

/// A `T_CLAIM` handled (on either thread): its `T_MARK` must have been handled first.
fn on_claim(s: &Shared, inc: &squall_net::Incoming, by_waiter: bool) {
    let token = u64::from_le_bytes(inc.payload[..8].try_into().expect("8 bytes"));
    let mut st = s.st.lock();
    if !st.marks.contains(&token) {
        st.seq_errors
            .push(format!("claim {token:#x} from {} before its mark", inc.src));
    }
    st.claimed += 1;
    st.claimed_by_waiter += u64::from(by_waiter);
    s.cv.notify_all();
}

struct Shared {
    st: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn wait_until(&self, what: &str, limit: Duration, f: impl Fn(&State) -> bool) {
        let deadline = Instant::now() + limit;
        let mut st = self.st.lock();
        while !f(&st) {
            if self.cv.wait_until(&mut st, deadline).timed_out() && !f(&st) {
                panic!("timed out waiting for {what}");
            }
        }
        assert!(st.seq_errors.is_empty(), "{:?}", st.seq_errors);
    }
}

fn start_node(sh: &Arc<Shared>) -> Endpoint {
    let cfg = NetConfig::from_env().expect("config from env");
    let n = cfg.size as usize;
    sh.st.lock().next_seq = vec![0; n];
    sh.st.lock().next_split = vec![0; n];
    let s1 = sh.clone();
    bootstrap::start_with(cfg, move |ep| {
        let s = s1.clone();
        ep.register(T_SEQ, move |_, inc| {
            let mut st = s.st.lock();
            let v = u64::from_le_bytes(inc.payload[..8].try_into().expect("8 bytes"));
            let want = st.next_seq[inc.src.index()];
            if v != want {
                let e = format!("from {}: got {v}, expected {want}", inc.src);
                st.seq_errors.push(e);
            }
            st.next_seq[inc.src.index()] = v + 1;
            s.cv.notify_all();
        });
        ep.register(T_ECHO, |ep, inc| {
            ep.reply(&inc, inc.payload.clone()).expect("reply");
        });
        let s = s1.clone();
        ep.register(T_BULK, move |_, inc| {
            let ok = inc.payload.len() == BULK
                && inc
                    .payload
                    .iter()
                    .enumerate()
                    .all(|(i, b)| *b == bulk_byte(inc.src.0, i));
            let mut st = s.st.lock();
            if ok {
                st.bulk_ok += 1;
            } else {
                st.seq_errors.push(format!("bulk from {} corrupt", inc.src));
            }
            s.cv.notify_all();
        });
        let s = s1.clone();
        ep.register(T_SPLIT, move |_, inc| {
            let mut st = s.st.lock();
            let want = st.next_split[inc.src.index()];
            let seq = inc
                .payload
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes);
            let body = inc.payload.get(8..).unwrap_or(&[]);
            let intact = seq == Some(want)
                && body.len() == split_len(want)
                && body
                    .iter()
                    .enumerate()
                    .all(|(i, b)| *b == split_byte(inc.src.0, want, i));
            if !intact {
                let e = format!(
                    "split from {}: seq {seq:?} of {} bytes, expected {want} of {}",
                    inc.src,
                    body.len(),
                    split_len(want)
                );
                st.seq_errors.push(e);
            }
            st.next_split[inc.src.index()] = want + 1;
            s.cv.notify_all();
        });
        let s = s1.clone();
        ep.register(T_DONE, move |_, _| {
            s.st.lock().done += 1;
            s.cv.notify_all();
        });
        ep.register(T_PING, |ep, inc| {
            let _ = ep.reply(&inc, inc.payload.clone());
        });
        ep.register(T_AFTER, |ep, inc| {
            ep.send(inc.src, T_MARK, inc.payload.clone())
                .expect("send mark");
            ep.reply(&inc, inc.payload.clone()).expect("reply");
        });
        let s = s1.clone();
        ep.register(T_MARK, move |_, inc| {
            let token = u64::from_le_bytes(inc.payload[..8].try_into().expect("8 bytes"));
            s.st.lock().marks.insert(token);
        });
        let s = s1.clone();
        ep.register(T_CLAIM, move |_, inc| on_claim(&s, &inc, false));
    })
    .expect("join the job")
}

fn barrier_and_shutdown(ep: &Endpoint, sh: &Shared) {
    let n = ep.size() as usize;
    for p in 0..ep.size() {
        if p != ep.rank().0 {
            ep.send(NodeId(p), T_DONE, vec![]).expect("send done");
        }
    }
    sh.wait_until("done barrier", Duration::from_secs(100), |st| {
        st.done == n - 1
    });
    ep.shutdown().expect("shutdown");
}

/// FIFO: interleaves `SEQ_PER_PEER` sequence messages (of 8 to 307 bytes) to every peer;
/// returns the peers.
fn send_seq_streams(ep: &Endpoint) -> Vec<NodeId> {
    let me = ep.rank();
    let peers: Vec<NodeId> = (0..ep.size()).map(NodeId).filter(|p| *p != me).collect();
    for i in 0..SEQ_PER_PEER {
        for p in &peers {
            let mut b = i.to_le_bytes().to_vec();
            b.resize(8 + (i as usize % 300), 7);
            ep.send(*p, T_SEQ, b).expect("send seq");
        }
    }
    peers
}

fn role_suite(ep: &Endpoint, sh: &Shared) {
    let me = ep.rank();
    let peers = send_seq_streams(ep);
    // Request/reply of several sizes, including fragmented ones.
    for p in &peers {
        for (k, len) in [0usize, 1, 64, 4096, 70_000, 200_000]
            .into_iter()
            .enumerate()
        {
            let data: Vec<u8> = (0..len).map(|i| (i + k + me.index()) as u8).collect();
            let r = ep.request(*p, T_ECHO, data.clone()).expect("request");
            assert_eq!(&r[..], &data[..], "echo of {len} bytes from {p}");
        }
    }
    // 1 MiB bulk to every peer.
    for p in &peers {
        let data: Vec<u8> = (0..BULK).map(|i| bulk_byte(me.0, i)).collect();
        ep.send(*p, T_BULK, data).expect("bulk");
    }
    let want = peers.len();
    sh.wait_until("sequence and bulk", Duration::from_secs(100), |st| {
        st.bulk_ok == want
            && st
                .next_seq
                .iter()
                .enumerate()
                .all(|(i, v)| i == me.index() || *v == SEQ_PER_PEER)
    });
    barrier_and_shutdown(ep, sh);
    println!("suite ok on {me}");
}

fn role_message(ep: &Endpoint, sh: &Shared) {
    let me = ep.rank();
    let n = ep.size();
    let next = NodeId((me.0 + 1) % n);
    let prev = (me.0 + n - 1) % n;
    let t0 = Instant::now();
    for i in 0..u64::from(MESSAGES) {
        ep.send(next, T_SEQ, i.to_le_bytes().to_vec())
            .expect("send");
    }
    sh.wait_until("message test", Duration::from_secs(100), |st| {
        st.next_seq[prev as usize] == u64::from(MESSAGES)
    });
    let st = ep.stats();
    if std::env::var("SQUALL_TRANSPORT").is_ok_and(|t| t == "mpi") {
        // Headerless or framed, every message decodes: nothing dropped.
        assert!(st.drops.is_empty(), "{me}: drops over mpi: {:?}", st.drops);
    }
    eprintln!(
        "{me}: {MESSAGES} messages in {:?}; retransmissions {} dups {} faults {}",
        t0.elapsed(),
        st.retransmissions,
        st.dups_dropped,
        st.faults_injected
    );
    barrier_and_shutdown(ep, sh);
    println!("message ok on {me}");
}

/// `send_borrowed` of small and large bodies to every node (itself included), interleaved with
/// ordinary sends of the same stream type: every message arrives whole and in order.
fn role_borrowed(ep: &Endpoint, sh: &Shared) {
    let me = ep.rank();
    let all: Vec<NodeId> = (0..ep.size()).map(NodeId).collect();
    for seq in 0..SPLITS {
        let body: Vec<u8> = (0..split_len(seq))
            .map(|i| split_byte(me.0, seq, i))
            .collect();
        for p in &all {
            if seq % 3 == 2 {
                // An ordinary send in the same stream.
                let mut whole = seq.to_le_bytes().to_vec();
                whole.extend_from_slice(&body);
                ep.send(*p, T_SPLIT, whole).expect("send");
            } else {
                ep.send_borrowed(*p, T_SPLIT, &seq.to_le_bytes(), &body)
                    .expect("send_borrowed");
            }
        }
    }
    sh.wait_until("borrowed sends", Duration::from_secs(100), |st| {
        st.next_split.iter().all(|v| *v == SPLITS)
    });
    barrier_and_shutdown(ep, sh);
    println!("borrowed ok on {me}");
}

/// Sends in batches ([`Endpoint::batch`], nested too, with a blocking request inside some)
/// while another thread sends a second stream unbatched, small and large, to every node: both
/// streams arrive whole and in order, the requests are answered (a batch writes what it holds
/// before its thread waits), and over tcp the batches held frames.
fn role_batched(ep: &Endpoint, sh: &Shared) {
    const CHUNK: u64 = 50;
    let me = ep.rank();
    let peers: Vec<NodeId> = (0..ep.size()).map(NodeId).filter(|p| *p != me).collect();
    let all: Vec<NodeId> = (0..ep.size()).map(NodeId).collect();
    let other = {
        let ep = ep.clone();
        std::thread::spawn(move || {
            for seq in 0..SPLITS {
                let body: Vec<u8> = (0..split_len(seq))
                    .map(|i| split_byte(me.0, seq, i))
                    .collect();
                for p in &all {
                    ep.send_borrowed(*p, T_SPLIT, &seq.to_le_bytes(), &body)
                        .expect("send_borrowed");
                }
            }
        })
    };
    for (c, start) in (0..SEQ_PER_PEER).step_by(CHUNK as usize).enumerate() {
        ep.batch(|| {
            for i in start..(start + CHUNK).min(SEQ_PER_PEER) {
                if i == start + CHUNK / 2 {
                    // A nested batch: its end writes nothing; the outer one's does.
                    ep.batch(|| {
                        for p in &peers {
                            let mut b = i.to_le_bytes().to_vec();
                            b.resize(8 + (i as usize % 300), 7);
                            ep.send(*p, T_SEQ, b).expect("send seq");
                        }
                    });
                    continue;
                }
                for p in &peers {
                    let mut b = i.to_le_bytes().to_vec();
                    b.resize(8 + (i as usize % 300), 7);
                    ep.send(*p, T_SEQ, b).expect("send seq");
                }
            }
            if c % 8 == 0 {
                for p in &peers {
                    let data = (c as u64).to_le_bytes().to_vec();
                    let r = ep.request(*p, T_ECHO, data.clone()).expect("request");
                    assert_eq!(&r[..], &data[..], "echo from {p} inside a batch");
                }
            }
        });
    }
    other.join().expect("unbatched sender");
    sh.wait_until(
        "batched and unbatched streams",
        Duration::from_secs(100),
        |st| {
            st.next_split.iter().all(|v| *v == SPLITS)
                && st
                    .next_seq
                    .iter()
                    .enumerate()
                    .all(|(i, v)| i == me.index() || *v == SEQ_PER_PEER)
        },
    );
    let held = ep.stats().frames_batched;
    if std::env::var("SQUALL_TRANSPORT").is_ok_and(|t| t == "tcp") {
        assert!(held > 0, "{me}: no frame held by a batch over tcp");
    }
    barrier_and_shutdown(ep, sh);
    println!("batched ok on {me} ({held} frames held)");
}

/// Requests from two application threads to every peer, every other one answered after a
/// one-way message sent first: when the reply is back, that message's handler has run (FIFO per
/// peer holds between the messages the service thread handles and the replies a waiting
/// thread reads from the socket itself, `SQUALL_REPLY_SPIN_US`).
fn role_ordered(ep: &Endpoint, sh: &Arc<Shared>) {
    const PER_PEER: u64 = 300;
    let me = ep.rank();
    let peers: Vec<NodeId> = (0..ep.size()).map(NodeId).filter(|p| *p != me).collect();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (ep, sh, peers) = (ep.clone(), sh.clone(), peers.clone());
            std::thread::spawn(move || {
                for i in 0..PER_PEER {
                    for p in &peers {
                        let token = u64::from(me.0) << 32 | t << 24 | i;
                        // Every other request is a plain echo: a reply with nothing ahead of
                        // it, which its waiter may take straight from the socket.
                        let ty = if i % 2 == 0 { T_AFTER } else { T_ECHO };
                        let r = ep
                            .request(*p, ty, token.to_le_bytes().to_vec())
                            .expect("request");
                        assert_eq!(&r[..], &token.to_le_bytes(), "reply of {token:#x}");
                        assert!(
                            ty == T_ECHO || sh.st.lock().marks.contains(&token),
                            "{me}: the reply of {token:#x} from {p} came before its mark"
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("requester thread");
    }
    let st = ep.stats();
    eprintln!(
        "{me}: replies spun {} polled {}",
        st.replies_spun, st.replies_polled
    );
    if ep.size() == 2 && std::env::var("SQUALL_NET_FAULTS").is_err() {
        // A 10 ms spin (set by the test) outlasts a round trip almost always: some of the
        // 300 plain echoes must have been read by their waiter.
        assert!(st.replies_polled > 0, "{me}: no reply read by its waiter");
    }
    barrier_and_shutdown(ep, sh);
    println!("ordered ok on {me}");
}

/// Every node sends each peer `T_MARK`, `T_CLAIM` pairs while its main thread waits for the
/// peers' pairs by polling the network itself (`Endpoint::poll_once`, claiming `T_CLAIM`):
/// whichever thread handles a claim, its mark (handled on the service thread) came first.
fn role_claimed(ep: &Endpoint, sh: &Arc<Shared>) {
    let me = ep.rank();
    let peers: Vec<NodeId> = (0..ep.size()).map(NodeId).filter(|p| *p != me).collect();
    let want = CLAIMS_PER_PEER * peers.len() as u64;
    let sender = {
        let (ep, peers) = (ep.clone(), peers.clone());
        std::thread::spawn(move || {
            for i in 0..CLAIMS_PER_PEER {
                for p in &peers {
                    let token = (u64::from(me.0) << 32 | i).to_le_bytes().to_vec();
                    ep.send(*p, T_MARK, token.clone()).expect("send mark");
                    ep.send(*p, T_CLAIM, token).expect("send claim");
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(100);
    let s = sh.clone();
    let mut handle = move |_: &Endpoint, inc: squall_net::Incoming| on_claim(&s, &inc, true);
    while sh.st.lock().claimed < want {
        assert!(
            Instant::now() < deadline,
            "{me}: timed out waiting for claims"
        );
        if !ep.poll_once(&|ty| ty == T_CLAIM, &mut handle) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::yield_now();
    }
    sender.join().expect("sender thread");
    let (by_waiter, errors) = {
        let st = sh.st.lock();
        (st.claimed_by_waiter, st.seq_errors.clone())
    };
    assert!(errors.is_empty(), "{me}: {errors:?}");
    eprintln!(
        "{me}: {want} claims, {by_waiter} handled by the waiting thread (stats {})",
        ep.stats().waiter_handled
    );
    barrier_and_shutdown(ep, sh);
    println!("claimed ok on {me}");
}

fn role_victim(ep: &Endpoint) {
    // Everybody pings everybody until the launcher kills one node; the others must notice.
    println!("READY {} pid {}", ep.rank().0, std::process::id());
    let n = ep.size();
    let mut i = 0u64;
    loop {
        for p in (0..n).map(NodeId).filter(|p| *p != ep.rank()) {
            let _ = ep.request(p, T_PING, i.to_le_bytes().to_vec());
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn role_garbage(ep: &Endpoint, sh: &Shared) {
    if ep.rank().0 == 0 {
        println!("UDP_ADDR {}", ep.udp_local_addr().expect("udp address"));
        // The test sends garbage now; meanwhile the job keeps working.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = ep.stats();
            use squall_net::DropReason::*;
            if s.dropped(Garbage) >= 10 && s.dropped(Truncated) >= 10 && s.dropped(ForeignJob) >= 10
            {
                println!(
                    "DROPS garbage={} truncated={} foreign={} baddest={}",
                    s.dropped(Garbage),
                    s.dropped(Truncated),
                    s.dropped(ForeignJob),
                    s.dropped(BadDest)
                );
                break;
            }
            assert!(Instant::now() < deadline, "drops not counted: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    role_suite(ep, sh);
}

/// Authentication on: node 1 first sends node 0 ten requests (so its authentication sequence
/// numbers 1..=10 toward node 0 are spent), then node 0 shows its udp address and waits until
/// the test's forged datagrams (another key, unsealed) and replays (the right key, numbers
/// already received) are counted; then the full suite runs: its sequence and bulk checks fail
/// if any forged message got through to a handler.
fn role_forged(ep: &Endpoint, sh: &Shared) {
    use squall_net::DropReason::{BadMac, Replayed};
    if ep.rank().0 == 1 {
        for i in 0..10u8 {
            let r = ep.request(NodeId(0), T_ECHO, vec![i; 4]).expect("warm-up");
            assert_eq!(&r[..], &[i; 4]);
        }
    } else {
        let deadline = Instant::now() + Duration::from_secs(20);
        while ep.stats().packets_authenticated < 10 {
            assert!(Instant::now() < deadline, "node 1's requests did not come");
            std::thread::sleep(Duration::from_millis(5));
        }
        println!("UDP_ADDR {}", ep.udp_local_addr().expect("udp address"));
        loop {
            let s = ep.stats();
            if s.dropped(BadMac) >= 40 && s.dropped(Replayed) >= 10 {
                println!(
                    "REFUSED bad_mac={} replayed={}",
                    s.dropped(BadMac),
                    s.dropped(Replayed)
                );
                break;
            }
            assert!(Instant::now() < deadline, "refusals not counted: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    role_suite(ep, sh);
    let s = ep.stats();
    assert!(s.packets_authenticated > 0, "{s:?}");
    println!("AUTHENTICATED {}", s.packets_authenticated);
}

/// MPI lent to code beside Squall (`Endpoint::with_mpi`): every node sends a stream of
/// sequence messages to every peer, then takes part in an all-reduce and a ring exchange over
/// the lent communicator (even ranks from the main thread, odd ones from the service thread),
/// while the others' messages keep coming; then every stream must be whole and in order, and
/// request/reply must still work.
#[cfg(feature = "mpi")]
fn role_lend(ep: &Endpoint, sh: &Shared) {
    use mpi::collective::{CommunicatorCollectives, SystemOperation};
    use mpi::point_to_point::{Destination, Source};
    use mpi::topology::Communicator;
    let me = ep.rank();
    let n = ep.size();
    let peers = send_seq_streams(ep);
    let lent = move |c: &mpi::topology::SimpleCommunicator| -> (u64, Vec<u8>) {
        assert_eq!((c.rank(), c.size()), (i32::from(me.0), i32::from(n)));
        let mut sum = 0u64;
        c.all_reduce_into(&(u64::from(me.0) + 1), &mut sum, SystemOperation::sum());
        // A ring exchange: send to the next rank, receive from the previous one.
        let next = c.process_at_rank((c.rank() + 1) % c.size());
        let prev = c.process_at_rank((c.rank() + c.size() - 1) % c.size());
        let out: Vec<u8> = (0..4096).map(|i| (i as u16 ^ me.0) as u8).collect();
        let mut back = vec![0u8; 4096];
        mpi::request::scope(|sc| {
            let sreq = next.immediate_send(sc, &out[..]);
            prev.receive_into(&mut back[..]);
            sreq.wait();
        });
        (sum, back)
    };
    let (sum, back) = if me.0.is_multiple_of(2) {
        ep.with_mpi(lent).expect("mpi lent from the main thread")
    } else {
        let (tx, rx) = std::sync::mpsc::channel();
        ep.post(move |ep| {
            let _ = tx.send(ep.with_mpi(lent));
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the lent closure ran")
            .expect("mpi lent from the service thread")
    };
    let total = u64::from(n) * (u64::from(n) + 1) / 2;
    assert_eq!(sum, total, "{me}: all-reduce over the lent communicator");
    let from = (me.0 + n - 1) % n;
    let want: Vec<u8> = (0..4096).map(|i| (i as u16 ^ from) as u8).collect();
    assert!(
        back == want,
        "{me}: ring exchange over the lent communicator"
    );
    sh.wait_until(
        "sequences around the lent mpi",
        Duration::from_secs(100),
        |st| {
            st.next_seq
                .iter()
                .enumerate()
                .all(|(i, v)| i == me.index() || *v == SEQ_PER_PEER)
        },
    );
    for p in &peers {
        let r = ep
            .request(*p, T_ECHO, vec![me.0 as u8; 100])
            .expect("request");
        assert_eq!(
            &r[..],
            &[me.0 as u8; 100][..],
            "echo from {p} after the lent mpi"
        );
    }
    barrier_and_shutdown(ep, sh);
    println!("lend ok on {me}");
}

/// Entry point of a node process (does nothing when run as a normal test).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("SQUALL_TEST_ROLE") else {
        return;
    };
    let sh = Arc::new(Shared {
        st: Mutex::new(State::default()),
        cv: Condvar::new(),
    });
    let ep = start_node(&sh);
    match role.as_str() {
        "suite" => role_suite(&ep, &sh),
        "message" => role_message(&ep, &sh),
        "borrowed" => role_borrowed(&ep, &sh),
        "batched" => role_batched(&ep, &sh),
        "ordered" => role_ordered(&ep, &sh),
        "claimed" => role_claimed(&ep, &sh),
        "victim" => role_victim(&ep),
        "garbage" => role_garbage(&ep, &sh),
        "forged" => role_forged(&ep, &sh),
        #[cfg(feature = "mpi")]
        "lend" => role_lend(&ep, &sh),
        other => panic!("unknown role {other}"),
    }
}

/// Jobs run one at a time: on a 2-core machine parallel jobs only slow each other down and
/// make timing-based failure detection flaky.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(n: u16, transport: &str, role: &str, extra: &[(&str, &str)]) {
    let _one = ONE_JOB_AT_A_TIME.lock();
    let outs = spawn(n, transport, role, extra).wait(Duration::from_secs(120));
    assert_success(&format!("{role} over {transport} with {n} nodes"), &outs);
}

/// Runs `role` under `mpirun -n N` and checks every rank reported success.
#[cfg(feature = "mpi")]
fn run_mpi(n: u16, role: &str, ok: &str) {
    run_mpi_env(n, role, ok, &[]);
}

/// [`run_mpi`] with extra environment variables for every rank.
#[cfg(feature = "mpi")]
fn run_mpi_env(n: u16, role: &str, ok: &str, env: &[(&str, &str)]) {
    let _one = ONE_JOB_AT_A_TIME.lock();
    let outs = common::spawn_mpirun(n, role, env).wait(Duration::from_secs(180));
    assert_success(&format!("{role} over mpi with {n} nodes"), &outs);
    for r in 0..n {
        let line = format!("{ok} on node {r}");
        assert!(
            outs[0].stdout.contains(&line),
            "no '{line}' from mpirun -n {n}\n--- stdout\n{}\n--- stderr\n{}",
            outs[0].stdout,
            outs[0].stderr
        );
    }
}
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_2() {
    run_mpi(2, "suite", "suite ok");
}
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_4() {
    run_mpi(4, "suite", "suite ok");
}
#[cfg(feature = "mpi")]
#[test]
fn lend_mpi_2() {
    run_mpi(2, "lend", "lend ok");
}
#[cfg(feature = "mpi")]
#[test]
fn lend_mpi_4_rings_and_p2p() {
    run_mpi_env(4, "lend", "lend ok", &[("SQUALL_MPI_SHM_GROUPS", "2")]);
}
/// The framed path alone (what a library with a small `MPI_TAG_UB` gets): every message
/// carries the wire header.
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_2_framed() {
    run_mpi_env(2, "suite", "suite ok", &[("SQUALL_MPI_HEADERLESS", "0")]);
}
/// Point-to-point between ranks of one machine too (`SQUALL_MPI_SHM=0`): the path ranks on
/// different machines take. (By default ranks sharing a machine use the shared-memory rings,
/// which every other mpi test here goes through, 1 MiB bulk messages streamed through a
/// 512 KiB ring included.)
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_2_p2p() {
    run_mpi_env(2, "suite", "suite ok", &[("SQUALL_MPI_SHM", "0")]);
}
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_4_p2p() {
    run_mpi_env(4, "suite", "suite ok", &[("SQUALL_MPI_SHM", "0")]);
}
/// Both paths at once, as on a cluster: 4 ranks in 2 groups (`SQUALL_MPI_SHM_GROUPS=2`: ranks
/// 0 and 2 share rings, so do 1 and 3; the rest talk through MPI point-to-point).
#[cfg(feature = "mpi")]
#[test]
fn suite_mpi_4_rings_and_p2p() {
    run_mpi_env(4, "suite", "suite ok", &[("SQUALL_MPI_SHM_GROUPS", "2")]);
}
#[cfg(feature = "mpi")]
#[test]
fn message_test_mpi_4_rings_and_p2p() {
    run_mpi_env(
        4,
        "message",
        "message ok",
        &[("SQUALL_MPI_SHM_GROUPS", "2")],
    );
}
#[cfg(feature = "mpi")]
#[test]
fn message_test_mpi_2_framed() {
    run_mpi_env(
        2,
        "message",
        "message ok",
        &[("SQUALL_MPI_HEADERLESS", "0")],
    );
}
#[cfg(feature = "mpi")]
#[test]
fn message_test_mpi_2() {
    run_mpi(2, "message", "message ok");
}
#[cfg(feature = "mpi")]
#[test]
fn message_test_mpi_4() {
    run_mpi(4, "message", "message ok");
}

/// A rank SIGKILLed under mpirun ends the job within seconds (mpirun's or squall's message
/// names the rank); nothing hangs.
#[cfg(feature = "mpi")]
#[test]
fn killed_node_ends_the_job_mpi() {
    use std::io::BufRead;
    let _one = ONE_JOB_AT_A_TIME.lock();
    let n = 3;
    let mut job = common::spawn_mpirun(n, "victim", &[("SQUALL_PEER_TIMEOUT_MS", "2000")]);
    let out = job.children[0].stdout.take().expect("mpirun stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    let mut pids = vec![0u32; n as usize];
    let mut ready = 0;
    while ready < n {
        let line = lines
            .next()
            .expect("mpirun ended before every rank was ready")
            .expect("read mpirun output");
        let Some(rest) = line.split("READY ").nth(1) else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        let (Some(r), Some(pid)) = (
            w.first().and_then(|r| r.parse::<usize>().ok()),
            w.get(2).and_then(|p| p.parse::<u32>().ok()),
        ) else {
            panic!("bad ready line {line:?}");
        };
        pids[r] = pid;
        ready += 1;
    }
    std::thread::sleep(Duration::from_millis(200));
    let status = std::process::Command::new("kill")
        .args(["-9", &pids[1].to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "could not kill rank 1 (pid {})", pids[1]);
    let outs = job.wait(Duration::from_secs(20));
    let o = &outs[0];
    assert!(
        o.status.is_some_and(|s| !s.success()),
        "mpirun did not fail: {:?}\n{}",
        o.status,
        o.stderr
    );
    assert!(
        o.stderr.contains("lost contact with node 1") || o.stderr.contains("rank 1"),
        "nobody named rank 1:\n{}",
        o.stderr
    );
    assert!(
        o.elapsed < Duration::from_secs(10),
        "the job took {:?} to end",
        o.elapsed
    );
}

#[test]
fn suite_tcp_2() {
    run(2, "tcp", "suite", &[]);
}
#[test]
fn suite_tcp_4() {
    run(4, "tcp", "suite", &[]);
}
#[test]
fn borrowed_send_tcp_2() {
    run(2, "tcp", "borrowed", &[]);
}
#[test]
fn borrowed_send_udp_2() {
    run(2, "udp", "borrowed", &[]);
}
#[test]
fn batched_sends_tcp_2() {
    run(2, "tcp", "batched", &[]);
}
#[test]
fn batched_sends_tcp_4() {
    run(4, "tcp", "batched", &[]);
}
#[test]
fn batched_sends_udp_2() {
    run(2, "udp", "batched", &[]);
}
#[test]
fn suite_udp_2() {
    run(2, "udp", "suite", &[]);
}
#[test]
fn suite_udp_4() {
    run(4, "udp", "suite", &[]);
}
#[test]
fn suite_udp_4_faults() {
    run(
        4,
        "udp",
        "suite",
        &[("SQUALL_NET_FAULTS", "loss=0.1,dup=0.05,reorder=0.1,seed=11")],
    );
}
#[test]
fn suite_tcp_2_delay() {
    run(
        2,
        "tcp",
        "suite",
        &[("SQUALL_NET_FAULTS", "delay=50us,reorder=0.1,seed=3")],
    );
}
const LONG_REPLY_SPIN: (&str, &str) = ("SQUALL_REPLY_SPIN_US", "10000");
#[test]
fn replies_read_by_their_waiter_keep_fifo_tcp_2() {
    run(2, "tcp", "ordered", &[LONG_REPLY_SPIN]);
}
#[test]
fn replies_read_by_their_waiter_keep_fifo_udp_2() {
    run(2, "udp", "ordered", &[LONG_REPLY_SPIN]);
}
#[test]
fn replies_read_by_their_waiter_keep_fifo_tcp_4() {
    run(4, "tcp", "ordered", &[]);
}
#[test]
fn replies_read_by_their_waiter_keep_fifo_udp_4_faults() {
    run(
        4,
        "udp",
        "ordered",
        &[
            LONG_REPLY_SPIN,
            ("SQUALL_NET_FAULTS", "loss=0.05,dup=0.05,reorder=0.1,seed=5"),
        ],
    );
}
#[test]
fn messages_handled_by_a_waiter_keep_fifo_tcp_2() {
    run(2, "tcp", "claimed", &[]);
}
#[test]
fn messages_handled_by_a_waiter_keep_fifo_udp_4() {
    run(4, "udp", "claimed", &[]);
}
#[test]
fn message_test_tcp_2() {
    run(2, "tcp", "message", &[]);
}
#[test]
fn message_test_tcp_4() {
    run(4, "tcp", "message", &[]);
}
#[test]
fn message_test_udp_2() {
    run(2, "udp", "message", &[]);
}
#[test]
fn message_test_udp_4() {
    run(4, "udp", "message", &[]);
}
#[test]
fn message_test_udp_4_faults() {
    run(
        4,
        "udp",
        "message",
        &[("SQUALL_NET_FAULTS", "loss=0.1,dup=0.05,reorder=0.1,seed=7")],
    );
}

fn kill_one(transport: &str) {
    let _one = ONE_JOB_AT_A_TIME.lock();
    let n = 3;
    let victim = 1usize;
    let mut job = spawn(
        n,
        transport,
        "victim",
        &[("SQUALL_PEER_TIMEOUT_MS", "2000")],
    );
    for (r, c) in job.children.iter_mut().enumerate() {
        assert!(
            common::read_line_with(c, "READY").is_some(),
            "node {r} never became ready"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    job.children[victim].kill().expect("SIGKILL the victim");
    let killed_at = Instant::now();
    let outs = job.wait(Duration::from_secs(10));
    for (r, o) in outs.iter().enumerate() {
        if r == victim {
            continue;
        }
        let code = o.status.and_then(|s| s.code());
        assert!(
            code.is_some_and(|c| c != 0),
            "node {r} did not fail: {:?}\n{}",
            o.status,
            o.stderr
        );
        assert!(
            o.stderr
                .contains(&format!("lost contact with node {victim}")),
            "node {r} did not name node {victim}:\n{}",
            o.stderr
        );
        assert!(
            o.elapsed
                <= killed_at.elapsed().max(Duration::from_secs(5)) + Duration::from_millis(500)
        );
        assert!(
            o.elapsed < Duration::from_secs(6),
            "node {r} took {:?} to end",
            o.elapsed
        );
    }
}

#[test]
fn killed_node_ends_the_job_tcp() {
    kill_one("tcp");
}
#[test]
fn killed_node_ends_the_job_udp() {
    kill_one("udp");
}

#[test]
fn garbage_datagrams_are_counted_and_dropped() {
    use squall_wire::{encode, Flags, Header};
    let _one = ONE_JOB_AT_A_TIME.lock();
    let mut job = spawn(2, "udp", "garbage", &[]);
    let addr = common::read_line_with(&mut job.children[0], "UDP_ADDR").expect("node 0 address");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    for i in 0..20u8 {
        // garbage
        sock.send_to(&[i; 97], &addr).expect("send garbage");
        sock.send_to(b"not a squall packet at all, just some text........", &addr)
            .expect("send");
        // truncated: a valid header claiming more payload than present
        let mut h = Header::new(squall_net::JobId(1), MsgType(100), NodeId(1), NodeId(0));
        h.flags = Flags::empty();
        let mut b = encode(&h, &[1, 2, 3, 4, 5, 6, 7, 8]);
        b.truncate(b.len() - 3);
        let _ = sock.send_to(&b, &addr);
        // foreign job (job ids are random 64-bit: 1 is not this run's)
        h.seq = 1;
        let b = encode(&h, &[0u8; 8]);
        let _ = sock.send_to(&b, &addr);
    }
    let outs = job.wait(Duration::from_secs(60));
    assert_success("garbage test", &outs);
    assert!(outs[0].stdout.contains("suite ok"), "{}", outs[0].stdout);
}

/// A fixed key for the authentication tests (real jobs get one from `squall run`).
const TEST_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
const AUTH_ON: [(&str, &str); 2] = [("SQUALL_AUTH", "on"), ("SQUALL_AUTH_KEY", TEST_KEY)];

#[test]
fn suite_tcp_2_auth() {
    run(2, "tcp", "suite", &AUTH_ON);
}
#[test]
fn batched_sends_tcp_2_auth() {
    run(2, "tcp", "batched", &AUTH_ON);
}
#[test]
fn suite_udp_2_auth() {
    run(2, "udp", "suite", &AUTH_ON);
}
#[test]
fn suite_udp_4_auth_faults() {
    let mut env = AUTH_ON.to_vec();
    env.push(("SQUALL_NET_FAULTS", "loss=0.1,dup=0.05,reorder=0.1,seed=5"));
    run(4, "udp", "suite", &env);
}
#[test]
fn suite_tcp_4_auth_delay() {
    let mut env = AUTH_ON.to_vec();
    env.push(("SQUALL_NET_FAULTS", "delay=50us,reorder=0.1,seed=3"));
    run(4, "tcp", "suite", &env);
}

const ENCRYPT_ON: [(&str, &str); 2] = [("SQUALL_AUTH", "encrypt"), ("SQUALL_AUTH_KEY", TEST_KEY)];

#[test]
fn suite_tcp_2_encrypt() {
    run(2, "tcp", "suite", &ENCRYPT_ON);
}
#[test]
fn suite_udp_4_encrypt_faults() {
    let mut env = ENCRYPT_ON.to_vec();
    env.push(("SQUALL_NET_FAULTS", "loss=0.1,dup=0.05,reorder=0.1,seed=9"));
    run(4, "udp", "suite", &env);
}

/// A node that encrypts and one that only tags cannot form a job: rank 0 says which.
#[test]
fn encrypting_and_tagging_nodes_do_not_mix() {
    let _one = ONE_JOB_AT_A_TIME.lock();
    let port = common::free_port();
    let mut job = common::spawn_ranks(2, &[0], port, "udp", "suite", &ENCRYPT_ON);
    let other = common::spawn_ranks(2, &[1], port, "udp", "suite", &AUTH_ON);
    job.children.extend(other.children);
    let outs = job.wait(Duration::from_secs(30));
    assert!(
        !outs[0].status.is_some_and(|s| s.success()),
        "rank 0 accepted a node that does not encrypt"
    );
    assert!(
        outs[0]
            .stderr
            .contains("does not encrypt its packets but rank 0 encrypts"),
        "{}",
        outs[0].stderr
    );
}

/// Forged datagrams injected into node 0's udp socket (another key, an unsealed one, and
/// replays of sequence numbers node 1 already used, made with the right key) are refused and
/// counted, with a warning naming the claimed sender and the address; the job's results stay
/// right.
#[test]
fn forged_and_replayed_datagrams_are_refused() {
    use squall_wire::{encode, encode_sealed_into, AuthKey, Flags, Header};
    let _one = ONE_JOB_AT_A_TIME.lock();
    let job = 0x5eed_0000_0000_0001u64;
    let job_hex = format!("{job:016x}");
    let mut env = AUTH_ON.to_vec();
    env.push(("SQUALL_JOB_ID", &job_hex));
    let mut jobp = spawn(2, "udp", "forged", &env);
    let addr = common::read_line_with(&mut jobp.children[0], "UDP_ADDR").expect("node 0 address");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let good = AuthKey::parse_hex(TEST_KEY).expect("key");
    let wrong = AuthKey::from_bytes([0x42; 32]);
    for i in 0..40u64 {
        // A message node 0's sequence check would reject if it were delivered.
        let mut h = Header::new(squall_net::JobId(job), T_SEQ, NodeId(1), NodeId(0));
        h.seq = 1 + i;
        h.flags = Flags::ACK;
        let body = (1_000_000 + i).to_le_bytes();
        if i % 2 == 0 {
            let mut b = Vec::new();
            encode_sealed_into(&h, &body, &wrong, 1000 + i, &mut b);
            sock.send_to(&b, &addr).expect("send forged");
        } else {
            sock.send_to(&encode(&h, &body), &addr)
                .expect("send unsealed");
        }
    }
    for seq in 1..=10u64 {
        // Right key, numbers node 1 already spent: replays.
        let mut h = Header::new(squall_net::JobId(job), T_SEQ, NodeId(1), NodeId(0));
        h.seq = 1;
        let mut b = Vec::new();
        encode_sealed_into(&h, &9u64.to_le_bytes(), &good, seq, &mut b);
        sock.send_to(&b, &addr).expect("send replay");
    }
    let outs = jobp.wait(Duration::from_secs(60));
    assert_success("forged datagrams", &outs);
    assert!(outs[0].stdout.contains("REFUSED"), "{}", outs[0].stdout);
    assert!(outs[0].stdout.contains("suite ok"), "{}", outs[0].stdout);
    let local = sock.local_addr().expect("local").to_string();
    assert!(
        outs[0]
            .stderr
            .contains(&format!("claiming to come from node 1 at {local}")),
        "no warning naming the sender and address:\n{}",
        outs[0].stderr
    );
    // Rate-limited: far fewer warning lines than refused datagrams.
    let warnings = outs[0].stderr.matches("warning: dropped").count();
    assert!(
        (1..=10).contains(&warnings),
        "{warnings} warnings:\n{}",
        outs[0].stderr
    );
}

/// Over tcp the only door open to strangers is the rendezvous: a hello sealed with another key
/// (claiming to be node 1, with the stranger's own address) is ignored with a warning, and
/// the real node 1 joins and the job runs.
#[test]
fn forged_hello_is_ignored_tcp() {
    use squall_wire::{encode_sealed_into, AuthKey, Header};
    use std::io::Write;
    let _one = ONE_JOB_AT_A_TIME.lock();
    let port = common::free_port();
    let mut job = common::spawn_ranks(2, &[0], port, "tcp", "suite", &AUTH_ON);
    let rv = format!("127.0.0.1:{port}");
    let t0 = Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(&rv) {
            Ok(s) => break s,
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("rank 0 never listened: {e}"),
        }
    };
    let mut p = Vec::new();
    p.extend_from_slice(&2u16.to_le_bytes());
    p.push(0);
    p.extend_from_slice(b"127.0.0.1:9");
    let h = Header::new(squall_net::JobId(0), MsgType(8), NodeId(1), NodeId(0));
    let mut b = Vec::new();
    encode_sealed_into(&h, &p, &AuthKey::from_bytes([7; 32]), 0, &mut b);
    s.write_all(&b).expect("send the forged hello");
    // The real node 1 now.
    let rest = common::spawn_ranks(2, &[1], port, "tcp", "suite", &AUTH_ON);
    job.children.extend(rest.children);
    let outs = job.wait(Duration::from_secs(60));
    assert_success("forged hello", &outs);
    assert!(
        outs[0]
            .stderr
            .contains("ignored a frame whose authentication tag"),
        "{}",
        outs[0].stderr
    );
}

#[test]
fn single_node_without_rendezvous() {
    let mut cfg = NetConfig::single();
    cfg.transport = squall_net::Transport::Udp;
    let ep = bootstrap::start(cfg).expect("single node");
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    ep.register(T_SEQ, move |_, inc| g.lock().push(inc.payload[0]));
    ep.register(T_ECHO, |ep, inc| {
        ep.reply(&inc, inc.payload.clone()).expect("reply")
    });
    // Messages for a type without a handler are held until it is registered, in order.
    ep.send(NodeId(0), T_BULK, vec![1u8]).expect("self send");
    ep.send(NodeId(0), T_BULK, vec![2u8]).expect("self send");
    let early = Arc::new(Mutex::new(Vec::new()));
    let e = early.clone();
    std::thread::sleep(Duration::from_millis(20));
    ep.register(T_BULK, move |_, inc| e.lock().push(inc.payload[0]));
    // Posted closures and reply callbacks run on the service thread; blocking requests there
    // are refused, asynchronous ones work.
    let (tx, rx) = crossbeam_channel::bounded(1);
    ep.post(move |ep| {
        assert!(ep.is_service_thread());
        let refused = matches!(
            ep.request(NodeId(0), T_ECHO, vec![1u8]),
            Err(squall_net::NetError::WouldDeadlock { .. })
        );
        ep.request_async(NodeId(0), T_ECHO, vec![5u8; 2], move |ep, r| {
            let ok = ep.is_service_thread()
                && r.map(|inc| inc.payload.to_vec()).ok() == Some(vec![5, 5]);
            let _ = tx.send(refused && ok);
        })
        .expect("async request");
    });
    assert!(rx
        .recv_timeout(Duration::from_secs(5))
        .expect("callback ran"));
    // A one-shot handler that unregisters itself: the second message is held, not handled.
    let once = Arc::new(Mutex::new(0));
    let o = once.clone();
    ep.register(T_PING, move |ep, _| {
        *o.lock() += 1;
        ep.unregister(T_PING);
    });
    ep.send(NodeId(0), T_PING, vec![1u8]).expect("self send");
    ep.send(NodeId(0), T_PING, vec![2u8]).expect("self send");
    assert!(!ep.is_service_thread());
    for i in 0..10u8 {
        ep.send(NodeId(0), T_SEQ, vec![i]).expect("self send");
    }
    assert_eq!(
        &ep.request(NodeId(0), T_ECHO, vec![9u8; 3])
            .expect("self request")[..],
        &[9, 9, 9]
    );
    assert_eq!(*got.lock(), (0..10).collect::<Vec<u8>>());
    assert_eq!(*early.lock(), vec![1, 2]);
    assert_eq!(*once.lock(), 1);
    let st = ep.stats();
    assert_eq!(st.by_type[&T_SEQ.0].received, 10);
    assert!(
        ep.send(NodeId(0), MsgType(3), vec![]).is_err(),
        "reserved types are refused"
    );
    assert!(ep.send(NodeId(1), T_SEQ, vec![]).is_err());
    ep.shutdown().expect("shutdown");
}

//! Round-trip latency of Squall messages against raw sockets, on two local processes.
//!
//!     cargo run --release -p squall-net --example pingpong -- [tcp|udp] [iters]
//!
//! Without `SQUALL_RANK` it launches itself twice (a tiny launcher); each pair of processes then
//! measures: raw blocking socket ping-pong, Squall `request` from an application thread, and
//! Squall handler-to-handler ping-pong (no thread hop at all).
use squall_net::{bootstrap, Endpoint, MsgType, NetConfig, NodeId};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PING: MsgType = MsgType(200);
const HPING: MsgType = MsgType(201);
const SIZES: [usize; 2] = [64, 4096];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let transport = args.get(1).cloned().unwrap_or_else(|| "tcp".into());
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    if std::env::var("SQUALL_RANK").is_err() {
        launch(&transport, iters);
        return;
    }
    let cfg = match NetConfig::from_env() {
        Ok(mut c) => {
            // Example-only knob to measure datagram sizes: PINGPONG_UDP_PAYLOAD=bytes.
            if let Some(v) = std::env::var("PINGPONG_UDP_PAYLOAD")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                c.udp_max_payload = v;
            }
            c
        }
        Err(e) => {
            eprintln!("pingpong: {e}");
            std::process::exit(2);
        }
    };
    let rank = cfg.rank;
    let (tx, rx) = mpsc::channel::<Duration>();
    let ep = bootstrap::start_with(cfg, move |ep| {
        ep.register(PING, |ep, inc| {
            let _ = ep.reply(&inc, inc.payload.clone());
        });
        let mut left = 0usize;
        let mut t0 = Instant::now();
        ep.register(HPING, move |ep, inc| {
            // Rank 1 echoes; rank 0 counts down and records the time.
            if ep.rank().0 == 1 {
                let _ = ep.send(NodeId(0), HPING, inc.payload);
                return;
            }
            if inc.payload.len() >= 8 && left == 0 {
                left = u64::from_le_bytes(inc.payload[..8].try_into().unwrap_or([0; 8])) as usize;
                t0 = Instant::now();
            } else {
                left -= 1;
                if left == 0 {
                    let _ = tx.send(t0.elapsed());
                    return;
                }
            }
            let _ = ep.send(NodeId(1), HPING, inc.payload);
        });
    })
    .unwrap_or_else(|e| {
        eprintln!("pingpong: {e}");
        std::process::exit(2)
    });
    let raw = raw_pingpong(&ep, &transport, iters);
    if rank.0 == 0 {
        for (k, size) in SIZES.iter().enumerate() {
            let payload = vec![7u8; *size];
            for _ in 0..iters / 10 {
                let _ = ep.request(NodeId(1), PING, payload.clone());
            }
            let t0 = Instant::now();
            for _ in 0..iters {
                ep.request(NodeId(1), PING, payload.clone())
                    .expect("request");
            }
            let req = t0.elapsed() / iters as u32;
            // Handler ping-pong: kick it off by posting a first message to ourselves.
            let mut first = (iters as u64).to_le_bytes().to_vec();
            first.resize(*size, 0);
            ep.send(NodeId(0), HPING, first).expect("kick");
            let total = rx.recv().expect("handler pingpong");
            let hand = total / iters as u32;
            let r = raw[k];
            println!(
                "{transport} {size:>5} B  raw {:>7.1} us  request {:>7.1} us ({:.2}x)  handlers {:>7.1} us ({:.2}x)",
                us(r),
                us(req),
                us(req) / us(r),
                us(hand),
                us(hand) / us(r)
            );
        }
    }
    if rank.0 == 0 {
        // Bandwidth: 64 MiB in 1 MiB messages, then one request so everything has arrived.
        let mb = bytes::Bytes::from(vec![3u8; 1 << 20]);
        let t0 = Instant::now();
        for _ in 0..64 {
            ep.send(NodeId(1), BULK, mb.clone()).expect("bulk");
        }
        ep.request(NodeId(1), PING, vec![]).expect("sync");
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "{transport} bandwidth 1 MiB messages: {:.0} MiB/s",
            64.0 / secs
        );
    } else {
        ep.register(BULK, |_, _| {});
    }
    barrier(&ep);
    let _ = ep.shutdown();
}

const BULK: MsgType = MsgType(203);

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const DONE: MsgType = MsgType(202);

/// Rank 0 tells rank 1 it is finished; rank 1 waits for that before leaving.
fn barrier(ep: &Endpoint) {
    if ep.rank().0 == 0 {
        ep.send(NodeId(1), DONE, vec![]).expect("done");
    } else {
        let (tx, rx) = mpsc::channel::<()>();
        let tx = std::sync::Mutex::new(tx);
        ep.register(DONE, move |_, _| {
            if let Ok(t) = tx.lock() {
                let _ = t.send(());
            }
        });
        let _ = rx.recv();
    }
}

/// Raw blocking-socket ping-pong between the two processes (addresses exchanged via Squall).
fn raw_pingpong(ep: &Endpoint, transport: &str, iters: usize) -> Vec<Duration> {
    let other = NodeId(1 - ep.rank().0);
    let mut out = Vec::new();
    if ep.rank().0 == 1 {
        let (addr, tcp_l, udp_s) = if transport == "udp" {
            let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
            (s.local_addr().expect("addr"), None, Some(s))
        } else {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            (l.local_addr().expect("addr"), Some(l), None)
        };
        ep.request(other, PING, addr.to_string().into_bytes())
            .expect("send addr");
        if let Some(l) = tcp_l {
            let (mut s, _) = l.accept().expect("accept");
            s.set_nodelay(true).expect("nodelay");
            let mut buf = vec![0u8; 4096];
            for size in SIZES {
                for _ in 0..iters + iters / 10 {
                    s.read_exact(&mut buf[..size]).expect("read");
                    s.write_all(&buf[..size]).expect("write");
                }
            }
        } else if let Some(s) = udp_s {
            let mut buf = vec![0u8; 65536];
            for _ in SIZES {
                for _ in 0..iters + iters / 10 {
                    let (n, from) = s.recv_from(&mut buf).expect("recv");
                    s.send_to(&buf[..n], from).expect("send");
                }
            }
        }
        return out;
    }
    // Rank 0 learns rank 1's raw address through a request rank 1 makes.
    let (atx, arx) = mpsc::channel::<String>();
    let atx = std::sync::Mutex::new(atx);
    ep.register(PING, move |ep, inc| {
        if !inc.payload.is_empty() {
            if let Ok(tx) = atx.lock() {
                let _ = tx.send(String::from_utf8_lossy(&inc.payload).into_owned());
            }
        }
        let _ = ep.reply(&inc, inc.payload.clone());
    });
    let addr = arx.recv().expect("raw address");
    if transport == "udp" {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.connect(&addr).expect("connect");
        let mut buf = vec![0u8; 65536];
        for size in SIZES {
            let p = vec![1u8; size];
            for _ in 0..iters / 10 {
                s.send(&p).expect("send");
                s.recv(&mut buf).expect("recv");
            }
            let t0 = Instant::now();
            for _ in 0..iters {
                s.send(&p).expect("send");
                s.recv(&mut buf).expect("recv");
            }
            out.push(t0.elapsed() / iters as u32);
        }
    } else {
        let mut s = TcpStream::connect(&addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; 4096];
        for size in SIZES {
            let p = vec![1u8; size];
            for _ in 0..iters / 10 {
                s.write_all(&p).expect("write");
                s.read_exact(&mut buf[..size]).expect("read");
            }
            let t0 = Instant::now();
            for _ in 0..iters {
                s.write_all(&p).expect("write");
                s.read_exact(&mut buf[..size]).expect("read");
            }
            out.push(t0.elapsed() / iters as u32);
        }
    }
    out
}

fn launch(transport: &str, iters: usize) {
    let exe = std::env::current_exe().expect("current exe");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut kids: Vec<_> = (0..2)
        .map(|r| {
            Command::new(&exe)
                .args([transport, &iters.to_string()])
                .env("SQUALL_RANK", r.to_string())
                .env("SQUALL_SIZE", "2")
                .env("SQUALL_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("SQUALL_TRANSPORT", transport)
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut ok = true;
    for k in kids.iter_mut() {
        ok &= k.wait().map(|s| s.success()).unwrap_or(false);
    }
    if !ok {
        std::process::exit(1);
    }
}

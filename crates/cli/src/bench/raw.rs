//! Raw-socket baselines the benches compare Squall against: blocking TCP (TCP_NODELAY) and UDP
//! sockets on loopback, an echo thread on one end and the measuring thread on the other; and
//! the same ping-pongs over non-blocking sockets that both ends busy-poll (`*_spin`), which
//! take no thread wake-up: the machine's floor for a socket round trip.
//! Owns only these sockets; must not use the Squall backbone.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Largest UDP payload sent as one datagram; bigger messages go as several datagrams.
const UDP_CHUNK: usize = 60_000;
/// A raw UDP ping-pong gives up after this long without an answer (loopback loses nothing
/// unless buffers overflow, which one message in flight cannot cause).
const UDP_TIMEOUT: Duration = Duration::from_secs(2);

fn io_err(what: &str, e: std::io::Error) -> String {
    format!("raw {what}: {e}")
}

/// Times `warmup + iters` calls of `round` in microseconds; the first `warmup` are not kept.
fn time_rounds(
    iters: usize,
    warmup: usize,
    mut round: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let mut samples = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        round()?;
        if i >= warmup {
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(samples)
}

/// Two UDP sockets on loopback, the first connected to the second.
fn udp_pair() -> Result<(UdpSocket, UdpSocket), String> {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| io_err("udp bind", e))?;
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| io_err("udp bind", e))?;
    let b_addr = b.local_addr().map_err(|e| io_err("udp addr", e))?;
    a.connect(b_addr).map_err(|e| io_err("udp connect", e))?;
    Ok((a, b))
}

/// Round-trip times in microseconds, one per iteration, over a TCP_NODELAY loopback pair.
/// `warmup` round trips are run first and not recorded.
pub fn tcp_pingpong(size: usize, iters: usize, warmup: usize) -> Result<Vec<f64>, String> {
    tcp_request_reply(size, size, iters, warmup)
}

/// Round-trip times in microseconds of a `req`-byte request answered by a `reply`-byte reply
/// (e.g. 8 bytes asking for a 4 KiB page), over a TCP_NODELAY loopback pair.
pub fn tcp_request_reply(
    req: usize,
    reply: usize,
    iters: usize,
    warmup: usize,
) -> Result<Vec<f64>, String> {
    let size = req;
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| io_err("tcp bind", e))?;
    let addr = listener.local_addr().map_err(|e| io_err("tcp addr", e))?;
    let echo = std::thread::spawn(move || -> Result<(), String> {
        let (mut s, _) = listener.accept().map_err(|e| io_err("tcp accept", e))?;
        s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
        let mut buf = vec![0u8; size.max(1)];
        let answer = vec![0xa5u8; reply];
        loop {
            match s.read_exact(&mut buf[..size]) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(io_err("tcp echo read", e)),
            }
            s.write_all(&answer)
                .map_err(|e| io_err("tcp echo write", e))?;
        }
    });
    let mut s = TcpStream::connect(addr).map_err(|e| io_err("tcp connect", e))?;
    s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; reply];
    let samples = time_rounds(iters, warmup, || {
        s.write_all(&out).map_err(|e| io_err("tcp write", e))?;
        s.read_exact(&mut back).map_err(|e| io_err("tcp read", e))?;
        Ok(())
    })?;
    drop(s);
    echo.join()
        .map_err(|_| "raw tcp echo thread panicked".to_string())??;
    Ok(samples)
}

/// Round-trip times in microseconds over blocking UDP sockets on loopback; messages above
/// 60 000 bytes go as several datagrams, echoed one by one.
pub fn udp_pingpong(size: usize, iters: usize, warmup: usize) -> Result<Vec<f64>, String> {
    if size > UDP_CHUNK {
        return udp_echo(size, iters, warmup);
    }
    udp_request_reply(size, size, iters, warmup)
}

/// Round-trip times in microseconds of a `req`-byte datagram answered by a `reply`-byte one
/// (both at most 60 000 bytes) over blocking UDP sockets on loopback.
pub fn udp_request_reply(
    req: usize,
    reply: usize,
    iters: usize,
    warmup: usize,
) -> Result<Vec<f64>, String> {
    if req > UDP_CHUNK || reply > UDP_CHUNK {
        return Err(format!(
            "raw udp request/reply: {req} or {reply} bytes is above one datagram"
        ));
    }
    let (a, b) = udp_pair()?;
    for s in [&a, &b] {
        s.set_read_timeout(Some(UDP_TIMEOUT))
            .map_err(|e| io_err("udp timeout", e))?;
    }
    let total = warmup + iters;
    let echo = std::thread::spawn(move || -> Result<(), String> {
        let mut buf = vec![0u8; 65_536];
        let answer = vec![0xa5u8; reply];
        for _ in 0..total {
            let (_, from) = b
                .recv_from(&mut buf)
                .map_err(|e| io_err("udp echo recv", e))?;
            b.send_to(&answer, from)
                .map_err(|e| io_err("udp echo send", e))?;
        }
        Ok(())
    });
    let out = vec![0x5au8; req];
    let mut back = vec![0u8; 65_536];
    let samples = time_rounds(iters, warmup, || {
        a.send(&out).map_err(|e| io_err("udp send", e))?;
        a.recv(&mut back).map_err(|e| io_err("udp recv", e))?;
        Ok(())
    })?;
    echo.join()
        .map_err(|_| "raw udp echo thread panicked".to_string())??;
    Ok(samples)
}

/// Retries `f` while it would block, yielding the CPU between tries (so two busy-polling
/// threads on one CPU, or a busy machine, still make progress); gives up after
/// [`UDP_TIMEOUT`] without success.
fn spin<T>(what: &str, mut f: impl FnMut() -> std::io::Result<T>) -> Result<T, String> {
    let mut deadline: Option<Instant> = None;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                let now = Instant::now();
                match deadline {
                    None => deadline = Some(now + UDP_TIMEOUT),
                    Some(d) if now >= d => {
                        return Err(format!("raw {what}: nothing for {UDP_TIMEOUT:?}"))
                    }
                    Some(_) => {}
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(io_err(what, e)),
        }
    }
}

/// Reads exactly `buf.len()` bytes from a non-blocking stream, busy-polling; false if the
/// peer closed before the first byte.
fn spin_read_exact(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool, String> {
    let mut got = 0;
    while got < buf.len() {
        match spin("tcp spin read", || s.read(&mut buf[got..]))? {
            0 if got == 0 => return Ok(false),
            0 => return Err("raw tcp spin read: closed mid-message".into()),
            n => got += n,
        }
    }
    Ok(true)
}

fn spin_write_all(s: &mut TcpStream, buf: &[u8]) -> Result<(), String> {
    let mut put = 0;
    while put < buf.len() {
        put += spin("tcp spin write", || s.write(&buf[put..]))?;
    }
    Ok(())
}

/// Round-trip times in microseconds like [`tcp_pingpong`], but both ends busy-poll
/// non-blocking sockets instead of sleeping in `read`: no thread wake-up on the path.
pub fn tcp_pingpong_spin(size: usize, iters: usize, warmup: usize) -> Result<Vec<f64>, String> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| io_err("tcp bind", e))?;
    let addr = listener.local_addr().map_err(|e| io_err("tcp addr", e))?;
    let echo = std::thread::spawn(move || -> Result<(), String> {
        let (mut s, _) = listener.accept().map_err(|e| io_err("tcp accept", e))?;
        s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
        s.set_nonblocking(true)
            .map_err(|e| io_err("tcp nonblocking", e))?;
        let mut buf = vec![0u8; size];
        while size > 0 && spin_read_exact(&mut s, &mut buf)? {
            spin_write_all(&mut s, &buf)?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr).map_err(|e| io_err("tcp connect", e))?;
    s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
    s.set_nonblocking(true)
        .map_err(|e| io_err("tcp nonblocking", e))?;
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let samples = time_rounds(iters, warmup, || {
        spin_write_all(&mut s, &out)?;
        if !spin_read_exact(&mut s, &mut back)? {
            return Err("raw tcp spin: the echo closed".into());
        }
        Ok(())
    })?;
    drop(s);
    echo.join()
        .map_err(|_| "raw tcp spin echo thread panicked".to_string())??;
    Ok(samples)
}

/// Round-trip times in microseconds like [`udp_pingpong`], but both ends busy-poll
/// non-blocking sockets; messages of at most one datagram (60 000 bytes), else None.
pub fn udp_pingpong_spin(
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<Option<Vec<f64>>, String> {
    if size > UDP_CHUNK {
        return Ok(None);
    }
    let (a, b) = udp_pair()?;
    for s in [&a, &b] {
        s.set_nonblocking(true)
            .map_err(|e| io_err("udp nonblocking", e))?;
    }
    let total = warmup + iters;
    let echo = std::thread::spawn(move || -> Result<(), String> {
        let mut buf = vec![0u8; 65_536];
        for _ in 0..total {
            let (n, from) = spin("udp spin echo recv", || b.recv_from(&mut buf))?;
            spin("udp spin echo send", || b.send_to(&buf[..n], from))?;
        }
        Ok(())
    });
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; 65_536];
    let samples = time_rounds(iters, warmup, || {
        spin("udp spin send", || a.send(&out))?;
        spin("udp spin recv", || a.recv(&mut back))?;
        Ok(())
    })?;
    echo.join()
        .map_err(|_| "raw udp spin echo thread panicked".to_string())??;
    Ok(Some(samples))
}

/// [`udp_pingpong`] of messages above one datagram: sent as several, echoed one by one.
fn udp_echo(size: usize, iters: usize, warmup: usize) -> Result<Vec<f64>, String> {
    let (a, b) = udp_pair()?;
    a.set_read_timeout(Some(UDP_TIMEOUT))
        .map_err(|e| io_err("udp timeout", e))?;
    b.set_read_timeout(Some(UDP_TIMEOUT))
        .map_err(|e| io_err("udp timeout", e))?;
    let chunks: Vec<usize> = if size == 0 {
        vec![0]
    } else {
        (0..size)
            .step_by(UDP_CHUNK)
            .map(|off| UDP_CHUNK.min(size - off))
            .collect()
    };
    let total = warmup + iters;
    let n_chunks = chunks.len();
    let echo = std::thread::spawn(move || -> Result<(), String> {
        let mut buf = vec![0u8; 65_536];
        for _ in 0..total * n_chunks {
            let (n, from) = b
                .recv_from(&mut buf)
                .map_err(|e| io_err("udp echo recv", e))?;
            b.send_to(&buf[..n], from)
                .map_err(|e| io_err("udp echo send", e))?;
        }
        Ok(())
    });
    let out = vec![0x5au8; UDP_CHUNK];
    let mut back = vec![0u8; 65_536];
    let samples = time_rounds(iters, warmup, || {
        for &len in &chunks {
            a.send(&out[..len]).map_err(|e| io_err("udp send", e))?;
            a.recv(&mut back).map_err(|e| io_err("udp recv", e))?;
        }
        Ok(())
    })?;
    echo.join()
        .map_err(|_| "raw udp echo thread panicked".to_string())??;
    Ok(samples)
}

/// Seconds to stream `count` messages of `size` bytes over a TCP_NODELAY loopback pair and get
/// a one-byte acknowledgement of the last, once per rep (plus one unrecorded warm-up).
pub fn tcp_bulk(size: usize, count: usize, reps: usize) -> Result<Vec<f64>, String> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| io_err("tcp bind", e))?;
    let addr = listener.local_addr().map_err(|e| io_err("tcp addr", e))?;
    let total_bytes = size * count;
    let rounds = reps + 1;
    let sink = std::thread::spawn(move || -> Result<(), String> {
        let (mut s, _) = listener.accept().map_err(|e| io_err("tcp accept", e))?;
        s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..rounds {
            let mut left = total_bytes;
            while left > 0 {
                let want = left.min(buf.len());
                let n = s
                    .read(&mut buf[..want])
                    .map_err(|e| io_err("tcp sink read", e))?;
                if n == 0 {
                    return Err("raw tcp sink: sender closed early".into());
                }
                left -= n;
            }
            s.write_all(&[1]).map_err(|e| io_err("tcp ack", e))?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr).map_err(|e| io_err("tcp connect", e))?;
    s.set_nodelay(true).map_err(|e| io_err("tcp nodelay", e))?;
    let msg = vec![0xa5u8; size];
    let mut ack = [0u8; 1];
    let mut secs = Vec::with_capacity(reps);
    for r in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..count {
            s.write_all(&msg).map_err(|e| io_err("tcp write", e))?;
        }
        s.read_exact(&mut ack)
            .map_err(|e| io_err("tcp ack read", e))?;
        if r > 0 {
            secs.push(t0.elapsed().as_secs_f64());
        }
    }
    sink.join()
        .map_err(|_| "raw tcp sink thread panicked".to_string())??;
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_pingpong_measures_every_iteration() {
        let s = tcp_pingpong(64, 20, 2).expect("tcp pingpong");
        assert_eq!(s.len(), 20);
        assert!(s.iter().all(|&x| x > 0.0));
    }

    #[test]
    fn udp_pingpong_handles_messages_above_one_datagram() {
        let s = udp_pingpong(130_000, 5, 1).expect("udp pingpong");
        assert_eq!(s.len(), 5);
        assert!(s.iter().all(|&x| x > 0.0));
    }

    #[test]
    fn request_reply_gets_the_reply_size_back() {
        let s = tcp_request_reply(8, 4096, 10, 1).expect("tcp request/reply");
        assert_eq!(s.len(), 10);
        let s = udp_request_reply(8, 4096, 10, 1).expect("udp request/reply");
        assert_eq!(s.len(), 10);
        assert!(udp_request_reply(8, 70_000, 1, 0).is_err());
    }

    #[test]
    fn spin_pingpongs_measure_every_iteration() {
        for size in [64, 4096] {
            let s = tcp_pingpong_spin(size, 20, 2).expect("tcp spin pingpong");
            assert_eq!(s.len(), 20);
            assert!(s.iter().all(|&x| x > 0.0));
            let s = udp_pingpong_spin(size, 20, 2)
                .expect("udp spin pingpong")
                .expect("one datagram");
            assert_eq!(s.len(), 20);
        }
        assert!(udp_pingpong_spin(70_000, 1, 0).expect("too big").is_none());
    }

    #[test]
    fn tcp_bulk_times_each_rep() {
        let s = tcp_bulk(4096, 16, 3).expect("tcp bulk");
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|&x| x > 0.0));
    }
}

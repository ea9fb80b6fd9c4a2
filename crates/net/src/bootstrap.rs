//! Bootstrap (join/hello): bind the transport socket, meet at rank 0's rendezvous address, learn
//! every node's transport address and the job id, connect the transport, start the endpoint.
//! Owns the rendezvous exchange and pair-connection setup; must not touch handlers.
//!
//! Exchange (tcp, frames = wire header + payload):
//! 1. every node binds its transport socket (port 0) first;
//! 2. rank 0 listens on `SQUALL_RENDEZVOUS`; every other rank connects (retrying up to ~10 s)
//!    and sends `hello` (`TY_BOOT_HELLO`, src = rank; payload: size u16, transport u8, address);
//! 3. when all have joined, rank 0 answers each with the table (`TY_BOOT_TABLE`, job id in the
//!    header; payload: size × (u16 length + address text));
//! 4. tcp: rank r connects to every higher rank and accepts from every lower one, each new
//!    connection starting with `TY_CONN_HELLO` naming the connecting rank; udp: ready at once.
//!
//! With authentication on (`NetConfig::auth`), every bootstrap frame is sealed with the job key
//! (authentication sequence 0, which the data path never accepts): rank 0 ignores, with a
//! warning, a hello whose tag fails or that repeats a rank that already joined, a node refuses
//! a table that fails, and a node ignores a pair connection whose greeting fails; so nobody
//! without the key can join, learn the table or take a peer's place. A node without a key
//! refuses sealed frames, naming the setting. Bootstrap frames are tagged, never encrypted
//! (`SQUALL_AUTH=encrypt` encrypts the transports' payloads); the hello says whether the node
//! encrypts, and rank 0 refuses a node that differs.
//!
//! mpi (feature `mpi`): none of the above; the backend's progress thread initialises MPI, rank
//! and size come from `MPI_Comm_rank`/`MPI_Comm_size` and rank 0's job id is broadcast.
use crate::backend::tcp::TcpBackend;
use crate::backend::udp::UdpBackend;
use crate::backend::Backend;
use crate::config::{NetConfig, Transport};
use crate::endpoint::{Endpoint, TY_BOOT_HELLO, TY_BOOT_TABLE, TY_CONN_HELLO};
use crate::error::NetError;
use squall_core::{env, JobId, NodeId};
use squall_wire::{decode_header, AuthKey, Flags, Header, MsgType, HEADER_LEN};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// Bit of the hello's transport byte saying the node encrypts payloads.
const ENCRYPTS: u8 = 0x10;

/// How long a joining node retries connecting to the rendezvous address or a peer.
const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// Joins the job described by the `SQUALL_*` environment variables.
pub fn from_env() -> Result<Endpoint, NetError> {
    start(NetConfig::from_env()?)
}

/// Joins the job described by `cfg`.
pub fn start(cfg: NetConfig) -> Result<Endpoint, NetError> {
    start_with(cfg, |_| {})
}

/// Joins the job and runs `setup` on the service thread before any message is handled
/// (register handlers there so none of the first messages waits for a handler).
pub fn start_with(
    cfg: NetConfig,
    setup: impl FnOnce(&Endpoint) + Send + 'static,
) -> Result<Endpoint, NetError> {
    if let (Transport::Tcp, Some(f)) = (cfg.transport, cfg.faults) {
        f.check_for_tcp()?;
    }
    #[cfg_attr(not(feature = "mpi"), allow(unused_mut))]
    let mut rank = cfg.rank;
    #[cfg_attr(not(feature = "mpi"), allow(unused_mut))]
    let mut size = cfg.size;
    let (backend, job): (Box<dyn Backend>, JobId) = match cfg.transport {
        #[cfg(feature = "mpi")]
        Transport::Mpi => {
            // mpirun/srun started every node: MPI knows rank and size; rank 0's job id is
            // broadcast; no rendezvous.
            let (b, r, n, job) = crate::backend::mpi::start(&cfg)?;
            if (r, n) != (cfg.rank, cfg.size) {
                // Layers above may already have sized things from the launcher's variables.
                return Err(NetError::Bootstrap(format!(
                    "mpi says this is {r} of {n}, but the launcher's variables said {} of {}",
                    cfg.rank, cfg.size
                )));
            }
            rank = r;
            size = n;
            (Box::new(b), job)
        }
        Transport::Tcp => {
            let listener = TcpListener::bind((cfg.bind_addr, 0)).map_err(|e| {
                NetError::io(
                    format!(
                        "binding the tcp transport on {} ({})",
                        cfg.bind_addr,
                        env::BIND_ADDR
                    ),
                    e,
                )
            })?;
            let me = listener
                .local_addr()
                .map_err(|e| NetError::io("reading the tcp transport address", e))?;
            let (job, table) = rendezvous(&cfg, me)?;
            let streams = connect_pairs(&cfg, job, &listener, &table)?;
            (
                Box::new(TcpBackend::new(
                    rank,
                    job,
                    streams,
                    cfg.faults,
                    cfg.auth.clone(),
                    cfg.encrypt,
                    cfg.peer_timeout,
                )?),
                job,
            )
        }
        Transport::Udp => {
            let sock = UdpSocket::bind((cfg.bind_addr, 0)).map_err(|e| {
                NetError::io(
                    format!(
                        "binding the udp transport on {} ({})",
                        cfg.bind_addr,
                        env::BIND_ADDR
                    ),
                    e,
                )
            })?;
            let me = sock
                .local_addr()
                .map_err(|e| NetError::io("reading the udp transport address", e))?;
            let (job, table) = rendezvous(&cfg, me)?;
            (UdpBackend::boxed(&cfg, job, sock, table)?, job)
        }
    };
    let slice = cfg.service_slice;
    let setup = move |ep: &Endpoint| {
        crate::sched::apply(slice, "the service thread");
        setup(ep)
    };
    Endpoint::start(
        rank,
        size,
        job,
        backend,
        cfg.peer_timeout,
        cfg.poll_spin,
        cfg.reply_spin,
        Box::new(setup),
    )
}

fn write_frame(
    s: &mut impl Write,
    h: Header,
    payload: &[u8],
    key: Option<&AuthKey>,
) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    match key {
        // Sequence 0: a bootstrap frame is never accepted on the data path.
        Some(k) => squall_wire::encode_sealed_into(&h, payload, k, 0, &mut bytes),
        None => squall_wire::encode_into(&h, payload, &mut bytes),
    }
    s.write_all(&bytes)?;
    s.flush()
}

/// A node's hello to rank 0: the job size it was started with, its transport code (bit 4:
/// it encrypts) and its transport address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub size: u16,
    pub transport: u8,
    pub addr: SocketAddr,
}

/// The payload of a hello frame.
pub fn encode_hello(h: &Hello) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&h.size.to_le_bytes());
    p.push(h.transport);
    p.extend_from_slice(h.addr.to_string().as_bytes());
    p
}

/// Decodes a hello payload; the error says what is wrong with it.
pub fn decode_hello(p: &[u8]) -> Result<Hello, &'static str> {
    let [a, b, transport, rest @ ..] = p else {
        return Err("a truncated hello");
    };
    let addr = std::str::from_utf8(rest)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("a bad transport address")?;
    Ok(Hello {
        size: u16::from_le_bytes([*a, *b]),
        transport: *transport,
        addr,
    })
}

/// The payload of the table rank 0 sends: every node's address, length-prefixed text.
pub fn encode_table(table: &[SocketAddr]) -> Vec<u8> {
    let mut payload = Vec::new();
    for a in table {
        let t = a.to_string();
        payload.extend_from_slice(&(t.len() as u16).to_le_bytes());
        payload.extend_from_slice(t.as_bytes());
    }
    payload
}

/// Decodes a table payload; the error says what is wrong with it.
pub fn decode_table(p: &[u8]) -> Result<Vec<SocketAddr>, &'static str> {
    let mut table = Vec::new();
    let mut rest = p;
    while !rest.is_empty() {
        let [a, b, tail @ ..] = rest else {
            return Err("a truncated table");
        };
        let len = usize::from(u16::from_le_bytes([*a, *b]));
        let text = tail.get(..len).ok_or("a truncated table")?;
        let addr = std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("a bad address in the table")?;
        table.push(addr);
        rest = &tail[len..];
    }
    Ok(table)
}

/// Why a bootstrap frame was not taken.
#[derive(Debug)]
pub enum FrameError {
    /// The connection failed or carried something that is not a frame.
    Bad(String),
    /// A frame that fails authentication (or is unsealed while this node has a key).
    Auth(&'static str),
}

impl FrameError {
    pub fn text(&self) -> String {
        match self {
            FrameError::Bad(s) => s.clone(),
            FrameError::Auth(s) => s.to_string(),
        }
    }
}

/// Reads one bootstrap frame (header, payload, the authentication trailer when sealed) from
/// `s`, checking it against `key`. Never panics on what a peer sends.
pub fn read_frame(
    s: &mut impl Read,
    key: Option<&AuthKey>,
) -> Result<(Header, Vec<u8>), FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb)
        .map_err(|e| FrameError::Bad(format!("reading a header: {e}")))?;
    let h = decode_header(&hb).map_err(|e| FrameError::Bad(format!("bad frame: {e}")))?;
    if h.payload_len > 1 << 20 {
        return Err(FrameError::Bad(format!(
            "oversized bootstrap frame ({} bytes)",
            h.payload_len
        )));
    }
    let mut body = vec![0u8; h.body_len()];
    s.read_exact(&mut body)
        .map_err(|e| FrameError::Bad(format!("reading a payload: {e}")))?;
    let sealed = h.flags.contains(Flags::AUTH);
    let (payload, trailer) = body.split_at(h.payload_len as usize);
    match (key, sealed) {
        (None, false) => {}
        (None, true) => {
            return Err(FrameError::Bad(format!(
                "the peer authenticates its packets but this node has no key ({}, {})",
                env::AUTH_KEY,
                env::AUTH
            )))
        }
        (Some(_), false) => return Err(FrameError::Auth("an unauthenticated frame")),
        (Some(k), true) => {
            if k.verify(&hb, payload, trailer) != Ok(0) {
                return Err(FrameError::Auth(
                    "a frame whose authentication tag does not match this job's key",
                ));
            }
        }
    }
    body.truncate(h.payload_len as usize);
    Ok((h, body))
}

fn resolve(rv: &str) -> Result<SocketAddr, NetError> {
    rv.to_socket_addrs()
        .map_err(|e| {
            NetError::Config(format!(
                "{}={rv:?} is not a host:port address: {e}",
                env::RENDEZVOUS
            ))
        })?
        .next()
        .ok_or_else(|| {
            NetError::Config(format!("{}={rv:?} resolves to no address", env::RENDEZVOUS))
        })
}

fn connect_retry(addr: SocketAddr, what: &str) -> Result<TcpStream, NetError> {
    let start = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() < CONNECT_RETRY => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(NetError::Bootstrap(format!(
                    "could not connect to {what} at {addr} for {}s: {e}",
                    CONNECT_RETRY.as_secs()
                )))
            }
        }
    }
}

/// Returns the job id and every node's transport address.
fn rendezvous(cfg: &NetConfig, me: SocketAddr) -> Result<(JobId, Vec<SocketAddr>), NetError> {
    let rank = cfg.rank;
    let n = cfg.size as usize;
    if n == 1 {
        return Ok((
            cfg.job_id.unwrap_or_else(|| JobId(rand::random())),
            vec![me],
        ));
    }
    let rv = cfg.rendezvous.as_deref().ok_or_else(|| {
        NetError::Config(format!(
            "{} is not set (needed when {} > 1)",
            env::RENDEZVOUS,
            env::SIZE
        ))
    })?;
    let rv_addr = resolve(rv)?;
    let tcode = match cfg.transport {
        Transport::Tcp => 0u8,
        Transport::Udp => 1u8,
        #[cfg(feature = "mpi")]
        Transport::Mpi => 2u8,
    };
    // Bit 4: payloads encrypted (every node of a job must agree).
    let tcode = tcode
        | if cfg.auth.is_some() && cfg.encrypt {
            ENCRYPTS
        } else {
            0
        };
    if rank.0 == 0 {
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(rv_addr),
            socket2::Type::STREAM,
            None,
        )
        .map_err(|e| NetError::io("creating the rendezvous socket", e))?;
        let _ = sock.set_reuse_address(true);
        sock.bind(&rv_addr.into()).map_err(|e| {
            NetError::io(format!("rank 0 listening on {}={rv}", env::RENDEZVOUS), e)
        })?;
        sock.listen(1024).map_err(|e| {
            NetError::io(format!("rank 0 listening on {}={rv}", env::RENDEZVOUS), e)
        })?;
        let listener: TcpListener = sock.into();
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::io("rendezvous listener", e))?;
        let job = cfg.job_id.unwrap_or_else(|| JobId(rand::random()));
        let mut table: Vec<Option<SocketAddr>> = vec![None; n];
        table[0] = Some(me);
        let mut conns: Vec<(NodeId, TcpStream)> = Vec::new();
        let deadline = Instant::now() + cfg.join_timeout;
        let key = cfg.auth.as_ref();
        let mut refused = 0usize;
        while conns.len() < n - 1 {
            let (mut s, from) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<String> = (0..n)
                            .filter(|i| table[*i].is_none())
                            .map(|i| i.to_string())
                            .collect();
                        let why = if refused > 0 {
                            format!(
                                " ({refused} hellos failed authentication: do all nodes have \
                                 the same {}?)",
                                env::AUTH_KEY
                            )
                        } else {
                            String::new()
                        };
                        return Err(NetError::Bootstrap(format!(
                            "rank 0: ranks {} did not join at {rv} within {}s{why}",
                            missing.join(", "),
                            cfg.join_timeout.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                Err(e) => return Err(NetError::io("accepting at the rendezvous", e)),
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            if let (Some(t0), Ok(local)) = (table[0].as_mut(), s.local_addr()) {
                // Bound to 0.0.0.0: advertise the address the others reached us on.
                if t0.ip().is_unspecified() {
                    t0.set_ip(local.ip());
                }
            }
            let (h, p) = match read_frame(&mut s, key) {
                Ok(x) => x,
                Err(FrameError::Auth(what)) => {
                    // Not from a node of this job: ignore it, keep waiting for the real ones.
                    refused += 1;
                    eprintln!(
                        "squall: node 0: warning: ignored {what} at the rendezvous, from {from}"
                    );
                    continue;
                }
                Err(e) => {
                    return Err(NetError::Bootstrap(format!(
                        "rank 0: bad hello from {from}: {}",
                        e.text()
                    )))
                }
            };
            if h.ty.0 != TY_BOOT_HELLO {
                return Err(NetError::Bootstrap(format!(
                    "rank 0: bad hello from {from}: a frame of type {}",
                    h.ty.0
                )));
            }
            let r = h.src;
            let hello = decode_hello(&p).map_err(|why| {
                NetError::Bootstrap(format!("rank 0: bad hello of {r} from {from}: {why}"))
            })?;
            if hello.size != cfg.size {
                return Err(NetError::Bootstrap(format!(
                    "{r} was started with {}={} but rank 0 has {}",
                    env::SIZE,
                    hello.size,
                    cfg.size
                )));
            }
            if hello.transport & !ENCRYPTS != tcode & !ENCRYPTS {
                return Err(NetError::Bootstrap(format!(
                    "{r} uses another {} than rank 0",
                    env::TRANSPORT
                )));
            }
            if hello.transport != tcode {
                let who = |b: u8| {
                    if b & ENCRYPTS != 0 {
                        "encrypts"
                    } else {
                        "does not encrypt"
                    }
                };
                return Err(NetError::Bootstrap(format!(
                    "{r} {} its packets but rank 0 {} ({}=encrypt must be set on every node)",
                    who(hello.transport),
                    who(tcode),
                    env::AUTH
                )));
            }
            if key.is_some() && r.index() < n && r.0 != 0 && table[r.index()].is_some() {
                // A correctly sealed hello again: a replay of the one already taken.
                refused += 1;
                eprintln!(
                    "squall: node 0: warning: ignored a repeated hello of {r} from {from} (a replay)"
                );
                continue;
            }
            if r.0 == 0 || r.index() >= n || table[r.index()].is_some() {
                return Err(NetError::Bootstrap(format!(
                    "rank 0: {r} joined twice or is out of range (size {n})"
                )));
            }
            table[r.index()] = Some(hello.addr);
            conns.push((r, s));
        }
        let table: Vec<SocketAddr> = table.into_iter().flatten().collect();
        let payload = encode_table(&table);
        for (r, mut s) in conns {
            let h = Header::new(job, MsgType(TY_BOOT_TABLE), NodeId(0), r);
            write_frame(&mut s, h, &payload, key)
                .map_err(|e| NetError::io(format!("sending the table to {r}"), e))?;
        }
        Ok((job, table))
    } else {
        let mut s = connect_retry(
            rv_addr,
            &format!("rank 0's rendezvous ({}={rv})", env::RENDEZVOUS),
        )?;
        let mut me = me;
        if me.ip().is_unspecified() {
            // Bound to 0.0.0.0: advertise the address that routes to rank 0.
            if let Ok(local) = s.local_addr() {
                me.set_ip(local.ip());
            }
        }
        let p = encode_hello(&Hello {
            size: cfg.size,
            transport: tcode,
            addr: me,
        });
        let h = Header::new(JobId(0), MsgType(TY_BOOT_HELLO), rank, NodeId(0));
        write_frame(&mut s, h, &p, cfg.auth.as_ref())
            .map_err(|e| NetError::io(format!("sending hello to {rv}"), e))?;
        let _ = s.set_read_timeout(Some(cfg.join_timeout));
        let (h, p) = read_frame(&mut s, cfg.auth.as_ref()).map_err(|e| match e {
            FrameError::Auth(what) => NetError::Bootstrap(format!(
                "{rank}: rank 0 at {rv} answered with {what}: do all nodes have the same {}?",
                env::AUTH_KEY
            )),
            FrameError::Bad(e) => NetError::Bootstrap(format!(
                "{rank}: no table from rank 0 at {rv} ({e}); did all {} nodes start?",
                cfg.size
            )),
        })?;
        if h.ty.0 != TY_BOOT_TABLE {
            return Err(NetError::Bootstrap(format!(
                "{rank}: unexpected reply from rank 0"
            )));
        }
        if let Some(j) = cfg.job_id {
            if j != h.job {
                return Err(NetError::Bootstrap(format!(
                    "{rank}: rank 0 runs {} but {} says {j}",
                    h.job,
                    env::JOB_ID
                )));
            }
        }
        let table = decode_table(&p)
            .map_err(|why| NetError::Bootstrap(format!("{rank}: rank 0 sent {why}")))?;
        if table.len() != n {
            return Err(NetError::Bootstrap(format!(
                "table has {} entries, expected {n}",
                table.len()
            )));
        }
        Ok((h.job, table))
    }
}

/// Establishes the tcp pair connections: connect to higher ranks, accept from lower ones.
fn connect_pairs(
    cfg: &NetConfig,
    job: JobId,
    listener: &TcpListener,
    table: &[SocketAddr],
) -> Result<Vec<Option<TcpStream>>, NetError> {
    let rank = cfg.rank;
    let n = table.len();
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for (p, addr) in table.iter().enumerate().skip(rank.index() + 1) {
        let peer = NodeId(p as u16);
        let mut s = connect_retry(*addr, &format!("{peer}'s transport"))?;
        let h = Header::new(job, MsgType(TY_CONN_HELLO), rank, peer);
        write_frame(&mut s, h, &[], cfg.auth.as_ref())
            .map_err(|e| NetError::io(format!("greeting {peer}"), e))?;
        streams[p] = Some(s);
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| NetError::io("transport listener", e))?;
    let deadline = Instant::now() + cfg.join_timeout;
    let mut accepted = 0;
    while accepted < rank.index() {
        match listener.accept() {
            Ok((mut s, from)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let (h, _) = match read_frame(&mut s, cfg.auth.as_ref()) {
                    Ok(x) => x,
                    Err(FrameError::Auth(what)) => {
                        eprintln!(
                            "squall: {rank}: warning: ignored a transport connection from \
                             {from}: {what}"
                        );
                        continue;
                    }
                    Err(e) => {
                        return Err(NetError::Bootstrap(format!(
                            "{rank}: bad greeting from {from}: {}",
                            e.text()
                        )))
                    }
                };
                if h.ty.0 != TY_CONN_HELLO || h.job != job || h.dst != rank || h.src >= rank {
                    return Err(NetError::Bootstrap(format!(
                        "{rank}: unexpected connection from {from} ({}, {})",
                        h.src, h.job
                    )));
                }
                if streams[h.src.index()].is_some() {
                    if cfg.auth.is_some() {
                        eprintln!(
                            "squall: {rank}: warning: ignored a repeated greeting of {} from \
                             {from} (a replay)",
                            h.src
                        );
                        continue;
                    }
                    return Err(NetError::Bootstrap(format!(
                        "{rank}: {} connected twice",
                        h.src
                    )));
                }
                let _ = s.set_read_timeout(None);
                streams[h.src.index()] = Some(s);
                accepted += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(NetError::Bootstrap(format!(
                        "{rank}: lower ranks did not connect within {}s",
                        cfg.join_timeout.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(NetError::io("accepting a transport connection", e)),
        }
    }
    Ok(streams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_and_tables_round_trip_and_reject_garbage() {
        let h = Hello {
            size: 4,
            transport: 1 | ENCRYPTS,
            addr: "10.0.0.7:4000".parse().unwrap_or_else(|e| panic!("{e}")),
        };
        assert_eq!(decode_hello(&encode_hello(&h)), Ok(h));
        assert_eq!(decode_hello(&[4, 0]), Err("a truncated hello"));
        assert_eq!(
            decode_hello(&[4, 0, 0, b'x']),
            Err("a bad transport address")
        );
        let t: Vec<SocketAddr> = ["127.0.0.1:1", "[::1]:65535"]
            .iter()
            .map(|a| a.parse().unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let p = encode_table(&t);
        assert_eq!(decode_table(&p), Ok(t));
        assert_eq!(decode_table(&p[..p.len() - 1]), Err("a truncated table"));
        assert_eq!(decode_table(&p[..1]), Err("a truncated table"));
        assert_eq!(
            decode_table(&[1, 0, b'?']),
            Err("a bad address in the table")
        );
    }

    #[test]
    fn a_frame_is_taken_with_the_key_only_when_sealed_with_it() {
        let key = AuthKey::from_bytes([5; 32]);
        let h = Header::new(JobId(1), MsgType(TY_BOOT_HELLO), NodeId(1), NodeId(0));
        let mut sealed = Vec::new();
        write_frame(&mut sealed, h, b"hi", Some(&key)).unwrap_or_else(|e| panic!("{e}"));
        let mut plain = Vec::new();
        write_frame(&mut plain, h, b"hi", None).unwrap_or_else(|e| panic!("{e}"));
        assert!(read_frame(&mut &sealed[..], Some(&key)).is_ok());
        assert!(matches!(
            read_frame(&mut &plain[..], Some(&key)),
            Err(FrameError::Auth(_))
        ));
        assert!(read_frame(&mut &sealed[..], None).is_err());
        let (_, p) = read_frame(&mut &plain[..], None).unwrap_or_else(|e| panic!("{}", e.text()));
        assert_eq!(p, b"hi");
        let other = AuthKey::from_bytes([6; 32]);
        assert!(read_frame(&mut &sealed[..], Some(&other)).is_err());
    }
}

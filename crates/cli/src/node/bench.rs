//! Node sides of the backbone benches. Node 0 measures and prints one result line
//! (`@squall-result {json}`); node 1 (or every node, for the message test) serves. Owns
//! these programs only; timing is done here, presentation in `crate::bench`.
use super::{channel, finish, join, notify, read_u64, ring_neighbours, ty, Barrier, NodeError};
use crate::bench::report::{emit_result, median};
use bytes::Bytes;
use clap::Args;
use serde_json::json;
use squall_core::NodeId;
use squall_net::Endpoint;
use std::time::{Duration, Instant};

/// How long node 0 waits for one measured run before declaring the bench stuck.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Args, Debug)]
pub struct PingpongNodeArgs {
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    #[arg(long)]
    pub iters: usize,
    #[arg(long)]
    pub reps: usize,
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Only the active-message ping-pong (no blocking-request round trips): for profiling the
    /// message path alone.
    #[arg(long, hide = true)]
    pub am_only: bool,
    /// Per rep, right after Squall's ping-pong: the raw MPI and floor ping-pongs over the
    /// communicator the endpoint lends (`--transport mpi`, feature `mpi`; see
    /// `super::rawmpi`).
    #[arg(long)]
    pub mpi_baselines: bool,
}

/// The round trips of one ping-pong chain whose pong handler sends the next ping: `iters`
/// timed ones after `warmup` untimed ones. Shared by Squall's ping-pong and the raw MPI
/// floor (`super::rawmpi`).
pub(crate) struct RoundTrips {
    left: usize,
    warmup: usize,
    last: Instant,
    pub(crate) samples: Vec<f64>,
}

impl RoundTrips {
    pub(crate) fn new(iters: usize, warmup: usize) -> RoundTrips {
        RoundTrips {
            left: iters.max(1),
            warmup,
            last: Instant::now(),
            samples: Vec::with_capacity(iters),
        }
    }

    /// A pong came: records its round trip (after the warm-up); true if another ping is due.
    pub(crate) fn pong(&mut self) -> bool {
        let now = Instant::now();
        if self.warmup > 0 {
            self.warmup -= 1;
        } else {
            self.samples
                .push(now.duration_since(self.last).as_secs_f64() * 1e6);
            self.left = self.left.saturating_sub(1);
        }
        self.left > 0
    }

    /// The next ping leaves now.
    pub(crate) fn ping(&mut self) {
        self.last = Instant::now();
    }
}

/// State of one active-message ping-pong chain, owned by the pong handler (on the service
/// thread) once it starts.
struct Chain {
    payload: Bytes,
    trips: RoundTrips,
}

fn need_two(ep: &Endpoint) -> Result<(), NodeError> {
    if ep.size() != 2 {
        return Err(NodeError::Check(format!(
            "this bench runs on exactly 2 nodes (job has {})",
            ep.size()
        )));
    }
    Ok(())
}

const NO_MPI_BASELINES: &str = "--mpi-baselines: this squall was built without the mpi transport";

/// `--mpi-baselines`, node 0: the medians of the raw and the floor MPI ping-pongs right after
/// a rep of Squall's (see `super::rawmpi`); without the mpi transport built in, an error.
#[cfg(feature = "mpi")]
use super::rawmpi::measure_baselines;
#[cfg(not(feature = "mpi"))]
fn measure_baselines(
    _: &Endpoint,
    _: NodeId,
    _: usize,
    _: usize,
    _: usize,
) -> Result<(f64, f64), NodeError> {
    Err(NodeError::Check(NO_MPI_BASELINES.into()))
}

/// The answering node's end: after the closing barrier (everything it will receive has come),
/// it reports the packets it accepted after checking them, then leaves.
fn finish_counting(ep: &Endpoint, barrier: &Barrier) -> Result<(), NodeError> {
    barrier.wait()?;
    let authenticated = ep.stats().packets_authenticated;
    emit_result(&json!({ "authenticated": authenticated }));
    ep.shutdown()?;
    Ok(())
}

pub fn pingpong(a: PingpongNodeArgs) -> Result<(), NodeError> {
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    need_two(&ep)?;
    // Node 1 answers pings with pongs and echoes requests; node 0 measures.
    ep.register(ty::PING, |ep, inc| {
        if let Err(e) = ep.send(inc.src, ty::PONG, inc.payload) {
            eprintln!("pong to {} failed: {e}", inc.src);
        }
    });
    ep.register(ty::ECHO, |ep, inc| {
        if let Err(e) = ep.reply(&inc, inc.payload.clone()) {
            eprintln!("echo reply to {} failed: {e}", inc.src);
        }
    });
    if a.mpi_baselines && !cfg!(feature = "mpi") {
        return Err(NodeError::Check(NO_MPI_BASELINES.into()));
    }
    if ep.rank() == NodeId(1) {
        #[cfg(feature = "mpi")]
        if a.mpi_baselines {
            super::rawmpi::serve_baselines(&ep);
        }
        return finish_counting(&ep, &barrier);
    }
    let peer = NodeId(1);
    // A new chain reaches the pong handler through this channel, before its first ping leaves.
    let (start_tx, start_rx) = std::sync::mpsc::channel::<Chain>();
    let (done_tx, done_rx) = channel::<Vec<f64>>();
    {
        // The pong handler records the round trip and sends the next ping itself, from the
        // service thread: no thread hop on the measured path. It owns the chain (no lock per
        // round trip, as the raw ping-pong has none).
        let mut cur: Option<Chain> = None;
        ep.register(ty::PONG, move |ep, _inc| {
            if cur.is_none() {
                cur = start_rx.try_recv().ok();
            }
            let Some(c) = cur.as_mut() else { return };
            if !c.trips.pong() {
                if let Some(done) = cur.take() {
                    notify(&done_tx, done.trips.samples);
                }
                return;
            }
            c.trips.ping();
            if let Err(e) = ep.send(peer, ty::PING, c.payload.clone()) {
                eprintln!("ping to {peer} failed: {e}");
            }
        });
    }
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let payload = Bytes::from(vec![0x5au8; size]);
        let mut am = Vec::with_capacity(a.reps);
        let mut am_p99 = Vec::with_capacity(a.reps);
        let mut req = Vec::with_capacity(a.reps);
        let mut req_p99 = Vec::with_capacity(a.reps);
        // (--mpi-baselines) per rep, measured right after Squall's.
        let mut raw: Vec<f64> = Vec::with_capacity(a.reps);
        let mut floor: Vec<f64> = Vec::with_capacity(a.reps);
        for _ in 0..a.reps {
            let p = payload.clone();
            let sent0 = ep.stats().messages_sent();
            start_tx
                .send(Chain {
                    payload: p.clone(),
                    // The first round trip includes the hop to the service thread.
                    trips: RoundTrips::new(a.iters, a.warmup.max(1)),
                })
                .map_err(|_| NodeError::Check("the pong handler is gone".into()))?;
            ep.post(move |ep| {
                if let Err(e) = ep.send(peer, ty::PING, p) {
                    eprintln!("ping to {peer} failed: {e}");
                }
            });
            let samples = done_rx.recv_timeout(RUN_TIMEOUT).map_err(|_| {
                NodeError::Check(format!(
                    "ping-pong of {size} bytes with {peer} did not finish"
                ))
            })?;
            // The round trips happened: one ping sent per round trip timed (and warm-up).
            let sent = ep.stats().messages_sent() - sent0;
            if samples.len() != a.iters || sent < a.iters as u64 {
                return Err(NodeError::Check(format!(
                    "{} round trips timed and {sent} messages sent for {} iterations",
                    samples.len(),
                    a.iters
                )));
            }
            am.push(median(&samples));
            am_p99.push(p99(&samples));
            if a.mpi_baselines {
                let (r, f) = measure_baselines(&ep, peer, size, a.iters, a.warmup)?;
                raw.push(r);
                floor.push(f);
            }
            if a.am_only {
                continue;
            }

            let echo_sent =
                |ep: &Endpoint| ep.stats().by_type.get(&ty::ECHO.0).map_or(0, |c| c.sent);
            let echoes0 = echo_sent(&ep);
            let mut s = Vec::with_capacity(a.iters);
            for i in 0..a.warmup + a.iters {
                let t0 = Instant::now();
                let back = ep.request(peer, ty::ECHO, payload.clone())?;
                let dt = t0.elapsed().as_secs_f64() * 1e6;
                if back.len() != size {
                    return Err(NodeError::Check(format!(
                        "{peer} echoed {} bytes for a {size}-byte request",
                        back.len()
                    )));
                }
                if i >= a.warmup {
                    s.push(dt);
                }
            }
            // The requests went out: one message each.
            let echoes = echo_sent(&ep) - echoes0;
            if echoes != (a.warmup + a.iters) as u64 {
                return Err(NodeError::Check(format!(
                    "{echoes} echo requests sent for {} round trips",
                    a.warmup + a.iters
                )));
            }
            req.push(median(&s));
            req_p99.push(p99(&s));
        }
        let mut row = json!({"size": size, "am_rtt_us": am, "am_p99_us": am_p99,
            "req_rtt_us": req, "req_p99_us": req_p99});
        if a.mpi_baselines {
            row["raw_rtt_us"] = json!(raw);
            row["floor_rtt_us"] = json!(floor);
        }
        rows.push(row);
    }
    // Packets this node accepted after checking their tags (0 without authentication).
    let authenticated = ep.stats().packets_authenticated;
    let st = ep.stats();
    emit_result(&json!({
        "rows": rows,
        "authenticated": authenticated,
        "poll_spins": st.poll_spins,
        "poll_spin_hits": st.poll_spin_hits,
        "replies_spun": st.replies_spun,
        "replies_polled": st.replies_polled,
    }));
    finish(&ep, &barrier)
}

/// The 99th percentile (nearest rank) of `v`; NaN if empty.
fn p99(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n => v[((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

#[derive(Args, Debug)]
pub struct BandwidthNodeArgs {
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    #[arg(long)]
    pub bytes: usize,
    #[arg(long)]
    pub reps: usize,
}

pub fn bandwidth(a: BandwidthNodeArgs) -> Result<(), NodeError> {
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    need_two(&ep)?;
    // Node 1 acknowledges each message whose first byte is 0 (the last of a burst).
    ep.register(ty::BULK, |ep, inc| {
        if inc.payload.first() == Some(&0) {
            if let Err(e) = ep.send(inc.src, ty::BULK_ACK, Bytes::new()) {
                eprintln!("bulk ack to {} failed: {e}", inc.src);
            }
        }
    });
    if ep.rank() == NodeId(1) {
        return finish_counting(&ep, &barrier);
    }
    let peer = NodeId(1);
    let (ack_tx, ack_rx) = channel::<()>();
    ep.register(ty::BULK_ACK, move |_, _| notify(&ack_tx, ()));
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let size = size.max(1);
        let count = crate::bench::bandwidth::count_for(size, a.bytes);
        let mut body = vec![0xa5u8; size];
        body[0] = 1;
        let body = Bytes::from(body);
        let mut last = vec![0xa5u8; size];
        last[0] = 0;
        let last = Bytes::from(last);
        let mut secs = Vec::with_capacity(a.reps);
        for rep in 0..=a.reps {
            let t0 = Instant::now();
            for i in 0..count {
                let p = if i + 1 == count {
                    last.clone()
                } else {
                    body.clone()
                };
                ep.send(peer, ty::BULK, p)?;
            }
            ack_rx.recv_timeout(RUN_TIMEOUT).map_err(|_| {
                NodeError::Check(format!(
                    "{peer} did not acknowledge {count} messages of {size} bytes"
                ))
            })?;
            if rep > 0 {
                secs.push(t0.elapsed().as_secs_f64());
            }
        }
        rows.push(json!({"size": size, "count": count, "secs": secs}));
    }
    // Packets this node accepted after checking their tags (0 without authentication).
    let authenticated = ep.stats().packets_authenticated;
    emit_result(&json!({ "rows": rows, "authenticated": authenticated }));
    finish(&ep, &barrier)
}

#[derive(Args, Debug)]
pub struct MessageNodeArgs {
    #[arg(long)]
    pub messages: u64,
    #[arg(long, default_value_t = 8)]
    pub size: usize,
    #[arg(long)]
    pub reps: usize,
}

/// What a receiver saw from its predecessor.
#[derive(Debug, Clone, Copy)]
struct Seen {
    received: u64,
    in_order: bool,
}

pub fn message(a: MessageNodeArgs) -> Result<(), NodeError> {
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    let (prev, next) = ring_neighbours(&ep);
    let rank = ep.rank();
    let m = a.messages;
    let (tx, rx) = channel::<Seen>();
    let mut seen = Seen {
        received: 0,
        in_order: true,
    };
    let mut next_report = m;
    ep.register(ty::FLOOD, move |_, inc| {
        let seq = read_u64(&inc.payload);
        if inc.src != prev || seq != Some(seen.received) {
            if seen.in_order {
                eprintln!(
                    "{rank}: message {:?} from {} arrived when {} from {prev} was due",
                    seq, inc.src, seen.received
                );
            }
            seen.in_order = false;
        }
        seen.received += 1;
        if seen.received == next_report || !seen.in_order {
            next_report += m;
            notify(&tx, seen);
        }
    });
    let size = a.size.max(8);
    let mut send_rate = Vec::with_capacity(a.reps);
    let mut recv_rate = Vec::with_capacity(a.reps);
    let mut seq = 0u64;
    let mut last = Seen {
        received: 0,
        in_order: true,
    };
    for rep in 1..=a.reps as u64 {
        barrier.wait()?;
        let t0 = Instant::now();
        for _ in 0..m {
            let mut p = vec![0u8; size];
            p[..8].copy_from_slice(&seq.to_le_bytes());
            ep.send(next, ty::FLOOD, Bytes::from(p))?;
            seq += 1;
        }
        let sent = t0.elapsed().as_secs_f64();
        while last.received < rep * m && last.in_order {
            last = rx.recv_timeout(RUN_TIMEOUT).map_err(|_| {
                NodeError::Check(format!(
                    "{rank}: received {} of {} messages from {prev}",
                    last.received,
                    rep * m
                ))
            })?;
        }
        let done = t0.elapsed().as_secs_f64();
        send_rate.push(m as f64 / sent);
        recv_rate.push(m as f64 / done);
        if !last.in_order {
            break;
        }
    }
    emit_result(&json!({
        "send_rate": send_rate,
        "recv_rate": recv_rate,
        "received": last.received,
        "in_order": last.in_order,
    }));
    finish(&ep, &barrier)
}

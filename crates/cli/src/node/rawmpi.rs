//! The MPI ping-pong baselines of `squall bench pingpong --transport mpi` (feature `mpi`),
//! between ranks 0 and 1, no Squall code on the path:
//! - **raw**: plain blocking `MPI_Send`/`MPI_Recv` ([`raw_round_trips`]). The bench's `ratio`
//!   takes it from a program of its own (`raw-mpi-pingpong`, [`run`]: `MPI_Init`, MPI alone
//!   in the process), as a user's MPI program would run. Its `ratio_lent` takes it inside the
//!   Squall node processes, right after each rep of Squall's own, over the communicator the
//!   endpoint lends ([`squall_net::Endpoint::with_mpi`]) on the service thread: a pair a
//!   millisecond apart, which this VM's core-to-core latency (it changes about every second)
//!   cannot split, but with MPI at `MPI_THREAD_SERIALIZED`, as Squall needs it, which costs
//!   Open MPI's ping-pong about 0.1 µs per round trip here.
//! - **floor**: a minimal active-message loop over MPI ([`floor_chain`]), lent the same way, so
//!   a reader can tell how much of Squall's distance from the raw ping-pong at small sizes is
//!   its own code and how much comes with receiving messages nobody asked for. It copies every
//!   payload, so it is no floor for large messages (Squall hands those over without a copy).
//!
//! Rank 0 measures; rank 1 echoes. Owns only these programs; [`run`] must not use the Squall
//! backbone (MPI is initialised there, once).
use super::bench::RoundTrips;
use super::{ty, NodeError};
use crate::bench::report::{emit_result, median};
use bytes::Bytes;
use clap::Args;
use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde_json::json;
use squall_core::NodeId;
use squall_net::Endpoint;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RawMpiArgs {
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    #[arg(long)]
    pub iters: usize,
    #[arg(long)]
    pub reps: usize,
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
}

pub fn run(a: RawMpiArgs) -> Result<(), NodeError> {
    let universe = mpi::initialize()
        .ok_or_else(|| NodeError::Check("mpi is already initialised in this process".into()))?;
    let world = universe.world();
    if world.size() != 2 {
        return Err(NodeError::Check(format!(
            "the raw mpi ping-pong runs on exactly 2 ranks (job has {})",
            world.size()
        )));
    }
    let me = world.rank();
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let mut reps = Vec::with_capacity(a.reps);
        for _ in 0..a.reps {
            let raw = raw_round_trips(&world, size, a.iters, a.warmup);
            if me == 0 {
                reps.push(median(&raw));
            }
        }
        rows.push(json!({"size": size, "raw_rtt_us": reps}));
    }
    if me == 0 {
        emit_result(&json!({ "rows": rows }));
    }
    Ok(())
}

/// Which baseline a [`ty::MPI_BASELINE`] message asks for.
#[derive(Clone, Copy, Debug)]
enum Baseline {
    Raw = 0,
    Floor = 1,
}

/// What node 1 needs: baseline, size, iters, warm-up.
fn baseline_args(b: Baseline, size: usize, iters: usize, warmup: usize) -> Vec<u8> {
    let mut v = vec![b as u8];
    for n in [size, iters, warmup] {
        v.extend_from_slice(&(n as u64).to_le_bytes());
    }
    v
}

fn parse_baseline_args(p: &[u8]) -> Option<(Baseline, usize, usize, usize)> {
    let b = match p.first()? {
        0 => Baseline::Raw,
        1 => Baseline::Floor,
        _ => return None,
    };
    let n = |i: usize| -> Option<usize> {
        let w: [u8; 8] = p.get(1 + 8 * i..9 + 8 * i)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(w)).ok()
    };
    Some((b, n(0)?, n(1)?, n(2)?))
}

/// One side of baseline `b` over `comm`: rank 0's round trips (empty on rank 1).
fn run_baseline(
    comm: &SimpleCommunicator,
    b: Baseline,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Vec<f64> {
    match b {
        Baseline::Raw => raw_round_trips(comm, size, iters, warmup),
        Baseline::Floor => floor_chain(comm, size, iters, warmup),
    }
}

/// The MPI baselines inside a Squall node: node 0 asks node 1 to take its side (a
/// [`ty::MPI_BASELINE`] message), then takes its own ([`measure_baselines`]), each on its
/// service thread with MPI lent ([`squall_net::Endpoint::with_mpi`]), so no Squall thread
/// spins beside them. Node 1: takes its side of every baseline node 0 asks for.
pub(crate) fn serve_baselines(ep: &Endpoint) {
    ep.register(ty::MPI_BASELINE, |ep, inc| {
        let Some((b, size, iters, warmup)) = parse_baseline_args(&inc.payload) else {
            eprintln!("malformed mpi baseline request from {}", inc.src);
            return;
        };
        if ep
            .with_mpi(|comm| run_baseline(comm, b, size, iters, warmup))
            .is_none()
        {
            eprintln!("mpi baseline: this node's transport is not mpi");
        }
    });
}

/// Node 0: the medians of one run of the raw and one of the floor ping-pong of `size` bytes
/// with node 1 (`peer`), in microseconds.
pub(crate) fn measure_baselines(
    ep: &Endpoint,
    peer: NodeId,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<(f64, f64), NodeError> {
    let m = |b| measure_baseline(ep, peer, b, size, iters, warmup).map(|s| median(&s));
    Ok((m(Baseline::Raw)?, m(Baseline::Floor)?))
}

/// Node 0: one run of baseline `b` with node 1; its round trips in microseconds.
fn measure_baseline(
    ep: &Endpoint,
    peer: NodeId,
    b: Baseline,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<Vec<f64>, NodeError> {
    ep.send(
        peer,
        ty::MPI_BASELINE,
        baseline_args(b, size, iters, warmup),
    )?;
    let (tx, rx) = std::sync::mpsc::channel();
    ep.post(move |ep| {
        let _ = tx.send(ep.with_mpi(|comm| run_baseline(comm, b, size, iters, warmup)));
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Some(samples)) => Ok(samples),
        Ok(None) => Err(NodeError::Check(
            "the mpi baselines need the mpi transport (SQUALL_TRANSPORT=mpi)".into(),
        )),
        Err(_) => Err(NodeError::Check(format!(
            "the {b:?} mpi ping-pong of {size} bytes with {peer} did not finish"
        ))),
    }
}

/// One rank's side of `warmup + iters` blocking ping-pongs of `size` bytes (`MPI_Send` then
/// `MPI_Recv` on rank 0, the other way round on rank 1) over `comm`: rank 0's round trips in
/// microseconds after the warm-up (empty on rank 1).
fn raw_round_trips(
    comm: &SimpleCommunicator,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Vec<f64> {
    let me = comm.rank();
    let peer = comm.process_at_rank(1 - me);
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut samples = Vec::with_capacity(if me == 0 { iters } else { 0 });
    for i in 0..warmup + iters {
        if me == 0 {
            let t0 = Instant::now();
            peer.send(&out[..]);
            peer.receive_into(&mut back[..]);
            if i >= warmup {
                samples.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        } else {
            peer.receive_into(&mut back[..]);
            peer.send(&back[..]);
        }
    }
    samples
}

const FLOOR_PING: i32 = 1;
const FLOOR_PONG: i32 = 2;
const FLOOR_STOP: i32 = 3;

/// One rank's side of the floor ping-pong.
struct Floor<'w> {
    world: &'w SimpleCommunicator,
    peer: i32,
    /// Taken around every send, as a layer whose sends come from several threads must.
    send_lock: Mutex<()>,
    trips: RoundTrips,
    done: bool,
}

/// A message handler of the floor's table, called with the message's own copy of its payload.
type FloorHandler = fn(&mut Floor<'_>, Bytes);

impl Floor<'_> {
    fn send(&self, tag: i32, payload: &[u8]) {
        let _g = self.send_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.world
            .process_at_rank(self.peer)
            .send_with_tag(payload, tag);
    }
}

fn floor_on_ping(f: &mut Floor<'_>, payload: Bytes) {
    f.send(FLOOR_PONG, &payload);
}

fn floor_on_pong(f: &mut Floor<'_>, payload: Bytes) {
    if !f.trips.pong() {
        f.send(FLOOR_STOP, &[]);
        f.done = true;
        return;
    }
    f.trips.ping();
    f.send(FLOOR_PING, &payload);
}

fn floor_on_stop(f: &mut Floor<'_>, _payload: Bytes) {
    f.done = true;
}

/// The floor ping-pong of `size` bytes (rank 0's round trips in microseconds; empty on rank
/// 1): per message, one receive from any source with any tag, posted and tested until it
/// completes (a layer must take messages it did not ask for), the payload copied into a
/// buffer of its own, a handler looked up by tag and called through a pointer, and its send
/// made under a lock. Rank 0's pong handler records the round trip and sends the next ping,
/// as Squall's active-message ping-pong does.
fn floor_chain(world: &SimpleCommunicator, size: usize, iters: usize, warmup: usize) -> Vec<f64> {
    let handlers: [Option<FloorHandler>; 4] = [
        None,
        Some(floor_on_ping),
        Some(floor_on_pong),
        Some(floor_on_stop),
    ];
    let me = world.rank();
    let mut f = Floor {
        world,
        peer: 1 - me,
        send_lock: Mutex::new(()),
        trips: RoundTrips::new(iters, warmup),
        done: false,
    };
    let mut buf = vec![0u8; size.max(1)];
    if me == 0 {
        f.trips.ping();
        f.send(FLOOR_PING, &vec![0x5au8; size]);
    }
    while !f.done {
        let (tag, len) = mpi::request::scope(|sc| {
            let mut req = world.any_process().immediate_receive_into(sc, &mut buf[..]);
            loop {
                match req.test() {
                    Ok(st) => break (st.tag(), st.count(u8::equivalent_datatype())),
                    Err(r) => req = r,
                }
            }
        });
        let len = usize::try_from(len).unwrap_or(0).min(buf.len());
        let payload = Bytes::copy_from_slice(&buf[..len]);
        let handler = usize::try_from(tag)
            .ok()
            .and_then(|t| handlers.get(t).copied().flatten());
        if let Some(h) = handler {
            h(&mut f, payload);
        }
    }
    f.trips.samples
}

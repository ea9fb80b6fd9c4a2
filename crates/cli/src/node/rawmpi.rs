//! The raw MPI ping-pong baselines of `squall bench pingpong --transport mpi` (feature `mpi`),
//! between ranks 0 and 1 of an mpirun job, no Squall code on the path:
//! - **raw**: plain blocking `MPI_Send`/`MPI_Recv`, the baseline of the bench's `ratio`;
//! - **floor**: a minimal active-message loop over MPI (see [`floor_chain`]), so a reader can
//!   tell how much of Squall's distance from the raw ping-pong at small sizes is its own code
//!   and how much comes with receiving messages nobody asked for. It copies every payload, so
//!   it is no floor for large messages (Squall hands those over without a copy).
//!
//! Rank 0 measures and prints one result line; rank 1 echoes. Owns only this program; must not
//! use the Squall backbone (MPI is initialised here, once).
use super::bench::RoundTrips;
use super::NodeError;
use crate::bench::report::{emit_result, median};
use bytes::Bytes;
use clap::Args;
use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde_json::json;
use std::sync::Mutex;
use std::time::Instant;

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
    let peer = world.process_at_rank(1 - me);
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let out = vec![0x5au8; size];
        let mut back = vec![0u8; size];
        let mut reps = Vec::with_capacity(a.reps);
        let mut floors = Vec::with_capacity(a.reps);
        for _ in 0..a.reps {
            let floor = floor_chain(&world, size, a.iters, a.warmup);
            if me == 0 {
                floors.push(median(&floor));
            }
            let mut samples = Vec::with_capacity(a.iters);
            for i in 0..a.warmup + a.iters {
                if me == 0 {
                    let t0 = Instant::now();
                    peer.send(&out[..]);
                    peer.receive_into(&mut back[..]);
                    if i >= a.warmup {
                        samples.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                } else {
                    peer.receive_into(&mut back[..]);
                    peer.send(&back[..]);
                }
            }
            if me == 0 {
                reps.push(median(&samples));
            }
        }
        rows.push(json!({"size": size, "raw_rtt_us": reps, "floor_rtt_us": floors}));
    }
    if me == 0 {
        emit_result(&json!({ "rows": rows }));
    }
    Ok(())
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

//! The raw MPI ping-pong baseline of `squall bench pingpong --transport mpi` (feature `mpi`):
//! plain blocking `MPI_Send`/`MPI_Recv` between ranks 0 and 1 of an mpirun job, no Squall
//! code on the path. Rank 0 measures and prints one result line; rank 1 echoes. Owns only
//! this program; must not use the Squall backbone (MPI is initialised here, once).
use super::NodeError;
use crate::bench::report::{emit_result, median};
use clap::Args;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator;
use serde_json::json;
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
        for _ in 0..a.reps {
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
        rows.push(json!({"size": size, "raw_rtt_us": reps}));
    }
    if me == 0 {
        emit_result(&json!({ "rows": rows }));
    }
    Ok(())
}

//! Node programs: what runs inside each node process when the launcher re-executes this
//! binary as `squall __node KIND ...` (benches, the demo, the launcher tests). Each joins the
//! job with `squall_net::bootstrap::from_env()`, does its exchange, meets the others at a
//! final barrier and says goodbye. Owns these programs and their message types (0xF000..);
//! must not touch protocol internals.
pub mod bench;
pub mod demo;
pub mod dsm;
pub mod gptr;
pub mod heat;
pub mod lockbench;
pub mod objects;
#[cfg(feature = "mpi")]
pub mod rawmpi;
pub mod regions;
pub mod selftest;

use bytes::Bytes;
use clap::Subcommand;
use squall_core::NodeId;
use squall_net::{Endpoint, Incoming, NetError};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Message types used by the node programs (the runtime's ranges are far below).
pub mod ty {
    use squall_wire::MsgType;
    pub const BARRIER: MsgType = MsgType(0xF000);
    pub const RING: MsgType = MsgType(0xF001);
    pub const ECHO: MsgType = MsgType(0xF002);
    pub const PING: MsgType = MsgType(0xF003);
    pub const PONG: MsgType = MsgType(0xF004);
    pub const BULK: MsgType = MsgType(0xF005);
    pub const BULK_ACK: MsgType = MsgType(0xF006);
    pub const FLOOD: MsgType = MsgType(0xF007);
    pub const TOKEN: MsgType = MsgType(0xF008);
    /// Node 0 to node 1: run your side of an MPI baseline now (feature `mpi`).
    #[cfg(feature = "mpi")]
    pub const MPI_BASELINE: MsgType = MsgType(0xF009);
}

#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// Ring exchange with checks (the launcher tests run this).
    Selftest(selftest::SelftestArgs),
    /// Join, print this process's pid, then wait (the launcher's failure tests kill one).
    Hold(HoldArgs),
    /// The `squall demo` node.
    Demo(demo::DemoNodeArgs),
    /// Node side of `squall bench pingpong`.
    BenchPingpong(bench::PingpongNodeArgs),
    /// Node side of `squall bench bandwidth`.
    BenchBandwidth(bench::BandwidthNodeArgs),
    /// Node side of `squall bench message`.
    BenchMessage(bench::MessageNodeArgs),
    /// The shared-memory demo (heat diffusion on a shared grid) behind `squall demo`.
    Heat(heat::HeatArgs),
    /// Node side of `squall bench fault`.
    BenchFault(dsm::FaultNodeArgs),
    /// Node side of `squall bench lock`.
    BenchLock(dsm::SyncNodeArgs),
    /// Node side of `squall bench lock --contended`.
    BenchLockContended(dsm::SyncNodeArgs),
    /// Node side of `squall bench barrier`.
    BenchBarrier(dsm::SyncNodeArgs),
    /// Node side of `squall bench thread`.
    BenchThread(dsm::SyncNodeArgs),
    /// Node side of `squall bench regions`.
    BenchRegions(regions::RegionsNodeArgs),
    /// Node side of `squall bench objects`.
    BenchObjects(objects::ObjectsNodeArgs),
    /// Node side of `squall bench gptr`.
    BenchGptr(dsm::SyncNodeArgs),
    /// The raw MPI ping-pong baseline (started by mpirun; feature `mpi`).
    #[cfg(feature = "mpi")]
    RawMpiPingpong(rawmpi::RawMpiArgs),
}

/// A node program's failure, printed by [`main`] before exiting 1.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("{0}")]
    Check(String),
}

pub fn main(cmd: NodeCmd) -> i32 {
    let result = match cmd {
        NodeCmd::Selftest(a) => selftest::run(a),
        NodeCmd::Demo(a) => demo::run(a),
        NodeCmd::Hold(a) => hold(a),
        NodeCmd::BenchPingpong(a) => bench::pingpong(a),
        NodeCmd::BenchBandwidth(a) => bench::bandwidth(a),
        NodeCmd::BenchMessage(a) => bench::message(a),
        NodeCmd::Heat(a) => heat::run(a),
        NodeCmd::BenchFault(a) => dsm::fault(a),
        NodeCmd::BenchLock(a) => dsm::lock(a),
        NodeCmd::BenchLockContended(a) => lockbench::contended(a),
        NodeCmd::BenchBarrier(a) => dsm::barrier(a),
        NodeCmd::BenchThread(a) => dsm::thread(a),
        NodeCmd::BenchRegions(a) => regions::run(a),
        NodeCmd::BenchObjects(a) => objects::run(a),
        NodeCmd::BenchGptr(a) => gptr::bench(a),
        #[cfg(feature = "mpi")]
        NodeCmd::RawMpiPingpong(a) => rawmpi::run(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let rank = std::env::var(squall_core::env::RANK).unwrap_or_else(|_| "?".into());
            eprintln!("squall node {rank}: {e}");
            1
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct HoldArgs {
    /// How long to wait before finishing normally.
    #[arg(long, default_value_t = 30.0)]
    pub secs: f64,
}

/// Join, print `pid N`, sleep, finish. A peer that dies meanwhile ends this node through the
/// endpoint's peer-lost policy (or the launcher's cleanup, whichever comes first).
fn hold(a: HoldArgs) -> Result<(), NodeError> {
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    barrier.wait()?;
    println!("pid {}", std::process::id());
    std::thread::sleep(std::time::Duration::from_secs_f64(a.secs.max(0.0)));
    finish(&ep, &barrier)
}

/// Join the job described by the environment.
pub fn join() -> Result<Endpoint, NodeError> {
    Ok(squall_net::bootstrap::from_env()?)
}

/// A barrier among all nodes, usable repeatedly from one application thread per node:
/// everyone sends a request to node 0, whose handler answers all of them once every node has
/// arrived. Register it (every node) right after joining.
pub struct Barrier {
    ep: Endpoint,
}

impl Barrier {
    pub fn install(ep: &Endpoint) -> Barrier {
        let size = usize::from(ep.size());
        let waiting: Arc<Mutex<Vec<Incoming>>> = Arc::new(Mutex::new(Vec::new()));
        ep.register(ty::BARRIER, move |ep, inc| {
            let ready = match waiting.lock() {
                Ok(mut w) => {
                    w.push(inc);
                    if w.len() == size {
                        std::mem::take(&mut *w)
                    } else {
                        Vec::new()
                    }
                }
                Err(_) => Vec::new(),
            };
            for req in &ready {
                if let Err(e) = ep.reply(req, Bytes::new()) {
                    eprintln!("squall node 0: barrier reply to {} failed: {e}", req.src);
                }
            }
        });
        Barrier { ep: ep.clone() }
    }

    pub fn wait(&self) -> Result<(), NodeError> {
        self.ep.request(NodeId(0), ty::BARRIER, Bytes::new())?;
        Ok(())
    }
}

/// Meet every node at the barrier, then say goodbye.
pub fn finish(ep: &Endpoint, barrier: &Barrier) -> Result<(), NodeError> {
    barrier.wait()?;
    ep.shutdown()?;
    Ok(())
}

/// A channel whose sender can live in a handler (`FnMut + Send`).
pub fn channel<T: Send + 'static>() -> (Arc<Mutex<mpsc::Sender<T>>>, mpsc::Receiver<T>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Mutex::new(tx)), rx)
}

/// Send on a shared sender, ignoring a receiver that has gone away.
pub fn notify<T>(tx: &Arc<Mutex<mpsc::Sender<T>>>, v: T) {
    if let Ok(tx) = tx.lock() {
        let _ = tx.send(v);
    }
}

/// Previous and next rank in the ring.
pub fn ring_neighbours(ep: &Endpoint) -> (NodeId, NodeId) {
    let n = ep.size();
    let r = ep.rank().0;
    (NodeId((r + n - 1) % n), NodeId((r + 1) % n))
}

/// Read the little-endian u64 at the start of `payload` (None if too short).
pub fn read_u64(payload: &[u8]) -> Option<u64> {
    payload
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
}

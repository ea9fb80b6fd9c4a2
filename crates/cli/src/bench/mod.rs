//! `squall bench ...`: backbone benchmarks. Each driver starts its node programs (this same
//! binary as `squall __node bench-...`) through `squall_launch`, measures the raw-socket
//! baseline itself, and prints a table; with `--json` the last stdout line is one JSON
//! object. Shared helpers live in [`report`]; raw baselines in [`raw`]. Owns measurement
//! drivers; must not touch protocol internals.
pub mod apps;
pub mod auth;
pub mod bandwidth;
pub mod check;
pub mod costs;
pub mod cprog;
pub mod dsm;
pub mod gptr;
pub mod kernels;
pub mod lockbench;
pub mod message;
pub mod objects;
pub mod omp;
pub mod pingpong;
pub mod raw;
pub mod regions;
pub mod report;

use clap::{Subcommand, ValueEnum};

/// Which transports a bench runs over.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportChoice {
    Tcp,
    Udp,
    /// MPI point-to-point, nodes started by mpirun (needs a build with `--features mpi`).
    Mpi,
    All,
}

impl TransportChoice {
    pub fn names(self) -> Vec<&'static str> {
        match self {
            TransportChoice::Tcp => vec!["tcp"],
            TransportChoice::Udp => vec!["udp"],
            TransportChoice::Mpi => vec!["mpi"],
            TransportChoice::All => vec!["tcp", "udp"],
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// The seed apps: sequential, native pthreads and Squall on each node count; writes
    /// apps.csv/json/md, plots and (asked to) docs/results.md.
    Apps(apps::AppsArgs),
    /// Round-trip latency between 2 nodes per message size, against a raw socket ping-pong.
    Pingpong(pingpong::PingpongArgs),
    /// Bulk transfer throughput (MiB/s) between 2 nodes per message size, against raw TCP.
    Bandwidth(bandwidth::BandwidthArgs),
    /// The DSM/IP message_test: every node floods the next rank; checks exactly-once, in order.
    Message(message::MessageArgs),
    /// Remote 4 KiB read fault beside a raw 4 KiB request/reply; write faults; diff throughput.
    Fault(dsm::DsmBenchArgs),
    /// Uncontended remote lock acquire (time, messages, round trips) and the local
    /// uncontended lock+unlock (the node's lock cache) beside a futex mutex; `--contended`:
    /// one lock handed between `--nodes` nodes, and the third-node acquire.
    Lock(dsm::DsmBenchArgs),
    /// Barrier time at each node count, in round trips; messages and hops per barrier.
    Barrier(dsm::DsmBenchArgs),
    /// Remote and local thread create + join.
    Thread(dsm::DsmBenchArgs),
    /// The README's basic-costs table: runs pingpong, fault (tcp, udp), lock, barrier and
    /// thread with `--json` and prints their figures as one Markdown table naming the machine
    Costs(costs::CostsArgs),
    /// CRL region read miss (invalidated copy, S bytes back) beside a raw request/reply of
    /// the same size, p50 and p99.
    Regions(regions::RegionsArgs),
    /// DSM/IP shared objects: Read()/Write() latency per engine (local, remote) beside a raw
    /// request/reply, and the sea and xstate workloads per engine at 1, 2 and 4 nodes.
    Objects(objects::ObjectsArgs),
    /// One-sided operations (global pointers, OpenSHMEM): 8 B get latency, 1 MiB put/get
    /// bandwidth and the 8 B store rate, each beside raw messages in the same run.
    Gptr(dsm::DsmBenchArgs),
    /// OpenMP on Squall beside native libgomp (same thread count): parallel region start and
    /// join, team barrier, dynamic-schedule chunk (p50/p99), and the stencil and matrix
    /// multiply kernels; needs gcc and an installed squall-openmp (`--prefix`).
    Omp(omp::OmpArgs),
    /// The side-by-side kernels (bench/sidebyside: MM, CG, stencil, EP) sequentially, on
    /// Squall and, with `ARGO_HOME`, on ArgoDSM at the same node count; medians and ratios.
    Kernels(kernels::KernelsArgs),
}

pub fn main(cmd: BenchCmd) -> i32 {
    if let Err(bad) = check::check(&cmd) {
        return crate::settings::report("bench", &[bad]);
    }
    let bad = crate::run::check_environment(2, "tcp", true);
    if !bad.is_empty() {
        return crate::settings::report("bench", &bad);
    }
    let result = match cmd {
        BenchCmd::Apps(a) => apps::main(a),
        BenchCmd::Pingpong(a) => pingpong::main(a),
        BenchCmd::Bandwidth(a) => bandwidth::main(a),
        BenchCmd::Message(a) => message::main(a),
        BenchCmd::Fault(a) => dsm::fault(a),
        BenchCmd::Lock(a) => dsm::lock(a),
        BenchCmd::Barrier(a) => dsm::barrier(a),
        BenchCmd::Thread(a) => dsm::thread(a),
        BenchCmd::Costs(a) => costs::main(a),
        BenchCmd::Regions(a) => regions::main(a),
        BenchCmd::Objects(a) => objects::main(a),
        BenchCmd::Gptr(a) => gptr::main(a),
        BenchCmd::Omp(a) => omp::main(a),
        BenchCmd::Kernels(a) => kernels::main(a),
    };
    match result {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("squall bench: {msg}");
            1
        }
    }
}

/// Parse a comma-separated size list; accepts suffixes k/K (KiB) and m/M (MiB).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1024),
        Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("bad size {s:?} (use bytes, or a k/m suffix)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(super::parse_size("64"), Ok(64));
        assert_eq!(super::parse_size("4k"), Ok(4096));
        assert_eq!(super::parse_size("16M"), Ok(16 << 20));
        assert!(super::parse_size("lots").is_err());
        assert!(super::parse_size("99999999999999999m").is_err(), "overflow");
    }
}

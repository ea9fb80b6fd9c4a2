//! What an MPI receive loop costs on this machine, without any Squall code (feature `mpi`): the
//! bound under the mpi transport's small-message ping-pong. Run under mpirun with 2 ranks:
//!
//!     mpirun -n 2 target/release/examples/mpi_probe_cost [size] [iters] [reps]
//!
//! Per rep, alternating, the median 8-byte (or `size`) round trip of: blocking
//! `MPI_Send`/`MPI_Recv` (what `squall bench pingpong` calls raw), a receive kept posted
//! (`MPI_Irecv` any source, reposted after the answer is sent) completed by an `MPI_Test` loop (the
//! mpi transport's receive), and an `MPI_Iprobe` loop followed by `MPI_Recv`. Then the cost of
//! one empty `MPI_Test` of a posted receive and of one empty `MPI_Iprobe`. Rank 0 prints.
#![allow(unsafe_code)]

#[cfg(feature = "mpi")]
fn main() {
    imp::main();
}

#[cfg(not(feature = "mpi"))]
fn main() {
    eprintln!("build with --features mpi and run under mpirun -n 2");
}

#[cfg(feature = "mpi")]
mod imp {
    use mpi::ffi;
    use mpi::topology::Communicator;
    use std::mem::MaybeUninit;
    use std::time::Instant;

    const TAG: i32 = 0x5155;

    fn byte() -> ffi::MPI_Datatype {
        // SAFETY: a constant the MPI library exports.
        unsafe { ffi::RSMPI_UINT8_T }
    }

    fn comm() -> ffi::MPI_Comm {
        // SAFETY: a constant the MPI library exports.
        unsafe { ffi::RSMPI_COMM_WORLD }
    }

    fn send(buf: &[u8], to: i32) {
        // SAFETY: MPI is initialised; `buf` is valid for reads of its length.
        unsafe {
            ffi::MPI_Send(
                buf.as_ptr().cast(),
                buf.len() as i32,
                byte(),
                to,
                TAG,
                comm(),
            );
        }
    }

    fn recv(buf: &mut [u8], from: i32) {
        let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: MPI is initialised; `buf` is valid for writes of its length.
        unsafe {
            ffi::MPI_Recv(
                buf.as_mut_ptr().cast(),
                buf.len() as i32,
                byte(),
                from,
                TAG,
                comm(),
                st.as_mut_ptr(),
            );
        }
    }

    struct Posted {
        req: ffi::MPI_Request,
    }

    impl Posted {
        fn post(&mut self, buf: &mut [u8]) {
            // SAFETY: MPI is initialised; the caller keeps `buf` alive and untouched until the
            // request completes (tested below).
            unsafe {
                ffi::MPI_Irecv(
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                    byte(),
                    ffi::RSMPI_ANY_SOURCE,
                    TAG,
                    comm(),
                    &mut self.req,
                );
            }
        }
        fn test(&mut self) -> bool {
            let mut flag = 0;
            let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
            // SAFETY: `req` is a live request.
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, st.as_mut_ptr()) };
            flag != 0
        }
    }

    fn iprobe() -> bool {
        let mut flag = 0;
        let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: MPI is initialised; the out-parameters are valid.
        unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                TAG,
                comm(),
                &mut flag,
                st.as_mut_ptr(),
            )
        };
        flag != 0
    }

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    #[derive(Clone, Copy, Debug)]
    enum Mode {
        Recv,
        Test,
        Iprobe,
    }

    /// One rep of `iters` round trips in `mode`; rank 0's median round trip in microseconds.
    fn rep(me: i32, mode: Mode, size: usize, iters: usize) -> f64 {
        let peer = 1 - me;
        let out = vec![0x5au8; size];
        let mut back = vec![0u8; size + 64];
        let mut samples = Vec::with_capacity(iters);
        // SAFETY: a constant the MPI library exports.
        let mut p = Posted {
            req: unsafe { ffi::RSMPI_REQUEST_NULL },
        };
        if let Mode::Test = mode {
            p.post(&mut back);
        }
        let wait = |p: &mut Posted, back: &mut [u8]| match mode {
            Mode::Recv => recv(&mut back[..size], peer),
            Mode::Test => while !p.test() {},
            Mode::Iprobe => {
                while !iprobe() {}
                recv(&mut back[..size], peer);
            }
        };
        for i in 0..iters + 100 {
            if me == 0 {
                let t0 = Instant::now();
                send(&out, peer);
                wait(&mut p, &mut back);
                let dt = t0.elapsed().as_secs_f64() * 1e6;
                if let Mode::Test = mode {
                    if i + 1 < iters + 100 {
                        p.post(&mut back);
                    }
                }
                if i >= 100 {
                    samples.push(dt);
                }
            } else {
                wait(&mut p, &mut back);
                send(&out, peer);
                if let Mode::Test = mode {
                    if i + 1 < iters + 100 {
                        p.post(&mut back);
                    }
                }
            }
        }
        if me == 0 {
            median(&mut samples)
        } else {
            0.0
        }
    }

    pub fn main() {
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        let size = args.first().copied().unwrap_or(8);
        let iters = args.get(1).copied().unwrap_or(20_000);
        let reps = args.get(2).copied().unwrap_or(5);
        let Some(universe) = mpi::initialize() else {
            eprintln!("mpi already initialised");
            return;
        };
        let world = universe.world();
        if world.size() != 2 {
            eprintln!("run with exactly 2 ranks");
            return;
        }
        let me = world.rank();
        let modes = [Mode::Recv, Mode::Test, Mode::Iprobe];
        let mut res: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        for _ in 0..reps {
            for (i, m) in modes.iter().enumerate() {
                // SAFETY: MPI is initialised.
                unsafe { ffi::MPI_Barrier(comm()) };
                res[i].push(rep(me, *m, size, iters));
            }
        }
        // Empty calls, rank 0 alone (rank 1 waits in the barrier).
        let n = 1_000_000;
        let mut empty_test = 0.0;
        let mut empty_iprobe = 0.0;
        if me == 0 {
            let mut buf = vec![0u8; 64];
            // SAFETY: a constant the MPI library exports.
            let mut p = Posted {
                req: unsafe { ffi::RSMPI_REQUEST_NULL },
            };
            // A tag nobody sends: the receive stays posted.
            p.post(&mut buf);
            let t = Instant::now();
            for _ in 0..n {
                if p.test() {
                    break;
                }
            }
            empty_test = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            let t = Instant::now();
            for _ in 0..n {
                if iprobe() {
                    break;
                }
            }
            empty_iprobe = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            // Withdraw the posted receive.
            let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
            // SAFETY: `req` is live; MPI_Wait completes the cancel before `buf` is dropped.
            unsafe {
                ffi::MPI_Cancel(&mut p.req);
                ffi::MPI_Wait(&mut p.req, st.as_mut_ptr());
            }
        }
        // SAFETY: MPI is initialised.
        unsafe { ffi::MPI_Barrier(comm()) };
        if me == 0 {
            for (i, m) in modes.iter().enumerate() {
                let mut v = res[i].clone();
                let med = median(&mut v);
                println!(
                    "{size} B {m:?}: median round trip {med:.3} us (reps {:?})",
                    res[i]
                        .iter()
                        .map(|x| (x * 1000.0).round() / 1000.0)
                        .collect::<Vec<_>>()
                );
            }
            println!("empty MPI_Test of a posted receive: {empty_test:.1} ns; empty MPI_Iprobe: {empty_iprobe:.1} ns");
        }
    }
}

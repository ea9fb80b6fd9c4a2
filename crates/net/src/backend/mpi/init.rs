//! MPI start-up: [`start`] spawns the progress thread, which initialises MPI
//! (`MPI_THREAD_SERIALIZED`) and runs the start-up collectives ([`init_mpi`]: the job id
//! broadcast by rank 0, the nodes of this machine, whether headerless messages fit the tag,
//! the shared-memory rings, the lent communicator); the settings read from the environment;
//! the spin policy chosen from the nodes and cores of this machine. Must not send or receive
//! messages (that is `send`, `recv` and `progress`).
use super::progress::{progress_main, Cmd};
use super::{MpiBackend, MpiState, PeerState, Received, Shared, RX_MAX};
use crate::backend::mpi_rx::{self, MpiLock, OwnComm, PostedRecv};
use crate::backend::mpi_shm::Shm;
use crate::backend::mpi_tag;
use crate::config::NetConfig;
use crate::error::NetError;
use crate::stats::LinkCounters;
use ::mpi::collective::{CommunicatorCollectives, SystemOperation};
use ::mpi::environment::Universe;
use ::mpi::topology::{Communicator, SimpleCommunicator};
use ::mpi::traits::Root;
use crossbeam_channel::{unbounded, Sender};
use parking_lot::Mutex;
use squall_core::{JobId, NodeId};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `SQUALL_MPI_HEADERLESS=0` frames every message (a wire header in the payload, as before
/// headerless messages): for comparing the two paths.
fn framed_by_env() -> bool {
    std::env::var(squall_core::env::MPI_HEADERLESS).is_ok_and(|v| v.trim() == "0")
}
/// `SQUALL_MPI_SHM=0` sends messages between ranks of one machine through MPI point-to-point
/// too, instead of the shared-memory rings ([`super::mpi_shm`]).
fn shm_by_env() -> bool {
    !std::env::var(squall_core::env::MPI_SHM).is_ok_and(|v| v.trim() == "0")
}
/// `SQUALL_MPI_SHM_GROUPS=k` (testing): the ranks of each machine form k groups (by rank
/// modulo k), rings within a group and MPI point-to-point between groups, as if the machine
/// were k machines.
fn shm_groups_by_env() -> i32 {
    std::env::var(squall_core::env::MPI_SHM_GROUPS)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|k| *k >= 1)
        .unwrap_or(1)
}

/// How long the service thread keeps polling MPI itself after the last message it sent or
/// received (then it sleeps and the progress thread watches MPI).
pub(super) const SVC_SPIN: Duration = Duration::from_micros(100);
/// A hot service thread idle for this long yields the core between probes: an application
/// thread that a reply woke (or a peer node sharing the cores) must get to run. Yielding
/// sooner costs the ping-pong time when other processes load the machine.
pub(super) const YIELD_AFTER: Duration = Duration::from_micros(20);

/// How the hot service thread spins; chosen at start from the nodes on this machine and its
/// cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SpinPolicy {
    /// The service thread polls MPI until this long after the last message.
    pub(super) hot_for: Duration,
    /// Idle this long, it yields the core between probes (and probes once per loop).
    pub(super) yield_after: Duration,
}

impl SpinPolicy {
    pub(super) fn for_machine(local_nodes: usize, cores: usize) -> SpinPolicy {
        if local_nodes > cores {
            // More nodes than cores: a spinning node keeps the node it waits for off the
            // cores (measured: the 4-node barrier test on 2 cores took ~40% longer even with a
            // yield after every empty probe). The service thread sleeps; the progress thread
            // watches MPI, spinning with yields for a while after each piece of work.
            SpinPolicy {
                hot_for: Duration::ZERO,
                yield_after: Duration::ZERO,
            }
        } else {
            SpinPolicy {
                hot_for: SVC_SPIN,
                yield_after: YIELD_AFTER,
            }
        }
    }
}

/// The cores this machine has online (not just those this process may run on: mpirun may
/// bind each node to one core), from `/sys/devices/system/cpu/online` ("0-3,6").
fn online_cores() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpu_list(&t))
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
}

/// The number of cpus in a kernel cpu list ("0-3,6" is 5); None if malformed or empty.
pub(super) fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut n = 0;
    for part in text.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>()
                    .ok()?
                    .checked_sub(a.parse::<usize>().ok()?)?
                    + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// How long bootstrap waits for the progress thread to initialise MPI.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// What MPI reported at start-up.
pub(super) struct Started {
    rank: NodeId,
    size: u16,
    job: JobId,
    spin: SpinPolicy,
    /// `MPI_TAG_UB` is large enough for headerless messages ([`mpi_tag`]).
    headerless: bool,
    /// Peers reached through MPI point-to-point (the others through rings).
    p2p_peers: usize,
}

/// Starts the progress thread (which initialises MPI) and returns the backend with this node's
/// rank, the job size and the job id (rank 0's, broadcast).
pub(crate) fn start(cfg: &NetConfig) -> Result<(MpiBackend, NodeId, u16, JobId), NetError> {
    if let Some(f) = cfg.faults.filter(|f| !f.is_noop()) {
        return Err(NetError::Config(format!(
            "SQUALL_NET_FAULTS ({f:?}) cannot be applied to the mpi transport; use SQUALL_TRANSPORT=udp or tcp"
        )));
    }
    let shared = Arc::new(Shared {
        waker: Mutex::new(None),
        wake_pending: AtomicBool::new(false),
        mpi: MpiLock::new(MpiState {
            closed: false,
            rx: PostedRecv::new(RX_MAX),
            shm: None,
            own: None,
        }),
        in_flight: AtomicUsize::new(0),
        finalized: AtomicBool::new(false),
        svc_hot: AtomicBool::new(false),
        lent: AtomicBool::new(false),
        svc_seen_ns: AtomicU64::new(0),
        sent_ns: AtomicU64::new(0),
        ring_stuck: Mutex::new(Vec::new()),
        ring_stuck_any: AtomicBool::new(false),
        epoch: Instant::now(),
    });
    let (cmd_tx, cmd_rx) = unbounded::<Cmd>();
    let (in_tx, in_rx) = unbounded::<Received>();
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<Result<Started, String>>(1);
    let job_hint = cfg.job_id;
    let slice = cfg.service_slice;
    let peer_timeout = cfg.peer_timeout;
    let sh = shared.clone();
    let progress_in = in_tx.clone();
    let join = std::thread::Builder::new()
        .name("squall-mpi".into())
        .spawn(move || {
            crate::sched::apply(slice, "the mpi progress thread");
            progress_main(job_hint, peer_timeout, cmd_rx, progress_in, ready_tx, sh)
        })
        .map_err(|e| NetError::io("spawning the mpi progress thread", e))?;
    let started = match ready_rx.recv_timeout(INIT_TIMEOUT) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(NetError::Bootstrap(e)),
        Err(_) => {
            return Err(NetError::Bootstrap(format!(
                "mpi initialisation did not finish within {}s",
                INIT_TIMEOUT.as_secs()
            )))
        }
    };
    let now = Instant::now();
    let peers = (0..started.size)
        .map(|_| PeerState {
            bye_received: false,
            lost: false,
            last_heard: now,
            last_sent: now,
        })
        .collect();
    let progress = join.thread().clone();
    Ok((
        MpiBackend {
            rank: started.rank,
            job: started.job,
            headerless: (started.headerless && !framed_by_env())
                .then(|| mpi_tag::job_bits(started.job)),
            peers,
            cmds: cmd_tx,
            incoming: in_rx,
            incoming_tx: in_tx,
            rx_buf: Vec::new(),
            tx_buf: Vec::with_capacity(RX_MAX),
            hot_probe: false,
            progress,
            join: Some(join),
            shared,
            counters: LinkCounters::default(),
            peer_timeout: cfg.peer_timeout,
            shutdown_at: None,
            last_activity: now,
            spin: started.spin,
            now_seen: now,
            active: false,
            p2p_peers: started.p2p_peers,
            looks: 0,
            ring_buf: Vec::new(),
        },
        started.rank,
        started.size,
        started.job,
    ))
}

/// The progress thread's start: initialises MPI and runs the start-up collectives, then
/// reports to [`start`] through `ready`; None (reported too) if MPI cannot be had.
pub(super) fn init_mpi(
    job_hint: Option<JobId>,
    ready: &Sender<Result<Started, String>>,
    shared: &Shared,
) -> Option<(Universe, SimpleCommunicator)> {
    let Some((universe, _level)) = ::mpi::initialize_with_threading(::mpi::Threading::Serialized)
    else {
        let _ = ready.send(Err(
            "mpi was already initialised in this process (one squall node per process)".into(),
        ));
        shared.finalized.store(true, Ordering::Release);
        return None;
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let (Ok(rank16), Ok(size16)) = (u16::try_from(rank), u16::try_from(size)) else {
        let _ = ready.send(Err(format!(
            "mpi rank {rank} of {size} does not fit squall's 16-bit node ids"
        )));
        shared.finalized.store(true, Ordering::Release);
        return None;
    };
    let mut job: u64 = if rank == 0 {
        job_hint.map_or_else(rand::random, |j| j.0)
    } else {
        0
    };
    world.process_at_rank(0).broadcast_into(&mut job);
    // The nodes sharing this machine (MPI_Comm_split_type SHARED; collective, like the rest
    // of start-up).
    let local_nodes = usize::try_from(world.split_shared(rank).size()).unwrap_or(1);
    // Every rank runs the same MPI library, so all agree on the headerless path.
    // (The layout uses all 31 bits a tag has: only the largest MPI_TAG_UB will do.)
    let headerless = mpi_rx::tag_ub() == mpi_tag::NEEDED_TAG_UB;
    // Rings between the ranks of each machine, unless any rank was told not to (all must
    // agree: the window is created collectively, and a ring nobody reads would hang).
    let mut shm_all = 0i32;
    world.all_reduce_into(
        &i32::from(shm_by_env()),
        &mut shm_all,
        SystemOperation::min(),
    );
    let mut groups = 1i32;
    world.all_reduce_into(&shm_groups_by_env(), &mut groups, SystemOperation::max());
    let shm = (shm_all == 1)
        .then(|| Shm::create(rank, size, groups))
        .flatten();
    let p2p_peers = shm
        .as_ref()
        .map_or(usize::from(size16).saturating_sub(1), Shm::remote_ranks);
    // Collective too: every rank makes its duplicate here, at start-up.
    let own = OwnComm(world.duplicate());
    {
        let mut st = shared.mpi.lock();
        st.shm = shm;
        st.own = Some(own);
    }
    let _ = ready.send(Ok(Started {
        rank: NodeId(rank16),
        size: size16,
        job: JobId(job),
        spin: SpinPolicy::for_machine(local_nodes, online_cores()),
        headerless,
        p2p_peers,
    }));
    Some((universe, world))
}

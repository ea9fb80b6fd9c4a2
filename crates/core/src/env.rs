//! The environment variables Squall reads, in one place. `squall run --help` and the README
//! print this table; every crate reads its settings through these names.

/// One documented environment variable.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

pub const RANK: &str = "SQUALL_RANK";
pub const SIZE: &str = "SQUALL_SIZE";
pub const RENDEZVOUS: &str = "SQUALL_RENDEZVOUS";
pub const JOB_ID: &str = "SQUALL_JOB_ID";
pub const TRANSPORT: &str = "SQUALL_TRANSPORT";
pub const NET_FAULTS: &str = "SQUALL_NET_FAULTS";
pub const BIND_ADDR: &str = "SQUALL_BIND_ADDR";
pub const PEER_TIMEOUT_MS: &str = "SQUALL_PEER_TIMEOUT_MS";
pub const STATS: &str = "SQUALL_STATS";
pub const STATS_FILE: &str = "SQUALL_STATS_FILE";
pub const PROFILE: &str = "SQUALL_PROFILE";
pub const PROFILE_FILE: &str = "SQUALL_PROFILE_FILE";
pub const PROTOCOL: &str = "SQUALL_PROTOCOL";
pub const HEAP_SIZE: &str = "SQUALL_HEAP_SIZE";
pub const HEAP_BASE: &str = "SQUALL_HEAP_BASE";
pub const FAULTS: &str = "SQUALL_FAULTS";
pub const PLACEMENT: &str = "SQUALL_PLACEMENT";
pub const THREAD_PLACEMENT: &str = "SQUALL_THREAD_PLACEMENT";
pub const LOCAL_NODES: &str = "SQUALL_LOCAL_NODES";
pub const FETCH_SPIN_US: &str = "SQUALL_FETCH_SPIN_US";
/// Read by `squall bench apps` only.
pub const APPS_BIN: &str = "SQUALL_APPS_BIN";
pub const PLOT_FONT: &str = "SQUALL_PLOT_FONT";
pub const MPI_HEADERLESS: &str = "SQUALL_MPI_HEADERLESS";
pub const MPI_SHM: &str = "SQUALL_MPI_SHM";
pub const MPI_SHM_GROUPS: &str = "SQUALL_MPI_SHM_GROUPS";
pub const SERVICE_SLICE_US: &str = "SQUALL_SERVICE_SLICE_US";
pub const POLL_SPIN_US: &str = "SQUALL_POLL_SPIN_US";
pub const REPLY_SPIN_US: &str = "SQUALL_REPLY_SPIN_US";
pub const BARRIER_EAGER: &str = "SQUALL_BARRIER_EAGER";
pub const BARRIER_FETCH: &str = "SQUALL_BARRIER_FETCH";
pub const PUSH_UPDATES: &str = "SQUALL_PUSH_UPDATES";
pub const WATCH_SHARED: &str = "SQUALL_WATCH_SHARED";
pub const UNIT_PAGES: &str = "SQUALL_UNIT_PAGES";
pub const LOCK_CACHE: &str = "SQUALL_LOCK_CACHE";
pub const LOCK_COHORT: &str = "SQUALL_LOCK_COHORT";
pub const AUTH: &str = "SQUALL_AUTH";
pub const AUTH_KEY: &str = "SQUALL_AUTH_KEY";
pub const AUTH_KEY_FILE: &str = "SQUALL_AUTH_KEY_FILE";
/// OpenSHMEM's own name (read when one-sided operations start: `shmem_init`, `Node::gptr`).
pub const SHMEM_SYMMETRIC_SIZE: &str = "SHMEM_SYMMETRIC_SIZE";

/// Every variable, with its default and meaning.
pub const ALL: &[EnvVar] = &[
    EnvVar {
        name: RANK,
        default: "(set by the launcher)",
        meaning: "this node's rank, 0..SIZE",
    },
    EnvVar {
        name: SIZE,
        default: "(set by the launcher)",
        meaning: "number of nodes in the job",
    },
    EnvVar {
        name: RENDEZVOUS,
        default: "(set by the launcher)",
        meaning: "host:port where rank 0 listens for the join/hello exchange",
    },
    EnvVar {
        name: JOB_ID,
        default: "(random, chosen by rank 0)",
        meaning: "64-bit job id in hex; packets with another id are dropped",
    },
    EnvVar {
        name: TRANSPORT,
        default: "tcp",
        meaning: "backend: tcp, udp or mpi",
    },
    EnvVar {
        name: NET_FAULTS,
        default: "(none)",
        meaning: "fault injection, e.g. loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7 (loss and dup need udp); partition=A-B@T: from T after its network came up (e.g. 200ms), each of nodes A and B drops every packet to and from the other (tcp, udp), so both peer timeouts fire",
    },
    EnvVar {
        name: BIND_ADDR,
        default: "127.0.0.1 (0.0.0.0 with --hosts)",
        meaning: "IP address this node binds its transport to",
    },
    EnvVar {
        name: AUTH,
        default: "auto",
        meaning: "packet authentication (tcp, udp): on: every packet carries a keyed-BLAKE3 tag and a replay-checked sequence number, and the node refuses to start without a key; encrypt: the same, with payloads encrypted by ChaCha20-Poly1305 (every node must agree); off: none; auto: on when a key is given. squall run makes the key and turns it on for --hosts jobs (several hosts; nodes listen on every interface) or with --auth (--encrypt: encrypt), off with --no-auth; not available over mpi",
    },
    EnvVar {
        name: AUTH_KEY,
        default: "(made by squall run when authentication is on)",
        meaning: "the job's secret key, 64 hex digits; squall run puts it in local nodes' environment and hands it to remote nodes on the remote shell's stdin, never on a command line",
    },
    EnvVar {
        name: AUTH_KEY_FILE,
        default: "(none)",
        meaning: "a file holding the key (64 hex digits), readable by its owner only (mode 0600); read when AUTH_KEY is not set",
    },
    EnvVar {
        name: PEER_TIMEOUT_MS,
        default: "3000",
        meaning: "silence after which a peer is declared lost and the job ends (tcp and udp send heartbeats to idle peers every quarter, resp. fifth, of it; a stopped node is found this way)",
    },
    EnvVar {
        name: STATS,
        default: "0",
        meaning: "1: print per-node and total statistics at exit",
    },
    EnvVar {
        name: STATS_FILE,
        default: "squall-stats.json",
        meaning: "where the statistics JSON is written when STATS=1",
    },
    EnvVar {
        name: PROFILE,
        default: "0",
        meaning: "1: record the sharing profile (per allocation site and global: faults, fetches, invalidations, diffs, false/true sharing; locks and barriers) and print the worst sites at exit",
    },
    EnvVar {
        name: PROFILE_FILE,
        default: "squall-profile.json",
        meaning: "where the profile JSON is written when PROFILE=1 (render it with `squall report FILE`)",
    },
    EnvVar {
        name: PROTOCOL,
        default: "hlrc",
        meaning: "coherence protocol of allocations that name none: hlrc or sc (per allocation: Node::alloc_policy, squall_malloc_with)",
    },
    EnvVar {
        name: HEAP_SIZE,
        default: "64G",
        meaning: "size of the reserved global address range (virtual; nothing committed up front); from 8G per node on (the default up to 8 nodes), its bottom eighth is split into one arena per node for small allocations and the rest is shared by every node for large ones (one allocation may be as large as that part's free space); a smaller range is all arenas (one allocation must fit in one); at most 8T at the default base (the symmetric arena follows)",
    },
    EnvVar {
        name: HEAP_BASE,
        default: "0x5000_0000_0000",
        meaning: "virtual address of the global range, identical on every node",
    },
    EnvVar {
        name: FAULTS,
        default: "thread",
        meaning: "who serves a page fault: thread (the faulting thread waits in the kernel while the service thread serves it) or signal (the faulting thread serves its own fault from a SIGBUS handler: no thread wake-up for a fault served locally, such as a write to a read copy, and the thread reads its own page reply; x86-64, userfaultfd with UFFD_FEATURE_SIGBUS). With signal the kernel's own accesses do not wait: libsquall's read, pread, readv, preadv, fread, recv, recvfrom, write, pwrite, writev, pwritev, fwrite, send, sendto (and their _FORTIFY_SOURCE forms), which the program and its libraries call in place of the C library's, take the access first, but other system calls on shared memory this node cannot access at that moment (recvmsg, sendmsg, stat into a global ...) fail with EFAULT; libsquall's sigaction, signal, pthread_sigmask and sigprocmask keep SIGBUS Squall's (a program's own SIGBUS handler gets only the faults that are not Squall's, and a blocked mask leaves SIGBUS deliverable), but a program that sets its signals through raw system calls (or a Rust program on the squall crate) must not block or take SIGBUS",
    },
    EnvVar {
        name: PLACEMENT,
        default: "first-touch",
        meaning: "default home placement: first-touch, round-robin, blocked, node:N, local",
    },
    EnvVar {
        name: THREAD_PLACEMENT,
        default: "even",
        meaning: "node of the k-th thread node r creates without naming one (pthread_create, CREATE): even: (r+k+1) mod N, so main plus P-1 threads put P/N (±1) on every node; round-robin: k mod N; local: r",
    },
    EnvVar {
        name: LOCAL_NODES,
        default: "(set by the launcher; else the MPI launcher's local size; else 1)",
        meaning: "nodes of this job on this machine; service threads spin only when they are fewer than the CPUs",
    },
    EnvVar {
        name: FETCH_SPIN_US,
        default: "auto (150 when LOCAL_NODES < CPUs, else 0)",
        meaning: "microseconds the service thread busy-waits for a page reply after a fault; 0: never",
    },
    EnvVar {
        name: MPI_HEADERLESS,
        default: "1 (when MPI_TAG_UB allows)",
        meaning: "mpi transport: 0 frames every message with the wire header instead of carrying type and job check in the MPI tag",
    },
    EnvVar {
        name: MPI_SHM,
        default: "1",
        meaning: "mpi transport: 0 sends between ranks of one machine through MPI point-to-point instead of shared-memory rings in an MPI-3 window (all ranks must agree; any 0 turns the rings off)",
    },
    EnvVar {
        name: MPI_SHM_GROUPS,
        default: "1",
        meaning: "mpi transport, for testing: k > 1 splits the ranks of each machine into k groups (rank mod k) with rings inside a group and MPI point-to-point between groups, as on k machines (the largest k of any rank wins)",
    },
    EnvVar {
        name: SERVICE_SLICE_US,
        default: "100",
        meaning: "scheduler time slice (µs, 100-100000) the service and MPI progress threads ask for, so a message or fault wakes them ahead of busy application threads (Linux ≥ 6.12; older kernels ignore it); 0: the kernel's default",
    },
    EnvVar {
        name: POLL_SPIN_US,
        default: "auto (20 when LOCAL_NODES < CPUs, else 0)",
        meaning: "microseconds (1-1000) the service thread keeps polling the network and the fault source without sleeping after it served a message or fault, so a reply due within microseconds is read without a wake-up; windows that end empty make the next ones be skipped (back-off); 0: never",
    },
    EnvVar {
        name: REPLY_SPIN_US,
        default: "200",
        meaning: "microseconds (1-10000) an application thread waiting for a reply (a blocking request, a one-sided get or atomic) or for a lock grant, barrier release, condition or flag polls the sockets itself, yielding the CPU between looks, and handles what it reads (in order with the service thread) before it sleeps until the service thread wakes it: a message read this way costs no thread wake-up; 0: sleep at once",
    },
    EnvVar {
        name: BARRIER_EAGER,
        default: "1",
        meaning: "total-count barriers (pthread_barrier, squall_barrier): a node whose expected threads arrived releases and reports at once (one round trip); 0: every episode collects first (two)",
    },
    EnvVar {
        name: LOCK_CACHE,
        default: "1",
        meaning: "locks whose token is idle on a node go into the node's lock cache, where its threads take and release them with one compare-and-swap (tens of ns); 0: every lock and unlock goes through the synchronization core (about 1 µs)",
    },
    EnvVar {
        name: LOCK_COHORT,
        default: "8",
        meaning: "most critical sections of a node's threads that may go before another node already waiting for the lock, beyond those queued before its request came (the lock is handed among the node's threads before it leaves the node, as cohort locks do); 0: strict first-come order between nodes",
    },
    EnvVar {
        name: BARRIER_FETCH,
        default: "1024",
        meaning: "hlrc: most pages a node fetches at a barrier's release, of the copies the barrier invalidated that it read lately; 0: none (fetch on the next fault)",
    },
    EnvVar {
        name: PUSH_UPDATES,
        default: "0",
        meaning: "hlrc: the update policy of allocations that name none: 1: at each barrier a home sends the pages it wrote since the last one to the nodes holding copies, which keep them up to date (an update protocol for producer/consumer sharing); 0: those copies are invalidated and fetched again (per allocation: Policy::updates, squall_policy.updates)",
    },
    EnvVar {
        name: WATCH_SHARED,
        default: "1",
        meaning: "hlrc: 1: a home page the home wrote lately stays writable when another node first takes a copy, the copy handed out kept as its snapshot (the home's next writes cost no write fault; its releases compare the page to the snapshot, until it stays unchanged for a few of them); 0: such a page is write-protected and the home's next write faults",
    },
    EnvVar {
        name: UNIT_PAGES,
        default: "1",
        meaning: "hlrc: the coherence unit, in pages, of allocations that name no policy: 1, or a power of two up to 64 (a fault fetches the whole unit, a write notice invalidates it whole: fewer fetches for data read in sweeps, more false sharing); above 1 only with SQUALL_PROTOCOL=hlrc and no SQUALL_PUSH_UPDATES (per allocation: Policy::unit_pages, squall_policy.unit_pages)",
    },
    EnvVar {
        name: APPS_BIN,
        default: "apps/bin (in the current directory, else above the squall binary)",
        meaning: "squall bench apps: folder of the built seed apps (<app>_seq, <app>_native, <app>_squall); --bin-dir overrides it",
    },
    EnvVar {
        name: SHMEM_SYMMETRIC_SIZE,
        default: "1G",
        meaning: "size of each node's symmetric arena for one-sided operations (shmem_malloc, squall_all_alloc, spread arrays; OpenSHMEM's name; k/M/G suffixes): address space only until touched, at 0x5800_0000_0000 on every node",
    },
    EnvVar {
        name: PLOT_FONT,
        default: "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        meaning: "squall bench apps and squall report: TrueType font laying out the plots' text",
    },
];

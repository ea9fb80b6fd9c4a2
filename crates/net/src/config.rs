//! Node network configuration, from the environment (`squall_core::env` names) or built in
//! code. Owns parsing and validation; must not open sockets.
use crate::error::NetError;
use crate::faults::FaultSpec;
use squall_core::env;
use squall_core::{JobId, NodeId};
use squall_wire::AuthKey;
use std::net::IpAddr;
use std::time::Duration;

/// Which backend carries the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
    /// MPI point-to-point (feature `mpi`): rank and size come from MPI, no rendezvous.
    #[cfg(feature = "mpi")]
    Mpi,
}

/// Variables MPI launchers (Open MPI's mpirun, MPICH/Hydra, PMIx, Slurm's srun) set to a
/// process's rank.
pub const MPI_RANK_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
];
/// Variables MPI launchers set to the job size.
pub const MPI_SIZE_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
];

/// The rank an MPI launcher gave this process, if one started it.
fn mpi_launcher_rank(get: &impl Fn(&str) -> Option<String>) -> Option<u16> {
    MPI_RANK_VARS
        .iter()
        .find_map(|k| get(k).and_then(|v| v.trim().parse().ok()))
}

impl std::str::FromStr for Transport {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, NetError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" | "" => Ok(Transport::Tcp),
            "udp" => Ok(Transport::Udp),
            #[cfg(feature = "mpi")]
            "mpi" => Ok(Transport::Mpi),
            #[cfg(not(feature = "mpi"))]
            "mpi" => Err(NetError::Config(format!(
                "{}=mpi: this build has no mpi backend (build with `--features mpi`); use tcp or udp",
                env::TRANSPORT
            ))),
            other => Err(NetError::Config(format!(
                "{}={other:?} is not a transport; use tcp or udp",
                env::TRANSPORT
            ))),
        }
    }
}

/// Everything a node needs to join a job.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub rank: NodeId,
    pub size: u16,
    /// `host:port` where rank 0 listens for the join/hello exchange (None only when size is 1).
    pub rendezvous: Option<String>,
    /// Job id; None: rank 0 picks a random one and tells everybody.
    pub job_id: Option<JobId>,
    pub transport: Transport,
    pub faults: Option<FaultSpec>,
    /// Address the transport socket binds to (port 0).
    pub bind_addr: IpAddr,
    pub peer_timeout: Duration,
    /// udp: largest payload carried by one datagram (bigger messages are fragmented).
    pub udp_max_payload: usize,
    /// udp: unacknowledged datagrams allowed in flight per peer.
    pub udp_window: usize,
    /// How long joining (rendezvous and pair connections) may take.
    pub join_timeout: Duration,
    /// Scheduler time slice the service (and MPI progress) thread asks for; None: the
    /// kernel's default. A short slice lets a message wake it ahead of busy threads.
    pub service_slice: Option<Duration>,
    /// How long the service thread keeps polling (without sleeping) after it served a message
    /// or a fault, so the answer that usually follows within microseconds is read without a
    /// thread wake-up; None: it sleeps at once. Windows that end empty make the next ones
    /// be skipped (exponential back-off), so an idle or slow peer costs almost no CPU.
    /// `single()`: None; from the environment: see `SQUALL_POLL_SPIN_US`.
    pub poll_spin: Option<Duration>,
    /// How long an application thread that waits for a reply ([`crate::Endpoint::request`])
    /// polls the sockets itself, yielding the CPU between looks, before it sleeps until the
    /// service thread hands the reply over: a reply read this way costs no thread wake-up.
    /// None: it sleeps at once. `single()` and from the environment: see
    /// `SQUALL_REPLY_SPIN_US`.
    pub reply_spin: Option<Duration>,
    /// The job's key when packets are authenticated (tcp, udp; `SQUALL_AUTH`); every node of
    /// the job must have the same.
    pub auth: Option<AuthKey>,
    /// With a key: payloads are encrypted too (`SQUALL_AUTH=encrypt`); job-wide.
    pub encrypt: bool,
}

/// The `SQUALL_AUTH` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Authenticate; a node without a key refuses to start.
    On,
    /// Never authenticate, even with a key.
    Off,
    /// Authenticate when a key is given (the default).
    Auto,
    /// Authenticate and encrypt payloads (ChaCha20-Poly1305); a node without a key refuses
    /// to start.
    Encrypt,
}

impl std::str::FromStr for AuthMode {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, NetError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "1" | "yes" | "true" => Ok(AuthMode::On),
            "off" | "0" | "no" | "false" => Ok(AuthMode::Off),
            "auto" | "" => Ok(AuthMode::Auto),
            "encrypt" => Ok(AuthMode::Encrypt),
            other => Err(NetError::Config(format!(
                "{}={other:?}: give on, off, auto or encrypt",
                env::AUTH
            ))),
        }
    }
}

/// Reads the key from `SQUALL_AUTH_KEY`, else from the file `SQUALL_AUTH_KEY_FILE` (which
/// must be readable by its owner only).
fn read_key(get: &impl Fn(&str) -> Option<String>) -> Result<Option<AuthKey>, NetError> {
    if let Some(k) = get(env::AUTH_KEY).filter(|s| !s.trim().is_empty()) {
        // Never echo the text: it may be most of a key.
        return AuthKey::parse_hex(&k)
            .map(Some)
            .map_err(|e| NetError::Config(format!("{} is not a key: {e}", env::AUTH_KEY)));
    }
    let Some(path) = get(env::AUTH_KEY_FILE).filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&path).map_err(|e| {
        NetError::Config(format!(
            "{}={path}: cannot read it: {e}",
            env::AUTH_KEY_FILE
        ))
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(NetError::Config(format!(
            "{}={path} has mode {mode:03o}: others may read the key; `chmod 600 {path}`",
            env::AUTH_KEY_FILE
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| {
        NetError::Config(format!(
            "{}={path}: cannot read it: {e}",
            env::AUTH_KEY_FILE
        ))
    })?;
    AuthKey::parse_hex(&text).map(Some).map_err(|e| {
        NetError::Config(format!(
            "{}={path} does not hold a key: {e}",
            env::AUTH_KEY_FILE
        ))
    })
}

/// The key the node uses after `SQUALL_AUTH`, and whether it encrypts payloads.
pub fn auth_from_lookup(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(Option<AuthKey>, bool), NetError> {
    let mode = match get(env::AUTH) {
        Some(m) => m.parse()?,
        None => AuthMode::Auto,
    };
    match mode {
        AuthMode::Off => Ok((None, false)),
        AuthMode::Auto => Ok((read_key(get)?, false)),
        AuthMode::On | AuthMode::Encrypt => match read_key(get)? {
            Some(k) => Ok((Some(k), mode == AuthMode::Encrypt)),
            None => Err(NetError::Config(format!(
                "{}={} but no key: set {} (64 hex digits) or {} (a file of mode 0600), \
                 or start the job with `squall run --auth`, which makes one",
                env::AUTH,
                if mode == AuthMode::Encrypt {
                    "encrypt"
                } else {
                    "on"
                },
                env::AUTH_KEY,
                env::AUTH_KEY_FILE
            ))),
        },
    }
}

/// Default of [`NetConfig::service_slice`] (`SQUALL_SERVICE_SLICE_US`).
pub const DEFAULT_SERVICE_SLICE: Duration = Duration::from_micros(100);
/// Default of [`NetConfig::poll_spin`] (`SQUALL_POLL_SPIN_US`).
pub const DEFAULT_POLL_SPIN: Duration = Duration::from_micros(20);
/// Default of [`NetConfig::reply_spin`] (`SQUALL_REPLY_SPIN_US`): longer than a round trip
/// whose peer must wake from idle on the measuring machine (~50-100 µs), so such a reply
/// is still read by the waiting thread.
pub const DEFAULT_REPLY_SPIN: Duration = Duration::from_micros(200);

impl NetConfig {
    /// A single-node job (no network peers).
    pub fn single() -> NetConfig {
        NetConfig {
            rank: NodeId(0),
            size: 1,
            rendezvous: None,
            job_id: None,
            transport: Transport::Tcp,
            faults: None,
            bind_addr: IpAddr::from([127, 0, 0, 1]),
            peer_timeout: Duration::from_millis(3000),
            udp_max_payload: 32 * 1024,
            udp_window: 64,
            join_timeout: Duration::from_secs(30),
            service_slice: Some(DEFAULT_SERVICE_SLICE),
            poll_spin: None,
            reply_spin: Some(DEFAULT_REPLY_SPIN),
            auth: None,
            encrypt: false,
        }
    }

    /// Reads `SQUALL_RANK`, `SQUALL_SIZE`, `SQUALL_RENDEZVOUS`, `SQUALL_JOB_ID`,
    /// `SQUALL_TRANSPORT`, `SQUALL_NET_FAULTS`, `SQUALL_BIND_ADDR`, `SQUALL_PEER_TIMEOUT_MS`, `SQUALL_SERVICE_SLICE_US`, `SQUALL_POLL_SPIN_US`, `SQUALL_REPLY_SPIN_US`.
    pub fn from_env() -> Result<NetConfig, NetError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`NetConfig::from_env`] over any variable source (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<NetConfig, NetError> {
        let mut cfg = NetConfig::single();
        #[cfg(feature = "mpi")]
        {
            // Started by mpirun/srun without squall's own variables, or SQUALL_TRANSPORT=mpi:
            // rank and size come from MPI at bootstrap (the launcher's variables give them
            // early; bootstrap takes MPI's word).
            let explicit = get(env::TRANSPORT).map(|t| t.parse::<Transport>());
            let mpi = match &explicit {
                Some(Ok(Transport::Mpi)) => true,
                Some(_) => false,
                None => get(env::RANK).is_none() && mpi_launcher_rank(&get).is_some(),
            };
            if mpi {
                return Self::mpi_from_lookup(cfg, &get);
            }
        }
        #[cfg(not(feature = "mpi"))]
        if get(env::RANK).is_none() && get(env::SIZE).is_none() && mpi_launcher_rank(&get).is_some()
        {
            return Err(NetError::Config(format!(
                "started by an mpi launcher, but this build has no mpi backend: rebuild with \
                 `--features mpi`, or start the program with `squall run -n N prog` ({} is not set)",
                env::SIZE
            )));
        }
        let hint = "start the program with `squall run -n N prog`, or set SQUALL_RANK, SQUALL_SIZE and SQUALL_RENDEZVOUS yourself";
        let size = match get(env::SIZE) {
            None => {
                return Err(NetError::Config(format!(
                    "{} is not set: {hint} (SQUALL_SIZE=1 runs a single node)",
                    env::SIZE
                )))
            }
            Some(s) => match s.trim().parse::<u16>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(NetError::Config(format!(
                        "{}={s:?} is not a node count between 1 and 65535",
                        env::SIZE
                    )))
                }
            },
        };
        cfg.size = size;
        cfg.rank = match get(env::RANK) {
            None if size == 1 => NodeId(0),
            None => {
                return Err(NetError::Config(format!(
                    "{} is not set: {hint}",
                    env::RANK
                )))
            }
            Some(s) => match s.trim().parse::<u16>() {
                Ok(r) if r < size => NodeId(r),
                _ => {
                    return Err(NetError::Config(format!(
                        "{}={s:?} is not a rank in 0..{size} ({}={size})",
                        env::RANK,
                        env::SIZE
                    )))
                }
            },
        };
        cfg.rendezvous = get(env::RENDEZVOUS).filter(|s| !s.trim().is_empty());
        if size > 1 && cfg.rendezvous.is_none() {
            return Err(NetError::Config(format!(
                "{} is not set (host:port where rank 0 listens): {hint}",
                env::RENDEZVOUS
            )));
        }
        if let Some(j) = get(env::JOB_ID).filter(|s| !s.trim().is_empty()) {
            let t = j.trim().trim_start_matches("0x").replace('_', "");
            cfg.job_id = Some(JobId(u64::from_str_radix(&t, 16).map_err(|_| {
                NetError::Config(format!("{}={j:?} is not a 64-bit hex number", env::JOB_ID))
            })?));
        }
        if let Some(t) = get(env::TRANSPORT) {
            cfg.transport = t.parse()?;
        }
        cfg.read_common(&get)?;
        (cfg.auth, cfg.encrypt) = auth_from_lookup(&get)?;
        Ok(cfg)
    }

    /// The MPI case of [`NetConfig::from_lookup`]: no rendezvous; `SQUALL_RANK`/`SQUALL_SIZE`
    /// are ignored (a program may default them for one-node runs).
    #[cfg(feature = "mpi")]
    fn mpi_from_lookup(
        mut cfg: NetConfig,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<NetConfig, NetError> {
        cfg.transport = Transport::Mpi;
        let rank = mpi_launcher_rank(get).unwrap_or(0);
        let size = MPI_SIZE_VARS
            .iter()
            .find_map(|k| get(k).and_then(|v| v.trim().parse::<u16>().ok()))
            .unwrap_or(rank.saturating_add(1));
        cfg.rank = NodeId(rank);
        cfg.size = size.max(rank.saturating_add(1));
        if let Some(j) = get(env::JOB_ID).filter(|s| !s.trim().is_empty()) {
            let t = j.trim().trim_start_matches("0x").replace('_', "");
            cfg.job_id = Some(JobId(u64::from_str_radix(&t, 16).map_err(|_| {
                NetError::Config(format!("{}={j:?} is not a 64-bit hex number", env::JOB_ID))
            })?));
        }
        cfg.read_common(get)?;
        if auth_from_lookup(get)?.0.is_some() {
            // MPI carries the packets over its own channels; Squall does not seal them.
            return Err(NetError::Config(format!(
                "{} is on, but the mpi transport does not authenticate packets (MPI's own \
                 channels carry them): use {}=tcp or udp with authentication, or {}=off",
                env::AUTH,
                env::TRANSPORT,
                env::AUTH
            )));
        }
        Ok(cfg)
    }

    /// Faults, bind address, peer timeout, service slice and poll spin (every transport).
    fn read_common(&mut self, get: &impl Fn(&str) -> Option<String>) -> Result<(), NetError> {
        let cfg = self;
        if let Some(f) = get(env::NET_FAULTS).filter(|s| !s.trim().is_empty()) {
            let spec = FaultSpec::parse(&f)?;
            if cfg.transport == Transport::Tcp {
                spec.check_for_tcp()?;
            }
            cfg.faults = Some(spec);
        }
        if let Some(b) = get(env::BIND_ADDR).filter(|s| !s.trim().is_empty()) {
            cfg.bind_addr = b.trim().parse().map_err(|_| {
                NetError::Config(format!("{}={b:?} is not an IP address", env::BIND_ADDR))
            })?;
        }
        if let Some(t) = get(env::PEER_TIMEOUT_MS).filter(|s| !s.trim().is_empty()) {
            match t.trim().parse::<u64>() {
                Ok(ms) if ms >= 10 => cfg.peer_timeout = Duration::from_millis(ms),
                _ => {
                    return Err(NetError::Config(format!(
                        "{}={t:?} is not a number of milliseconds ≥ 10",
                        env::PEER_TIMEOUT_MS
                    )))
                }
            }
        }
        if let Some(t) = get(env::SERVICE_SLICE_US).filter(|s| !s.trim().is_empty()) {
            cfg.service_slice = match t.trim().parse::<u64>() {
                Ok(0) => None,
                Ok(us @ 100..=100_000) => Some(Duration::from_micros(us)),
                _ => {
                    return Err(NetError::Config(format!(
                    "{}={t:?}: give microseconds from 100 to 100000, or 0 for the kernel's default",
                    env::SERVICE_SLICE_US
                )))
                }
            };
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        cfg.poll_spin = poll_spin(get, cpus)?;
        if let Some(t) = get(env::REPLY_SPIN_US).filter(|s| !s.trim().is_empty()) {
            cfg.reply_spin = match t.trim().parse::<u64>() {
                Ok(0) => None,
                Ok(us @ 1..=10_000) => Some(Duration::from_micros(us)),
                _ => {
                    return Err(NetError::Config(format!(
                        "{}={t:?}: give microseconds from 1 to 10000, or 0 to sleep at once",
                        env::REPLY_SPIN_US
                    )))
                }
            };
        }
        Ok(())
    }
}

/// `SQUALL_POLL_SPIN_US`, or by default ("auto") [`DEFAULT_POLL_SPIN`] only when every node
/// of this machine (`SQUALL_LOCAL_NODES`) can have a CPU besides one for its application
/// thread: with nodes >= CPUs a lingering service thread takes the CPU that the thread it just
/// woke, or the peer that must answer, needs (measured on a loaded 2-CPU machine: no faster
/// round trip, more CPU per message).
fn poll_spin(
    get: &impl Fn(&str) -> Option<String>,
    cpus: usize,
) -> Result<Option<Duration>, NetError> {
    let v = get(env::POLL_SPIN_US).map(|v| v.trim().to_ascii_lowercase());
    match v.as_deref() {
        None | Some("" | "auto") => {
            let local = get(env::LOCAL_NODES)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(1)
                .max(1);
            Ok((local < cpus).then_some(DEFAULT_POLL_SPIN))
        }
        Some(t) => match t.parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(us @ 1..=1000) => Ok(Some(Duration::from_micros(us))),
            _ => Err(NetError::Config(format!(
                "{}={t:?}: give microseconds from 1 to 1000, 0 to never spin, or auto",
                env::POLL_SPIN_US
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<NetConfig, NetError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        NetConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn missing_variables_point_to_squall_run() {
        let e = cfg(&[]).expect_err("must fail").to_string();
        assert!(e.contains("squall run") && e.contains("SQUALL_SIZE"), "{e}");
        let e = cfg(&[("SQUALL_SIZE", "2"), ("SQUALL_RANK", "0")])
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("SQUALL_RENDEZVOUS"), "{e}");
        let e = cfg(&[("SQUALL_SIZE", "2"), ("SQUALL_RANK", "2")])
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("SQUALL_RANK"), "{e}");
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn mpi_launcher_variables_select_mpi() {
        // mpirun without squall's variables (a program may have defaulted SQUALL_SIZE=1).
        let c = cfg(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SQUALL_SIZE", "1"),
        ])
        .expect("mpi");
        assert_eq!(
            (c.transport, c.rank, c.size),
            (Transport::Mpi, NodeId(2), 4)
        );
        assert!(c.rendezvous.is_none());
        // srun: rank and task count from Slurm.
        let c = cfg(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).expect("srun");
        assert_eq!(
            (c.transport, c.rank, c.size),
            (Transport::Mpi, NodeId(1), 2)
        );
        // Explicit SQUALL_TRANSPORT=mpi without a launcher: a singleton.
        let c = cfg(&[("SQUALL_TRANSPORT", "mpi")]).expect("singleton");
        assert_eq!((c.rank, c.size), (NodeId(0), 1));
        // squall's own launcher wins over inherited MPI variables.
        let c = cfg(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("SQUALL_RANK", "1"),
            ("SQUALL_SIZE", "2"),
            ("SQUALL_RENDEZVOUS", "127.0.0.1:5000"),
        ])
        .expect("tcp");
        assert_eq!((c.transport, c.rank), (Transport::Tcp, NodeId(1)));
        let e = cfg(&[("SQUALL_TRANSPORT", "mpi"), ("SQUALL_NET_FAULTS", "loss=x")]);
        assert!(e.is_err());
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn mpi_without_the_feature_says_how_to_get_it() {
        let e = cfg(&[("OMPI_COMM_WORLD_RANK", "0")]).expect_err("no mpi");
        assert!(e.to_string().contains("--features mpi"), "{e}");
        let e = cfg(&[("SQUALL_SIZE", "1"), ("SQUALL_TRANSPORT", "mpi")]).expect_err("no mpi");
        assert!(e.to_string().contains("--features mpi"), "{e}");
    }

    #[test]
    fn single_node_and_full_parse() {
        let c = cfg(&[("SQUALL_SIZE", "1")]).expect("single");
        assert_eq!((c.rank, c.size), (NodeId(0), 1));
        let c = cfg(&[
            ("SQUALL_SIZE", "4"),
            ("SQUALL_RANK", "3"),
            ("SQUALL_RENDEZVOUS", "127.0.0.1:5000"),
            ("SQUALL_JOB_ID", "0xdeadbeef"),
            ("SQUALL_TRANSPORT", "udp"),
            ("SQUALL_NET_FAULTS", "loss=0.1"),
            ("SQUALL_PEER_TIMEOUT_MS", "500"),
        ])
        .expect("full");
        assert_eq!(c.job_id, Some(JobId(0xdead_beef)));
        assert_eq!(c.transport, Transport::Udp);
        assert_eq!(c.peer_timeout, Duration::from_millis(500));
        let e =
            cfg(&[("SQUALL_SIZE", "1"), ("SQUALL_NET_FAULTS", "loss=0.1")]).expect_err("must fail");
        assert!(e.to_string().contains("use SQUALL_TRANSPORT=udp"), "{e}");
    }

    #[test]
    fn auth_modes_and_keys() {
        let key = "ab".repeat(32);
        let base = [("SQUALL_SIZE", "1")];
        let with = |extra: &[(&str, &str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            cfg(&v)
        };
        assert_eq!(with(&[]).expect("default").auth, None);
        let c = with(&[("SQUALL_AUTH_KEY", &key)]).expect("auto with a key");
        assert_eq!(c.auth.map(|k| k.to_hex()), Some(key.clone()));
        let c = with(&[("SQUALL_AUTH", "off"), ("SQUALL_AUTH_KEY", &key)]).expect("off");
        assert_eq!(c.auth, None);
        let e = with(&[("SQUALL_AUTH", "on")]).expect_err("on without a key");
        assert!(e.to_string().contains("SQUALL_AUTH_KEY"), "{e}");
        let e = with(&[("SQUALL_AUTH", "maybe")]).expect_err("bad mode");
        assert!(e.to_string().contains("on, off, auto or encrypt"), "{e}");
        let c = with(&[("SQUALL_AUTH", "encrypt"), ("SQUALL_AUTH_KEY", &key)]).expect("encrypt");
        assert!(c.auth.is_some() && c.encrypt);
        let e = with(&[("SQUALL_AUTH", "encrypt")]).expect_err("encrypt without a key");
        assert!(
            e.to_string().contains("SQUALL_AUTH=encrypt but no key"),
            "{e}"
        );
        let e = with(&[("SQUALL_AUTH_KEY", "123")]).expect_err("short key");
        assert!(e.to_string().contains("SQUALL_AUTH_KEY"), "{e}");
        // A key file must be private.
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("squall-key-test-{}", std::process::id()));
        std::fs::write(&path, format!("{key}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let p = path.to_string_lossy().into_owned();
        let e = with(&[("SQUALL_AUTH", "on"), ("SQUALL_AUTH_KEY_FILE", &p)]).expect_err("0644");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let c = with(&[("SQUALL_AUTH", "on"), ("SQUALL_AUTH_KEY_FILE", &p)]).expect("0600");
        assert_eq!(c.auth.map(|k| k.to_hex()), Some(key));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn poll_spin_auto_off_and_range() {
        let with = |pairs: &[(&str, &str)]| {
            let m: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| m.get(k).cloned()
        };
        // Auto: only while the machine's nodes leave a CPU free.
        let auto = |nodes: &str, cpus| poll_spin(&with(&[("SQUALL_LOCAL_NODES", nodes)]), cpus);
        assert_eq!(auto("1", 2).expect("auto"), Some(DEFAULT_POLL_SPIN));
        assert_eq!(auto("2", 2).expect("auto"), None);
        assert_eq!(auto("2", 4).expect("auto"), Some(DEFAULT_POLL_SPIN));
        assert_eq!(
            poll_spin(&with(&[("SQUALL_POLL_SPIN_US", "auto")]), 1).expect("auto"),
            None
        );
        let spin = |v: &str| cfg(&[("SQUALL_SIZE", "1"), ("SQUALL_POLL_SPIN_US", v)]);
        assert_eq!(spin("0").expect("off").poll_spin, None);
        assert_eq!(
            spin(" 7 ").expect("7").poll_spin,
            Some(Duration::from_micros(7))
        );
        for bad in ["-1", "1001", "soon"] {
            let e = spin(bad).expect_err(bad);
            assert!(e.to_string().contains("SQUALL_POLL_SPIN_US"), "{e}");
        }
    }

    #[test]
    fn reply_spin_default_off_and_range() {
        let spin = |v: &str| cfg(&[("SQUALL_SIZE", "1"), ("SQUALL_REPLY_SPIN_US", v)]);
        let c = cfg(&[("SQUALL_SIZE", "1")]).expect("default");
        assert_eq!(c.reply_spin, Some(DEFAULT_REPLY_SPIN));
        assert_eq!(spin("0").expect("off").reply_spin, None);
        assert_eq!(
            spin(" 50 ").expect("50").reply_spin,
            Some(Duration::from_micros(50))
        );
        for bad in ["10001", "soon", "-1"] {
            let e = spin(bad).expect_err(bad);
            assert!(e.to_string().contains("SQUALL_REPLY_SPIN_US"), "{e}");
        }
    }

    #[test]
    fn service_slice_default_off_and_range() {
        let slice = |v: &str| cfg(&[("SQUALL_SIZE", "1"), ("SQUALL_SERVICE_SLICE_US", v)]);
        let c = cfg(&[("SQUALL_SIZE", "1")]).expect("default");
        assert_eq!(c.service_slice, Some(DEFAULT_SERVICE_SLICE));
        assert_eq!(slice("0").expect("off").service_slice, None);
        assert_eq!(
            slice(" 250 ").expect("250").service_slice,
            Some(Duration::from_micros(250))
        );
        for bad in ["50", "100001", "soon", "-1"] {
            let e = slice(bad).expect_err(bad);
            assert!(e.to_string().contains("SQUALL_SERVICE_SLICE_US"), "{e}");
        }
    }
}

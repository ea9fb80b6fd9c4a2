//! Runtime settings read from the environment (`SQUALL_PROTOCOL`, `SQUALL_PLACEMENT`,
//! `SQUALL_THREAD_PLACEMENT`,
//! `SQUALL_STATS`, `SQUALL_STATS_FILE`; the table is `squall_core::env::ALL`). Owns parsing and
//! the error messages for bad values; must not touch the network or memory.
use crate::error::{Result, SquallError};
use squall_core::{env, NodeId, Placement};
pub use squall_protocol::ProtocolKind;
use std::time::Duration;

/// Parse `hlrc` or `sc` (empty: `hlrc`).
pub fn parse_protocol(s: &str) -> Result<ProtocolKind> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" => Ok(ProtocolKind::Hlrc),
        other => other.parse().map_err(|_| {
            SquallError::Config(format!(
                "unknown protocol '{other}' in {}: use hlrc or sc",
                env::PROTOCOL
            ))
        }),
    }
}

/// Where an allocation's pages get their homes. `Local` is resolved to the allocating node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PlacementSpec {
    /// A placement that does not depend on who allocates.
    Fixed(Placement),
    /// Home = the allocating node (Tempest's local allocation).
    Local,
}

impl PlacementSpec {
    /// Parse `first-touch`, `round-robin[:PAGES]`, `blocked`, `node:N`, `local`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let bad = || {
            SquallError::Config(format!(
                "unknown placement '{s}': use first-touch, round-robin[:PAGES], blocked, node:N or local"
            ))
        };
        Ok(match s.as_str() {
            "first-touch" | "firsttouch" | "" => PlacementSpec::Fixed(Placement::FirstTouch),
            "blocked" => PlacementSpec::Fixed(Placement::Blocked),
            "local" => PlacementSpec::Local,
            "round-robin" => PlacementSpec::Fixed(Placement::RoundRobin { block_pages: 1 }),
            other => {
                if let Some(n) = other.strip_prefix("round-robin:") {
                    let block_pages = n.parse::<u64>().map_err(|_| bad())?.max(1);
                    PlacementSpec::Fixed(Placement::RoundRobin { block_pages })
                } else if let Some(n) = other.strip_prefix("node:") {
                    PlacementSpec::Fixed(Placement::Node(NodeId(n.parse().map_err(|_| bad())?)))
                } else {
                    return Err(bad());
                }
            }
        })
    }
    /// The placement for an allocation made by `me`.
    pub fn resolve(self, me: NodeId) -> Placement {
        match self {
            PlacementSpec::Fixed(p) => p,
            PlacementSpec::Local => Placement::Node(me),
        }
    }
}

/// Which node a thread created without a named node runs on (`Node::spawn_on(None, ..)`,
/// `pthread_create`, `squall_thread_create(SQUALL_ANY_NODE, ..)`). The k-th such thread a node
/// `r` creates (k counts from 0 over the node's life) runs on:
///
/// * `Even` (the default): node `(r + k + 1) mod N`. The creating thread counts as its node's
///   first, so `main` on node 0 plus P-1 created threads put P/N (+-1) threads on every node
///   (thread j of `main, t0, t1, ..` on node j mod N): `CREATE(fn, P)` and `for (i = 1; i < P;
///   i++) pthread_create(..)` spread evenly;
/// * `RoundRobin`: node `k mod N` (the rule before issue 20: node 0 gets main and the first
///   created thread, so `P = N` leaves the last node idle);
/// * `Local`: node `r` (every thread on its creator's node: one-node runs of a multi-node job).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThreadPlacement {
    Even,
    RoundRobin,
    Local,
}

impl ThreadPlacement {
    /// Every placement, by its name.
    pub const ALL: [ThreadPlacement; 3] = [
        ThreadPlacement::Even,
        ThreadPlacement::RoundRobin,
        ThreadPlacement::Local,
    ];

    /// Parse `even` (or empty), `round-robin`, `local`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "even" => Ok(ThreadPlacement::Even),
            "round-robin" | "roundrobin" => Ok(ThreadPlacement::RoundRobin),
            "local" => Ok(ThreadPlacement::Local),
            other => Err(SquallError::Config(format!(
                "unknown thread placement '{other}' in {}: use even, round-robin or local",
                env::THREAD_PLACEMENT
            ))),
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            ThreadPlacement::Even => "even",
            ThreadPlacement::RoundRobin => "round-robin",
            ThreadPlacement::Local => "local",
        }
    }

    /// The node of the `k`-th thread node `me` creates in a job of `size` nodes.
    pub fn target(self, me: NodeId, k: u64, size: u16) -> NodeId {
        let n = u64::from(size.max(1));
        let node = match self {
            ThreadPlacement::Even => (u64::from(me.0) + k + 1) % n,
            ThreadPlacement::RoundRobin => k % n,
            ThreadPlacement::Local => u64::from(me.0),
        };
        NodeId(node as u16)
    }
}

/// Settings of one node's runtime.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    pub protocol: ProtocolKind,
    pub placement: PlacementSpec,
    /// Where threads created without a named node run (`SQUALL_THREAD_PLACEMENT`).
    pub thread_placement: ThreadPlacement,
    pub stats: bool,
    pub stats_file: String,
    /// Record the sharing profile (`SQUALL_PROFILE`) and where rank 0 writes its JSON
    /// (`SQUALL_PROFILE_FILE`).
    pub profile: bool,
    pub profile_file: String,
    /// How long the service thread busy-waits for a page reply after a fault (`None`: never).
    pub fetch_spin: Option<Duration>,
    /// Total-count barriers report eagerly when a node's predicted threads arrived
    /// (`SQUALL_BARRIER_EAGER`, default on; see `squall_sync::SyncCore::set_barrier_eager_cap`).
    pub barrier_eager: bool,
    /// hlrc: most pages fetched at a barrier's release (`SQUALL_BARRIER_FETCH`; 0: none).
    pub barrier_fetch: usize,
    /// hlrc: homes push the pages they wrote to the copy holders at barriers
    /// (`SQUALL_PUSH_UPDATES`; `Hlrc::set_push_updates`).
    pub push_updates: bool,
    /// hlrc: a home page written lately stays writable when first shared, with a snapshot
    /// (`SQUALL_WATCH_SHARED`, default on; `Hlrc::set_watch_shared`).
    pub watch_shared: bool,
    /// hlrc: the coherence unit in pages of allocations that name no policy
    /// (`SQUALL_UNIT_PAGES`, default 1; `Policy::unit_pages`).
    pub unit_pages: u32,
    /// Idle lock tokens go into the node-local lock cache (`SQUALL_LOCK_CACHE`, default on;
    /// see `squall_sync::FastLocks`).
    pub lock_cache: bool,
    /// Cohort bound of locks (`SQUALL_LOCK_COHORT`, default
    /// `squall_sync::DEFAULT_LOCK_COHORT`; `SyncCore::set_lock_cohort`).
    pub lock_cohort: u32,
}

/// How long the service thread polls without sleeping after a fault sent a page request, when
/// the machine has a CPU to spare: a round trip is 20-90 us on the machines we measure, and a
/// reply read while spinning saves the thread wake-up that is a good part of it. Bounded, as a
/// busy home may answer late.
pub const DEFAULT_FETCH_SPIN: Duration = Duration::from_micros(150);

/// Nodes of this job on this machine: `SQUALL_LOCAL_NODES` (set by `squall run`), else the local
/// size an MPI launcher exports, else 1.
fn local_nodes(get: &impl Fn(&str) -> Option<String>) -> usize {
    [
        env::LOCAL_NODES,
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMI_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|k| get(k).and_then(|v| v.trim().parse::<usize>().ok()))
    .unwrap_or(1)
    .max(1)
}

/// `SQUALL_FETCH_SPIN_US`, or by default spin only when every local node can have a CPU of its
/// own besides the one its application thread uses: with nodes >= CPUs a spinning service
/// thread takes the CPU the other node's application thread (or its service thread, which
/// must answer) needs.
fn fetch_spin(get: &impl Fn(&str) -> Option<String>, cpus: usize) -> Result<Option<Duration>> {
    match get(env::FETCH_SPIN_US).map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if !v.is_empty() && v != "auto" => {
            let us: u64 = v.parse().map_err(|_| {
                SquallError::Config(format!(
                    "bad {} '{v}': give microseconds (0 = never spin) or auto",
                    env::FETCH_SPIN_US
                ))
            })?;
            Ok((us > 0).then(|| Duration::from_micros(us)))
        }
        _ => Ok((local_nodes(get) < cpus).then_some(DEFAULT_FETCH_SPIN)),
    }
}

/// An on/off variable: unset or empty gives `default`; `hint` says what 1 and 0 mean.
fn switch(
    get: &impl Fn(&str) -> Option<String>,
    var: &str,
    default: bool,
    hint: &str,
) -> Result<bool> {
    match get(var).as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("1" | "on" | "yes" | "true") => Ok(true),
        Some("0" | "off" | "no" | "false") => Ok(false),
        Some(v) => Err(SquallError::Config(format!("bad {var} '{v}': give {hint}"))),
    }
}

impl RuntimeConfig {
    /// Read the settings from the environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read the settings through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let protocol = parse_protocol(&get(env::PROTOCOL).unwrap_or_default())?;
        let placement = PlacementSpec::parse(&get(env::PLACEMENT).unwrap_or_default())
            .map_err(|e| SquallError::Config(format!("{e} (in {})", env::PLACEMENT)))?;
        let thread_placement =
            ThreadPlacement::parse(&get(env::THREAD_PLACEMENT).unwrap_or_default())?;
        let stats = matches!(
            get(env::STATS).unwrap_or_default().trim(),
            "1" | "true" | "yes" | "on"
        );
        let stats_file = get(env::STATS_FILE).unwrap_or_else(|| "squall-stats.json".into());
        let profile = matches!(
            get(env::PROFILE).unwrap_or_default().trim(),
            "1" | "true" | "yes" | "on"
        );
        let profile_file = get(env::PROFILE_FILE).unwrap_or_else(|| "squall-profile.json".into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fetch_spin = fetch_spin(&get, cpus)?;
        let barrier_eager = switch(
            &get,
            env::BARRIER_EAGER,
            true,
            "1 (eager total-count barriers) or 0 (collect first)",
        )?;
        let lock_cache = switch(
            &get,
            env::LOCK_CACHE,
            true,
            "1 (the node-local lock cache) or 0 (every lock through the core)",
        )?;
        let lock_cohort = match get(env::LOCK_COHORT).as_deref().map(str::trim) {
            None | Some("") => squall_sync::DEFAULT_LOCK_COHORT,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= 1_000_000)
                .ok_or_else(|| {
                    SquallError::Config(format!(
                        "bad {} '{v}': give a number of critical sections from 0 (strict order) to 1000000",
                        env::LOCK_COHORT
                    ))
                })?,
        };
        let barrier_fetch = match get(env::BARRIER_FETCH).as_deref().map(str::trim) {
            None | Some("") => squall_protocol::hlrc::DEFAULT_BARRIER_FETCH,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= 65535)
                .ok_or_else(|| {
                    SquallError::Config(format!(
                        "bad {} '{v}': give a number of pages from 0 (off) to 65535",
                        env::BARRIER_FETCH
                    ))
                })?,
        };
        let push_updates = switch(
            &get,
            env::PUSH_UPDATES,
            false,
            "1 (homes push updates at barriers) or 0 (invalidate)",
        )?;
        let watch_shared = switch(
            &get,
            env::WATCH_SHARED,
            true,
            "1 (shared home pages stay writable, with a snapshot) or 0 (write-protect them)",
        )?;
        let unit_pages = match get(env::UNIT_PAGES).as_deref().map(str::trim) {
            None | Some("") => 1,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| n.is_power_of_two() && *n <= squall_protocol::MAX_UNIT_PAGES)
                .ok_or_else(|| {
                    SquallError::Config(format!(
                        "bad {} '{v}': give a power of two from 1 to {} (pages)",
                        env::UNIT_PAGES,
                        squall_protocol::MAX_UNIT_PAGES
                    ))
                })?,
        };
        if unit_pages > 1 && (protocol != ProtocolKind::Hlrc || push_updates) {
            return Err(SquallError::Config(format!(
                "{}={unit_pages}: coherence units of several pages are kept by hlrc without updates (set {}=hlrc and unset {})",
                env::UNIT_PAGES,
                env::PROTOCOL,
                env::PUSH_UPDATES
            )));
        }
        Ok(RuntimeConfig {
            protocol,
            placement,
            thread_placement,
            stats,
            stats_file,
            profile,
            profile_file,
            fetch_spin,
            barrier_eager,
            barrier_fetch,
            push_updates,
            watch_shared,
            unit_pages,
            lock_cache,
            lock_cohort,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placements_and_protocols() {
        assert_eq!(
            PlacementSpec::parse("blocked").ok(),
            Some(PlacementSpec::Fixed(Placement::Blocked))
        );
        assert_eq!(
            PlacementSpec::parse("round-robin:4").ok(),
            Some(PlacementSpec::Fixed(Placement::RoundRobin {
                block_pages: 4
            }))
        );
        assert_eq!(
            PlacementSpec::parse("node:3").ok(),
            Some(PlacementSpec::Fixed(Placement::Node(NodeId(3))))
        );
        assert_eq!(
            PlacementSpec::parse("local")
                .ok()
                .map(|p| p.resolve(NodeId(2))),
            Some(Placement::Node(NodeId(2)))
        );
        assert!(PlacementSpec::parse("everywhere").is_err());
        assert_eq!(parse_protocol("SC").ok(), Some(ProtocolKind::Sc));
        assert_eq!(parse_protocol("").ok(), Some(ProtocolKind::Hlrc));
        assert!(parse_protocol("mesi").is_err());
    }

    #[test]
    fn thread_placements_spread_as_documented() {
        let per_node = |p: ThreadPlacement, threads: u64, size: u16| {
            // main on node 0, then threads-1 created by node 0.
            let mut count = vec![0u32; usize::from(size)];
            count[0] += 1;
            for k in 0..threads - 1 {
                count[usize::from(p.target(NodeId(0), k, size).0)] += 1;
            }
            count
        };
        assert_eq!(per_node(ThreadPlacement::Even, 4, 4), [1, 1, 1, 1]);
        assert_eq!(per_node(ThreadPlacement::Even, 6, 4), [2, 2, 1, 1]);
        assert_eq!(per_node(ThreadPlacement::Even, 4, 2), [2, 2]);
        assert_eq!(per_node(ThreadPlacement::RoundRobin, 4, 4), [2, 1, 1, 0]);
        assert_eq!(per_node(ThreadPlacement::Local, 3, 4), [3, 0, 0, 0]);
        assert_eq!(
            ThreadPlacement::Even.target(NodeId(2), 0, 4),
            NodeId(3),
            "a thread on node 2 counts as its node's first"
        );
        for p in ThreadPlacement::ALL {
            assert_eq!(ThreadPlacement::parse(p.name()).ok(), Some(p));
        }
        assert_eq!(ThreadPlacement::parse("").ok(), Some(ThreadPlacement::Even));
        let e = ThreadPlacement::parse("scatter").expect_err("unknown");
        assert!(e.to_string().contains("SQUALL_THREAD_PLACEMENT"), "{e}");
        let cfg = RuntimeConfig::from_lookup(|k| {
            (k == env::THREAD_PLACEMENT).then(|| "round-robin".to_string())
        })
        .expect("config");
        assert_eq!(cfg.thread_placement, ThreadPlacement::RoundRobin);
    }

    #[test]
    fn unit_pages_default_one_powers_of_two_under_hlrc_only() {
        let unit = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            RuntimeConfig::from_lookup(|k| {
                vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
            .map(|c| c.unit_pages)
        };
        assert_eq!(unit(&[]).expect("default"), 1);
        assert_eq!(unit(&[(env::UNIT_PAGES, "16")]).expect("16"), 16);
        for bad in ["3", "0", "128", "four"] {
            let e = unit(&[(env::UNIT_PAGES, bad)]).expect_err(bad);
            assert!(e.to_string().contains("SQUALL_UNIT_PAGES"), "{e}");
        }
        assert!(unit(&[(env::UNIT_PAGES, "4"), (env::PROTOCOL, "sc")]).is_err());
        assert!(unit(&[(env::UNIT_PAGES, "4"), (env::PUSH_UPDATES, "1")]).is_err());
        assert_eq!(
            unit(&[(env::UNIT_PAGES, "1"), (env::PROTOCOL, "sc")]).expect("sc, one page"),
            1
        );
    }

    #[test]
    fn push_updates_default_off_and_switch() {
        let push = |v: &str| {
            RuntimeConfig::from_lookup(|k| (k == env::PUSH_UPDATES).then(|| v.to_string()))
                .map(|c| c.push_updates)
        };
        assert!(!push("").expect("default"));
        assert!(push("1").expect("on"));
        assert!(!push(" off ").expect("off"));
        let e = push("2").expect_err("bad value");
        assert!(e.to_string().contains("SQUALL_PUSH_UPDATES"), "{e}");
    }

    #[test]
    fn barrier_eager_default_on_and_switch() {
        let eager = |v: Option<&str>| {
            RuntimeConfig::from_lookup(|k| {
                (k == env::BARRIER_EAGER)
                    .then(|| v.map(str::to_string))
                    .flatten()
            })
            .map(|c| c.barrier_eager)
        };
        assert!(eager(None).expect("default"));
        assert!(eager(Some(" on ")).expect("on"));
        assert!(!eager(Some("0")).expect("off"));
        let e = eager(Some("maybe")).expect_err("bad value");
        assert!(e.to_string().contains("SQUALL_BARRIER_EAGER"), "{e}");
    }

    #[test]
    fn barrier_fetch_takes_a_page_count_up_to_65535() {
        let fetch = |v: &str| {
            RuntimeConfig::from_lookup(|k| (k == env::BARRIER_FETCH).then(|| v.to_string()))
                .map(|c| c.barrier_fetch)
        };
        assert_eq!(fetch("0").ok(), Some(0));
        assert_eq!(fetch(" 64 ").ok(), Some(64));
        assert!(fetch("65536").is_err() && fetch("all").is_err());
    }

    #[test]
    fn fetch_spin_is_off_when_local_nodes_fill_the_cpus() {
        let with = |pairs: &[(&str, &str)]| {
            let m: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| m.get(k).cloned()
        };
        let spin = |pairs: &[(&str, &str)], cpus| fetch_spin(&with(pairs), cpus).ok().flatten();
        assert_eq!(
            spin(&[], 2),
            Some(DEFAULT_FETCH_SPIN),
            "one local node, two CPUs"
        );
        assert_eq!(spin(&[], 1), None, "one CPU");
        assert_eq!(spin(&[(env::LOCAL_NODES, "2")], 2), None);
        assert_eq!(
            spin(&[(env::LOCAL_NODES, "2")], 4),
            Some(DEFAULT_FETCH_SPIN)
        );
        assert_eq!(spin(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "4")], 4), None);
        assert_eq!(
            spin(&[(env::LOCAL_NODES, "8"), (env::FETCH_SPIN_US, "40")], 2),
            Some(Duration::from_micros(40))
        );
        assert_eq!(spin(&[(env::FETCH_SPIN_US, "0")], 8), None);
        assert!(fetch_spin(&with(&[(env::FETCH_SPIN_US, "soon")]), 2).is_err());
    }
}

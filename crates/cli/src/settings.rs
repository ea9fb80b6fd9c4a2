//! Checking the settings of a job before any node starts: every `SQUALL_*` variable of the
//! environment (through the same parsers the nodes use: `squall_net::NetConfig`,
//! `squall::RuntimeConfig`, `squall_memory::SpaceConfig`, plus the bounds those leave to the
//! machine), so a bad value is one error naming the variable and its fix, exit status 2,
//! instead of N nodes failing one by one. Used by `squall run`, `squall demo` and `squall
//! doctor`. Owns the wording of these errors; reads the machine only through [`Machine`], so
//! tests inject every value.
use squall_core::env::{self, EnvVar, ALL};
use std::collections::BTreeMap;
use std::fmt;

/// One bad setting: which one, what is wrong, how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    /// The variable or option, e.g. `SQUALL_HEAP_SIZE` or `--nodes`.
    pub setting: String,
    pub problem: String,
    pub fix: String,
}

impl Bad {
    pub fn new(
        setting: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Bad {
        Bad {
            setting: setting.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Bad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}\n  fix: {}", self.setting, self.problem, self.fix)
    }
}

/// Print every problem as `squall CMD: SETTING: PROBLEM` + `fix: ...` on stderr; returns the
/// usage-error exit status 2 (for `return report(...)`).
pub fn report(cmd: &str, bad: &[Bad]) -> i32 {
    for b in bad {
        eprintln!("squall {cmd}: {b}");
    }
    2
}

/// What the checks need to know about this machine (read by [`Machine::this`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// Bits of user virtual address space: 47 with 4-level page tables, 56 with 5-level.
    pub va_bits: u32,
    /// Soft `RLIMIT_AS` in bytes, `None` when unlimited.
    pub rlimit_as: Option<u64>,
}

impl Machine {
    /// This machine: 5-level paging when the CPU has `la57` and the kernel uses it, the
    /// address-space limit from /proc/self/limits.
    pub fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let la57 = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|w| w == "la57"));
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        Machine {
            va_bits: if la57 { 56 } else { 47 },
            rlimit_as: soft_limit(&limits, "Max address space"),
        }
    }
}

/// The soft limit of the line starting with `name` in /proc/self/limits text (`None`:
/// unlimited or not found).
pub fn soft_limit(limits: &str, name: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The job the settings are for.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub nodes: usize,
    /// `tcp`, `udp` or `mpi`.
    pub transport: &'a str,
    /// Every node runs on this machine (its limits and files are the nodes').
    pub local: bool,
}

/// Variables the launcher sets for every node (the user's values are replaced).
const LAUNCHER_SET: &[&str] = &[
    env::RANK,
    env::SIZE,
    env::RENDEZVOUS,
    env::JOB_ID,
    env::TRANSPORT,
    env::LOCAL_NODES,
];

/// Variables only `squall bench apps` reads (checked by `bench::check`, not for every job).
pub const BENCH_ONLY: &[&str] = &[env::APPS_BIN, env::PLOT_FONT];

/// Upper bounds beyond which a time setting is a mistake (and could overflow a deadline).
const MAX_PEER_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
const MAX_FETCH_SPIN_US: u64 = 1_000_000;

/// The `SQUALL_*` variables of the process environment.
pub fn squall_vars() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| k.starts_with("SQUALL_"))
        .collect()
}

fn table_entry(name: &str) -> Option<&'static EnvVar> {
    ALL.iter().find(|v| v.name == name)
}

/// The fix for a bad value of the table variable `name`.
fn fix_for(name: &str) -> String {
    match table_entry(name) {
        Some(v) => format!(
            "unset {name} for its default ({}), or give a valid value: {} (`squall env` lists every setting)",
            v.default, v.meaning
        ),
        None => format!("unset {name}"),
    }
}

/// Edit distance (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A variable Squall does not read whose name is close to one it does (a misspelt knob is
/// silently ignored otherwise): the known names it may have meant.
pub fn near_misses(name: &str) -> Vec<&'static str> {
    if table_entry(name).is_some() {
        return Vec::new();
    }
    ALL.iter()
        .map(|v| v.name)
        .filter(|known| {
            distance(name, known) <= 1
                || known
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('_'))
        })
        .collect()
}

/// Check every `SQUALL_*` variable in `vars` for a job `job` on `machine`.
pub fn check_env(vars: &BTreeMap<String, String>, job: Job, machine: Machine) -> Vec<Bad> {
    let mut bad = Vec::new();
    for name in vars.keys() {
        let near = near_misses(name);
        if !near.is_empty() {
            bad.push(Bad::new(
                name.as_str(),
                format!(
                    "Squall reads no such variable (did you mean {}?)",
                    near.join(" or ")
                ),
                format!(
                    "rename it to {} (`squall env` lists every setting)",
                    near[0]
                ),
            ));
        }
    }
    let size = job.nodes.clamp(1, usize::from(u16::MAX)).to_string();
    let launcher = |k: &str| -> Option<String> {
        match k {
            _ if k == env::RANK => Some("0".into()),
            _ if k == env::SIZE => Some(size.clone()),
            _ if k == env::RENDEZVOUS => Some("127.0.0.1:1".into()),
            _ if k == env::TRANSPORT => Some(job.transport.to_string()),
            // `squall run` makes the job key whenever authentication is on.
            _ if k == env::AUTH_KEY && !vars.contains_key(env::AUTH_KEY_FILE) => {
                Some("0".repeat(64))
            }
            _ => None,
        }
    };
    // What the parsers say with the launcher's variables alone (a transport this build
    // lacks is the launcher's error, not a variable's).
    let baseline = parse_all(&|k| launcher(k));
    for v in ALL {
        let name = v.name;
        if LAUNCHER_SET.contains(&name) || BENCH_ONLY.contains(&name) || !vars.contains_key(name) {
            continue;
        }
        let value = vars.get(name).cloned().unwrap_or_default();
        let get = |k: &str| {
            if k == name {
                vars.get(k).cloned()
            } else {
                launcher(k)
            }
        };
        let errs: Vec<String> = parse_all(&get)
            .into_iter()
            .filter(|e| !baseline.contains(e))
            .collect();
        if let Some(e) = errs.first() {
            bad.push(Bad::new(name, e.clone(), fix_for(name)));
            continue;
        }
        if let Some(problem) = extra_check(name, value.trim(), vars, job, machine) {
            bad.push(Bad::new(name, problem.0, problem.1));
        }
    }
    bad
}

/// Errors of the three parsers the nodes run, as text.
fn parse_all(get: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut errs = Vec::new();
    if let Err(e) = squall_net::NetConfig::from_lookup(get) {
        errs.push(e.to_string());
    }
    if let Err(e) = squall::RuntimeConfig::from_lookup(get) {
        errs.push(e.to_string());
    }
    if let Err(e) = squall_memory::SpaceConfig::from_lookup(get) {
        errs.push(e.to_string());
    }
    errs
}

fn is_switch(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "" | "0" | "1" | "on" | "off" | "yes" | "no" | "true" | "false"
    )
}

/// `1.5G`-style byte counts (binary units).
pub use squall_core::human_bytes as human;

/// The heap's base and size as the nodes will use them.
pub fn heap(vars: &BTreeMap<String, String>) -> (u64, u64) {
    let base = vars
        .get(env::HEAP_BASE)
        .and_then(|v| squall_memory::parse_addr(v))
        .unwrap_or(squall_memory::DEFAULT_BASE) as u64;
    let size = vars
        .get(env::HEAP_SIZE)
        .and_then(|v| squall_memory::parse_size(v))
        .unwrap_or(squall_memory::DEFAULT_SIZE) as u64;
    (base, size)
}

/// Virtual memory a node maps for a heap of `size`: the application view and the backdoor
/// view of the same memory file, plus 1 GiB for the program, its libraries and private stacks.
pub fn node_address_space(size: u64) -> u64 {
    size.saturating_mul(2).saturating_add(1 << 30)
}

/// Bounds the parsers leave to the machine and the job; `(problem, fix)`.
fn extra_check(
    name: &str,
    value: &str,
    vars: &BTreeMap<String, String>,
    job: Job,
    machine: Machine,
) -> Option<(String, String)> {
    let uint = |v: &str| v.parse::<u64>().ok();
    match name {
        n if n == env::HEAP_SIZE || n == env::HEAP_BASE => {
            let (base, size) = heap(vars);
            let top = 1u64 << machine.va_bits;
            // Reported once: on the size when both are set.
            let owner = n == env::HEAP_SIZE || !vars.contains_key(env::HEAP_SIZE);
            if owner && base.saturating_add(size) > top {
                let room = top.saturating_sub(base);
                return Some((
                    format!(
                        "the global range {base:#x} + {} ends past the top of the user address \
                         space ({}, {}-bit)",
                        human(size),
                        human(top),
                        machine.va_bits
                    ),
                    format!(
                        "lower {} to at most {} with this base, or lower {}",
                        env::HEAP_SIZE,
                        human(room & !0xfff),
                        env::HEAP_BASE
                    ),
                ));
            }
            let room = squall_memory::max_range(base as usize) as u64;
            if owner && (base as usize) < squall_memory::SYMMETRIC_BASE && size > room {
                return Some((
                    format!(
                        "the global range {base:#x} + {} runs into the symmetric arena of \
                         one-sided operations at {:#x}",
                        human(size),
                        squall_memory::SYMMETRIC_BASE
                    ),
                    format!(
                        "lower {} to at most {} with this base",
                        env::HEAP_SIZE,
                        human(room & !0xfff)
                    ),
                ));
            }
            if n == env::HEAP_SIZE {
                let per_node = size / job.nodes.max(1) as u64;
                if per_node < squall_core::PAGE_SIZE as u64 {
                    return Some((
                        format!(
                            "{} over {} nodes leaves each node's arena less than a page",
                            human(size),
                            job.nodes
                        ),
                        format!("raise {} (the default is 64G)", env::HEAP_SIZE),
                    ));
                }
                if let Some(limit) = machine.rlimit_as.filter(|_| job.local) {
                    let need = node_address_space(size);
                    if need > limit {
                        return Some((
                            format!(
                                "a node maps {} of address space for this heap (two views of {}), \
                                 but the address-space limit (ulimit -v) is {}",
                                human(need),
                                human(size),
                                human(limit)
                            ),
                            format!(
                                "lower {} to at most {}, or raise the limit: ulimit -v unlimited",
                                env::HEAP_SIZE,
                                human((limit.saturating_sub(1 << 30) / 2) & !0xfff)
                            ),
                        ));
                    }
                }
            }
            None
        }
        n if n == env::PLACEMENT => {
            let node = value.to_ascii_lowercase();
            let node = node.strip_prefix("node:")?.trim().parse::<usize>().ok()?;
            (node >= job.nodes).then(|| {
                (
                    format!("node {node} is not in this job of {} nodes", job.nodes),
                    format!(
                        "give node:0 to node:{}, or another placement",
                        job.nodes.saturating_sub(1)
                    ),
                )
            })
        }
        n if n == env::STATS => (!is_switch(value)).then(|| {
            (
                format!("{value:?} is neither on nor off"),
                format!("give {n}=1 (print statistics at exit) or {n}=0"),
            )
        }),
        n if n == env::SHMEM_SYMMETRIC_SIZE => {
            squall_memory::parse_size(value).is_none().then(|| {
                (
                    format!("{value:?} is not a size"),
                    format!("give {n} a size such as 512M or 2G (the default is 1G)"),
                )
            })
        }
        n if n == env::PROFILE => (!is_switch(value)).then(|| {
            (
                format!("{value:?} is neither on nor off"),
                format!("give {n}=1 (sharing profile at exit) or {n}=0"),
            )
        }),
        n if n == env::STATS_FILE || n == env::PROFILE_FILE => {
            if !job.local {
                return None; // a remote node's path: its own machine's business
            }
            if value.is_empty() {
                return Some((
                    "is empty".into(),
                    format!("unset {n} for squall-stats.json, or name a file"),
                ));
            }
            let path = std::path::Path::new(value);
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if path.is_dir() {
                return Some((
                    format!("{value} is a directory"),
                    format!(
                        "name a file, e.g. {n}={}/squall-stats.json",
                        value.trim_end_matches('/')
                    ),
                ));
            }
            (!dir.is_dir()).then(|| {
                (
                    format!("the directory {} does not exist", dir.display()),
                    format!(
                        "create it (mkdir -p {}) or point {n} elsewhere",
                        dir.display()
                    ),
                )
            })
        }
        n if n == env::MPI_HEADERLESS || n == env::MPI_SHM => (!matches!(value, "" | "0" | "1"))
            .then(|| {
                (
                    format!("{value:?} is neither 0 nor 1"),
                    format!("give {n}=0 or {n}=1 (or unset it for the default)"),
                )
            }),
        n if n == env::MPI_SHM_GROUPS => match uint(value) {
            Some(1..=65535) => None,
            _ => Some((
                format!("{value:?} is not a group count from 1 to 65535"),
                format!("give {n}=1 (the default) or a small k > 1"),
            )),
        },
        n if n == env::PEER_TIMEOUT_MS => match uint(value) {
            Some(ms) if ms > MAX_PEER_TIMEOUT_MS => Some((
                format!("{ms} ms is more than a day: a lost node would hang the job that long"),
                format!("give {n} from 10 to {MAX_PEER_TIMEOUT_MS} (default 3000)"),
            )),
            _ => None,
        },
        n if n == env::FETCH_SPIN_US => match uint(value) {
            Some(us) if us > MAX_FETCH_SPIN_US => Some((
                format!("{us} µs of busy-waiting per fault is more than a second"),
                format!("give {n}=auto, 0, or up to {MAX_FETCH_SPIN_US}"),
            )),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MACHINE: Machine = Machine {
        va_bits: 47,
        rlimit_as: None,
    };
    const JOB: Job = Job {
        nodes: 2,
        transport: "tcp",
        local: true,
    };

    fn check(vars: &[(&str, &str)]) -> Vec<Bad> {
        let m = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        check_env(&m, JOB, MACHINE)
    }

    #[test]
    fn good_values_pass() {
        assert!(check(&[]).is_empty());
        let ok = check(&[
            ("SQUALL_HEAP_SIZE", "4G"),
            ("SQUALL_PROTOCOL", "sc"),
            ("SQUALL_STATS", "1"),
            ("SQUALL_PEER_TIMEOUT_MS", "5000"),
            ("SQUALL_RANK", "not a rank: the launcher replaces it"),
            (
                "SQUALL_TEST_ROLE",
                "unrelated variables are not ours to judge",
            ),
        ]);
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn each_bad_value_names_its_variable() {
        for (var, value) in [
            ("SQUALL_HEAP_SIZE", "lots"),
            ("SQUALL_HEAP_SIZE", "100T"),
            ("SQUALL_HEAP_BASE", "0x1001"),
            ("SQUALL_PROTOCOL", "mesi"),
            ("SQUALL_PLACEMENT", "everywhere"),
            ("SQUALL_PLACEMENT", "node:2"),
            ("SQUALL_THREAD_PLACEMENT", "sideways"),
            ("SQUALL_NET_FAULTS", "loss=2"),
            ("SQUALL_BIND_ADDR", "not-an-ip"),
            ("SQUALL_PEER_TIMEOUT_MS", "1"),
            ("SQUALL_PEER_TIMEOUT_MS", "99999999999999"),
            ("SQUALL_STATS", "maybe"),
            ("SQUALL_STATS_FILE", "/no/such/dir/s.json"),
            ("SQUALL_FETCH_SPIN_US", "soon"),
            ("SQUALL_FETCH_SPIN_US", "99999999999"),
            ("SQUALL_MPI_HEADERLESS", "2"),
            ("SQUALL_MPI_SHM", "yes please"),
            ("SQUALL_MPI_SHM_GROUPS", "0"),
            ("SQUALL_SERVICE_SLICE_US", "5"),
            ("SQUALL_BARRIER_EAGER", "sometimes"),
            ("SQUALL_LOCK_CACHE", "2"),
            ("SQUALL_BARRIER_FETCH", "-1"),
            ("SQUALL_PUSH_UPDATES", "push"),
            ("SQUALL_UNIT_PAGES", "3"),
            ("SQUALL_HEAP", "100T"),
        ] {
            let bad = check(&[(var, value)]);
            assert_eq!(bad.len(), 1, "{var}={value}: {bad:?}");
            assert_eq!(bad[0].setting, var, "{var}={value}: {bad:?}");
            assert!(!bad[0].fix.is_empty());
        }
    }

    #[test]
    fn every_user_variable_is_checked() {
        // A value no variable accepts: each table variable a user may set is refused.
        for v in ALL {
            if LAUNCHER_SET.contains(&v.name) || BENCH_ONLY.contains(&v.name) {
                continue;
            }
            let value = if v.name == env::STATS_FILE || v.name == env::PROFILE_FILE {
                "/no/such/dir/x"
            } else {
                "\u{1}bogus"
            };
            let bad = check(&[(v.name, value)]);
            assert!(
                bad.iter().any(|b| b.setting == v.name),
                "{} accepts {value:?}: add its check",
                v.name
            );
        }
    }

    #[test]
    fn heap_bounds_come_from_the_machine() {
        let vars: BTreeMap<String, String> =
            [("SQUALL_HEAP_SIZE".to_string(), "100T".to_string())].into();
        let la57 = Machine {
            va_bits: 56,
            rlimit_as: None,
        };
        // Below the symmetric arena only 8T fit at the default base; above it, 56 bits hold 100T.
        let bad = check_env(&vars, JOB, la57);
        assert!(bad[0].problem.contains("symmetric arena"), "{bad:?}");
        assert!(bad[0].fix.contains("8T"), "{bad:?}");
        let mut above = vars.clone();
        above.insert("SQUALL_HEAP_BASE".into(), "0x600000000000".into());
        assert!(check_env(&above, JOB, la57).is_empty(), "fits in 56 bits");
        let bad = check_env(&vars, JOB, MACHINE);
        assert!(bad[0].fix.contains("48T"), "{bad:?}");
        let vars: BTreeMap<String, String> =
            [("SQUALL_HEAP_SIZE".to_string(), "64G".to_string())].into();
        let limited = Machine {
            va_bits: 47,
            rlimit_as: Some(8 << 30),
        };
        let bad = check_env(&vars, JOB, limited);
        assert!(bad[0].problem.contains("ulimit -v"), "{bad:?}");
        assert!(
            bad[0].fix.contains("3.5G") || bad[0].fix.contains("3584M"),
            "{bad:?}"
        );
        let tiny: BTreeMap<String, String> =
            [("SQUALL_HEAP_SIZE".to_string(), "8K".to_string())].into();
        assert_eq!(
            check_env(
                &tiny,
                Job {
                    nodes: 4,
                    transport: "tcp",
                    local: true
                },
                MACHINE
            )
            .len(),
            1
        );
    }

    #[test]
    fn remote_jobs_skip_this_machines_files_and_limits() {
        let vars: BTreeMap<String, String> = [
            (
                "SQUALL_STATS_FILE".to_string(),
                "/no/such/dir/s.json".to_string(),
            ),
            ("SQUALL_HEAP_SIZE".to_string(), "64G".to_string()),
        ]
        .into();
        let limited = Machine {
            va_bits: 47,
            rlimit_as: Some(8 << 30),
        };
        let remote = Job {
            local: false,
            ..JOB
        };
        assert!(check_env(&vars, remote, limited).is_empty());
        assert_eq!(check_env(&vars, JOB, limited).len(), 2);
    }

    #[test]
    fn limits_file_is_read() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63432                63432                processes \n\
                    Max address space         8589934592           unlimited            bytes     \n";
        assert_eq!(soft_limit(text, "Max address space"), Some(8 << 30));
        assert_eq!(soft_limit(text, "Max processes"), Some(63432));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(soft_limit(unlimited, "Max address space"), None);
    }

    #[test]
    fn near_misses_suggest_the_real_name() {
        assert_eq!(
            near_misses("SQUALL_HEAP"),
            vec!["SQUALL_HEAP_SIZE", "SQUALL_HEAP_BASE"]
        );
        assert_eq!(near_misses("SQUALL_PROTOCOLL"), vec!["SQUALL_PROTOCOL"]);
        assert!(near_misses("SQUALL_PROTOCOL").is_empty());
        // The variables the repository's tests, scripts and Makefiles use are not flagged.
        for other in [
            "SQUALL_TEST_ROLE",
            "SQUALL_MEMORY_ROLE",
            "SQUALL_DSM_LAUNCHER",
            "SQUALL_LIBDIR",
            "SQUALL_BLESS",
            "SQUALL_SIM_SEEDS",
            "SQUALL_SIM_LONG_SEEDS",
            "SQUALL_SIM_START",
            "SQUALL_TEST_APPS_SIZE",
            "SQUALL_TEST_SPLASH_NODES",
            "SQUALL_MPI_TARGET_DIR",
            "SQUALL_RUN",
            "SQUALL_PREFIX",
            "SQUALL_CFLAGS",
            "SQUALL_LDLIBS",
        ] {
            assert!(
                near_misses(other).is_empty(),
                "{other}: {:?}",
                near_misses(other)
            );
        }
    }
}

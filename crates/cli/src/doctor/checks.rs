//! The checks of `squall doctor` as pure functions of the values read from the machine (see
//! `mod.rs` for the reading), so each verdict and fix is tested with injected inputs. Owns
//! the verdicts and their wording; must not read the machine.
use serde::Serialize;

/// How a check came out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Status,
    pub detail: String,
    /// What to do about it (empty when ok).
    pub fix: String,
}

impl Check {
    pub fn ok(check: &str, detail: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            status: Status::Ok,
            detail: detail.into(),
            fix: String::new(),
        }
    }
    pub fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            status: Status::Warn,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
    pub fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            status: Status::Fail,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

pub use crate::settings::human;

/// What is known about userfaultfd on this machine.
#[derive(Clone, Debug, Default)]
pub struct UffdFacts {
    /// Kernel version (major, minor) from /proc/sys/kernel/osrelease.
    pub kernel: Option<(u32, u32)>,
    /// `vm.unprivileged_userfaultfd`.
    pub unprivileged: Option<u32>,
    /// /dev/userfaultfd exists and this user may open it read-write.
    pub dev_usable: bool,
    /// Effective uid 0.
    pub root: bool,
    /// CAP_SYS_PTRACE in the effective set.
    pub cap_ptrace: bool,
    /// Reserving a small global range (userfaultfd, its features, memfd, mapping): `Err`
    /// holds the error Squall would print. `None`: not tried.
    pub probe: Option<Result<(), String>>,
}

/// Squall needs userfaultfd with the shmem minor and write-protect features (Linux 5.19+),
/// opened by the syscall or /dev/userfaultfd.
pub fn userfaultfd(f: &UffdFacts) -> Check {
    const NAME: &str = "userfaultfd";
    let permit_fix = "sudo sysctl -w vm.unprivileged_userfaultfd=1 (keep it with a line in \
                      /etc/sysctl.d/99-squall.conf), or give your user read-write access to \
                      /dev/userfaultfd (Linux 6.1+), or run as root";
    if let Some((maj, min)) = f.kernel {
        if (maj, min) < (5, 19) {
            return Check::fail(
                NAME,
                format!(
                    "linux {maj}.{min} lacks userfaultfd's shmem minor and write-protect faults"
                ),
                "run on Linux 5.19 or newer",
            );
        }
    }
    let permitted = f.root || f.cap_ptrace || f.unprivileged == Some(1) || f.dev_usable;
    let how = if f.root {
        "as root"
    } else if f.cap_ptrace {
        "with CAP_SYS_PTRACE"
    } else if f.unprivileged == Some(1) {
        "vm.unprivileged_userfaultfd=1"
    } else if f.dev_usable {
        "through /dev/userfaultfd"
    } else {
        ""
    };
    match &f.probe {
        Some(Ok(())) => Check::ok(
            NAME,
            format!(
                "available and permitted ({how}{}features present)",
                if how.is_empty() { "" } else { "; " }
            ),
        ),
        Some(Err(e)) if !permitted => Check::fail(
            NAME,
            format!(
                "not permitted for this user (vm.unprivileged_userfaultfd={}, /dev/userfaultfd \
                 not usable): {e}",
                f.unprivileged.map_or("?".into(), |v| v.to_string())
            ),
            permit_fix,
        ),
        Some(Err(e)) => Check::fail(
            NAME,
            e.clone(),
            "see the error; a container may filter the userfaultfd syscall (allow it in the \
             seccomp profile)",
        ),
        None if permitted => Check::ok(NAME, format!("permitted ({how}); not probed")),
        None => Check::fail(
            NAME,
            format!(
                "not permitted for this user (vm.unprivileged_userfaultfd={}, /dev/userfaultfd \
                 not usable)",
                f.unprivileged.map_or("?".into(), |v| v.to_string())
            ),
            permit_fix,
        ),
    }
}

/// Memory mappings a node needs besides its shared stacks: the program, its libraries, the
/// two views of the global range, private thread stacks and their guards.
pub const MAPS_BASE: u64 = 2048;

/// `vm.max_map_count` against a node with `threads` threads: scattered page states never
/// split the global range's mappings, but every shared thread stack's guard page splits it
/// (two more mappings per thread).
pub fn max_map_count(value: Option<u64>, threads: u64) -> Check {
    const NAME: &str = "vm.max_map_count";
    let need = MAPS_BASE + 2 * threads;
    match value {
        None => Check::warn(
            NAME,
            "cannot read /proc/sys/vm/max_map_count",
            "check `sysctl vm.max_map_count` (65530 is the usual default)",
        ),
        Some(v) if v < need => Check::fail(
            NAME,
            format!("{v}, but a node with {threads} threads needs about {need} mappings"),
            format!("sudo sysctl -w vm.max_map_count={}", need.max(65530)),
        ),
        Some(v) if v < 4 * need => Check::warn(
            NAME,
            format!(
                "{v}: little room above the ~{need} mappings a node with {threads} threads needs"
            ),
            format!("sudo sysctl -w vm.max_map_count={}", (4 * need).max(65530)),
        ),
        Some(v) => Check::ok(
            NAME,
            format!("{v} (a node with {threads} threads needs ~{need})"),
        ),
    }
}

/// What the heap check knows.
#[derive(Clone, Debug)]
pub struct HeapFacts {
    pub base: u64,
    pub size: u64,
    /// User address-space bits (47, or 56 with 5-level paging).
    pub va_bits: u32,
    /// Soft RLIMIT_AS, `None` when unlimited.
    pub rlimit_as: Option<u64>,
    /// `vm.overcommit_memory`.
    pub overcommit: Option<u32>,
    /// Reserving the configured range as a node does: `Err` holds Squall's error.
    pub probe: Option<Result<(), String>>,
}

/// The virtual address space for the configured heap (`SQUALL_HEAP_BASE`/`SQUALL_HEAP_SIZE`).
pub fn heap_space(f: &HeapFacts) -> Check {
    const NAME: &str = "address space";
    let top = 1u64 << f.va_bits;
    let what = format!("heap {} at {:#x}", human(f.size), f.base);
    if f.base.saturating_add(f.size) > top {
        return Check::fail(
            NAME,
            format!(
                "{what} ends past the top of the {}-bit user address space ({})",
                f.va_bits,
                human(top)
            ),
            format!(
                "lower SQUALL_HEAP_SIZE to at most {} or lower SQUALL_HEAP_BASE",
                human(top.saturating_sub(f.base) & !0xfff)
            ),
        );
    }
    let need = crate::settings::node_address_space(f.size);
    if let Some(limit) = f.rlimit_as {
        if need > limit {
            return Check::fail(
                NAME,
                format!(
                    "{what}: a node maps {} (two views of the range), over the address-space \
                     limit {} (ulimit -v)",
                    human(need),
                    human(limit)
                ),
                format!(
                    "ulimit -v unlimited, or lower SQUALL_HEAP_SIZE to at most {}",
                    human((limit.saturating_sub(1 << 30) / 2) & !0xfff)
                ),
            );
        }
    }
    if let Some(Err(e)) = &f.probe {
        return Check::fail(
            NAME,
            format!("{what}: reserving it failed: {e}"),
            "set SQUALL_HEAP_BASE to a free address or lower SQUALL_HEAP_SIZE",
        );
    }
    if f.overcommit == Some(2) {
        return Check::warn(
            NAME,
            format!(
                "{what} fits, but vm.overcommit_memory=2 (strict): every page the job touches \
                 counts against CommitLimit"
            ),
            "sudo sysctl -w vm.overcommit_memory=0 if jobs fail with out-of-memory below the \
             physical memory",
        );
    }
    let probed = if matches!(f.probe, Some(Ok(()))) {
        "reserved and released"
    } else {
        "fits"
    };
    Check::ok(
        NAME,
        format!("{what} {probed} ({} virtual per node)", human(need)),
    )
}

/// Physical memory for `nodes` nodes on this machine: each needs its program, buffers and
/// the pages it touches; 256 MiB a node is the least for the tests and demos.
pub fn memory(available: Option<u64>, cgroup_max: Option<u64>, nodes: usize) -> Check {
    const NAME: &str = "memory";
    const PER_NODE: u64 = 256 << 20;
    let want = PER_NODE * nodes.max(1) as u64;
    let avail = match (available, cgroup_max) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    };
    match avail {
        None => Check::warn(
            NAME,
            "cannot read MemAvailable from /proc/meminfo",
            "check `free -h`",
        ),
        Some(a) if a < want => Check::warn(
            NAME,
            format!(
                "{} available{} for {nodes} local nodes (at least {} is advised)",
                human(a),
                if cgroup_max.is_some_and(|c| c <= a) {
                    " (cgroup memory.max)"
                } else {
                    ""
                },
                human(want)
            ),
            "run fewer nodes per machine (--hosts), or free memory",
        ),
        Some(a) => Check::ok(
            NAME,
            format!("{} available for {nodes} local nodes", human(a)),
        ),
    }
}

/// Binding the node's transport: a tcp and a udp socket on the bind address, and the
/// ephemeral port range (every node listens on one port; rank 0 also on the rendezvous).
pub fn ports(
    bind: &str,
    tcp: &Result<u16, String>,
    udp: &Result<u16, String>,
    range: Option<(u32, u32)>,
    nodes: usize,
) -> Check {
    const NAME: &str = "ports";
    for (proto, r) in [("tcp", tcp), ("udp", udp)] {
        if let Err(e) = r {
            return Check::fail(
                NAME,
                format!("cannot bind a {proto} socket on {bind}: {e}"),
                "set SQUALL_BIND_ADDR to an address of this machine (ip -br addr), or free ports",
            );
        }
    }
    let need = 2 * nodes as u32 + 16;
    match range {
        Some((lo, hi)) if hi < lo || hi - lo + 1 < need => Check::fail(
            NAME,
            format!("ephemeral port range {lo}-{hi} is too small for {nodes} nodes"),
            "sudo sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"",
        ),
        Some((lo, hi)) => Check::ok(
            NAME,
            format!("tcp and udp bind on {bind}; ephemeral ports {lo}-{hi}"),
        ),
        None => Check::ok(NAME, format!("tcp and udp bind on {bind}")),
    }
}

/// How a remote-shell probe of one host ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// `RSH HOST true` exited 0.
    Ok,
    /// It exited with this status and printed this on stderr.
    Failed(Option<i32>, String),
    /// No answer within the timeout (seconds).
    TimedOut(u64),
    /// The remote shell could not be started.
    NoShell(String),
}

/// Whether `host` answers a non-interactive remote shell (BatchMode: no password prompt).
pub fn ssh(host: &str, rsh: &str, reach: &Reach) -> Check {
    let name = format!("ssh {host}");
    let keys = format!(
        "set up key login: ssh-keygen, then ssh-copy-id {host}; check with `{rsh} -o BatchMode=yes {host} true`"
    );
    match reach {
        Reach::Ok => Check::ok(&name, format!("`{rsh} {host} true` works without a prompt")),
        Reach::TimedOut(s) => Check::fail(
            &name,
            format!("no answer within {s} s"),
            format!("check that {host} is up and its sshd reachable (port 22, firewall), or fix the name"),
        ),
        Reach::NoShell(e) => Check::fail(
            &name,
            format!("cannot start the remote shell {rsh:?}: {e}"),
            "install openssh-client, or give --rsh CMD",
        ),
        Reach::Failed(code, err) => {
            let err = err.trim();
            let fix = if err.contains("Permission denied") || err.contains("password") {
                keys
            } else if err.contains("Could not resolve") || err.contains("Name or service") {
                format!("{host} does not resolve: fix the name or add it to /etc/hosts")
            } else if err.contains("Host key verification failed") {
                format!("accept {host}'s host key once: ssh {host} true (or ssh-keyscan {host} >> ~/.ssh/known_hosts)")
            } else {
                keys
            };
            Check::fail(
                &name,
                format!(
                    "exit {}: {}",
                    code.map_or("by signal".into(), |c| c.to_string()),
                    if err.is_empty() { "(nothing on stderr)" } else { err }
                ),
                fix,
            )
        }
    }
}

/// memfd_create: the global range's memory is a sparse memfd.
pub fn memfd(result: &Result<(), String>) -> Check {
    match result {
        Ok(()) => Check::ok("memfd", "memfd_create works"),
        Err(e) => Check::fail(
            "memfd",
            format!("memfd_create failed: {e}"),
            "Squall needs memfd_create (Linux 3.17+); allow it in the container's seccomp profile",
        ),
    }
}

/// The tools a C user builds with: a compiler, pkg-config, and Squall's .pc files found by it.
pub fn tools(cc: bool, pkg_config: bool, squall_pc: Option<bool>) -> Check {
    const NAME: &str = "C tools";
    if !cc || !pkg_config {
        let missing: Vec<&str> = [(cc, "cc"), (pkg_config, "pkg-config")]
            .iter()
            .filter(|(have, _)| !have)
            .map(|(_, n)| *n)
            .collect();
        return Check::warn(
            NAME,
            format!(
                "{} not in PATH (needed to build C programs, not to run jobs)",
                missing.join(" and ")
            ),
            "sudo apt-get install build-essential pkg-config (or run .ci/setup.sh)",
        );
    }
    match squall_pc {
        Some(true) => Check::ok(NAME, "cc and pkg-config present; pkg-config finds squall-pthread"),
        _ => Check::warn(
            NAME,
            "cc and pkg-config present, but pkg-config does not find squall-pthread",
            "install with crates/capi/install.sh PREFIX, then export PKG_CONFIG_PATH=PREFIX/lib/pkgconfig",
        ),
    }
}

/// The `SQUALL_*` settings of this environment (see `crate::settings`).
pub fn settings(bad: &[crate::settings::Bad]) -> Vec<Check> {
    if bad.is_empty() {
        return vec![Check::ok(
            "settings",
            "every SQUALL_* variable set here is valid",
        )];
    }
    bad.iter()
        .map(|b| {
            Check::fail(
                &format!("setting {}", b.setting),
                b.problem.clone(),
                b.fix.clone(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userfaultfd_verdicts() {
        let mut f = UffdFacts {
            kernel: Some((6, 1)),
            unprivileged: Some(0),
            probe: Some(Err("userfaultfd(2): Operation not permitted".into())),
            ..UffdFacts::default()
        };
        let c = userfaultfd(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("vm.unprivileged_userfaultfd=1"), "{c:?}");
        f.unprivileged = Some(1);
        f.probe = Some(Ok(()));
        let c = userfaultfd(&f);
        assert_eq!(c.status, Status::Ok);
        assert!(c.detail.contains("unprivileged"), "{c:?}");
        f.kernel = Some((5, 15));
        let c = userfaultfd(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("5.19"));
        f.kernel = Some((6, 8));
        f.probe = None;
        f.unprivileged = Some(0);
        f.dev_usable = true;
        assert_eq!(userfaultfd(&f).status, Status::Ok);
        f.dev_usable = false;
        f.root = false;
        assert_eq!(userfaultfd(&f).status, Status::Fail);
        f.root = true;
        f.probe = Some(Err("seccomp".into()));
        let c = userfaultfd(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("seccomp"));
    }

    #[test]
    fn max_map_count_verdicts() {
        assert_eq!(max_map_count(Some(65530), 64).status, Status::Ok);
        let c = max_map_count(Some(2000), 64);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("vm.max_map_count=65530"), "{c:?}");
        assert_eq!(max_map_count(Some(5000), 64).status, Status::Warn);
        assert_eq!(max_map_count(None, 64).status, Status::Warn);
        assert_eq!(max_map_count(Some(65530), 40_000).status, Status::Fail);
    }

    fn heap(size: u64) -> HeapFacts {
        HeapFacts {
            base: 0x5000_0000_0000,
            size,
            va_bits: 47,
            rlimit_as: None,
            overcommit: Some(0),
            probe: Some(Ok(())),
        }
    }

    #[test]
    fn heap_space_verdicts() {
        assert_eq!(heap_space(&heap(64 << 30)).status, Status::Ok);
        let c = heap_space(&heap(100 << 40));
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("48T"), "{c:?}");
        let mut f = heap(64 << 30);
        f.rlimit_as = Some(16 << 30);
        let c = heap_space(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("ulimit -v"), "{c:?}");
        f.rlimit_as = Some(200 << 30);
        assert_eq!(heap_space(&f).status, Status::Ok);
        f.overcommit = Some(2);
        assert_eq!(heap_space(&f).status, Status::Warn);
        f.probe = Some(Err("File exists".into()));
        let c = heap_space(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("SQUALL_HEAP_BASE"));
    }

    #[test]
    fn memory_verdicts() {
        assert_eq!(memory(Some(8 << 30), None, 4).status, Status::Ok);
        assert_eq!(memory(Some(512 << 20), None, 4).status, Status::Warn);
        let c = memory(Some(8 << 30), Some(256 << 20), 4);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("cgroup"), "{c:?}");
        assert_eq!(memory(None, None, 2).status, Status::Warn);
    }

    #[test]
    fn ports_verdicts() {
        let ok: Result<u16, String> = Ok(40000);
        assert_eq!(
            ports("127.0.0.1", &ok, &ok, Some((32768, 60999)), 4).status,
            Status::Ok
        );
        let c = ports(
            "10.9.9.9",
            &Err("Cannot assign requested address".into()),
            &ok,
            None,
            4,
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("SQUALL_BIND_ADDR"));
        let c = ports("127.0.0.1", &ok, &ok, Some((40000, 40010)), 8);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("ip_local_port_range"));
    }

    #[test]
    fn ssh_verdicts() {
        assert_eq!(ssh("a", "ssh", &Reach::Ok).status, Status::Ok);
        let c = ssh(
            "a",
            "ssh",
            &Reach::Failed(Some(255), "Permission denied (publickey).".into()),
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("ssh-copy-id a"), "{c:?}");
        let c = ssh(
            "nohost",
            "ssh",
            &Reach::Failed(Some(255), "ssh: Could not resolve hostname nohost".into()),
        );
        assert!(c.fix.contains("does not resolve"), "{c:?}");
        let c = ssh("b", "ssh", &Reach::TimedOut(5));
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("5 s"));
        assert_eq!(
            ssh("b", "nossh", &Reach::NoShell("not found".into())).status,
            Status::Fail
        );
    }

    #[test]
    fn memfd_and_tools_verdicts() {
        assert_eq!(memfd(&Ok(())).status, Status::Ok);
        assert_eq!(memfd(&Err("ENOSYS".into())).status, Status::Fail);
        assert_eq!(tools(true, true, Some(true)).status, Status::Ok);
        let c = tools(true, true, Some(false));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.contains("PKG_CONFIG_PATH"));
        let c = tools(false, true, None);
        assert!(c.detail.contains("cc"), "{c:?}");
        assert_eq!(c.status, Status::Warn);
    }

    #[test]
    fn settings_become_failures() {
        assert_eq!(settings(&[])[0].status, Status::Ok);
        let bad = [crate::settings::Bad::new(
            "SQUALL_PROTOCOL",
            "unknown protocol 'x'",
            "unset it",
        )];
        let c = settings(&bad);
        assert_eq!(c[0].status, Status::Fail);
        assert_eq!(c[0].check, "setting SQUALL_PROTOCOL");
    }
}

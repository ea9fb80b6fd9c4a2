//! `squall doctor`: checks this machine (and the hosts given) before a job, each problem with
//! its fix: userfaultfd, memfd, `vm.max_map_count`, the address space and memory for the
//! configured heap, ports, ssh reachability, the C tools, and the `SQUALL_*` settings. Prints a
//! table (or `--json`); exits 1 when a check fails, 2 on bad options. This module reads the
//! machine and prints; the verdicts are pure functions in [`checks`].
pub mod checks;

use crate::settings::{self, Bad, Job, Machine};
use checks::{Check, HeapFacts, Reach, Status, UffdFacts};
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Nodes of the job on this machine (memory, ports and settings are checked for them).
    #[arg(short = 'n', long = "nodes", value_name = "N", default_value_t = 2)]
    pub nodes: usize,
    /// Threads a node runs (each shared stack costs mappings).
    #[arg(long, value_name = "T", default_value_t = 64)]
    pub threads: u64,
    /// Comma-separated hosts whose ssh reachability to check (as `squall run --hosts`).
    #[arg(long, value_delimiter = ',', value_name = "H1,H2,...")]
    pub hosts: Vec<String>,
    /// File with one host per line (as `squall run --hostfile`).
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    pub hostfile: Option<PathBuf>,
    /// Remote shell command (split on spaces), run as `RSH -o BatchMode=yes -o
    /// ConnectTimeout=S HOST true` (the options only when it is ssh).
    #[arg(long, value_name = "CMD", default_value = "ssh")]
    pub rsh: String,
    /// Seconds to wait for each host.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub ssh_timeout: u64,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The host list of `--hosts`/`--hostfile`, deduplicated, in order.
fn hosts(a: &DoctorArgs) -> Result<Vec<String>, Bad> {
    let mut list: Vec<String> = match &a.hostfile {
        Some(f) => squall_launch::rsh::read_hostfile(f).map_err(|e| {
            Bad::new(
                "--hostfile",
                e.to_string(),
                "give an existing file with one host per line (`host` or `host slots=K`)",
            )
        })?,
        None => a.hosts.iter().map(|h| h.trim().to_string()).collect(),
    };
    list.retain(|h| !h.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    list.retain(|h| seen.insert(h.clone()));
    Ok(list)
}

fn check_args(a: &DoctorArgs) -> Result<Vec<String>, Bad> {
    crate::run::check_nodes(a.nodes, false, None)?;
    if a.threads == 0 || a.threads > 1 << 20 {
        return Err(Bad::new(
            "--threads",
            format!("{} is not a thread count from 1 to 1048576", a.threads),
            "give the number of threads a node runs, e.g. --threads 64",
        ));
    }
    if a.ssh_timeout == 0 || a.ssh_timeout > 600 {
        return Err(Bad::new(
            "--ssh-timeout",
            format!("{} is not a number of seconds from 1 to 600", a.ssh_timeout),
            "give e.g. --ssh-timeout 5",
        ));
    }
    if a.rsh.split_whitespace().next().is_none() {
        return Err(Bad::new(
            "--rsh",
            "the remote shell command is empty",
            "give a command such as --rsh ssh or --rsh 'ssh -p 2222'",
        ));
    }
    hosts(a)
}

pub fn main(a: DoctorArgs) -> i32 {
    let hosts = match check_args(&a) {
        Ok(h) => h,
        Err(bad) => return settings::report("doctor", &[bad]),
    };
    let checks = run_checks(&a, &hosts);
    if a.json {
        let ok = !checks.iter().any(|c| c.status == Status::Fail);
        let doc = serde_json::json!({ "ok": ok, "checks": checks });
        println!("{doc}");
    } else {
        print!("{}", table(&checks));
    }
    i32::from(checks.iter().any(|c| c.status == Status::Fail))
}

/// The report as an aligned table: CHECK STATUS DETAIL, and an indented `fix:` line under
/// every check that is not ok.
pub fn table(checks: &[Check]) -> String {
    let w = checks
        .iter()
        .map(|c| c.check.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!("{:w$}  {:6}  DETAIL\n", "CHECK", "STATUS");
    for c in checks {
        out += &format!("{:w$}  {:6}  {}\n", c.check, c.status.word(), c.detail);
        if c.status != Status::Ok && !c.fix.is_empty() {
            out += &format!("{:w$}  {:6}  fix: {}\n", "", "", c.fix);
        }
    }
    let fails = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warns = checks.iter().filter(|c| c.status == Status::Warn).count();
    out += &format!(
        "{fails} failed, {warns} warnings, {} ok\n",
        checks.len() - fails - warns
    );
    out
}

fn run_checks(a: &DoctorArgs, hosts: &[String]) -> Vec<Check> {
    let vars = settings::squall_vars();
    let machine = Machine::this();
    let mut out = Vec::new();
    let bad = settings::check_env(
        &vars,
        Job {
            nodes: a.nodes,
            transport: "tcp",
            local: true,
        },
        machine,
    );
    out.extend(checks::settings(&bad));
    out.push(checks::userfaultfd(&uffd_facts(&vars)));
    out.push(checks::memfd(&memfd_probe()));
    let proc = Proc::this();
    out.push(checks::max_map_count(proc.max_map_count(), a.threads));
    out.push(checks::heap_space(&heap_facts(&vars, machine, &bad)));
    out.push(checks::memory(
        proc.meminfo("MemAvailable"),
        cgroup_memory_max(),
        a.nodes,
    ));
    let bind = vars
        .get(squall_core::env::BIND_ADDR)
        .filter(|b| !b.trim().is_empty())
        .map(|b| b.trim().to_string())
        .unwrap_or_else(|| {
            if hosts.is_empty() {
                "127.0.0.1"
            } else {
                "0.0.0.0"
            }
            .into()
        });
    let (tcp, udp) = bind_probe(&bind);
    out.push(checks::ports(&bind, &tcp, &udp, proc.port_range(), a.nodes));
    let rsh: Vec<String> = a.rsh.split_whitespace().map(str::to_string).collect();
    for h in hosts {
        let reach = ssh_probe(&rsh, h, a.ssh_timeout);
        out.push(checks::ssh(h, &a.rsh, &reach));
    }
    out.push(checks::tools(
        in_path("cc"),
        in_path("pkg-config"),
        pkg_config_finds("squall-pthread"),
    ));
    out
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The machine files the checks read, under a root (`/` here; a temporary tree in the tests,
/// so each reading is tested with the values that pass and fail).
pub struct Proc {
    pub root: std::path::PathBuf,
}

impl Proc {
    pub fn this() -> Proc {
        Proc { root: "/".into() }
    }
    fn text(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }
    fn u64(&self, rel: &str) -> Option<u64> {
        self.text(rel)?.trim().parse().ok()
    }
    /// `vm.max_map_count`.
    pub fn max_map_count(&self) -> Option<u64> {
        self.u64("proc/sys/vm/max_map_count")
    }
    /// `vm.unprivileged_userfaultfd`.
    pub fn unprivileged_userfaultfd(&self) -> Option<u32> {
        self.u64("proc/sys/vm/unprivileged_userfaultfd")
            .and_then(|v| u32::try_from(v).ok())
    }
    /// `vm.overcommit_memory`.
    pub fn overcommit_memory(&self) -> Option<u32> {
        self.u64("proc/sys/vm/overcommit_memory")
            .and_then(|v| u32::try_from(v).ok())
    }
    /// The kernel's (major, minor).
    pub fn kernel(&self) -> Option<(u32, u32)> {
        kernel_version(&self.text("proc/sys/kernel/osrelease")?)
    }
    /// A `Key:  N kB` line of /proc/meminfo, in bytes.
    pub fn meminfo(&self, key: &str) -> Option<u64> {
        parse_meminfo(&self.text("proc/meminfo")?, key)
    }
    /// `net.ipv4.ip_local_port_range`.
    pub fn port_range(&self) -> Option<(u32, u32)> {
        let t = self.text("proc/sys/net/ipv4/ip_local_port_range")?;
        let mut it = t.split_whitespace().map(|w| w.parse::<u32>().ok());
        Some((it.next()??, it.next()??))
    }
}

pub fn parse_meminfo(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// This process's cgroup v2 memory limit (`None`: none or not cgroup v2).
fn cgroup_memory_max() -> Option<u64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    read_u64(&format!("/sys/fs/cgroup{}/memory.max", path.trim_end()))
}

/// Bind a tcp listener and a udp socket on `addr` port 0, as a node does.
fn bind_probe(addr: &str) -> (Result<u16, String>, Result<u16, String>) {
    let ip: std::net::IpAddr = match addr.parse() {
        Ok(ip) => ip,
        Err(_) => {
            let e = Err(format!("{addr:?} is not an IP address"));
            return (e.clone(), e);
        }
    };
    let sa = std::net::SocketAddr::new(ip, 0);
    let tcp = std::net::TcpListener::bind(sa)
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string());
    let udp = std::net::UdpSocket::bind(sa)
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string());
    (tcp, udp)
}

/// A `Key:\tvalue` line of /proc/self/status.
fn status_field(key: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')
            .map(|v| v.trim().to_string())
    })
}

/// "6.1.0-18-amd64" -> (6, 1).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn uffd_facts(vars: &BTreeMap<String, String>) -> UffdFacts {
    const CAP_SYS_PTRACE: u32 = 19;
    let euid = status_field("Uid").and_then(|u| {
        u.split_whitespace()
            .nth(1)
            .and_then(|e| e.parse::<u32>().ok())
    });
    let cap_eff = status_field("CapEff").and_then(|c| u64::from_str_radix(&c, 16).ok());
    let dev_usable = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
        .is_ok();
    // A small range at the configured base: userfaultfd, its features, memfd and the mapping.
    let (base, _) = settings::heap(vars);
    let small = squall_memory::SpaceConfig {
        base: if base % 4096 == 0 && base != 0 {
            base as usize
        } else {
            squall_memory::DEFAULT_BASE
        },
        size: 2 << 20,
        user_mode_only: false,
        signal_faults: false,
    };
    let probe = match squall_memory::AddressSpace::reserve(&small) {
        Ok(space) => {
            drop(space);
            Ok(())
        }
        Err(squall_memory::MemoryError::Reserve { .. }) => Ok(()), // the address: heap check
        Err(e) => Err(e.to_string()),
    };
    let proc = Proc::this();
    UffdFacts {
        kernel: proc.kernel(),
        unprivileged: proc.unprivileged_userfaultfd(),
        dev_usable,
        root: euid == Some(0),
        cap_ptrace: cap_eff.is_some_and(|c| c & (1 << CAP_SYS_PTRACE) != 0),
        probe: Some(probe),
    }
}

fn memfd_probe() -> Result<(), String> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    memfd_create(c"squall-doctor", MemFdCreateFlag::MFD_CLOEXEC)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn heap_facts(vars: &BTreeMap<String, String>, machine: Machine, bad: &[Bad]) -> HeapFacts {
    let (base, size) = settings::heap(vars);
    let heap_vars_bad = bad.iter().any(|b| {
        b.setting == squall_core::env::HEAP_BASE || b.setting == squall_core::env::HEAP_SIZE
    });
    let fits = base.saturating_add(size) <= 1u64 << machine.va_bits
        && machine
            .rlimit_as
            .is_none_or(|l| settings::node_address_space(size) <= l);
    // Reserve the configured range as a node would (virtual only: MAP_NORESERVE, sparse memfd).
    let probe = (!heap_vars_bad && fits).then(|| {
        let cfg = squall_memory::SpaceConfig {
            base: base as usize,
            size: size as usize,
            user_mode_only: false,
            signal_faults: false,
        };
        match squall_memory::AddressSpace::reserve(&cfg) {
            Ok(space) => {
                drop(space);
                Ok(())
            }
            Err(e @ squall_memory::MemoryError::Reserve { .. })
            | Err(e @ squall_memory::MemoryError::Backing { .. }) => Err(e.to_string()),
            // userfaultfd problems are the userfaultfd check's.
            Err(_) => Ok(()),
        }
    });
    HeapFacts {
        base,
        size,
        va_bits: machine.va_bits,
        rlimit_as: machine.rlimit_as,
        overcommit: Proc::this().overcommit_memory(),
        probe,
    }
}

/// `RSH [-o BatchMode=yes -o ConnectTimeout=S] HOST true`, killed after the timeout.
fn ssh_probe(rsh: &[String], host: &str, timeout_s: u64) -> Reach {
    let Some((prog, lead)) = rsh.split_first() else {
        return Reach::NoShell("empty command".into());
    };
    let mut cmd = Command::new(prog);
    cmd.args(lead);
    let is_ssh = std::path::Path::new(prog)
        .file_name()
        .is_some_and(|n| n == "ssh");
    if is_ssh {
        cmd.args(["-o", "BatchMode=yes", "-o"])
            .arg(format!("ConnectTimeout={timeout_s}"));
    }
    cmd.arg(host)
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Reach::NoShell(e.to_string()),
    };
    let deadline = Instant::now() + Duration::from_secs(timeout_s) + Duration::from_millis(500);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    use std::io::Read;
                    let _ = s.read_to_string(&mut err);
                }
                return if status.success() {
                    Reach::Ok
                } else {
                    Reach::Failed(status.code(), err)
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Reach::TimedOut(timeout_s);
            }
            Err(e) => return Reach::NoShell(e.to_string()),
        }
    }
}

fn in_path(name: &str) -> bool {
    squall_launch::spec::resolve_program(name).is_ok()
}

fn pkg_config_finds(pkg: &str) -> Option<bool> {
    if !in_path("pkg-config") {
        return None;
    }
    Command::new("pkg-config")
        .args(["--exists", pkg])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .map(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_text_parsers() {
        assert_eq!(kernel_version("6.1.0-18-amd64\n"), Some((6, 1)));
        assert_eq!(kernel_version("5.19.17"), Some((5, 19)));
        assert_eq!(kernel_version("garbage"), None);
        let mi = "MemTotal:       16314408 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_meminfo(mi, "MemAvailable"), Some(8_000_000 * 1024));
        assert_eq!(parse_meminfo(mi, "Cached"), None);
    }

    /// A machine tree under a temporary root with these /proc files.
    fn tree(files: &[(&str, &str)]) -> Proc {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "squall-doctor-proc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for (rel, text) in files {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        Proc { root }
    }

    /// Each check reading /proc, through a tree that passes and one that fails.
    #[test]
    fn proc_readings_pass_and_fail() {
        use checks::Status;
        let good = tree(&[
            ("proc/sys/vm/max_map_count", "65530\n"),
            ("proc/sys/vm/unprivileged_userfaultfd", "1\n"),
            ("proc/sys/vm/overcommit_memory", "0\n"),
            ("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n"),
            (
                "proc/meminfo",
                "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n",
            ),
            ("proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n"),
        ]);
        let bad = tree(&[
            ("proc/sys/vm/max_map_count", "1000\n"),
            ("proc/sys/vm/unprivileged_userfaultfd", "0\n"),
            ("proc/sys/vm/overcommit_memory", "2\n"),
            ("proc/sys/kernel/osrelease", "5.15.0-91-generic\n"),
            (
                "proc/meminfo",
                "MemTotal: 400000 kB\nMemAvailable: 300000 kB\n",
            ),
            ("proc/sys/net/ipv4/ip_local_port_range", "40000 40003\n"),
        ]);
        let empty = tree(&[]);
        let uffd = |p: &Proc| {
            checks::userfaultfd(&UffdFacts {
                kernel: p.kernel(),
                unprivileged: p.unprivileged_userfaultfd(),
                probe: None,
                ..UffdFacts::default()
            })
        };
        assert_eq!(uffd(&good).status, Status::Ok);
        let c = uffd(&bad);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("5.19"), "{c:?}");
        // Permission alone: a new kernel with the sysctl at 0 and no other way in.
        let mut f = UffdFacts {
            kernel: good.kernel(),
            unprivileged: bad.unprivileged_userfaultfd(),
            ..UffdFacts::default()
        };
        let c = checks::userfaultfd(&f);
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.contains("vm.unprivileged_userfaultfd=1"), "{c:?}");
        f.root = true;
        assert_eq!(checks::userfaultfd(&f).status, Status::Ok);

        assert_eq!(
            checks::max_map_count(good.max_map_count(), 64).status,
            Status::Ok
        );
        assert_eq!(
            checks::max_map_count(bad.max_map_count(), 64).status,
            Status::Fail
        );
        assert_eq!(
            checks::max_map_count(empty.max_map_count(), 64).status,
            Status::Warn
        );

        let heap = |p: &Proc| {
            checks::heap_space(&checks::HeapFacts {
                base: 0x5000_0000_0000,
                size: 8 << 30,
                va_bits: 47,
                rlimit_as: None,
                overcommit: p.overcommit_memory(),
                probe: Some(Ok(())),
            })
        };
        assert_eq!(heap(&good).status, Status::Ok);
        assert_eq!(heap(&bad).status, Status::Warn);

        let mem = |p: &Proc| checks::memory(p.meminfo("MemAvailable"), None, 2);
        assert_eq!(mem(&good).status, Status::Ok);
        assert_eq!(mem(&bad).status, Status::Warn);
        assert_eq!(mem(&empty).status, Status::Warn);

        let ok: Result<u16, String> = Ok(41000);
        let ports = |p: &Proc| checks::ports("127.0.0.1", &ok, &ok, p.port_range(), 4);
        assert_eq!(ports(&good).status, Status::Ok);
        assert_eq!(ports(&bad).status, Status::Fail);
        for p in [good, bad, empty] {
            let _ = std::fs::remove_dir_all(&p.root);
        }
    }

    #[test]
    fn table_has_a_fix_under_each_problem() {
        let t = table(&[
            Check::ok("memfd", "works"),
            Check::fail("ssh a", "exit 255", "ssh-copy-id a"),
        ]);
        assert!(t.contains("fix: ssh-copy-id a"), "{t}");
        assert!(t.contains("1 failed, 0 warnings, 1 ok"), "{t}");
        assert_eq!(t.matches("fix:").count(), 1);
    }
}

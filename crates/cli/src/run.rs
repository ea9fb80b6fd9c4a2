//! `squall run`: turns command-line options into a [`squall_launch::JobSpec`], runs it and
//! exits with the job's status. Owns option parsing and user-facing errors only.
use crate::settings::{report, Bad};
use clap::{Args, ValueEnum};
use squall_launch::{
    run_job, AuthSetting, ForwardSink, JobInput, JobSpec, LauncherKind, MpirunOptions, RshOptions,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The backend nodes use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    Tcp,
    Udp,
    /// MPI point-to-point (implies --launcher mpirun; the program must be built with the
    /// `mpi` feature of squall-net).
    Mpi,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Mpi => "mpi",
        }
    }
}

/// How nodes are started.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Launcher {
    /// Child processes on this machine (default), or a remote shell when hosts are given.
    Auto,
    /// Child processes on this machine.
    Local,
    /// A remote shell per node (needs --hosts or --hostfile).
    Rsh,
    /// One `mpirun -n N PROGRAM`; nodes use the mpi transport.
    /// --hosts/--hostfile become mpirun's --host/--hostfile.
    Mpirun,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Number of node processes.
    #[arg(short = 'n', long = "nodes", value_name = "N")]
    pub nodes: usize,
    /// Backend the nodes talk over.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: Transport,
    /// Fault injection for the backbone, e.g. loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7.
    #[arg(long, value_name = "SPEC")]
    pub net_faults: Option<String>,
    /// Prefix each output line with `[rank] ` (the default).
    #[arg(long, overrides_with = "no_prefix")]
    pub prefix: bool,
    /// Forward output lines unprefixed.
    #[arg(long, overrides_with = "prefix")]
    pub no_prefix: bool,
    /// Print per-node and total statistics at exit (sets SQUALL_STATS=1).
    #[arg(long)]
    pub stats: bool,
    /// Record the sharing profile (per allocation site, global, lock and barrier) and print the
    /// worst sites at exit; its JSON goes to FILE (default squall-profile.json; sets
    /// SQUALL_PROFILE=1 and SQUALL_PROFILE_FILE). Render it with `squall report FILE`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true,
          default_missing_value = "squall-profile.json")]
    pub profile: Option<String>,
    /// Authenticate every packet (tcp, udp) with a key made for this job. Default
    /// (SQUALL_AUTH=auto): on when nodes run through the remote shell (--hosts), off otherwise.
    #[arg(long, conflicts_with = "no_auth")]
    pub auth: bool,
    /// Authenticate every packet and encrypt its payload (ChaCha20-Poly1305; tcp, udp).
    #[arg(long, conflicts_with = "no_auth")]
    pub encrypt: bool,
    /// Never authenticate packets, even with --hosts.
    #[arg(long)]
    pub no_auth: bool,
    /// End the job (exit status 124) if it runs longer than SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// How nodes are started.
    #[arg(long, value_enum, default_value = "auto")]
    pub launcher: Launcher,
    /// Comma-separated hosts; node r runs on host r mod len through the remote shell.
    #[arg(long, value_delimiter = ',', value_name = "H1,H2,...")]
    pub hosts: Vec<String>,
    /// File with one host per line (`host slots=K` repeats it).
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    pub hostfile: Option<PathBuf>,
    /// Remote shell command (split on spaces), called as `RSH HOST 'env ... PROGRAM ARGS'`.
    #[arg(long, value_name = "CMD", default_value = "ssh")]
    pub rsh: String,
    /// Host nodes use to reach rank 0's rendezvous (default: found from the host list).
    #[arg(long, value_name = "HOST")]
    pub rendezvous_host: Option<String>,
    /// Extra mpirun arguments (split on spaces), e.g. "--mca btl self,vader" (--launcher mpirun).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub mpirun_args: Option<String>,
    /// The mpirun program (--launcher mpirun).
    #[arg(long, value_name = "PATH", default_value = "mpirun")]
    pub mpirun: String,
    /// The program every node runs, and its arguments.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// Extra `--help` text: the environment table and examples.
pub fn after_help() -> String {
    format!(
        "Every node gets SQUALL_RANK, SQUALL_SIZE, SQUALL_RENDEZVOUS, SQUALL_JOB_ID and \
         SQUALL_TRANSPORT;\nthe other variables are passed through from your environment.\n\n\
         Standard input goes to rank 0 (as under mpirun; also through --hosts and --launcher \
         mpirun):\n`squall run -n 4 ./prog < input` or `gen | squall run -n 4 ./prog`; the \
         other ranks read EOF.\nA terminal is forwarded while squall runs in the foreground.\n\n\
         With authentication on (--auth; by default with --hosts) every tcp/udp packet carries \
         a keyed-BLAKE3 tag;\nthe launcher makes the key: local nodes get it in SQUALL_AUTH_KEY, \
         remote ones as the first line of the\nremote shell's stdin (never on a command line).\n\n\
         Environment variables:\n{}\n\
         Examples:\n  \
         squall run -n 4 ./my_app --size 1024\n  \
         squall run -n 2 --transport udp --net-faults loss=0.05,seed=7 ./my_app\n  \
         squall run -n 8 --hosts node1,node2,node3,node4 ./my_app\n  \
         squall run -n 2 --auth --transport udp ./my_app\n  \
         squall run -n 4 --hostfile hosts.txt --rsh 'ssh -p 2222' --timeout 600 ./my_app\n  \
         squall run -n 4 --launcher mpirun --mpirun-args '--hostfile hosts' ./my_app\n\n\
         Exit status: 0 when every node exits 0; otherwise the status of the first node that \
         failed\n(128+signal if it was killed), 124 on --timeout, 2 for usage errors.",
        crate::envtable::table()
    )
}

/// Longest `--timeout` taken (a year; more is a typo, and would overflow a deadline).
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// `-n N` for a job: at least 1, at most 65535 (node ids are 16-bit), and for nodes on this
/// machine at most what the process limit allows.
pub fn check_nodes(nodes: usize, local: bool, max_processes: Option<u64>) -> Result<(), Bad> {
    let max = usize::from(u16::MAX);
    if nodes == 0 {
        return Err(Bad::new(
            "--nodes",
            "the job needs at least 1 node (got -n 0)",
            "give -n 1 or more, e.g. squall run -n 2 ./prog",
        ));
    }
    if nodes > max {
        return Err(Bad::new(
            "--nodes",
            format!("-n {nodes}: at most {max} nodes are supported (node ids are 16-bit)"),
            format!("give -n {max} or fewer"),
        ));
    }
    if let Some(limit) = max_processes.filter(|_| local) {
        if nodes as u64 > limit / 2 {
            return Err(Bad::new(
                "--nodes",
                format!(
                    "-n {nodes} node processes on this machine, each with a service thread,                      exceed half the process limit (ulimit -u = {limit})"
                ),
                "give fewer nodes, spread them with --hosts/--hostfile, or raise ulimit -u",
            ));
        }
    }
    Ok(())
}

/// `1e300` rather than three hundred digits.
fn short_number(x: f64) -> String {
    if x.abs() >= 1e12 {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// `--timeout SECS`.
pub fn check_timeout(secs: f64) -> Result<Duration, Bad> {
    if !(secs.is_finite() && secs > 0.0) {
        return Err(Bad::new(
            "--timeout",
            format!("{} is not a positive number of seconds", short_number(secs)),
            "give seconds > 0, e.g. --timeout 600",
        ));
    }
    if secs > MAX_TIMEOUT_SECS {
        return Err(Bad::new(
            "--timeout",
            format!("{} seconds is more than a year", short_number(secs)),
            "give a timeout of at most 31536000 seconds, or leave --timeout out for none",
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The program a local node runs must exist and be executable here.
pub fn check_program(program: &str) -> Result<(), Bad> {
    match squall_launch::spec::resolve_program(program) {
        Ok(_) => Ok(()),
        Err(e) => Err(Bad::new(
            "PROGRAM",
            e.to_string(),
            "give the path of an executable (e.g. ./a.out) or the name of one in PATH",
        )),
    }
}

/// `--net-faults SPEC`, parsed as the nodes will (loss and dup need a lossy transport).
pub fn check_net_faults(spec: &str, transport: &str) -> Result<(), Bad> {
    let fix = "give key=value pairs, e.g. --net-faults loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7 \
               (loss and dup need --transport udp)";
    let parsed = squall_net::FaultSpec::parse(spec)
        .map_err(|e| Bad::new("--net-faults", e.to_string(), fix))?;
    if transport == "tcp" {
        parsed
            .check_for_tcp()
            .map_err(|e| Bad::new("--net-faults", e.to_string(), fix))?;
    }
    Ok(())
}

fn build_spec(args: RunArgs) -> Result<JobSpec, Bad> {
    let (program, rest) = args.command.split_first().ok_or_else(|| {
        Bad::new(
            "PROGRAM",
            "no program given",
            "squall run -n N PROGRAM [ARGS...]",
        )
    })?;
    let mut spec = JobSpec::local(args.nodes, program.clone(), rest.to_vec());
    spec.input = JobInput::Inherit;
    spec.transport = args.transport.name().to_string();
    if let Some(f) = &args.net_faults {
        check_net_faults(f, spec.transport.as_str())?;
    }
    spec.net_faults = args.net_faults;
    spec.stats = args.stats;
    if let Some(file) = &args.profile {
        spec.extra_env
            .push((squall_core::env::PROFILE.to_string(), "1".to_string()));
        spec.extra_env
            .push((squall_core::env::PROFILE_FILE.to_string(), file.clone()));
    }
    spec.prefix = !args.no_prefix;
    spec.auth = if args.encrypt {
        AuthSetting::Encrypt
    } else if args.auth {
        AuthSetting::On
    } else if args.no_auth {
        AuthSetting::Off
    } else {
        match std::env::var(squall_core::env::AUTH) {
            Ok(v) => v.parse().map_err(|e: String| {
                Bad::new(
                    squall_core::env::AUTH,
                    e,
                    "set it to on, off, auto or encrypt (or pass --auth, --no-auth or --encrypt)",
                )
            })?,
            Err(_) => AuthSetting::Auto,
        }
    };
    if let Some(secs) = args.timeout {
        spec.timeout = Some(check_timeout(secs)?);
    }
    let mut hosts: Vec<String> = args
        .hosts
        .into_iter()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(file) = &args.hostfile {
        hosts = squall_launch::rsh::read_hostfile(file).map_err(|e| {
            Bad::new(
                "--hostfile",
                e.to_string(),
                "give an existing file with one host per line (`host` or `host slots=K`)",
            )
        })?;
        if hosts.is_empty() {
            return Err(Bad::new(
                "--hostfile",
                format!("{} lists no hosts", file.display()),
                "put one host per line in it (`host` or `host slots=K`)",
            ));
        }
    }
    if let Some(h) = args.rendezvous_host.as_deref() {
        if h.trim().is_empty() {
            return Err(Bad::new(
                "--rendezvous-host",
                "is empty",
                "give a host name or address the nodes reach this machine by, or leave it out",
            ));
        }
    }
    if args.launcher == Launcher::Mpirun || args.transport == Transport::Mpi {
        if !matches!(args.launcher, Launcher::Mpirun | Launcher::Auto) {
            return Err(Bad::new(
                "--transport",
                "--transport mpi needs --launcher mpirun",
                "add --launcher mpirun, or use --transport tcp/udp",
            ));
        }
        if args.rendezvous_host.is_some() {
            return Err(Bad::new(
                "--rendezvous-host",
                "does not apply to --launcher mpirun",
                "leave --rendezvous-host out (MPI connects the nodes)",
            ));
        }
        check_nodes(args.nodes, false, None)?;
        if squall_launch::spec::resolve_program(&args.mpirun).is_err() {
            return Err(Bad::new(
                "--mpirun",
                format!("{} not found (not a file, and not in PATH)", args.mpirun),
                "install Open MPI (apt-get install openmpi-bin) or give --mpirun /path/to/mpirun",
            ));
        }
        let mut extra: Vec<String> = args
            .mpirun_args
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if let Some(file) = &args.hostfile {
            extra.extend(["--hostfile".to_string(), file.display().to_string()]);
        } else if !hosts.is_empty() {
            extra.extend(["--host".to_string(), hosts.join(",")]);
        }
        spec.transport = "mpi".into();
        spec.launcher = LauncherKind::Mpirun(MpirunOptions {
            mpirun: args.mpirun,
            extra_args: extra,
        });
        return Ok(spec);
    }
    if args.mpirun_args.is_some() {
        return Err(Bad::new(
            "--mpirun-args",
            "only applies with --launcher mpirun",
            "add --launcher mpirun, or leave --mpirun-args out",
        ));
    }
    let remote = match args.launcher {
        Launcher::Local => {
            if !hosts.is_empty() {
                return Err(Bad::new(
                    "--launcher",
                    "--launcher local does not take --hosts or --hostfile",
                    "leave out --hosts/--hostfile, or use --launcher rsh",
                ));
            }
            false
        }
        Launcher::Rsh => {
            if hosts.is_empty() {
                return Err(Bad::new(
                    "--launcher",
                    "--launcher rsh needs --hosts or --hostfile",
                    "add --hosts H1,H2 or --hostfile FILE",
                ));
            }
            true
        }
        Launcher::Auto => !hosts.is_empty(),
        Launcher::Mpirun => false,
    };
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    check_nodes(
        args.nodes,
        !remote,
        crate::settings::soft_limit(&limits, "Max processes"),
    )?;
    if remote {
        let rsh: Vec<String> = args.rsh.split_whitespace().map(str::to_string).collect();
        if rsh.is_empty() {
            return Err(Bad::new(
                "--rsh",
                "the remote shell command is empty",
                "give a command such as --rsh ssh or --rsh 'ssh -p 2222'",
            ));
        }
        spec.launcher = LauncherKind::Rsh(RshOptions {
            hosts,
            rsh,
            rendezvous_host: args.rendezvous_host,
        });
    } else {
        if args.rendezvous_host.is_some() {
            return Err(Bad::new(
                "--rendezvous-host",
                "only applies with --hosts or --hostfile",
                "leave --rendezvous-host out for a local job",
            ));
        }
        check_program(program)?;
    }
    Ok(spec)
}

/// The environment's `SQUALL_*` variables, checked for this job.
pub fn check_environment(nodes: usize, transport: &str, local: bool) -> Vec<Bad> {
    crate::settings::check_env(
        &crate::settings::squall_vars(),
        crate::settings::Job {
            nodes,
            transport,
            local,
        },
        crate::settings::Machine::this(),
    )
}

pub fn main(args: RunArgs) -> i32 {
    let spec = match build_spec(args) {
        Ok(s) => s,
        Err(bad) => return report("run", &[bad]),
    };
    let local = spec.launcher == LauncherKind::Local;
    let bad = check_environment(spec.nodes, &spec.transport, local);
    if !bad.is_empty() {
        return report("run", &bad);
    }
    let sink = Arc::new(ForwardSink {
        prefix: spec.prefix,
    });
    match run_job(&spec, sink) {
        Ok(report) => report.exit_code(),
        Err(e) => {
            eprintln!("squall run: {e}");
            2
        }
    }
}

//! `squall run`: turns command-line options into a [`squall_launch::JobSpec`], runs it and
//! exits with the job's status. Owns option parsing and user-facing errors only.
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

fn build_spec(args: RunArgs) -> Result<JobSpec, String> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| "no program given".to_string())?;
    let mut spec = JobSpec::local(args.nodes, program.clone(), rest.to_vec());
    spec.input = JobInput::Inherit;
    spec.transport = args.transport.name().to_string();
    spec.net_faults = args.net_faults;
    spec.stats = args.stats;
    spec.prefix = !args.no_prefix;
    spec.auth = if args.encrypt {
        AuthSetting::Encrypt
    } else if args.auth {
        AuthSetting::On
    } else if args.no_auth {
        AuthSetting::Off
    } else {
        match std::env::var(squall_core::env::AUTH) {
            Ok(v) => v.parse()?,
            Err(_) => AuthSetting::Auto,
        }
    };
    if let Some(secs) = args.timeout {
        if !(secs.is_finite() && secs > 0.0) {
            return Err(format!(
                "--timeout must be a positive number of seconds (got {secs})"
            ));
        }
        spec.timeout = Some(Duration::from_secs_f64(secs));
    }
    let mut hosts: Vec<String> = args
        .hosts
        .into_iter()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(file) = &args.hostfile {
        hosts = squall_launch::rsh::read_hostfile(file).map_err(|e| e.to_string())?;
        if hosts.is_empty() {
            return Err(format!("hostfile {} lists no hosts", file.display()));
        }
    }
    if args.launcher == Launcher::Mpirun || args.transport == Transport::Mpi {
        if !matches!(args.launcher, Launcher::Mpirun | Launcher::Auto) {
            return Err("--transport mpi needs --launcher mpirun".into());
        }
        if args.rendezvous_host.is_some() {
            return Err("--rendezvous-host does not apply to --launcher mpirun".into());
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
        return Err("--mpirun-args only applies with --launcher mpirun".into());
    }
    let remote = match args.launcher {
        Launcher::Local => {
            if !hosts.is_empty() {
                return Err("--launcher local does not take --hosts or --hostfile".into());
            }
            false
        }
        Launcher::Rsh => {
            if hosts.is_empty() {
                return Err("--launcher rsh needs --hosts or --hostfile".into());
            }
            true
        }
        Launcher::Auto => !hosts.is_empty(),
        Launcher::Mpirun => false,
    };
    if remote {
        let rsh: Vec<String> = args.rsh.split_whitespace().map(str::to_string).collect();
        spec.launcher = LauncherKind::Rsh(RshOptions {
            hosts,
            rsh,
            rendezvous_host: args.rendezvous_host,
        });
    } else if args.rendezvous_host.is_some() {
        return Err("--rendezvous-host only applies with --hosts or --hostfile".into());
    }
    Ok(spec)
}

pub fn main(args: RunArgs) -> i32 {
    let spec = match build_spec(args) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("squall run: {msg}");
            return 2;
        }
    };
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

//! What to run: the job description handed to [`crate::run_job`], and the launcher kinds.
//! Owns validation of the description and the environment every node gets; must not spawn
//! anything.
use crate::error::LaunchError;
use crate::stdin::JobInput;
use squall_core::env;
use std::path::PathBuf;
use std::time::Duration;

/// How node processes are started. One module per kind ([`crate::local`], [`crate::rsh`]);
/// a new kind (e.g. `mpirun`) adds a variant and a module that builds its commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LauncherKind {
    /// Every node is a child process on this machine.
    Local,
    /// Node `r` runs on `hosts[r % hosts.len()]` through a remote shell (`ssh` by default).
    Rsh(RshOptions),
    /// One `mpirun -n N` starts every node; rank and size come from MPI
    /// (`SQUALL_TRANSPORT=mpi`, see [`crate::mpirun`]).
    Mpirun(crate::mpirun::MpirunOptions),
}

/// Whether the job's packets are authenticated (`squall run --auth`, `SQUALL_AUTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthSetting {
    /// On when the job spans more than one host or its nodes listen on every interface (the
    /// remote-shell launcher); off for local jobs and under mpirun (MPI carries the packets).
    #[default]
    Auto,
    /// Always: the launcher makes a key (an error under mpirun, whose transport is not sealed).
    On,
    /// Never.
    Off,
    /// Always, and payloads are encrypted too (ChaCha20-Poly1305).
    Encrypt,
}

impl std::str::FromStr for AuthSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "1" | "yes" | "true" => Ok(AuthSetting::On),
            "off" | "0" | "no" | "false" => Ok(AuthSetting::Off),
            "auto" | "" => Ok(AuthSetting::Auto),
            "encrypt" => Ok(AuthSetting::Encrypt),
            other => Err(format!(
                "{}={other:?}: give on, off, auto or encrypt",
                env::AUTH
            )),
        }
    }
}

/// Settings of the remote-shell launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RshOptions {
    /// Hosts, in rank order (reused round-robin when there are fewer hosts than nodes).
    pub hosts: Vec<String>,
    /// The remote shell command and its leading arguments, e.g. `["ssh", "-p", "2222"]`.
    pub rsh: Vec<String>,
    /// Host (name or address) the nodes use to reach rank 0's rendezvous listener. Default:
    /// this machine's address toward the first host when that host is this machine,
    /// otherwise the first host's address.
    pub rendezvous_host: Option<String>,
}

impl Default for RshOptions {
    fn default() -> Self {
        RshOptions {
            hosts: Vec::new(),
            rsh: vec!["ssh".to_string()],
            rendezvous_host: None,
        }
    }
}

/// A job: N copies of one program.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Number of nodes (>= 1).
    pub nodes: usize,
    /// The program every node runs (a path, or a name looked up in PATH).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// `tcp`, `udp` or `mpi` (exported as `SQUALL_TRANSPORT`).
    pub transport: String,
    /// Fault-injection spec exported as `SQUALL_NET_FAULTS`, if any.
    pub net_faults: Option<String>,
    /// Export `SQUALL_STATS=1`.
    pub stats: bool,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// Prefix forwarded output lines with `[rank] ` (used by [`crate::ForwardSink`]).
    pub prefix: bool,
    /// How to start the nodes.
    pub launcher: LauncherKind,
    /// Extra variables for every node, after the launcher's own.
    pub extra_env: Vec<(String, String)>,
    /// How long a node gets between SIGTERM and SIGKILL during cleanup.
    pub grace: Duration,
    /// What rank 0 reads on stdin (the other ranks read EOF); `squall run` passes its own.
    pub input: JobInput,
    /// Packet authentication.
    pub auth: AuthSetting,
}

impl JobSpec {
    /// A local job of `nodes` copies of `program args` over tcp with default settings (every
    /// node's stdin is /dev/null: set [`JobSpec::input`] to give rank 0 an input).
    pub fn local(nodes: usize, program: impl Into<String>, args: Vec<String>) -> JobSpec {
        JobSpec {
            nodes,
            program: program.into(),
            args,
            transport: "tcp".to_string(),
            net_faults: None,
            stats: false,
            timeout: None,
            prefix: true,
            launcher: LauncherKind::Local,
            extra_env: Vec::new(),
            grace: Duration::from_secs(2),
            input: JobInput::Null,
            auth: AuthSetting::Auto,
        }
    }

    /// Whether this job's packets are authenticated (see [`AuthSetting`]).
    pub fn auth_on(&self) -> bool {
        match (self.auth, &self.launcher) {
            (AuthSetting::On | AuthSetting::Encrypt, _) => true,
            (AuthSetting::Off, _) => false,
            // Remote nodes bind every interface (and usually run on several hosts).
            (AuthSetting::Auto, LauncherKind::Rsh(_)) => true,
            (AuthSetting::Auto, _) => false,
        }
    }

    /// Check the parts that do not depend on the launcher kind.
    pub fn validate(&self) -> Result<(), LaunchError> {
        if self.nodes < 1 {
            return Err(LaunchError::NoNodes(self.nodes));
        }
        if self.nodes > usize::from(u16::MAX) {
            return Err(LaunchError::TooManyNodes(self.nodes));
        }
        if !matches!(self.transport.as_str(), "tcp" | "udp" | "mpi") {
            return Err(LaunchError::BadTransport(self.transport.clone()));
        }
        if matches!(self.auth, AuthSetting::On | AuthSetting::Encrypt)
            && (self.transport == "mpi" || matches!(self.launcher, LauncherKind::Mpirun(_)))
        {
            return Err(LaunchError::AuthOverMpi);
        }
        Ok(())
    }

    /// How many nodes of the job run on the host of node `rank` (all of them for a local job;
    /// node `r` runs on `hosts[r % hosts.len()]`).
    pub fn nodes_on_host_of(&self, rank: u16) -> usize {
        let hosts = match &self.launcher {
            LauncherKind::Rsh(o) if !o.hosts.is_empty() => &o.hosts,
            _ => return self.nodes,
        };
        let host = &hosts[usize::from(rank) % hosts.len()];
        (0..self.nodes)
            .filter(|r| &hosts[r % hosts.len()] == host)
            .count()
    }

    /// The `SQUALL_*` variables node `rank` gets (launcher kinds add their own, such as
    /// `SQUALL_BIND_ADDR`, and the key, `SQUALL_AUTH_KEY`, which is never among these: the
    /// remote-shell launcher must not put it on a command line).
    pub fn node_env(&self, rank: u16, rendezvous: &str, job_id: u64) -> Vec<(String, String)> {
        let mut vars = vec![
            (env::RANK.to_string(), rank.to_string()),
            (env::SIZE.to_string(), self.nodes.to_string()),
            (env::RENDEZVOUS.to_string(), rendezvous.to_string()),
            (env::JOB_ID.to_string(), format!("{job_id:016x}")),
            (env::TRANSPORT.to_string(), self.transport.clone()),
            (
                env::LOCAL_NODES.to_string(),
                self.nodes_on_host_of(rank).to_string(),
            ),
        ];
        if let Some(faults) = &self.net_faults {
            vars.push((env::NET_FAULTS.to_string(), faults.clone()));
        }
        if self.stats {
            vars.push((env::STATS.to_string(), "1".to_string()));
        }
        let auth = match (self.auth_on(), self.auth) {
            (true, AuthSetting::Encrypt) => "encrypt",
            (true, _) => "on",
            (false, _) => "off",
        };
        vars.push((env::AUTH.to_string(), auth.to_string()));
        vars.extend(self.extra_env.iter().cloned());
        vars
    }
}

/// A new job key from the operating system's random source: 64 hex digits.
pub fn new_auth_key() -> Result<String, LaunchError> {
    use rand::RngCore;
    let mut k = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut k)
        .map_err(|e| LaunchError::Random(e.to_string()))?;
    Ok(k.iter().map(|b| format!("{b:02x}")).collect())
}

/// Find `program` the way `execvp` would: a name containing `/` is a path; otherwise each
/// PATH entry is tried. Returns the path that will be executed.
pub fn resolve_program(program: &str) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.is_empty() {
        return Err(LaunchError::ProgramNotFound {
            name: program.to_string(),
        });
    }
    if program.contains('/') {
        let path = PathBuf::from(program);
        if !path.is_file() {
            return Err(LaunchError::ProgramNotFound {
                name: program.to_string(),
            });
        }
        if !is_exec(&path) {
            return Err(LaunchError::NotExecutable { path });
        }
        return Ok(path);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path_var) {
        let candidate = dir.join(program);
        if is_exec(&candidate) {
            return Ok(candidate);
        }
    }
    Err(LaunchError::ProgramNotFound {
        name: program.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_zero_nodes_and_bad_transport() {
        let mut spec = JobSpec::local(0, "true", vec![]);
        assert!(matches!(spec.validate(), Err(LaunchError::NoNodes(0))));
        spec.nodes = 2;
        spec.transport = "carrier-pigeon".into();
        let err = spec.validate().expect_err("bad transport accepted");
        assert!(err.to_string().contains("carrier-pigeon"));
        spec.transport = "udp".into();
        assert!(spec.validate().is_ok());
    }

    #[test]
    fn node_env_has_every_launcher_variable() {
        let mut spec = JobSpec::local(4, "true", vec![]);
        spec.net_faults = Some("loss=0.1".into());
        spec.stats = true;
        let vars = spec.node_env(3, "127.0.0.1:5000", 0xabc);
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get(env::RANK), "3");
        assert_eq!(get(env::SIZE), "4");
        assert_eq!(get(env::RENDEZVOUS), "127.0.0.1:5000");
        assert_eq!(get(env::JOB_ID), "0000000000000abc");
        assert_eq!(get(env::TRANSPORT), "tcp");
        assert_eq!(get(env::NET_FAULTS), "loss=0.1");
        assert_eq!(get(env::STATS), "1");
        assert_eq!(get(env::LOCAL_NODES), "4");
        spec.launcher = LauncherKind::Rsh(RshOptions {
            hosts: vec!["a".into(), "b".into(), "a".into()],
            ..RshOptions::default()
        });
        assert_eq!(spec.nodes_on_host_of(0), 3, "ranks 0, 2 and 3 run on a");
        assert_eq!(spec.nodes_on_host_of(1), 1);
    }

    #[test]
    fn auth_follows_the_launcher_unless_forced() {
        let mut spec = JobSpec::local(2, "true", vec![]);
        assert!(!spec.auth_on(), "local jobs: off by default");
        spec.launcher = LauncherKind::Rsh(RshOptions {
            hosts: vec!["a".into(), "b".into()],
            ..RshOptions::default()
        });
        assert!(spec.auth_on(), "several hosts: on by default");
        spec.auth = AuthSetting::Off;
        assert!(!spec.auth_on());
        let vars = spec.node_env(0, "h:1", 1);
        assert!(vars.contains(&(env::AUTH.to_string(), "off".to_string())));
        let mut spec = JobSpec::local(2, "true", vec![]);
        spec.auth = AuthSetting::On;
        assert!(spec.auth_on());
        let vars = spec.node_env(1, "h:1", 1);
        assert!(vars.contains(&(env::AUTH.to_string(), "on".to_string())));
        assert!(!vars.iter().any(|(k, _)| k == env::AUTH_KEY), "no key here");
        spec.transport = "mpi".into();
        assert!(matches!(spec.validate(), Err(LaunchError::AuthOverMpi)));
        assert_eq!("ON".parse::<AuthSetting>(), Ok(AuthSetting::On));
        let mut spec = JobSpec::local(2, "true", vec![]);
        spec.auth = AuthSetting::Encrypt;
        let vars = spec.node_env(1, "h:1", 1);
        assert!(vars.contains(&(env::AUTH.to_string(), "encrypt".to_string())));
        assert!("sometimes".parse::<AuthSetting>().is_err());
        let (a, b) = (new_auth_key().expect("key"), new_auth_key().expect("key"));
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn resolve_program_finds_sh_and_names_missing_programs() {
        assert!(resolve_program("sh").is_ok());
        let err = resolve_program("no-such-program-squall").expect_err("found a ghost");
        assert!(err.to_string().contains("no-such-program-squall"));
        let err = resolve_program("./no/such/file").expect_err("found a ghost path");
        assert!(err.to_string().contains("./no/such/file"));
    }
}

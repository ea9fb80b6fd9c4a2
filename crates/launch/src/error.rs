//! The launcher's error type. Owns only error values; messages are lowercase and name the
//! node or program concerned.
use std::path::PathBuf;

/// Why a job could not be started or supervised (a node failing is not an error here: it is
/// reported in [`crate::JobReport`]).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the job needs at least 1 node (got {0})")]
    NoNodes(usize),
    #[error("the job asks for {0} nodes; at most {max} are supported", max = u16::MAX)]
    TooManyNodes(usize),
    #[error("program not found: {name} (not a file, and not found in PATH)")]
    ProgramNotFound { name: String },
    #[error("program is not executable: {}", path.display())]
    NotExecutable { path: PathBuf },
    #[error("unknown transport {0:?} (expected tcp, udp or mpi)")]
    BadTransport(String),
    #[error("no hosts given for the remote-shell launcher")]
    NoHosts,
    #[error("the remote shell command is empty")]
    EmptyRsh,
    #[error("cannot read hostfile {}: {source}", path.display())]
    Hostfile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "bad line {line} in hostfile {}: {text:?} (expected `host`, `host:K` or `host slots=K`, \
         K from 1 to 65535)",
        path.display()
    )]
    HostfileLine {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("cannot resolve host {host:?} for the rendezvous address: {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot pick a free rendezvous port: {0}")]
    Port(std::io::Error),
    #[error("cannot start node {rank} ({program}): {source}")]
    Spawn {
        rank: u16,
        program: String,
        source: std::io::Error,
    },
    #[error("cannot install the termination signal handler: {0}")]
    Signals(std::io::Error),
    #[error("cannot open the job's input {}: {source}", path.display())]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "authentication is on, but the mpi transport does not authenticate packets (MPI's \
         own channels carry them): use --transport tcp or udp, or --no-auth (SQUALL_AUTH=off)"
    )]
    AuthOverMpi,
    #[error("cannot read the operating system's random source for the job key: {0}")]
    Random(String),
    #[error("cannot hand node {rank} its key: {source}")]
    KeyHandoff { rank: u16, source: std::io::Error },
    #[error("cannot wait for node {rank}: {source}")]
    Wait { rank: u16, source: std::io::Error },
}

//! Starting a job: process management for `squall run`.
//!
//! Owns: choosing the rendezvous address, building each node's command (one module per
//! launcher kind: [`local`], [`rsh`], [`mpirun`]), spawning node processes in their own process groups,
//! forwarding their output line by line and the job's input to rank 0 ([`stdin`]), noticing the first node that fails, and cleaning up
//! every process (SIGTERM and SIGCONT, then SIGKILL after a grace period) on failure, timeout
//! or Ctrl-C. A local node left stopped (SIGSTOP) for twice the peer timeout is a failure too.
//!
//! Must not touch: the join/hello exchange itself (that is `squall_net::bootstrap`, driven by
//! the environment variables set here), coherence, or anything inside a node.
#![forbid(unsafe_code)]

pub mod error;
pub mod job;
pub mod local;
pub mod mpirun;
pub mod output;
pub mod rsh;
pub mod spec;
pub mod stdin;

pub use error::LaunchError;
pub use job::{run_job, JobReport, NodeExit, NodeOutcome};
pub use mpirun::MpirunOptions;
pub use output::{ForwardSink, LineSink, Stream};
pub use spec::{AuthSetting, JobSpec, LauncherKind, RshOptions};
pub use stdin::JobInput;

/// Exit status `squall run` uses when the job hit its `--timeout` (as `timeout(1)` does).
pub const EXIT_TIMEOUT: i32 = 124;

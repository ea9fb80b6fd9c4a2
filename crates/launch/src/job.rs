//! Running a job: spawn every node in its own process group, forward its output, wait, and
//! on the first failure, a timeout or a termination signal to the launcher, end every node
//! (SIGTERM to its group, SIGKILL after the grace period). Rank 0's stdin is the job's input
//! ([`crate::stdin`]), every other node's is /dev/null. Owns process lifetimes and the
//! exit report; must not know what the nodes do.
use crate::error::LaunchError;
use crate::output::{pump, LineSink, Stream};
use crate::spec::{JobSpec, LauncherKind};
use crate::stdin::Rank0Input;
use crate::{local, mpirun, rsh, EXIT_TIMEOUT};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the supervisor looks at its children.
const POLL: Duration = Duration::from_millis(10);
/// How long the supervisor waits for the cause when the first failures are all nodes that lost
/// a peer (status 3), before naming one of them.
const LOST_PEER_WAIT: Duration = Duration::from_millis(500);
/// How long the supervisor waits for output of exited nodes to drain.
const DRAIN: Duration = Duration::from_secs(1);

/// How one node process ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NodeExit {
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal number.
    Signaled(i32),
}

impl NodeExit {
    fn from_status(status: ExitStatus) -> NodeExit {
        match (status.code(), status.signal()) {
            (Some(code), _) => NodeExit::Exited(code),
            (None, Some(sig)) => NodeExit::Signaled(sig),
            (None, None) => NodeExit::Exited(-1),
        }
    }

    /// Did the node end well?
    pub fn success(self) -> bool {
        self == NodeExit::Exited(0)
    }

    /// `exited with status 7` / `was killed by signal SIGKILL`.
    pub fn describe(self) -> String {
        match self {
            NodeExit::Exited(code) => format!("exited with status {code}"),
            NodeExit::Signaled(sig) => format!("was killed by signal {}", signal_name(sig)),
        }
    }

    /// The shell's convention: the status, or 128 + the signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            NodeExit::Exited(code) => code,
            NodeExit::Signaled(sig) => 128 + sig,
        }
    }
}

/// `SIGKILL` for 9, `signal 77` for numbers without a name.
pub fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// One node's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOutcome {
    pub rank: u16,
    pub pid: u32,
    pub exit: NodeExit,
    /// The node ended after the launcher had started terminating the job.
    pub by_launcher: bool,
}

/// How a job ended.
#[derive(Clone, Debug)]
pub struct JobReport {
    /// Every node, in rank order.
    pub nodes: Vec<NodeOutcome>,
    /// The rank whose failure ended the job, if one did.
    pub first_failure: Option<u16>,
    /// The job ran past its timeout.
    pub timed_out: bool,
    /// The launcher received this termination signal.
    pub interrupted: Option<i32>,
    /// Wall time from the first spawn to the last exit.
    pub elapsed: Duration,
}

impl JobReport {
    /// Every node exited 0 and nothing ended the job early.
    pub fn success(&self) -> bool {
        self.first_failure.is_none()
            && !self.timed_out
            && self.interrupted.is_none()
            && self.nodes.iter().all(|n| n.exit.success())
    }

    /// The status `squall run` exits with: 0; the first failing node's status (128 + signal
    /// when killed); 124 on timeout; 128 + signal when the launcher was interrupted.
    pub fn exit_code(&self) -> i32 {
        if let Some(rank) = self.first_failure {
            if let Some(n) = self.nodes.iter().find(|n| n.rank == rank) {
                return n.exit.shell_code();
            }
        }
        if self.timed_out {
            return EXIT_TIMEOUT;
        }
        if let Some(sig) = self.interrupted {
            return 128 + sig;
        }
        match self.nodes.iter().find(|n| !n.exit.success()) {
            Some(n) => n.exit.shell_code(),
            None => 0,
        }
    }
}

struct Running {
    rank: u16,
    child: Child,
}

/// Start the job, supervise it to the end and report. Node output goes to `sink`; the
/// launcher's own notices (`squall: node 2 (pid 811) was killed by signal SIGKILL; ...`) go
/// to stderr. SIGINT, SIGTERM and SIGHUP to this process end the job cleanly.
pub fn run_job(spec: &JobSpec, sink: Arc<dyn LineSink>) -> Result<JobReport, LaunchError> {
    spec.validate()?;
    let job_id: u64 = rand::random();
    let key = if spec.auth_on() {
        Some(crate::spec::new_auth_key()?)
    } else {
        None
    };
    let mut key_on_stdin = None;
    let mut commands = match &spec.launcher {
        LauncherKind::Local => local::commands(spec, job_id, key.as_deref())?,
        LauncherKind::Rsh(opts) => {
            key_on_stdin = key
                .as_ref()
                .map(|k| Arc::<[u8]>::from(format!("{k}\n").as_bytes()));
            rsh::commands(spec, opts, job_id, key_on_stdin.is_some())?
        }
        LauncherKind::Mpirun(opts) => mpirun::commands(spec, opts, job_id)?,
    };
    let sink = match &spec.launcher {
        LauncherKind::Mpirun(_) => mpirun::untagging_sink(sink),
        _ => sink,
    };

    let guard = SignalGuard::enter()?;
    supervise(spec, &mut commands, sink, &guard.state.caught, key_on_stdin)
}

/// The launcher's termination-signal handling, installed once per process: while a job runs,
/// SIGINT/SIGTERM/SIGHUP are recorded in `caught` (and the job is ended cleanly); while no job
/// runs (`idle`), they keep their default action, so Ctrl-C between jobs still terminates.
struct SignalState {
    caught: Arc<AtomicUsize>,
    idle: Arc<AtomicBool>,
    jobs: Mutex<usize>,
}

static SIGNALS: Mutex<Option<Arc<SignalState>>> = Mutex::new(None);

/// Marks a job as running for as long as it lives.
struct SignalGuard {
    state: Arc<SignalState>,
}

impl SignalGuard {
    fn enter() -> Result<SignalGuard, LaunchError> {
        let mut slot = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
        let state = match slot.as_ref() {
            Some(s) => Arc::clone(s),
            None => {
                let s = Arc::new(SignalState {
                    caught: Arc::new(AtomicUsize::new(0)),
                    idle: Arc::new(AtomicBool::new(true)),
                    jobs: Mutex::new(0),
                });
                for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
                    let sig = libc_sig(sig);
                    signal_hook::flag::register_usize(sig, Arc::clone(&s.caught), sig as usize)
                        .map_err(LaunchError::Signals)?;
                    signal_hook::flag::register_conditional_default(sig, Arc::clone(&s.idle))
                        .map_err(LaunchError::Signals)?;
                }
                *slot = Some(Arc::clone(&s));
                s
            }
        };
        let mut jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if *jobs == 0 {
            state.caught.store(0, Ordering::SeqCst);
        }
        *jobs += 1;
        state.idle.store(false, Ordering::SeqCst);
        drop(jobs);
        Ok(SignalGuard { state })
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut jobs = self.state.jobs.lock().unwrap_or_else(|e| e.into_inner());
        *jobs = jobs.saturating_sub(1);
        if *jobs == 0 {
            self.state.idle.store(true, Ordering::SeqCst);
        }
    }
}

fn libc_sig(sig: Signal) -> i32 {
    sig as i32
}

fn supervise(
    spec: &JobSpec,
    commands: &mut [std::process::Command],
    sink: Arc<dyn LineSink>,
    signal: &AtomicUsize,
    key_line: Option<Arc<[u8]>>,
) -> Result<JobReport, LaunchError> {
    let start = Instant::now();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut readers = 0usize;
    let mut running: Vec<Running> = Vec::with_capacity(commands.len());
    // Rank 0 (or the ssh/mpirun process that starts it) gets the job's input; the others EOF.
    // With `key_line`, every node's stdin starts with it (remote shells read the key there).
    let (rank0_stdin, rank0_input) = Rank0Input::prepare_after(&spec.input, key_line.clone())?;
    let mut rank0_stdin = Some(rank0_stdin);
    let mut rank0_input = Some(rank0_input);
    let stop_feeder = Arc::new(AtomicBool::new(false));
    let mut feeder = None;
    for (rank, cmd) in commands.iter_mut().enumerate() {
        let rank = u16::try_from(rank).map_err(|_| LaunchError::TooManyNodes(spec.nodes))?;
        let stdin = if rank == 0 {
            rank0_stdin.take().unwrap_or_else(Stdio::null)
        } else if key_line.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                stop_feeder.store(true, Ordering::Relaxed);
                terminate_all(&mut running, spec.grace);
                return Err(LaunchError::Spawn {
                    rank,
                    program: cmd.get_program().to_string_lossy().into_owned(),
                    source,
                });
            }
        };
        if rank == 0 {
            if let Some(input) = rank0_input.take() {
                feeder = input.start(child.stdin.take(), &stop_feeder);
            }
        } else if let (Some(line), Some(mut pipe)) = (key_line.as_ref(), child.stdin.take()) {
            // One short line into an empty pipe: it fits, the write does not block; closing
            // the pipe then gives the node EOF, as /dev/null would.
            use std::io::Write;
            if let Err(source) = pipe.write_all(line) {
                running.push(Running { rank, child });
                stop_feeder.store(true, Ordering::Relaxed);
                terminate_all(&mut running, spec.grace);
                return Err(LaunchError::KeyHandoff { rank, source });
            }
        }
        if let Some(out) = child.stdout.take() {
            readers += spawn_reader(out, rank, Stream::Stdout, &sink, &done_tx);
        }
        if let Some(err) = child.stderr.take() {
            readers += spawn_reader(err, rank, Stream::Stderr, &sink, &done_tx);
        }
        running.push(Running { rank, child });
    }
    drop(done_tx);

    let mut outcomes: Vec<NodeOutcome> = Vec::with_capacity(running.len());
    let mut first_failure: Option<u16> = None;
    let mut timed_out = false;
    let mut interrupted: Option<i32> = None;
    // When termination started, and whether SIGKILL has been sent.
    let mut terminating: Option<Instant> = None;
    let mut killed = false;
    let mut stops = StopWatch::new(spec);
    // Failures seen before termination began, and since when only "lost a peer" ones are.
    let mut failed: Vec<NodeOutcome> = Vec::new();
    let mut only_lost_since: Option<Instant> = None;

    while !running.is_empty() {
        let mut failed_now: Vec<NodeOutcome> = Vec::new();
        let mut i = 0;
        while i < running.len() {
            let status = running[i]
                .child
                .try_wait()
                .map_err(|source| LaunchError::Wait {
                    rank: running[i].rank,
                    source,
                })?;
            match status {
                Some(status) => {
                    let r = running.swap_remove(i);
                    let outcome = NodeOutcome {
                        rank: r.rank,
                        pid: r.child.id(),
                        exit: NodeExit::from_status(status),
                        by_launcher: terminating.is_some(),
                    };
                    if !outcome.exit.success() && terminating.is_none() {
                        failed_now.push(outcome.clone());
                    }
                    outcomes.push(outcome);
                }
                None => i += 1,
            }
        }
        if terminating.is_none() {
            failed.append(&mut failed_now);
            // A node that exits with "lost a peer" may have beaten the peer's own end (a
            // killed node's sockets close before the launcher can reap it): wait a moment for
            // the cause to show.
            let only_lost =
                !failed.is_empty() && failed.iter().all(|o| o.exit == NodeExit::Exited(3));
            let waited = only_lost
                && only_lost_since.get_or_insert_with(Instant::now).elapsed() < LOST_PEER_WAIT
                && !running.is_empty();
            let cause = if waited { None } else { pick_cause(&failed) };
            if let Some(cause) = cause {
                first_failure = Some(cause.rank);
                let others = failed.len() - 1;
                let also = if others > 0 {
                    format!(" ({others} other node(s) failed at the same moment)")
                } else {
                    String::new()
                };
                let rest = if running.is_empty() {
                    String::new()
                } else {
                    format!("; terminating the other {} node(s)", running.len())
                };
                eprintln!(
                    "squall: node {} (pid {}) {}{also}{rest}",
                    cause.rank,
                    cause.pid,
                    cause.exit.describe(),
                );
                terminating = Some(Instant::now());
            } else if let Some(sig) = nonzero(signal.load(Ordering::Relaxed)) {
                interrupted = Some(sig);
                eprintln!(
                    "squall: received {}; terminating {} node(s)",
                    signal_name(sig),
                    running.len()
                );
                terminating = Some(Instant::now());
            } else if let Some((rank, pid, stopped)) = stops.look(&running) {
                first_failure = Some(rank);
                eprintln!(
                    "squall: node {rank} (pid {pid}) has been stopped (SIGSTOP) for {:.1} s; \
                     terminating {} node(s)",
                    stopped.as_secs_f64(),
                    running.len()
                );
                terminating = Some(Instant::now());
            } else if spec.timeout.is_some_and(|t| start.elapsed() >= t) {
                timed_out = true;
                eprintln!(
                    "squall: job timed out after {:.1} s; terminating {} node(s)",
                    start.elapsed().as_secs_f64(),
                    running.len()
                );
                terminating = Some(Instant::now());
            }
            if terminating.is_some() {
                end_groups(&running);
            }
        } else if let Some(t0) = terminating {
            if !killed && t0.elapsed() >= spec.grace {
                signal_groups(&running, Signal::SIGKILL);
                killed = true;
            }
        }
        if !running.is_empty() {
            std::thread::sleep(POLL);
        }
    }

    // Rank 0 is gone: its input feeder (if any) ends within one poll.
    stop_feeder.store(true, Ordering::Relaxed);
    if let Some(f) = feeder {
        let _ = f.join();
    }

    // A job ended early leaves nothing behind: whatever is left in any node's process group
    // (children a node started and did not reap) is killed too.
    if terminating.is_some() {
        for o in &outcomes {
            if let Ok(pid) = i32::try_from(o.pid) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    // Let the readers finish the last lines; a grandchild still holding a pipe open must not
    // hold up the launcher.
    let deadline = Instant::now() + DRAIN;
    for _ in 0..readers {
        let left = deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    outcomes.sort_by_key(|o| o.rank);
    Ok(JobReport {
        nodes: outcomes,
        first_failure,
        timed_out,
        interrupted,
        elapsed: start.elapsed(),
    })
}

/// Finds a node that stays stopped (SIGSTOP; state `T`, not a debugger's `t`) for twice the
/// nodes' peer timeout (at least a second). Its peers end the job themselves when it stops
/// mid-run, but not while they are still joining (rank 0 stopped before it sent the table) or
/// after they have all finished (a node stopped on its way out): then the launcher must.
/// Local nodes only (a remote shell's process says nothing about the node).
struct StopWatch {
    limit: Option<Duration>,
    /// When each rank was first seen stopped (in a row of looks).
    since: Vec<Option<Instant>>,
    next_look: Instant,
}

/// How often the launcher looks at its nodes' states.
const STOP_LOOK: Duration = Duration::from_millis(100);

impl StopWatch {
    fn new(spec: &JobSpec) -> StopWatch {
        let var = squall_core::env::PEER_TIMEOUT_MS;
        let peer_ms = spec
            .extra_env
            .iter()
            .rev()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(var).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(3000);
        let local = matches!(spec.launcher, LauncherKind::Local);
        StopWatch {
            limit: local.then(|| {
                Duration::from_millis(peer_ms.saturating_mul(2)).max(Duration::from_secs(1))
            }),
            since: vec![None; spec.nodes],
            next_look: Instant::now(),
        }
    }

    /// A node stopped past the limit: (rank, pid, how long).
    fn look(&mut self, running: &[Running]) -> Option<(u16, u32, Duration)> {
        let limit = self.limit?;
        let now = Instant::now();
        if now < self.next_look {
            return None;
        }
        self.next_look = now + STOP_LOOK;
        let mut found = None;
        for r in running {
            let Some(slot) = self.since.get_mut(usize::from(r.rank)) else {
                continue;
            };
            if !is_stopped(r.child.id()) {
                *slot = None;
                continue;
            }
            let t = *slot.get_or_insert(now);
            if found.is_none() && now.duration_since(t) >= limit {
                found = Some((r.rank, r.child.id(), now.duration_since(t)));
            }
        }
        found
    }
}

/// Is the process stopped by a signal (state `T` in /proc/PID/stat)?
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        == Some('T')
}

fn nonzero(v: usize) -> Option<i32> {
    if v == 0 {
        None
    } else {
        i32::try_from(v).ok()
    }
}

/// Among nodes found failed in one look, the likeliest cause: a node killed by a signal, then
/// one with a status other than 3 (3 is what nodes exit with after losing a peer), then the
/// lowest rank.
fn pick_cause(failed: &[NodeOutcome]) -> Option<&NodeOutcome> {
    failed.iter().min_by_key(|o| {
        let class = match o.exit {
            NodeExit::Signaled(_) => 0,
            NodeExit::Exited(3) => 2,
            NodeExit::Exited(_) => 1,
        };
        (class, o.rank)
    })
}

fn spawn_reader(
    reader: impl std::io::Read + Send + 'static,
    rank: u16,
    stream: Stream,
    sink: &Arc<dyn LineSink>,
    done: &mpsc::Sender<()>,
) -> usize {
    let sink = Arc::clone(sink);
    let done = done.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("squall-out-{rank}"))
        .spawn(move || {
            pump(reader, rank, stream, &sink);
            let _ = done.send(());
        });
    usize::from(spawned.is_ok())
}

/// Send `sig` to every running node's process group (each node leads its own group).
fn signal_groups(running: &[Running], sig: Signal) {
    for r in running {
        if let Ok(pid) = i32::try_from(r.child.id()) {
            // The group may already be gone; that is what we want anyway.
            let _ = killpg(Pid::from_raw(pid), sig);
        }
    }
}

/// SIGTERM to every running node's group, then SIGCONT: a stopped node (SIGSTOP, a
/// debugger's stop) takes its SIGTERM now instead of waiting for the SIGKILL of the grace
/// period's end.
fn end_groups(running: &[Running]) {
    signal_groups(running, Signal::SIGTERM);
    signal_groups(running, Signal::SIGCONT);
}

/// End every node now (used when a later node cannot be started).
fn terminate_all(running: &mut Vec<Running>, grace: Duration) {
    end_groups(running);
    let deadline = Instant::now() + grace;
    while !running.is_empty() && Instant::now() < deadline {
        running.retain_mut(|r| matches!(r.child.try_wait(), Ok(None)));
        std::thread::sleep(POLL);
    }
    signal_groups(running, Signal::SIGKILL);
    for r in running.iter_mut() {
        let _ = r.child.wait();
    }
    running.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rank: u16, exit: NodeExit) -> NodeOutcome {
        NodeOutcome {
            rank,
            pid: 1,
            exit,
            by_launcher: false,
        }
    }

    #[test]
    fn cause_prefers_signals_over_peer_lost_exits() {
        let failed = vec![
            outcome(0, NodeExit::Exited(3)),
            outcome(2, NodeExit::Signaled(9)),
            outcome(1, NodeExit::Exited(7)),
        ];
        assert_eq!(pick_cause(&failed).map(|o| o.rank), Some(2));
        let failed = vec![
            outcome(0, NodeExit::Exited(3)),
            outcome(3, NodeExit::Exited(7)),
        ];
        assert_eq!(pick_cause(&failed).map(|o| o.rank), Some(3));
        assert!(pick_cause(&[]).is_none());
    }

    #[test]
    fn a_stopped_node_takes_its_sigterm_when_the_job_ends() {
        // Rank 1 stops itself (as SIGSTOP past the peer timeout would); rank 0 fails. The
        // launcher's SIGTERM must reach the stopped node now (SIGCONT follows it), not be
        // replaced by the SIGKILL at the end of the grace period.
        let spec = JobSpec::local(
            2,
            "sh",
            vec![
                "-c".into(),
                "if [ \"$SQUALL_RANK\" = 1 ]; then kill -STOP $$; sleep 30; fi; sleep 0.3; exit 5"
                    .into(),
            ],
        );
        let sink: Arc<dyn LineSink> = Arc::new(crate::output::ForwardSink { prefix: true });
        let report = run_job(&spec, sink).expect("job runs");
        assert_eq!(report.first_failure, Some(0), "{report:?}");
        assert_eq!(report.exit_code(), 5);
        let stopped = report.nodes.iter().find(|n| n.rank == 1).expect("rank 1");
        assert_eq!(
            stopped.exit,
            NodeExit::Signaled(Signal::SIGTERM as i32),
            "{report:?}"
        );
    }

    #[test]
    fn a_node_left_stopped_after_the_others_finished_ends_the_job() {
        // Every other node finishes well; rank 1 stops on its way out, where no peer is left
        // to miss it. The launcher names it after twice the peer timeout (at least 1 s).
        let mut spec = JobSpec::local(
            3,
            "sh",
            vec![
                "-c".into(),
                "if [ \"$SQUALL_RANK\" = 1 ]; then kill -STOP $$; fi; exit 0".into(),
            ],
        );
        spec.extra_env
            .push((squall_core::env::PEER_TIMEOUT_MS.into(), "100".into()));
        let sink: Arc<dyn LineSink> = Arc::new(crate::output::ForwardSink { prefix: true });
        let report = run_job(&spec, sink).expect("job runs");
        assert_eq!(report.first_failure, Some(1), "{report:?}");
        assert_eq!(
            report.exit_code(),
            128 + Signal::SIGTERM as i32,
            "{report:?}"
        );
        assert!(!report.success());
    }

    #[test]
    fn a_killed_node_is_named_even_when_a_peer_exits_first() {
        // Rank 0 exits with "lost a peer" (3) a moment before rank 1 is killed: the launcher
        // must name rank 1, the cause, not the node that noticed first.
        let flag = std::env::temp_dir().join(format!("squall-launch-lost-{}", std::process::id()));
        let _ = std::fs::remove_file(&flag);
        let f = flag.display();
        let spec = JobSpec::local(
            3,
            "sh",
            vec![
                "-c".into(),
                format!(
                    "case $SQUALL_RANK in 0) touch {f}; exit 3;; \
                     1) while [ ! -e {f} ]; do sleep 0.01; done; sleep 0.05; kill -KILL $$;; \
                     *) exec sleep 30;; esac"
                ),
            ],
        );
        let sink: Arc<dyn LineSink> = Arc::new(crate::output::ForwardSink { prefix: true });
        let report = run_job(&spec, sink).expect("job runs");
        let _ = std::fs::remove_file(&flag);
        assert_eq!(report.first_failure, Some(1), "{report:?}");
        assert_eq!(report.exit_code(), 128 + Signal::SIGKILL as i32);
    }

    #[test]
    fn exit_descriptions_name_the_signal() {
        assert_eq!(
            NodeExit::Signaled(9).describe(),
            "was killed by signal SIGKILL"
        );
        assert_eq!(NodeExit::Exited(7).describe(), "exited with status 7");
        assert_eq!(NodeExit::Signaled(9).shell_code(), 137);
    }

    #[test]
    fn report_exit_code_follows_the_first_failure() {
        let report = JobReport {
            nodes: vec![
                outcome(0, NodeExit::Signaled(15)),
                outcome(1, NodeExit::Exited(7)),
            ],
            first_failure: Some(1),
            timed_out: false,
            interrupted: None,
            elapsed: Duration::ZERO,
        };
        assert!(!report.success());
        assert_eq!(report.exit_code(), 7);
    }
}

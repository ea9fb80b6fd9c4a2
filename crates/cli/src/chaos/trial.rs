//! One chaos trial: start `squall run` (this executable) on an app as a child process, find
//! its node processes, inject one fault (SIGKILL or SIGSTOP of a node by pid after a delay, or
//! a partition through `--net-faults partition=A-B@T`), time every output line, and judge how
//! the job ended. A job still running `bound` after the injection is a hang: the harness ends
//! it (SIGTERM to the launcher, then SIGKILL to it and every node it finds).
//!
//! Owns processes of one trial and the verdict; must not know what the nodes do beyond the
//! wording of the failure lines (`lost contact with node N`, `node N (pid ...)`, `node N failed`).
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The kinds of fault.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// SIGKILL to one node process.
    Kill,
    /// SIGSTOP to one node process (it stays stopped: the peers' timeout must find it).
    Stop,
    /// Every packet between two nodes dropped by the fault-injection layer.
    Partition,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Stop => "stop",
            Kind::Partition => "partition",
        }
    }
}

/// How a trial ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Non-zero exit, a line naming the faulty node, and the end within the limit of detection.
    Correct,
    /// Ended, but not that way (exit 0 after the fault, no line naming the node, too slow).
    Otherwise,
    /// Still running `bound` after the injection: ended by the harness.
    Hang,
    /// The app finished before the fault could be injected (or before the cut).
    FinishedFirst,
}

/// What one trial is to do.
#[derive(Debug, Clone)]
pub struct TrialPlan {
    pub kind: Kind,
    pub app: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub nodes: usize,
    pub transport: String,
    pub peer_timeout_ms: u64,
    /// When to inject, counted from the start of `squall run`.
    pub delay: Duration,
    /// Kill/stop: the node; partition: one side.
    pub victim: u16,
    /// Partition: the other side.
    pub other: Option<u16>,
    pub bound: Duration,
    pub end_limit: Duration,
    /// Marks the trial's processes (an environment variable) so the harness signals only them.
    pub marker: String,
}

/// The record of one trial (a row of the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct TrialRecord {
    pub kind: Kind,
    pub app: String,
    pub outcome: Outcome,
    /// The launcher's exit status (None: killed by the harness).
    pub exit: Option<i32>,
    pub victim: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<u16>,
    /// Planned moment of the fault after the start, ms.
    pub delay_ms: f64,
    /// From the injection to the job's end, ms.
    pub inject_to_end_ms: Option<f64>,
    /// From the first failure line to the job's end, ms.
    pub detect_to_end_ms: Option<f64>,
    /// Why it is not `correct` (and the failure line found, if any).
    pub note: String,
    /// From the start of `squall run` to the job's end, ms.
    pub job_ms: f64,
    /// The job ended, exit 0, before the fault's moment (its time is a clean run's).
    #[serde(skip)]
    pub clean_run: bool,
}

/// Timestamped lines of the launcher's stdout and stderr.
type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

fn pump(r: impl Read + Send + 'static, lines: &Lines) -> std::thread::JoinHandle<()> {
    let lines = Arc::clone(lines);
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if let Ok(mut v) = lines.lock() {
                v.push((Instant::now(), l));
            }
        }
    })
}

/// `squall run` for the plan, started.
fn start(plan: &TrialPlan) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg("-n")
        .arg(plan.nodes.to_string())
        .arg("--transport")
        .arg(&plan.transport);
    if plan.kind == Kind::Partition {
        cmd.arg("--net-faults").arg(format!(
            "partition={}-{}@{}ms",
            plan.victim,
            plan.other.unwrap_or(0),
            plan.delay.as_millis()
        ));
    }
    cmd.arg(&plan.program)
        .args(&plan.args)
        .env(
            squall_core::env::PEER_TIMEOUT_MS,
            plan.peer_timeout_ms.to_string(),
        )
        .env(super::MARKER_VAR, &plan.marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn()
}

/// The node processes of the trial: rank → pid, found among the launcher's children by
/// their environment (`SQUALL_RANK` and the trial's marker).
fn node_pids(launcher: u32, marker: &str, nodes: usize) -> Vec<Option<i32>> {
    let mut pids = vec![None; nodes];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if parent_of(pid) != Some(launcher) {
            continue;
        }
        if let Some(rank) = rank_of(pid, marker) {
            if let Some(slot) = pids.get_mut(rank) {
                *slot = Some(pid);
            }
        }
    }
    pids
}

/// The parent pid from /proc/PID/stat.
fn parent_of(pid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The rank of a node process of this trial (its environment holds the marker).
fn rank_of(pid: i32, marker: &str) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let mut rank = None;
    let mut ours = false;
    let want = format!("{}={marker}", super::MARKER_VAR);
    let rank_key = format!("{}=", squall_core::env::RANK);
    for var in env.split(|&b| b == 0) {
        let var = String::from_utf8_lossy(var);
        if var == want {
            ours = true;
        } else if let Some(r) = var.strip_prefix(&rank_key) {
            rank = r.parse().ok();
        }
    }
    rank.filter(|_| ours)
}

/// Signal `pid` if it is still a process of this trial (never a reused pid).
fn signal_ours(pid: i32, marker: &str, sig: Signal) -> bool {
    rank_of(pid, marker).is_some() && kill(Pid::from_raw(pid), sig).is_ok()
}

/// Does `line` say the job failed because of `node`?
fn names(line: &str, node: u16) -> bool {
    line.contains(&format!("lost contact with node {node} "))
        || line.contains(&format!("node {node} (pid"))
        || line.contains(&format!("node {node} failed"))
}

/// Is `line` a failure line (of a node or the launcher)?
fn is_failure_line(line: &str) -> bool {
    line.contains("lost contact with node")
        || line.contains("was killed by signal")
        || line.contains(" failed: ")
        || (line.contains("squall: node") && line.contains("exited with status"))
}

/// Run one trial to its end and judge it.
pub fn run(plan: &TrialPlan) -> std::io::Result<TrialRecord> {
    let t0 = Instant::now();
    let mut child = start(plan)?;
    let lines: Lines = Arc::new(Mutex::new(Vec::new()));
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        pumps.push(pump(o, &lines));
    }
    if let Some(e) = child.stderr.take() {
        pumps.push(pump(e, &lines));
    }
    let launcher = child.id();
    let mut pids: Vec<Option<i32>> = vec![None; plan.nodes];
    let mut injected: Option<Instant> = None;
    let mut not_injected = String::new();
    let mut status = None;
    let mut hung = false;
    let mut hang_deadline = t0 + plan.delay + plan.bound;
    loop {
        if let Some(st) = child.try_wait()? {
            status = Some(st);
            break;
        }
        let now = Instant::now();
        if pids.iter().any(Option::is_none) {
            for (slot, found) in pids
                .iter_mut()
                .zip(node_pids(launcher, &plan.marker, plan.nodes))
            {
                if slot.is_none() {
                    *slot = found;
                }
            }
        }
        if injected.is_none() && not_injected.is_empty() && now >= t0 + plan.delay {
            match plan.kind {
                Kind::Partition => injected = Some(t0 + plan.delay),
                Kind::Kill | Kind::Stop => {
                    let sig = if plan.kind == Kind::Kill {
                        Signal::SIGKILL
                    } else {
                        Signal::SIGSTOP
                    };
                    match pids[usize::from(plan.victim)] {
                        Some(pid) if signal_ours(pid, &plan.marker, sig) => {
                            injected = Some(Instant::now());
                            hang_deadline = Instant::now() + plan.bound;
                        }
                        Some(_) => not_injected = "the node had exited".into(),
                        // Not spawned yet (a loaded machine): try again next look.
                        None if now < t0 + plan.delay + plan.bound => {}
                        None => not_injected = "the node never appeared".into(),
                    }
                }
            }
        }
        if now >= hang_deadline {
            hung = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ended = Instant::now();
    if hung {
        end_hung(&mut child, &pids, &plan.marker);
    }
    // Leave no stopped node behind whatever happened (the launcher kills its nodes; this is
    // for a launcher that did not).
    for pid in pids.iter().flatten() {
        let _ = signal_ours(*pid, &plan.marker, Signal::SIGKILL);
    }
    for p in pumps {
        let _ = p.join();
    }
    let lines = lines.lock().map(|l| l.clone()).unwrap_or_default();
    Ok(judge(
        plan,
        t0,
        &lines,
        injected,
        ended,
        status,
        hung,
        not_injected,
    ))
}

/// SIGTERM to the launcher (it ends its nodes), then SIGKILL to it and to every node left.
fn end_hung(child: &mut Child, pids: &[Option<i32>], marker: &str) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    for pid in pids.iter().flatten() {
        let _ = signal_ours(*pid, marker, Signal::SIGCONT);
        let _ = signal_ours(*pid, marker, Signal::SIGKILL);
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[allow(clippy::too_many_arguments)]
fn judge(
    plan: &TrialPlan,
    t0: Instant,
    lines: &[(Instant, String)],
    injected: Option<Instant>,
    ended: Instant,
    status: Option<std::process::ExitStatus>,
    hung: bool,
    not_injected: String,
) -> TrialRecord {
    let exit = status.map(|s| {
        use std::os::unix::process::ExitStatusExt;
        s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
    });
    let suspects: Vec<u16> = std::iter::once(plan.victim).chain(plan.other).collect();
    let naming = lines
        .iter()
        .find(|(_, l)| suspects.iter().any(|&n| names(l, n)));
    let first_failure = lines
        .iter()
        .filter(|(t, _)| injected.is_none_or(|i| *t >= i))
        .find(|(_, l)| is_failure_line(l));
    let detect = first_failure.map(|(t, _)| *t).or(injected);
    let mut rec = TrialRecord {
        kind: plan.kind,
        app: plan.app.clone(),
        outcome: Outcome::Otherwise,
        exit,
        victim: plan.victim,
        other: plan.other,
        delay_ms: ms(plan.delay),
        inject_to_end_ms: injected.map(|i| ms(ended.saturating_duration_since(i))),
        detect_to_end_ms: detect.map(|d| ms(ended.saturating_duration_since(d))),
        note: String::new(),
        job_ms: ms(ended.saturating_duration_since(t0)),
        clean_run: exit == Some(0) && injected.is_none() && !hung,
    };
    // A cut during the run always fails the job (finalize needs every pair); exit 0 means the
    // nodes' networks were cut only after they had said goodbye (each node counts the moment
    // from its own start, after the launcher's).
    let cut_after_end = plan.kind == Kind::Partition;
    rec.outcome = if hung {
        rec.note = format!(
            "still running {} s after the fault: ended by the harness",
            plan.bound.as_secs()
        );
        Outcome::Hang
    } else if !not_injected.is_empty() || (exit == Some(0) && cut_after_end) {
        rec.note = if not_injected.is_empty() {
            "the job ended before the cut".into()
        } else {
            not_injected
        };
        rec.inject_to_end_ms = None;
        rec.detect_to_end_ms = None;
        Outcome::FinishedFirst
    } else if exit == Some(0) && plan.kind != Kind::Partition {
        // A node killed or stopped mid-run cannot exit 0 (the launcher reports the signal, or
        // the node is stopped); this one had finished and was exiting (a large address space
        // takes a while to tear down) when the signal came.
        rec.note = if injected.is_some() {
            "the node was already exiting (the job exited 0)".into()
        } else {
            "the job ended before the fault's moment".into()
        };
        rec.inject_to_end_ms = None;
        rec.detect_to_end_ms = None;
        Outcome::FinishedFirst
    } else if naming.is_none() {
        let tail: Vec<&str> = lines
            .iter()
            .rev()
            .take(3)
            .map(|(_, l)| l.as_str())
            .collect();
        rec.note = format!("no line names node(s) {suspects:?}; last lines: {tail:?}");
        Outcome::Otherwise
    } else if detect.is_some_and(|d| ended.saturating_duration_since(d) > plan.end_limit) {
        rec.note = format!(
            "ended {} ms after detection (limit {} ms)",
            rec.detect_to_end_ms.unwrap_or(0.0),
            plan.end_limit.as_millis()
        );
        Outcome::Otherwise
    } else {
        rec.note = naming.map(|(_, l)| l.clone()).unwrap_or_default();
        Outcome::Correct
    };
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_name_their_node() {
        let lost = "[2] squall: node 2: lost contact with node 5 (no message or heartbeat over tcp for 500 ms); ending the job";
        assert!(names(lost, 5));
        assert!(!names(lost, 2));
        assert!(is_failure_line(lost));
        let launcher = "squall: node 3 (pid 811) was killed by signal SIGKILL; terminating the other 7 node(s)";
        assert!(names(launcher, 3));
        assert!(!names(launcher, 1));
        assert!(!names("node 13 (pid 9) was killed", 1));
        assert!(!is_failure_line("[0] RESULT app=sor verified=1"));
    }
}

//! What the benches that build and run C programs against the installed library share
//! (`bench kernels`, `bench omp`): the library's pkg-config flags, and a Squall job of which
//! node 0's tagged result lines are kept (the tail of everything else shown on failure).
//! Owns those two steps; must not parse or judge the result lines.
use squall_launch::{run_job, JobSpec, LineSink, Stream};
use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// `pkg-config --cflags --libs PKG` (under `prefix` if given).
pub fn pkg_config(pkg: &str, prefix: Option<&Path>) -> Result<Vec<String>, String> {
    let mut pc = Command::new("pkg-config");
    pc.args(["--cflags", "--libs", pkg]);
    if let Some(p) = prefix {
        let mut path = p.join("lib/pkgconfig").into_os_string();
        if let Some(old) = std::env::var_os("PKG_CONFIG_PATH") {
            path.push(":");
            path.push(old);
        }
        pc.env("PKG_CONFIG_PATH", path);
    }
    let out = pc
        .output()
        .map_err(|e| format!("cannot run pkg-config: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pkg-config does not find {pkg} ({}): install the C library with \
             crates/capi/install.sh PREFIX and pass --prefix PREFIX",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// Lines of the other output a failed run shows.
const TAIL: usize = 30;

/// Keeps rank 0's lines starting with `tag`, and the last [`TAIL`] other lines (shown if the
/// run fails; the statistics table every node prints is not wanted otherwise).
struct Capture {
    tag: &'static str,
    results: Mutex<String>,
    other: Mutex<VecDeque<String>>,
}

impl LineSink for Capture {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if stream == Stream::Stdout && rank == 0 && text.starts_with(self.tag) {
            if let Ok(mut s) = self.results.lock() {
                s.push_str(&text);
                s.push('\n');
            }
            return;
        }
        if let Ok(mut o) = self.other.lock() {
            if o.len() == TAIL {
                o.pop_front();
            }
            o.push_back(format!("[{rank}] {text}"));
        }
    }
}

/// Why a tagged job gave no result lines.
pub enum JobError {
    /// The job could not be started: "`who`: why".
    Launch(String),
    /// The job failed or timed out: "`who` failed: why", and the last other lines it printed.
    Failed { why: String, tail: Vec<String> },
}

/// Run `spec` and return node 0's stdout lines starting with `tag` (each ending in '\n').
pub fn run_tagged(spec: &JobSpec, tag: &'static str, who: &str) -> Result<String, JobError> {
    let capture = Arc::new(Capture {
        tag,
        results: Mutex::default(),
        other: Mutex::default(),
    });
    let sink: Arc<dyn LineSink> = capture.clone();
    let report = run_job(spec, sink).map_err(|e| JobError::Launch(format!("{who}: {e}")))?;
    if !report.success() {
        let tail = capture
            .other
            .lock()
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default();
        let why = if report.timed_out {
            format!(
                "timed out after {} s",
                spec.timeout.map_or(0, |t| t.as_secs())
            )
        } else {
            format!("exit status {}", report.exit_code())
        };
        return Err(JobError::Failed {
            why: format!("{who} failed: {why}"),
            tail,
        });
    }
    Ok(capture
        .results
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default())
}

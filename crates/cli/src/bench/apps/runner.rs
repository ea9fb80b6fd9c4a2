//! Running app binaries: where they are (`apps/bin/<app>_<mode>`), checking they are built
//! (this harness builds nothing), and one timed run of a `_seq`, `_native` or `_squall`
//! program through `squall_launch` (so every run gets the launcher's timeout and
//! process-group cleanup). Owns process runs and output capture; must not compute reports.
use super::error::AppsError;
use super::result_line::ResultLine;
use squall_core::env;
use squall_launch::{run_job, JobSpec, LineSink, Stream};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many trailing stderr lines of a failed run are shown.
const STDERR_TAIL: usize = 20;

/// The three builds of every app, and its versions in other sharing styles.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Sequential reference (`-DAPP_SEQ`).
    Seq,
    /// Native pthreads.
    Native,
    /// Linked with Squall's pthreads layer, run on N nodes (style `pages`).
    Squall,
    /// `<app>/<app>_crl.c`: an SPMD program over CRL regions, one process per node.
    Crl,
    /// `<app>/<app>_splitc.c`: an SPMD program over Split-C global pointers.
    Splitc,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Seq => "seq",
            Mode::Native => "native",
            Mode::Squall => "squall",
            Mode::Crl => "crl",
            Mode::Splitc => "splitc",
        }
    }

    /// The mode that runs `style` (`pages`, `crl`, `splitc`) on Squall.
    pub fn of_style(style: &str) -> Option<Mode> {
        match style {
            "pages" => Some(Mode::Squall),
            "crl" => Some(Mode::Crl),
            "splitc" => Some(Mode::Splitc),
            _ => None,
        }
    }

    /// The sharing style of a Squall mode (`None` for seq and native).
    pub fn style(self) -> Option<&'static str> {
        match self {
            Mode::Squall => Some("pages"),
            Mode::Crl => Some("crl"),
            Mode::Splitc => Some("splitc"),
            Mode::Seq | Mode::Native => None,
        }
    }

    /// Runs as a Squall job (statistics, the protocol).
    pub fn on_squall(self) -> bool {
        self.style().is_some()
    }

    /// The command that builds this mode's binaries.
    fn build_hint(self) -> &'static str {
        match self {
            Mode::Seq | Mode::Native => "make -C apps",
            Mode::Squall | Mode::Crl | Mode::Splitc => "make -C apps SQUALL=1` (it links the squall-capi library: build it first with `cargo build --release -p squall-capi",
        }
    }
}

/// The folder holding the app binaries.
#[derive(Debug, Clone)]
pub struct BinDir(pub PathBuf);

impl BinDir {
    /// `explicit`, else `$SQUALL_APPS_BIN`, else `apps/bin` under the current directory or
    /// under an ancestor of this executable (so `target/release/squall` finds the repo's).
    pub fn locate(explicit: Option<PathBuf>) -> BinDir {
        if let Some(p) = explicit {
            return BinDir(p);
        }
        if let Some(p) = std::env::var_os("SQUALL_APPS_BIN") {
            return BinDir(PathBuf::from(p));
        }
        let local = PathBuf::from("apps/bin");
        if local.is_dir() {
            return BinDir(local);
        }
        if let Ok(exe) = std::env::current_exe() {
            for dir in exe.ancestors().skip(1) {
                let candidate = dir.join("apps/bin");
                if candidate.is_dir() {
                    return BinDir(candidate);
                }
            }
        }
        BinDir(local)
    }

    pub fn binary(&self, app: &str, mode: Mode) -> PathBuf {
        self.0.join(format!("{app}_{}", mode.name()))
    }

    /// Every app with a `_seq` binary, sorted.
    pub fn discover(&self) -> Result<Vec<String>, AppsError> {
        let entries = std::fs::read_dir(&self.0).map_err(|_| AppsError::NoApps {
            dir: self.0.clone(),
        })?;
        let mut apps: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix("_seq"))
                    .map(str::to_string)
            })
            .collect();
        apps.sort();
        if apps.is_empty() {
            return Err(AppsError::NoApps {
                dir: self.0.clone(),
            });
        }
        Ok(apps)
    }

    /// Fail, naming the first missing binary and the make command that builds it.
    pub fn check(&self, apps: &[String], modes: &[Mode]) -> Result<(), AppsError> {
        for app in apps {
            for &mode in modes {
                let path = self.binary(app, mode);
                if !path.is_file() {
                    return Err(AppsError::MissingBinary {
                        path,
                        hint: mode.build_hint().to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// One run to make.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub app: String,
    pub mode: Mode,
    /// Node processes (1 for seq and native).
    pub nodes: usize,
    /// Application threads (`-t`); seq runs get none.
    pub threads: usize,
    /// Coherence unit in pages of a Squall run (`SQUALL_UNIT_PAGES`; 1: not set).
    pub unit_pages: u32,
    pub size: String,
    pub transport: String,
    pub protocol: String,
    /// Where a Squall run writes its statistics JSON.
    pub stats_file: Option<PathBuf>,
    pub timeout: Duration,
}

/// What one run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The RESULT line, if the run printed a well-formed one.
    pub result: Option<ResultLine>,
    /// The job exited 0 (every node).
    pub exited_ok: bool,
    /// Why the run does not count, if it does not.
    pub problem: Option<String>,
    /// The last lines the run printed on stderr (for diagnosing failures).
    pub stderr_tail: Vec<String>,
}

impl RunOutcome {
    /// Printed verified=1, exited 0, and nothing else went wrong.
    pub fn verified(&self) -> bool {
        self.exited_ok && self.problem.is_none() && self.result.as_ref().is_some_and(|r| r.verified)
    }

    pub fn time_s(&self) -> Option<f64> {
        self.result.as_ref().map(|r| r.time_s)
    }
}

/// Keeps RESULT lines (stdout of any rank) and the tail of everything else.
#[derive(Default)]
struct Capture {
    results: Mutex<Vec<(u16, String)>>,
    other: Mutex<VecDeque<String>>,
}

impl LineSink for Capture {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        let text = String::from_utf8_lossy(line).into_owned();
        if stream == Stream::Stdout && ResultLine::is_result(&text) {
            if let Ok(mut r) = self.results.lock() {
                r.push((rank, text));
            }
            return;
        }
        if let Ok(mut o) = self.other.lock() {
            if o.len() == STDERR_TAIL {
                o.pop_front();
            }
            o.push_back(format!("[{rank}] {text}"));
        }
    }
}

impl RunSpec {
    /// The program's arguments: `-t T -s SIZE` (no `-t` for the sequential build and the
    /// SPMD styles, whose threads are the nodes).
    pub fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if matches!(self.mode, Mode::Native | Mode::Squall) {
            a.push("-t".to_string());
            a.push(self.threads.to_string());
        }
        a.push("-s".to_string());
        a.push(self.size.clone());
        a
    }

    /// The launcher job for this run.
    pub fn job(&self, bins: &BinDir) -> JobSpec {
        let program = bins.binary(&self.app, self.mode);
        let mut spec = JobSpec::local(
            self.nodes,
            program.to_string_lossy().into_owned(),
            self.args(),
        );
        spec.timeout = Some(self.timeout);
        spec.transport = self.transport.clone();
        if self.mode.on_squall() {
            spec.stats = true;
            // `hlrc+updates`: hlrc with push updates for every allocation.
            let (protocol, updates) = match self.protocol.strip_suffix("+updates") {
                Some(p) => (p, true),
                None => (self.protocol.as_str(), false),
            };
            spec.extra_env
                .push((env::PROTOCOL.to_string(), protocol.to_string()));
            if updates {
                spec.extra_env
                    .push((env::PUSH_UPDATES.to_string(), "1".to_string()));
            }
            if self.unit_pages > 1 {
                spec.extra_env
                    .push((env::UNIT_PAGES.to_string(), self.unit_pages.to_string()));
            }
            if let Some(f) = &self.stats_file {
                spec.extra_env.push((
                    env::STATS_FILE.to_string(),
                    f.to_string_lossy().into_owned(),
                ));
            }
        }
        spec
    }

    /// Run once. A run that cannot even start is an error; one that fails, times out or
    /// prints no (or a bad) RESULT line is an outcome with a `problem`.
    pub fn run(&self, bins: &BinDir) -> Result<RunOutcome, AppsError> {
        let spec = self.job(bins);
        if let Some(f) = &self.stats_file {
            // A stale file from an earlier run must not pass for this run's statistics.
            let _ = std::fs::remove_file(f);
        }
        let capture = Arc::new(Capture::default());
        let sink: Arc<dyn LineSink> = capture.clone();
        let report = run_job(&spec, sink).map_err(|e| AppsError::Launch {
            app: self.app.clone(),
            mode: self.mode.name().to_string(),
            nodes: self.nodes,
            why: e.to_string(),
        })?;
        let stderr_tail: Vec<String> = capture
            .other
            .lock()
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default();
        let mut lines = capture
            .results
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        lines.sort_by_key(|(rank, _)| *rank);
        let mut problem = None;
        let exited_ok = report.success();
        if !exited_ok {
            problem = Some(if report.timed_out {
                format!("timed out after {} s", self.timeout.as_secs())
            } else {
                match report.nodes.iter().find(|n| !n.exit.success()) {
                    Some(n) => format!("node {} {}", n.rank, n.exit.describe()),
                    None => format!("exit status {}", report.exit_code()),
                }
            });
        }
        let result = match lines.first() {
            Some((_, line)) => match ResultLine::parse(line) {
                Ok(r) => Some(r),
                Err(e) => {
                    problem.get_or_insert(e.to_string());
                    None
                }
            },
            None => {
                problem.get_or_insert("printed no RESULT line".to_string());
                None
            }
        };
        if lines.len() > 1 {
            problem.get_or_insert(format!("printed {} RESULT lines", lines.len()));
        }
        if let Some(r) = &result {
            if !r.verified {
                problem.get_or_insert(format!("verified=0 ({})", r.note));
            }
        }
        Ok(RunOutcome {
            result,
            exited_ok,
            problem,
            stderr_tail,
        })
    }
}

/// `path` made absolute against the current directory (for environment variables handed
/// to node processes).
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: Mode) -> RunSpec {
        RunSpec {
            app: "sor".into(),
            mode,
            nodes: 2,
            threads: 4,
            unit_pages: 1,
            size: "tiny".into(),
            transport: "udp".into(),
            protocol: "sc".into(),
            stats_file: Some(PathBuf::from("/tmp/x.json")),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn squall_jobs_ask_for_statistics_and_the_protocol() {
        let bins = BinDir(PathBuf::from("/b"));
        let job = spec(Mode::Squall).job(&bins);
        assert_eq!(job.program, "/b/sor_squall");
        assert_eq!(job.args, ["-t", "4", "-s", "tiny"]);
        assert!(job.stats);
        assert_eq!(job.transport, "udp");
        assert!(job
            .extra_env
            .contains(&(env::PROTOCOL.to_string(), "sc".to_string())));
        assert!(job
            .extra_env
            .contains(&(env::STATS_FILE.to_string(), "/tmp/x.json".to_string())));
        assert!(!job.extra_env.iter().any(|(k, _)| k == env::PUSH_UPDATES));
        // The update variant: hlrc with push updates.
        let mut upd = spec(Mode::Squall);
        upd.protocol = "hlrc+updates".into();
        let job = upd.job(&bins);
        assert!(job
            .extra_env
            .contains(&(env::PROTOCOL.to_string(), "hlrc".to_string())));
        assert!(job
            .extra_env
            .contains(&(env::PUSH_UPDATES.to_string(), "1".to_string())));
        let seq = spec(Mode::Seq).job(&bins);
        assert_eq!(seq.args, ["-s", "tiny"]);
        assert!(!seq.stats);
    }

    #[test]
    fn missing_binaries_name_the_make_command() {
        let bins = BinDir(std::env::temp_dir().join("squall-no-such-bin-dir"));
        let e = bins
            .check(&["sor".to_string()], &[Mode::Squall])
            .expect_err("missing");
        let text = e.to_string();
        assert!(text.contains("sor_squall not found"), "{text}");
        assert!(text.contains("make -C apps SQUALL=1"), "{text}");
        assert!(matches!(bins.discover(), Err(AppsError::NoApps { .. })));
    }
}

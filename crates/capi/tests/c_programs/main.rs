//! Multi-process tests of the C API, the C++ wrappers, the pthreads layer and the SPLASH-2
//! macros: the library is installed with `install.sh` into a temporary prefix, the C/C++
//! programs of `c-tests/` are compiled against the *installed* headers with
//! `cc ... $(pkg-config --cflags --libs squall[-pthread])`, and every program runs as a job of
//! 2 and 4 node processes started by the launcher library (`squall_launch::run_job`).
//!
//! This file owns the harness (the install, the builds, the job runners, the case list and
//! `main`); the cases live in the `cases_*` modules, one area each, and touch nothing here.
//!
//! Run: `cargo test -p squall-capi --test c_programs` (add `-- NAME` to run only the cases
//! whose label contains NAME). Needs cc, c++, pkg-config, m4 and cmake (see .ci/setup.sh).
mod cases_api;
mod cases_apps;
mod cases_atomics;
mod cases_cmake;
mod cases_crl;
mod cases_globals;
mod cases_gptr;
mod cases_models;
mod cases_objects;
mod cases_openmp;
mod cases_policy;
mod cases_profile;
mod cases_pthreads;
mod cases_splash;
mod cases_styles;

use squall_launch::{run_job, JobInput, JobReport, JobSpec, LineSink, Stream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Collects what the nodes print (and forwards it, prefixed, for the test log).
#[derive(Default)]
struct Capture {
    lines: Mutex<Vec<(u16, Stream, String)>>,
}

impl LineSink for Capture {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        let text = String::from_utf8_lossy(line).into_owned();
        if let Ok(mut l) = self.lines.lock() {
            l.push((rank, stream, text));
        }
    }
}

impl Capture {
    fn stdout_of(&self, rank: u16) -> Vec<String> {
        self.lines
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|(r, s, _)| *r == rank && *s == Stream::Stdout)
                    .map(|(_, _, t)| t.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
    /// The first line a node printed on stderr that reads as Squall's or the program's
    /// complaint (an abort's reason, a lost peer, a WRONG answer), as `[rank] text`.
    fn first_complaint(&self) -> Option<String> {
        let l = self.lines.lock().ok()?;
        l.iter()
            .find(|(_, s, t)| {
                *s == Stream::Stderr
                    && ["squall", "WRONG", "error", "panicked"]
                        .iter()
                        .any(|w| t.contains(w))
            })
            .map(|(r, _, t)| format!("[{r}] {t}"))
    }
    fn dump(&self) {
        if let Ok(l) = self.lines.lock() {
            for (r, s, t) in l.iter() {
                let tag = if *s == Stream::Stdout { "" } else { "!" };
                eprintln!("    [{r}{tag}] {t}");
            }
        }
    }
}

struct Env {
    prefix: PathBuf,
    bin: PathBuf,
    src: PathBuf,
}

fn sh(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Env {
    /// Install the library (found beside this test's binary) into a fresh prefix.
    fn setup() -> Result<Env, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        // target/<profile>/deps/c_programs-HASH -> target/<profile>
        let libdir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("cannot find the target directory")?
            .to_path_buf();
        // Cargo does not rebuild the cdylib for an integration test: build it (same profile,
        // same target directory) so the installed library is the current one.
        let target_dir = libdir.parent().ok_or("cannot find the target directory")?;
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "-p", "squall-capi", "--lib"])
            .env("CARGO_TARGET_DIR", target_dir);
        if libdir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        sh(&mut build, "cargo build -p squall-capi --lib")?;
        if !libdir.join("libsquall.so").exists() {
            return Err(format!(
                "{}/libsquall.so is missing after the build",
                libdir.display()
            ));
        }
        let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let root = std::env::temp_dir().join(format!("squall-capi-test-{}", std::process::id()));
        let prefix = root.join("prefix");
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
        sh(
            Command::new("sh")
                .arg(crate_dir.join("install.sh"))
                .arg(&prefix)
                .arg(&libdir),
            "install.sh",
        )?;
        Ok(Env {
            prefix,
            bin,
            src: crate_dir.join("c-tests"),
        })
    }

    fn pkg_config(&self, args: &[&str]) -> Result<Vec<String>, String> {
        let out = sh(
            Command::new("pkg-config")
                .args(args)
                .env("PKG_CONFIG_PATH", self.prefix.join("lib/pkgconfig")),
            &format!("pkg-config {}", args.join(" ")),
        )?;
        Ok(out.split_whitespace().map(str::to_string).collect())
    }

    /// Compile `src` (in c-tests/ or an absolute path) with `compiler` against the installed
    /// package `pkg` (None: plain native pthreads build).
    fn build(
        &self,
        compiler: &str,
        src: &Path,
        out: &str,
        pkg: Option<&str>,
    ) -> Result<PathBuf, String> {
        let exe = self.bin.join(out);
        if exe.exists() {
            return Ok(exe); // built by an earlier case
        }
        let mut cmd = Command::new(compiler);
        cmd.args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(src);
        match pkg {
            Some(p) => {
                cmd.args(self.pkg_config(&["--cflags", "--libs", p])?);
            }
            None => {
                cmd.arg("-pthread");
            }
        }
        cmd.arg("-lm");
        sh(&mut cmd, &format!("compiling {}", src.display()))?;
        Ok(exe)
    }

    /// `build` of the c-tests/ file `file`.
    fn build_test(
        &self,
        compiler: &str,
        file: &str,
        out: &str,
        pkg: Option<&str>,
    ) -> Result<PathBuf, String> {
        self.build(compiler, &self.src.join(file), out, pkg)
    }
}

/// The job description every runner starts from: `exe args` on `nodes` local processes.
fn job_spec(exe: &Path, args: &[&str], nodes: usize, timeout: Duration) -> JobSpec {
    let mut spec = JobSpec::local(
        nodes,
        exe.display().to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    );
    spec.timeout = Some(timeout);
    spec
}

/// The heap every answer-checking job runs with.
fn with_test_heap(mut spec: JobSpec) -> JobSpec {
    spec.extra_env
        .push(("SQUALL_HEAP_SIZE".into(), "4G".into()));
    spec
}

/// Run `exe args` as a job of `nodes` processes; the job must succeed and rank 0 must print
/// `expect` (a line containing it).
fn job(exe: &Path, args: &[&str], nodes: usize, expect: &str) -> Result<(), String> {
    job_output_env(exe, args, nodes, expect, &[]).map(|_| ())
}

/// `job`, returning what rank 0 printed on stdout.
fn job_output(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    expect: &str,
) -> Result<Vec<String>, String> {
    job_output_env(exe, args, nodes, expect, &[])
}

/// `job_output` with extra environment variables for every node.
fn job_output_env(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    expect: &str,
    vars: &[(&str, &str)],
) -> Result<Vec<String>, String> {
    job_output_timeout(exe, args, nodes, expect, vars, Duration::from_secs(90))
}

/// `job_output_env` with a chosen job timeout (the seed applications at `small` need more
/// than the API tests on a loaded 2-core CI machine).
fn job_output_timeout(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    expect: &str,
    vars: &[(&str, &str)],
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut spec = with_test_heap(job_spec(exe, args, nodes, timeout));
    for (k, v) in vars {
        spec.extra_env.push((k.to_string(), v.to_string()));
    }
    let mut cap = Arc::new(Capture::default());
    let mut report: JobReport = run_job(&spec, cap.clone()).map_err(|e| format!("launch: {e}"))?;
    let mut out = cap.stdout_of(0);
    // A node reporting rank 0 lost (exit 3, "closed without goodbye") after rank 0 printed a
    // verified answer was a real shutdown race (the endpoint could stop before sending its
    // goodbyes; fixed). Should it ever come back, run the job once more and say so loudly,
    // so it shows in the CI log without hiding a wrong answer.
    if !report.success() && report.exit_code() == 3 && out.iter().any(|l| l.contains(expect)) {
        eprintln!(
            "  WARNING: {} on {nodes} nodes verified but ended with a lost peer at shutdown; \
             running it again (shutdown race: investigate)",
            exe.display()
        );
        cap.dump();
        cap = Arc::new(Capture::default());
        report = run_job(&spec, cap.clone()).map_err(|e| format!("launch: {e}"))?;
        out = cap.stdout_of(0);
    }
    let ok = report.success() && out.iter().any(|l| l.contains(expect));
    if !ok {
        cap.dump();
        let why = cap
            .first_complaint()
            .map_or_else(String::new, |c| format!(", first complaint {c:?}"));
        // Exit code and complaint first: the CI summary keeps the first 300 characters.
        return Err(format!(
            "exit {}{why}, rank 0 printed {:?} (expected a line with {expect:?}); job {} {} on {nodes} nodes",
            report.exit_code(),
            out,
            exe.display(),
            args.join(" "),
        ));
    }
    Ok(out)
}

/// Run `exe args` as a job that must fail, rank 0 printing a line on stderr that contains
/// every one of `needles` (a refusal message), and rank 0 printing nothing with "WRONG".
fn job_refused(exe: &Path, args: &[&str], nodes: usize, needles: &[&str]) -> Result<(), String> {
    let spec = job_spec(exe, args, nodes, Duration::from_secs(60));
    let cap = Arc::new(Capture::default());
    let report = run_job(&spec, cap.clone()).map_err(|e| format!("launch: {e}"))?;
    let lines = cap.lines.lock().map(|l| l.clone()).unwrap_or_default();
    let refused = lines
        .iter()
        .any(|(r, s, t)| *r == 0 && *s == Stream::Stderr && needles.iter().all(|n| t.contains(n)));
    let wrong = lines.iter().any(|(_, _, t)| t.contains("WRONG"));
    if report.success() || !refused || wrong {
        cap.dump();
        return Err(format!(
            "job {} {}: exit {}, expected a refusal containing {needles:?} on rank 0's stderr",
            exe.display(),
            args.join(" "),
            report.exit_code()
        ));
    }
    Ok(())
}

/// Run `exe args` as a job that must fail on every node: a non-zero status, every rank printing
/// a line on stderr that contains every one of `needles`, nobody printing "WRONG", and the
/// whole job (start-up included) over within `within`.
fn job_fails_everywhere(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    needles: &[&str],
    within: Duration,
) -> Result<(), String> {
    let spec = job_spec(exe, args, nodes, Duration::from_secs(60));
    let cap = Arc::new(Capture::default());
    let t = Instant::now();
    let report = run_job(&spec, cap.clone()).map_err(|e| format!("launch: {e}"))?;
    let took = t.elapsed();
    let lines = cap.lines.lock().map(|l| l.clone()).unwrap_or_default();
    let silent: Vec<u16> = (0..nodes as u16)
        .filter(|rank| {
            !lines.iter().any(|(r, s, t)| {
                r == rank && *s == Stream::Stderr && needles.iter().all(|n| t.contains(n))
            })
        })
        .collect();
    let wrong = lines.iter().any(|(_, _, t)| t.contains("WRONG"));
    if report.success() || report.timed_out || !silent.is_empty() || wrong || took > within {
        cap.dump();
        return Err(format!(
            "job {} {} on {nodes} nodes: exit {} after {took:?} (bound {within:?}); nodes {silent:?} \
             printed no line with {needles:?}",
            exe.display(),
            args.join(" "),
            report.exit_code()
        ));
    }
    Ok(())
}

/// Run `exe args` as a job of `nodes` processes with `input` as rank 0's stdin; the job must
/// succeed and rank 0 must print exactly the line `expect`.
fn job_with_input(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    expect: &str,
    input: &[u8],
    vars: &[(&str, &str)],
) -> Result<(), String> {
    let mut spec = job_spec(exe, args, nodes, Duration::from_secs(120));
    spec.input = JobInput::Bytes(input.into());
    let mut spec = with_test_heap(spec);
    for (k, v) in vars {
        spec.extra_env.push((k.to_string(), v.to_string()));
    }
    let cap = Arc::new(Capture::default());
    let report = run_job(&spec, cap.clone()).map_err(|e| format!("launch: {e}"))?;
    let out = cap.stdout_of(0);
    if report.success() && out.iter().any(|l| l == expect) {
        return Ok(());
    }
    cap.dump();
    Err(format!(
        "job {} on {nodes} nodes: exit {}, rank 0 printed {out:?} (expected {expect:?})",
        exe.display(),
        report.exit_code()
    ))
}

/// Run `exe args` as a plain process (no launcher variables); returns its stdout.
fn plain(exe: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("SQUALL_") {
            cmd.env_remove(k);
        }
    }
    sh(&mut cmd, &format!("{} {}", exe.display(), args.join(" ")))
}

/// `plain`, which must print `expect` (somewhere in its stdout); `what` names the run in the
/// error.
fn plain_expect(exe: &Path, args: &[&str], expect: &str, what: &str) -> Result<(), String> {
    let out = plain(exe, args)?;
    if out.contains(expect) {
        Ok(())
    } else {
        Err(format!("{what} printed {out:?}"))
    }
}

/// Run `exe args` as a plain process with `input` on its stdin; returns its stdout.
fn plain_with_input(exe: &Path, args: &[&str], input: &[u8]) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: cannot run: {e}", exe.display()))?;
    let mut w = child.stdin.take().ok_or("no stdin pipe")?;
    let data = input.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&data));
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Build the native (`-pthread`) binary `name` of `src` and run it with `args` (and `input` on
/// its stdin, if any): its answer, the first line starting with `prefix` (what the Squall run
/// must print), and all it printed.
fn native_answer(
    env: &Env,
    compiler: &str,
    src: &Path,
    name: &str,
    args: &[&str],
    input: Option<&[u8]>,
    prefix: &str,
) -> Result<(String, String), String> {
    let native = env.build(compiler, src, name, None)?;
    let out = match input {
        Some(bytes) => plain_with_input(&native, args, bytes)?,
        None => plain(&native, args)?,
    };
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_string)
        .ok_or_else(|| format!("the native run of {name} printed no {prefix:?} line: {out:?}"))?;
    Ok((line, out))
}

/// One source built twice from c-tests/: natively as `native` and with squall-pthread as
/// `squall`.
#[derive(Clone, Copy)]
struct Twin<'a> {
    compiler: &'a str,
    file: &'a str,
    native: &'a str,
    squall: &'a str,
}

/// Run `twin`'s native build with `args`, take its line starting with `prefix`, then run its
/// Squall build with the same `args` as a job of `nodes` (with `vars`), which must print that
/// line. Returns the native run's stdout and rank 0's.
fn native_then_squall(
    env: &Env,
    twin: &Twin,
    args: &[&str],
    prefix: &str,
    nodes: usize,
    vars: &[(&str, &str)],
) -> Result<(String, Vec<String>), String> {
    let src = env.src.join(twin.file);
    let (want, native_out) =
        native_answer(env, twin.compiler, &src, twin.native, args, None, prefix)?;
    let exe = env.build(twin.compiler, &src, twin.squall, Some("squall-pthread"))?;
    let got = job_output_env(&exe, args, nodes, &want, vars)?;
    Ok((native_out, got))
}

/// Print (indented, for the test log) the lines of `out` starting with `prefix`.
fn print_lines<S: AsRef<str>>(out: &[S], prefix: &str) {
    for l in out.iter().map(AsRef::as_ref) {
        if l.starts_with(prefix) {
            println!("    {l}");
        }
    }
}

type Case = Box<dyn Fn(&Env) -> Result<(), String>>;

/// The labelled cases, in the order they run.
#[derive(Default)]
struct Cases(Vec<(String, Case)>);

impl Cases {
    /// One case.
    fn add(
        &mut self,
        label: impl Into<String>,
        case: impl Fn(&Env) -> Result<(), String> + 'static,
    ) {
        self.0.push((label.into(), Box::new(case)));
    }

    /// `at_2_and_4` twice: faults served as configured (`NAME/N nodes`), and by the faulting
    /// thread (`NAME/signal-faults/N nodes`, `SQUALL_FAULTS=signal`); `case` gets the extra
    /// environment.
    fn with_signal_faults<F>(&mut self, name: &str, case: F)
    where
        F: Fn(&Env, usize, &[(&str, &str)]) -> Result<(), String> + Clone + 'static,
    {
        let plain = case.clone();
        self.at_2_and_4(name, move |env: &Env, nodes| plain(env, nodes, &[]));
        self.at_2_and_4(&format!("{name}/signal-faults"), move |env: &Env, nodes| {
            case(env, nodes, &[("SQUALL_FAULTS", "signal")])
        });
    }

    /// A case per node count 2 and 4, labelled `NAME/N nodes`.
    fn at_2_and_4<F>(&mut self, name: &str, case: F)
    where
        F: Fn(&Env, usize) -> Result<(), String> + Clone + 'static,
    {
        for nodes in [2usize, 4] {
            let case = case.clone();
            self.add(format!("{name}/{nodes} nodes"), move |env: &Env| {
                case(env, nodes)
            });
        }
    }
}

fn cases() -> Vec<(String, Case)> {
    let mut v = Cases::default();
    cases_api::add(&mut v);
    cases_policy::add(&mut v);
    cases_cmake::add(&mut v);
    cases_pthreads::add(&mut v);
    cases_atomics::add(&mut v);
    cases_crl::add(&mut v);
    cases_globals::add(&mut v);
    cases_splash::add(&mut v);
    cases_apps::add(&mut v);
    cases_styles::add(&mut v);
    cases_openmp::add(&mut v);
    cases_objects::add(&mut v);
    cases_gptr::add(&mut v);
    cases_models::add(&mut v);
    cases_profile::add(&mut v);
    v.0
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let env = match Env::setup() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("c_programs: setup failed: {e}");
            std::process::exit(1);
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (label, case) in cases() {
        if filter.as_ref().is_some_and(|f| !label.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        let r = case(&env);
        println!(
            "test {label} ... {} ({:.2}s)",
            if r.is_ok() { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        match r {
            Ok(()) => passed += 1,
            Err(e) => {
                // "Error: " first: .ci/run's summary (the only part of a CI log that may be
                // seen) keeps lines starting so, and the case's reason (which run: protocol,
                // transport, node count; exit code; what rank 0 printed) is what tells a
                // wrong answer from an abort or a hang.
                eprintln!("Error: {label}: {e}");
                failed += 1
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if let Some(root) = env.bin.parent() {
        let _ = std::fs::remove_dir_all(root);
    }
    std::process::exit(i32::from(failed > 0));
}

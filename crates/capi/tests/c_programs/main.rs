//! Multi-process tests of the C API, the C++ wrappers, the pthreads layer and the SPLASH-2
//! macros: the library is installed with `install.sh` into a temporary prefix, the C/C++
//! programs of `c-tests/` are compiled against the *installed* headers with
//! `cc ... $(pkg-config --cflags --libs squall[-pthread])`, and every program runs as a job of
//! 2 and 4 node processes started by the launcher library (`squall_launch::run_job`).
//!
//! Run: `cargo test -p squall-capi --test c_programs` (add `-- NAME` to run only the cases
//! whose label contains NAME). Needs cc, c++, pkg-config and m4 (see .ci/setup.sh).
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
    let mut spec = JobSpec::local(
        nodes,
        exe.display().to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    );
    spec.timeout = Some(timeout);
    spec.extra_env
        .push(("SQUALL_HEAP_SIZE".into(), "4G".into()));
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
        return Err(format!(
            "job {} {} on {nodes} nodes: exit {}, rank 0 printed {:?} (expected a line with {expect:?})",
            exe.display(),
            args.join(" "),
            report.exit_code(),
            out
        ));
    }
    Ok(out)
}

/// Run `exe args` as a job that must fail, rank 0 printing a line on stderr that contains
/// every one of `needles` (a refusal message), and rank 0 printing nothing with "WRONG".
fn job_refused(exe: &Path, args: &[&str], nodes: usize, needles: &[&str]) -> Result<(), String> {
    let mut spec = JobSpec::local(
        nodes,
        exe.display().to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    );
    spec.timeout = Some(Duration::from_secs(60));
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

/// The line starting with "ok WHAT" in a native run's output (what the Squall run must print).
fn ok_line(out: &str, what: &str) -> Result<String, String> {
    out.lines()
        .find(|l| l.starts_with(&format!("ok {what}")))
        .map(str::to_string)
        .ok_or_else(|| format!("the native run printed no \"ok {what}\" line: {out:?}"))
}

type Case = Box<dyn Fn(&Env) -> Result<(), String>>;

fn cases() -> Vec<(String, Case)> {
    let mut v: Vec<(String, Case)> = Vec::new();
    // The C API, SPMD style, several native threads per node.
    for scenario in [
        "locks", "barrier", "condvar", "flags", "atomics", "threads", "misuse",
    ] {
        for nodes in [2usize, 4] {
            v.push((
                format!("c_api/{scenario}/{nodes} nodes"),
                Box::new(move |env: &Env| {
                    let exe = env.build(
                        "cc",
                        &env.src.join("api_test.c"),
                        "api_test",
                        Some("squall"),
                    )?;
                    job(&exe, &[scenario, "3"], nodes, &format!("ok {scenario}"))
                }),
            ));
        }
    }
    v.push((
        "c_api/before-init".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("api_test.c"),
                "api_test",
                Some("squall"),
            )?;
            let out = plain(&exe, &["before-init"])?;
            if out.contains("ok before-init") {
                Ok(())
            } else {
                Err(format!("before-init printed {out:?}"))
            }
        }),
    ));
    // The C++ wrappers, single system image: threads on every node.
    for nodes in [2usize, 4] {
        v.push((
            format!("cxx/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "c++",
                    &env.src.join("cxx_test.cpp"),
                    "cxx_test",
                    Some("squall"),
                )?;
                job(&exe, &["3"], nodes, "ok cxx")
            }),
        ));
    }
    // A plain pthreads program: native build and Squall build from the same source.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/primes/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let src = env.src.join("primes.c");
                let native = env.build("cc", &src, "primes_native", None)?;
                let want = plain(&native, &["200000", "6"])?;
                let want = want
                    .lines()
                    .find(|l| l.starts_with("primes"))
                    .unwrap_or("?")
                    .to_string();
                let exe = env.build("cc", &src, "primes_squall", Some("squall-pthread"))?;
                job(&exe, &["200000", &(3 * nodes).to_string()], nodes, &want)
            }),
        ));
    }
    // Runs of re-acquires of the same mutexes (the node-local lock cache), mixed with mutexes
    // moving between nodes: native and Squall builds of one source give the same bins.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/mutex_runs/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let src = env.src.join("mutex_runs.c");
                let native = env.build("cc", &src, "mutex_runs_native", None)?;
                let out = plain(&native, &["200000", "4"])?;
                let want = out
                    .lines()
                    .find(|l| l.starts_with("bins"))
                    .unwrap_or("?")
                    .to_string();
                let exe = env.build("cc", &src, "mutex_runs_squall", Some("squall-pthread"))?;
                let got = job_output(&exe, &["200000", "4"], nodes, &want)?;
                for l in out.lines().chain(got.iter().map(String::as_str)) {
                    if l.starts_with("lock+unlock") {
                        println!("    {l}");
                    }
                }
                Ok(())
            }),
        ));
    }
    v.push((
        "pthreads/primes/no launcher".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("primes.c"),
                "primes_squall",
                Some("squall-pthread"),
            )?;
            let out = plain(&exe, &["50000", "3"])?;
            if out.contains("primes below 50000: 5133") {
                Ok(())
            } else {
                Err(format!("one-node run printed {out:?}"))
            }
        }),
    ));
    v.push((
        "pthreads/c++/2 nodes".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "c++",
                &env.src.join("cxx_pthread.cpp"),
                "cxx_pthread",
                Some("squall-pthread"),
            )?;
            job(&exe, &["6"], 2, "ok cxx pthread")
        }),
    ));
    v.push((
        "pthreads/misuse".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("pthread_misuse.c"),
                "pthread_misuse",
                Some("squall-pthread"),
            )?;
            job(&exe, &[], 2, "ok pthread misuse")
        }),
    ));
    // Atomics across nodes (issue 20 item 3): C11 <stdatomic.h> functions, __atomic / __sync
    // builtins, _Atomic operator forms and C++ std::atomic in a plain pthreads program, under
    // both protocols; each answer is checked against the same program built natively.
    for (scenario, args) in [
        ("counter", &["counter", "4", "40"][..]),
        ("operators", &["operators", "4", "40"][..]),
        ("message", &["message", "8"][..]),
    ] {
        for nodes in [2usize, 4] {
            for proto in ["hlrc", "sc"] {
                v.push((
                    format!("pthreads/atomics/{scenario}/{nodes} nodes/{proto}"),
                    Box::new(move |env: &Env| {
                        let src = env.src.join("atomics.c");
                        let native = env.build("cc", &src, "atomics_native", None)?;
                        let want = ok_line(&plain(&native, args)?, scenario)?;
                        let exe = env.build("cc", &src, "atomics", Some("squall-pthread"))?;
                        job_output_env(&exe, args, nodes, &want, &[("SQUALL_PROTOCOL", proto)])
                            .map(|_| ())
                    }),
                ));
            }
        }
    }
    for nodes in [2usize, 4] {
        for proto in ["hlrc", "sc"] {
            v.push((
                format!("pthreads/atomics/c++/{nodes} nodes/{proto}"),
                Box::new(move |env: &Env| {
                    let src = env.src.join("cxx_atomic.cpp");
                    let args = ["4", "30"];
                    let native = env.build("c++", &src, "cxx_atomic_native", None)?;
                    let want = ok_line(&plain(&native, &args)?, "cxx atomic")?;
                    let exe = env.build("c++", &src, "cxx_atomic", Some("squall-pthread"))?;
                    job_output_env(&exe, &args, nodes, &want, &[("SQUALL_PROTOCOL", proto)])
                        .map(|_| ())
                }),
            ));
        }
    }
    // What cannot be made correct is refused with a message naming the operation and address.
    v.push((
        "pthreads/atomics/refused/2 nodes".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("atomics.c"),
                "atomics",
                Some("squall-pthread"),
            )?;
            job_refused(
                &exe,
                &["wide"],
                2,
                &[
                    "atomic load on the 16-byte object at 0x",
                    "1, 2, 4 or 8 bytes",
                ],
            )
        }),
    ));
    // The cost of an atomic from its home node and from the others (printed).
    v.push((
        "pthreads/atomics/cost/2 nodes".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("atomics.c"),
                "atomics",
                Some("squall-pthread"),
            )?;
            let out = job_output(&exe, &["cost", "300"], 2, "ok cost")?;
            for l in out.iter().filter(|l| l.starts_with("cost ")) {
                println!("    {l}");
            }
            Ok(())
        }),
    ));
    // pthreads completeness (issue 20 item 7): each program checks its own answer; P = 4
    // threads, so threads cross nodes; the same source also runs on native pthreads.
    for (name, expect) in [
        ("pt_recursive", "ok recursive"),
        ("pt_rwlock", "ok rwlock"),
        ("pt_once", "ok once"),
        ("pt_keys", "ok keys"),
        ("pt_sem", "ok sem"),
        ("pt_timedwait", "ok timedwait"),
    ] {
        for nodes in [2usize, 4] {
            v.push((
                format!("pthreads/{name}/{nodes} nodes"),
                Box::new(move |env: &Env| {
                    let src = env.src.join(format!("{name}.c"));
                    let exe = env.build("cc", &src, name, Some("squall-pthread"))?;
                    for line in job_output(&exe, &["4"], nodes, expect)? {
                        println!("    {line}");
                    }
                    Ok(())
                }),
            ));
        }
        v.push((
            format!("pthreads/{name}/native"),
            Box::new(move |env: &Env| {
                let src = env.src.join(format!("{name}.c"));
                let exe = env.build("cc", &src, &format!("{name}_native"), None)?;
                let out = plain(&exe, &["4"])?;
                if out.contains(expect) {
                    Ok(())
                } else {
                    Err(format!("{name} on native pthreads printed {out:?}"))
                }
            }),
        ));
    }
    // SQUALL_GLOBAL variables: coherent, node 0 their home; the section holds only them.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/globals/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "cc",
                    &env.src.join("globals.c"),
                    "globals",
                    Some("squall-pthread"),
                )?;
                shared_sections_hold(
                    &exe,
                    &[
                        "base_value",
                        "message",
                        "nthreads",
                        "ran_on",
                        "self_pointer",
                        "slots",
                        "st",
                    ],
                )?;
                node_local_is_outside(&exe, "node_mark")?;
                job(&exe, &[&(2 * nodes).to_string()], nodes, "ok globals")
            }),
        ));
    }
    // Thread placement (issue 20 item 6): main plus P-1 pthread_create'd threads, each
    // reporting its node; the default spreads P/N (+-1) per node, counting main as node 0's.
    let placement = |nodes: usize, p: usize, mode: &'static str, how: &'static str| {
        Box::new(move |env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("placement.c"),
                "placement",
                Some("squall-pthread"),
            )?;
            // Per-node counts by the documented rule: main on node 0, created thread k on
            // (k+1) mod N (even), k mod N (round-robin), 0 (local, created by node 0).
            let mut count = vec![0usize; nodes];
            count[0] += 1;
            for k in 0..p - 1 {
                count[match mode {
                    "even" => (k + 1) % nodes,
                    "round-robin" => k % nodes,
                    _ => 0,
                }] += 1;
            }
            let counts: Vec<String> = count.iter().map(usize::to_string).collect();
            let want = format!("placement {mode} P={p} N={nodes}: {} ok", counts.join(" "));
            let p_arg = p.to_string();
            let (args, vars): (Vec<&str>, Vec<(&str, &str)>) = match how {
                "default" => (vec![&p_arg], vec![]),
                "env" => (
                    vec![&p_arg, mode, how],
                    vec![("SQUALL_THREAD_PLACEMENT", mode)],
                ),
                _ => (vec![&p_arg, mode, how], vec![]),
            };
            job_output_env(&exe, &args, nodes, &want, &vars).map(|_| ())
        }) as Case
    };
    for nodes in [2usize, 4] {
        for p in [4usize, 6] {
            v.push((
                format!("pthreads/placement/even P={p}/{nodes} nodes"),
                placement(nodes, p, "even", "default"),
            ));
        }
    }
    v.push((
        "pthreads/placement/round-robin by env/4 nodes".into(),
        placement(4, 4, "round-robin", "env"),
    ));
    v.push((
        "pthreads/placement/local by api/2 nodes".into(),
        placement(2, 4, "local", "api"),
    ));
    v.push((
        "pthreads/placement/even by api/4 nodes".into(),
        placement(4, 6, "even", "api"),
    ));
    // stdin reaches rank 0, where main runs (issue 20 item 5): a pthreads program reads 3 MB
    // from stdin and checksums it with threads on every node; the native build of the same
    // source gives the answer line.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/stdin/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let src = env.src.join("stdin_sum.c");
                let input: Vec<u8> = (0..3_000_000u32)
                    .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                    .collect();
                let native = env.build("cc", &src, "stdin_sum_native", None)?;
                let want = plain_with_input(&native, &["8"], &input)?;
                let want = want
                    .lines()
                    .find(|l| l.starts_with("stdin: ok"))
                    .ok_or_else(|| format!("native stdin_sum printed {want:?}"))?
                    .to_string();
                let exe = env.build("cc", &src, "stdin_sum", Some("squall-pthread"))?;
                job_with_input(&exe, &[&(2 * nodes).to_string()], nodes, &want, &input)
            }),
        ));
    }
    // Every global shared with no marking (SPLASH-2 style), while the C library's per-node
    // state (stdout, errno, getopt, __thread) keeps working on every node.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/plain globals/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "cc",
                    &env.src.join("plain_globals.c"),
                    "plain_globals",
                    Some("squall-pthread"),
                )?;
                shared_sections_hold(
                    &exe,
                    &["Global", "N", "P", "table", "zeros", "counter", "next_id"],
                )?;
                job(
                    &exe,
                    &["-p", &(2 * nodes).to_string(), "-n", "200000"],
                    nodes,
                    "ok plain globals",
                )
            }),
        ));
    }
    // Arguments on main's stack, results on the workers' stacks, pthread_exit, pthread_self.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/stack args/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "cc",
                    &env.src.join("stack_args.c"),
                    "stack_args",
                    Some("squall-pthread"),
                )?;
                // The program counts on the round-robin rule to put its last thread on node 0.
                job_output_env(
                    &exe,
                    &[&(2 * nodes).to_string()],
                    nodes,
                    "ok stack args",
                    &[("SQUALL_THREAD_PLACEMENT", "round-robin")],
                )
                .map(|_| ())
            }),
        ));
    }
    // The same in C++, `int main()` without arguments (main through -Wl,--wrap=main).
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/c++ stack args/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "c++",
                    &env.src.join("stack_args_cxx.cpp"),
                    "stack_args_cxx",
                    Some("squall-pthread"),
                )?;
                job(&exe, &[], nodes, "ok c++ stack args")
            }),
        ));
    }
    // A 256 MiB zero-initialised global: no file space, no memory until touched.
    for nodes in [2usize, 4] {
        v.push((
            format!("pthreads/zero init/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let exe = env.build(
                    "cc",
                    &env.src.join("zero_init.c"),
                    "zero_init",
                    Some("squall-pthread"),
                )?;
                let size = std::fs::metadata(&exe).map_err(|e| e.to_string())?.len();
                if size > 1 << 20 {
                    return Err(format!(
                        "{} is {size} bytes: the zero-initialised array takes file space",
                        exe.display()
                    ));
                }
                let out = job_output(&exe, &[&(2 * nodes).to_string()], nodes, "ok zero init")?;
                println!("  executable {size} bytes; {}", out.join(" "));
                Ok(())
            }),
        ));
    }
    // A program in SPLASH-2 macro style, expanded with c.m4.squall.
    for nodes in [2usize, 4] {
        v.push((
            format!("splash/sor/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let c = m4(env, "sor.C")?;
                let exe = env.build("cc", &c, "sor_splash", Some("squall-pthread"))?;
                job(&exe, &["-p", &(2 * nodes).to_string()], nodes, "sor: ok")
            }),
        ));
    }
    // The Splash-3 fence macros across nodes: plain data handed back and forth behind a
    // Squall atomic flag, read after an acquire fence (without the fences' DSM release and
    // acquire the reader sees its stale cached copy).
    for nodes in [1usize, 2, 4] {
        v.push((
            format!("splash3/fences/{nodes} nodes"),
            Box::new(move |env: &Env| {
                let c = m4(env, "fence.C")?;
                let exe = env.build("cc", &c, "fence_splash", Some("squall-pthread"))?;
                let other = if nodes == 1 { 0 } else { 1 };
                job(
                    &exe,
                    &["20", "4096"],
                    nodes,
                    &format!("fence: ok rounds=20 words=4096 node={other}"),
                )
            }),
        ));
    }
    // SPLASH-style programs (issue 20 "Done when"), written as SPLASH-2 code is: the global
    // structure pointer and the sizes in plain globals set by main, input from stdin,
    // CREATE(fn, P), locks, condition variables and pauses in G_MALLOC'd structures, AGETL,
    // ROI marks, workers that G_MALLOC. Each checks itself against a sequential run and must
    // print the same answer line as its native pthreads build (c-tests/c.m4.native), at P = 4
    // on every node count of `splash_nodes()`.
    for (prog, input) in splash_programs() {
        let nodes = splash_nodes();
        let label = nodes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        v.push((
            format!("splash3/{prog}/{label} nodes"),
            Box::new(move |env: &Env| {
                let src = format!("{prog}.C");
                let native_c = m4_with(env, &src, &env.src.join("c.m4.native"), "native")?;
                let native = env.build("cc", &native_c, &format!("{prog}_native"), None)?;
                let want = plain_with_input(&native, &["-p", "4"], input.as_bytes())?;
                let want = want
                    .lines()
                    .find(|l| l.starts_with(&format!("{prog}: ok")))
                    .ok_or_else(|| format!("native {prog} did not verify: {want:?}"))?
                    .to_string();
                let c = m4(env, &src)?;
                let exe = env.build("cc", &c, &format!("{prog}_splash"), Some("squall-pthread"))?;
                for &n in &nodes {
                    let t = Instant::now();
                    job_with_input(&exe, &["-p", "4"], n, &want, input.as_bytes())
                        .map_err(|e| format!("{n} node(s): {e}"))?;
                    println!(
                        "    {prog} P=4 on {n} node(s): {want} ({:.2}s)",
                        t.elapsed().as_secs_f64()
                    );
                }
                Ok(())
            }),
        ));
    }
    // The basic-cost table (CableS section 3.2) through the C API; the numbers are printed.
    v.push((
        "basic_costs/2 nodes".into(),
        Box::new(|env: &Env| {
            let exe = env.build(
                "cc",
                &env.src.join("basic_costs.c"),
                "basic_costs",
                Some("squall"),
            )?;
            let out = job_output(&exe, &["20"], 2, "ok basic costs")?;
            for l in out.iter().filter(|l| l.starts_with("cost ")) {
                println!("    {l}");
            }
            Ok(())
        }),
    ));
    // Every seed application of apps/, built from its unchanged source with the pthreads
    // layer (what `make -C apps SQUALL=1` does) against the installed headers, checks its own
    // answer at size `small` (issue 6; SQUALL_TEST_APPS_SIZE=tiny|small|medium overrides) on
    // 1, 2 and 4 nodes (2 threads per node) under hlrc; tsp (racy bound) and barnes (tree
    // built under locks) also under sc.
    let apps_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../apps");
    let mut apps: Vec<String> = std::fs::read_dir(&apps_dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| apps_dir.join(n).join(format!("{n}.c")).is_file())
                .collect()
        })
        .unwrap_or_default();
    apps.sort();
    for app in apps {
        let protocols: &[&str] = if app == "tsp" || app == "barnes" {
            &["hlrc", "sc"]
        } else {
            &["hlrc"]
        };
        let app_dir = apps_dir.clone();
        v.push((
            format!("apps/{app}/1,2,4 nodes/{}", protocols.join("+")),
            Box::new(move |env: &Env| {
                let exe = env.bin.join(format!("{app}_squall"));
                let mut cmd = Command::new("cc");
                cmd.args([
                    "-std=gnu11",
                    "-O2",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pthread",
                    "-DAPP_SQUALL",
                ])
                .arg("-I")
                .arg(app_dir.join("common"))
                .arg("-I")
                .arg(app_dir.join(&app))
                .arg("-o")
                .arg(&exe)
                .arg(app_dir.join(&app).join(format!("{app}.c")))
                .args(env.pkg_config(&["--cflags", "--libs", "squall-pthread"])?)
                .arg("-lm");
                sh(&mut cmd, &format!("compiling apps/{app}"))?;
                let size = apps_size();
                for proto in protocols {
                    for nodes in [1usize, 2, 4] {
                        let threads = (2 * nodes).to_string();
                        let t = Instant::now();
                        let out = job_output_timeout(
                            &exe,
                            &["-t", &threads, "-s", &size],
                            nodes,
                            "verified=1",
                            &[("SQUALL_PROTOCOL", proto)],
                            Duration::from_secs(480),
                        )
                        .map_err(|e| format!("{proto}, {nodes} node(s), size {size}: {e}"))?;
                        let phase = out
                            .iter()
                            .find_map(|l| l.split_whitespace().find(|w| w.starts_with("time_s=")))
                            .unwrap_or("time_s=?")
                            .to_string();
                        println!(
                            "    {app} {size} {proto} {nodes} node(s) x 2 threads: verified, {phase}, job {:.2}s",
                            t.elapsed().as_secs_f64()
                        );
                    }
                }
                Ok(())
            }),
        ));
    }
    v
}

/// The size the seed applications run at: `small` (1-3 s sequential), or what
/// SQUALL_TEST_APPS_SIZE says (tiny for a quick local run, medium by hand).
fn apps_size() -> String {
    match std::env::var("SQUALL_TEST_APPS_SIZE") {
        Ok(s) if ["tiny", "small", "medium", "large"].contains(&s.as_str()) => s,
        _ => "small".to_string(),
    }
}

/// The shared sections of `exe` (`squall_data`, `squall_bss`, made by squall-pthread.ld) start
/// and end on page boundaries, hold every one of `shared` and none of the C library's variables
/// the linker copies into the executable (`stdout`, `stderr`, `optarg`, `optind`), and the
/// zero-initialised one takes no file space (checked with `nm` and `readelf`).
fn shared_sections_hold(exe: &Path, shared: &[&str]) -> Result<(), String> {
    let out = sh(
        Command::new("nm").args(["-n", "--defined-only"]).arg(exe),
        "nm (install binutils)",
    )?;
    let syms: Vec<(u64, String)> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let addr = u64::from_str_radix(it.next()?, 16).ok()?;
            let _kind = it.next()?;
            let name = it.next()?;
            Some((addr, name.split('@').next().unwrap_or(name).to_string()))
        })
        .collect();
    let find = |name: &str| {
        syms.iter()
            .find(|(_, n)| n == name)
            .map(|(a, _)| *a)
            .ok_or_else(|| format!("{name} not in {}", exe.display()))
    };
    let mut ranges = Vec::new();
    for sec in ["squall_data", "squall_bss"] {
        let (start, stop) = (
            find(&format!("__start_{sec}"))?,
            find(&format!("__stop_{sec}"))?,
        );
        if start % 4096 != 0 || stop % 4096 != 0 || stop < start {
            return Err(format!("{sec} is {start:#x}..{stop:#x}: not whole pages"));
        }
        ranges.push((start, stop));
    }
    let inside = |a: u64| ranges.iter().any(|&(lo, hi)| a >= lo && a < hi);
    for name in shared {
        let a = find(name)?;
        if !inside(a) {
            return Err(format!(
                "{name} ({a:#x}) is outside the shared sections {ranges:x?}"
            ));
        }
    }
    for name in ["stdout", "stderr", "optarg", "optind"] {
        if let Some((a, _)) = syms.iter().find(|(_, n)| n == name) {
            if inside(*a) {
                return Err(format!(
                    "the C library's {name} ({a:#x}) is in the shared sections {ranges:x?}"
                ));
            }
        }
    }
    let sections = sh(
        Command::new("readelf").args(["-SW"]).arg(exe),
        "readelf (install binutils)",
    )?;
    let bss = sections
        .lines()
        .find(|l| l.contains(" squall_bss "))
        .ok_or_else(|| format!("no squall_bss section in {}", exe.display()))?;
    if !bss.contains("NOBITS") {
        return Err(format!("squall_bss takes file space: {bss}"));
    }
    Ok(())
}

/// `name` (a SQUALL_NODE_LOCAL variable) lies in the section squall_node_local, outside the
/// shared sections.
fn node_local_is_outside(exe: &Path, name: &str) -> Result<(), String> {
    let syms = sh(
        Command::new("objdump").args(["-t"]).arg(exe),
        "objdump (install binutils)",
    )?;
    let line = syms
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .ok_or_else(|| format!("{name} not in {}", exe.display()))?;
    if !line.contains("squall_node_local") {
        return Err(format!("{name} is not in squall_node_local: {line}"));
    }
    Ok(())
}

/// Node counts the SPLASH-style programs run at: 1, 2 and 4; `SQUALL_TEST_SPLASH_NODES=1,2,4`
/// overrides.
fn splash_nodes() -> Vec<usize> {
    if let Ok(v) = std::env::var("SQUALL_TEST_SPLASH_NODES") {
        let nodes: Vec<usize> = v.split(',').filter_map(|n| n.trim().parse().ok()).collect();
        if !nodes.is_empty() {
            return nodes;
        }
    }
    vec![1, 2, 4]
}

/// The SPLASH-style programs of c-tests/ and the stdin each reads (generated here, the same
/// for the native and the Squall runs).
fn splash_programs() -> Vec<(&'static str, String)> {
    let mut x: u64 = 0x5eed_1234_abcd_0001;
    let mut next = move |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let mut taskq = String::from("40 2000\n");
    for _ in 0..40 {
        let lo = next(200_000);
        taskq.push_str(&format!("{lo} {}\n", lo + 100 + next(20_000)));
    }
    // About 1.4 MB of numbers: more than a pipe holds, read by rank 0 alone.
    let n = 200_000;
    let mut histo = format!("{n} 61\n");
    for _ in 0..n {
        histo.push_str(&format!("{}\n", next(1_000_000)));
    }
    vec![
        ("radix", "200000 7\n".to_string()),
        ("taskq", taskq),
        ("jacobi", "64 600 2e-3\n".to_string()),
        ("histo", histo),
        ("nbody", "128 5 11\n".to_string()),
        ("pipeline", "300 17\n".to_string()),
    ]
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

/// Run `exe args` as a job of `nodes` processes with `input` as rank 0's stdin; the job must
/// succeed and rank 0 must print exactly the line `expect`.
fn job_with_input(
    exe: &Path,
    args: &[&str],
    nodes: usize,
    expect: &str,
    input: &[u8],
) -> Result<(), String> {
    let mut spec = JobSpec::local(
        nodes,
        exe.display().to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    );
    spec.timeout = Some(Duration::from_secs(120));
    spec.input = JobInput::Bytes(input.into());
    spec.extra_env
        .push(("SQUALL_HEAP_SIZE".into(), "4G".into()));
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

/// Expand an m4-style SPLASH source with the macro file `macros`; `tag` names the output.
fn m4_with(env: &Env, name: &str, macros: &Path, tag: &str) -> Result<PathBuf, String> {
    let out = sh(
        Command::new("m4").arg(macros).arg(env.src.join(name)),
        "m4 (install it: apt-get install m4)",
    )?;
    let c = env.bin.join(name.replace(".C", &format!("_{tag}.c")));
    std::fs::write(&c, out).map_err(|e| e.to_string())?;
    Ok(c)
}

/// Expand an m4-style SPLASH-2 source with the installed c.m4.squall.
fn m4(env: &Env, name: &str) -> Result<PathBuf, String> {
    let macros = env.prefix.join("share/squall/c.m4.squall");
    let out = sh(
        Command::new("m4").arg(&macros).arg(env.src.join(name)),
        "m4 (install it: apt-get install m4)",
    )?;
    let c = env.bin.join(name.replace(".C", ".c"));
    std::fs::write(&c, out).map_err(|e| e.to_string())?;
    Ok(c)
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
                eprintln!("  {e}");
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

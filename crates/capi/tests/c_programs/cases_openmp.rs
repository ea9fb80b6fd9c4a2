//! Cases for the OpenMP runtime (issue 24): programs compiled with plain `gcc -fopenmp`, once
//! against the system's libgomp (run natively) and once with `pkg-config squall-openmp` (run
//! as a Squall job); every "ok" line of the native run must appear in the Squall run's output,
//! and each program checks its own answers against a sequential computation.
use super::{job_output_env, print_lines, sh, Cases, Env};
use std::path::PathBuf;
use std::process::Command;

/// Threads of every team in these cases (native and Squall alike).
const THREADS: &str = "4";

/// Build `c-tests/openmp/FILE` with `gcc -fopenmp`, with Squall's runtime or the system's.
fn build(env: &Env, file: &str, squall: bool) -> Result<PathBuf, String> {
    let stem = file.trim_end_matches(".c");
    let exe = env.bin.join(format!(
        "omp_{stem}_{}",
        if squall { "squall" } else { "native" }
    ));
    if exe.exists() {
        return Ok(exe);
    }
    let src = env.src.join("openmp").join(file);
    let mut cmd = Command::new("gcc");
    cmd.args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-o"])
        .arg(&exe)
        .arg(&src);
    if squall {
        cmd.args(env.pkg_config(&["--cflags", "--libs", "squall-openmp"])?);
    }
    cmd.arg("-lm");
    sh(&mut cmd, &format!("gcc -fopenmp {}", src.display()))?;
    Ok(exe)
}

/// The "ok" lines of the native (libgomp) run of `file` with `args`.
fn native_ok_lines(
    env: &Env,
    file: &str,
    args: &[&str],
    threads: &str,
) -> Result<Vec<String>, String> {
    let exe = build(env, file, false)?;
    let mut cmd = Command::new(&exe);
    cmd.args(args).env("OMP_NUM_THREADS", threads);
    let out = sh(
        &mut cmd,
        &format!("native {} {}", exe.display(), args.join(" ")),
    )?;
    let lines: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("ok "))
        .map(str::to_string)
        .collect();
    if lines.is_empty() || out.contains("WRONG") {
        return Err(format!("the native run of {file} {args:?} printed {out:?}"));
    }
    Ok(lines)
}

/// Run `file args` natively and as a Squall job of `nodes`; rank 0 must print every "ok"
/// line the native run printed.
fn same_as_libgomp(env: &Env, file: &str, args: &[&str], nodes: usize) -> Result<(), String> {
    same_as_libgomp_with(env, file, args, nodes, THREADS)
}

/// [`same_as_libgomp`] with `threads` threads in every team (native and Squall alike).
fn same_as_libgomp_with(
    env: &Env,
    file: &str,
    args: &[&str],
    nodes: usize,
    threads: &str,
) -> Result<(), String> {
    let want = native_ok_lines(env, file, args, threads)?;
    let exe = build(env, file, true)?;
    let vars = [("OMP_NUM_THREADS", threads)];
    let got = job_output_env(&exe, args, nodes, &want[0], &vars)?;
    for line in &want {
        if !got.iter().any(|g| g == line) {
            return Err(format!(
                "{file} {args:?} on {nodes} nodes: rank 0 printed {got:?}, missing libgomp's {line:?}"
            ));
        }
    }
    if got.iter().any(|g| g.contains("WRONG")) {
        return Err(format!("{file} {args:?} on {nodes} nodes printed {got:?}"));
    }
    Ok(())
}

pub fn add(v: &mut Cases) {
    // The program uses Squall's GOMP_* / omp_* definitions: libgomp is not even linked.
    v.add("openmp/links squall's runtime, not libgomp", |env: &Env| {
        let exe = build(env, "constructs.c", true)?;
        let dynamic = sh(Command::new("readelf").arg("-d").arg(&exe), "readelf -d")?;
        let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
        if needed.iter().any(|l| l.contains("libgomp"))
            || !needed.iter().any(|l| l.contains("libsquall"))
        {
            return Err(format!("{} needs {needed:?}", exe.display()));
        }
        let syms = sh(Command::new("nm").arg("-D").arg(&exe), "nm -D")?;
        for s in ["GOMP_parallel", "GOMP_barrier", "omp_get_thread_num"] {
            if !syms
                .lines()
                .any(|l| l.trim_start().starts_with('U') && l.ends_with(s))
            {
                return Err(format!(
                    "{} does not import {s} (from libsquall): {syms}",
                    exe.display()
                ));
            }
        }
        Ok(())
    });
    for group in [
        "parallel", "loops", "sync", "single", "tasks", "api", "nested", "pthread",
    ] {
        v.at_2_and_4(
            &format!("openmp/constructs/{group}"),
            move |env: &Env, nodes| same_as_libgomp(env, "constructs.c", &[group], nodes),
        );
    }
    // Deferred tasks (run by whichever team thread takes them), depend, doacross loops,
    // reduction(task, ...) on parallel and worksharing constructs.
    for group in ["tasks", "depend", "doacross", "reductions"] {
        v.at_2_and_4(
            &format!("openmp/tasking/{group}"),
            move |env: &Env, nodes| same_as_libgomp(env, "tasking.c", &[group], nodes),
        );
    }
    // All of them in one job with 8 threads: several threads per node share the task list.
    v.at_2_and_4("openmp/tasking/all/8 threads", |env: &Env, nodes| {
        same_as_libgomp_with(env, "tasking.c", &["all"], nodes, "8")
    });
    // Every group in one job: teams, slots and locks reused region after region.
    v.at_2_and_4("openmp/constructs/all", |env: &Env, nodes| {
        same_as_libgomp(env, "constructs.c", &["all"], nodes)
    });
    // 8 threads: 4 (2 nodes) or 2 (4 nodes) per node, so team barriers gather several threads
    // per node before the node's one arrival, and dynamic chunks are dealt from blocks a node
    // takes for its threads.
    v.at_2_and_4("openmp/constructs/all/8 threads", |env: &Env, nodes| {
        same_as_libgomp_with(env, "constructs.c", &["all"], nodes, "8")
    });
    v.at_2_and_4("openmp/apps/irregular/8 threads", |env: &Env, nodes| {
        same_as_libgomp_with(env, "apps.c", &["irregular"], nodes, "8")
    });
    // What a region, a barrier, a dynamic chunk and a critical section cost (printed).
    v.at_2_and_4("openmp/costs", |env: &Env, nodes| {
        let exe = build(env, "costs.c", true)?;
        let vars = [("OMP_NUM_THREADS", THREADS)];
        let out = job_output_env(&exe, &["50"], nodes, "ok costs", &vars)?;
        print_lines(&out, "cost ");
        Ok(())
    });
    for app in [
        "stencil",
        "reduce",
        "irregular",
        "histo",
        "tasksort",
        "spmv",
        "matmul",
        "nbody",
    ] {
        for nodes in [1usize, 2, 4] {
            v.add(
                format!("openmp/apps/{app}/{nodes} nodes"),
                move |env: &Env| same_as_libgomp(env, "apps.c", &[app], nodes),
            );
        }
    }
    // Where team threads run: the documented rule of each OMP_PROC_BIND value.
    for (bind, threads) in [("spread", 4u32), ("spread", 2), ("close", 2), ("master", 3)] {
        v.at_2_and_4(&format!("openmp/places/{bind}/{threads} threads"), move |env: &Env, nodes| {
            let exe = build(env, "places.c", true)?;
            let t = threads.to_string();
            let vars = [("OMP_PROC_BIND", bind)];
            let out = job_output_env(&exe, &[&t], nodes, "ok places", &vars)?;
            let n = nodes as u32;
            let want: Vec<String> = (0..threads)
                .map(|t| match bind {
                    "master" => 0,
                    "close" if threads < n => t,
                    _ => t * n / threads,
                })
                .map(|p| p.to_string())
                .collect();
            let want = format!("places {}", want.join(" "));
            if out.contains(&want) {
                Ok(())
            } else {
                Err(format!("OMP_PROC_BIND={bind}, {threads} threads on {nodes} nodes: {out:?}, expected {want:?}"))
            }
        });
    }
}
